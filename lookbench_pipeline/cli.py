"""The ``lookbench`` command line.

    lookbench demo                         build a release from the embedded demo shop and print its scores
    lookbench build [--config F] [--partition YYYY-MM-DD]
                                           run the release job (Dagster, in process) for a release window
    lookbench backfill --partition YYYY-MM-DD [--config F]
                                           rebuild a window from the crawl archive (WARC) alone, no network
    lookbench releases [--config F]        list published versions
    lookbench info VERSION [--config F]    print a release's manifest summary
    lookbench pull VERSION [--subset S ...] [--dest DIR] [--look-bench] [--config F]
                                           download a release, verifying every file's sha256
    lookbench evaluate --release VERSION [--model ID ...] [--cutoff YYYY-MM-DD|model] [--report DIR]
                       [--no-legacy] [--output F] [--quiet] [--config F]
                                           score retrieval models on a published release (progress bars on
                                           stderr), optionally writing the leaderboard and HTML report
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
from datetime import date
from pathlib import Path

from .config import ConfigError, load_config


def _run_job(config_path: str | None, partition: str | None) -> dict:
    """Crawl every site and build the release of one window through Dagster (imported here only: the library
    itself knows nothing of Dagster). Raises SystemExit(1) with the failing step's message."""
    from assets.runner import RunFailed, run_release

    if config_path:
        os.environ["LOOKBENCH_CONFIG"] = str(Path(config_path).resolve())
    try:
        return run_release(os.environ.get("LOOKBENCH_CONFIG"), partition)
    except RunFailed as exc:
        print(str(exc), file=sys.stderr)
        raise SystemExit(1) from exc


def _print_build(summary: dict, store_url: str) -> None:
    from .evaluate import format_table

    m = summary["manifest"]
    state = "already published, unchanged" if m.get("already_published") else "published"
    print(f"\nLookBench release {m['version']} ({state}) for window {m['window']['start'][:10]} .. "
          f"{m['window']['end'][:10]}")
    print(f"  location: {store_url}/releases/{m['version']}")
    for name, f in sorted(m["files"].items()):
        print(f"  {name:40s} {f['rows']:6d} rows  sha256 {f['sha256'][:16]}…")
    for name, f in sorted(m.get("metadata_files", {}).items()):
        print(f"  {name:40s} {f['bytes']:6d} bytes sha256 {f['sha256'][:16]}…")
    if m.get("changes"):
        ch = m["changes"]
        print(f"  changes since {ch.get('previous_version') or '(first release)'}: added {ch['items_added']}, "
              f"retired {ch['items_retired']}")
    c = m["counts"]
    print(f"  candidates {c['candidates']} -> query rows {c['query_rows']}, distinct gallery images "
          f"{c['gallery_rows_distinct']}, rejected {c['rejected']} {c['rejected_by_reason']}")
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
    print("\nEvaluation (percent):")
    print(format_table(summary["scores"]))
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
    cfg = load_config(args.config)
    _check_build_inputs(cfg)
    if args.partition:
        from .windows import window_starting

        window_starting(args.partition)  # ValueError: release windows start on 1 January or 1 July
    summary = _run_job(args.config, args.partition)
    _print_build(summary, cfg.store_url)
    return 0


def cmd_backfill(args: argparse.Namespace) -> int:
    """Rebuild a window from the archived crawls (``assets.runner.rebuild_window``) into this config's data_dir
    and store (which must not hold crawl state yet)."""
    from assets.runner import RunFailed, rebuild_window

    from .windows import window_starting

    window_starting(args.partition)  # ValueError: release windows start on 1 January or 1 July
    cfg = load_config(args.config)
    _check_build_inputs(cfg)
    if args.config:
        os.environ["LOOKBENCH_CONFIG"] = str(Path(args.config).resolve())
    try:
        summary = rebuild_window(os.environ.get("LOOKBENCH_CONFIG"), args.partition)
    except RunFailed as exc:
        print(str(exc), file=sys.stderr)
        return 1
    for site, keys in summary["replayed"].items():
        print(f"replayed {len(keys)} archived crawls of {site}")
    _print_build(summary, cfg.store_url)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    print("Building a LookBench release from the embedded demo shop (served on 127.0.0.1)…")
    if not load_config(None).aigen.endpoint.base_url:
        print("AI-generated subsets: no image endpoint configured (aigen.endpoint.base_url), so the scripted image "
              "endpoint (lookbench_pipeline.aigen_server) is started on 127.0.0.1 and draws them; docs/AIGEN.md "
              "says how to plug in a real generator.")
    return cmd_build(argparse.Namespace(config=None, partition=None))


def consumer_store(args: argparse.Namespace):
    """The store a consumer command reads: ``--store URL`` (a folder, ``s3://bucket/prefix`` with
    ``--endpoint-url`` and ``--anon`` for a public bucket, or an ``http(s)://`` mirror), else the configuration's."""
    from .store import open_store

    if getattr(args, "store", None):
        return open_store(args.store, endpoint_url=args.endpoint_url, anonymous=args.anon)
    from .pipeline import store_of

    return store_of(load_config(args.config))


def cmd_releases(args: argparse.Namespace) -> int:
    from .release import list_releases

    store = consumer_store(args)
    versions = list_releases(store)
    if not versions:
        print(f"no releases in {store.url}")
    for v in versions:
        print(v)
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from .release import read_manifest, resolve_version

    store = consumer_store(args)
    m = read_manifest(store, resolve_version(store, args.version))
    if args.json:
        print(json.dumps(m, indent=2, sort_keys=True))
    else:
        print(format_manifest(m))
    return 0


def format_manifest(m: dict) -> str:
    """A release manifest as a person reads it: version, window, build, rows per subset and role, the files'
    total size, label sources, what changed since the previous version."""
    files = {**m.get("files", {}), **m.get("metadata_files", {})}
    w = m.get("window") or {}
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
    c = m.get("counts") or {}
    if c:
        lines.append(f"candidates {c.get('candidates', 0)}, rejected {c.get('rejected', 0)}"
                     + (f" ({', '.join(f'{k} {v}' for k, v in sorted(c.get('rejected_by_reason', {}).items()))})"
                        if c.get("rejected_by_reason") else ""))
    if m.get("taxonomy_version"):
        lines.append(f"taxonomy {m['taxonomy_version']}")
    if m.get("annotators"):
        lines.append(f"annotators: {', '.join(map(str, m['annotators']))}")
    ch = m.get("changes") or {}
    if ch.get("previous_version"):
        lines.append(f"since {ch['previous_version']}: {len(ch.get('items_added') or [])} items added, "
                     f"{len(ch.get('items_retired') or [])} retired (CHANGES.md)")
    lines.append("(--json prints the whole manifest)")
    return "\n".join(lines)


def cmd_pull(args: argparse.Namespace) -> int:
    from .release import pull, resolve_version

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


def cmd_evaluate(args: argparse.Namespace) -> int:
    import pyarrow.parquet as pq

    from .evaluate import format_table
    from .pipeline import stage_evaluate, store_of

    cfg = load_config(args.config)
    if args.cutoff and args.cutoff != "model":
        try:
            date.fromisoformat(args.cutoff)
        except ValueError as exc:
            raise ValueError(f"--cutoff must be a date YYYY-MM-DD or 'model', got {args.cutoff!r}") from exc
    if args.output and not Path(args.output).parent.is_dir():
        raise ValueError(f"--output: folder {Path(args.output).parent} does not exist")
    index_path = Path(cfg.data_dir) / "contamination" / "index.parquet"
    index = pq.read_table(index_path) if index_path.is_file() else None
    # models named on the command line are scored alone; otherwise the config's, plus the registry's
    ev, report = stage_evaluate(cfg, store_of(cfg), args.release, index, model_ids=args.model or None,
                                cutoff=args.cutoff, registry=False if args.model else None, legacy=not args.no_legacy,
                                report=bool(args.report), report_dir=Path(args.report) if args.report else None,
                                report_to_store=False, progress=not args.quiet)
    for s in ev.skipped:
        print(f"skipped {s['model']}: {s['reason']}", file=sys.stderr)
    if index is None and cfg.evaluate.exclude_contaminated:
        print(f"note: no contamination index at {index_path}: queries not re-checked", file=sys.stderr)
    for u in ev.unscored:
        print(f"not scored: {u['model']} on {u['subset']}: {u['reason']}", file=sys.stderr)
    if ev.scores.num_rows == 0:
        why = ("every model and subset had no query left to score (above)" if ev.unscored and not ev.skipped
               else "no model could run here or none had a query to score (above)")
        print(f"no model could be scored: {why}", file=sys.stderr)
        return 1
    print(format_table(ev.scores))
    if args.output:
        pq.write_table(ev.scores, args.output)
    if report:
        print(f"\nreport: {report['html']} (leaderboard: {report['dir'] / 'leaderboard.md'})")
    return 0


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
    p = sub.add_parser("demo", help="build a release from the embedded demo shop and print its evaluation")
    p.set_defaults(fn=cmd_demo)
    p = sub.add_parser("build", help="run the release job for one release window")
    p.add_argument("--config", help="pipeline YAML file (default: $LOOKBENCH_CONFIG or the demo)")
    p.add_argument("--partition", help="window start, YYYY-01-01 or YYYY-07-01 (default: the current window)")
    p.set_defaults(fn=cmd_build)
    p = sub.add_parser("backfill", help="rebuild a release window from the crawl archive, without the network")
    p.add_argument("--config", help="pipeline YAML file whose store holds the archive (warc/<site>/)")
    p.add_argument("--partition", required=True, help="window start, YYYY-01-01 or YYYY-07-01")
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
    p.add_argument("version", help="vYYYYMMDD, or latest")
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
    p = sub.add_parser("evaluate", help="score retrieval models on a published release")
    p.add_argument("--release", required=True, help="a published version, vYYYYMMDD")
    p.add_argument("--model", action="append",
                   help="model id (repeatable); default: the config's models and every registry model that can run")
    p.add_argument("--cutoff", help="score only queries first seen on or after this date (YYYY-MM-DD), or 'model' "
                                    "for each model's declared training cutoff")
    p.add_argument("--report", metavar="DIR", help="write the leaderboard (Parquet, Markdown) and the HTML report here")
    p.add_argument("--output", help="also write the scores as Parquet here")
    p.add_argument("--no-legacy", action="store_true", help="do not score the configured legacy benchmarks")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--config")
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
    from .release import ReleaseIntegrityError
    from .store import StoreError

    try:
        return args.fn(args)
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
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
