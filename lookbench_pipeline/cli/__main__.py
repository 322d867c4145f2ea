"""``python -m lookbench_pipeline.cli``: the ``lookbench`` command."""

from .main import main

raise SystemExit(main())
