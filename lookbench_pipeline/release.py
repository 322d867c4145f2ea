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
from .taxonomy import Taxonomy
from .windows import Window
# The reader API lives in release_reader (it imports only the store); these names stay importable from here.
from .release_reader import (LATEST_KEY, MAX_FILE_BYTES, STREET_SUBSETS, SUBSET_TASK, SUBSETS,  # noqa: F401
                             ReleaseExistsError, ReleaseIntegrityError, all_files, check_manifest, choose_subsets,
                             list_releases, pull, read_file, read_manifest, read_manifest_bytes, read_range,
                             release_prefix, resolve_version)

PARQUET_OPTS = {"compression": "zstd", "compression_level": 3, "use_dictionary": True, "write_statistics": True}


class EmptyReleaseError(RuntimeError):
    """A release would have no query: nothing is published (a version is permanent, an empty one is useless)."""


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

