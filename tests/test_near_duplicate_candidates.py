"""benchmarks/near_duplicate_candidates.py counts what the near-duplicate search compares: its counts are checked
against comparing every pair's keys, so that the figures in BENCHMARKS.md rest on a checked count."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np

from lookbench_pipeline.testing.codes import clustered_codes

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks/near_duplicate_candidates.py"


def _load():
    spec = importlib.util.spec_from_file_location("near_duplicate_candidates", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _keys(h: np.ndarray, bits: tuple[int, ...]) -> np.ndarray:
    k = np.zeros(len(h), dtype=np.int64)
    for pos, b in enumerate(bits):
        k |= ((h >> np.uint64(b)) & np.uint64(1)).astype(np.int64) << (len(bits) - 1 - pos)
    return k


def test_candidate_counts_equal_the_pairs_whose_keys_are_within_the_threshold():
    mod = _load()
    h = clustered_codes(3000, seed=5)  # crowded keys: buckets of every size class
    for bits, tau in [((63, 10, 20, 30, 40, 50, 5, 7), 2), ((1, 2, 3, 4, 5, 6, 8, 9, 11, 12), 1), ((62, 61), 0)]:
        k = _keys(h, bits)
        d = np.bitwise_count(k[:, None] ^ k[None, :])
        want = int(np.triu(d <= tau, 1).sum())
        total, split = mod.candidates(mod.bucket_sizes(h, bits), len(bits), tau)
        assert total == want and split.sum() == want
        sample = mod.proxy(h, list(bits), tau)
        assert sample == want


def test_the_script_runs_and_reports_the_exponent():
    out = subprocess.run([sys.executable, str(SCRIPT), "--sizes", "3000", "6000", "--kinds", "clustered",
                          "--reassign", "3"], check=True, capture_output=True, text=True, cwd=ROOT).stdout
    assert "candidate pairs' exponent 3,000 -> 6,000" in out
    assert out.count("after 3 local search steps") == 2
