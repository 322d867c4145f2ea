"""The attribute stage's image-model half: the annotator and judge a configuration describes, each item's
representative image labelled by them, and how often they agree with the catalogue-text labels. Called by
``pipeline.stage_attributes`` (and, for the annotator, by the AI-generation check through the factory the stage
passes in).
"""

from __future__ import annotations

import os
import time
from typing import Any

import pyarrow as pa

from .. import schemas
from ..annotate import label_counts
from ..config import PipelineConfig
from ..logs import Progress
from ..store import ObjectStore, original_key
from ..taxonomy import Taxonomy
from .annotator import ImageItem, VlmAnnotator, VlmJudge
from .fitted import fit_inputs
from .prompts import JUDGE_PROMPT_VERSION, PROMPT_VERSION
from .stats import acceptance_rates, summarize


def annotator_from_config(cfg: PipelineConfig, tax: Taxonomy,
                          fitted_store: ObjectStore | None = None) -> VlmAnnotator:
    """The image annotator (and judge) ``cfg.annotate`` describes, reading inputs already fitted from
    ``fitted_store`` when given (:mod:`.fitted`). Raises ValueError when ``endpoint`` is unset."""
    a = cfg.annotate
    if not a.endpoint:
        raise ValueError("annotate.endpoint is not set")
    judge = None
    if a.judge.enabled:
        judge = VlmJudge(a.judge.endpoint or a.endpoint, a.judge.model or a.model,
                             os.environ.get(a.judge.api_key_env or a.api_key_env))
    cache = cfg.layout.resolve(a.cache) if a.cache else cfg.layout.vlm_cache
    return VlmAnnotator(
        a.endpoint, a.model, tax, api_key=os.environ.get(a.api_key_env), judge=judge, on_reject=a.judge.on_reject,
        cache=cache, concurrency=a.concurrency, timeout_s=a.timeout_s, max_retries=a.max_retries,
        backoff_s=a.backoff_s, max_backoff_s=a.max_backoff_s, max_model_len=a.max_model_len,
        max_image_tokens=a.max_image_tokens, temperature=a.temperature, max_tokens=a.max_tokens, seed=a.seed,
        extra_body=a.extra_body, fitted_store=fitted_store)


def label_images(cfg: PipelineConfig, tax: Taxonomy, text_labels: list, drop_items: pa.Table,
                    image_refs: pa.Table, store: ObjectStore) -> tuple[pa.Table, dict[str, Any]]:
    """Label each item of ``text_labels`` (the catalogue-text labels, one per product and drop item) from its
    representative image with the image model and judge ``cfg.annotate`` describes: a product's first accepted
    image (its packshot), a drop item's first gallery image, else its first image; an item without an accepted
    image is rejected with ``no_accepted_image``. Returns ``(annotations, counts)``: the ``ANNOTATIONS`` table and
    :func:`annotate.label_counts` plus the model, server and prompt versions, requests and cache hits, the judge's
    acceptance rates, the agreement with the catalogue text (:func:`agreement`), and ``fitted_inputs``: what
    :func:`.fitted.fit_inputs` did before the first request (every representative image fitted to
    ``annotate.max_image_tokens`` once and kept in the store) and how many images the annotator read from there.

    Raises:
        VlmEndpointError: the endpoint is unreachable or does not serve the model.
    """
    accepted: dict[tuple[str, str], list[dict]] = {}
    for r in image_refs.to_pylist():
        if r["status"] == "accepted":
            accepted.setdefault((r["owner_type"], r["owner_id"]), []).append(r)
    drop_refs: dict[str, list[tuple[int, str, str]]] = {}  # item_id -> (gallery first, path, sha)
    for d in drop_items.to_pylist():
        for r in accepted.get(("drop", d["drop_image_id"]), []):
            drop_refs.setdefault(d["item_id"], []).append((d["role"] != "gallery", d["path"], r["image_sha256"]))

    def loader(sha: str):
        return lambda: store.get_bytes(original_key(sha))

    use_text_category = cfg.annotate.category_from == "text"
    items, no_image = [], []
    for tl in text_labels:
        refs = accepted.get(("product", tl.item_id))
        if refs:
            sha = min(refs, key=lambda r: r["position"])["image_sha256"]
        elif tl.item_id in drop_refs:
            sha = min(drop_refs[tl.item_id])[2]
        else:
            no_image.append(tl.item_id)
            continue
        items.append(ImageItem(tl.item_id, loader(sha), sha256=sha,
                                   category=tl.category if use_text_category and tl.category else None))
    # every representative image fitted to the model's budget once, in worker threads, and kept in the store: the
    # annotator and the judge then send the stored bytes (and a rerun or the next release fits nothing)
    with Progress("image-model inputs", len({it.sha256 for it in items}), "images") as prog:
        fit = fit_inputs(store, [it.sha256 for it in items], cfg.annotate.max_image_tokens,
                         progress=lambda done, total: prog.set(done))
    annotator = annotator_from_config(cfg, tax, fitted_store=store)
    started = time.monotonic()
    try:
        with Progress("attribute annotation", len(items), "items") as prog:
            labels = annotator.annotate_images(items, progress=lambda done, total: prog.set(done))
    finally:
        annotator.cache.close()
    rows = [lb.row() for lb in labels]
    for item_id in no_image:
        rows.append({"item_id": item_id, "status": "rejected", "reason": "no_accepted_image", "category": None,
                     "attributes": [], "annotator": annotator.name, "taxonomy_version": tax.version,
                     "model": annotator.model, "prompt_version": PROMPT_VERSION, "requests": 0})
    counts = label_counts(rows)
    run = summarize(labels, started)
    counts.update({"annotator": annotator.name, "taxonomy_version": tax.version, "model": annotator.model,
                   "server_version": next((lb.server_version for lb in labels if lb.server_version), None),
                   "prompt_version": PROMPT_VERSION, "requests": run["requests"],
                   "cache_hits": run["cache_hits"], "seconds": run["seconds"],
                   "fitted_inputs": {**fit.as_dict(), "read_by_annotator": annotator.fitted_reads}})
    if annotator.judge is not None:
        rates = acceptance_rates(rows)
        counts.update({"judge_model": annotator.judge.model, "judge_prompt_version": JUDGE_PROMPT_VERSION,
                       "judge_on_reject": annotator.on_reject, "acceptance": rates,
                       "acceptance_rate": rates["overall"]})
    counts["agreement_with_catalog_text"] = agreement(text_labels, labels)
    return schemas.from_rows(rows, schemas.ANNOTATIONS), counts


def agreement(text_labels: list, labels: list) -> dict[str, Any]:
    """How often the image model agrees with the catalogue-text baseline: on the category (items both labelled)
    and per attribute (where both carry a value)."""
    by_id = {lb.item_id: lb for lb in labels if lb.status == "labelled"}
    cat_n = cat_ok = 0
    attr_n: dict[str, int] = {}
    attr_ok: dict[str, int] = {}
    for tl in text_labels:
        lb = by_id.get(tl.item_id)
        if tl.status != "labelled" or lb is None:
            continue
        cat_n += 1
        cat_ok += tl.category == lb.category
        if tl.category != lb.category:
            continue
        for a, v in tl.attributes.items():
            if a in lb.attributes:
                attr_n[a] = attr_n.get(a, 0) + 1
                attr_ok[a] = attr_ok.get(a, 0) + (lb.attributes[a] == v)
    return {"category": round(cat_ok / cat_n, 4) if cat_n else None, "items_compared": cat_n,
            "by_attribute": {a: round(attr_ok[a] / n, 4) for a, n in sorted(attr_n.items())}}
