"""What the other stages take from the AI-generated subsets: the image-intake references of the generated images
(:func:`image_refs_of`), the street outfits shaped for garment detection and its boxes back
(:func:`detection_inputs`, :func:`regions_from_detections`), and what a release manifest records
(:func:`manifest_summary`)."""

from __future__ import annotations

import hashlib
from typing import Any

import pyarrow as pa

from .. import schemas
from ..config import PipelineConfig
from ..images import ImageRef
from .reference_check import ANNOTATOR_PIXEL_COLOUR
from .requests import PROMPT_VERSION


def image_refs_of(generated: pa.Table) -> list[ImageRef]:
    """The image-intake references of the generated images (owner type ``generated``, owner id = request id)."""
    return [ImageRef("generated", g["request_id"], 0, g["path"], f"aigen:{g['generator_model']}", g["first_seen_at"])
            for g in generated.to_pylist() if g["status"] == "generated"]


def detection_inputs(generated: pa.Table, gen_refs: pa.Table) -> tuple[pa.Table, pa.Table]:
    """The street outfits that image intake accepted, shaped for the garment-detection stage, which
    detects every garment of a "shop the look" picture and matches the products the look links: ``(looks,
    image_refs)``, one look ``aigen-<request_id>`` per outfit linking its reference item, and its accepted image as
    an ``image_refs`` row of owner type ``look``. Detection on these gives boxes for
    :func:`regions_from_detections`."""
    refs = {r["owner_id"]: r for r in gen_refs.to_pylist() if r["status"] == "accepted"}
    looks, images = [], []
    for g in generated.to_pylist():
        ref = refs.get(g["request_id"])
        if g["kind"] != "street" or g["status"] != "generated" or ref is None:
            continue
        look_id = f"aigen-{g['request_id']}"
        looks.append({"look_id": look_id, "site": "aigen", "url": f"aigen:{g['request_id']}", "image_url": g["path"],
                      "product_urls": [], "product_ids": [g["reference_item_id"]], "crawled_at": None,
                      "first_seen_at": g["first_seen_at"], "last_seen_at": g["first_seen_at"], "disappeared_at": None})
        images.append({**ref, "owner_type": "look", "owner_id": look_id,
                       "ref_id": hashlib.sha1(f"look\x00{look_id}\x000".encode()).hexdigest()})
    return schemas.from_rows(looks, schemas.LOOKS), schemas.from_rows(images, schemas.IMAGE_REFS)


def regions_from_detections(detections: pa.Table) -> dict[str, list[dict]]:
    """``request_id -> detections`` from the garment-detection table (``schemas.DETECTIONS``) of the looks of
    :func:`detection_inputs`: the boxes matched to the reference item (``status == matched``), best score first.
    A request without one is checked by the window search."""
    out: dict[str, list[dict]] = {}
    for d in sorted(detections.to_pylist(), key=lambda d: -(d.get("score") or 0.0)):
        owner = d.get("owner_id") or ""
        if owner.startswith("aigen-") and d.get("status") == "matched" and d.get("box"):
            out.setdefault(owner.removeprefix("aigen-"), []).append(d)
    return out


def manifest_summary(cfg: PipelineConfig, checks: pa.Table | None = None) -> dict[str, Any]:
    """What a release manifest records of the AI-generated subsets: the configuration that matters for
    reproducing them and, per generator (model@version), how many of its images the checks accepted."""
    a = cfg.aigen
    out: dict[str, Any] = {
        "enabled": a.enabled, "backend": a.backend, "prompt_version": PROMPT_VERSION, "seed": a.seed,
        "subsets": list(a.subsets), "items_per_subset": a.items_per_subset,
        "endpoint": (a.endpoint.base_url or "scripted (lookbench_pipeline.demo.aigen_server on 127.0.0.1)")
        if a.backend == "endpoint" else None,
        "check": {"embedder": a.check.embedder, "min_similarity": a.check.min_similarity,
                  "min_attribute_agreement": a.check.min_attribute_agreement,
                  "require_attribute": a.check.require_attribute,
                  "annotator": ("vlm:" + cfg.annotate.model) if (a.check.annotator == "vlm" or (
                      a.check.annotator == "auto" and cfg.annotate.endpoint)) else ANNOTATOR_PIXEL_COLOUR},
    }
    if checks is not None:
        gens: dict[str, int] = {}
        for c in checks.to_pylist():
            if c["status"] == "accepted":
                k = f"{c['generator_model']}@{c['generator_version']}"
                gens[k] = gens.get(k, 0) + 1
        out["generators"] = dict(sorted(gens.items()))
    return out
