"""Run a measurement in a new Python process: for tests that use ``tracemalloc``.

CPython 3.11's ``tracemalloc.stop()`` races with threads that allocate through the raw allocator without the GIL
(CPython gh-128679, fixed in 3.12.9 / 3.13.2, never backported to 3.11): the test process, which by then holds
native threads of the libraries earlier tests loaded (polars', pulled in by ultralytics, among them), crashed with
a segmentation fault in such a thread in `tests/test_store_hostile.py::test_read_file_holds_one_copy_of_the_file`
in two CI runs. A fresh interpreter has no other thread.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
_CALL = ("import importlib, json, sys; m = importlib.import_module(sys.argv[1]); "
         "print(json.dumps(getattr(m, sys.argv[2])(*json.loads(sys.argv[3]))))")


def call(module: str, function: str, *args, timeout: float = 300):
    """``module.function(*args)`` called in a new interpreter (``tests/`` and the checkout importable), its result.

    ``args`` and the result go through JSON. Raises ``AssertionError`` with the child's output when it fails."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in [str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH")] if p)}
    r = subprocess.run([sys.executable, "-c", _CALL, module, function, json.dumps(args)], cwd=TESTS.parent,
                       env=env, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise AssertionError(f"{module}.{function} failed in a fresh interpreter (exit {r.returncode}):\n"
                             f"{r.stdout}\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])
