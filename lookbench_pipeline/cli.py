"""The ``lookbench`` command line.

Consumers (the base install, ``pip install lookbench-pipeline``):

    lookbench releases [--store URL] [--config F]
                                           list published versions
    lookbench info VERSION|latest|DIR [--json] [--store URL]
                                           a release's manifest summary (a version in a store, or a pulled folder)
    lookbench pull VERSION|latest [--subset S ...] [--dest DIR] [--look-bench] [--store URL]
                                           download a release, verifying every file's sha256; resumes
    lookbench evaluate DIR | --release VERSION|latest [--model ID ...] [--embeddings F ...] [--ids F] [--name N]
                       [--subset S ...] [--cutoff YYYY-MM-DD|model] [--report DIR] [--benchmark-json F]
                       [--output F] [--no-legacy] [--quiet] [--store URL] [--config F]
                                           score retrieval models, or your own embeddings, on a release
    --store URL: a folder, s3://bucket/prefix (with --endpoint-url URL and --anon for a public bucket), or an
    http(s):// mirror. Exit codes: 0 success; 1 an error (evaluate: nothing scored, or a named model not scored);
    2 a configuration or usage error.

Builders (the ``build`` extra):

    lookbench demo                         build a release from the embedded demo shop and print its scores
    lookbench build [--config F] [--partition YYYY-MM-DD]
                                           run the release job (Dagster, in process) for a release window
    lookbench backfill --partition YYYY-MM-DD [--config F]
                                           rebuild a window from the crawl archive (WARC) alone, no network
    lookbench audit export VERSION --out DIR [--per-stratum N] [--seed S] [--config F]
                                           a stratified sample of a release's labels for human review
    lookbench audit score FILE.csv [--json]
                                           estimated label precision (Wilson 95% intervals) from the verdicts
    lookbench detector train --annotations F --images DIR --out DIR [...]
                                           train a YOLO garment detector from COCO-style annotations (offline)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import textwrap
from datetime import date
from pathlib import Path

from .config import ConfigError, load_config

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
"""Exit codes: 0 success; 1 an error, or (``evaluate``) nothing scored or a named model not scored; 2 a
configuration or usage error (a bad option value, a missing install extra, an invalid configuration)."""


class UsageError(ValueError):
    """A command line that cannot be run as given (exit code 2)."""


BUILD_MODULES = {"dagster": "dagster", "scrapy": "scrapy", "extruct": "extruct", "ultralytics": "ultralytics",
                 "torch": "torch"}


def need_build_stack(command: str, modules: tuple[str, ...] = tuple(BUILD_MODULES)) -> None:
    """Raise UsageError naming the extra to install when a build command runs in the consumer install (the base
    ``pip install lookbench-pipeline``: releases, info, pull, evaluate only)."""
    import importlib.util

    missing = [BUILD_MODULES.get(m, m) for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(f"`lookbench {command}` builds releases and needs the build stack, which this install "
                         f"lacks ({', '.join(missing)}): pip install 'lookbench-pipeline[build]' (in a checkout: make "
                         "demo / make test install it)")


AIGEN_REASONS = ("generation_failed:", "generation_pending", "generation_skipped:", "duplicate_of_real_image",
                 "category_disagreement", "attribute_disagreement", "similarity_below_threshold",
                 "reference_not_labelled")
"""Rejection reasons of AI-generated images (lookbench_pipeline.aigen.generated_checks); in the demo, the scripted
endpoint's deliberate faults (lookbench_pipeline.aigen_server.default_plan) produce them."""
AIGEN_STEPS = ("generated_images", "aigen_intake", "generated_checks")


BUILD_RUNNER_GROUP = "lookbench.build_runner"
"""The entry-point group through which the build commands find the layer that runs a build (pyproject.toml:
``runner = "assets.cli_runner:load"``, the Dagster release job). The library never imports that layer."""
BUILD_RUNNER_DEFAULT = "assets.cli_runner:load"
"""The entry point used when none is installed: a source checkout run from ``PYTHONPATH`` without ``pip install``
has no entry-point metadata (the same value pyproject.toml declares)."""


def _build_runner():
    """The build runner (a module with ``run_release``, ``rebuild_window`` and ``RunFailed``) that the installed
    ``lookbench.build_runner`` entry point's loader returns. Call it inside ``warnings.catch_warnings()``: the
    loader filters the runner's own framework warnings there."""
    from importlib.metadata import EntryPoint, entry_points

    found = sorted(entry_points(group=BUILD_RUNNER_GROUP), key=lambda e: e.name)
    ep = found[0] if found else EntryPoint("runner", BUILD_RUNNER_DEFAULT, BUILD_RUNNER_GROUP)
    return ep.load()()


def _run_job(runner, config_path: str | None, partition: str | None, on_event=None) -> dict:
    """Crawl every site and build the release of one window through the build runner (the Dagster layer; the
    library itself knows nothing of Dagster). Raises ``runner.RunFailed`` with the failing step's message."""
    if config_path:
        os.environ["LOOKBENCH_CONFIG"] = str(Path(config_path).resolve())
    return runner.run_release(os.environ.get("LOOKBENCH_CONFIG"), partition, on_event=on_event)


def _build_terminal(cfg, command: str, verbose: bool, run, demo: bool = False) -> int | dict:
    """Run a build (``run(runner, on_event)`` -> its summary, ``runner`` from :func:`_build_runner`) with a quiet
    terminal: a line per stage, a progress bar, each warning once, while everything printed (Dagster's console,
    library chatter, ultralytics' training output) goes to ``<data_dir>/logs/<command>-<UTC time>.log``;
    ``verbose``: everything on the terminal as it comes.
    Dagster's Beta/Preview warnings (about Dagster's own API, nothing a user can act on) are not shown. In the demo
    (``demo``) the scripted image endpoint's deliberate faults and the expected warnings are labelled as such.
    Returns the summary, or exit code 1 after printing why the run failed."""
    import warnings
    from datetime import datetime, timezone

    from .logs import BuildTerminal, output_to_file

    scripted = demo and not cfg.aigen.endpoint.base_url
    notes = {s: "with deliberate demo faults" for s in AIGEN_STEPS} if scripted else {}
    expected = {}
    if demo:
        expected = {"no image endpoint configured": "expected in the demo",
                    "no garment-trained": "expected in the demo", "No garment-trained": "expected in the demo"}
    log_path = Path(cfg.data_dir) / "logs" / f"{command}-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}.log"
    with warnings.catch_warnings():
        runner = _build_runner()  # its loader filters Dagster's Beta/Preview warnings in this context
        RunFailed = runner.RunFailed

        if verbose:
            try:
                return run(runner, None)
            except RunFailed as exc:
                print(str(exc), file=sys.stderr)
                return 1
        print(f"full log (Dagster's console, library and training output): {log_path}", flush=True)
        lib = logging.getLogger("lookbench_pipeline")
        level = lib.level
        failure = None
        with output_to_file(log_path) as (out, err):
            width = os.get_terminal_size(out.fileno()).columns if out.isatty() else 110
            term = BuildTerminal(out, err, bars=err.isatty(), width=min(width, 160), notes=notes, expected=expected)
            lib.addHandler(term)
            lib.setLevel(logging.INFO if level in (logging.NOTSET,) or level > logging.INFO else level)
            try:
                summary = run(runner, term.event)
            except RunFailed as exc:
                failure = exc
            finally:
                lib.removeHandler(term)
                lib.setLevel(level)
                term.close()
    if failure is not None:
        print(f"{failure}\nfull log: {log_path}", file=sys.stderr)
        return 1
    return summary


def _rejections(reasons: dict, deliberate: bool) -> str:
    """``rejected_by_reason`` as ``reason n, …``; with ``deliberate`` the AI-generated images' rejections apart, as
    the demo endpoint's deliberate faults."""
    text = lambda d: ", ".join(f"{k} {v}" for k, v in sorted(d.items()))  # noqa: E731
    if not deliberate:
        return text(reasons)
    gen = {k: v for k, v in reasons.items() if k.startswith(AIGEN_REASONS) or k.startswith("intake:")}
    rest = {k: v for k, v in reasons.items() if k not in gen}
    return (text(rest) + ("; " if rest and gen else "")
            + (f"generated images the checks rejected (the demo endpoint's deliberate faults: errors, non-images, "
               f"off-product pictures): {text(gen)}" if gen else ""))


def _print_build(summary: dict, store_url: str, demo: bool = False) -> None:
    """The release a build made (its files by subset, what changed, counts, detector, noise gallery, generated
    subsets) and its leaderboard, once."""
    from .evaluate import format_table

    m = summary["manifest"]
    state = "already published, unchanged" if m.get("already_published") else "published"
    print(f"\nLookBench release {m['version']} ({state}) for window {m['window']['start'][:10]} .. "
          f"{m['window']['end'][:10]}")
    print(f"  location: {store_url}/releases/{m['version']}")
    rows: dict[str, dict[str, int]] = {}
    for name, f in sorted(m["files"].items()):
        sub, _, role = name.partition("/")
        rows.setdefault(sub, {})[role.removesuffix(".parquet")] = f["rows"]
    width = max(len(s) for s in rows) if rows else 6
    print(f"  {'subset'.ljust(width)}  {'query':>7}  {'gallery':>7}")
    for sub, r in rows.items():
        print(f"  {sub.ljust(width)}  {str(r.get('query', '-')):>7}  {str(r.get('gallery', '-')):>7}")
    docs = sorted(m.get("metadata_files", {}))
    print(f"  and {len(docs)} documents ({', '.join(d for d in docs if '/' not in d)}, docs/…); every file's "
          "sha256 is in manifest.json")
    if m.get("changes"):
        ch = m["changes"]
        print(f"  changes since {ch.get('previous_version') or '(first release)'}: items added / retired per file "
              f"in CHANGES.md")
    c = m["counts"]
    print(textwrap.fill(f"candidates {c['candidates']} -> query rows {c['query_rows']}, distinct gallery images "
                        f"{c['gallery_rows_distinct']}, rejected {c['rejected']}: "
                        f"{_rejections(c['rejected_by_reason'], demo)}", width=110, initial_indent="  ",
                        subsequent_indent="    ", break_on_hyphens=False))
    for mod in m.get("models", []):
        if mod.get("role") == "detector":
            what = ("the demo detector: no garment-trained weights configured, so it was trained once on street "
                    "looks the demo shop draws (cached)" if mod.get("weights") == "demo"
                    else f"{mod['weights']}: {mod['description']}" if mod.get("description") else mod["weights"])
            print(f"  detector: {what}")
            scores = (f"mAP50 {mod['map50']:.3f}, mAP50-95 {mod['map50_95']:.3f} on {mod.get('eval_images', '?')} "
                      f"held-out images, " if "map50" in mod else "")
            print(f"            {scores}classes {mod['classes']}, weights sha256 {mod['weights_sha256'][:16]}…")
    if "street_look_items" in c:
        s = c["street_look_items"]
        print(f"  street looks: {s['items_detected']} items detected -> {s['matched']} matched to a linked product "
              f"(queries before checks), {s['unlabelled']} unlabelled; {s['linked_not_detected']} linked products "
              "not detected")
    neg = m.get("negatives") or {}
    if neg.get("enabled"):
        print(f"  noise gallery: {neg['distractors']} distractors mined with {neg['model'].get('model_id')} in "
              f"cosine band {neg['band']}, {neg['per_query']} per query item; pairs by kind {neg['pairs_by_kind']}")
    a = m.get("aigen") or {}
    if a.get("enabled"):
        gens = ", ".join(f"{g} ({n} images)" for g, n in (a.get("generators") or {}).items()) or "none accepted"
        print(f"  AI-generated subsets: {gens}; backend {a.get('backend')}"
              + (f", endpoint {a['endpoint']}" if a.get("endpoint") else ""))
    report = _report_of(summary)
    md = Path(report).with_name("leaderboard.md") if report else None
    if md is not None and md.is_file():
        print("\nEvaluation (the leaderboard, also in " + str(md) + "):\n")
        print(md.read_text(encoding="utf-8"))
    else:
        print("\nEvaluation (percent):")
        print(format_table(summary["scores"]))
    if report:
        print(f"HTML report: {report}")


def _report_of(summary: dict) -> str | None:
    """The report path the evaluation asset recorded in its materialization metadata (None if absent)."""
    result = summary.get("result")
    if result is None:
        return None
    for mat in result.asset_materializations_for_node("evaluation"):
        entry = mat.metadata.get("report")
        if entry is not None:
            return str(entry.value)
    return None


def _check_build_inputs(cfg) -> None:
    """What a release run needs beyond a valid configuration, checked before any crawl: at least one site (the
    release job reads the window's weekly crawls; README.md "Configuration"), every drop's item sheet and every
    drop's annotation files. Raises ConfigError (exit 2)."""
    from .drops import item_sheet
    from .label_import import check_drop
    from .taxonomy import Taxonomy

    if not cfg.sites:
        raise ConfigError("sites is empty: at least one site is needed, because the release job reads the window's "
                          "weekly crawls (see README.md, Configuration)")
    for d in cfg.drops:
        item_sheet(d)
        if d.annotations:
            check_drop(d, Taxonomy.load(cfg.taxonomy))


def cmd_build(args: argparse.Namespace) -> int:
    need_build_stack("build")
    cfg = load_config(args.config)
    _check_build_inputs(cfg)
    if args.partition:
        from .windows import window_starting

        window_starting(args.partition)  # ValueError: release windows start on 1 January or 1 July
    demo = getattr(args, "demo", False)
    summary = _build_terminal(cfg, "demo" if demo else "build", args.verbose,
                              lambda runner, on_event: _run_job(runner, args.config, args.partition, on_event),
                              demo=demo)
    if isinstance(summary, int):
        return summary
    _print_build(summary, cfg.store_url, demo=demo and not cfg.drops)  # a drop's intake reasons are not faults
    return 0


def cmd_backfill(args: argparse.Namespace) -> int:
    """Rebuild a window from the archived crawls (the build runner's ``rebuild_window``) into this config's
    data_dir and store (which must not hold crawl state yet)."""
    need_build_stack("backfill")
    from .windows import window_starting

    window_starting(args.partition)  # ValueError: release windows start on 1 January or 1 July
    cfg = load_config(args.config)
    _check_build_inputs(cfg)
    if args.config:
        os.environ["LOOKBENCH_CONFIG"] = str(Path(args.config).resolve())
    summary = _build_terminal(cfg, "backfill", args.verbose, lambda runner, on_event: runner.rebuild_window(
        os.environ.get("LOOKBENCH_CONFIG"), args.partition, on_event=on_event))
    if isinstance(summary, int):
        return summary
    for site, keys in summary["replayed"].items():
        print(f"replayed {len(keys)} archived crawls of {site}")
    _print_build(summary, cfg.store_url)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    need_build_stack("demo")
    print("Building a LookBench release from the embedded demo shop (served on 127.0.0.1)…")
    if not load_config(None).aigen.endpoint.base_url:
        print("AI-generated subsets: no image endpoint configured (aigen.endpoint.base_url), so the scripted image "
              "endpoint (lookbench_pipeline.aigen_server) is started on 127.0.0.1 and draws them; docs/AIGEN.md "
              "says how to plug in a real generator.")
    return cmd_build(argparse.Namespace(config=None, partition=None, verbose=args.verbose, demo=True))


def consumer_store(args: argparse.Namespace):
    """The store a consumer command reads: ``--store URL`` (a folder, which must exist; ``s3://bucket/prefix`` with
    ``--endpoint-url`` and ``--anon`` for a public bucket; or an ``http(s)://`` mirror), else the
    configuration's."""
    from .store import configured_store, open_store

    if getattr(args, "store", None):
        return open_store(args.store, endpoint_url=args.endpoint_url, anonymous=args.anon, create=False)
    if args.endpoint_url or args.anon:
        raise UsageError("--endpoint-url and --anon go with --store s3://bucket/prefix")
    import importlib.util

    if not (args.config or os.environ.get("LOOKBENCH_CONFIG")) and importlib.util.find_spec("scrapy") is None:
        # the consumer install: no pipeline here whose store could be meant
        raise UsageError("name the store to read: --store URL (a folder, s3://bucket/prefix with --anon for a public "
                         "bucket, or an http(s):// mirror)")
    return configured_store(load_config(args.config))


def _release_source(args: argparse.Namespace, name: str):
    """``(store, version)`` for a consumer command's release argument: a pulled release folder (it holds
    ``manifest.json``), or a version (``vYYYYMMDD`` or ``latest``) in the store of :func:`consumer_store`."""
    from .release_reader import resolve_version
    from .store import ReleaseFolder

    if name != "latest" and (Path(name) / "manifest.json").is_file():
        folder = ReleaseFolder(name)
        return folder, folder.version
    if "/" in name or os.sep in name or Path(name).is_dir():
        raise UsageError(f"{name}: not a release folder (no manifest.json in it) and not a version (vYYYYMMDD or "
                         "latest)")
    store = consumer_store(args)
    # a version that is not published (or not a version name) is reported by read_manifest, with the published
    # versions and the closest one
    return store, resolve_version(store, name) if name == "latest" else name


def cmd_releases(args: argparse.Namespace) -> int:
    from .release_reader import ReleaseIntegrityError, list_releases, read_manifest
    from .safepath import UnsafePathError
    from .store import StoreError

    store = consumer_store(args)
    versions = list_releases(store)
    if not versions:
        print(f"no releases in {store.url}")
    for v in versions:
        try:
            read_manifest(store, v)
        except (ReleaseIntegrityError, UnsafePathError, StoreError) as exc:
            print(f"warning: {v} is left out: {exc}", file=sys.stderr)
            continue
        print(v)
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from .release_reader import read_manifest

    store, version = _release_source(args, args.version)
    m = read_manifest(store, version)
    if args.json:
        print(json.dumps(m, indent=2, sort_keys=True))
    else:
        print(format_manifest(m))
    return 0


def _count(v: object) -> int:
    """A manifest count: an integer, or the sum of a per-file ``{file: n}`` object (anything else counts 0)."""
    if isinstance(v, bool):
        return 0
    if isinstance(v, int):
        return v
    if isinstance(v, dict):
        return sum(_count(x) for x in v.values() if not isinstance(x, dict))
    return 0


def format_manifest(m: dict) -> str:
    """A release manifest (checked by ``release.check_manifest``) as a person reads it: version, window, build,
    rows per subset and role, the files' total size, label sources, what changed since the previous version."""
    files = {**m.get("files", {}), **m.get("metadata_files", {})}
    w = m.get("window") if isinstance(m.get("window"), dict) else {}
    lines = [f"{m.get('name', 'LookBench')} {m.get('version')}  window {w.get('start', '?')} to {w.get('end', '?')} "
             f"(end exclusive)  built {m.get('built_at', '?')}"
             + (f"  code {m['code_version']}" if m.get("code_version") else "")]
    subsets: dict[str, dict[str, int]] = {}
    for key, meta in sorted(m.get("files", {}).items()):
        subset, _, name = key.partition("/")
        if name.endswith(".parquet"):
            subsets.setdefault(subset, {})[name.removesuffix(".parquet")] = int(meta.get("rows") or 0)
    if subsets:
        width = max(len(s) for s in subsets)
        lines.append(f"\n{'subset'.ljust(width)}  {'query':>7}  {'gallery':>7}")
        for sub, roles in subsets.items():
            lines.append(f"{sub.ljust(width)}  {roles.get('query', 0):>7}  {roles.get('gallery', 0):>7}")
    total = sum(int(v.get("bytes") or 0) for v in files.values())
    lines.append(f"\n{len(files)} files, {total / 1e6:.1f} MB, each with its sha256 in manifest.json")
    c = m.get("counts") if isinstance(m.get("counts"), dict) else {}
    if c:
        reasons = c.get("rejected_by_reason") if isinstance(c.get("rejected_by_reason"), dict) else {}
        lines.append(f"candidates {_count(c.get('candidates'))}, rejected {_count(c.get('rejected'))}"
                     + (f" ({', '.join(f'{k} {_count(v)}' for k, v in sorted(reasons.items()))})" if reasons else ""))
    if m.get("taxonomy_version"):
        lines.append(f"taxonomy {m['taxonomy_version']}")
    if isinstance(m.get("annotators"), list) and m["annotators"]:
        lines.append(f"annotators: {', '.join(map(str, m['annotators']))}")
    ch = m.get("changes") if isinstance(m.get("changes"), dict) else {}
    if ch.get("previous_version"):
        # the manifest counts items per file (an item is in a subset's query and in every subset's gallery)
        added, retired = (ch.get(k) if isinstance(ch.get(k), dict) else {} for k in ("items_added", "items_retired"))
        per_file = ", ".join(f"{f} +{_count(added.get(f))} -{_count(retired.get(f))}"
                             for f in sorted(set(added) | set(retired)))
        lines.append(f"since {ch['previous_version']}, items added / retired per file: {per_file or 'none'} "
                     "(CHANGES.md)")
    lines.append("(--json prints the whole manifest)")
    return "\n".join(lines)


def cmd_pull(args: argparse.Namespace) -> int:
    from .release_reader import pull, resolve_version

    store = consumer_store(args)
    version = resolve_version(store, args.version)
    files = pull(store, version, Path(args.dest), args.subset or None, progress=not args.quiet)
    folder = Path(args.dest) / version
    print(f"{len(files)} files of {version} verified and written under {folder}")
    if args.look_bench:
        # look-bench's loader reads the Hub id "srpone/look-bench"; Hugging Face `datasets` takes a local folder of
        # that name (relative to the working directory) before the Hub.
        link = Path(args.dest) / "srpone" / "look-bench"
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            if not link.is_symlink():
                raise ValueError(f"{link} exists and is not a link; move it away first")
            link.unlink()
        link.symlink_to(Path("..") / version, target_is_directory=True)
        print(f"{link} -> {folder}: from {args.dest}, look_bench.utils.load_lookbench_dataset(\"<subset>\") "
              "loads this release")
    return 0


def _user_cache() -> Path:
    """Where a consumer's embedding cache lives: ``$XDG_CACHE_HOME/lookbench/embeddings`` (``~/.cache`` when
    unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "lookbench" / "embeddings"


def _print_reasons(ev, named: list[str]) -> None:
    """Why models were not scored, on stderr: each named model (and each model left unscored on a subset) with
    its reason; the registry's models that cannot run here on one line, grouped by reason."""
    from collections import Counter

    from .scoring import nothing_scored_reasons

    unnamed = [s for s in ev.skipped if s["model"] not in named]
    shown = type(ev)(ev.release, ev.ks, ev.scores, [s for s in ev.skipped if s["model"] in named],
                     unscored=ev.unscored)
    for line in nothing_scored_reasons(shown):
        print(line, file=sys.stderr)
    if unnamed:
        why = Counter(s["reason"].split(";")[0].split(" (")[0] for s in unnamed)
        print(f"skipped {len(unnamed)} registry models that cannot run here ("
              + ", ".join(f"{r}: {n}" for r, n in why.most_common()) + "); --model ID scores one and says why",
              file=sys.stderr)


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Score models on a release (a pulled folder or a version in a store). Exit codes: 0 every model asked
    for was scored; 1 nothing was scored, or a model named with --model / --embeddings was not (the reasons on
    stderr), or an error; 2 a configuration or usage error."""
    import pyarrow.parquet as pq

    from .config import EvaluateConfig
    from .evaluate import evaluate_configured, format_table
    from .scoring import PrecomputedEmbeddings, site_benchmark

    if (args.release_path is None) == (args.release is None):
        raise UsageError("name the release once: a pulled release folder (lookbench evaluate DIR) or a version "
                         "(--release vYYYYMMDD|latest)")
    for flag, value in (("--cutoff", args.cutoff), ("--training-cutoff", args.training_cutoff)):
        if value and not (flag == "--cutoff" and value == "model"):
            try:
                date.fromisoformat(value)
            except ValueError as exc:
                raise UsageError(f"{flag} must be a date YYYY-MM-DD{' or model' if flag == '--cutoff' else ''}, "
                                 f"got {value!r}") from exc
    if args.ids and not args.embeddings:
        raise UsageError("--ids goes with --embeddings FILE.npy")
    if (args.name or args.training_cutoff) and not args.embeddings:
        raise UsageError("--name and --training-cutoff go with --embeddings")
    for flag, value in (("--output", args.output), ("--benchmark-json", args.benchmark_json)):
        if value and not Path(value).resolve().parent.is_dir():
            raise UsageError(f"{flag}: folder {Path(value).parent} does not exist")
    store, version = _release_source(args, args.release_path or args.release)
    # The pipeline's own evaluation (a version in the configured store, or --config): the configuration's models,
    # legacy benchmarks, contamination index and embedding cache. A consumer's (a pulled folder, --store): the
    # default settings without legacy benchmarks (their data is not part of a release), cache in the user's.
    pipeline_mode = bool(args.config) or not (args.release_path or args.store)
    index = None
    if pipeline_mode:
        cfg = load_config(args.config)
        settings, data_dir = cfg.evaluate, Path(cfg.data_dir)
        cache = Path(args.cache) if args.cache else data_dir / "embeddings"
        match = (cfg.dedup.hamming_threshold, cfg.dedup.max_color_diff, cfg.dedup.max_foreground_delta_e)
        index_path = data_dir / "contamination" / "index.parquet"
        index = pq.read_table(index_path) if index_path.is_file() else None
        if index is None and settings.exclude_contaminated:
            print(f"note: no contamination index at {index_path}: queries not re-checked", file=sys.stderr)
        legacy = not args.no_legacy
    else:
        settings, data_dir, match = EvaluateConfig(legacy=[]), None, (6, 32.0)
        cache, legacy = Path(args.cache) if args.cache else _user_cache(), False
    given = {}
    if args.embeddings:
        tc = date.fromisoformat(args.training_cutoff) if args.training_cutoff else None
        emb = PrecomputedEmbeddings.load(args.embeddings, args.ids, args.name, tc)
        given[emb.name] = emb
    named = list(dict.fromkeys([*(args.model or []), *given]))
    # models named on the command line (or embeddings) are scored alone; otherwise the config's, plus the registry's
    ev = evaluate_configured(settings, store, version, data_dir=data_dir, cache_dir=cache,
                             contamination_index=index, contamination_match=match,
                             model_ids=args.model or ([] if given else None), cutoff=args.cutoff,
                             registry=False if named else None, legacy=legacy, progress=not args.quiet,
                             embedders_given=given, subsets=args.subset or None)
    _print_reasons(ev, named)
    if ev.scores.num_rows == 0:
        print(f"error: nothing was scored on {version} (the reasons are above)", file=sys.stderr)
        return EXIT_ERROR
    print(format_table(ev.scores))
    if args.output:
        pq.write_table(ev.scores, args.output)
    if args.benchmark_json:
        Path(args.benchmark_json).write_text(json.dumps(site_benchmark(ev.scores), indent=2) + "\n")
    if args.report:
        from .report import write_report

        report = write_report(ev, Path(args.report))
        print(f"\nreport: {report['html']} (leaderboard: {report['dir'] / 'leaderboard.md'})")
    scored = set(ev.scores.column("model").to_pylist())
    missing = [m for m in named if m not in scored]
    if missing:
        print(f"error: not scored: {', '.join(missing)} (the reasons are above)", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


def cmd_audit_export(args: argparse.Namespace) -> int:
    from .audit import export, sample_release
    from .pipeline import store_of

    rows, images = sample_release(store_of(load_config(args.config)), args.version, args.per_stratum, args.seed)
    path = export(rows, images, args.out)
    strata = len({(r.category, r.attribute) for r in rows})
    print(f"{len(rows)} labels from {strata} strata (category x attribute) of {args.version}: {path}")
    print(f"open {Path(args.out) / 'index.html'} to review, or fill the verdict column of {path.name} "
          "(correct / incorrect / unsure); then: lookbench audit score <file.csv>")
    return 0


def cmd_audit_score(args: argparse.Namespace) -> int:
    from .audit import format_score, score

    result = score(args.csv)
    print(json.dumps(result, indent=2) if args.json else format_score(result))
    return 0


def cmd_detector_train(args: argparse.Namespace) -> int:
    """Convert annotation files to a YOLO data set, train, score on the held-out split, write weights + report."""
    need_build_stack("detector train", ("ultralytics", "torch"))
    import yaml

    from .config import DetectorTrainConfig
    from .detect import AnnotationSource, DetectorError, check_train_class_map, train_detector

    for flag, value, ok, want in (("epochs", args.epochs, lambda v: v >= 1, ">= 1"),
                                  ("imgsz", args.imgsz, lambda v: v >= 32, ">= 32 (pixels)"),
                                  ("batch", args.batch, lambda v: v >= 1, ">= 1"),
                                  ("val-fraction", args.val_fraction, lambda v: 0 < v < 1,
                                   "between 0 and 1 (exclusive)")):
        if value is not None and not ok(value):
            raise ValueError(f"--{flag} must be {want}, got {value}")
    cfg = load_config(args.config)
    n = len(args.annotations)

    def per_source(values: list[str] | None, name: str, default: str | None) -> list[str]:
        values = values or ([default] if default is not None else [])
        if len(values) == 1:
            return values * n
        if len(values) != n:
            raise ValueError(f"--{name}: give one value, or one per --annotations ({n}); got {len(values)}")
        return values

    images = per_source(args.images, "images", None)
    sources = [AnnotationSource(Path(a), Path(i), t, f) for a, i, t, f in
               zip(args.annotations, images, per_source(args.image_name, "image-name", "{file_name}"),
                   per_source(args.format, "format", "auto"))]
    for i in dict.fromkeys(images):
        if not Path(i).is_dir():
            raise ValueError(f"--images {i}: no such folder")
    class_map = None
    if args.classes:
        class_map = yaml.safe_load(Path(args.classes).read_text(encoding="utf-8"))
        if not isinstance(class_map, dict):
            raise ValueError(f"--classes {args.classes}: a mapping 'source category: class' expected")
        try:
            class_map = check_train_class_map(class_map)
        except DetectorError as exc:
            raise ValueError(f"--classes {args.classes}: {exc}") from exc
    extra = {}
    for kv in args.arg or []:
        k, sep, v = kv.partition("=")
        if not sep:
            raise ValueError(f"--arg {kv!r}: expected key=value")
        extra[k] = yaml.safe_load(v)
    d = DetectorTrainConfig()
    try:
        report = train_detector(
            sources, Path(args.out), model=args.model or d.model,
            epochs=d.epochs if args.epochs is None else args.epochs,
            imgsz=d.imgsz if args.imgsz is None else args.imgsz,
            batch=d.batch if args.batch is None else args.batch,
            val_fraction=d.val_fraction if args.val_fraction is None else args.val_fraction,
            seed=d.seed if args.seed is None else args.seed, class_map=class_map, device=args.device,
            cache_dir=cfg.detector_cache_dir, offline=cfg.detect.offline, train_args=extra)
    except DetectorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    ds = report["dataset"]
    print(f"trained {report['model']} on {ds['train_images']} images, held out {ds['val_images']} "
          f"({ds['boxes']} boxes kept, {ds['boxes_dropped']} dropped {ds['rejected_by_reason']}) in "
          f"{report['seconds']:.0f} s")
    print(f"  classes:   {report['classes']}")
    print(f"  mAP50 {report['map50']:.3f}  mAP50-95 {report['map50_95']:.3f}  (held-out split)")
    print(f"  weights:   {report['weights']}  sha256 {report['weights_sha256']}")
    print(f"  report:    {Path(args.out) / 'report.json'}")
    if report.get("unmatched_class_map_keys"):
        print(f"warning: --classes categories that no annotation has: {report['unmatched_class_map_keys']}",
              file=sys.stderr)
    if report.get("classes_without_boxes"):
        print(f"warning: classes trained without a single box: {report['classes_without_boxes']}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lookbench", description="Build and score LookBench releases.")
    sub = parser.add_subparsers(dest="command", required=True)
    verbose_help = ("print everything as it comes (Dagster's console, library and training output) instead of a "
                    "line per stage; without it that goes to <data_dir>/logs/")
    p = sub.add_parser("demo", help="build a release from the embedded demo shop and print its evaluation")
    p.add_argument("--verbose", action="store_true", help=verbose_help)
    p.set_defaults(fn=cmd_demo)
    p = sub.add_parser("build", help="run the release job for one release window")
    p.add_argument("--verbose", action="store_true", help=verbose_help)
    p.add_argument("--config", help="pipeline YAML file (default: $LOOKBENCH_CONFIG or the demo)")
    p.add_argument("--partition", help="window start, YYYY-01-01 or YYYY-07-01 (default: the current window)")
    p.set_defaults(fn=cmd_build)
    p = sub.add_parser("backfill", help="rebuild a release window from the crawl archive, without the network")
    p.add_argument("--config", help="pipeline YAML file whose store holds the archive (warc/<site>/)")
    p.add_argument("--partition", required=True, help="window start, YYYY-01-01 or YYYY-07-01")
    p.add_argument("--verbose", action="store_true", help=verbose_help)
    p.set_defaults(fn=cmd_backfill)
    def store_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--store", metavar="URL", help="read this store instead of the configuration's: a folder, "
                       "s3://bucket/prefix, or an http(s):// mirror of one")
        p.add_argument("--endpoint-url", help="with an s3:// --store: the S3 endpoint (MinIO, R2, a local server)")
        p.add_argument("--anon", action="store_true", help="with an s3:// --store: unsigned requests (a public bucket)")

    p = sub.add_parser("releases", help="list published versions")
    p.add_argument("--config")
    store_options(p)
    p.set_defaults(fn=cmd_releases)
    p = sub.add_parser("info", help="summary of a release's manifest")
    p.add_argument("version", help="vYYYYMMDD, latest, or a pulled release folder")
    p.add_argument("--json", action="store_true", help="print the whole manifest as JSON")
    p.add_argument("--config")
    store_options(p)
    p.set_defaults(fn=cmd_info)
    p = sub.add_parser("pull", help="download a release with sha256 verification")
    p.add_argument("version", help="vYYYYMMDD, or latest")
    p.add_argument("--subset", action="append", help="only this subset (repeatable)")
    p.add_argument("--dest", default="lookbench-releases", help="folder to write into (default: %(default)s)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--look-bench", action="store_true",
                   help="also link DEST/srpone/look-bench to the release, for look-bench's loader run from DEST")
    p.add_argument("--config")
    store_options(p)
    p.set_defaults(fn=cmd_pull)
    p = sub.add_parser("evaluate", help="score retrieval models (or your own embeddings) on a release",
                       description="Score models on a release: a pulled release folder (DIR), or a version in a "
                                   "store (--release). Exit codes: 0 every model asked for was scored; 1 nothing was "
                                   "scored, a named model was not, or an error; 2 a configuration or usage error.")
    p.add_argument("release_path", nargs="?", metavar="DIR",
                   help="a pulled release folder (lookbench pull writes DEST/<version>/), or a version")
    p.add_argument("--release", help="a published version, vYYYYMMDD or latest, in the store (--store, else the "
                                     "configuration's)")
    p.add_argument("--model", action="append",
                   help="model id (repeatable); default: the config's models and every registry model that can run")
    p.add_argument("--embeddings", action="append", metavar="FILE",
                   help="your model's embeddings keyed by the release's sample_id (repeatable): Parquet with columns "
                        "sample_id and embedding (fixed_size_list<float32>[d]), .npz with arrays sample_id and "
                        "embedding, or .npy (n, d) with --ids")
    p.add_argument("--ids", metavar="FILE", help="with a .npy --embeddings: one sample_id per line, in row order")
    p.add_argument("--name", help="with --embeddings: the model's name in the scores (default: the file's stem)")
    p.add_argument("--training-cutoff", metavar="YYYY-MM-DD",
                   help="with --embeddings: your model's training cutoff, for --cutoff model")
    p.add_argument("--subset", action="append", help="score only this subset (repeatable)")
    p.add_argument("--cutoff", help="score only queries first seen on or after this date (YYYY-MM-DD), or 'model' "
                                    "for each model's declared training cutoff")
    p.add_argument("--report", metavar="DIR", help="write the leaderboard (Parquet, Markdown, the site's "
                                                   "benchmark.json) and the HTML report here")
    p.add_argument("--output", help="also write the scores as Parquet here")
    p.add_argument("--benchmark-json", metavar="FILE",
                   help="also write the scores in the LookBench site's benchmark.json shape here")
    p.add_argument("--no-legacy", action="store_true", help="do not score the configured legacy benchmarks")
    p.add_argument("--cache", metavar="DIR", help="embedding cache (default: <data_dir>/embeddings with a "
                                                  "configuration, else ~/.cache/lookbench/embeddings)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--config", help="pipeline YAML file (its evaluate settings, store, contamination index)")
    store_options(p)
    p.set_defaults(fn=cmd_evaluate)
    p = sub.add_parser("audit", help="human audit of a release's attribute labels")
    asub = p.add_subparsers(dest="audit_command", required=True)
    a = asub.add_parser("export", help="a stratified sample (category x attribute) with a review form")
    a.add_argument("version")
    a.add_argument("--out", required=True, help="folder for audit.csv, index.html and the images")
    a.add_argument("--per-stratum", type=int, default=20, help="labels per (category, attribute) (default: 20)")
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--config")
    a.set_defaults(fn=cmd_audit_export)
    a = asub.add_parser("score", help="estimated precision from a CSV with verdicts")
    a.add_argument("csv")
    a.add_argument("--json", action="store_true", help="print the result as JSON")
    a.set_defaults(fn=cmd_audit_score)
    p = sub.add_parser("detector", help="garment detector tools")
    dsub = p.add_subparsers(dest="detector_command", required=True)
    p = dsub.add_parser("train", help="train a YOLO garment detector from COCO-style annotations (no network)",
                        description="Converts DeepFashion2 / Fashionpedia / ModaNet annotations (COCO-style JSON, "
                                    "ModaNet snaps, or a DeepFashion2 folder) to a YOLO data set, trains with "
                                    "ultralytics and reports mAP50 and mAP50-95 on a held-out split.")
    p.add_argument("--annotations", action="append", required=True,
                   help="annotation file (or DeepFashion2 annos/ folder); repeatable")
    p.add_argument("--images", action="append", required=True, help="image folder (one, or one per --annotations)")
    p.add_argument("--image-name", action="append",
                   help="file name template: {file_name}, {stem}, {image_id} (default {file_name})")
    p.add_argument("--format", action="append", choices=["auto", "coco", "modanet-snaps", "deepfashion2"])
    p.add_argument("--classes", help="YAML mapping 'source category: detector class' (null or absent drops it)")
    p.add_argument("--out", required=True, help="output folder: dataset/, detector.pt, report.json")
    p.add_argument("--model", help="ultralytics model YAML (from scratch) or local .pt (default yolov8n.yaml)")
    p.add_argument("--epochs", type=int)
    p.add_argument("--imgsz", type=int)
    p.add_argument("--batch", type=int)
    p.add_argument("--val-fraction", type=float)
    p.add_argument("--seed", type=int)
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, 0, cuda:1 ...")
    p.add_argument("--arg", action="append", help="more ultralytics training arguments, key=value (repeatable)")
    p.add_argument("--config", help="pipeline YAML (for detect.cache_dir and detect.offline)")
    p.set_defaults(fn=cmd_detector_train)
    parser.add_argument("--debug", action="store_true", help="show full tracebacks")
    parser.add_argument("--log-format", choices=["text", "json"],
                        help="the library's log records as text or JSON lines with run id and stage "
                             "(default: $LOOKBENCH_LOG_FORMAT, else text)")
    args = parser.parse_args(argv)
    root = logging.getLogger()
    before = list(root.handlers)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for h in root.handlers:
        if h not in before:
            # warnings only: the library's INFO records (progress) reach the terminal through Dagster's console
            # logger (dagster.yaml's python_logs) or through --log-format's handler, never twice
            h.setLevel(logging.WARNING)
    if args.log_format or os.environ.get("LOOKBENCH_LOG_FORMAT"):
        from .logs import configure

        configure(args.log_format, level=logging.INFO)  # INFO: progress records of long stages
        logging.getLogger("lookbench_pipeline").propagate = False
    from .release_reader import ReleaseIntegrityError
    from .store import StoreError

    try:
        return args.fn(args)
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # `lookbench info … | head`: the reader left; no error to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR
    except (StoreError, ReleaseIntegrityError, ValueError, OSError) as exc:
        if getattr(args, "debug", False):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # anything else: one line, the traceback with --debug
        if getattr(args, "debug", False):
            raise
        print(f"error: {type(exc).__name__}: {exc} (run with --debug for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
