"""The ``lookbench`` command line.

Consumers (the base install, ``pip install <checkout>`` with no extras):

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
    2 a configuration or usage error; 130 interrupted (Ctrl-C: one line;
    run again, `pull` resumes and `evaluate` reuses the embeddings computed so far).

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

import sys

from ..early_interrupt import quiet_ctrl_c_while_loading

# `python -m lookbench_pipeline.cli` imports this package before its __main__ (which runs the command as the console
# script's entry point): Python sets sys.argv[0] to "-m" while it locates that module, so the heavy imports below
# (NumPy, PyArrow, pydantic) get the console script's one-line Ctrl-C then, and only then (an import of the
# package from a program or a REPL keeps Python's KeyboardInterrupt).
with quiet_ctrl_c_while_loading(enabled=sys.argv[:1] == ["-m"]):
    from .build import (AIGEN_REASONS, AIGEN_STEPS, BUILD_RUNNER_DEFAULT, BUILD_RUNNER_GROUP, cmd_backfill,
                        cmd_build, cmd_demo)
    from .common import BUILD_MODULES, EXIT_ERROR, EXIT_OK, EXIT_USAGE, UsageError, need_build_stack
    from .consume import cmd_evaluate, cmd_info, cmd_pull, cmd_releases, consumer_store, format_manifest
    from .main import main
    from .tools import cmd_audit_export, cmd_audit_score, cmd_detector_train

__all__ = ["AIGEN_REASONS", "AIGEN_STEPS", "BUILD_MODULES", "BUILD_RUNNER_DEFAULT", "BUILD_RUNNER_GROUP",
           "EXIT_ERROR", "EXIT_OK", "EXIT_USAGE", "UsageError", "cmd_audit_export", "cmd_audit_score",
           "cmd_backfill", "cmd_build", "cmd_demo", "cmd_detector_train", "cmd_evaluate", "cmd_info", "cmd_pull",
           "cmd_releases", "consumer_store", "format_manifest", "main", "need_build_stack"]
