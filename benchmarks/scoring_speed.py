"""Scoring a LookBench-sized subset from cached embeddings: 2,345 queries against 60,000 gallery items.

    .venv/bin/python benchmarks/scoring_speed.py [--queries 2345] [--gallery 60000] [--dim 1024]

Embeddings are random unit vectors (float32), labels drawn from the taxonomy (category plus its attributes,
some "not visible"), seeded. Times the similarity matrix product and every metric (Coarse/Fine/item Recall@1,5,10,20
and graded nDCG@5) with ``metrics.evaluate_rankings``.
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from lookbench_pipeline.metrics import LabelCodes, evaluate_rankings
from lookbench_pipeline.taxonomy import Taxonomy


def labels(n: int, rng: np.random.Generator, tax: Taxonomy) -> tuple[list[str], list[dict], list[str]]:
    cats = list(tax.categories)
    c, a, items = [], [], []
    for _ in range(n):
        cat = cats[rng.integers(len(cats))]
        attrs = {}
        for name in tax.categories[cat].attributes:
            vals = [*tax.values[name], "not visible"]
            attrs[name] = vals[rng.integers(len(vals))]
        c.append(cat)
        a.append(attrs)
        items.append(f"i{rng.integers(n // 2)}")
    return c, a, items


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=2345)
    ap.add_argument("--gallery", type=int, default=60000)
    ap.add_argument("--dim", type=int, default=1024)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    tax = Taxonomy.load()
    q = rng.standard_normal((args.queries, args.dim), dtype=np.float32)
    g = rng.standard_normal((args.gallery, args.dim), dtype=np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    qc, qa, qi = labels(args.queries, rng, tax)
    gc, ga, gi = labels(args.gallery, rng, tax)
    t0 = time.perf_counter()
    codes = LabelCodes(qc, qa, gc, ga)
    t1 = time.perf_counter()
    sim = q @ g.T
    t2 = time.perf_counter()
    res = evaluate_rankings(sim, codes, [1, 5, 10, 20], 5, qi, gi)
    t3 = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{args.queries} queries x {args.gallery} gallery, dim {args.dim}")
    print(f"  label encoding {t1 - t0:.2f} s; similarity {t2 - t1:.2f} s; metrics {t3 - t2:.2f} s; "
          f"total {t3 - t0:.2f} s; peak RSS {peak:.0f} MB")
    print(f"  coarse_recall@1 {res['coarse_recall@1'].mean():.3f}, ndcg@5 {res['ndcg@5'].mean():.3f}")


if __name__ == "__main__":
    main()
