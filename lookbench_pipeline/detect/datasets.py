"""Reading garment annotation files for training: COCO-style files (Fashionpedia, ModaNet's COCO release,
DeepFashion2 converted to COCO), ModaNet's per-photo snaps and DeepFashion2's per-image files, into
:class:`AnnotatedImage` records; COCO segmentations (polygons, RLE) to boxes."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..coco import number as _num
from ..coco import rle_counts, segmentation_box
from .core import DetectorError

__all__ = ["DEEPFASHION2_CATEGORIES", "MODANET_CATEGORIES", "AnnotatedImage", "AnnotationSource", "read_annotations",
           "rle_counts", "segmentation_box"]


@dataclass
class AnnotationSource:
    """One annotation file and the folder of its images.

    ``image_name`` turns an image record into a file name under ``images``: a ``str.format`` template with
    ``{file_name}``, ``{stem}`` (file name without extension) and ``{image_id}`` (e.g.
    ``"street_fashionpedia_{file_name}"``, or ``"{image_id}.jpg"`` for ModaNet, whose records have no file name).
    ``format``: ``coco`` (Fashionpedia, ModaNet's COCO release, DeepFashion2 converted to COCO), ``modanet-snaps``
    (ModaNet's per-photo ``[{image_id, items: [...]}]``), ``deepfashion2`` (a folder of DeepFashion2's per-image
    JSON files, ``item1``, ``item2``… with ``bounding_box`` = ``[x1, y1, x2, y2]``), or ``auto``.
    """

    annotations: Path
    images: Path
    image_name: str = "{file_name}"
    format: str = "auto"


MODANET_CATEGORIES = {1: "bag", 2: "belt", 3: "boots", 4: "footwear", 5: "outer", 6: "dress", 7: "sunglasses",
                      8: "pants", 9: "top", 10: "shorts", 11: "skirt", 12: "headwear", 13: "scarf & tie"}
"""ModaNet's 13 categories by the ids its annotation files use (eBay/modanet README; its raw
``categories.tsv`` numbers the same list from 0)."""

DEEPFASHION2_CATEGORIES = {1: "short sleeve top", 2: "long sleeve top", 3: "short sleeve outwear",
                           4: "long sleeve outwear", 5: "vest", 6: "sling", 7: "shorts", 8: "trousers", 9: "skirt",
                           10: "short sleeve dress", 11: "long sleeve dress", 12: "vest dress", 13: "sling dress"}
"""DeepFashion2's 13 categories (``category_id`` / ``category_name`` of its per-image files)."""


@dataclass
class AnnotatedImage:
    """One image of an annotation file: ``boxes`` are ``(category name, [x1, y1, x2, y2])`` in the pixels of the
    file as annotated; ``size`` is the annotated ``(width, height)`` when the file gives one. ``key`` names the
    annotation file (its path as given) and the image, for messages; ``ident`` is the image's id within its file
    (a COCO or ModaNet image id, a DeepFashion2 file's stem), which with the file's name identifies the image
    wherever the files lie (:func:`lookbench_pipeline.detect.train.build_yolo_dataset` splits by it)."""

    key: str
    path: Path
    size: tuple[int, int] | None
    boxes: list[tuple[str, list[float]]]
    ident: str = ""


def _image_file(src: AnnotationSource, file_name: str | None, image_id: Any) -> Path:
    fname = file_name or ""
    name = src.image_name.format(file_name=fname, stem=Path(fname).stem, image_id=image_id)
    return Path(src.images) / name


def read_annotations(src: AnnotationSource) -> tuple[list[AnnotatedImage], list[dict], list[str]]:
    """Read one annotation source. Returns ``(images, rejected, category_order)``: the images with their boxes,
    the annotations that could not be used (``{"source", "id", "reason"}``: ``crowd``, ``no_box``,
    ``unknown_category``, ``unknown_image``), and the category names in the file's id order.

    Raises:
        DetectorError: the file cannot be read or its format is not recognised.
    """
    path = Path(src.annotations)
    fmt = src.format
    if path.is_dir():
        fmt = "deepfashion2" if fmt == "auto" else fmt
        data: Any = None
    else:
        try:
            data = json.loads(path.read_text(encoding="utf-8-sig"))  # a byte-order mark: as the label import
        except (OSError, ValueError) as exc:
            raise DetectorError(f"{path}: not a readable JSON annotation file: {exc}") from exc
        if fmt == "auto":
            if isinstance(data, dict) and "annotations" in data and "images" in data:
                fmt = "coco"
            elif isinstance(data, list) and data and isinstance(data[0], dict) and "items" in data[0]:
                fmt = "modanet-snaps"
            else:
                raise DetectorError(f"{path}: not a COCO-style file (images, annotations, categories), ModaNet snaps "
                                    "or a DeepFashion2 folder")
    if fmt == "coco":
        return _read_coco(src, data)
    if fmt == "modanet-snaps":
        return _read_modanet_snaps(src, data)
    if fmt == "deepfashion2":
        return _read_deepfashion2(src)
    raise DetectorError(f"{path}: unknown annotation format {fmt!r} (coco, modanet-snaps, deepfashion2, auto)")


def _xywh(b: Any) -> list[float] | None:
    b = _num(b)
    if isinstance(b, list) and len(b) == 4:
        x, y, w, h = (float(v) for v in b)
        return [x, y, x + w, y + h]
    return None


def _read_coco(src: AnnotationSource, data: dict) -> tuple[list[AnnotatedImage], list[dict], list[str]]:
    name = str(src.annotations)
    cats = {c["id"]: str(c["name"]) for c in data.get("categories") or []}
    order = [cats[k] for k in sorted(cats)]
    imgs = {im["id"]: im for im in data["images"]}
    boxes: dict[Any, list] = {k: [] for k in imgs}
    rejected = []
    for a in data["annotations"]:
        aid = a.get("id")
        if a.get("image_id") not in imgs:
            rejected.append({"source": name, "id": aid, "reason": "unknown_image"})
        elif _num(a.get("iscrowd", 0)):
            rejected.append({"source": name, "id": aid, "reason": "crowd"})
        elif a.get("category_id") not in cats:
            rejected.append({"source": name, "id": aid, "reason": "unknown_category"})
        else:
            box = _xywh(a.get("bbox")) or segmentation_box(a.get("segmentation"))
            if box is None:
                rejected.append({"source": name, "id": aid, "reason": "no_box"})
            else:
                boxes[a["image_id"]].append((cats[a["category_id"]], box))
    out = []
    for iid, im in imgs.items():
        size = (int(im["width"]), int(im["height"])) if im.get("width") and im.get("height") else None
        out.append(AnnotatedImage(f"{name}#{iid}", _image_file(src, im.get("file_name"), iid), size, boxes[iid],
                                  str(iid)))
    return out, rejected, order


def _read_modanet_snaps(src: AnnotationSource, data: list) -> tuple[list[AnnotatedImage], list[dict], list[str]]:
    name = str(src.annotations)
    out, rejected = [], []
    for snap in data:
        iid = snap["image_id"]
        bs = []
        for j, it in enumerate(snap.get("items") or []):
            cid = it.get("category_id")
            box = _xywh(it.get("bbox")) or segmentation_box(it.get("segmentation"))
            if _num(it.get("iscrowd", 0)):
                rejected.append({"source": name, "id": f"{iid}#{j}", "reason": "crowd"})
            elif cid not in MODANET_CATEGORIES:
                rejected.append({"source": name, "id": f"{iid}#{j}", "reason": "unknown_category"})
            elif box is None:
                rejected.append({"source": name, "id": f"{iid}#{j}", "reason": "no_box"})
            else:
                bs.append((MODANET_CATEGORIES[cid], box))
        fname = Path(snap["snap_url"]).name if snap.get("snap_url") else None
        out.append(AnnotatedImage(f"{name}#{iid}", _image_file(src, fname, iid), None, bs, str(iid)))
    return out, rejected, [MODANET_CATEGORIES[k] for k in sorted(MODANET_CATEGORIES)]


def _read_deepfashion2(src: AnnotationSource) -> tuple[list[AnnotatedImage], list[dict], list[str]]:
    folder = Path(src.annotations)
    out, rejected = [], []
    for f in sorted(folder.glob("*.json")):
        try:
            d = json.loads(f.read_text(encoding="utf-8-sig"))
        except (OSError, ValueError) as exc:
            raise DetectorError(f"{f}: not a readable DeepFashion2 annotation file: {exc}") from exc
        bs = []
        for k in sorted((k for k in d if re.fullmatch(r"item\d+", k)), key=lambda k: int(k[4:])):
            it = d[k]
            cid = it.get("category_id")
            box = _num(it.get("bounding_box"))
            if cid not in DEEPFASHION2_CATEGORIES:
                rejected.append({"source": str(f), "id": k, "reason": "unknown_category"})
            elif not (isinstance(box, list) and len(box) == 4):
                rejected.append({"source": str(f), "id": k, "reason": "no_box"})
            else:
                bs.append((DEEPFASHION2_CATEGORIES[cid], [float(v) for v in box]))
        out.append(AnnotatedImage(f"{folder}#{f.stem}", _image_file(src, f"{f.stem}.jpg", f.stem), None, bs, f.stem))
    return out, rejected, [DEEPFASHION2_CATEGORIES[k] for k in sorted(DEEPFASHION2_CATEGORIES)]
