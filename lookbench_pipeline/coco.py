"""The COCO-style annotation-file contract, one owner for its two readers: detector training
(:mod:`lookbench_pipeline.detect.datasets`) and the label import (:mod:`lookbench_pipeline.label_import.readers`).

What a file must be (:func:`coco_index`, :func:`named_list`: else the caller's error, naming the file and entry):
an object with ``images`` and ``annotations`` lists; every image an object with an ``id`` that is a number or a
string (a list or an object is no id); an image id given to two different files is refused, the same image listed
twice is read once (the first entry); every annotation an object with an ``image_id`` and a ``category_id`` of
those types; categories objects with an integer ``id`` and a string ``name``.

What an entry may be, and what it then means (never an exception): an image size that is not two finite numbers of
at least one pixel is unknown (:func:`image_size`); a box (``bbox`` ``[x, y, width, height]``, else the polygon or
RLE ``segmentation``) that is not four finite numbers with a width and a height is no box (:func:`annotation_box`);
a box is clipped to its image of known size, and one wholly outside it is flagged (:func:`fit_box`). Numbers that
some conversions store as strings (``"[103, 80, 601, 669]"``, ``"0"``) are read as numbers (:func:`number`).

Imports nothing of the library."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

Error = type[Exception]


def number(v: Any) -> Any:
    """Numbers that some conversions store as strings (``"[103, 80, 601, 669]"``) back to numbers."""
    if isinstance(v, str):
        try:
            return json.loads(v)
        except (ValueError, RecursionError):
            return v
    return v


def _real(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def is_id(v: Any) -> bool:
    """An id (as :func:`number` reads it) is a number or a string: a list or an object is no id (and no key)."""
    return isinstance(v, str) or (isinstance(v, (int, float)) and not isinstance(v, bool))


def corners(v: Any) -> list[float] | None:
    """Four finite numbers (or a string of them) as floats; None otherwise."""
    v = number(v)
    if not (isinstance(v, list) and len(v) == 4 and all(_real(t) for t in v)):
        return None
    return [float(t) for t in v]


def xywh_box(v: Any) -> list[float] | None:
    """A COCO ``[x, y, width, height]`` as ``[x1, y1, x2, y2]``; None unless four finite numbers, width and height
    above 0."""
    c = corners(v)
    if c is None or c[2] <= 0 or c[3] <= 0:
        return None
    x, y, w, h = c
    box = [x, y, x + w, y + h]
    return box if all(math.isfinite(t) for t in box) else None


_RLE_MAX_CHARS = 7  # pycocotools' counts are 32-bit (maskApi.h `uint`): rleToString writes 7 characters at most


def rle_counts(s: str) -> list[int]:
    """Decode a COCO compressed RLE string (pycocotools ``rleFrString``: 5 bits per character, offset 48,
    continuation bit 0x20, sign bit 0x10, counts after the second stored as differences).

    Raises:
        ValueError: a count of more than 7 characters (pycocotools' counts are 32-bit unsigned, and the difference
            it stores after the second count needs 33 bits: ``rleToString`` writes at most 7 × 5 bits), so a hostile
            string of continuation characters costs linear time, not one ever longer integer per character.
        IndexError: the string ends inside a count.
    """
    counts: list[int] = []
    p = 0
    while p < len(s):
        x, k, more = 0, 0, True
        while more:
            if k == _RLE_MAX_CHARS:
                raise ValueError(f"RLE count at character {p - k} longer than {_RLE_MAX_CHARS} characters")
            c = ord(s[p]) - 48
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            p += 1
            k += 1
            if not more and (c & 0x10):
                x |= -1 << (5 * k)
        if len(counts) > 2:
            x += counts[-2]
        counts.append(x)
    return counts


def segmentation_box(seg: Any) -> list[float] | None:
    """``[x1, y1, x2, y2]`` of a COCO segmentation: polygons (lists of x, y), or RLE (``{"size": [h, w],
    "counts": [...] or "..."}``, column-major runs starting with background, as pycocotools ``toBbox``)."""
    seg = number(seg)
    if isinstance(seg, list) and seg:
        xs = [float(v) for poly in seg for v in number(poly)[0::2]]
        ys = [float(v) for poly in seg for v in number(poly)[1::2]]
        return [min(xs), min(ys), max(xs), max(ys)] if xs and ys else None
    if isinstance(seg, dict) and "counts" in seg and "size" in seg:
        h = int(seg["size"][0])
        counts = rle_counts(seg["counts"]) if isinstance(seg["counts"], str) else [int(c) for c in seg["counts"]]
        pos, x1, y1, x2, y2 = 0, math.inf, math.inf, -1, -1
        for j, n in enumerate(counts):
            if j % 2 == 1 and n > 0:  # a run of foreground pixels, indices pos .. pos + n - 1
                first, last = pos, pos + n - 1
                x1, x2 = min(x1, first // h), max(x2, last // h)
                if first // h == last // h:
                    y1, y2 = min(y1, first % h), max(y2, last % h)
                else:  # the run wraps from one column's bottom to a later column's top: every row is covered
                    y1, y2 = 0, h - 1
            pos += n
        return [float(x1), float(y1), float(x2 + 1), float(y2 + 1)] if x2 >= 0 else None
    return None


def annotation_box(a: dict) -> list[float] | None:
    """``[x1, y1, x2, y2]`` of an annotation: its ``bbox``, else its ``segmentation``'s box; None when neither
    gives four finite numbers (a malformed segmentation is no box, never an exception)."""
    box = xywh_box(a.get("bbox"))
    if box is None:
        try:
            box = segmentation_box(a.get("segmentation"))
        except (TypeError, ValueError, KeyError, IndexError, OverflowError, ZeroDivisionError, RecursionError):
            box = None
    return box if box is not None and all(math.isfinite(v) for v in box) else None


def fit_box(box: list[float] | None, size: tuple[int, int] | None) -> tuple[list[float] | None, bool]:
    """``(box, outside)``: ``box`` clipped to its image of ``size`` (when known). An empty box (no width or height)
    is no box; ``outside`` (and no box) when nothing of it lies in the image (wholly outside, or inverted by it)."""
    if box is None or box[2] <= box[0] or box[3] <= box[1]:
        return None, False
    if size is None:
        return box, False
    x1, y1, x2, y2 = max(0.0, box[0]), max(0.0, box[1]), min(float(size[0]), box[2]), min(float(size[1]), box[3])
    if x2 <= x1 or y2 <= y1:
        return None, True
    return [x1, y1, x2, y2], False


def image_size(im: dict) -> tuple[int, int] | None:
    """``(width, height)`` of an image entry; None unless both are finite numbers (or strings of them) of at least
    one pixel (not a bool, infinity, NaN, zero or a negative number)."""
    wh = number(im.get("width")), number(im.get("height"))
    if not all(_real(v) and v >= 1 for v in wh):
        return None
    return int(wh[0]), int(wh[1])


def coco_index(path: Path, data: Any, what: str, error: Error) -> tuple[dict[Any, dict], list[dict]]:
    """``(images by id, annotations)`` of a COCO-style file (ids as :func:`number` reads them). Raises ``error``
    naming the file and entry (no ``id`` / ``image_id`` / ``category_id``, one that is no number or string, an
    image id given to two files)."""
    if not (isinstance(data, dict) and isinstance(data.get("images"), list)
            and isinstance(data.get("annotations"), list)):
        raise error(f"{path}: not a COCO-style {what} file (an object with 'images' and 'annotations' lists)")
    images: dict[Any, dict] = {}
    first: dict[Any, int] = {}
    for i, im in enumerate(data["images"]):
        if not isinstance(im, dict) or "id" not in im:
            raise error(f"{path}: images[{i}] has no 'id'")
        iid = number(im["id"])
        if not is_id(iid):
            raise error(f"{path}: images[{i}]: 'id' must be a number or a string, not {im['id']!r:.80}")
        if iid in images:
            if images[iid].get("file_name") != im.get("file_name"):  # a later entry would move the labels
                raise error(f"{path}: images[{i}] ({im.get('file_name')!r}) and images[{first[iid]}] "
                            f"({images[iid].get('file_name')!r}) both have id {iid!r}")
            continue  # the same image twice: the first entry says it
        images[iid], first[iid] = im, i
    for j, a in enumerate(data["annotations"]):
        if not isinstance(a, dict) or "image_id" not in a or "category_id" not in a:
            raise error(f"{path}: annotations[{j}] (id {a.get('id') if isinstance(a, dict) else None}) needs "
                        "'image_id' and 'category_id'")
        for key in ("image_id", "category_id"):
            if not is_id(number(a[key])):
                raise error(f"{path}: annotations[{j}] (id {a.get('id')}): {key!r} must be a number or a "
                            f"string, not {a[key]!r:.80}")
    return images, data["annotations"]


def named_list(path: Path, data: Any, key: str, error: Error) -> dict[Any, dict]:
    """``data[key]`` (categories, attributes) by integer id. Raises ``error`` (no such list, an entry without an
    integer ``id`` and a string ``name``)."""
    items = data.get(key) if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise error(f"{path}: no '{key}' list")
    out = {}
    for i, c in enumerate(items):
        cid = number(c.get("id")) if isinstance(c, dict) else None
        if not isinstance(cid, int) or isinstance(cid, bool) or not isinstance(c.get("name"), str):
            raise error(f"{path}: {key}[{i}] needs an integer 'id' and a 'name'")
        out[cid] = c
    return out
