"""Ctrl-C before and around a command of the command line: one line and exit 130, never a Python traceback. Light
on purpose (the standard library only, and no other module of the package), so the ``lookbench`` console script
(:mod:`lookbench_pipeline.console`) and ``python -m lookbench_pipeline.cli`` (the ``cli`` package's
``__init__`` and ``__main__``) can use it before NumPy, PyArrow and pydantic are imported."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator

EXIT_INTERRUPTED = 130
"""Ctrl-C (128 + SIGINT), the code :mod:`lookbench_pipeline.cli.main` returns too."""


def _interrupted_while_loading(signum: int, frame: object) -> None:
    """SIGINT while the command line is imported: nothing has run yet, so there is nothing to clean up or resume;
    one line and exit 130 at once (``os._exit``: a KeyboardInterrupt raised inside a library's import could be
    caught or leave a half-imported extension to the interpreter's teardown)."""
    os.write(2, b"\ninterrupted\n")
    os._exit(EXIT_INTERRUPTED)


@contextlib.contextmanager
def quiet_ctrl_c_while_loading(enabled: bool = True) -> Iterator[None]:
    """While the block runs (the command line's imports), SIGINT ends the process at once with one line and exit
    130; then Python's own handler is back (KeyboardInterrupt). Nothing changes when ``enabled`` is false or SIGINT
    is not Python's own handler: a SIGINT the process was started to ignore (``nohup``, ``&`` in a script) stays
    ignored, and a host's handler stays."""
    ours = enabled and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if ours:
        signal.signal(signal.SIGINT, _interrupted_while_loading)
    try:
        yield
    finally:
        if ours:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def run_quietly(run: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """``run(argv)`` (the command line's ``main``) with a KeyboardInterrupt outside the command itself (parsing the
    options, setting up logging) one line and exit 130 too; the traceback only with ``--debug``."""
    args = sys.argv[1:] if argv is None else argv
    try:
        return run(argv)
    except KeyboardInterrupt:
        if "--debug" in args:
            raise
        print("\ninterrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
