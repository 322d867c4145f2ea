"""pHash throughput and agreement: our reduced-decode pHash against ``imagehash.phash(Image.open(path))``, and the
whole intake path (fetch from a local HTTP server, sha256, decode, hash, store) in images per second per core.

    .venv/bin/python benchmarks/phash_speed.py [--n 200] [--width 1500] [--height 2000]

Images: procedurally drawn photos-like JPEGs (gradients, shapes, texture noise; quality 90), seeded, written to
a temporary folder. Single process, single thread, so figures are per core.
"""

from __future__ import annotations

import argparse
import hashlib
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import imagehash
import numpy as np
import requests
from PIL import Image, ImageDraw, ImageFilter

from lookbench_pipeline.images import PHASH_WORK_SIDE, color_signature, decode, fast_phash, phash_hex
from lookbench_pipeline.store import LocalStore, original_key


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_images(folder: Path, n: int, w: int, h: int) -> list[Path]:
    rng = np.random.default_rng(42)
    paths = []
    for i in range(n):
        base = np.linspace(0, 1, w)[None, :, None] * rng.uniform(0, 255, 3) + \
            np.linspace(0, 1, h)[:, None, None] * rng.uniform(0, 255, 3)
        im = Image.fromarray(np.clip(base / 2 + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8))
        d = ImageDraw.Draw(im)
        for _ in range(12):
            x, y = int(rng.integers(0, w)), int(rng.integers(0, h))
            d.ellipse([x, y, x + int(rng.integers(50, 600)), y + int(rng.integers(50, 800))],
                      fill=tuple(int(c) for c in rng.integers(0, 255, 3)))
        im = im.filter(ImageFilter.GaussianBlur(1.2))
        p = folder / f"img_{i:04d}.jpg"
        im.save(p, quality=90)
        paths.append(p)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--width", type=int, default=1500)
    ap.add_argument("--height", type=int, default=2000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "imgs"
        folder.mkdir()
        paths = make_images(folder, args.n, args.width, args.height)

        t = time.perf_counter()
        ref = [str(imagehash.phash(Image.open(p))) for p in paths]
        t_ref = time.perf_counter() - t

        t = time.perf_counter()
        ours = [fast_phash(p.read_bytes()) for p in paths]
        t_ours = time.perf_counter() - t

        full = [phash_hex(decode(p.read_bytes()).rgb) for p in paths[:50]]
        d = np.array([bin(int(a, 16) ^ int(b, 16)).count("1") for a, b in zip(ref, ours)])
        d_full = np.array([bin(int(a, 16) ^ int(b, 16)).count("1") for a, b in zip(ref, full)])

        store = LocalStore(Path(tmp) / "store")
        session = requests.Session()
        # the server is another process (python -m http.server), as a shop's server would be
        port = _free_port()
        server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "-b", "127.0.0.1", "-d",
                                   str(folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            base = f"http://127.0.0.1:{port}"
            for _ in range(100):
                try:
                    session.get(base + "/", timeout=1)
                    break
                except requests.ConnectionError:
                    time.sleep(0.05)
            t, c = time.perf_counter(), time.process_time()
            for p in paths:
                data = session.get(f"{base}/{p.name}", timeout=10).content
                sha = hashlib.sha256(data).hexdigest()
                dec = decode(data, work_side=PHASH_WORK_SIDE)
                phash_hex(dec.rgb)
                color_signature(dec.rgb)
                store.put_bytes(original_key(sha), data)
            t_intake, c_intake = time.perf_counter() - t, time.process_time() - c
        finally:
            server.terminate()

    n = len(paths)
    print(f"images: {n} JPEGs of {args.width}x{args.height}")
    print(f"imagehash.phash(Image.open(path)): {n / t_ref:8.1f} images/s")
    print(f"lookbench fast_phash(bytes):       {n / t_ours:8.1f} images/s   ({t_ref / t_ours:.1f}x)")
    print(f"Hamming distance to imagehash: mean {d.mean():.2f}, max {d.max()}, "
          f"<= 4 bits on {np.mean(d <= 4):.1%} of images")
    print(f"(full-size decode, same method, first 50: <= 4 bits on {np.mean(d_full <= 4):.1%}, max {d_full.max()})")
    print(f"intake (HTTP fetch from 127.0.0.1, sha256, decode, hash, colour signature, store), one thread: "
          f"{n / c_intake:.1f} images per CPU-second of the intake process ({n / t_intake:.1f} images/s wall clock, "
          f"the server process on the other core)")


if __name__ == "__main__":
    main()
