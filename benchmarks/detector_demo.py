"""The demo detector: how long it takes to train on this machine, its held-out mAP, how well it finds the garments
of the looks the demo shop publishes, and detection throughput of ``Detector.predict`` (decoded images fed in
batches, ``stream=True``) against ultralytics' own ``YOLO.predict`` over the same JPEG files.

    .venv/bin/python benchmarks/detector_demo.py [--cache DIR] [--repeat 3]

Training runs only when ``--cache`` holds no demo detector for the current recipe (a fresh temporary folder by
default, so by default it trains). Wall clock and process CPU time are both printed: on a shared machine the wall
clock depends on the load (the 1-minute load average is printed too).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path

from lookbench_pipeline.demo import shop as demo_shop
from lookbench_pipeline.config import DemoDetectorConfig
from lookbench_pipeline.demo.detector import DEMO_CLASSES, demo_detector
from lookbench_pipeline.detect import Detector, prepare_offline
from lookbench_pipeline.images import decode
from lookbench_pipeline.taxonomy import Taxonomy


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _iou(a, b) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    return ix * iy / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - ix * iy)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", type=Path, default=None)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    cache = args.cache or Path(tempfile.mkdtemp(prefix="lookbench-bench-detector-"))
    prepare_offline(cache)
    d = DemoDetectorConfig()
    load0 = os.getloadavg()[0]
    t0, c0 = time.perf_counter(), _cpu()
    weights, report, trained = demo_detector(cache, d.scenes, d.seed, d.train.model_dump())
    t1, c1 = time.perf_counter(), _cpu()
    print(f"demo detector ({'trained now' if trained else 'from the cache'}): {t1 - t0:.1f} s wall, "
          f"{c1 - c0:.1f} s CPU (load average at start {load0:.1f}); {d.scenes} looks drawn, "
          f"{report['dataset']['train_images']} trained on, {report['eval_images']} held out; "
          f"epochs {report['train_args']['epochs']}, imgsz {report['train_args']['imgsz']}")
    print(f"held-out mAP50 {report['map50']:.3f}, mAP50-95 {report['map50_95']:.3f}; per class mAP50-95 "
          f"{json.dumps({k: round(v, 3) for k, v in report['per_class_map50_95'].items()})}")

    shop = Path(tempfile.mkdtemp(prefix="lookbench-bench-shop-"))
    demo_shop.generate(shop, 48, 12, 7)
    coco = json.loads((shop / "images/looks/boxes.coco.json").read_text())
    cat = {c["id"]: c["name"] for c in coco["categories"]}
    files = [shop / "images/looks" / im["file_name"] for im in coco["images"]]
    det = Detector(weights, DEMO_CLASSES, Taxonomy.load().categories)
    found = total = 0
    for im, (_, _, dets) in zip(coco["images"], det.predict((f, decode(f.read_bytes()).rgb) for f in files)):
        for a in (a for a in coco["annotations"] if a["image_id"] == im["id"]):
            x, y, w, h = a["bbox"]
            total += 1
            found += any(_iou(dt.xyxy, [x, y, x + w, y + h]) >= 0.5 and cat[a["category_id"]] in
                         DEMO_CLASSES[dt.model_class] for dt in dets)
    print(f"published demo looks: {found} of {total} garments found (IoU >= 0.5, class maps to the garment's "
          f"category) at conf {det.conf}")

    many = files * 8  # 96 images of 640 x 800
    best_ours = best_peer = float("inf")
    for _ in range(args.repeat):
        t = time.perf_counter()
        n = sum(1 for _ in det.predict((f, decode(f.read_bytes()).rgb) for f in many))
        best_ours = min(best_ours, time.perf_counter() - t)
        t = time.perf_counter()
        m = sum(1 for _ in det.model.predict([str(f) for f in many], stream=True, imgsz=det.imgsz, conf=det.conf,
                                             iou=det.iou, max_det=det.max_det, device=det.device, verbose=False,
                                             batch=det.batch))
        best_peer = min(best_peer, time.perf_counter() - t)
        assert n == m == len(many)
    print(f"detection of {len(many)} images (640 x 800 JPEG, imgsz {det.imgsz}, batch {det.batch}, {det.device}; best "
          f"of {args.repeat}): Detector.predict {len(many) / best_ours:.1f} images/s, "
          f"ultralytics YOLO.predict on the files {len(many) / best_peer:.1f} images/s")


if __name__ == "__main__":
    main()
