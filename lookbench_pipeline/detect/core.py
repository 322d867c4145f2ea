"""The bottom of the detection package (it imports no sibling): the error type, the reasons a box is dropped or left
unlabelled, a detector's raw box (:class:`RawDetection`) and the box geometry every stage shares: clipping to the
image, rounding for reproducible releases, cropping, and mapping a box through an EXIF orientation."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from PIL import Image


class DetectorError(RuntimeError):
    """The detector cannot be set up: weights not found, a class mapping that does not fit the model or the
    taxonomy, an annotation file that cannot be read (the message says which and what to do)."""


class Drop:
    """Reasons a detector box is dropped."""

    DEGENERATE = "degenerate"  # not finite, or x2 <= x1 or y2 <= y1 as the detector gave it
    OUTSIDE = "outside_image"  # nothing left after clipping to the image
    TOO_SMALL = "too_small"  # a side below min_box_side_px after clipping
    CLASS_IGNORED = "class_ignored"  # the configuration maps the class to no category


class Unlabelled:
    """Reasons a kept detection is not matched to a linked product."""

    NO_LINKED_ITEM = "no_labelled_linked_item"  # the look links no labelled product at all
    NO_CATEGORY = "no_linked_item_of_category"  # no linked product has a category the class maps to
    TAKEN = "linked_item_taken"  # every compatible product went to a more similar detection
    DISSIMILAR = "below_min_similarity"  # compatible products exist but none is similar enough


@dataclass
class RawDetection:
    """One box as the detector gave it: ``xyxy`` in pixels on the image it was given."""

    model_class: str
    score: float
    xyxy: list[float]


# ------------------------------------------------------------------------------------------------- boxes


def clip_box(xyxy: Sequence[float], width: int, height: int, min_side: float) -> tuple[list[float] | None, str | None]:
    """Clip a box (pixels ``x1, y1, x2, y2``) to a ``width`` x ``height`` image.

    Returns ``(box, None)``, or ``(None, reason)`` with a :class:`Drop` reason: ``degenerate`` (not finite, or
    empty as given), ``outside_image`` (empty after clipping), ``too_small`` (a side < ``min_side`` pixels).
    """
    x1, y1, x2, y2 = (float(v) for v in xyxy)
    if not all(math.isfinite(v) for v in (x1, y1, x2, y2)) or x2 <= x1 or y2 <= y1:
        return None, Drop.DEGENERATE
    cx1, cy1 = min(max(x1, 0.0), float(width)), min(max(y1, 0.0), float(height))
    cx2, cy2 = min(max(x2, 0.0), float(width)), min(max(y2, 0.0), float(height))
    if cx2 <= cx1 or cy2 <= cy1:
        return None, Drop.OUTSIDE
    if min(cx2 - cx1, cy2 - cy1) < min_side:
        return None, Drop.TOO_SMALL
    return [cx1, cy1, cx2, cy2], None


BOX_DECIMALS = 0
"""Box corners are kept in whole pixels and scores to :data:`SCORE_DECIMALS` decimals. Detector inference on a CPU is
not bit-reproducible from run to run (oneDNN and OpenCV choose kernels by thread count and memory alignment), so
the last bits of a coordinate are noise; a backfill must rebuild byte-identical release files, and a crop is whole
pixels anyway (:func:`crop_box`)."""
SCORE_DECIMALS = 4


def reproducible(dets: Sequence[RawDetection]) -> list[RawDetection]:
    """``dets`` with corners rounded to :data:`BOX_DECIMALS` and scores to :data:`SCORE_DECIMALS` decimals, sorted by
    score (highest first), ties broken by box then class, so the order does not depend on float noise either."""
    out = [RawDetection(d.model_class, round(float(d.score), SCORE_DECIMALS),
                        [round(float(v), BOX_DECIMALS) + 0.0 for v in d.xyxy]) for d in dets]
    return sorted(out, key=lambda d: (-d.score, d.xyxy, d.model_class))


def crop_box(rgb: Image.Image, box: Sequence[float]) -> Image.Image:
    """The pixels of ``box`` (outward-rounded to whole pixels, inside the image)."""
    x1, y1, x2, y2 = box
    return rgb.crop((max(0, math.floor(x1)), max(0, math.floor(y1)), min(rgb.width, math.ceil(x2)),
                     min(rgb.height, math.ceil(y2))))


_ORIENT = {  # EXIF orientation -> point map from the stored pixels (w, h) to the displayed image (PIL exif_transpose)
    2: lambda x, y, w, h: (w - x, y), 3: lambda x, y, w, h: (w - x, h - y), 4: lambda x, y, w, h: (x, h - y),
    5: lambda x, y, w, h: (y, x), 6: lambda x, y, w, h: (h - y, x), 7: lambda x, y, w, h: (h - y, w - x),
    8: lambda x, y, w, h: (y, w - x),
}


def transpose_box(box: Sequence[float], orientation: int, raw_size: tuple[int, int]) -> list[float]:
    """A box on the stored pixels of an image with EXIF ``orientation`` mapped onto the displayed
    (EXIF-transposed) image; ``raw_size`` = stored ``(width, height)``."""
    f = _ORIENT.get(orientation)
    if f is None:
        return [float(v) for v in box]
    w, h = raw_size
    (ax, ay), (bx, by) = f(box[0], box[1], w, h), f(box[2], box[3], w, h)
    return [min(ax, bx), min(ay, by), max(ax, bx), max(ay, by)]
