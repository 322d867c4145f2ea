"""Cost of the cut-out candidate search (`foreground.cutout_candidates`) as the number of images grows.

    .venv/bin/python benchmarks/cutout_index.py [--sizes 10000 100000 300000] [--realdata ../shared/realdata]

Two inputs per size, every image a cut-out candidate (uniform background, 8-256 textured blocks inside its subject,
the share a packshot has):

* ``distinct``: every image its own picture: block codes drawn at random (few keys shared: the index's best case);
* ``derived``: every image derived from one of the real photos' signatures (the intake's block codes of the
  studio and street photos in ../shared/realdata), each code with a few bits flipped at random: thousands of
  images per real picture, so most keys are shared by far more images than `MAX_POSTING` (its worst case: many
  near-copies of few pictures; the stop-word rule is what bounds the work).

Prints the wall time, the candidate pairs and the peak memory of the search (tracemalloc, numpy's allocations).
"""

from __future__ import annotations

import argparse
import os
import time
import tracemalloc
from pathlib import Path

import numpy as np

from lookbench_pipeline import foreground as fg
from lookbench_pipeline.images import decode

M = fg.BLOCK_GRID * fg.BLOCK_GRID


def _sig(uniform: bool) -> str:
    return ("01" if uniform else "00") + "00" * (3 + 4 * fg.GRID * fg.GRID)


def _encode(code: np.ndarray, inside: np.ndarray) -> str:
    return (code.astype(">u2").tobytes() + np.packbits(inside).tobytes()).hex()


def distinct(n: int, rng: np.random.Generator) -> tuple[list[str], list[str]]:
    sigs, codes = [], []
    for _ in range(n):
        code = rng.integers(1, 65536, M)
        inside = np.zeros(M, bool)
        inside[rng.choice(M, rng.integers(8, M), replace=False)] = True
        sigs.append(_sig(True))
        codes.append(_encode(code, inside))
    return sigs, codes


def derived(n: int, rng: np.random.Generator, base: list[tuple[np.ndarray, np.ndarray]]) -> tuple[list[str], list[str]]:
    sigs, codes = [], []
    for i in range(n):
        code, inside = base[i % len(base)]
        flip = (rng.random((M, 16)) < 0.03) * (1 << np.arange(16))
        c = np.where(code != 0, code ^ flip.sum(axis=1), 0)
        sigs.append(_sig(True))
        codes.append(_encode(c, inside if inside.sum() >= 8 else np.ones(M, bool)))
    return sigs, codes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 300_000])
    ap.add_argument("--realdata", default=str(Path(__file__).resolve().parents[2] / "shared/realdata"))
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    base = []
    for d in ("studio", "street"):
        for p in sorted((Path(args.realdata) / "images" / d).iterdir()):
            h = fg.block_codes(decode(p.read_bytes()).rgb)
            base.append((fg._codes(h), fg._inside(h)))
    print(f"load average {os.getloadavg()[0]:.1f}; {len(base)} real pictures for the derived input")
    print("| images | input | wall s | candidate pairs | peak MB |")
    print("|---|---|---|---|---|")
    for n in args.sizes:
        for name, make in (("distinct", lambda: distinct(n, rng)), ("derived", lambda: derived(n, rng, base))):
            sigs, codes = make()
            tracemalloc.start()
            t = time.perf_counter()
            pairs = fg.cutout_candidates(sigs, codes)
            wall = time.perf_counter() - t
            peak = tracemalloc.get_traced_memory()[1] / 1e6
            tracemalloc.stop()
            print(f"| {n:,} | {name} | {wall:.1f} | {len(pairs):,} | {peak:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
