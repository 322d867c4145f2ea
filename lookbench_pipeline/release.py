"""Building and publishing a LookBench release.

Layout in the object store (as LookBench publishes it)::

    releases/v{YYYYMMDD}/{subset}/query.parquet
    releases/v{YYYYMMDD}/{subset}/gallery.parquet
    releases/v{YYYYMMDD}/README.md          <- dataset card (Hugging Face front matter: a config per subset)
    releases/v{YYYYMMDD}/croissant.json     <- Croissant metadata
    releases/v{YYYYMMDD}/CHANGES.md, changes.parquet   <- what changed since the previous version
    releases/v{YYYYMMDD}/manifest.json      <- written last: a version exists once its manifest does
    releases/latest                          <- the newest version's name, written after its manifest
    releases/.staging/v{YYYYMMDD}-{nonce}/   <- files being published (lookbench_pipeline.publishing)

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
  crop, with its box and item index, as for a shop's street look. Generated images the checks rejected are counted here with their reason.
* every subset's gallery is the whole catalogue gallery (all gallery images of the window), so distractors are
  the other items.
* a query whose image matches the contamination index (a legacy benchmark or an earlier release) is rejected
  with ``contamination:<source>``.
* ``noise/gallery.parquet``: the distractors mined for the window's items (``negatives`` table, see
  :mod:`lookbench_pipeline.negatives`), one row per image, ``task = distractor``; evaluation adds them to every
  subset's gallery. They are counted apart (``counts["noise"]``), not in ``candidates``.

A candidate sample is kept or rejected with a reason; ``candidates = query rows + gallery rows + rejected``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from . import schemas
from .annotate import format_main_attribute
from .drops import subsets_of
from .images import publishable_jpeg
from .store import ObjectStore, StoreError, derived_key
from .safepath import UnsafePathError, check_key, check_version, resolve_inside
from .taxonomy import Taxonomy

SUBSETS = ["real_studio_flat", "aigen_studio", "real_streetlook", "aigen_streetlook"]
STREET_SUBSETS = ("real_streetlook", "aigen_streetlook")
SUBSET_TASK = {"real_studio_flat": ("single-item", "easy"), "aigen_studio": ("single-item", "medium"),
               "real_streetlook": ("multi-item", "hard"), "aigen_streetlook": ("multi-item", "hard"),
               "noise": ("distractor", "n/a")}
PARQUET_OPTS = {"compression": "zstd", "compression_level": 3, "use_dictionary": True, "write_statistics": True}


class ReleaseExistsError(RuntimeError):
    """A release version is already published with different content; versions are immutable."""


class EmptyReleaseError(RuntimeError):
    """A release would have no query: nothing is published (a version is permanent, an empty one is useless)."""


class ReleaseIntegrityError(RuntimeError):
    """A file read back from the store does not have the sha256 or size that was written."""


@dataclass
class Window:
    """The release's time window ``[start, end)`` of ``first_seen_at`` (UTC)."""

    start: datetime
    end: datetime

    def __contains__(self, ts: datetime) -> bool:
        return self.start <= ts < self.end


@dataclass
class ReleaseTables:
    """The release's tables before publishing: ``files[(subset, role)] = pa.Table`` of schema RELEASE."""

    version: str
    window: Window
    files: dict[tuple[str, str], pa.Table]
    rejected: list[dict] = field(default_factory=list)
    counts: dict[str, Any] = field(default_factory=dict)


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
    img = {r["image_sha256"]: r for r in images.to_pylist()}
    cl = {r["image_sha256"]: r for r in clusters.to_pylist()}
    ann = {r["item_id"]: r for r in annotations.to_pylist()}
    leaked: dict[str, str] = {}
    for r in (contamination.to_pylist() if contamination is not None else []):
        leaked.setdefault(r["image_sha256"], r["source"])
    refs_by_owner: dict[tuple[str, str], list[dict]] = {}
    intake_reason: dict[tuple[str, str], str] = {}  # why an owner's image was refused at intake
    for r in image_refs.to_pylist():
        if r["status"] == "accepted":
            refs_by_owner.setdefault((r["owner_type"], r["owner_id"]), []).append(r)
        else:
            intake_reason.setdefault((r["owner_type"], r["owner_id"]), r["reason"] or "rejected")
    for v in refs_by_owner.values():
        v.sort(key=lambda r: r["position"])

    rejected: list[dict] = []
    candidates = 0

    def reject(kind: str, ident: str, reason: str, source: str | None = None) -> None:
        rejected.append({"candidate": kind, "id": ident, "reason": reason, "source": source})

    def labelled(item_id: str) -> dict | None:
        a = ann.get(item_id)
        return a if a and a["status"] == "labelled" else None

    def sample(role: str, subset: str, item_id: str, sha: str, a: dict, *, site: str, source: str,
               crawled_at: datetime | None, first_seen: datetime, look_id: str | None = None,
               box: list[float] | None = None, task: str | None = None, crop: dict | None = None) -> dict:
        """One sample of picture ``sha``; with ``crop`` (a DETECTIONS row) the sample's image is the crop and
        ``sha`` (the look image) is what the duplicate and contamination checks look at (``_check_sha``)."""
        attrs = {x["name"]: x["value"] for x in a["attributes"]}
        main_s, other_s = format_main_attribute(taxonomy, a["category"], attrs)
        t, difficulty = SUBSET_TASK[subset]
        pic = crop["crop_sha256"] if crop else sha
        sid = hashlib.sha1(f"{role}\x00{subset}\x00{item_id}\x00{pic}\x00{look_id}".encode()).hexdigest()[:16]
        return {
            "image": {"bytes": None, "path": f"{pic}.jpg"}, "item_ID": item_id, "category": a["category"],
            "main_attribute": main_s, "other_attributes": other_s, "task": task or t, "difficulty": difficulty,
            "sample_id": sid, "subset": subset, "role": role, "attributes": a["attributes"],
            "annotator": a["annotator"], "image_sha256": pic,
            "width": crop["crop_width"] if crop else img[sha]["width"],
            "height": crop["crop_height"] if crop else img[sha]["height"], "look_id": look_id, "box": box,
            "item_index": crop["item_index"] if crop else None, "site": site, "source_url": source,
            "crawled_at": crawled_at, "first_seen_at": first_seen, "_check_sha": sha, "_derived": bool(crop),
        }

    det_by_owner: dict[tuple[str, str], list[dict]] = {}
    for r in (detections.to_pylist() if detections is not None else []):
        if r["status"] != "dropped":  # dropped boxes are accounted for by the detection stage
            det_by_owner.setdefault((r["owner_type"], r["owner_id"]), []).append(r)
    n_street = Counter()

    def street_items(owner: tuple[str, str], links: list[str], sha: str, subset: str, **kw: Any) -> None:
        """Queries from the detections of one street image; ``links`` are its linked, resolved item ids. Adds
        one candidate per link and per unlabelled detection."""
        nonlocal candidates
        dets = sorted(det_by_owner.get(owner, []), key=lambda r: r["item_index"])
        matched = {r["item_id"]: r for r in dets if r["status"] == "matched"}
        task = "multi-item" if len(dets) > 1 else "single-item"
        n_street["items_detected"] += len(dets)
        for r in dets:
            if r["status"] != "matched":
                candidates += 1
                n_street["unlabelled"] += 1
                reject("look_item", r["detection_id"], "unlabelled_detection", kw.get("source"))
        for item_id in links:
            candidates += 1
            a = labelled(item_id)
            if a is None:
                reject("look_item", f"{owner[1]}#{item_id}", "not_labelled", kw.get("source"))
            elif item_id not in matched:
                n_street["linked_not_detected"] += 1
                reject("look_item", f"{owner[1]}#{item_id}", "linked_product_not_detected", kw.get("source"))
            else:
                r = matched[item_id]
                n_street["matched"] += 1
                queries.append(sample("query", subset, item_id, sha, a, box=r["box"], task=task, crop=r, **kw))

    gallery: list[dict] = []
    queries: list[dict] = []
    product_rows = {r["product_id"]: r for r in products.to_pylist()}

    # --- crawled products: packshot -> gallery, next distinct image -> studio-flat query
    for pid, p in sorted(product_rows.items()):
        refs = refs_by_owner.get(("product", pid), [])
        candidates += len(refs)
        if p["first_seen_at"] not in window:
            for r in refs:
                reject("product_image", r["ref_id"], "outside_window", r["source"])
            continue
        a = labelled(pid)
        if a is None:
            for r in refs:
                reject("product_image", r["ref_id"], "not_labelled", r["source"])
            continue
        seen_clusters: set[str] = set()
        for r in refs:
            c = cl[r["image_sha256"]]["cluster_id"]
            if c in seen_clusters:
                reject("product_image", r["ref_id"], "duplicate_within_item", r["source"])
                continue
            role = "query" if len(seen_clusters) == 1 else "gallery"  # 1st distinct image gallery, 2nd query
            seen_clusters.add(c)
            row = sample(role, "real_studio_flat", pid, r["image_sha256"], a, site=p["site"],
                         source=r["source"], crawled_at=p["crawled_at"], first_seen=p["first_seen_at"])
            (gallery if role == "gallery" else queries).append(row)

    # --- looks: one query per linked, labelled product
    for lk in sorted(looks.to_pylist(), key=lambda r: r["look_id"]):
        refs = refs_by_owner.get(("look", lk["look_id"]), [])
        n_links = len(lk["product_urls"])
        candidates += n_links
        if not refs:
            for i in range(n_links):
                reject("look_item", f"{lk['look_id']}#{i}", "look_image_not_accepted")
            continue
        if lk["first_seen_at"] not in window:
            for i in range(n_links):
                reject("look_item", f"{lk['look_id']}#{i}", "outside_window", refs[0]["source"])
            continue
        sha = refs[0]["image_sha256"]
        resolved = list(lk["product_ids"])
        for i in range(n_links - len(resolved)):
            reject("look_item", f"{lk['look_id']}#u{i}", "linked_product_not_crawled")
        if detections is not None:
            candidates -= len(resolved)  # street_items counts each resolved link (and each unlabelled detection)
            street_items(("look", lk["look_id"]), resolved, sha, "real_streetlook", site=lk["site"],
                         source=refs[0]["source"], crawled_at=lk["crawled_at"], first_seen=lk["first_seen_at"],
                         look_id=lk["look_id"])
            continue
        task = "multi-item" if n_links > 1 else "single-item"
        for pid in resolved:
            a = labelled(pid)
            if a is None:
                reject("look_item", f"{lk['look_id']}#{pid}", "not_labelled", refs[0]["source"])
                continue
            queries.append(sample("query", "real_streetlook", pid, sha, a, site=lk["site"], source=refs[0]["source"],
                                  crawled_at=lk["crawled_at"], first_seen=lk["first_seen_at"],
                                  look_id=lk["look_id"], task=task))

    def _drop_candidate(d: dict, subset: str, ident: str) -> None:
        """One drop file as a candidate of ``subset``: a street-look query through its detections, or one
        whole-image sample, or a rejection with its reason."""
        nonlocal candidates
        candidates += 1
        refs = refs_by_owner.get(("drop", d["drop_image_id"]), [])
        if not refs:  # the intake's reason, as for AI-generated images (intake:not_an_image, intake:truncated...)
            reject("drop_image", ident, f"intake:{intake_reason.get(('drop', d['drop_image_id']), 'not_taken_in')}",
                   d["path"])
            return
        if d["first_seen_at"] not in window:
            reject("drop_image", ident, "outside_window", d["path"])
            return
        if detections is not None and subset in STREET_SUBSETS and d["role"] == "query":
            candidates -= 1  # the drop image's one link, counted again by street_items
            street_items(("drop", d["drop_image_id"]), [d["item_id"]], refs[0]["image_sha256"], subset,
                         site=f"drop:{d['drop']}", source=d["path"], crawled_at=None,
                         first_seen=d["first_seen_at"], look_id=d["drop_image_id"])
            return
        a = labelled(d["item_id"])
        if a is None:
            reject("drop_image", ident, "not_labelled", d["path"])
            return
        if subset not in SUBSETS:
            reject("drop_image", ident, f"unknown_subset:{subset}", d["path"])
            return
        row = sample(d["role"], subset, d["item_id"], refs[0]["image_sha256"], a, site=f"drop:{d['drop']}",
                     source=d["path"], crawled_at=None, first_seen=d["first_seen_at"])
        (gallery if d["role"] == "gallery" else queries).append(row)

    # --- image drops: a file is a candidate of each subset it belongs to (drops.subsets_of); with several, each
    # candidate's id is "<drop_image_id>@<subset>"
    for d in sorted(drop_items.to_pylist(), key=lambda r: r["path"]):
        parts = subsets_of(d["subset"])
        for subset in parts:
            ident = d["drop_image_id"] if len(parts) == 1 else f"{d['drop_image_id']}@{subset}"
            _drop_candidate(d, subset, ident)

        # --- AI-generated images: a query of their reference item each, when their checks passed
    for g in sorted(generated_checks.to_pylist() if generated_checks is not None else [],
                    key=lambda r: r["request_id"]):
        candidates += 1
        if g["status"] != "accepted":
            reject("generated_image", g["request_id"], g["reason"] or "rejected")
            continue
        if g["first_seen_at"] not in window:
            reject("generated_image", g["request_id"], "outside_window")
            continue
        a = labelled(g["reference_item_id"])
        if a is None:
            reject("generated_image", g["request_id"], "not_labelled")
            continue
        if g["subset"] not in SUBSETS:
            reject("generated_image", g["request_id"], f"unknown_subset:{g['subset']}")
            continue
        sha = g["image_sha256"]
        img.setdefault(sha, {"width": g["width"], "height": g["height"]})
        cl.setdefault(sha, {"cluster_id": g["cluster_id"] or sha})
        row = sample("query", g["subset"], g["reference_item_id"], sha, a, site=f"aigen:{g['generator_model']}",
                     source=f"aigen:{g['request_id']}", crawled_at=None, first_seen=g["first_seen_at"],
                     look_id=f"aigen-{g['request_id']}" if g["kind"] == "street" else None,
                     box=g["region"] if g.get("region_source") == "detector" else None,
                     crop={k: g[k] for k in ("crop_sha256", "crop_width", "crop_height", "item_index")}
                     if g.get("crop_sha256") else None)
        row["generation"] = {"request_id": g["request_id"], "generator_model": g["generator_model"],
                             "generator_version": g["generator_version"], "prompt": g["prompt"], "seed": g["seed"],
                             "reference_image_sha256": g["reference_image_sha256"], "similarity": g["similarity"]}
        queries.append(row)

    # --- the gallery holds each picture once; queries must not be a gallery picture and need a positive
    gal_by_cluster: dict[str, dict] = {}
    for g in sorted(gallery, key=lambda r: (r["first_seen_at"], r["item_ID"], r["sample_id"])):
        if min(g["width"] or 0, g["height"] or 0) < gallery_min_side_px:
            reject("gallery", g["sample_id"], "gallery_too_small", g["source_url"])
            continue
        c = cl[g["image_sha256"]]["cluster_id"]
        if c in gal_by_cluster:
            reject("gallery", g["sample_id"], "duplicate_in_gallery", g["source_url"])
            continue
        gal_by_cluster[c] = g
    gallery = list(gal_by_cluster.values())
    gallery_items = {g["item_ID"] for g in gallery}
    kept_queries: list[dict] = []
    seen_q: set[tuple[str, str, str | None]] = set()
    for q in sorted(queries, key=lambda r: (r["subset"], r["item_ID"], r["sample_id"])):
        c = cl[q["_check_sha"]]["cluster_id"]
        if q["_check_sha"] in leaked:
            reject("query", q["sample_id"], f"contamination:{leaked[q['_check_sha']]}", q["source_url"])
        elif c in gal_by_cluster:
            reject("query", q["sample_id"], "duplicate_of_gallery_image", q["source_url"])
        elif (q["subset"], c, q["item_ID"]) in seen_q:
            reject("query", q["sample_id"], "duplicate_query", q["source_url"])
        elif q["item_ID"] not in gallery_items:
            reject("query", q["sample_id"], "no_positive_in_gallery", q["source_url"])
        else:
            seen_q.add((q["subset"], c, q["item_ID"]))
            kept_queries.append(q)

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
        noise_rows, noise_counts = _noise_gallery(noise, img, gallery + kept_queries, taxonomy)
        if noise_rows:
            files[("noise", "gallery")] = _with_bytes(noise_rows, store, jpegs)
    reasons = Counter(r["reason"] for r in rejected)
    counts = {
        "candidates": candidates,
        "query_rows": len(kept_queries),
        "gallery_rows_distinct": len(gallery),
        "rejected": len(rejected),
        "rejected_by_reason": dict(sorted(reasons.items())),
        "per_file_rows": {f"{s}/{r}": t.num_rows for (s, r), t in sorted(files.items())},
    }
    if noise_counts is not None:
        counts["noise"] = noise_counts
    if detections is not None:
        counts["street_look_items"] = {k: n_street[k] for k in ("items_detected", "matched", "unlabelled",
                                                                 "linked_not_detected")}
    return ReleaseTables(version=version, window=window, files=files, rejected=rejected, counts=counts)


def _noise_gallery(noise: pa.Table, window_images: dict[str, dict], release_rows: list[dict],
                   taxonomy: Taxonomy) -> tuple[list[dict], dict[str, Any]]:
    """The ``noise`` gallery rows from a ``negatives`` table: one per distinct distractor image. A distractor
    whose image is an image of the window, or whose item id is a release item id, is dropped (the mining stage
    already deduplicated; this is the last guard). Returns ``(rows, counts)`` with ``in = rows + dropped``."""
    from .negatives import noise_rows

    release_items = {r["item_ID"] for r in release_rows}
    t, difficulty = SUBSET_TASK["noise"]
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
            "subset": "noise", "role": "gallery", "attributes": d["distractor_attributes"],
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


def parquet_bytes(table: pa.Table) -> bytes:
    """Deterministic Parquet encoding of a release table (same table -> same bytes)."""
    buf = io.BytesIO()
    pq.write_table(table, buf, **PARQUET_OPTS)
    return buf.getvalue()


def write_candidate(rel: ReleaseTables, folder: Path) -> dict[str, Any]:
    """Keep a built, not yet published release under ``folder`` (``<subset>/<role>.parquet`` + ``candidate.json``)
    so that checks can look at it before anything is published, with every rejected candidate and its reason in
    ``rejected.parquet`` (columns ``candidate``: what it was — ``product_image``, ``drop_image``, ``look_item``,
    ``query``, ``gallery``…, ``id``: its id — a drop image's ``drop_image_id``, with ``@<subset>`` when the file
    belongs to several subsets —, ``reason``, ``source``: the picture's page URL or file path where known, so that
    every input picture can be followed to a row or a reason). Returns the candidate's summary."""
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rel.rejected, schema=REJECTED), folder / "rejected.parquet")
    files = {}
    for (subset, role), t in sorted(rel.files.items()):
        data = parquet_bytes(t)
        (folder / subset).mkdir(exist_ok=True)
        (folder / subset / f"{role}.parquet").write_bytes(data)
        files[f"{subset}/{role}.parquet"] = {"rows": t.num_rows, "sha256": hashlib.sha256(data).hexdigest()}
    summary = {"version": rel.version, "window": {"start": rel.window.start.isoformat(),
                                                   "end": rel.window.end.isoformat()},
               "folder": str(folder), "files": files, "counts": rel.counts}
    (folder / "candidate.json").write_text(json.dumps(summary, indent=1, sort_keys=True, default=str))
    return summary


def read_candidate(summary: dict[str, Any]) -> ReleaseTables:
    """The release written by :func:`write_candidate`."""
    folder = Path(summary["folder"])
    files = {}
    for key in summary["files"]:
        subset, role = key.removesuffix(".parquet").split("/")
        files[(subset, role)] = pq.read_table(folder / key)
    w = summary["window"]
    return ReleaseTables(summary["version"], Window(datetime.fromisoformat(w["start"]), datetime.fromisoformat(w["end"])),
                         files, counts=summary["counts"])


def check_candidate(rel: ReleaseTables, overlap_allowed: tuple[str, ...] | list[str] = ()
                    ) -> dict[str, tuple[bool, dict[str, Any]]]:
    """The checks a release must pass before it is published: ``{name: (passed, details)}``.

    * ``has_queries``: at least one subset has a query row;
    * ``schema``: every file has exactly the RELEASE schema;
    * ``every_query_has_a_positive``: each query's item_ID is in its subset's gallery;
    * ``no_image_in_query_and_gallery``: no image (sha256) is both a query and a gallery item of a subset, except
      in the subsets of ``overlap_allowed`` (where it is intended; counted in the details either way), and the
      ``noise`` gallery holds no image and no item id of any subset;
    * ``unique_sample_ids``: no sample id repeats within a file.
    """
    out: dict[str, tuple[bool, dict[str, Any]]] = {}
    n_q = sum(t.num_rows for (_, r), t in rel.files.items() if r == "query")
    out["has_queries"] = (n_q > 0, {"query_rows": n_q})
    bad_schema = [f"{s}/{r}" for (s, r), t in rel.files.items() if not t.schema.equals(schemas.RELEASE)]
    out["schema"] = (not bad_schema, {"files_not_matching": bad_schema})
    no_pos, both, dup = {}, {}, []
    noise = rel.files.get(("noise", "gallery"))
    noise_sha = set(noise["image_sha256"].to_pylist()) if noise is not None else set()
    noise_items = set(noise["item_ID"].to_pylist()) if noise is not None else set()
    if noise is not None and len(noise["sample_id"].to_pylist()) != len(set(noise["sample_id"].to_pylist())):
        dup.append("noise/gallery")
    for subset in sorted({s for s, _ in rel.files}):
        q, g = rel.files.get((subset, "query")), rel.files.get((subset, "gallery"))
        if q is None or g is None:
            continue
        g_items = set(g["item_ID"].to_pylist())
        missing = [i for i in q["item_ID"].to_pylist() if i not in g_items]
        if missing:
            no_pos[subset] = len(missing)
        overlap = set(q["image_sha256"].to_pylist()) & set(g["image_sha256"].to_pylist())
        if overlap:
            both[subset] = len(overlap)
        # the noise gallery joins every subset's gallery: it must hold no release image and no release item
        in_noise = (set(q["image_sha256"].to_pylist()) | set(g["image_sha256"].to_pylist())) & noise_sha
        in_noise_items = (set(q["item_ID"].to_pylist()) | g_items) & noise_items
        if in_noise or in_noise_items:
            both[f"{subset}+noise"] = len(in_noise) + len(in_noise_items)
        for role, t in (("query", q), ("gallery", g)):
            ids = t["sample_id"].to_pylist()
            if len(ids) != len(set(ids)):
                dup.append(f"{subset}/{role}")
    out["every_query_has_a_positive"] = (not no_pos, {"queries_without_positive": no_pos})
    out["no_image_in_query_and_gallery"] = (not {s for s in both if s not in overlap_allowed},
                                            {"images_in_both": both, "allowed_in": sorted(overlap_allowed)})
    out["unique_sample_ids"] = (not dup, {"files_with_repeats": dup})
    return out


REJECTED = pa.schema([("candidate", pa.string()), ("id", pa.string()), ("reason", pa.string()),
                      ("source", pa.string())])
"""A release candidate's rejections (``rejected.parquet`` beside the candidate, :func:`write_candidate`)."""

DOC_TYPES = {"md": "text/markdown; charset=utf-8", "json": "application/json", "yaml": "application/yaml"}
"""Content types of the release's documents by file extension."""


def release_prefix(version: str) -> str:
    return f"releases/{version}"


def publish(rel: ReleaseTables, store: ObjectStore, provenance: dict[str, Any],
            now: datetime | None = None, card: dict[str, Any] | None = None,
            taxonomy: Path | None = None) -> dict[str, Any]:
    """Write a release to the store and return its manifest.

    Besides the data files (``<subset>/{query,gallery}.parquet``) a release holds ``README.md`` (dataset card with
    Hugging Face front matter), ``croissant.json`` (Croissant metadata), ``CHANGES.md`` and ``changes.parquet``
    (the diff against the previous published version, :mod:`lookbench_pipeline.changes`) and the documents that
    make the release readable on its own (``docs/``: taxonomy, metric definitions, table schemas, sources;
    :mod:`lookbench_pipeline.release_docs`); the manifest lists the data files under ``files`` and these under
    ``metadata_files``, each with sha256 and size, and names the taxonomy (version, path, sha256) under
    ``taxonomy``. Every file except
    the manifest is the same bytes for the same inputs (``built_at`` is the only clock in a release).

    Files go through a staging prefix, are verified after upload and after the move, then ``manifest.json`` is
    created (the version exists from that moment), then ``releases/latest`` (:mod:`lookbench_pipeline.publishing`).

    Args:
        card: licence / citation fields of :class:`lookbench_pipeline.card.CardInfo` (defaults when None).
        taxonomy: the taxonomy file the labels were made with (default: the package's ``taxonomy_v2.yaml``); it is
            published byte for byte as ``docs/taxonomy.yaml``.
    Raises:
        ReleaseExistsError: the version already has a manifest with different files (versions are immutable).
        EmptyReleaseError: no subset has a query row.
        ReleaseIntegrityError: a file read back does not match.
        StoreError: the store failed; nothing of this version is visible then, and a rerun completes it.
    """
    from . import changes as ch
    from . import publishing
    from .card import COLUMN_DOCS, CardInfo, croissant, croissant_bytes, dataset_card
    from .config import DEFAULT_TAXONOMY
    from .release_docs import release_documents

    if not any(role == "query" and t.num_rows for (_, role), t in rel.files.items()):
        raise EmptyReleaseError(
            f"release {rel.version} would have no query rows (rejections: {rel.counts.get('rejected_by_reason')}); "
            "nothing was published")
    prefix = release_prefix(rel.version)
    encoded = {f"{s}/{r}.parquet": parquet_bytes(t) for (s, r), t in sorted(rel.files.items())}
    files = {k: {"sha256": hashlib.sha256(v).hexdigest(), "bytes": len(v),
                 "rows": rel.files[tuple(k.removesuffix(".parquet").split("/"))].num_rows}
             for k, v in encoded.items()}
    window = {"start": rel.window.start.isoformat(), "end": rel.window.end.isoformat()}
    # what changed since the previous published version
    published = set(list_releases(store))
    prev = ch.previous_version(store, rel.version)
    before = ch.read_previous(store, prev) if prev else {}
    diff = ch.diff(rel.version, prev, {k: t.select(ch.COLUMNS) for k, t in rel.files.items()}, before)
    summary = ch.summary(diff)
    summary["previous_version"] = prev
    info = CardInfo.from_dict(card)
    readable, tax = release_documents(rel.version, Path(taxonomy or DEFAULT_TAXONOMY),
                                      provenance,
                                      info.license_text, COLUMN_DOCS)
    docs: dict[str, tuple[bytes, str]] = {
        "changes.parquet": (parquet_bytes(diff), "application/vnd.apache.parquet"),
        "CHANGES.md": (ch.markdown(diff, rel.version, prev, ch.item_counts(rel.files, before)).encode(),
                       "text/markdown; charset=utf-8"),
        **{k: (v, DOC_TYPES[k.rsplit(".", 1)[1]]) for k, v in readable.items()},
    }
    docs["README.md"] = (dataset_card(rel.version, window, files, rel.counts, summary, info,
                                      documents=sorted(readable), taxonomy=tax).encode(),
                         "text/markdown; charset=utf-8")
    metadata_files = {k: {"sha256": hashlib.sha256(d).hexdigest(), "bytes": len(d)} for k, (d, _) in docs.items()}
    metadata_files["changes.parquet"]["rows"] = diff.num_rows
    cro = croissant_bytes(croissant(rel.version, window, files, metadata_files, info))
    docs["croissant.json"] = (cro, "application/ld+json")
    metadata_files["croissant.json"] = {"sha256": hashlib.sha256(cro).hexdigest(), "bytes": len(cro)}
    metadata_files = dict(sorted(metadata_files.items()))

    manifest_key = f"{prefix}/manifest.json"
    if store.exists(manifest_key):
        existing = json.loads(store.get_bytes(manifest_key))
        # A manifest without metadata_files was written before releases carried them: same data, same release.
        same_docs = "metadata_files" not in existing or existing["metadata_files"] == metadata_files
        if existing.get("files") == files and same_docs:
            publishing.complete(store, rel.version, published)
            return {**existing, "already_published": True}
        raise ReleaseExistsError(
            f"release {rel.version} is already published at {store.url}/{prefix} with different content; "
            f"published versions are immutable. Build a new version (another date) instead.")
    now = now or datetime.now(timezone.utc)
    manifest = {
        "name": "LookBench",
        "layout": "lookbench-release/2",
        "version": rel.version,
        "window": window,
        "built_at": now.isoformat(timespec="seconds"),
        "files": files,
        "metadata_files": metadata_files,
        "schemas": {"<subset>/<role>.parquet": "release", "changes.parquet": "release_changes"},
        "taxonomy": tax,
        "changes": summary,
        "counts": rel.counts,
        **provenance,
    }
    body = json.dumps(manifest, indent=2, sort_keys=True).encode()
    parquet_type = "application/vnd.apache.parquet"
    publishing.publish_files(store, rel.version, {**{k: (v, parquet_type) for k, v in encoded.items()}, **docs},
                             body, published)
    return manifest


def all_files(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every file of a release with its ``sha256`` and ``bytes``: the data files and the metadata files."""
    return {**manifest["files"], **manifest.get("metadata_files", {})}


MAX_FILE_BYTES = 1 << 40
"""The largest file size a manifest may state (1 TiB): far above any release file (a 60,000-image gallery is a few
GB), so that a hostile or corrupt count is refused before a download is planned around it."""
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def check_manifest(m: Any, version: str, where: str) -> dict[str, Any]:
    """``m`` when it is a release manifest of ``version``: an object with a ``files`` object (and optionally a
    ``metadata_files`` object) whose ``version`` is ``version`` (the folder it was read from), every file key a
    safe relative path (:func:`safepath.check_key`, never ``manifest.json`` itself, never in both lists), every
    entry ``{"sha256": 64 lowercase hex digits, "bytes": an integer 0 .. MAX_FILE_BYTES, "rows": an integer >= 0
    when present}`` (booleans are not integers here).

    A manifest comes from a store or a mirror that someone else controls: ``pull``, ``info`` and ``evaluate`` all
    read it through this check, so a hostile entry is a one-line error, never a raw ``AttributeError``.

    Raises:
        ReleaseIntegrityError: any of the above does not hold (the message names the file and the field).
        UnsafePathError: a file key is not a safe relative path.
    """
    if not (isinstance(m, dict) and isinstance(m.get("files"), dict)
            and isinstance(m.get("metadata_files", {}), dict)):
        raise ReleaseIntegrityError(f"{version}: manifest.json in {where} is not a release manifest "
                                    "(an object with a 'files' object)")
    if m.get("version") != version:
        shown = repr(m.get("version"))
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        raise ReleaseIntegrityError(f"{version}: manifest.json in {where} names version {shown}, not {version} "
                                    "(the folder it was read from)")
    both = set(m["files"]) & set(m.get("metadata_files", {}))
    if both:
        raise ReleaseIntegrityError(f"{version}: manifest.json lists {sorted(both)[0]!r} both as a data file and "
                                    "as a metadata file")
    for k, meta in all_files(m).items():
        if k == "manifest.json":
            raise UnsafePathError(f"{version}: the manifest lists manifest.json itself")
        try:
            check_key(k)
        except UnsafePathError as exc:
            raise UnsafePathError(f"{version}: refused: the manifest names a file outside the release: "
                                  f"{exc}") from None

        def whole(v: Any, hi: int | None = None) -> bool:
            return isinstance(v, int) and not isinstance(v, bool) and v >= 0 and (hi is None or v <= hi)

        bad = (None if isinstance(meta, dict) else "the entry is not an object") or \
            (None if whole(meta.get("bytes"), MAX_FILE_BYTES) else
             f"bytes {meta.get('bytes')!r:.40} is not a whole number of bytes from 0 to {MAX_FILE_BYTES}") or \
            (None if isinstance(meta.get("sha256"), str) and _SHA256.match(meta["sha256"]) else
             f"sha256 {meta.get('sha256')!r:.80} is not 64 lowercase hex digits") or \
            (None if "rows" not in meta or whole(meta["rows"]) else
             f"rows {meta.get('rows')!r:.40} is not a whole number")
        if bad:
            raise ReleaseIntegrityError(f"{version}/{k}: manifest entry refused: {bad}")
    return m


def list_releases(store: ObjectStore) -> list[str]:
    """Published versions (those with a manifest), oldest first. Folders whose name is not a release version
    (``vYYYYMMDD``, :func:`safepath.check_version`) are not versions and are left out."""
    out = set()
    for key in store.list("releases/"):
        parts = key.split("/")
        if len(parts) == 3 and parts[2] == "manifest.json" and not parts[1].startswith("."):
            try:
                out.add(check_version(parts[1]))
            except UnsafePathError:
                continue
    return sorted(out)


def resolve_version(store: ObjectStore, version: str) -> str:
    """``version`` itself, or for ``latest`` the version ``releases/latest`` names (checked to be a version name).

    Raises:
        StoreError: ``latest`` was asked for and the store has none.
        UnsafePathError: the name (given or read from the store) is not a release version.
    """
    from .publishing import LATEST_KEY

    if version == "latest":
        if not store.exists(LATEST_KEY):
            raise StoreError(f"{store.url} has no releases/latest (`lookbench releases` lists its versions)")
        version = store.get_bytes(LATEST_KEY).decode("utf-8", errors="replace").strip()
    return check_version(version)


def _not_published(store: ObjectStore, version: str, why: str) -> StoreError:
    """The error for a version the store does not have: the published versions and the closest one (difflib);
    for a store that cannot be listed (an http mirror), the version ``releases/latest`` names."""
    import difflib

    from .publishing import LATEST_KEY

    try:
        have = list_releases(store)
    except StoreError:  # a static mirror cannot be listed: say what it does have
        try:
            latest = check_version(store.get_bytes(LATEST_KEY).decode("utf-8", errors="replace").strip())
        except (StoreError, UnsafePathError):
            latest = None
        listed = (f"it cannot be listed; its releases/latest is {latest}" if latest
                  else "it cannot be listed and has no releases/latest")
        hint = f"; did you mean {latest}?" if latest and difflib.get_close_matches(version, [latest], n=1) else ""
        return StoreError(f"release {version} was not found at {store.url}{why}{hint} ({listed})")
    near = difflib.get_close_matches(version, have, n=1)
    hint = f"; did you mean {near[0]}?" if near else ""
    listed = f"published: {', '.join(have)}" if have else "it has no published release"
    return StoreError(f"release {version} is not published in {store.url}{why}{hint} ({listed})")


def read_manifest(store: ObjectStore, version: str) -> dict[str, Any]:
    """The manifest of a published version, checked by :func:`check_manifest`.

    Raises:
        StoreError: the version is not published (the message lists the published versions and the closest).
        ReleaseIntegrityError, UnsafePathError: the manifest is not JSON or not a valid manifest of ``version``.
    """
    try:
        check_version(version)
        exists = store.exists(f"{release_prefix(version)}/manifest.json")
    except UnsafePathError as exc:
        exists, why = False, f" ({exc})"
    else:
        why = ""
    return read_manifest_bytes(store, version, exists, why)[1]


def read_manifest_bytes(store: ObjectStore, version: str, exists: bool | None = None, why: str = ""
                        ) -> tuple[bytes, dict[str, Any]]:
    """``(the stored bytes, the checked manifest)`` of a published version (see :func:`read_manifest`)."""
    if exists is None:
        exists = store.exists(f"{release_prefix(check_version(version))}/manifest.json")
    if not exists:
        raise _not_published(store, version, why)
    key = f"{release_prefix(version)}/manifest.json"
    raw = store.get_bytes(key)
    try:
        m = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ReleaseIntegrityError(f"{version}: manifest.json in {store.url} is not JSON ({exc})") from None
    return raw, check_manifest(m, version, store.url)


def read_file(store: ObjectStore, version: str, subset: str, role: str, verify: bool = True) -> pa.Table:
    """Read one release file, checking its sha256 against the manifest.

    Raises:
        ReleaseIntegrityError: the bytes do not match the manifest.
    """
    key = f"{subset}/{role}.parquet"
    data = store.get_bytes(f"{release_prefix(version)}/{key}")
    if verify:
        expected = read_manifest(store, version)["files"][key]["sha256"]
        if hashlib.sha256(data).hexdigest() != expected:
            raise ReleaseIntegrityError(f"{version}/{key}: sha256 does not match the manifest")
    return pq.read_table(io.BytesIO(data))


def choose_subsets(have: list[str], asked: list[str], what: str) -> list[str]:
    """``asked`` when every name is one of ``have``. Raises ValueError naming each unknown subset with the closest
    known one (difflib) and the known ones."""
    import difflib

    unknown = [s for s in dict.fromkeys(asked) if s not in have]
    if unknown:
        parts = []
        for s in unknown:
            near = difflib.get_close_matches(s, have, n=1)
            parts.append(f"{s!r}" + (f" (did you mean {near[0]}?)" if near else ""))
        raise ValueError(f"{what} has no subset {', '.join(parts)}; its subsets: {', '.join(have) or 'none'}")
    return list(dict.fromkeys(asked))


def _open_part(path: Path, append: bool) -> Any:
    """A ``.part`` file opened for writing without following a symbolic link (one planted there would send the
    download elsewhere). Raises UnsafePathError for a link."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC) | getattr(os, "O_NOFOLLOW", 0)
    if path.is_symlink():
        raise UnsafePathError(f"{path} is a symbolic link")
    return os.fdopen(os.open(path, flags, 0o644), "ab" if append else "wb")


def _fetch(store: ObjectStore, key: str, target: Path, size: int, sha256: str, bar: Any) -> None:
    """Download ``key`` to ``target`` through ``target.part``: resumed from a ``.part`` an interrupted pull left
    (its bytes hashed first), streamed (never more than ``size`` bytes accepted), then checked for size and
    sha256 and renamed into place. A resumed file that does not verify is downloaded once more from the start.
    Raises ReleaseIntegrityError (the ``.part`` is removed), StoreError."""
    part = target.with_name(target.name + ".part")
    for attempt in (0, 1):
        h = hashlib.sha256()
        start = 0
        if attempt == 0 and part.is_file() and not part.is_symlink() and part.stat().st_size <= size:
            with part.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 22), b""):
                    h.update(block)
                    start += len(block)
        resumed = start > 0
        if bar is not None and start:
            bar.update(start)
        done = start
        with _open_part(part, append=resumed) as out:
            if done < size:
                for chunk in read_range(store, key, done):
                    if done + len(chunk) > size:
                        part.unlink(missing_ok=True)
                        raise ReleaseIntegrityError(f"{key}: the store sent more than the manifest's {size} bytes")
                    out.write(chunk)
                    h.update(chunk)
                    done += len(chunk)
                    if bar is not None:
                        bar.update(len(chunk))
        if done == size and h.hexdigest() == sha256:
            part.replace(target)
            return
        part.unlink(missing_ok=True)
        if bar is not None:
            bar.update(-done)
        if not resumed:
            raise ReleaseIntegrityError(f"{key}: downloaded bytes do not match the manifest ({done} bytes with "
                                        f"sha256 {h.hexdigest()[:16]}…, expected {size} bytes with {sha256[:16]}…)")


def read_range(store: ObjectStore, key: str, start: int = 0, chunk: int = 1 << 20) -> Any:
    """The bytes of ``key`` from offset ``start`` on, in chunks (the store's ``read_range`` when it streams, else
    its ``get_bytes`` sliced)."""
    fn = getattr(store, "read_range", None)
    if fn is not None:
        yield from fn(key, start, chunk)
        return
    data = store.get_bytes(key)
    for s in range(start, len(data), chunk):
        yield data[s : s + chunk]


def _is_file(path: Path, size: int, sha256: str) -> bool:
    if not (path.is_file() and not path.is_symlink() and path.stat().st_size == size):
        return False
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest() == sha256


def pull(store: ObjectStore, version: str, dest: Path, subsets: list[str] | None = None,
         progress: bool = True) -> list[Path]:
    """Download a published release (or some of its subsets; ``version`` may be ``latest``) into
    ``dest/<version>/``, verifying every file's sha256 and size against the manifest before it is moved into
    place; ``manifest.json`` (the store's bytes) is written last. The metadata files (``README.md``,
    ``croissant.json``, ``CHANGES.md``, ``changes.parquet``) always come along.

    Resuming: a file already in place with the right sha256 is not downloaded again, and a file an interrupted
    pull left half-written (``<file>.part``) is continued from where it stopped (an HTTP / S3 range request), so
    a rerun of the same command finishes the pull. Every byte is checked before a file takes its name. The
    progress bar (tqdm, on stderr) counts bytes.

    Returns:
        the paths of the release's files under ``dest/<version>/`` (without the manifest).
    Raises:
        StoreError: the version is not published.
        ReleaseIntegrityError: a downloaded file does not match the manifest (nothing is left for it), or the
            manifest is not valid (:func:`check_manifest`).
        UnsafePathError: the version name, a key of the manifest, or ``dest/<version>`` itself would write outside
            ``dest`` (through a symbolic link or a path) — nothing is written then.
        ValueError: an unknown subset was asked for, ``dest`` is not a folder, or the disk has too little room.
    """
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise ValueError(f"destination {dest} exists and is not a folder")
    version = resolve_version(store, version)
    raw_manifest, manifest = read_manifest_bytes(store, version)
    every = all_files(manifest)
    out = resolve_inside(dest, version)  # dest/<version> itself must not be a link out of dest
    # Every key the manifest names is checked before anything is written: a store or mirror controls the manifest
    # and must not make a pull write outside dest (absolute, network, drive, '..' and symbolic-link paths refused).
    for k in every:
        try:
            resolve_inside(out, k)
        except UnsafePathError as exc:
            raise UnsafePathError(f"{version}: refused, nothing written: the manifest names a file outside "
                                  f"{out}: {exc}") from None
    data_keys = sorted(manifest["files"])
    if subsets:
        subsets = choose_subsets(sorted({k.split("/")[0] for k in data_keys}), subsets, version)
        data_keys = [k for k in data_keys if k.split("/")[0] in subsets]
    keys = data_keys + sorted(manifest.get("metadata_files", {}))
    need = sum(every[k]["bytes"] for k in keys)
    have_room = shutil.disk_usage(next(p for p in [out, *out.parents] if p.exists())).free
    present = sum(p.stat().st_size for k in keys for p in [out / k] if p.is_file() and not p.is_symlink())
    if need - present > have_room:
        raise ValueError(f"{version}: the files need {need / 1e9:.2f} GB ({(need - present) / 1e9:.2f} GB still to "
                         f"download) but {out} has {have_room / 1e9:.2f} GB free")
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=need, unit="B", unit_scale=True, desc=f"pull {version}")
    written = []
    try:
        for k in keys:
            meta = every[k]
            target = resolve_inside(out, k)  # again: a link may have appeared since the check above
            if _is_file(target, meta["bytes"], meta["sha256"]):
                if bar is not None:
                    bar.update(meta["bytes"])
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                resolve_inside(out, k)  # and after creating its folders
                _fetch(store, f"{release_prefix(version)}/{k}", target, meta["bytes"], meta["sha256"], bar)
            written.append(target)
    finally:
        if bar is not None:
            bar.close()
    out.mkdir(parents=True, exist_ok=True)
    target = resolve_inside(out, "manifest.json")
    with _open_part(target.with_name("manifest.json.part"), append=False) as fh:
        fh.write(raw_manifest)
    target.with_name("manifest.json.part").replace(target)
    return written
