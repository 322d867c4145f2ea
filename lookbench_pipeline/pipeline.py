"""The stages of a release build as plain functions over tables: what each Dagster asset calls, and what a test or
a notebook can call without Dagster. Each returns its tables and a ``counts`` dict that reconciles
(``in = kept + rejected``)."""

from __future__ import annotations

import logging
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa

from . import __version__, crawl, dedup, drops, schemas
from .annotate import CatalogTextAnnotator
from .config import PipelineConfig
from .images import PHASH_METHOD, ImageRef, SourceReader, take_in
from .release import ReleaseTables, Window, build, publish
from .store import ObjectStore, open_store
from .taxonomy import Taxonomy

log = logging.getLogger(__name__)


def store_of(cfg: PipelineConfig) -> ObjectStore:
    extra = ({"multipart_threshold": cfg.store.multipart_threshold, "multipart_chunksize": cfg.store.multipart_chunksize}
             if cfg.store_url.startswith("s3://") else {})
    return open_store(cfg.store_url, cfg.store.endpoint_url, cfg.store.region, cfg.store.checksum_mode, **extra)


def _concat(tables: list[pa.Table], schema: pa.Schema) -> pa.Table:
    return pa.concat_tables(tables) if tables else schemas.empty(schema)


@dataclass
class CrawlResult:
    products: pa.Table
    looks: pa.Table
    crawl_log: pa.Table
    downloads: pa.Table
    counts: dict[str, Any]


def stage_crawl(cfg: PipelineConfig, run_dir: Path, store: ObjectStore | None = None,
                run_id: str = "run") -> CrawlResult:
    """Crawl every configured site (each in its own child process) and merge with the previous state. The crawl's
    WARC file goes to ``warc/<site>/<run_id>.warc.gz`` in ``store`` (the audit trail of a release)."""
    parts: dict[str, list[pa.Table]] = {"products": [], "looks": [], "crawl_log": [], "downloads": []}
    counts: dict[str, Any] = {}
    for path in cfg.sites:
        site = crawl.SiteConfig.from_yaml(path)
        state = Path(cfg.data_dir) / "state"
        out = crawl.crawl_site(Path(path), run_dir / site.name, cfg.user_agent,
                               cache_dir=state / site.name / "httpcache")
        cat = crawl.merge_catalog(out, state)
        for k in parts:
            parts[k].append(getattr(cat, k))
        counts[site.name] = cat.counts
        warc = out.feed.parent / "crawl.warc.gz"
        if store is not None and warc.is_file():
            key = f"warc/{site.name}/{run_id}.warc.gz"
            store.put_bytes(key, warc.read_bytes(), "application/warc")
            counts[site.name]["warc"] = key
    return CrawlResult(
        products=_concat(parts["products"], schemas.PRODUCTS), looks=_concat(parts["looks"], schemas.LOOKS),
        crawl_log=_concat(parts["crawl_log"], schemas.CRAWL_LOG),
        downloads=_concat(parts["downloads"], schemas.IMAGE_DOWNLOADS), counts=counts)


def stage_drops(cfg: PipelineConfig, now: datetime) -> pa.Table:
    """List the images of every configured image drop."""
    return _concat([drops.scan(d, Path(cfg.data_dir) / "state", now) for d in cfg.drops], schemas.DROP_ITEMS)


def image_refs_of(products: pa.Table, looks: pa.Table, drop_items: pa.Table) -> list[ImageRef]:
    """Every image reference of the crawl and the drops, in a deterministic order."""
    refs = []
    for p in products.to_pylist():
        for i, u in enumerate(p["image_urls"] or []):
            refs.append(ImageRef("product", p["product_id"], i, u, p["site"], p["first_seen_at"]))
    for lk in looks.to_pylist():
        refs.append(ImageRef("look", lk["look_id"], 0, lk["image_url"], lk["site"], lk["first_seen_at"]))
    for d in drop_items.to_pylist():
        refs.append(ImageRef("drop", d["drop_image_id"], 0, d["path"], f"drop:{d['drop']}", d["first_seen_at"]))
    return refs


def stage_images(cfg: PipelineConfig, products: pa.Table, looks: pa.Table, drop_items: pa.Table,
                 downloads: pa.Table, store: ObjectStore) -> tuple[pa.Table, pa.Table, dict[str, int]]:
    """Take in every image reference: returns ``(image_refs, images, counts)``."""
    refs = image_refs_of(products, looks, drop_items)
    reader = SourceReader(downloads.to_pylist(), cfg.images.max_bytes)
    res = take_in(refs, reader, store, cfg.images)
    counts = res.counts
    assert counts["in"] == counts["accepted"] + counts["rejected"]
    return (schemas.from_rows(res.refs, schemas.IMAGE_REFS), schemas.from_rows(res.images, schemas.IMAGES), counts)


def stage_dedup(cfg: PipelineConfig, image_refs: pa.Table, images: pa.Table) -> tuple[pa.Table, dict[str, int]]:
    """Cluster exact and near duplicates; returns ``(image_clusters, counts)``."""
    rows = dedup.cluster(images.to_pylist(), cfg.dedup.hamming_threshold, cfg.dedup.max_color_diff)
    table = schemas.from_rows(rows, schemas.IMAGE_CLUSTERS)
    counts = {
        "accepted_refs": sum(1 for r in image_refs.to_pylist() if r["status"] == "accepted"),
        "exact_duplicate_refs": dedup.exact_duplicate_refs(image_refs.to_pylist()),
        "distinct_images": images.num_rows,
        "clusters": len({r["cluster_id"] for r in rows}),
        "near_duplicate_images": sum(1 for r in rows if not r["is_representative"]),
        "uniform_images": sum(1 for r in images.to_pylist() if "uniform" in (r["flags"] or [])),
        "hamming_threshold": cfg.dedup.hamming_threshold,
    }
    counts["representatives"] = counts["clusters"]
    assert counts["distinct_images"] == counts["representatives"] + counts["near_duplicate_images"]
    return table, counts


def stage_contamination(cfg: PipelineConfig, images: pa.Table, store: ObjectStore,
                        window: Window) -> tuple[pa.Table, pa.Table, dict[str, Any]]:
    """Update the contamination index and match the new images against it: ``(index, contamination, counts)``.

    Releases of the same window (earlier previews of this release) are not treated as leaks."""
    from .release import list_releases, read_manifest
    from . import contamination as cont
    from . import demo_shop

    sources = []
    for src in cfg.contamination.sources:
        path = src.path if src.path.is_absolute() else Path(cfg.data_dir) / src.path
        if src.demo and not path.exists():
            demo = next((s for s in cfg.site_configs() if s.kind == "demo"), None)
            if demo is not None:
                demo_shop.write_fashion200k(path, demo.demo_products, demo.demo_looks, demo.demo_seed)
        sources.append(src.model_copy(update={"path": path}))
    same_window = {v for v in list_releases(store)
                   if read_manifest(store, v)["window"]["start"] == window.start.isoformat()}
    index, counts = cont.update_index(Path(cfg.data_dir) / "contamination" / "index.parquet", sources,
                                      store if cfg.contamination.include_published_releases else None,
                                      exclude_releases=same_window, cfg=cfg.images)
    found = cont.find_contamination(images, index, cfg.dedup.hamming_threshold, cfg.dedup.max_color_diff)
    counts = {**counts, "index_size": index.num_rows, "images": images.num_rows,
              "contaminated_images": len(set(found["image_sha256"].to_pylist())),
              "rate": cont.rates(images, found)}
    return index, found, counts


def stage_attributes(cfg: PipelineConfig, products: pa.Table, drop_items: pa.Table) -> tuple[pa.Table, dict]:
    """Label every product and drop item with the catalogue-text annotator; returns ``(annotations, counts)``."""
    tax = Taxonomy.load(cfg.taxonomy)
    ann = CatalogTextAnnotator(tax)
    rows = []
    for p in products.to_pylist():
        rows.append(ann.annotate(p["product_id"], p["title"], p["description"], p["category_text"], p["color"],
                                 p["material"]).row())
    items: dict[str, dict] = {}
    for d in drop_items.to_pylist():
        it = items.setdefault(d["item_id"], {"title": d["title"], "description": d["description"]})
        it["title"] = it["title"] or d["title"]
        it["description"] = it["description"] or d["description"]
    for item_id, it in sorted(items.items()):
        rows.append(ann.annotate(item_id, it["title"], it["description"]).row())
    table = schemas.from_rows(rows, schemas.ANNOTATIONS)
    counts: dict[str, Any] = {"items": len(rows), "labelled": 0, "rejected": 0}
    for r in rows:
        counts[r["status"]] += 1
        if r["reason"]:
            counts[f"rejected.{r['reason']}"] = counts.get(f"rejected.{r['reason']}", 0) + 1
        if r["category"]:
            counts[f"category.{r['category']}"] = counts.get(f"category.{r['category']}", 0) + 1
    counts["annotator"] = ann.name
    counts["taxonomy_version"] = tax.version
    return table, counts


STREET_SUBSETS = ("real_streetlook", "aigen_streetlook")
"""Subsets whose queries are street looks: with detection on, each detected item of such an image is a query."""


@dataclass
class DetectResult:
    detections: pa.Table
    detector: dict[str, Any]  # Detector.info() (what the manifest records); {"enabled": False} or {"used": False}
    counts: dict[str, Any]


def load_detector(cfg: PipelineConfig):
    """The configured garment detector (:class:`lookbench_pipeline.detect.Detector`), set up offline. With
    ``detect.weights: demo`` the demo detector is trained first when it is not cached (about a minute on a CPU).

    Raises:
        lookbench_pipeline.detect.DetectorError: weights not found or a class mapping that does not fit.
    """
    from . import detect

    d = cfg.detect
    cache = cfg.detector_cache_dir
    detect.prepare_offline(cache, d.offline)
    report: dict[str, Any] = {}
    if d.weights == "demo":
        weights, report, trained = detect.demo_detector(cache, d.demo.scenes, d.demo.seed, d.demo.train.model_dump(),
                                                        d.device, d.offline)
        report = {**report, "trained_now": trained}
        classes = d.classes or detect.DEMO_CLASSES
    else:
        weights = detect.resolve_weights(d.weights, weights_file=d.weights_file, revision=d.revision,
                                         offline=d.offline)
        classes = d.classes
    return detect.Detector(weights, classes, Taxonomy.load(cfg.taxonomy).categories, imgsz=d.imgsz, conf=d.conf,
                           iou=d.iou, max_det=d.max_det, batch=d.batch, device=d.device, source=d.weights,
                           report=report, cache_dir=cache, offline=d.offline)


def stage_detect(cfg: PipelineConfig, looks: pa.Table, drop_items: pa.Table, image_refs: pa.Table,
                 annotations: pa.Table, store: ObjectStore, window: Window) -> DetectResult:
    """Detect the garments of every street-look image of the window (crawled looks, and street photos of image
    drops whose subset is a street-look subset and role ``query``), crop them into the store and match them to
    the items each image links (:func:`lookbench_pipeline.detect.detect_street_images`).

    Counts: ``images = detected images``, plus images skipped (``skipped.outside_window``,
    ``skipped.image_not_accepted``); ``boxes = kept + dropped``; ``kept = matched + unlabelled``.
    """
    if not cfg.detect.enabled:
        return DetectResult(schemas.empty(schemas.DETECTIONS), {"enabled": False}, {"enabled": False})
    from . import detect
    from .embed import load_embedder
    from .images import decode
    from .store import derived_key, original_key, sha256_hex

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
    street: list[detect.StreetImage] = []

    def add(owner_type: str, owner_id: str, first_seen: datetime, items: list[str]) -> None:
        if first_seen not in window:
            skipped["outside_window"] = skipped.get("outside_window", 0) + 1
        elif not refs.get((owner_type, owner_id)):
            skipped["image_not_accepted"] = skipped.get("image_not_accepted", 0) + 1
        else:
            linked = [detect.LinkedItem(i, category[i]) for i in dict.fromkeys(items) if i in category]
            street.append(detect.StreetImage(owner_type, owner_id, refs[(owner_type, owner_id)][0]["image_sha256"],
                                             linked))

    for lk in looks.to_pylist():
        add("look", lk["look_id"], lk["first_seen_at"], list(lk["product_ids"] or []))
    for d in drops:
        if d["subset"] in STREET_SUBSETS and d["role"] == "query":
            add("drop", d["drop_image_id"], d["first_seen_at"], [d["item_id"]])

    if not street:  # nothing to detect: the detector is not loaded (nor trained)
        return DetectResult(schemas.empty(schemas.DETECTIONS), {"enabled": True, "used": False},
                            {"images": 0, **{f"skipped.{k}": v for k, v in sorted(skipped.items())}})
    detector = load_detector(cfg)

    def load(sha: str):
        return decode(store.get_bytes(original_key(sha)), cfg.images).rgb

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
    rows, counts = detect.detect_street_images(detector, street, load, put_crop, embedder.embed,
                                               cfg.detect.min_box_side_px, cfg.detect.min_match_similarity)
    counts = {**counts, **{f"skipped.{k}": v for k, v in sorted(skipped.items())},
              "detector_sha256": detector.sha256, "detector_trained_now": bool(detector.report.get("trained_now"))}
    return DetectResult(schemas.from_rows(rows, schemas.DETECTIONS), detector.info(), counts)


def stage_release(cfg: PipelineConfig, version: str, window: Window, tables: dict[str, pa.Table],
                  store: ObjectStore) -> ReleaseTables:
    """Form the release's query and gallery files (see :mod:`lookbench_pipeline.release`). Street looks use the
    ``detections`` table when detection is enabled, else the documented fallback (one whole-image query per linked
    product)."""
    tables = dict(tables)
    if not cfg.detect.enabled:
        tables["detections"] = None
    return build(version=version, window=window, taxonomy=Taxonomy.load(cfg.taxonomy), store=store, **tables)


def code_version() -> str:
    """The package version and, when run from a git checkout, the commit (``0.1.0+g1a2b3c4``)."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        sha = ""
    return f"{__version__}+g{sha}" if sha else __version__


def provenance(cfg: PipelineConfig, annotators: list[str]) -> dict[str, Any]:
    tax = Taxonomy.load(cfg.taxonomy)
    return {
        "code_version": code_version(),
        "annotators": sorted(set(annotators)),
        "taxonomy_version": tax.version,
        "dedup": {"method": PHASH_METHOD, "hamming_threshold": cfg.dedup.hamming_threshold},
        "sites": [crawl.SiteConfig.from_yaml(p).name for p in cfg.sites],
        "drops": [d.name for d in cfg.drops],
        "models": [],
    }


def stage_publish(cfg: PipelineConfig, rel: ReleaseTables, store: ObjectStore, annotators: list[str],
                  extra_provenance: dict[str, Any] | None = None) -> dict[str, Any]:
    extra = dict(extra_provenance or {})
    prov = provenance(cfg, annotators)
    prov["models"] = prov.get("models", []) + list(extra.pop("models", []))  # e.g. the garment detector
    return publish(rel, store, {**prov, **extra}, now=datetime.now(timezone.utc), card=cfg.card.model_dump())
