"""The argument parser and the dispatch: which function runs each command, and how an error becomes an exit code
(0 success, 1 an error, 2 a usage or configuration error, 130 interrupted: Ctrl-C)."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from ..config import ConfigError
from .build import cmd_backfill, cmd_build, cmd_demo
from .common import EXIT_ERROR, EXIT_USAGE, UsageError
from .consume import cmd_evaluate, cmd_info, cmd_pull, cmd_releases
from .tools import cmd_audit_export, cmd_audit_score, cmd_detector_train


def _window_key(value: str) -> str:
    """``--partition``: a release window's start (``windows.release_window_key``), checked before anything runs
    (argparse: exit code 2). Whether the window has begun is checked against the configuration's time zone
    (``cli.build``)."""
    from ..windows import release_window_key

    try:
        return release_window_key(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _bounded(kind: type, want: str, ok):
    """An argparse type: ``kind(value)`` that ``ok`` accepts, else a usage error saying what is wanted."""
    def parse(value: str):
        try:
            v = kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not {want}") from None
        if not ok(v):
            raise argparse.ArgumentTypeError(f"must be {want}, got {value}")
        return v
    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def _folder(value: str) -> str:
    if not os.path.isdir(value):
        raise argparse.ArgumentTypeError(f"{value}: no such folder")
    return value


def _file(value: str) -> str:
    if not os.path.isfile(value):
        raise argparse.ArgumentTypeError(f"{value}: no such file" + (" (a folder)" if os.path.isdir(value) else ""))
    return value


def _file_or_folder(value: str) -> str:
    if not os.path.exists(value):
        raise argparse.ArgumentTypeError(f"{value}: no such file or folder")
    return value

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lookbench", description="Build and score LookBench releases.")
    sub = parser.add_subparsers(dest="command", required=True)
    verbose_help = ("print everything as it comes (Dagster's console, library and training output) instead of a "
                    "line per stage; without it that goes to <data_dir>/logs/")
    force_help = ("compute every stage, also those whose inputs, code and configuration did not change since they "
                  "last ran (by default their stored results are reused and the stage's line says 'skipped')")
    p = sub.add_parser("demo", help="build a release from the embedded demo shop and print its evaluation")
    p.add_argument("--verbose", action="store_true", help=verbose_help)
    p.add_argument("--force", action="store_true", help=force_help)
    p.set_defaults(fn=cmd_demo)
    p = sub.add_parser("build", help="run the release job for one release window")
    p.add_argument("--verbose", action="store_true", help=verbose_help)
    p.add_argument("--config", help="pipeline YAML file (default: $LOOKBENCH_CONFIG or the demo)")
    p.add_argument("--partition", type=_window_key,
                   help="window start, YYYY-01-01 or YYYY-07-01 (default: the current window)")
    p.add_argument("--force", action="store_true", help=force_help)
    p.set_defaults(fn=cmd_build)
    p = sub.add_parser("backfill", help="rebuild a release window from the crawl archive, without the network")
    p.add_argument("--config", help="pipeline YAML file whose store holds the archive (warc/<site>/)")
    p.add_argument("--partition", type=_window_key, required=True, help="window start, YYYY-01-01 or YYYY-07-01")
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
    p.add_argument("--verify", action="store_true", help="also check every file's sha256 against the manifest "
                   "(a pulled folder's files are always checked for size)")
    p.add_argument("--config")
    store_options(p)
    p.set_defaults(fn=cmd_info)
    p = sub.add_parser("pull", help="download a release with sha256 verification")
    p.add_argument("version", help="vYYYYMMDD, or latest")
    p.add_argument("--subset", action="append",
                   help="only this subset (repeatable); the distractor gallery noise/ always comes along")
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
    p.add_argument("--ids", metavar="FILE", action="append",  # appended, so that a second one is refused
                   help="with a .npy --embeddings: one sample_id per line, in row order (once)")
    # appended, so that a second one is refused rather than silently replacing the first
    p.add_argument("--name", action="append", help="with --embeddings: the model's name in the scores (default: "
                                                   "the first file's stem); once: the files are one model's")
    p.add_argument("--training-cutoff", action="append", metavar="YYYY-MM-DD",
                   help="with --embeddings: your model's training cutoff, for --cutoff model (it wins over "
                        "evaluate.model_cutoffs)")
    p.add_argument("--subset", action="append", help="score only this subset (repeatable)")
    p.add_argument("--cutoff", help="score only queries first seen on or after this date (YYYY-MM-DD), or 'model' "
                                    "for each model's declared training cutoff")
    p.add_argument("--report", metavar="DIR", help="write the leaderboard (Parquet, Markdown, the site's "
                                                   "benchmark.json) and the HTML report here")
    p.add_argument("--output", metavar="FILE.parquet", help="also write the scores as Parquet here")
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
    a.add_argument("version", help="vYYYYMMDD, latest, or a pulled release folder")
    a.add_argument("--out", required=True, help="folder for audit.csv, index.html and the images")
    a.add_argument("--per-stratum", type=_bounded(int, "an integer >= 1", lambda v: v >= 1), default=20,
                   help="labels per (category, attribute) (default: 20)")
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--config")
    store_options(a)
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
    p.add_argument("--annotations", action="append", required=True, type=_file_or_folder,
                   help="annotation file (or DeepFashion2 annos/ folder); repeatable")
    p.add_argument("--images", action="append", required=True, type=_folder,
                   help="image folder (one, or one per --annotations)")
    p.add_argument("--image-name", action="append",
                   help="file name template: {file_name}, {stem}, {image_id} (default {file_name})")
    p.add_argument("--format", action="append", choices=["auto", "coco", "modanet-snaps", "deepfashion2"])
    p.add_argument("--classes", type=_file,
                   help="YAML mapping 'source category: detector class' (null or absent drops it)")
    p.add_argument("--out", required=True, help="output folder: dataset/, detector.pt, report.json")
    p.add_argument("--model", help="ultralytics model YAML (from scratch) or local .pt (default yolov8n.yaml)")
    p.add_argument("--epochs", type=_bounded(int, "an integer >= 1", lambda v: v >= 1))
    p.add_argument("--imgsz", type=_bounded(int, "an integer >= 32 (pixels)", lambda v: v >= 32))
    p.add_argument("--batch", type=_bounded(int, "an integer >= 1", lambda v: v >= 1))
    p.add_argument("--val-fraction", type=_bounded(float, "a number between 0 and 1 (exclusive)",
                                                   lambda v: 0 < v < 1))
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
        from ..logs import configure

        configure(args.log_format, level=logging.INFO)  # INFO: progress records of long stages
        logging.getLogger("lookbench_pipeline").propagate = False
    try:
        return _run(args)
    finally:
        # Arrow's tables and readers left in reference cycles (an exception's traceback holds the frames that held
        # them) are freed now, while Arrow is alive: freed at interpreter teardown, a reader's thread could outlive
        # Arrow's thread pool and abort the process ("terminate called without an active exception", exit -6
        # instead of the command's own code; apache/arrow#34314)
        import gc

        gc.collect()


EXIT_INTERRUPTED = 130
"""Ctrl-C (128 + SIGINT, as a shell reports a process the signal ended)."""
RESUMABLE = {"pull": "run the same command again to resume",
             "evaluate": "run the same command again: it reuses the embeddings computed so far (kept in the embedding "
                         "cache, --cache or the default one, per batch of up to 2048 images of a file; the batch "
                         "cut short is computed again)"}
"""What a command interrupted can do next, said after ``interrupted;``: a pull keeps its ``.part`` files and resumes
them; an evaluation's image embeddings are in the embedding cache once each call of ``EmbeddingCache.embed``
returns (``evaluate.files.embed_file`` makes one per 2048 images of a file), and a rerun reads them back."""
TEMPORARY_CACHE_LOST = ("run the same command again: the embeddings computed so far were in a temporary cache "
                        "(the default one cannot be written), now removed, so it embeds everything again; --cache "
                        "DIR in a folder you can write keeps them")
"""What an interrupted evaluate says instead when it embedded through a temporary cache (``args.temporary_cache``,
set by ``cmd_evaluate`` when the default cache cannot be written): nothing is kept for a rerun."""


def _run(args: argparse.Namespace) -> int:
    """``args.fn(args)`` with the errors it may raise turned into a line on stderr and an exit code; Ctrl-C is one
    line, ``interrupted`` (exit 130), the traceback only with ``--debug``."""
    from ..releases.reader import ReleaseIntegrityError
    from ..store import StoreError

    try:
        return args.fn(args)
    except KeyboardInterrupt:
        if getattr(args, "debug", False):
            raise
        hint = TEMPORARY_CACHE_LOST if getattr(args, "temporary_cache", False) else RESUMABLE.get(args.command)
        print("\ninterrupted" + (f"; {hint}" if hint else ""), file=sys.stderr)  # after a progress bar's line
        return EXIT_INTERRUPTED
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
