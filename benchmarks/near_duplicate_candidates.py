"""Where the near-duplicate search's work goes: candidate pairs counted exactly, by bucket size.

The candidate pairs of the plan ``hamming.pairs_within`` chooses, counted from its tables, split by the size of the
smaller bucket of each bucket pair; optionally a local search over which bits go to which table.

    .venv/bin/python benchmarks/near_duplicate_candidates.py [--sizes 1000000 10000000] [--kinds uniform clustered]
        [--radius 8] [--reassign 0] [--seed 0]

For each code set and size (``lookbench_pipeline.testing.codes``, the same seeded sets as
``benchmarks/near_duplicates.py``), the plan ``pairs_within`` would run (entropy-dealt bits) and, per table of ``w``
bits at threshold ``tau``, with ``c[b]`` the codes in bucket ``b`` (the table's own counting sort,
``hamming._bucket``): the candidate pairs ``sum_b c[b] (c[b] - 1) / 2 + sum_{f: 1 <= |f| <= tau} sum_b c[b]
c[b ^ f] / 2`` — every pair the search compares (a pair that an earlier table already found is compared again and
dropped, so this is the search's work, not its output), against the uniform model's ``n^2 / 2^(w+1) V(w, tau)``;
and the share of those candidates whose smaller bucket holds < 64, 64-255, 256-1023 and >= 1024 codes (what a
second-level index inside crowded bucket pairs could reach).

``--reassign K``: K steps of a local search (swap two bits between tables, or a table's bit with an unused one; keep
the swap when the two tables' candidate pairs on a 1,000,000-code sample go down), then the exact candidates of
the new assignment: how much a data-aware assignment of the bits to tables (GPH's dimension partitioning) would save.
Counting, not timing: the machine's load does not matter. Memory: the codes, one table (``2^w`` int64 and the codes
three times), ``2^w`` float64 counts.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from numba import njit

from lookbench_pipeline.hamming import _bucket, _flip_masks, _key_luts, _volume, bit_entropy_order, plan
from lookbench_pipeline.testing.codes import clustered_codes, uniform_codes

KINDS = {"uniform": uniform_codes, "clustered": clustered_codes}
EDGES = [0, 64, 256, 1024, 1 << 62]


def bucket_sizes(h: np.ndarray, bits: tuple[int, ...]) -> np.ndarray:
    """Codes per key of a table over ``bits``: float64 (2^len(bits),)."""
    _, starts, _, _ = _bucket(h, _key_luts(bits), 1 << len(bits))
    return np.diff(starts).astype(np.float64)


@njit
def _split(c: np.ndarray, present: np.ndarray, flips: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """``sum_b c[b] (c[b] - 1) / 2 + sum_f sum_b c[b] c[b ^ f] / 2`` over the non-empty buckets ``present``, each
    term binned by the smaller of its two buckets (``edges``)."""
    split = np.zeros(len(edges) - 1)
    for b in present:
        k = np.searchsorted(edges, c[b], side="right") - 1
        split[k] += c[b] * (c[b] - 1) / 2
        for f in flips:
            other = c[b ^ f]
            k = np.searchsorted(edges, min(c[b], other), side="right") - 1
            split[k] += c[b] * other / 2
    return split


def candidates(c: np.ndarray, w: int, tau: int) -> tuple[float, np.ndarray]:
    """Candidate pairs of one table of ``w`` bits at threshold ``tau`` from its bucket sizes ``c``, and their split
    by the smaller bucket (``EDGES``)."""
    split = _split(c, np.flatnonzero(c), _flip_masks(w, tau), np.array(EDGES, dtype=np.float64))
    return float(split.sum()), split


def proxy(sample: np.ndarray, bits: list[int], tau: int) -> float:
    """Candidate pairs of ``sample`` for a table over ``bits`` at threshold ``tau``: the local search's objective."""
    return candidates(bucket_sizes(sample, tuple(bits)), len(bits), tau)[0]


def reassign(h: np.ndarray, groups: list[list[int]], taus: list[int], steps: int, seed: int) -> list[list[int]]:
    """A local search over the bit-to-table assignment (see the module docstring); returns the new groups."""
    rng = np.random.default_rng(seed)
    sample = h[rng.choice(len(h), min(len(h), 1_000_000), replace=False)]
    groups = [list(g) for g in groups]
    unused = [b for b in range(64) if all(b not in g for g in groups)]
    cur = [proxy(sample, g, t) for g, t in zip(groups, taus)]
    for _ in range(steps):
        i = int(rng.integers(len(groups)))
        a = int(rng.integers(len(groups[i])))
        j = int(rng.integers(len(groups) + (1 if unused else 0)))
        if j == i:
            continue
        if j == len(groups):  # swap with an unused bit
            u = int(rng.integers(len(unused)))
            groups[i][a], unused[u] = unused[u], groups[i][a]
            new = proxy(sample, groups[i], taus[i])
            if new < cur[i]:
                cur[i] = new
            else:
                groups[i][a], unused[u] = unused[u], groups[i][a]
            continue
        b = int(rng.integers(len(groups[j])))
        groups[i][a], groups[j][b] = groups[j][b], groups[i][a]
        ni, nj = proxy(sample, groups[i], taus[i]), proxy(sample, groups[j], taus[j])
        if ni + nj < cur[i] + cur[j]:
            cur[i], cur[j] = ni, nj
        else:
            groups[i][a], groups[j][b] = groups[j][b], groups[i][a]
    return groups


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    ap.add_argument("--radius", type=int, default=8)
    ap.add_argument("--reassign", type=int, default=0, help="local search steps (0: none)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    totals: dict[tuple[str, int], float] = {}
    for kind in a.kinds:
        for n in a.sizes:
            h = KINDS[kind](n)
            p = plan(n, a.radius, bit_entropy_order(h))
            total, split = 0.0, np.zeros(len(EDGES) - 1)
            for bits, tau in p.tables:
                t, s = candidates(bucket_sizes(h, bits), len(bits), tau)
                total += t
                split += s
            uniform = sum(n * n / 2 ** (len(bits) + 1) * _volume(len(bits), tau) for bits, tau in p.tables)
            totals[(kind, n)] = total
            shares = ", ".join(f"{lo}-{hi - 1 if hi < EDGES[-1] else 'up'}: {x / total:.0%}"
                               for lo, hi, x in zip(EDGES, EDGES[1:], split))
            print(f"[{kind}] n={n:,}: tables (bits, tau) {[(len(b), t) for b, t in p.tables]}; candidate pairs "
                  f"{total:.3g} ({total / uniform:.1f}x the uniform model's {uniform:.3g}); by the smaller bucket of "
                  f"the pair: {shares}", flush=True)
            if a.reassign:
                t0 = time.process_time()
                groups = reassign(h, [list(b) for b, _ in p.tables], [t for _, t in p.tables], a.reassign, a.seed)
                new = sum(candidates(bucket_sizes(h, tuple(g)), len(g), tau)[0]
                          for g, (_, tau) in zip(groups, p.tables))
                print(f"[{kind}] n={n:,}: after {a.reassign} local search steps ({time.process_time() - t0:.0f} "
                      f"CPU-s): {new:.3g} candidate pairs ({new / total - 1:+.0%})", flush=True)
        for n1, n2 in zip(a.sizes, a.sizes[1:]):
            e = math.log(totals[(kind, n2)] / totals[(kind, n1)]) / math.log(n2 / n1)
            print(f"[{kind}] candidate pairs' exponent {n1:,} -> {n2:,}: {e:.2f}")


if __name__ == "__main__":
    main()
