"""The builders' commands: ``demo``, ``build``, ``backfill``. They run a release through the build runner that the
Dagster layer registers (the ``lookbench.build_runner`` entry point; the library never imports that layer), with a
quiet terminal (a line per stage) and everything else in ``<data_dir>/logs/``."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import textwrap
from pathlib import Path

from ..config import ConfigError, load_config, require_named_sites
from .common import UsageError, need_build_stack

AIGEN_REASONS = ("generation_failed:", "generation_pending", "generation_skipped:", "duplicate_of_real_image",
                 "category_disagreement", "attribute_disagreement", "similarity_below_threshold",
                 "reference_not_labelled")
"""Rejection reasons of AI-generated images (lookbench_pipeline.aigen.generated_checks); in the demo, the scripted
endpoint's deliberate faults (lookbench_pipeline.demo.aigen_server.default_plan) produce them."""
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


def _run_job(runner, config_path: str | None, partition: str | None, on_event=None, force: bool = False) -> dict:
    """Crawl every site and build the release of one window through the build runner (the Dagster layer; the
    library itself knows nothing of Dagster); ``force``: compute every stage, even those whose inputs, code and
    configuration did not change. Raises ``runner.RunFailed`` with the failing step's message."""
    if config_path:
        os.environ["LOOKBENCH_CONFIG"] = str(Path(config_path).resolve())
    if force:
        return runner.run_release(os.environ.get("LOOKBENCH_CONFIG"), partition, on_event=on_event,
                                  reuse_unchanged=False)
    return runner.run_release(os.environ.get("LOOKBENCH_CONFIG"), partition, on_event=on_event)


def _build_terminal(cfg, command: str, verbose: bool, run, demo: bool = False) -> int | dict:
    """Run a build (``run(runner, on_event)`` -> its summary, ``runner`` from :func:`_build_runner`) with a quiet
    terminal: a line per stage, a progress bar, each warning once, while everything printed (Dagster's console,
    library chatter, ultralytics' training output) goes to ``<data_dir>/logs/<command>-<UTC time>.log``, which
    also gets the terminal's lines (timestamped);
    ``verbose``: everything on the terminal as it comes.
    Dagster's Beta/Preview warnings (about Dagster's own API, nothing a user can act on) are not shown. In the demo
    (``demo``) the scripted image endpoint's deliberate faults and the expected warnings are labelled as such.
    Returns the summary, or exit code 1 after printing why the run failed."""
    import warnings
    from datetime import datetime, timezone

    from ..logs import BuildTerminal, log_line, output_to_file

    scripted = demo and not cfg.aigen.endpoint.base_url
    notes = {s: "with deliberate demo faults" for s in AIGEN_STEPS} if scripted else {}
    expected = {}
    if demo:
        expected = {"no image endpoint configured": "expected in the demo",
                    "no garment-trained": "expected in the demo", "No garment-trained": "expected in the demo"}
    log_path = cfg.layout.logs / f"{command}-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}.log"
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
            term = BuildTerminal(out, err, bars=err.isatty(), width=min(width, 160), notes=notes, expected=expected,
                                 log=sys.stdout)  # inside output_to_file: the log file
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
        with open(log_path, "a", encoding="utf-8") as log:  # why the run failed, in the log too
            log.write(log_line(f"build failed:\n{failure}"))
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
    from ..evaluate import format_table
    from ..windows import utc_bound

    m = summary["manifest"]
    state = "already published, unchanged" if m.get("already_published") else "published"
    w0, w1 = utc_bound(m["window"]["start"]), utc_bound(m["window"]["end"])
    print(f"\nLookBench release {m['version']} ({state}) for window {w0} .. {w1}" + (" UTC" if ":" in w0 + w1 else ""))
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


def _check_build_inputs(cfg, config_path: str | None = None, partition: str | None = None,
                        backfill: bool = False) -> None:
    """What a release run needs beyond a valid configuration, checked before any crawl or log file: the sites a
    configuration file names (a file that omits ``sites`` would crawl the embedded demo shop; only the built-in
    default, no file at all, is the demo), at least one site (the release job reads the window's weekly crawls;
    README.md "Configuration"), every drop's item sheet and every drop's annotation files, an image endpoint for
    the AI-generated subsets when a build of the open window would request pictures (the scripted one is the
    demo's only; a backfill or a closed window's build generates nothing new: ``aigen.generate``), and that the
    ``partition``'s window can be built now (in the configuration's time zone). Raises ConfigError or UsageError
    (exit 2)."""
    from datetime import datetime, timezone

    from ..drops import item_sheet
    from ..label_import import check_drop
    from ..taxonomy import Taxonomy
    from ..windows import buildable_window

    where = config_path or os.environ.get("LOOKBENCH_CONFIG")
    require_named_sites(cfg, where)
    now, open_window = datetime.now(timezone.utc), not backfill
    if partition:
        try:
            open_window = open_window and buildable_window(partition, now, cfg.timezone).end > now
        except ValueError as exc:
            raise UsageError(f"--partition: {exc}") from None
    a = cfg.aigen
    if open_window and a.enabled and a.backend == "endpoint" and not a.endpoint.base_url and a.subsets and \
            a.items_per_subset and cfg.sites and cfg.demo_site() is None:  # the stage would refuse it after the crawl
        from ..aigen.backends import NO_ENDPOINT

        raise ConfigError(f"{where or 'the built-in configuration'}: {NO_ENDPOINT}")
    if not cfg.sites:
        raise ConfigError("sites is empty: at least one site is needed, because the release job reads the window's "
                          "weekly crawls (see README.md, Configuration)")
    for d in cfg.drops:
        item_sheet(d)
        if d.annotations:
            check_drop(d, Taxonomy.load(cfg.taxonomy))


def published_note(cfg, partition: str | None, now=None) -> str | None:
    """The line a build prints before it runs when the version it would publish (``windows.version_for``: the
    build day for the open window, the last day of a closed one) is already in the store: versions are
    immutable, so the build can only confirm it, and a changed input is refused at its publish step
    (``ReleaseExistsError``), at the end of the run. None when the version is new or the store cannot be read
    (the build itself then says why)."""
    from datetime import datetime, timezone

    from ..releases.reader import release_prefix
    from ..store import configured_store
    from ..windows import version_for, window_containing, window_starting

    now = now or datetime.now(timezone.utc)
    window = window_starting(partition, cfg.timezone) if partition else window_containing(now, cfg.timezone)
    version = version_for(window, now, cfg.timezone)
    try:
        published = configured_store(cfg, create=False).exists(f"{release_prefix(version)}/manifest.json")
    except Exception:  # noqa: BLE001 - a note only: an unreadable store is the build's own error to report
        return None
    if not published:
        return None
    return (f"note: {version} is already published in {cfg.store_url}. Versions are immutable: this build "
            f"confirms it if its content comes out unchanged, and is refused when it publishes if the input "
            f"changed; a build on a later day publishes a new version.")


def cmd_build(args: argparse.Namespace) -> int:
    need_build_stack("build")
    cfg = load_config(args.config)
    _check_build_inputs(cfg, args.config, args.partition)
    if args.config:  # before the runner is imported: Dagster's partitions take the file's timezone at import, and
        # its definitions (built at import) report a configuration error before any run or log file
        os.environ["LOOKBENCH_CONFIG"] = str(Path(args.config).resolve())
    note = published_note(cfg, args.partition)
    if note:
        print(note, file=sys.stderr, flush=True)
    demo = getattr(args, "demo", False)
    summary = _build_terminal(cfg, "demo" if demo else "build", args.verbose,
                              lambda runner, on_event: _run_job(runner, args.config, args.partition, on_event,
                                                                getattr(args, "force", False)),
                              demo=demo)
    if isinstance(summary, int):
        return summary
    _print_build(summary, cfg.store_url, demo=demo and not cfg.drops)  # a drop's intake reasons are not faults
    return 0


def cmd_backfill(args: argparse.Namespace) -> int:
    """Rebuild a window from the archived crawls (the build runner's ``rebuild_window``) into this config's
    data_dir and store (which must not hold crawl state yet)."""
    need_build_stack("backfill")
    cfg = load_config(args.config)
    _check_build_inputs(cfg, args.config, args.partition, backfill=True)
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
              "endpoint (lookbench_pipeline.demo.aigen_server) is started on 127.0.0.1 and draws them; docs/AIGEN.md "
              "says how to plug in a real generator.")
    return cmd_build(argparse.Namespace(config=None, partition=None, verbose=args.verbose, demo=True,
                                        force=getattr(args, "force", False)))
