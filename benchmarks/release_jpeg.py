"""The release step's per-image cost: each published image is the original, fully decoded and normalised, re-encoded
as an EXIF-free JPEG (``lookbench_pipeline.images.publishable_jpeg``), once per release. Also the contamination
index's per-file cost (decode, pHash, colour signature: ``contamination._row``), which indexing Fashion200K pays
once per file. Figures per core (one thread); sizes for the storage estimate in docs/DEPLOY.md.

    .venv/bin/python benchmarks/release_jpeg.py [--n 100] [--width 1500] [--height 2000]

Images: the same procedurally drawn photo-like JPEGs as benchmarks/phash_speed.py (quality 90), seeded.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from phash_speed import make_images  # noqa: E402

from lookbench_pipeline.config import ImageConfig  # noqa: E402
from lookbench_pipeline.contamination import _row  # noqa: E402
from lookbench_pipeline.images import publishable_jpeg  # noqa: E402
from lookbench_pipeline.store import LocalStore, original_key  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--width", type=int, default=1500)
    ap.add_argument("--height", type=int, default=2000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "imgs"
        folder.mkdir()
        paths = make_images(folder, args.n, args.width, args.height)
        store = LocalStore(Path(tmp) / "store")
        shas = []
        for p in paths:
            data = p.read_bytes()
            sha = hashlib.sha256(data).hexdigest()
            store.put_bytes(original_key(sha), data)
            shas.append(sha)
        cpu, wall = time.process_time(), time.perf_counter()
        out = [publishable_jpeg(store, s) for s in shas]
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        orig = sum(p.stat().st_size for p in paths) / len(paths)
        pub = sum(len(b) for b in out) / len(out)
        print(f"publishable_jpeg: {len(out)} images {args.width}x{args.height}: {len(out) / cpu:.1f} images per "
              f"CPU-second ({len(out) / wall:.1f}/s wall); original {orig / 1e3:.0f} kB, published {pub / 1e3:.0f} kB")
        cpu, wall = time.process_time(), time.perf_counter()
        rows = [_row("bench", p.name, None, p.read_bytes(), "stamp", ImageConfig()) for p in paths]
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        assert all(rows)
        print(f"contamination index row (decode, pHash, colour signature): {len(rows) / cpu:.1f} files per "
              f"CPU-second ({len(rows) / wall:.1f}/s wall)")


if __name__ == "__main__":
    main()
