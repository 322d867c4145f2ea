"""The ``lookbench`` console script's entry point (pyproject.toml, ``[project.scripts]``): light on purpose.

The command line (:mod:`lookbench_pipeline.cli`) imports NumPy, PyArrow and pydantic, which takes a good part of a
second; a Ctrl-C in that time would end in a Python traceback, since the command's own handler (one line, exit
130) is not reached yet. So this module imports only the standard library (and
:mod:`lookbench_pipeline.early_interrupt`, which does too), and :func:`main` makes Ctrl-C one line and exit 130
before it imports the command line. Keep it so: no import of the package's heavy modules at module level
(tests/test_console.py checks the entry point's import). ``python -m lookbench_pipeline.cli`` does the same through
``early_interrupt`` (the ``cli`` package's ``__init__`` and ``__main__``)."""

from __future__ import annotations

from .early_interrupt import EXIT_INTERRUPTED, quiet_ctrl_c_while_loading, run_quietly

__all__ = ["EXIT_INTERRUPTED", "main"]


def main(argv: list[str] | None = None) -> int:
    """``lookbench``: :func:`lookbench_pipeline.cli.main` with Ctrl-C one line (``interrupted``) and exit 130 from
    the start. While the command line is imported, SIGINT ends the process at once; then Python's own handler is
    back (KeyboardInterrupt), so a running command is interrupted as before (``pull`` keeps its ``.part`` files, the
    traceback only with ``--debug``). A SIGINT the process was started to ignore (``nohup``, ``&`` in a script)
    stays ignored."""
    with quiet_ctrl_c_while_loading():
        from .cli.main import main as run
    return run_quietly(run, argv)
