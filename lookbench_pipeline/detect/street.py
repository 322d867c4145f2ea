"""Street looks to detections: which images of a window are street looks to detect on (crawled looks, and street
photos of image drops), what each links, and the detection, cropping and matching run over them. Called by
``pipeline.stage_detect``, which loads the detector.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa

from ..config import ImageConfig
from ..drops import subsets_of
from ..embed import load_embedder
from ..images import decode
from ..logs import Progress
from ..releases.reader import STREET_SUBSETS
from ..store import ObjectStore, derived_key, original_key, sha256_hex
from ..windows import Window
from .matching import LinkedItem, StreetImage, detect_street_images

__all__ = ["STREET_SUBSETS", "DetectResult", "street_images", "detect_and_match"]


@dataclass
class DetectResult:
    """What the detection stage returns: the ``DETECTIONS`` table, the detector as the manifest records it
    (``Detector.info()``; ``{"enabled": False}`` or ``{"used": False}``), and the counts."""

    detections: pa.Table
    detector: dict[str, Any]
    counts: dict[str, Any]


def street_images(looks: pa.Table, drop_items: pa.Table, image_refs: pa.Table, annotations: pa.Table,
                  window: Window) -> tuple[list[StreetImage], dict[str, str], dict[str, int]]:
    """The window's street-look images to detect on: every crawled look, and every image-drop photo of role
    ``query`` whose subset is a street-look subset (:data:`STREET_SUBSETS`), each with the labelled items it links.
    Returns ``(street, gallery_sha, skipped)``: the images; each item's gallery picture (a product's packshot, a
    drop item's gallery image: sha256); and the images skipped by reason (``outside_window``,
    ``image_not_accepted``)."""
    refs: dict[tuple[str, str], list[dict]] = {}
    for r in image_refs.to_pylist():
        if r["status"] == "accepted":
            refs.setdefault((r["owner_type"], r["owner_id"]), []).append(r)
    for v in refs.values():
        v.sort(key=lambda r: r["position"])
    category = {a["item_id"]: a["category"] for a in annotations.to_pylist() if a["status"] == "labelled"}
    gallery_sha: dict[str, str] = {}  # item -> its gallery picture (a product's packshot, a drop's gallery image)
    for (owner_type, owner_id), rs in refs.items():
        if owner_type == "product":
            gallery_sha[owner_id] = rs[0]["image_sha256"]
    drops = drop_items.to_pylist()
    for d in sorted(drops, key=lambda d: d["path"]):
        if d["role"] == "gallery" and refs.get(("drop", d["drop_image_id"])):
            gallery_sha.setdefault(d["item_id"], refs[("drop", d["drop_image_id"])][0]["image_sha256"])
    skipped: dict[str, int] = {}
    street: list[StreetImage] = []

    def add(owner_type: str, owner_id: str, first_seen: datetime, items: list[str]) -> None:
        if first_seen not in window:
            skipped["outside_window"] = skipped.get("outside_window", 0) + 1
        elif not refs.get((owner_type, owner_id)):
            skipped["image_not_accepted"] = skipped.get("image_not_accepted", 0) + 1
        else:
            linked = [LinkedItem(i, category[i]) for i in dict.fromkeys(items) if i in category]
            street.append(StreetImage(owner_type, owner_id, refs[(owner_type, owner_id)][0]["image_sha256"], linked))

    for lk in looks.to_pylist():
        add("look", lk["look_id"], lk["first_seen_at"], list(lk["product_ids"] or []))
    for d in drops:
        if d["role"] == "query" and any(p in STREET_SUBSETS for p in subsets_of(d["subset"])):
            add("drop", d["drop_image_id"], d["first_seen_at"], [d["item_id"]])
    return street, gallery_sha, skipped


def detect_and_match(detector: Any, street: list[StreetImage], gallery_sha: dict[str, str], store: ObjectStore,
                     image_cfg: ImageConfig, min_box_side_px: int, min_match_similarity: float,
                     ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Detect the garments of ``street`` with ``detector``, crop each kept box into the store
    (``derived/<sha[:2]>/<sha>``, JPEG) and match it to the linked items by the baseline embedding of their gallery
    pictures (:func:`matching.detect_street_images`). Returns its ``(rows, counts)``."""
    def load(sha: str) -> np.ndarray:
        return decode(store.get_bytes(original_key(sha)), image_cfg).rgb

    def put_crop(data: bytes) -> str:
        sha = sha256_hex(data)
        if not store.exists(derived_key(sha)):
            store.put_bytes(derived_key(sha), data, "image/jpeg")
        return sha

    embedder = load_embedder("baseline/hsv-hog-v1")
    wanted = sorted({it.item_id for s in street for it in s.linked if it.item_id in gallery_sha})
    by_item = {}
    for start in range(0, len(wanted), 64):  # a chunk of gallery pictures decoded at a time
        chunk = wanted[start:start + 64]
        by_item.update(zip(chunk, embedder.embed([load(gallery_sha[i]) for i in chunk])))
    for s in street:
        for it in s.linked:
            it.embedding = by_item.get(it.item_id)
    embed: Callable = embedder.embed
    with Progress("garment detection", len({s.image_sha256 for s in street}), "images") as prog:
        return detect_street_images(detector, street, load, put_crop, embed, min_box_side_px, min_match_similarity,
                                    progress=lambda done, total: prog.set(done))
