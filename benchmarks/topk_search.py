"""Exact top-k search: 10,000 queries x 200,000 gallery vectors x 1,024 dimensions, top-100.

Compares, each in its own child process (so each peak RSS is its own):

* ``bare``: the bare matrix product, ``Q @ G.T`` computed in the same blocks as the search (1,024 x 16,384) into
  one reused buffer, nothing else;
* ``bare-wide``: the bare matrix product in blocks of 1,024 queries x the whole gallery (the fastest BLAS shape;
  an 819 MB buffer);
* ``search``: ``lookbench_pipeline.search.topk`` (numpy backend: the product plus the top-k selection); the time
  its block products take inside the same run is also measured (a ratio that load changes between the child
  processes cannot skew);
* ``faiss``: ``faiss.IndexFlatIP`` (add + search), FAISS's exact flat index.

Vectors are random, L2-normalised float32 (seeded), generated in the child before the clock starts. Peak memory is
the child's peak resident set size (``getrusage``), inputs included (Q 41 MB + G 819 MB); the resident size after
generating the inputs is printed beside it. The search's results
are checked against FAISS's on the first 500 queries (same indices up to exact float ties).

    .venv/bin/python benchmarks/topk_search.py                 # the full size (several minutes on 2 cores)
    .venv/bin/python benchmarks/topk_search.py --queries 2000 --gallery 50000   # a quick run
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def data(nq: int, ng: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random unit vectors, generated in chunks so that the inputs are all the memory they take."""
    rng = np.random.default_rng(seed)
    out = []
    for n in (ng, nq):
        a = np.empty((n, d), np.float32)
        for s in range(0, n, 8192):
            c = rng.standard_normal((min(8192, n - s), d), dtype=np.float32)
            a[s : s + len(c)] = c / np.linalg.norm(c, axis=1, keepdims=True)
        out.append(a)
    return out[1], out[0]


def rss_now() -> int:
    """The current resident set size in bytes (Linux /proc)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def child(mode: str, nq: int, ng: int, d: int, k: int, out: Path) -> None:
    q, g = data(nq, ng, d)
    rss_inputs = rss_now()
    load0 = os.getloadavg()[0]
    t = time.perf_counter()
    idx = None
    if mode == "bare":
        buf = np.empty((1024, 16384), np.float32)
        for s in range(0, nq, 1024):
            for o in range(0, ng, 16384):
                qq, gg = q[s : s + 1024], g[o : o + 16384]
                np.matmul(qq, gg.T, out=buf[: len(qq), : len(gg)])
    elif mode == "bare-wide":
        buf = np.empty((1024, ng), np.float32)
        for s in range(0, nq, 1024):
            qq = q[s : s + 1024]
            np.matmul(qq, g.T, out=buf[: len(qq)])
    elif mode == "search":
        from lookbench_pipeline import search

        inner = [0.0]

        def timed(*args, **kw):  # the time spent in the block products, measured inside the same run
            t0 = time.perf_counter()
            r = np.matmul(*args, **kw)
            inner[0] += time.perf_counter() - t0
            return r

        search._matmul = timed
        idx = search.topk(q, g, k).indices
    elif mode == "faiss":
        import faiss

        index = faiss.IndexFlatIP(d)
        index.add(g)
        _, idx = index.search(q, k)
    else:
        raise SystemExit(f"unknown mode {mode}")
    seconds = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if idx is not None:
        np.save(out.with_suffix(".npy"), idx[:500])
    out.write_text(json.dumps({"mode": mode, "seconds": seconds, "peak_rss_bytes": peak,
                               "matmul_seconds": inner[0] if mode == "search" else None,
                               "rss_after_inputs_bytes": rss_inputs, "load_before": load0,
                               "load_after": os.getloadavg()[0]}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--gallery", type=int, default=200_000)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--modes", default="search,bare,bare-wide,faiss")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.queries, a.gallery, a.dim, a.k, Path(a.out))
        return 0
    import numpy

    print(f"{a.queries:,} queries x {a.gallery:,} gallery x {a.dim} dims, top-{a.k}; numpy {numpy.__version__}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()}")
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in a.modes.split(","):
            out = Path(tmp) / f"{mode}.json"
            subprocess.run([sys.executable, __file__, "--child", mode, "--out", str(out), "--queries", str(a.queries),
                            "--gallery", str(a.gallery), "--dim", str(a.dim), "--k", str(a.k)], check=True)
            res[mode] = json.loads(out.read_text())
            r = res[mode]
            inner = (f"   (of which block products {r['matmul_seconds']:.2f} s: {r['seconds'] / r['matmul_seconds']:.2f}x)"
                     if r.get("matmul_seconds") else "")
            print(f"  {mode:10s} {r['seconds']:8.2f} s   peak RSS {r['peak_rss_bytes'] / 1e9:5.2f} GB "
                  f"(inputs {r['rss_after_inputs_bytes'] / 1e9:4.2f} GB)   load {r['load_before']:.1f} -> "
                  f"{r['load_after']:.1f}{inner}", flush=True)
        if "search" in res and "faiss" in res:
            a_i, b_i = np.load(Path(tmp) / "search.npy"), np.load(Path(tmp) / "faiss.npy")
            print(f"  search vs faiss, first 500 queries: {np.mean(a_i == b_i) * 100:.3f}% identical indices")
    bare = [res[m]["seconds"] for m in ("bare", "bare-wide") if m in res]
    if bare and "search" in res:
        print(f"  search / fastest bare product: {res['search']['seconds'] / min(bare):.2f}x")
    if bare and "faiss" in res:
        print(f"  faiss  / fastest bare product: {res['faiss']['seconds'] / min(bare):.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
