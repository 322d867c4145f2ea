"""The ``lookbench`` console script's entry point (pyproject.toml, ``[project.scripts]``): light on purpose.

The command line (:mod:`lookbench_pipeline.cli`) imports NumPy, PyArrow and pydantic, which takes a good part of a
second; a Ctrl-C in that time would end in a Python traceback, since the command's own handler (one line, exit
130) is not reached yet. So this module imports only the standard library, and :func:`main` makes Ctrl-C one line
and exit 130 before it imports the command line. Keep it so: no import of the package's other modules at module
level (tests/test_console.py checks the entry point's import)."""

from __future__ import annotations

import os
import signal
import sys

EXIT_INTERRUPTED = 130
"""Ctrl-C (128 + SIGINT), the code :mod:`lookbench_pipeline.cli.main` returns too."""


def _interrupted_while_loading(signum: int, frame: object) -> None:
    """SIGINT while the command line is imported: nothing has run yet, so there is nothing to clean up or resume;
    one line and exit 130 at once (``os._exit``: a KeyboardInterrupt raised inside a library's import could be
    caught or leave a half-imported extension to the interpreter's teardown)."""
    os.write(2, b"\ninterrupted\n")
    os._exit(EXIT_INTERRUPTED)


def main(argv: list[str] | None = None) -> int:
    """``lookbench``: :func:`lookbench_pipeline.cli.main` with Ctrl-C one line (``interrupted``) and exit 130 from
    the start. While the command line is imported, SIGINT ends the process at once; then Python's own handler is
    back (KeyboardInterrupt), so a running command is interrupted as before (``pull`` keeps its ``.part`` files, the
    traceback only with ``--debug``). A SIGINT the process was started to ignore (``nohup``, ``&`` in a script)
    stays ignored."""
    args = sys.argv[1:] if argv is None else argv
    ours = signal.getsignal(signal.SIGINT) is signal.default_int_handler  # not SIG_IGN, not a host's handler
    if ours:
        signal.signal(signal.SIGINT, _interrupted_while_loading)
    try:
        from .cli.main import main as run
    finally:
        if ours:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return run(argv)
    except KeyboardInterrupt:  # outside the command itself (parsing the options, setting up logging)
        if "--debug" in args:
            raise
        print("\ninterrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
