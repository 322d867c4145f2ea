"""The demo detector: a YOLO trained once (and cached) on street looks that the demo shop draws, for
``detect.weights: demo``. Demo code, kept out of the production detection package
(:mod:`lookbench_pipeline.detect`, which it uses to train); :func:`lookbench_pipeline.pipeline.load_detector` calls
it."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..detect.datasets import AnnotationSource
from ..detect.train import train_detector

log = logging.getLogger(__name__)

DEMO_CLASSES: dict[str, list[str]] = {
    "upper": ["top", "shirt", "sweater", "outerwear"],
    "lower": ["trousers", "skirt", "shorts"],
    "dress": ["dress"],
    "shoes": ["shoes"],
    "bag": ["bag"],
}
"""The demo detector's classes and the taxonomy categories each stands for (coarse, like DeepFashion2's classes:
"short sleeve top" is a t-shirt, a shirt or a sweater)."""

DEMO_RECIPE = 2
"""Bumped when the demo detector's training data or procedure changes in a way its cache key would not see
(2: the held-out split no longer depends on the folder the cache lies in, so a rebuild into an empty data_dir
trains the same detector)."""


def demo_detector(cache_dir: Path, scenes: int = 120, scene_seed: int = 1234, train: dict[str, Any] | None = None,
                  device: str = "auto", offline: bool = True) -> tuple[Path, dict[str, Any], bool]:
    """The demo detector: trained once with :func:`train_detector` on street looks that the embedded demo shop
    draws (its own garments composited on scenes, boxes known, never the looks it publishes), and cached under
    ``cache_dir/demo-<checksum>`` keyed by the training data's checksum and the training arguments.

    ``train``: :class:`~lookbench_pipeline.config.DetectorTrainConfig` fields (``model``, ``epochs``, ``imgsz``,
    ``batch``, ``val_fraction``, ``seed``, ``args``). Returns ``(weights, report, trained_now)``.
    """
    from . import shop as demo_shop  # the demo detector trains on looks the demo shop draws
    from ..config import DEMO_SITE, SiteConfig

    site = SiteConfig.from_yaml(DEMO_SITE)
    train = dict(train or {})
    cache_dir = Path(cache_dir)
    looks_dir = cache_dir / f"demo-looks-{site.demo_products}-{site.demo_looks}-{site.demo_seed}-{scenes}-{scene_seed}"
    ann = looks_dir / "annotations.json"
    if not ann.is_file():
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".demo-looks-", dir=cache_dir))
        demo_shop.write_training_looks(tmp, site.demo_products, site.demo_looks, site.demo_seed, scenes, scene_seed)
        _publish_dir(tmp, looks_dir)
    digest = hashlib.sha256(ann.read_bytes())
    for f in sorted((looks_dir / "images").iterdir()):
        digest.update(f.name.encode() + b"\x00" + hashlib.sha256(f.read_bytes()).digest())
    class_map = {c: k for k, cats in DEMO_CLASSES.items() for c in cats}
    from importlib.metadata import version

    digest.update(json.dumps({"train": train, "class_map": list(class_map.items()), "recipe": DEMO_RECIPE,
                              "ultralytics": version("ultralytics")}, sort_keys=True).encode())
    target = cache_dir / f"demo-{digest.hexdigest()[:16]}"
    report_file = target / "report.json"
    if report_file.is_file() and (target / "detector.pt").is_file():
        report = json.loads(report_file.read_text())
        report["weights"] = str(target / "detector.pt")
        return target / "detector.pt", report, False
    log.warning("No garment-trained detector weights configured (detect.weights: demo): training the demo detector "
                "once on %d street looks drawn by the demo shop; it is cached in %s", scenes, target)
    tmp = Path(tempfile.mkdtemp(prefix=".demo-train-", dir=cache_dir))
    fields = {k: train[k] for k in ("model", "epochs", "imgsz", "batch", "val_fraction", "seed") if k in train}
    report = train_detector([AnnotationSource(ann, looks_dir / "images")], tmp, class_map=class_map, device=device,
                            cache_dir=cache_dir, offline=offline, train_args=train.get("args") or {},
                            trained_by="lookbench detector train (demo detector, demo shop looks)", **fields)
    report["training_looks"] = scenes
    (tmp / "report.json").write_text(json.dumps(report, indent=1, sort_keys=True))
    for sub in ("dataset", "train", "val"):
        shutil.rmtree(tmp / sub, ignore_errors=True)  # the cache keeps the weights and the report
    _publish_dir(tmp, target)
    report = json.loads(report_file.read_text())
    report["weights"] = str(target / "detector.pt")
    return target / "detector.pt", report, True


def _publish_dir(tmp: Path, target: Path) -> None:
    """Move a finished folder into place; when another process got there first, keep theirs."""
    try:
        tmp.rename(target)
    except OSError:
        if not target.exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)
