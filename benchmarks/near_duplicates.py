"""All pairs within Hamming distance <= 8 among 64-bit pHashes, at 1M and 10M codes: lookbench_pipeline.hamming
against brute force and FAISS (IndexBinaryFlat, IndexBinaryMultiHash) in the same run.

    .venv/bin/python benchmarks/near_duplicates.py [--sizes 1000000 10000000] [--kinds uniform clustered]
        [--radius 8] [--sample 20000] [--peer-n 100000] [--queries 300] [--threads N] [--repeats 3]
    .venv/bin/python benchmarks/near_duplicates.py --phases [--sizes ...] [--kinds ...]
    .venv/bin/python benchmarks/near_duplicates.py --accidental [--sizes ...] [--pictures 1000000]

Code sets (lookbench_pipeline.testing.codes, seeded): ``uniform`` (random bits, 5% near copies of others, 1–6 bits)
and ``clustered`` (pHash-like: biased, correlated bits calibrated on the real photos' pHashes, 30% near copies in
families, popular layouts). For each kind:

1. exactness on a full set of ``--sample`` codes: our pairs == every pair compared in numpy == FAISS flat
   ``range_search`` == FAISS ``IndexBinaryMultiHash`` (3 x 21 bits, 2 flips: exact by the pigeonhole bound);
2. the peers' speed on ``--peer-n`` codes, ours on the same codes;
3. each size in its own process (so that the peak RSS is that run's): ``--repeats`` searches (the median wall and CPU
   seconds reported, with the range: a 0.5 s run moves by 20% on a shared machine), peak RSS, pairs, and exactness
   on a sample: ``--queries`` random codes compared with all ``n`` codes in numpy, their pairs == ours;
4. the cost exponent between the sizes, ``log(t2 / t1) / log(n2 / n1)``, on the median wall and CPU times, and the
   output-sensitive one, ``log(t2 / t1) / log((n2 + P2) / (n1 + P1))`` with ``P`` the pairs found: an exact search
   reads every code and writes every pair, so its cost is at least linear in ``n + P``.

``--phases`` times the parts of one search instead (each size in its own process, one run each): the tables' joins
at radius 0 with the plan chosen for ``--radius`` (the same candidate pairs compared, no hits: the comparisons
alone), the joins at ``--radius``, and the sort and unpacking of the pairs found, with the exponent of each part.

``--accidental`` counts the pairs distinct pictures make by chance, with no near copy among them: all pairs within
``--radius`` among ``--pictures`` pictures drawn with copies off, their share ``p`` of all pairs, and the
``p * m * (m - 1) / 2`` chance pairs it implies among the ``m`` distinct pictures of each size (70% of a clustered
set, all of a uniform one): for a fixed picture distribution they grow with ``m`` squared. Clustered codes are
measured with their layouts and without (``template_share=0``).

FAISS is optional (``pip install faiss-cpu``, the ``faiss`` extra); without it the peers are skipped with a note.
The machine's load average is printed before and after: on a shared machine the wall time is longer than CPU time /
threads, so both are printed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from lookbench_pipeline import hamming
from lookbench_pipeline.cpus import usable_cpus
from lookbench_pipeline.dedup import near_pairs
from lookbench_pipeline.hamming import bit_entropy_order, pairs_within, plan
from lookbench_pipeline.testing.codes import clustered_codes, uniform_codes

KINDS = {"uniform": uniform_codes, "clustered": clustered_codes}


def faiss_pairs(h: np.ndarray, radius: int, kind: str) -> np.ndarray | None:
    """Pairs by FAISS range search (``flat`` or ``multihash``), sorted like ours; None without faiss."""
    try:
        import faiss
    except ImportError:
        return None
    codes = np.ascontiguousarray(h).view(np.uint8).reshape(-1, 8)
    if kind == "flat":
        index = faiss.IndexBinaryFlat(64)
    else:
        index = faiss.IndexBinaryMultiHash(64, 3, 21)  # 63 bits in 3 substrings: a pair within 8 bits is within
        index.nflip = 2  # 2 bits on one of them (pigeonhole), so probing 2 flips is exact
    index.add(codes)
    lims, dist, labels = index.range_search(codes, radius + 1)  # FAISS keeps distances < radius
    i = np.repeat(np.arange(len(h)), np.diff(lims).astype(np.int64))
    labels = labels.astype(np.int64)
    keep = i < labels
    out = np.stack([i[keep], labels[keep], dist[keep].astype(np.int64)], axis=1)
    return out[np.lexsort((out[:, 1], out[:, 0]))]


def warm_up(radius: int) -> None:
    """Load (or compile) every numba kernel outside the timings: 100,000 codes take a table at threshold 2 joined
    centre by centre and tables at threshold 1 bucket by bucket; 2,000 take brute force or small tables."""
    pairs_within(uniform_codes(2000), radius)
    pairs_within(uniform_codes(100_000), radius)


def timed(fn, *args):
    t, c = time.perf_counter(), time.process_time()
    out = fn(*args)
    return out, time.perf_counter() - t, time.process_time() - c


def sample_check(h: np.ndarray, pairs: np.ndarray, radius: int, queries: int, seed: int = 7) -> tuple[int, bool]:
    """Random codes compared with every code in numpy; True when their pairs are exactly ours."""
    rng = np.random.default_rng(seed)
    q = np.sort(rng.choice(len(h), size=min(queries, len(h)), replace=False))
    want = set()
    for s in range(0, len(q), 2):
        block = q[s:s + 2]
        d = np.bitwise_count(h[block][:, None] ^ h[None, :])
        for qi, row in zip(block.tolist(), d):
            for j in np.nonzero(row <= radius)[0].tolist():
                if j != qi:
                    want.add((min(qi, j), max(qi, j), int(row[j])))
    qs = set(q.tolist())
    mask = np.isin(pairs[:, 0], q) | np.isin(pairs[:, 1], q)
    got = {(int(a), int(b), int(c)) for a, b, c in pairs[mask]}
    assert all(a in qs or b in qs for a, b, _ in got)
    return len(want), got == want


def child(kind: str, n: int, radius: int, queries: int, threads: int | None, repeats: int) -> None:
    warm_up(radius)
    h = KINDS[kind](n)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    walls, cpus = [], []
    for _ in range(repeats):
        pairs = None  # the previous result freed first: the peak is one search's
        pairs, wall, cpu = timed(lambda: pairs_within(h, radius, threads=threads))
        walls.append(wall)
        cpus.append(cpu)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    wall, cpu = float(np.median(walls)), float(np.median(cpus))
    p = plan(n, radius, bit_entropy_order(h))
    sampled, ok = sample_check(h, pairs, radius, queries)
    print(json.dumps({"kind": kind, "n": n, "pairs": len(pairs), "wall_s": wall, "cpu_s": cpu, "walls_s": walls,
                      "cpus_s": cpus, "peak_rss_mb": peak, "rss_before_mb": before,
                      "tables": [(len(b), t) for b, t in p.tables], "sample_queries": queries,
                      "sample_pairs": sampled, "sample_exact": ok}))


def phases_child(kind: str, n: int, radius: int, threads: int | None) -> None:
    """One search taken apart: joins at radius 0 (comparisons alone) and at ``radius``, then the sort of the pairs."""
    warm_up(radius)
    h = KINDS[kind](n)
    p = plan(n, radius, bit_entropy_order(h))
    workers = usable_cpus(threads)
    res: dict = {"kind": kind, "n": n, "tables": [(len(b), t) for b, t in p.tables]}
    with ThreadPoolExecutor(workers) as ex:
        found: list[np.ndarray] = []  # the pairs at ``radius``, sorted last
        for r in (radius, 0):  # the search's own radius first: the first join also pays for first-touched memory
            parts: list[np.ndarray] = found if r == radius else []
            t = time.perf_counter()
            hamming._join_tables(h, r, list(p.tables), ex, workers, hamming._Collector(), parts)
            res[f"join_r{r}_s"] = time.perf_counter() - t
        t = time.perf_counter()
        pairs = hamming._sorted_pairs(found, n, ex, workers)
        res["sort_s"] = time.perf_counter() - t
    res["pairs"] = len(pairs)
    print(json.dumps(res))


def accidental(a: argparse.Namespace) -> None:
    """The chance pairs of ``a.pictures`` distinct pictures (copies off), and the pairs they imply per size."""
    m = a.pictures
    sets = {"uniform": (lambda: uniform_codes(m, near_share=0.0), 1.0),
            "clustered": (lambda: clustered_codes(m, family_share=0.0), 0.7),
            "clustered, no layouts": (lambda: clustered_codes(m, family_share=0.0, template_share=0.0), 0.7)}
    for name, (make, distinct) in sets.items():
        h = make()
        hits = len(pairs_within(h, a.radius, threads=a.threads))
        p = hits / (m * (m - 1) / 2)
        implied = "; ".join(f"n={n:,} ({int(n * distinct):,} distinct): {p * (n * distinct) ** 2 / 2:,.0f}"
                            for n in a.sizes)
        print(f"[{name}] {hits:,} pairs within {a.radius} bits among {m:,} distinct pictures: p = {p:.3g} a pair; "
              f"chance pairs implied: {implied}", flush=True)


def phases(a: argparse.Namespace) -> None:
    for kind in a.kinds:
        rows = []
        for n in a.sizes:
            cmd = [sys.executable, __file__, "--phases-child", kind, str(n), "--radius", str(a.radius)]
            if a.threads:
                cmd += ["--threads", str(a.threads)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
            r = rows[-1]
            print(f"[{kind}] n={n:,}: joins at radius 0 {r['join_r0_s']:.2f} s, at radius {a.radius} "
                  f"{r[f'join_r{a.radius}_s']:.2f} s; sort of {r['pairs']:,} pairs {r['sort_s']:.2f} s; tables "
                  f"{r['tables']}; load average {os.getloadavg()[0]:.1f}", flush=True)
        for r1, r2 in zip(rows, rows[1:]):
            span = math.log(r2["n"] / r1["n"])
            ex = {k: math.log(r2[k] / r1[k]) / span for k in ("join_r0_s", f"join_r{a.radius}_s", "sort_s")}
            parts = ", ".join(f"{k} {v:.2f}" for k, v in ex.items())
            print(f"[{kind}] exponents {r1['n']:,} -> {r2['n']:,}: {parts}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    ap.add_argument("--radius", type=int, default=8)
    ap.add_argument("--sample", type=int, default=20_000)
    ap.add_argument("--peer-n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=3, help="searches per size; the median is reported")
    ap.add_argument("--child", nargs=2, metavar=("KIND", "N"), help=argparse.SUPPRESS)
    ap.add_argument("--phases", action="store_true", help="time the joins (radius 0 and --radius) and the sort apart")
    ap.add_argument("--phases-child", nargs=2, metavar=("KIND", "N"), help=argparse.SUPPRESS)
    ap.add_argument("--accidental", action="store_true",
                    help="the chance pairs of distinct pictures (no copies), measured on random pairs")
    ap.add_argument("--pictures", type=int, default=1_000_000, help="distinct pictures drawn by --accidental")
    a = ap.parse_args()
    r = a.radius
    if a.phases_child:
        phases_child(a.phases_child[0], int(a.phases_child[1]), r, a.threads)
        return
    if a.phases or a.accidental:
        print(f"{os.cpu_count()} CPUs; load average at start {os.getloadavg()}; radius {r}")
        phases(a) if a.phases else accidental(a)
        return
    if a.child:
        child(a.child[0], int(a.child[1]), r, a.queries, a.threads, a.repeats)
        return
    print(f"{os.cpu_count()} CPUs; load average at start {os.getloadavg()}; radius {r}; threads "
          f"{a.threads or 'all CPUs'}")
    warm_up(r)
    results: dict[tuple[str, int], dict] = {}
    for kind in a.kinds:
        s = KINDS[kind](a.sample, seed=2)
        ours, t_ours, _ = timed(lambda: pairs_within(s, r, threads=a.threads))
        brute, t_brute, _ = timed(near_pairs, s, r)
        line = (f"[{kind}] full check on {a.sample:,} codes: ours {len(ours):,} pairs in {t_ours:.2f} s; brute force "
                f"(numpy) {len(brute):,} in {t_brute:.2f} s; identical {np.array_equal(ours, brute)}")
        for peer in ("flat", "multihash"):
            fp = faiss_pairs(s, r, peer)
            line += "; FAISS not installed" if fp is None else f"; FAISS {peer} identical {np.array_equal(fp, ours)}"
            if fp is None:
                break
        print(line, flush=True)
        p = KINDS[kind](a.peer_n, seed=3)
        ours, t_ours, c_ours = timed(lambda: pairs_within(p, r, threads=a.threads))
        print(f"[{kind}] {a.peer_n:,} codes: ours {len(ours):,} pairs in {t_ours:.2f} s wall ({c_ours:.2f} s CPU)",
              flush=True)
        for peer in ("flat", "multihash"):
            fp, t_fp, c_fp = timed(faiss_pairs, p, r, peer)
            if fp is None:
                print("  FAISS not installed: peers skipped")
                break
            print(f"  FAISS {peer}: {len(fp):,} pairs in {t_fp:.2f} s wall ({c_fp:.2f} s CPU), identical "
                  f"{np.array_equal(fp, ours)}; ours {t_fp / t_ours:.1f}x faster (wall)", flush=True)
        for n in a.sizes:
            cmd = [sys.executable, __file__, "--child", kind, str(n), "--radius", str(r), "--queries", str(a.queries),
                   "--repeats", str(a.repeats)]
            if a.threads:
                cmd += ["--threads", str(a.threads)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            res = json.loads(out.strip().splitlines()[-1])
            results[(kind, n)] = res
            print(f"[{kind}] n={n:,}: {res['pairs']:,} pairs in {res['wall_s']:.2f} s wall, {res['cpu_s']:.2f} s CPU "
                  f"(median of {len(res['walls_s'])}: wall {min(res['walls_s']):.2f}-{max(res['walls_s']):.2f} s); "
                  f"peak RSS {res['peak_rss_mb']:.0f} MB (the codes made: {res['rss_before_mb']:.0f} MB); "
                  f"tables (bits, tau) {res['tables']}; sample of "
                  f"{res['sample_queries']} codes against all: {res['sample_pairs']} pairs, exact "
                  f"{res['sample_exact']}; load average {os.getloadavg()[0]:.1f}", flush=True)
        for n1, n2 in zip(a.sizes, a.sizes[1:]):
            r1, r2 = results[(kind, n1)], results[(kind, n2)]
            ew = math.log(r2["wall_s"] / r1["wall_s"]) / math.log(n2 / n1)
            ec = math.log(r2["cpu_s"] / r1["cpu_s"]) / math.log(n2 / n1)
            grow = math.log((n2 + r2["pairs"]) / (n1 + r1["pairs"]))
            ow = math.log(r2["wall_s"] / r1["wall_s"]) / grow
            oc = math.log(r2["cpu_s"] / r1["cpu_s"]) / grow
            print(f"[{kind}] cost exponent {n1:,} -> {n2:,}: {ew:.2f} (wall), {ec:.2f} (CPU); against n + pairs "
                  f"(output-sensitive): {ow:.2f} (wall), {oc:.2f} (CPU); pairs grew with exponent "
                  f"{math.log(r2['pairs'] / max(1, r1['pairs'])) / math.log(n2 / n1):.2f}")
    print(f"load average at the end {os.getloadavg()}")


if __name__ == "__main__":
    main()
