"""The demo and its test doubles, kept out of the production modules: the demo shop (:mod:`.shop`, generated pages
and photos), the static server that serves it and replays saved pages (:mod:`.serve`), the scripted image endpoint
(:mod:`.aigen_server`) and the scripted OpenAI-compatible chat server (:mod:`.scripted_openai`).

Only the stages (:mod:`lookbench_pipeline.pipeline`), the few marked places docs/ARCHITECTURE.md ("Import rules")
names, and the tests import this package; the import-linter contracts in pyproject.toml enforce it
(tests/test_architecture.py).
"""

import sys
import warnings
from types import ModuleType


def _moved(old: str, module: ModuleType, importing_as: str) -> None:
    """For the deprecated module ``old`` (one release): warn, and make importing it hand back ``module`` itself
    (the same object, so every name, private ones included, and monkeypatching behave as before). A module run
    as ``python -m old`` (``importing_as == "__main__"``) is left in place."""
    warnings.warn(f"{old} moved to {module.__name__}; import it from there", DeprecationWarning, stacklevel=3)
    if importing_as != "__main__":
        sys.modules[importing_as] = module
