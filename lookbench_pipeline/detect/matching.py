"""Street-look items (see the package docstring): detect, clip, crop and embed the boxes of every street image
(:func:`detect_street_images`) and match each kept box to the items its look links (:func:`match_items`)."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from PIL import Image

from .core import Drop, Unlabelled, clip_box, crop_box, reproducible
from .model import Detector


@dataclass
class LinkedItem:
    """A product a look links (or the item a street photo of an image drop shows), with its category and the
    embedding of its gallery image (None when it has no gallery image)."""

    item_id: str
    category: str
    embedding: np.ndarray | None = None


@dataclass
class Kept:
    """A kept detection of one image, for matching: its index, class categories, score and crop embedding."""

    index: int
    categories: list[str]
    score: float
    embedding: np.ndarray | None


def match_items(dets: Sequence[Kept], linked: Sequence[LinkedItem], min_similarity: float = 0.0
                ) -> dict[int, tuple[str | None, float | None, str | None]]:
    """Match a look's kept detections to its linked items, one to one.

    A pair is allowed when the item's category is one its detection's class maps to. Allowed pairs are taken
    greedily in descending order of similarity (cosine of the two embeddings; 0 where one is missing), ties by
    detection score, then detection index and item id, so the result is deterministic. Pairs below
    ``min_similarity`` are never taken.

    Returns ``{detection index: (item_id, similarity, None)}`` for matched detections and
    ``{index: (None, best similarity or None, reason)}`` (an :class:`Unlabelled` reason) for the others.
    """
    pairs = []
    for d in dets:
        for it in linked:
            if it.category in d.categories:
                sim = (float(np.dot(d.embedding, it.embedding))
                       if d.embedding is not None and it.embedding is not None else 0.0)
                pairs.append((-sim, -d.score, d.index, it.item_id, sim))
    pairs.sort()
    taken_d: dict[int, tuple[str, float]] = {}
    taken_i: set[str] = set()
    for _, _, idx, item_id, sim in pairs:
        if idx in taken_d or item_id in taken_i or sim < min_similarity:
            continue
        taken_d[idx] = (item_id, sim)
        taken_i.add(item_id)
    out: dict[int, tuple[str | None, float | None, str | None]] = {}
    for d in dets:
        if d.index in taken_d:
            out[d.index] = (taken_d[d.index][0], taken_d[d.index][1], None)
            continue
        sims = [p[4] for p in pairs if p[2] == d.index]
        if not linked:
            reason = Unlabelled.NO_LINKED_ITEM
        elif not sims:
            reason = Unlabelled.NO_CATEGORY
        elif all(s < min_similarity for s in sims):
            reason = Unlabelled.DISSIMILAR
        else:
            reason = Unlabelled.TAKEN
        out[d.index] = (None, max(sims) if sims else None, reason)
    return out


@dataclass
class StreetImage:
    """An image to detect items in: a crawled look (``owner_type="look"``) or a street photo of an image drop
    (``"drop"``), with the items it links."""

    owner_type: str
    owner_id: str
    image_sha256: str
    linked: list[LinkedItem] = field(default_factory=list)


def detect_street_images(detector: Detector, street: Sequence[StreetImage], load: Callable[[str], Image.Image],
                         put_crop: Callable[[bytes], str], embed: Callable[[list[Image.Image]], np.ndarray],
                         min_box_side_px: float = 16, min_similarity: float = 0.0,
                         progress: Callable[[int, int], None] | None = None) -> tuple[list[dict], dict[str, Any]]:
    """Detect, clip, crop and match the items of every street image.

    Args:
        load: image sha256 -> the normalised (EXIF-transposed, RGB) image; called once per distinct image.
        progress: called ``(done, total)`` in distinct images after each image is detected and cropped.
        put_crop: JPEG bytes of a crop -> its sha256 (stored content-addressed by the caller).
        embed: images -> unit-norm embeddings ``(n, d)`` (the baseline embedder) for matching.

    Returns ``(rows, counts)``: one ``DETECTIONS`` row per box the detector gave (kept or dropped), and counts that
    reconcile: ``boxes = kept + dropped`` and ``kept = matched + unlabelled``. An image that appears under several
    owners is detected and cropped once.
    """
    from ..images import encode_normalised

    # 1. per distinct image: detect, clip, crop, embed
    per_sha: dict[str, list[dict]] = {}
    shas = sorted({s.image_sha256 for s in street})
    for n_done, (sha, im, dets) in enumerate(detector.predict((sha, load(sha)) for sha in shas), 1):
        dets = reproducible(dets)
        boxes = []
        for d in dets:
            box, reason = clip_box(d.xyxy, im.width, im.height, min_box_side_px)
            if reason is None and not detector.class_map[d.model_class]:
                reason = Drop.CLASS_IGNORED
            boxes.append({"det": d, "box": box, "reason": reason})
        kept = [b for b in boxes if b["reason"] is None]
        pics = [crop_box(im, b["box"]) for b in kept]
        for b, pic, v in zip(kept, pics, embed(pics) if pics else []):
            b.update(crop_sha256=put_crop(encode_normalised(pic)), crop_width=pic.width, crop_height=pic.height,
                     embedding=v)
        per_sha[sha] = boxes
        if progress:
            progress(n_done, len(shas))
    # 2. per owner: rows, item numbers and matching
    rows: list[dict] = []
    counts: Counter = Counter(images=len(street), distinct_images=len(shas))
    for s in sorted(street, key=lambda s: (s.owner_type, s.owner_id)):
        boxes = per_sha[s.image_sha256]
        kept = [b for b in boxes if b["reason"] is None]
        matches = match_items([Kept(i, detector.class_map[b["det"].model_class], b["det"].score, b["embedding"])
                               for i, b in enumerate(kept)], s.linked, min_similarity)
        for raw_i, b in enumerate(boxes):
            d = b["det"]
            row = {"owner_type": s.owner_type, "owner_id": s.owner_id, "image_sha256": s.image_sha256,
                   "model_class": d.model_class, "categories": detector.class_map[d.model_class], "score": d.score,
                   "raw_box": d.xyxy, "box": b["box"], "detector_sha256": detector.sha256,
                   "detection_id": hashlib.sha1(f"{s.owner_type}\x00{s.owner_id}\x00{s.image_sha256}\x00"
                                                f"{detector.sha256}\x00{raw_i}".encode()).hexdigest()}
            counts["boxes"] += 1
            if b["reason"]:
                counts["dropped"] += 1
                counts[f"dropped.{b['reason']}"] += 1
                row.update(status="dropped", reason=b["reason"])
            else:
                i = next(k for k, kb in enumerate(kept) if kb is b)
                item_id, sim, why = matches[i]
                row.update(item_index=i, crop_sha256=b["crop_sha256"], crop_width=b["crop_width"],
                           crop_height=b["crop_height"], item_id=item_id, similarity=sim,
                           status="matched" if item_id else "unlabelled", reason=why)
                counts["kept"] += 1
                counts["matched" if item_id else "unlabelled"] += 1
                if why:
                    counts[f"unlabelled.{why}"] += 1
            rows.append(row)
        matched_items = {m[0] for m in matches.values() if m[0]}
        counts["linked_items"] += len(s.linked)
        counts["linked_items_not_detected"] += sum(1 for it in s.linked if it.item_id not in matched_items)
    out: dict[str, Any] = {k: counts[k] for k in sorted(counts)}
    for k in ("boxes", "kept", "dropped", "matched", "unlabelled", "linked_items", "linked_items_not_detected"):
        out.setdefault(k, 0)
    assert out["boxes"] == out["kept"] + out["dropped"] and out["kept"] == out["matched"] + out["unlabelled"]
    return rows, out
