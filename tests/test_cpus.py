"""The default worker count of the CPU-bound pools (lookbench_pipeline.cpus)."""

import os

from lookbench_pipeline import cpus
from lookbench_pipeline.cpus import usable_cpus


def test_requested_counts_win_and_are_at_least_one():
    assert usable_cpus(3) == 3 and usable_cpus(0) == 1 and usable_cpus(-2) == 1


def test_default_is_the_affinity_mask_else_the_cpu_count(monkeypatch):
    assert usable_cpus() == len(os.sched_getaffinity(0)) >= 1
    monkeypatch.delattr(cpus.os, "sched_getaffinity")
    monkeypatch.setattr(cpus.os, "cpu_count", lambda: None)
    assert usable_cpus() == 1
    monkeypatch.setattr(cpus.os, "cpu_count", lambda: 5)
    assert usable_cpus() == 5
