"""All pairs within Hamming distance <= 8 among 64-bit pHashes: multi-index hashing against brute force and
FAISS's binary flat index.

    .venv/bin/python benchmarks/near_duplicates.py [--n 1000000] [--sample 20000] [--radius 8]

Hashes: uniformly random 64-bit codes, 5% of them replaced by near copies of others (1 to 6 random bit flips),
seeded. Checks that on the sample the pairs equal a brute-force search (and FAISS's range search), then times
the full set. Needs ``faiss-cpu`` for the comparison (``pip install faiss-cpu``); skipped with a note without it.
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from lookbench_pipeline.dedup import mih_plan, near_pairs, near_pairs_mih


def make_hashes(n: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    k = n // 20
    base = rng.integers(0, 2**63, size=n - k, dtype=np.uint64) * np.uint64(2) + \
        rng.integers(0, 2, size=n - k, dtype=np.uint64)
    src = rng.integers(0, n - k, size=k)
    flips = np.zeros(k, dtype=np.uint64)
    for _ in range(rng.integers(1, 7)):
        flips |= np.uint64(1) << rng.integers(0, 64, size=k).astype(np.uint64)
    return np.concatenate([base, base[src] ^ flips])


def faiss_pairs(h: np.ndarray, radius: int) -> np.ndarray | None:
    try:
        import faiss
    except ImportError:
        return None
    codes = np.ascontiguousarray(h).view(np.uint8).reshape(-1, 8)
    index = faiss.IndexBinaryFlat(64)
    index.add(codes)
    lims, dist, labels = index.range_search(codes, radius + 1)  # FAISS keeps distances < radius
    i = np.repeat(np.arange(len(h)), np.diff(lims).astype(np.int64))
    labels = labels.astype(np.int64)
    keep = i < labels
    return np.stack([i[keep], labels[keep], dist[keep]], axis=1).astype(np.int64)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--sample", type=int, default=20_000)
    ap.add_argument("--radius", type=int, default=8)
    args = ap.parse_args()
    r = args.radius

    s = make_hashes(args.sample, seed=2)
    t = time.perf_counter()
    brute = near_pairs(s, r)
    t_brute = time.perf_counter() - t
    t = time.perf_counter()
    mih = near_pairs_mih(s, r)
    t_mih_s = time.perf_counter() - t
    print(f"sample {args.sample}: brute force {len(brute)} pairs in {t_brute:.2f} s; MIH {len(mih)} pairs in "
          f"{t_mih_s:.2f} s; identical: {np.array_equal(brute, mih)}")
    t = time.perf_counter()
    fp = faiss_pairs(s, r)
    t_faiss = time.perf_counter() - t
    if fp is None:
        print("faiss-cpu not installed: FAISS comparison skipped")
    else:
        fp = fp[np.lexsort((fp[:, 1], fp[:, 0]))]
        print(f"sample {args.sample}: FAISS IndexBinaryFlat range_search {len(fp)} pairs in {t_faiss:.2f} s; "
              f"identical: {np.array_equal(fp, mih)}; MIH is {t_faiss / t_mih_s:.1f}x faster")

    h = make_hashes(args.n)
    t = time.perf_counter()
    pairs = near_pairs_mih(h, r)
    t_full = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"n {args.n}: plan {mih_plan(args.n, r)}; {len(pairs)} pairs within {r} bits in {t_full:.1f} s "
          f"(one thread); peak RSS {peak:.0f} MB")


if __name__ == "__main__":
    main()
