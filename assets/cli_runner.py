"""What ``lookbench build`` / ``demo`` / ``backfill`` run: the Dagster release job, in process.

The library's command line (:mod:`lookbench_pipeline.cli`) sits below this layer and never imports it: it finds
:func:`load` through the ``lookbench.build_runner`` entry point that pyproject.toml declares (a source checkout
that is not pip-installed falls back to the same name). Nothing here is imported for the consumer commands, so
``releases``, ``info``, ``pull`` and ``evaluate`` run without Dagster.
"""

from __future__ import annotations

import warnings
from types import ModuleType


def load() -> ModuleType:
    """:mod:`assets.runner` (``run_release``, ``rebuild_window``, ``RunFailed``), imported with Dagster's Beta and
    Preview warnings (about Dagster's own API, nothing a user can act on) filtered in the current warnings context:
    call it inside ``warnings.catch_warnings()`` (importing the asset definitions issues those warnings)."""
    from dagster import BetaWarning, PreviewWarning

    warnings.filterwarnings("ignore", category=BetaWarning)
    warnings.filterwarnings("ignore", category=PreviewWarning)
    from . import runner

    return runner
