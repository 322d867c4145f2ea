"""Old import paths kept for one release: a bottom module that imports nothing of the library.

A module that moved leaves a thin module at its old path calling :func:`moved`; a name that moved out of a module
that still exists is reached through that module's ``__getattr__`` (``detect.demo_detector``,
``legacy.write_demo_*``). tests/test_architecture.py checks every old path still imports, with a warning.
"""

import sys
import warnings
from types import ModuleType


def moved(old: str, module: ModuleType, importing_as: str) -> None:
    """For the deprecated module ``old`` (one release): warn, and make importing it hand back ``module`` itself
    (the same object, so every name, private ones included, and monkeypatching behave as before). A module run
    as ``python -m old`` (``importing_as == "__main__"``) is left in place."""
    warnings.warn(f"{old} moved to {module.__name__}; import it from there", DeprecationWarning, stacklevel=3)
    if importing_as != "__main__":
        sys.modules[importing_as] = module
