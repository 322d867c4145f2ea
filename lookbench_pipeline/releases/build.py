"""Forming a LookBench release's samples from the stage tables: one function per candidate kind (crawled products,
"shop the look" images, image drops, AI-generated images, the noise gallery's distractors), each candidate
climbing the one admission ladder (:class:`_Ladder`), then the gallery and the queries admitted as samples.

How samples are formed (``docs/ARCHITECTURE.md`` has the picture):

* ``real_studio_flat``: a crawled product's first accepted image (position 0, the catalogue packshot) goes to the
  gallery, its next distinct image becomes the query (``single-item``, ``easy``); further images go to the gallery.
* ``real_streetlook`` with detection (``detect.enabled``, the default): every garment the detector found in a
  "shop the look" image (or a street photo of an image drop) and matched to a product the look links is one query
  (``hard``; ``multi-item`` when the look has several items): its image is the item's crop (a derived image), with
  the look id, the item index and the box (pixels ``x1 y1 x2 y2`` on the look image); the positives are the
  product's gallery images. Detections matched to no linked product are rejected ``unlabelled_detection`` (never
  queries), linked products no detection matched are rejected ``linked_product_not_detected``; contamination and
  duplicate checks look at the look image.
* ``real_streetlook`` without detection (the documented fallback, ``detect.enabled: false``): a "shop the look"
  image is one whole-image query per product it links (``multi-item``, ``hard``), with the look id and no box.
* image drops: each file goes to the subset and role its drop config or CSV gives it.
* ``aigen_studio`` / ``aigen_streetlook``: each generated image that passed its checks (``generated_checks``,
  :mod:`lookbench_pipeline.aigen`) is a query of its reference item (``single-item`` / ``medium`` and
  ``multi-item`` / ``hard``, as LookBench sets them), with its provenance in the ``generation`` column; the
  positives are the reference item's gallery images. A street outfit's query carries the look id
  ``aigen-<request_id>``; when the garment detector matched the reference item in it, the query is that item's
  crop, with its box and item index, as for a shop's street look. Generated images the checks rejected are
  counted here with their reason.
* every subset's gallery is the whole catalogue gallery (all gallery images of the window), so distractors are
  the other items.
* a query whose image matches the contamination index (a legacy benchmark or an earlier release) is rejected
  with ``contamination:<source>``.
* ``noise/gallery.parquet``: the distractors mined for the window's items (``negatives`` table, see
  :mod:`lookbench_pipeline.negatives`), one row per image, ``task = distractor``; evaluation adds them to every
  subset's gallery. They are counted apart (``counts["noise"]``), not in ``candidates``.

A candidate sample is kept or rejected with a reason; ``candidates = query rows + gallery rows + rejected``.
The reasons, in the order the ladder tries them, are listed on :class:`_Ladder`; a kind adds its own before or
between its steps (``duplicate_within_item``, ``linked_product_not_crawled``, ``unlabelled_detection``,
``linked_product_not_detected``).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from datetime import datetime
from typing import Any

import pyarrow as pa

from .. import schemas
from ..annotate import format_main_attribute
from ..drops import subsets_of
from ..images import publishable_jpeg
from ..store import ObjectStore, derived_key
from ..taxonomy import Taxonomy
from ..windows import Window
from .candidate import ReleaseTables
from .reader import NOISE, STREET_SUBSETS, SUBSET_TASK, SUBSETS

_SKIP: Any = object()
"""A step of the ladder the caller does not ask for."""


class _Ladder:
    """The admission ladder of one build: the stage tables indexed, the rejections and the candidate count so far.

    A candidate climbs :meth:`climb`'s steps in this order; the first it fails is its reason:

    1. ``intake``: its picture was taken in (the kind gives the reason when not: ``look_image_not_accepted``,
       ``intake:<reason>`` for an image drop, the generated image's checks' reason);
    2. its ``first_seen_at`` is in the window, else ``outside_window``;
    3. its item is labelled, else ``not_labelled``;
    4. its subset is a release subset, else ``unknown_subset:<subset>``.

    A kind asks for the steps it has, in one call or in two (a look's links are checked for labels one by one,
    after the look itself passed steps 1 and 2). The samples then climb the rest of the ladder:
    :meth:`admit_gallery` (``gallery_too_small``, ``duplicate_in_gallery``) and :meth:`admit_queries`
    (``contamination:<source>``, ``duplicate_of_gallery_image``, ``duplicate_query``, ``no_positive_in_gallery``).
    """

    def __init__(self, window: Window, image_refs: pa.Table, images: pa.Table, clusters: pa.Table,
                 annotations: pa.Table, contamination: pa.Table | None, detections: pa.Table | None,
                 taxonomy: Taxonomy) -> None:
        self.window = window
        self.taxonomy = taxonomy
        self.img = {r["image_sha256"]: r for r in images.to_pylist()}
        self.cl = {r["image_sha256"]: r for r in clusters.to_pylist()}
        self.ann = {r["item_id"]: r for r in annotations.to_pylist()}
        self.leaked: dict[str, str] = {}
        for r in (contamination.to_pylist() if contamination is not None else []):
            self.leaked.setdefault(r["image_sha256"], r["source"])
        self.refs_by_owner: dict[tuple[str, str], list[dict]] = {}
        self.intake_reason: dict[tuple[str, str], str] = {}  # why an owner's image was refused at intake
        for r in image_refs.to_pylist():
            if r["status"] == "accepted":
                self.refs_by_owner.setdefault((r["owner_type"], r["owner_id"]), []).append(r)
            else:
                self.intake_reason.setdefault((r["owner_type"], r["owner_id"]), r["reason"] or "rejected")
        for v in self.refs_by_owner.values():
            v.sort(key=lambda r: r["position"])
        self.detect = detections is not None
        self.det_by_owner: dict[tuple[str, str], list[dict]] = {}
        for r in (detections.to_pylist() if detections is not None else []):
            if r["status"] != "dropped":  # dropped boxes are accounted for by the detection stage
                self.det_by_owner.setdefault((r["owner_type"], r["owner_id"]), []).append(r)
        self.n_street: Counter = Counter()
        self.rejected: list[dict] = []
        self.candidates = 0

    def reject(self, kind: str, ident: str, reason: str, source: str | None = None) -> None:
        self.rejected.append({"candidate": kind, "id": ident, "reason": reason, "source": source})

    def labelled(self, item_id: str) -> dict | None:
        a = self.ann.get(item_id)
        return a if a and a["status"] == "labelled" else None

    def climb(self, *, intake: str | None = None, first_seen: datetime = _SKIP, item_id: str = _SKIP,
              subset: str = _SKIP) -> tuple[str | None, dict | None]:
        """The steps asked for, in the ladder's order: ``(reason, None)`` at the first one failed, else
        ``(None, the item's annotation)`` (None when ``item_id`` was not asked for)."""
        if intake is not None:
            return intake, None
        if first_seen is not _SKIP and first_seen not in self.window:
            return "outside_window", None
        a = None
        if item_id is not _SKIP:
            a = self.labelled(item_id)
            if a is None:
                return "not_labelled", None
        if subset is not _SKIP and subset not in SUBSETS:
            return f"unknown_subset:{subset}", None
        return None, a

    def sample(self, role: str, subset: str, item_id: str, sha: str, a: dict, *, site: str, source: str,
               crawled_at: datetime | None, first_seen: datetime, look_id: str | None = None,
               box: list[float] | None = None, task: str | None = None, crop: dict | None = None) -> dict:
        """One sample of picture ``sha``; with ``crop`` (a DETECTIONS row) the sample's image is the crop and
        ``sha`` (the look image) is what the duplicate and contamination checks look at (``_check_sha``)."""
        attrs = {x["name"]: x["value"] for x in a["attributes"]}
        main_s, other_s = format_main_attribute(self.taxonomy, a["category"], attrs)
        t, difficulty = SUBSET_TASK[subset]
        pic = crop["crop_sha256"] if crop else sha
        sid = hashlib.sha1(f"{role}\x00{subset}\x00{item_id}\x00{pic}\x00{look_id}".encode()).hexdigest()[:16]
        return {
            "image": {"bytes": None, "path": f"{pic}.jpg"}, "item_ID": item_id, "category": a["category"],
            "main_attribute": main_s, "other_attributes": other_s, "task": task or t, "difficulty": difficulty,
            "sample_id": sid, "subset": subset, "role": role, "attributes": a["attributes"],
            "annotator": a["annotator"], "image_sha256": pic,
            "width": crop["crop_width"] if crop else self.img[sha]["width"],
            "height": crop["crop_height"] if crop else self.img[sha]["height"], "look_id": look_id, "box": box,
            "item_index": crop["item_index"] if crop else None, "site": site, "source_url": source,
            "crawled_at": crawled_at, "first_seen_at": first_seen, "_check_sha": sha, "_derived": bool(crop),
        }

    def street_items(self, owner: tuple[str, str], links: list[str], sha: str, subset: str, **kw: Any) -> list[dict]:
        """Queries from the detections of one street image; ``links`` are its linked, resolved item ids. Adds
        one candidate per link and per unlabelled detection."""
        dets = sorted(self.det_by_owner.get(owner, []), key=lambda r: r["item_index"])
        matched = {r["item_id"]: r for r in dets if r["status"] == "matched"}
        task = "multi-item" if len(dets) > 1 else "single-item"
        self.n_street["items_detected"] += len(dets)
        for r in dets:
            if r["status"] != "matched":
                self.candidates += 1
                self.n_street["unlabelled"] += 1
                self.reject("look_item", r["detection_id"], "unlabelled_detection", kw.get("source"))
        queries = []
        for item_id in links:
            self.candidates += 1
            reason, a = self.climb(item_id=item_id)
            if reason is not None:
                self.reject("look_item", f"{owner[1]}#{item_id}", reason, kw.get("source"))
            elif item_id not in matched:
                self.n_street["linked_not_detected"] += 1
                self.reject("look_item", f"{owner[1]}#{item_id}", "linked_product_not_detected", kw.get("source"))
            else:
                r = matched[item_id]
                self.n_street["matched"] += 1
                queries.append(self.sample("query", subset, item_id, sha, a, box=r["box"], task=task, crop=r, **kw))
        return queries

    def admit_gallery(self, gallery: list[dict], min_side_px: int) -> dict[str, dict]:
        """The gallery holds each picture once: ``{cluster_id: sample}`` of the samples kept, earliest first."""
        gal_by_cluster: dict[str, dict] = {}
        for g in sorted(gallery, key=lambda r: (r["first_seen_at"], r["item_ID"], r["sample_id"])):
            if min(g["width"] or 0, g["height"] or 0) < min_side_px:
                self.reject("gallery", g["sample_id"], "gallery_too_small", g["source_url"])
                continue
            c = self.cl[g["image_sha256"]]["cluster_id"]
            if c in gal_by_cluster:
                self.reject("gallery", g["sample_id"], "duplicate_in_gallery", g["source_url"])
                continue
            gal_by_cluster[c] = g
        return gal_by_cluster

    def admit_queries(self, queries: list[dict], gal_by_cluster: dict[str, dict]) -> list[dict]:
        """The queries kept: not contaminated, not a gallery picture, not a repeat, with a positive in the gallery."""
        gallery_items = {g["item_ID"] for g in gal_by_cluster.values()}
        kept_queries: list[dict] = []
        seen_q: set[tuple[str, str, str | None]] = set()
        for q in sorted(queries, key=lambda r: (r["subset"], r["item_ID"], r["sample_id"])):
            c = self.cl[q["_check_sha"]]["cluster_id"]
            if q["_check_sha"] in self.leaked:
                self.reject("query", q["sample_id"], f"contamination:{self.leaked[q['_check_sha']]}", q["source_url"])
            elif c in gal_by_cluster:
                self.reject("query", q["sample_id"], "duplicate_of_gallery_image", q["source_url"])
            elif (q["subset"], c, q["item_ID"]) in seen_q:
                self.reject("query", q["sample_id"], "duplicate_query", q["source_url"])
            elif q["item_ID"] not in gallery_items:
                self.reject("query", q["sample_id"], "no_positive_in_gallery", q["source_url"])
            else:
                seen_q.add((q["subset"], c, q["item_ID"]))
                kept_queries.append(q)
        return kept_queries


def _product_samples(lad: _Ladder, products: pa.Table) -> tuple[list[dict], list[dict]]:
    """RealStudioFlat from crawled products: packshot -> gallery, next distinct image -> studio-flat query, further
    images -> gallery. Returns ``(gallery, queries)``."""
    gallery: list[dict] = []
    queries: list[dict] = []
    product_rows = {r["product_id"]: r for r in products.to_pylist()}
    for pid, p in sorted(product_rows.items()):
        refs = lad.refs_by_owner.get(("product", pid), [])
        lad.candidates += len(refs)
        reason, a = lad.climb(first_seen=p["first_seen_at"], item_id=pid)
        if reason is not None:
            for r in refs:
                lad.reject("product_image", r["ref_id"], reason, r["source"])
            continue
        seen_clusters: set[str] = set()
        for r in refs:
            c = lad.cl[r["image_sha256"]]["cluster_id"]
            if c in seen_clusters:
                lad.reject("product_image", r["ref_id"], "duplicate_within_item", r["source"])
                continue
            role = "query" if len(seen_clusters) == 1 else "gallery"  # 1st distinct image gallery, 2nd query
            seen_clusters.add(c)
            row = lad.sample(role, "real_studio_flat", pid, r["image_sha256"], a, site=p["site"],
                             source=r["source"], crawled_at=p["crawled_at"], first_seen=p["first_seen_at"])
            (gallery if role == "gallery" else queries).append(row)
    return gallery, queries


def _look_queries(lad: _Ladder, looks: pa.Table) -> list[dict]:
    """RealStreetLook from "shop the look" images: one query per linked, labelled product (its crop through the
    detections, or the whole image in the fallback)."""
    queries: list[dict] = []
    for lk in sorted(looks.to_pylist(), key=lambda r: r["look_id"]):
        refs = lad.refs_by_owner.get(("look", lk["look_id"]), [])
        n_links = len(lk["product_urls"])
        lad.candidates += n_links
        reason, _ = lad.climb(intake=None if refs else "look_image_not_accepted", first_seen=lk["first_seen_at"])
        if reason is not None:
            for i in range(n_links):
                lad.reject("look_item", f"{lk['look_id']}#{i}", reason, refs[0]["source"] if refs else None)
            continue
        sha = refs[0]["image_sha256"]
        resolved = list(lk["product_ids"])
        for i in range(n_links - len(resolved)):
            lad.reject("look_item", f"{lk['look_id']}#u{i}", "linked_product_not_crawled")
        if lad.detect:
            lad.candidates -= len(resolved)  # street_items counts each resolved link (and each unlabelled detection)
            queries += lad.street_items(("look", lk["look_id"]), resolved, sha, "real_streetlook", site=lk["site"],
                                        source=refs[0]["source"], crawled_at=lk["crawled_at"],
                                        first_seen=lk["first_seen_at"], look_id=lk["look_id"])
            continue
        task = "multi-item" if n_links > 1 else "single-item"
        for pid in resolved:
            reason, a = lad.climb(item_id=pid)
            if reason is not None:
                lad.reject("look_item", f"{lk['look_id']}#{pid}", reason, refs[0]["source"])
                continue
            queries.append(lad.sample("query", "real_streetlook", pid, sha, a, site=lk["site"],
                                      source=refs[0]["source"], crawled_at=lk["crawled_at"],
                                      first_seen=lk["first_seen_at"], look_id=lk["look_id"], task=task))
    return queries


def _drop_samples(lad: _Ladder, drop_items: pa.Table) -> tuple[list[dict], list[dict]]:
    """Image drops: a file is a candidate of each subset it belongs to (drops.subsets_of; with several, each
    candidate's id is ``<drop_image_id>@<subset>``), a street-look query through its detections, or one
    whole-image sample in the role its drop gives it. Returns ``(gallery, queries)``."""
    gallery: list[dict] = []
    queries: list[dict] = []
    for d in sorted(drop_items.to_pylist(), key=lambda r: r["path"]):
        parts = subsets_of(d["subset"])
        for subset in parts:
            ident = d["drop_image_id"] if len(parts) == 1 else f"{d['drop_image_id']}@{subset}"
            lad.candidates += 1
            refs = lad.refs_by_owner.get(("drop", d["drop_image_id"]), [])
            # the intake's reason, as for AI-generated images (intake:not_an_image, intake:truncated...)
            intake = None if refs else f"intake:{lad.intake_reason.get(('drop', d['drop_image_id']), 'not_taken_in')}"
            reason, _ = lad.climb(intake=intake, first_seen=d["first_seen_at"])
            if reason is not None:
                lad.reject("drop_image", ident, reason, d["path"])
                continue
            if lad.detect and subset in STREET_SUBSETS and d["role"] == "query":
                lad.candidates -= 1  # the drop image's one link, counted again by street_items
                queries += lad.street_items(("drop", d["drop_image_id"]), [d["item_id"]], refs[0]["image_sha256"],
                                            subset, site=f"drop:{d['drop']}", source=d["path"], crawled_at=None,
                                            first_seen=d["first_seen_at"], look_id=d["drop_image_id"])
                continue
            reason, a = lad.climb(item_id=d["item_id"], subset=subset)
            if reason is not None:
                lad.reject("drop_image", ident, reason, d["path"])
                continue
            row = lad.sample(d["role"], subset, d["item_id"], refs[0]["image_sha256"], a, site=f"drop:{d['drop']}",
                             source=d["path"], crawled_at=None, first_seen=d["first_seen_at"])
            (gallery if d["role"] == "gallery" else queries).append(row)
    return gallery, queries


def _generated_queries(lad: _Ladder, generated_checks: pa.Table | None) -> list[dict]:
    """AIGen-Studio and AIGen-StreetLook: each AI-generated image whose checks passed is a query of its reference
    item, with its provenance in ``generation``."""
    queries: list[dict] = []
    for g in sorted(generated_checks.to_pylist() if generated_checks is not None else [],
                    key=lambda r: r["request_id"]):
        lad.candidates += 1
        reason, a = lad.climb(intake=None if g["status"] == "accepted" else g["reason"] or "rejected",
                              first_seen=g["first_seen_at"], item_id=g["reference_item_id"], subset=g["subset"])
        if reason is not None:
            lad.reject("generated_image", g["request_id"], reason)
            continue
        sha = g["image_sha256"]
        lad.img.setdefault(sha, {"width": g["width"], "height": g["height"]})
        lad.cl.setdefault(sha, {"cluster_id": g["cluster_id"] or sha})
        row = lad.sample("query", g["subset"], g["reference_item_id"], sha, a, site=f"aigen:{g['generator_model']}",
                         source=f"aigen:{g['request_id']}", crawled_at=None, first_seen=g["first_seen_at"],
                         look_id=f"aigen-{g['request_id']}" if g["kind"] == "street" else None,
                         box=g["region"] if g.get("region_source") == "detector" else None,
                         crop={k: g[k] for k in ("crop_sha256", "crop_width", "crop_height", "item_index")}
                         if g.get("crop_sha256") else None)
        row["generation"] = {"request_id": g["request_id"], "generator_model": g["generator_model"],
                             "generator_version": g["generator_version"], "prompt": g["prompt"], "seed": g["seed"],
                             "reference_image_sha256": g["reference_image_sha256"], "similarity": g["similarity"]}
        queries.append(row)
    return queries


def build(
    *,
    version: str,
    window: Window,
    products: pa.Table,
    looks: pa.Table,
    drop_items: pa.Table,
    image_refs: pa.Table,
    images: pa.Table,
    clusters: pa.Table,
    annotations: pa.Table,
    contamination: pa.Table | None = None,
    noise: pa.Table | None = None,
    generated_checks: pa.Table | None = None,
    detections: pa.Table | None = None,
    taxonomy: Taxonomy,
    store: ObjectStore,
    gallery_min_side_px: int = 200,
) -> ReleaseTables:
    """Form query and gallery samples from the stage tables (see the module docstring for the rules).

    ``detections`` (schema DETECTIONS): street-look items found by the detector; None uses the fallback (one
    whole-image query per linked product).

    ``gallery_min_side_px`` (``images.gallery_min_side_px``): a gallery picture whose short side is below it is
    rejected ``gallery_too_small`` (a thumbnail, not the item's photo).

    Rows are sorted by (item_ID, sample_id), so the same inputs give byte-identical files.
    """
    lad = _Ladder(window, image_refs, images, clusters, annotations, contamination, detections, taxonomy)
    product_gallery, product_queries = _product_samples(lad, products)
    look_queries = _look_queries(lad, looks)
    drop_gallery, drop_queries = _drop_samples(lad, drop_items)
    generated = _generated_queries(lad, generated_checks)

    gal_by_cluster = lad.admit_gallery(product_gallery + drop_gallery, gallery_min_side_px)
    gallery = list(gal_by_cluster.values())
    kept_queries = lad.admit_queries(product_queries + look_queries + drop_queries + generated, gal_by_cluster)

    files: dict[tuple[str, str], pa.Table] = {}
    jpegs: dict[str, bytes] = {}
    gallery_sorted = sorted(gallery, key=lambda r: (r["item_ID"], r["sample_id"]))
    for subset in SUBSETS:
        qs = [q for q in kept_queries if q["subset"] == subset]
        if not qs:
            continue
        files[(subset, "query")] = _with_bytes(qs, store, jpegs)
        files[(subset, "gallery")] = _with_bytes([{**g, "subset": subset} for g in gallery_sorted], store, jpegs)
    noise_counts = None
    if noise is not None and noise.num_rows and files:
        noise_rows, noise_counts = _noise_gallery(noise, lad.img, gallery + kept_queries, taxonomy)
        if noise_rows:
            files[(NOISE, "gallery")] = _with_bytes(noise_rows, store, jpegs)
    reasons = Counter(r["reason"] for r in lad.rejected)
    counts = {
        "candidates": lad.candidates,
        "query_rows": len(kept_queries),
        "gallery_rows_distinct": len(gallery),
        "rejected": len(lad.rejected),
        "rejected_by_reason": dict(sorted(reasons.items())),
        "per_file_rows": {f"{s}/{r}": t.num_rows for (s, r), t in sorted(files.items())},
    }
    if noise_counts is not None:
        counts["noise"] = noise_counts
    if detections is not None:
        counts["street_look_items"] = {k: lad.n_street[k] for k in ("items_detected", "matched", "unlabelled",
                                                                     "linked_not_detected")}
    return ReleaseTables(version=version, window=window, files=files, rejected=lad.rejected, counts=counts)


def _by_reason(reasons: Counter) -> str:
    return ", ".join(f"{r} {n}" for r, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))


def why_no_queries(rel: ReleaseTables, *, looks: pa.Table, drop_items: pa.Table,
                   generated_checks: pa.Table | None = None, products: pa.Table | None = None,
                   look_rules: dict[str, tuple[str, str]] | None = None) -> str:
    """Why ``rel`` has no query row, in one line, for the failed ``has_queries`` check: each source of queries
    (see the module docstring) and what became of its candidates, so that the engineer of a new shop knows what
    to fix.

    * the window's looks: none found (the sites' ``look_rules``, from ``look_rules``: ``{site: (image rule,
      products rule)}``, matched nothing on the crawled pages), or how many and their items' rejections by reason;
    * the image drops' query images (``drop_items`` rows of role ``query``) and the AI-generated images;
    * the crawled products (a studio-flat query is a product's second distinct picture);
    * every rejection of the build by candidate kind and reason (``rel.rejected``).
    """
    parts = []
    if looks.num_rows == 0:
        rules = "; ".join(f"{s}: {img} / {prods}" for s, (img, prods) in sorted((look_rules or {}).items()))
        parts.append("the window's crawl found 0 looks (the sites' look_rules matched no look image and product "
                     f"links on the crawled pages{': ' + rules if rules else ''})")
    else:
        parts.append(f"looks {looks.num_rows}")
    n_drop_q = sum(1 for r in drop_items.column("role").to_pylist() if r == "query") if drop_items.num_rows else 0
    parts.append(f"image drops supply {n_drop_q} query images" if n_drop_q else "no image drop supplies query images")
    n_gen = generated_checks.num_rows if generated_checks is not None else 0
    parts.append(f"AI-generated images {n_gen}")
    if products is not None:
        parts.append(f"products {products.num_rows} (a studio query is a product's 2nd distinct picture)")
    by_kind: dict[str, Counter] = {}
    for r in rel.rejected:
        by_kind.setdefault(r["candidate"], Counter())[r["reason"]] += 1
    if by_kind:
        parts.append("rejected " + ", ".join(f"{k} {sum(c.values())} ({_by_reason(c)})"
                                             for k, c in sorted(by_kind.items())))
    else:
        parts.append("rejected 0")
    return "no query rows: " + "; ".join(parts)


def noise_rows(negatives: pa.Table) -> list[dict]:
    """One row per distinct distractor of a ``negatives`` table (first occurrence), sorted by sha256: what the
    release's ``noise`` gallery holds."""
    rows: dict[str, dict] = {}
    for r in negatives.to_pylist():
        rows.setdefault(r["distractor_sha256"], r)
    return [rows[k] for k in sorted(rows)]


def _noise_gallery(noise: pa.Table, window_images: dict[str, dict], release_rows: list[dict],
                   taxonomy: Taxonomy) -> tuple[list[dict], dict[str, Any]]:
    """The ``noise`` gallery rows from a ``negatives`` table: one per distinct distractor image. A distractor
    whose image is an image of the window, or whose item id is a release item id, is dropped (the mining stage
    already deduplicated; this is the last guard). Returns ``(rows, counts)`` with ``in = rows + dropped``."""
    release_items = {r["item_ID"] for r in release_rows}
    t, difficulty = SUBSET_TASK[NOISE]
    rows, dropped = [], Counter()
    distinct = noise_rows(noise)
    for d in distinct:
        sha = d["distractor_sha256"]
        if sha in window_images:
            dropped["noise_duplicate_of_release_image"] += 1
            continue
        if d["distractor_item_id"] in release_items:
            dropped["noise_item_id_is_a_release_item"] += 1
            continue
        attrs = {a["name"]: a["value"] for a in d["distractor_attributes"] or []}
        main_s, other_s = format_main_attribute(taxonomy, d["distractor_category"], attrs)
        item = d["distractor_item_id"]
        rows.append({
            "image": {"bytes": None, "path": f"{sha}.jpg"}, "item_ID": item, "category": d["distractor_category"],
            "main_attribute": main_s, "other_attributes": other_s, "task": t, "difficulty": difficulty,
            "sample_id": hashlib.sha1(f"gallery\x00noise\x00{item}\x00{sha}\x00None".encode()).hexdigest()[:16],
            "subset": NOISE, "role": "gallery", "attributes": d["distractor_attributes"],
            "annotator": d["distractor_annotator"], "image_sha256": sha, "width": d["width"], "height": d["height"],
            "look_id": None, "box": None, "site": f"legacy:{d['distractor_source']}",
            "source_url": d["distractor_path"], "crawled_at": None, "first_seen_at": None,
        })
    counts = {"in": len(distinct), "rows": len(rows), "dropped": sum(dropped.values()),
              "dropped_by_reason": dict(sorted(dropped.items()))}
    return rows, counts


def _with_bytes(rows: list[dict], store: ObjectStore, cache: dict[str, bytes]) -> pa.Table:
    out = []
    for r in sorted(rows, key=lambda r: (r["item_ID"], r["sample_id"])):
        sha = r["image_sha256"]
        if sha not in cache:  # a crop is stored as the JPEG it is published as; an original is normalised first
            cache[sha] = store.get_bytes(derived_key(sha)) if r.get("_derived") else publishable_jpeg(store, sha)
        out.append({**r, "image": {"bytes": cache[sha], "path": r["image"]["path"]}})
    return schemas.from_rows(out, schemas.RELEASE)
