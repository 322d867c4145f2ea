"""Training a detector (see the package docstring, "Training"): annotation sources to a YOLO data set with a
hash-chosen held-out split (:func:`build_yolo_dataset`), then ultralytics training and scoring on that split
(:func:`train_detector`, ``lookbench detector train``)."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
import shutil
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from ..wheelmodels import file_sha256
from .core import _ORIENT, DetectorError, clip_box, transpose_box
from .datasets import AnnotatedImage, AnnotationSource, read_annotations
from .model import weights_identity
from .offline import prepare_offline, resolve_device

log = logging.getLogger(__name__)


@dataclass
class YoloDataset:
    """A YOLO data set written by :func:`build_yolo_dataset`."""

    root: Path
    data_yaml: Path
    classes: list[str]
    counts: dict[str, Any]
    rejected: list[dict]
    sha256: str
    # categories of the class map that no annotation box has, and classes that kept no box (both also logged)
    unmatched_class_map_keys: list[str] = field(default_factory=list)
    classes_without_boxes: list[str] = field(default_factory=list)


def check_train_class_map(class_map: Any) -> dict[str, str | None]:
    """Validate a training class map: annotation category name -> ONE detector class name (a string), or ``None``
    to drop the category. (Not ``detect.classes`` of the pipeline configuration, which maps a detector class to a
    list of taxonomy categories.) Returns the map with string keys.

    Raises:
        DetectorError: not a mapping, or a value is not a single class name (the message names the key).
    """
    if not isinstance(class_map, dict):
        raise DetectorError(f"the class map must be a mapping 'annotation category: detector class', got "
                            f"{type(class_map).__name__}")
    out: dict[str, str | None] = {}
    for k, v in class_map.items():
        if v is not None and not isinstance(v, str):
            raise DetectorError(
                f"category {str(k)!r} maps to {v!r} ({type(v).__name__}); each annotation category maps to ONE "
                "detector class name (or null to drop it) -- unlike detect.classes in the pipeline config, which "
                "maps a detector class to a list of taxonomy categories")
        out[str(k)] = v
    return out


def _split_of(key: str, seed: int, val_fraction: float) -> str:
    h = int(hashlib.sha256(f"{seed}\x00{key}".encode()).hexdigest()[:15], 16) / float(1 << 60)
    return "val" if h < val_fraction else "train"


def build_yolo_dataset(sources: Sequence[AnnotationSource], out: Path, class_map: dict[str, str | None] | None = None,
                       val_fraction: float = 0.2, seed: int = 0, min_side_px: float = 2.0) -> YoloDataset:
    """Convert annotation sources into a YOLO data set under ``out`` (``images/{train,val}``,
    ``labels/{train,val}``, ``data.yaml``).

    Each image is decoded as the pipeline decodes (EXIF orientation applied) and written as a JPEG without
    metadata, so the trainer sees exactly what detection later sees; boxes given on the stored pixels of an
    EXIF-rotated image are mapped onto the displayed image, clipped, and dropped with a reason when empty or
    below ``min_side_px``. ``class_map``: source category name -> class name (``None`` drops the category;
    categories missing from a non-empty map are dropped too), classes numbered in the order the map first names
    them; by default every category that keeps a box is its own class, in the files' id order. An image whose boxes were all dropped is kept as a background (negative) image. The held-out
    split: an image is in ``val`` when the hash of (``seed``, its key) falls below ``val_fraction`` -- the same
    image is always on the same side, whatever else is in the set and wherever the files lie (the key is the
    source's place in ``sources``, its annotation file's name and the image's id in it, never a folder); at least
    one image is held out and one trained on. ``sha256`` is the checksum of the written data set (every file's
    path and bytes).

    Raises:
        DetectorError: an images folder does not exist, the class map is not 'category: one class' or none of
            its categories occurs in the annotations (the message lists both), no image could be read, or no box
            is left. Class map categories without annotations and classes left without a box are only warned
            about (logged, and in ``unmatched_class_map_keys`` / ``classes_without_boxes``).
    """
    from ..images import ImageRejected, decode

    for src in sources:
        if not Path(src.images).is_dir():
            raise DetectorError(f"images folder {src.images} (for annotations {src.annotations}) is not a folder")
    if class_map:
        class_map = check_train_class_map(class_map)
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    for split in ("train", "val"):
        (out / "images" / split).mkdir(parents=True)
        (out / "labels" / split).mkdir(parents=True)
    images: list[tuple[str, AnnotatedImage]] = []  # (the image's key wherever the files lie, the image)
    rejected: list[dict] = []
    order: list[str] = []
    for i, src in enumerate(sources):
        ims, rej, cats = read_annotations(src)
        images += [(f"{i}:{Path(src.annotations).name}#{im.ident or im.key}", im) for im in ims]
        rejected += rej
        order += [c for c in cats if c not in order]
    unmatched: list[str] = []
    if class_map:  # the classes in the order the map first names them
        classes = list(dict.fromkeys(t for t in class_map.values() if t))
        annotated = {cat for _, im in images for cat, _ in im.boxes}
        wanted = [k for k, t in class_map.items() if t]
        unmatched = [k for k in wanted if k not in annotated]
        if wanted and len(unmatched) == len(wanted):
            raise DetectorError(f"no category of the class map occurs in the annotation files: the map's categories "
                                f"{wanted}, the files' categories {sorted(annotated)}")
        if unmatched:
            log.warning("class map categories that no annotation has (their classes get no box from them): %s",
                        unmatched)
        cls_of = {c: class_map.get(c) for c in set(order) | set(class_map)}
    else:  # every category is its own class; the list is cut to the categories that keep a box, below
        classes = list(order)
        cls_of = {c: c for c in order}
    counts: Counter = Counter()
    written: dict[str, tuple[str, AnnotatedImage]] = {}  # file stem -> (split, image)
    ident_of: dict[str, str] = {}  # file stem -> the image's key wherever the files lie
    labels: dict[str, list[tuple]] = {}  # file stem -> [(class, cx, cy, w, h)] normalised to [0, 1]
    for ident, im in sorted(images, key=lambda e: e[0]):
        counts["images_in"] += 1
        counts["boxes_in"] += len(im.boxes)
        try:
            data = im.path.read_bytes()
            dec = decode(data)
        except FileNotFoundError:
            rejected.append({"source": im.key, "id": str(im.path), "reason": "image_missing"})
            counts["boxes_dropped"] += len(im.boxes)
            continue
        except (OSError, ImageRejected) as exc:
            rejected.append({"source": im.key, "id": str(im.path), "reason": f"image_unreadable:{exc}"})
            counts["boxes_dropped"] += len(im.boxes)
            continue
        with Image.open(io.BytesIO(data)) as raw:
            raw_size = raw.size
            orientation = int(raw.getexif().get(0x0112, 1) or 1)
        w, h = dec.width, dec.height
        lines = []
        for j, (cat, box) in enumerate(im.boxes):
            cls = cls_of.get(cat)
            if not cls:
                rejected.append({"source": im.key, "id": f"box{j}", "reason": f"class_not_kept:{cat}"})
                counts["boxes_dropped"] += 1
                continue
            # boxes are on the stored pixels unless the file's size says it annotated the displayed image
            if orientation in _ORIENT and not (im.size == (w, h) and raw_size != (w, h)):
                box = transpose_box(box, orientation, raw_size)
            clipped, why = clip_box(box, w, h, min_side_px)
            if why:
                rejected.append({"source": im.key, "id": f"box{j}", "reason": f"box_{why}"})
                counts["boxes_dropped"] += 1
                continue
            x1, y1, x2, y2 = clipped
            lines.append((cls, (x1 + x2) / 2 / w, (y1 + y2) / 2 / h, (x2 - x1) / w, (y2 - y1) / h))
        counts["boxes"] += len(lines)
        if not lines:
            counts["background_images"] += 1
        stem = f"{hashlib.sha1(ident.encode()).hexdigest()[:12]}-{re.sub(r'[^A-Za-z0-9_.-]', '_', im.path.stem)[:60]}"
        split = _split_of(ident, seed, val_fraction)
        dec.rgb.save(out / "images" / split / f"{stem}.jpg", format="JPEG", quality=95)
        labels[stem] = lines
        written[stem] = (split, im)
        ident_of[stem] = ident
    if not written:
        why = dict(sorted(Counter(r["reason"].split(":")[0] for r in rejected).items()))
        raise DetectorError(f"no annotated image could be read (rejections by reason: {why})")
    if counts["boxes"] == 0:
        raise DetectorError("no box is left to train on (every category was dropped by the class map?)")
    if len(written) >= 2:  # at least one image on each side
        ranked = sorted(written, key=lambda st: hashlib.sha256(f"{seed}\x00{ident_of[st]}".encode()).hexdigest())
        for side, stem in (("val", ranked[0]), ("train", ranked[-1])):
            if all(sp != side for sp, _ in written.values()):
                old_side, im = written[stem]
                (out / "images" / old_side / f"{stem}.jpg").replace(out / "images" / side / f"{stem}.jpg")
                written[stem] = (side, im)
    used = {ln[0] for lines in labels.values() for ln in lines}
    without_boxes: list[str] = []
    if not class_map:
        classes = [c for c in classes if c in used]
    else:
        without_boxes = [c for c in classes if c not in used]
        if without_boxes:
            log.warning("classes without any box to train on: %s (class map categories without annotations: %s)",
                        without_boxes, unmatched)
    for stem, (split, _) in written.items():
        text = "".join(f"{classes.index(c)} {cx:.6f} {cy:.6f} {bw:.6f} {bh:.6f}\n" for c, cx, cy, bw, bh in labels[stem])
        (out / "labels" / split / f"{stem}.txt").write_text(text)
    digest = hashlib.sha256()
    for f in sorted(p for p in out.rglob("*") if p.is_file()):
        digest.update(f.relative_to(out).as_posix().encode() + b"\x00" + hashlib.sha256(f.read_bytes()).digest())
    for split, _ in written.values():
        counts[f"{split}_images"] += 1
    names = "".join(f"  {i}: {json.dumps(c)}\n" for i, c in enumerate(classes))
    yaml_text = f"path: {json.dumps(str(out.resolve()))}\ntrain: images/train\nval: images/val\nnames:\n{names}"
    (out / "data.yaml").write_text(yaml_text)
    digest.update(b"names\x00" + json.dumps(classes).encode())  # data.yaml itself holds the absolute path
    c = {k: counts[k] for k in sorted(counts)}
    c["rejected_by_reason"] = dict(sorted(Counter(r["reason"].split(":")[0] for r in rejected).items()))
    for k in ("train_images", "val_images", "boxes_dropped", "background_images"):
        c.setdefault(k, 0)
    assert c["boxes_in"] == c["boxes"] + c["boxes_dropped"]
    return YoloDataset(out, out / "data.yaml", classes, c, rejected, digest.hexdigest(), unmatched, without_boxes)


# ------------------------------------------------------------------------------------------------ training


def train_detector(sources: Sequence[AnnotationSource], out: Path, *, model: str = "yolov8n.yaml",
                   epochs: int = 60, imgsz: int = 96, batch: int = 16, val_fraction: float = 0.2, seed: int = 0,
                   class_map: dict[str, str | None] | None = None, device: str = "auto", cache_dir: Path | None = None,
                   offline: bool = True, train_args: dict[str, Any] | None = None,
                   trained_by: str = "lookbench detector train") -> dict[str, Any]:
    """Train a YOLO detector on annotation sources and score it on the held-out split.

    Writes under ``out``: ``dataset/`` (the YOLO data set), ``train/`` (ultralytics' run folder),
    ``detector.pt`` (the best weights) and ``report.json``, which is returned: ``weights``, ``weights_sha256`` (of
    the tensors, :func:`lookbench_pipeline.detect.model.weights_identity`), ``weights_file_sha256`` (of the file),
    ``map50`` and ``map50_95`` (on the held-out split, ultralytics' COCO-style AP), ``per_class_map50_95``,
    ``classes``, ``data_sha256``, the data set counts and rejections, ``unmatched_class_map_keys`` and
    ``classes_without_boxes`` (see :func:`build_yolo_dataset`), the training arguments, library versions and
    ``seconds`` (wall clock).

    ``model``: an ultralytics model YAML (built from scratch, ``pretrained=False``) or a local ``.pt`` to fine-tune;
    nothing is downloaded. Training runs with ``workers=0``, ``amp=False``, ``plots=False``, ``deterministic=True``
    and ``seed``; ``train_args`` adds or overrides ultralytics training arguments (e.g. ``mosaic``).

    Raises:
        DetectorError: the data cannot be converted, or the model is a ``.pt`` that is not a local file.
    """
    t0 = time.time()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cache_dir = Path(cache_dir or out / "ultralytics-home")
    prepare_offline(cache_dir, offline)
    is_yaml = model.endswith((".yaml", ".yml"))
    if not is_yaml and not Path(model).is_file():
        raise DetectorError(f"model {model!r}: not a model YAML and no such weights file (nothing is downloaded)")
    ds = build_yolo_dataset(sources, out / "dataset", class_map, val_fraction, seed)
    from ultralytics import YOLO
    import torch
    import ultralytics

    dev = resolve_device(device)
    yolo = YOLO(model, task="detect")
    args = dict(data=str(ds.data_yaml), epochs=epochs, imgsz=imgsz, batch=batch, workers=0, device=dev,
                pretrained=not is_yaml, amp=False, plots=False, project=str(out), name="train", exist_ok=True,
                seed=seed, deterministic=True, verbose=False, val=False)
    args.update(train_args or {})
    yolo.train(**args)
    best = Path(yolo.trainer.best if Path(yolo.trainer.best).is_file() else yolo.trainer.last)
    weights = out / "detector.pt"
    shutil.copyfile(best, weights)
    trained = YOLO(str(weights), task="detect")
    file_sha = file_sha256(weights)
    weights_sha, weights_sha_of = weights_identity(trained, file_sha)  # before val fuses the layers
    metrics = trained.val(data=str(ds.data_yaml), split="val", imgsz=imgsz, batch=batch, device=dev, workers=0,
                          plots=False, verbose=False, project=str(out), name="val", exist_ok=True)
    per_class = {ds.classes[int(i)]: float(m) for i, m in zip(metrics.box.ap_class_index, metrics.box.maps[metrics.box.ap_class_index])} \
        if len(getattr(metrics.box, "ap_class_index", [])) else {}
    report = {
        "weights": str(weights), "weights_sha256": weights_sha, "weights_sha256_of": weights_sha_of,
        "weights_file_sha256": file_sha, "trained_by": trained_by,
        "map50": float(metrics.box.map50), "map50_95": float(metrics.box.map), "eval_split": "val",
        "eval_images": ds.counts["val_images"], "per_class_map50_95": per_class, "classes": ds.classes,
        "data_sha256": ds.sha256, "dataset": ds.counts, "rejected": ds.rejected[:1000],
        "unmatched_class_map_keys": ds.unmatched_class_map_keys, "classes_without_boxes": ds.classes_without_boxes,
        "train_args": {k: v for k, v in args.items() if k not in ("project", "name", "data")},
        "sources": [{"annotations": str(s.annotations), "images": str(s.images), "image_name": s.image_name,
                     "format": s.format} for s in sources],
        "model": model, "ultralytics_version": ultralytics.__version__, "torch_version": torch.__version__,
        "seconds": round(time.time() - t0, 1),
    }
    (out / "report.json").write_text(json.dumps(report, indent=1, sort_keys=True))
    return report
