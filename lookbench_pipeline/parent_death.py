"""A child process that dies with its parent: the one owner of Linux's ``prctl(PR_SET_PDEATHSIG)`` request.

Used by the crawl child (``lookbench_crawlers.extensions.DieWithParent``) and by a Dagster step process
(``assets/step_process.py``), so that ``kill -9`` of the process that started them leaves no orphan behind.
"""

from __future__ import annotations

import ctypes
import signal
import sys

PR_SET_PDEATHSIG = 1
"""The ``prctl`` option (``linux/prctl.h``)."""


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send ``sig`` (default SIGKILL) to this process when its parent *thread* exits
    (``prctl(2)``, ``PR_SET_PDEATHSIG``). Only the direct parent counts, and a parent that died before the request
    is not noticed: the caller compares ``os.getppid()`` with the parent it expects afterwards.

    Raises:
        OSError: not on Linux, no C library to call, or the kernel refused (its errno).
    """
    if not sys.platform.startswith("linux"):
        raise OSError(f"PR_SET_PDEATHSIG is Linux only (this is {sys.platform})")
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        failed = libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0
    except AttributeError as exc:  # a C library without prctl
        raise OSError(f"prctl is not available: {exc}") from None
    if failed:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


__all__ = ["PR_SET_PDEATHSIG", "die_with_parent"]
