"""Reading garment annotation files for training: COCO-style files (Fashionpedia, ModaNet's COCO release,
DeepFashion2 converted to COCO), ModaNet's per-photo snaps and DeepFashion2's per-image files, into
:class:`AnnotatedImage` records; COCO segmentations (polygons, RLE) to boxes."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..coco import (annotation_box, coco_index, corners, fit_box, image_size, is_id, named_list, number, rle_counts,
                    segmentation_box)
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
    the annotations that could not be used (``{"source", "id", "reason"}``: ``crowd``, ``no_box`` (no box of four
    finite numbers with a width and a height), ``box_outside_image`` (wholly outside its image of known size; a box
    partly outside is clipped to it), ``unknown_category``, ``unknown_image``), and the category names in the
    file's id order. Every annotation is a box or a rejection. A COCO-style file is checked as the label import
    checks one (:mod:`lookbench_pipeline.coco`); an image size that is not two finite numbers of at least one pixel
    is unknown.

    Raises:
        DetectorError: the file cannot be read, its format is not recognised, or it is structurally broken (naming
            the file and the entry: an id that is no number or string, an image id given to two files, a category
            without an integer ``id`` and a ``name``, a ModaNet snap or DeepFashion2 item of the wrong shape).
    """
    path = Path(src.annotations)
    fmt = src.format
    if path.is_dir():
        fmt = "deepfashion2" if fmt == "auto" else fmt
        data: Any = None
    else:
        try:
            data = json.loads(path.read_text(encoding="utf-8-sig"))  # a byte-order mark: as the label import
        except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nested too deep for json
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


def _read_coco(src: AnnotationSource, data: Any) -> tuple[list[AnnotatedImage], list[dict], list[str]]:
    """A COCO-style file, checked as the label import checks one (:mod:`lookbench_pipeline.coco`): a file that is
    not one, an id that is no number or string, an image id given to two files, a category without an integer
    ``id`` and a ``name`` raise DetectorError naming the file and entry; an image size that is no size is unknown;
    a box is clipped to its image of known size, one wholly outside it rejected ``box_outside_image``."""
    path = Path(src.annotations)
    name = str(path)
    imgs, anns = coco_index(path, data, "annotation", DetectorError)
    listed = named_list(path, data, "categories", DetectorError) if data.get("categories") is not None else {}
    cats = {k: c["name"] for k, c in listed.items()}
    order = [cats[k] for k in sorted(cats)]
    sizes = {k: image_size(im) for k, im in imgs.items()}
    boxes: dict[Any, list] = {k: [] for k in imgs}
    rejected = []
    for a in anns:
        aid, iid, cid = a.get("id"), number(a["image_id"]), number(a["category_id"])
        if iid not in imgs:
            rejected.append({"source": name, "id": aid, "reason": "unknown_image"})
        elif number(a.get("iscrowd", 0)):
            rejected.append({"source": name, "id": aid, "reason": "crowd"})
        elif cid not in cats:
            rejected.append({"source": name, "id": aid, "reason": "unknown_category"})
        else:
            box, outside = fit_box(annotation_box(a), sizes[iid])
            if box is None:
                rejected.append({"source": name, "id": aid, "reason": "box_outside_image" if outside else "no_box"})
            else:
                boxes[iid].append((cats[cid], box))
    out = []
    for iid, im in imgs.items():
        raw = im["id"]  # as the file spells it: the image's name and key ({image_id}) do not change
        out.append(AnnotatedImage(f"{name}#{raw}", _image_file(src, im.get("file_name"), raw), sizes[iid],
                                  boxes[iid], str(raw)))
    return out, rejected, order


def _read_modanet_snaps(src: AnnotationSource, data: Any) -> tuple[list[AnnotatedImage], list[dict], list[str]]:
    """ModaNet snaps. A snap that is not ``{image_id, items: [...]}`` (the id a number or a string), an image id
    given twice, an item that is not an object or whose ``category_id`` is no number or string raise
    DetectorError naming the file and entry."""
    path = Path(src.annotations)
    name = str(path)
    if not isinstance(data, list):
        raise DetectorError(f"{path}: not a ModaNet snaps file (a list of {{image_id, items: [...]}})")
    out, rejected = [], []
    seen: dict[Any, int] = {}
    for i, snap in enumerate(data):
        items = snap.get("items") if isinstance(snap, dict) else None
        if not isinstance(snap, dict) or not is_id(number(snap.get("image_id"))) \
                or not isinstance(items if items is not None else [], list):
            raise DetectorError(f"{path}: [{i}] is not a ModaNet snap ({{image_id, items: [...]}}; the id a number "
                                "or a string)")
        iid = snap["image_id"]
        if number(iid) in seen:
            raise DetectorError(f"{path}: [{i}] and [{seen[number(iid)]}] both describe image {iid!r}")
        seen[number(iid)] = i
        bs = []
        for j, it in enumerate(items or []):
            if not isinstance(it, dict) or not is_id(number(it.get("category_id"))):
                raise DetectorError(f"{path}: image {iid!r} item {j}: no 'category_id' that is a number or a string")
            cid = number(it["category_id"])
            box, _ = fit_box(annotation_box(it), None)
            if number(it.get("iscrowd", 0)):
                rejected.append({"source": name, "id": f"{iid}#{j}", "reason": "crowd"})
            elif cid not in MODANET_CATEGORIES:
                rejected.append({"source": name, "id": f"{iid}#{j}", "reason": "unknown_category"})
            elif box is None:
                rejected.append({"source": name, "id": f"{iid}#{j}", "reason": "no_box"})
            else:
                bs.append((MODANET_CATEGORIES[cid], box))
        fname = Path(str(snap["snap_url"])).name if snap.get("snap_url") else None
        out.append(AnnotatedImage(f"{name}#{iid}", _image_file(src, fname, iid), None, bs, str(iid)))
    return out, rejected, [MODANET_CATEGORIES[k] for k in sorted(MODANET_CATEGORIES)]


def _read_deepfashion2(src: AnnotationSource) -> tuple[list[AnnotatedImage], list[dict], list[str]]:
    """DeepFashion2's per-image files. One that is no JSON object, an ``item<N>`` that is not an object or whose
    ``category_id`` is given but no number or string raise DetectorError naming the file and item; a
    ``bounding_box`` that is not four finite numbers ``[x1, y1, x2, y2]`` with a width and a height is ``no_box``."""
    folder = Path(src.annotations)
    out, rejected = [], []
    for f in sorted(folder.glob("*.json")):
        try:
            d = json.loads(f.read_text(encoding="utf-8-sig"))
        except (OSError, ValueError, RecursionError) as exc:
            raise DetectorError(f"{f}: not a readable DeepFashion2 annotation file: {exc}") from exc
        if not isinstance(d, dict):
            raise DetectorError(f"{f}: not a DeepFashion2 annotation file (an object with item1, item2, ...)")
        bs = []
        for k in sorted((k for k in d if re.fullmatch(r"item\d+", k)), key=lambda k: int(k[4:])):
            it = d[k]
            cid = number(it.get("category_id")) if isinstance(it, dict) else None
            if not isinstance(it, dict) or not (cid is None or is_id(cid)):
                raise DetectorError(f"{f}: {k}: not an item with a 'category_id' that is a number or a string")
            box, _ = fit_box(corners(it.get("bounding_box")), None)
            if cid not in DEEPFASHION2_CATEGORIES:
                rejected.append({"source": str(f), "id": k, "reason": "unknown_category"})
            elif box is None:
                rejected.append({"source": str(f), "id": k, "reason": "no_box"})
            else:
                bs.append((DEEPFASHION2_CATEGORIES[cid], box))
        out.append(AnnotatedImage(f"{folder}#{f.stem}", _image_file(src, f"{f.stem}.jpg", f.stem), None, bs, f.stem))
    return out, rejected, [DEEPFASHION2_CATEGORIES[k] for k in sorted(DEEPFASHION2_CATEGORIES)]
