"""The check of the generated images (:func:`check_generated`): not a duplicate of a real image, not in the
contamination index, and showing its reference product (located and compared by :mod:`.reference_check`, labelled by
the labeller :func:`labeller_for` picks)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from .. import dedup
from ..config import PipelineConfig
from ..images import ImageRejected, decode
from ..store import ObjectStore, StoreError, original_key
from ..taxonomy import Taxonomy
from .reference_check import (ANNOTATOR_PIXEL_COLOUR, COLOUR_ANCHORS, COLOUR_FAMILY, PixelColourAnnotator,
                              compare_attributes, locate, prepare_reference)

log = logging.getLogger(__name__)


@dataclass
class CheckContext:
    """What :func:`check_generated` needs besides the generated images themselves."""

    annotations: pa.Table
    real_images: pa.Table
    contamination: pa.Table  # rows of the CONTAMINATION table for the generated images (find_contamination)
    store: ObjectStore
    taxonomy: Taxonomy
    detections: dict[str, list[dict]] | None = None  # request id -> detections matched to the reference item
    cache: dict[str, Any] = field(default_factory=dict)
    # builds the image annotator of annotate.endpoint (the stage passes vlm.attributes.annotator_from_config); needed only when
    # aigen.check.annotator chooses the image model
    vlm_annotator: Callable[[], Any] | None = None


def _real_duplicates(gen_images: list[dict], real_images: list[dict], threshold: int, max_color_diff: float,
                     max_foreground_delta_e: float = dedup.MAX_FOREGROUND_DELTA_E) -> dict[str, str]:
    """Generated sha256 -> the real image it duplicates (same bytes, or pHash within ``threshold`` bits and
    confirmed by colour, as :func:`lookbench_pipeline.dedup.cluster` decides)."""
    out: dict[str, str] = {}
    real_by_sha = {r["image_sha256"]: r for r in real_images}
    real = [r for r in real_images if "uniform" not in (r.get("flags") or [])]
    rh = dedup.hex_to_u64([r["phash"] for r in real]) if real else np.zeros(0, np.uint64)
    for g in gen_images:
        if g["image_sha256"] in real_by_sha:
            out[g["image_sha256"]] = g["image_sha256"]
            continue
        if not len(rh) or "uniform" in (g.get("flags") or []):
            continue
        d = dedup.popcount64(rh ^ dedup.hex_to_u64([g["phash"]])[0])
        for j in np.nonzero(d <= threshold)[0][np.argsort(d[d <= threshold], kind="stable")]:
            if dedup.confirmed_by_colour(g, real[j], max_color_diff, max_foreground_delta_e):
                out[g["image_sha256"]] = real[j]["image_sha256"]
                break
    return out


class PixelLabeller:
    """The baseline image annotator of the check: :class:`~lookbench_pipeline.aigen.reference_check
    .PixelColourAnnotator` on the garment's pixels at the located region. Its colours are families (navy is blue,
    burgundy red…), so the reference's colour is compared by family
    (:data:`~lookbench_pipeline.aigen.reference_check.COLOUR_FAMILY`)."""

    families = True

    def __init__(self, taxonomy: Taxonomy):
        self.name = ANNOTATOR_PIXEL_COLOUR
        self.annotator = PixelColourAnnotator(
            allowed=[c for c in taxonomy.values.get("color", {}) if c in COLOUR_ANCHORS] or None,
            solid_share=0.9 if "solid" in taxonomy.values.get("pattern", {}) else None)

    def label(self, jobs: Sequence[tuple[str, str, Any]]) -> dict[str, tuple[dict[str, str] | None, str | None]]:
        """``{request_id: (labels, None)}`` for jobs ``(request_id, image sha256, Match)``."""
        return {rid: (self.annotator.label(m.pixels), None) for rid, _, m in jobs}


class VlmLabeller:
    """The image model that labels the real items (``annotate.endpoint``, :class:`lookbench_pipeline.vlm
    .VlmAnnotator`, with its judge and cache) asked about the located region of each generated image, category
    included (it is not told the reference's category, so a picture of another garment is caught)."""

    families = False

    def __init__(self, annotator: Any, store: ObjectStore):
        self.annotator = annotator
        self.name = self.annotator.name
        self.store = store

    def label(self, jobs: Sequence[tuple[str, str, Any]]) -> dict[str, tuple[dict[str, str] | None, str | None]]:
        from .. import vlm

        items = [vlm.ImageItem(f"aigen:{rid}", (lambda sha=sha: self.store.get_bytes(original_key(sha))), sha256=sha,
                               box=tuple(float(v) for v in m.box)) for rid, sha, m in jobs]
        try:
            labels = self.annotator.annotate_images(items) if items else []
        finally:
            self.annotator.cache.close()
        out: dict[str, tuple[dict[str, str] | None, str | None]] = {}
        for (rid, _, _), lb in zip(jobs, labels):
            if lb.status == "labelled":
                out[rid] = ({"category": lb.category or "", **lb.attributes}, None)
            else:
                out[rid] = (None, f"annotation_{lb.status}:{lb.reason}")
        return out


def labeller_for(cfg: PipelineConfig, taxonomy: Taxonomy, store: ObjectStore,
                 vlm_annotator: Callable[[], Any] | None = None) -> PixelLabeller | VlmLabeller:
    """``aigen.check.annotator``: ``vlm`` (or ``auto`` with ``annotate.endpoint`` set) labels generated images with
    the same image model as the real items (the annotator ``vlm_annotator()`` builds: the caller passes the
    factory, so this module does not reach up into the stages); ``pixel-colour`` (or ``auto`` without one) with
    the baseline.

    Raises:
        ValueError: the image model is chosen and no ``vlm_annotator`` factory was given.
    """
    choice = cfg.aigen.check.annotator
    if choice == "vlm" or (choice == "auto" and cfg.annotate.endpoint):
        if vlm_annotator is None:
            raise ValueError("aigen.check.annotator chose the image model (annotate.endpoint) but no annotator "
                             "factory was passed (CheckContext.vlm_annotator)")
        return VlmLabeller(vlm_annotator(), store)
    return PixelLabeller(taxonomy)


def check_generated(cfg: PipelineConfig, generated: pa.Table, gen_refs: pa.Table, gen_images: pa.Table,
                    ctx: CheckContext) -> tuple[list[dict], dict[str, Any]]:
    """One ``generated_checks`` row per ``generated_images`` row, accepted or rejected with the first failing
    reason in this order: the generation (``generation_failed:<r>`` / ``generation_pending`` /
    ``generation_skipped:<r>``), the image intake (``intake:<r>``), ``duplicate_of_real_image``,
    ``contamination:<source>``, then the reference check (``reference_not_labelled``, ``reference_unreadable``,
    ``annotation_failed:<r>`` / ``annotation_rejected:<r>``; else ``category_disagreement``,
    ``attribute_disagreement:<attrs>``, ``no_attribute_to_compare``, ``similarity_below_threshold``: every failing
    one, joined by ``;``).

    The check runs in two passes: every image is located and its similarity measured, then all are labelled at
    once (an image model answers a batch concurrently).

    Raises:
        EmbedderUnavailable: the configured check embedder cannot be loaded.
    """
    from ..embed import load_embedder

    chk = cfg.aigen.check
    ann = {r["item_id"]: r for r in ctx.annotations.to_pylist() if r["status"] == "labelled"}
    ref_rows = {r["owner_id"]: r for r in gen_refs.to_pylist()}
    img_rows = {r["image_sha256"]: r for r in gen_images.to_pylist()}
    leaked: dict[str, str] = {}
    for r in ctx.contamination.to_pylist():
        leaked.setdefault(r["image_sha256"], r["source"])
    dup_real = _real_duplicates(list(img_rows.values()), ctx.real_images.to_pylist(), cfg.dedup.hamming_threshold,
                                cfg.dedup.max_color_diff, cfg.dedup.max_foreground_delta_e)
    clusters = {r["image_sha256"]: r["cluster_id"]
                for r in dedup.cluster(list(img_rows.values()), cfg.dedup.hamming_threshold, **cfg.dedup.match)}
    embedder = None
    rows, jobs = [], []
    for g in generated.to_pylist():
        row: dict[str, Any] = {k: g[k] for k in ("request_id", "kind", "subset", "reference_item_id",
                                                 "reference_image_sha256", "backend", "generator_model",
                                                 "generator_version", "prompt", "seed", "first_seen_at")}
        row["source"] = g["path"]
        reason = None
        ref = ref_rows.get(g["request_id"])
        if g["status"] == "pending":
            reason = "generation_pending"
        elif g["status"] != "generated":
            reason = f"generation_{g['status']}:{g['reason']}"
        elif ref is None or ref["status"] != "accepted":
            reason = f"intake:{ref['reason'] if ref else 'not_taken_in'}"
        else:
            sha = ref["image_sha256"]
            info = img_rows[sha]
            row.update(image_sha256=sha, cluster_id=clusters.get(sha), width=info["width"], height=info["height"])
            if sha in dup_real:
                reason = "duplicate_of_real_image"
            elif sha in leaked:
                reason = f"contamination:{leaked[sha]}"
            elif g["reference_item_id"] not in ann:
                reason = "reference_not_labelled"
            else:
                if embedder is None:
                    embedder = load_embedder(chk.embedder)
                m = _locate(row, g, sha, embedder, ctx)
                if m is None:
                    reason = "reference_unreadable"
                else:
                    jobs.append((g["request_id"], sha, m))
        row["status"] = "rejected" if reason else None
        row["reason"] = reason
        rows.append(row)
    labeller = labeller_for(cfg, ctx.taxonomy, ctx.store, ctx.vlm_annotator) if jobs else None
    labels = labeller.label(jobs) if labeller else {}
    matches = {rid: m for rid, _, m in jobs}
    for row in rows:
        if row["status"] is None:
            got, failed = labels[row["request_id"]]
            row["annotator"] = labeller.name
            row["reason"] = failed or _decide(row, got, ann[row["reference_item_id"]], matches[row["request_id"]],
                                              labeller.families, ctx.taxonomy, chk)
            row["status"] = "rejected" if row["reason"] else "accepted"
    counts: dict[str, Any] = {"in": len(rows), "accepted": 0, "rejected": 0, "embedder": chk.embedder,
                              "annotator": labeller.name if labeller else None, "min_similarity": chk.min_similarity,
                              "min_attribute_agreement": chk.min_attribute_agreement}
    for r in rows:
        counts[r["status"]] += 1
        if r["reason"]:
            counts[f"rejected.{r['reason']}"] = counts.get(f"rejected.{r['reason']}", 0) + 1
    for subset in sorted({r["subset"] for r in rows}):
        counts[f"accepted.{subset}"] = sum(1 for r in rows if r["subset"] == subset and r["status"] == "accepted")
    assert counts["in"] == counts["accepted"] + counts["rejected"]
    return rows, counts


def _locate(row: dict, g: dict, sha: str, embedder: Any, ctx: CheckContext) -> Any:
    """Find the reference garment in the generated image and record the similarity; None when the reference
    picture cannot be read."""
    key = f"ref:{g['reference_image_sha256']}"
    try:
        if key not in ctx.cache:
            ctx.cache[key] = prepare_reference(
                decode(ctx.store.get_bytes(original_key(g["reference_image_sha256"]))).rgb, embedder)
        reference = ctx.cache[key]
    except (ImageRejected, StoreError) as exc:
        log.warning("aigen: reference image %s unreadable: %s", g["reference_image_sha256"], exc)
        return None
    image = decode(ctx.store.get_bytes(original_key(sha))).rgb  # accepted by the intake just before
    dets = (ctx.detections or {}).get(g["request_id"]) or []
    m = locate(reference, image, embedder, [d["box"] for d in dets] or None)
    row.update(similarity=m.similarity, region=[float(v) for v in (m.seed_box or m.box)],
               region_source="detector" if dets else "window_search", embedder=embedder.model_id)
    if dets:  # the detected item: its number in the outfit and its crop (what the release publishes)
        d = dets[m.seed_index]
        row.update({k: d.get(k) for k in ("item_index", "crop_sha256", "crop_width", "crop_height")})
    return m


def _decide(row: dict, got: dict[str, str], ref_ann: dict, m: Any, families: bool, taxonomy: Taxonomy,
            chk: Any) -> str | None:
    ref_attrs = {x["name"]: x["value"] for x in ref_ann["attributes"]}
    cat = taxonomy.categories.get(ref_ann["category"])
    labels = {k: v for k, v in got.items() if k != "category" and (cat is None or k in cat.attributes)}
    if families:  # the pixel annotator names colour families; "multicolour" is not a colour it can check
        ref_attrs = {k: (COLOUR_FAMILY.get(v, v) if k == "color" else v) for k, v in ref_attrs.items()
                     if not (k == "color" and v == "multicolour")}
    row.update(attributes=[{"name": k, "value": v} for k, v in sorted(labels.items())])
    compared, agreed, bad = compare_attributes(labels, ref_attrs, taxonomy.not_visible)
    row.update(attributes_compared=compared, attributes_agreed=agreed)
    fails = []
    if got.get("category") and got["category"] != ref_ann["category"]:
        fails.append("category_disagreement")
    if compared == 0:
        if chk.require_attribute:
            fails.append("no_attribute_to_compare")
    elif agreed / compared < chk.min_attribute_agreement:
        fails.append("attribute_disagreement:" + ",".join(bad))
    if m.similarity < chk.min_similarity:
        fails.append("similarity_below_threshold")
    return ";".join(fails) or None
