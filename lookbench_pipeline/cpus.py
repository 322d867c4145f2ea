"""The number of CPUs this process may run on: the default worker count of the CPU-bound thread pools
(``hamming.pairs_within``, ``vlm.fit_inputs``)."""

from __future__ import annotations

import os


def usable_cpus(requested: int | None = None) -> int:
    """``requested`` (at least 1) when given, else the CPUs in this process's affinity mask (Linux; elsewhere
    ``os.cpu_count()``), at least 1."""
    if requested is not None:
        return max(1, int(requested))
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)
