"""The stages of a release build as plain functions over tables: what each Dagster asset calls, and what a test or
a notebook can call without Dagster. Each returns its tables and a ``counts`` dict that reconciles
(``in = kept + rejected``).

One ``stage_*`` per asset (about 25 lines each, a little over 500 in all): it reads the configuration, calls its
stage's package and returns tables and counts. Factories and provenance live in their packages
(``vlm.attributes``, ``detect.street``, ``provenance``, ``backfill``); only the demo's wiring (the scripted image
endpoint, the demo detector, the demo legacy trees) is here, because the stages are the one place allowed to import
``lookbench_pipeline.demo`` (docs/ARCHITECTURE.md, "Import rules")."""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa

from . import __version__, crawl, dedup, drops, schemas
from .annotate import CatalogTextAnnotator, label_counts
from .config import PipelineConfig
from .crawl_tables import CrawlTables
from .detect.street import STREET_SUBSETS, DetectResult  # noqa: F401 (STREET_SUBSETS: its old home)
from .images import ImageRef, SourceReader, take_in
from .provenance import (aigen_summary, annotation_provenance, code_version, negatives_provenance,  # noqa: F401
                         provenance, publish_provenance)
from .releases.build import build, why_no_queries
from .releases.candidate import Candidate, ReleaseTables, make_candidate
from .releases.publish import publish
from .store import ObjectStore, configured_store
from .taxonomy import Taxonomy
from .vlm.attributes import annotator_from_config, label_images
from .windows import Window

log = logging.getLogger(__name__)

vlm_annotator = annotator_from_config  # the name this module used (tests, notebooks)


def store_of(cfg: PipelineConfig) -> ObjectStore:
    return configured_store(cfg)


def _concat(tables: list[pa.Table], schema: pa.Schema) -> pa.Table:
    return pa.concat_tables(tables) if tables else schemas.empty(schema)


CrawlResult = CrawlTables  # the name this module used before CrawlTables had one owner


def stage_crawl(cfg: PipelineConfig, run_dir: Path, store: ObjectStore | None = None,
                run_id: str = "run", archive_info: dict[str, str] | None = None,
                replay: dict[str, list[Path]] | None = None, week: str | None = None,
                recrawl: bool = False) -> CrawlTables:
    """Crawl every configured site (each in its own child process) and merge with the previous state. The crawl's
    WARC file goes to ``warc/<site>/<run_id>.warc.gz`` in ``store`` (the audit trail of a release), led by a
    ``warcinfo`` record (site, base URL, start time, ``archive_info`` such as the crawl partition) and described
    by ``warc/<site>/<run_id>.json`` (the same fields and the archive's ``sha256``), which is what
    :mod:`lookbench_pipeline.backfill` lists and checks.

    ``replay``: per site name, archived WARC files to crawl from instead of the network
    (:func:`crawl.replay_site`); a replay archives nothing. Raises CrawlError when a site has none.

    ``week``: a live crawl of that week runs in ``cfg.layout.crawl_dir(week, site)`` and resumes there after a
    kill (a finished week is read back, not crawled again: its counts say ``read_back`` and when that crawl
    started, ``read_back_started_at``); its archive is keyed by the crawl's own id (the same for every attempt), and
    an archive already in the store is not uploaded again. ``recrawl``: a finished week is crawled again instead
    (``crawl.crawl_site(again=True)``: ``lookbench build --force``)."""
    from .backfill import archive_crawl
    from .demo.serve import local_site  # demo and replay sites are served on 127.0.0.1 for their crawl
    from .warc import read_warcinfo, serving_origins

    cats: list[CrawlTables] = []
    counts: dict[str, Any] = {}
    for path in cfg.sites:
        site = crawl.SiteConfig.from_yaml(path)
        state = cfg.layout.state
        started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        if replay is not None:
            warcs = replay.get(site.name) or []
            if not warcs:
                raise crawl.CrawlError(f"no archived crawl of site {site.name} to replay")
            info = read_warcinfo(warcs[0])
            base = info.get("base-url", "")
            # every origin the crawl's attempts served from (a crawl resumed after a kill: one port per attempt)
            bases = info["base-urls"].split() if info.get("base-urls") else serving_origins(warcs, base)
            out = crawl.replay_site(Path(path), warcs, base, run_dir / site.name, cfg.user_agent, base_urls=bases)
        else:
            work = cfg.layout.crawl_dir(week, site.name) if week else run_dir / site.name
            out = crawl.crawl_site(Path(path), work, cfg.user_agent, cache_dir=cfg.layout.http_cache(site.name),
                                   resume=week is not None, local_server=local_site, again=recrawl,
                                   image_max_bytes=cfg.images.max_bytes)
            started = out.started_at or started
        cat = crawl.merge_catalog(out, state)
        cats.append(cat)
        counts[site.name] = cat.counts
        if out.reused:  # the week's finished crawl, read back: the stage line says so
            counts[site.name].update(read_back=True, read_back_started_at=out.started_at)
            if out.again_unreachable:  # --force found the site down: the finished crawl was kept
                counts[site.name]["again_unreachable"] = dict(out.again_unreachable)
        warc = out.feed.parent / "crawl.warc.gz"
        if store is not None and warc.is_file() and replay is None:
            archive_id = (out.crawl_id if week else None) or run_id
            counts[site.name]["warc"] = archive_crawl(
                store, warc, {"software": f"lookbench-pipeline/{__version__}", "site": site.name,
                              "run-id": archive_id, "base-url": out.base_url,
                              "base-urls": " ".join(out.base_urls or [out.base_url]).strip(),
                              "recorded-origin": site.recorded_origin or "", "started-at": started,
                              **(archive_info or {})})
        if replay is not None:
            counts[site.name]["replayed_from"] = [str(p) for p in replay[site.name]]
    return CrawlTables.concat(cats, counts)


class CrawlWeekError(ValueError):
    """A weekly crawl partition cannot be materialised: its site is not configured, a live crawl of a week that
    is over, or a replay of a week with no archived crawl (the message says which and what to do)."""


def stage_crawl_week(cfg: PipelineConfig, site: str, week: str, run_dir: Path, run_id: str,
                     store: ObjectStore, replay: bool = False, tz: str = "UTC",
                     now: datetime | None = None, recrawl: bool = False) -> CrawlTables:
    """One weekly crawl partition (``week`` × ``site``): a live crawl of the current week (:func:`stage_crawl`,
    archived with its week), or with ``replay`` the site's archived crawls of that week replayed in order from
    the store (the backfill of a past week; the partition is the last of them). ``recrawl``: the week's finished
    live crawl is crawled again rather than read back (:func:`stage_crawl`).

    Raises:
        CrawlWeekError: ``site`` has no site config; a live crawl of a week that ended before ``now`` (it would
            not observe that week); a replay of a week without an archived crawl.
        ArchiveError: an archived crawl is corrupt.
    """
    from .backfill import archived_in_week, fetch
    from .windows import week_bounds

    by_name = {s.name: p for s, p in zip(cfg.site_configs(), cfg.sites)}
    if site not in by_name:
        raise CrawlWeekError(f"site partition {site!r} has no site config; configured: {sorted(by_name)}")
    site_cfg = cfg.model_copy(update={"sites": [by_name[site]]})
    if replay:
        archived = archived_in_week(store, site, week, tz)
        if not archived:
            raise CrawlWeekError(f"no archived crawl of {site} for week {week} in {store.url}/warc/{site}/")
        res = None
        for a in archived:  # a week crawled twice is replayed twice, in order; the partition is the last crawl
            log.info("replaying %s (crawl started %s)", a.key, a.started_at.isoformat())
            warc = fetch(store, a, run_dir / site / "archive" / a.run_id)
            res = stage_crawl(site_cfg, run_dir / a.run_id, None, run_id, replay={site: [warc]})
        return res
    if (now or datetime.now(timezone.utc)) >= week_bounds(week, tz).end:
        raise CrawlWeekError(f"week {week} is over: a live crawl now would not observe it. Rebuild it from its "
                             "archived crawls (run config crawl: {config: {replay: true}}, or `lookbench backfill`).")
    return stage_crawl(site_cfg, run_dir, store, run_id, archive_info={"week": week}, week=week, recrawl=recrawl)


def stage_drops(cfg: PipelineConfig, now: datetime, store: ObjectStore | None = None) -> pa.Table:
    """List the images of every configured image drop; ``store``: where their first-seen records are kept (read
    and extended: :class:`lookbench_pipeline.records.DropState`)."""
    return _concat([drops.scan(d, cfg.layout.state, now, store) for d in cfg.drops],
                   schemas.DROP_ITEMS)


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
    from .logs import Progress

    refs = image_refs_of(products, looks, drop_items)
    reader = SourceReader(downloads.to_pylist(), cfg.images.max_bytes,
                          confine=[Path(d.path).resolve() for d in cfg.drops],  # a link out of a drop: rejected
                          crawled={r.source for r in refs if r.owner_type != "drop"})  # never read as files
    with Progress("image intake", len({r.source for r in refs}), "images") as prog:
        res = take_in(refs, reader, store, cfg.images, progress=lambda done, total: prog.set(done))
    counts = res.counts
    assert counts["in"] == counts["accepted"] + counts["rejected"]
    return (schemas.from_rows(res.refs, schemas.IMAGE_REFS), schemas.from_rows(res.images, schemas.IMAGES), counts)


def stage_dedup(cfg: PipelineConfig, image_refs: pa.Table, images: pa.Table) -> tuple[pa.Table, dict[str, int]]:
    """Cluster exact and near duplicates; returns ``(image_clusters, counts)``."""
    rows = dedup.cluster(images.to_pylist(), cfg.dedup.hamming_threshold, **cfg.dedup.match)
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
    from .releases.reader import list_releases, read_manifest
    from . import contamination as cont
    from .demo import shop as demo_shop  # the demo legacy tree is drawn by the demo shop

    sources = []
    for src in cfg.contamination.sources:
        path = cfg.layout.resolve(src.path)
        if src.demo and not path.exists():
            demo = next((s for s in cfg.site_configs() if s.kind == "demo"), None)
            if demo is not None:
                demo_shop.write_fashion200k(path, demo.demo_products, demo.demo_looks, demo.demo_seed)
        sources.append(src.model_copy(update={"path": path}))
    same_window = {v for v in list_releases(store)
                   if read_manifest(store, v)["window"]["start"] == window.start.isoformat()}
    index, counts = cont.update_index(cfg.layout.contamination_index, sources,
                                      store if cfg.contamination.include_published_releases else None,
                                      exclude_releases=same_window, cfg=cfg.images)
    found = cont.find_contamination(images, index, cfg.dedup.hamming_threshold, **cfg.dedup.match)
    counts = {**counts, "index_size": index.num_rows, "images": images.num_rows,
              "contaminated_images": len(set(found["image_sha256"].to_pylist())),
              "rate": cont.rates(images, found)}
    return index, found, counts


def stage_attributes(cfg: PipelineConfig, products: pa.Table, drop_items: pa.Table,
                     image_refs: pa.Table | None = None,
                     store: ObjectStore | None = None) -> tuple[pa.Table, dict[str, Any]]:
    """Label every product and drop item; returns ``(annotations, counts)`` with ``items = labelled + rejected
    + failed``.

    Without ``cfg.annotate.endpoint`` the catalogue-text annotator labels each item from its text. With one, the
    image model labels each item's representative image (a product's first accepted image, its packshot; a drop
    item's first gallery image, else its first image) through :class:`vlm.VlmAnnotator`, checked by the judge
    when ``cfg.annotate.judge.enabled``; the catalogue-text labels are still computed, as the category hint
    (``category_from: text``) and as the baseline the counts compare against (``agreement_with_catalog_text``).

    Either way, labels imported from the drops' annotation files, the items sheets' ``category`` / ``attributes``
    columns and the products' ``additionalProperty`` facets are merged in by precedence
    (:mod:`lookbench_pipeline.label_import`; counts ``imported`` per annotation file and ``sources``).

    Raises:
        ValueError: an endpoint is configured but ``image_refs`` or ``store`` is missing.
        vlm.VlmEndpointError: the endpoint is unreachable or does not serve the model.
        ConfigError: an annotation file is unreadable or malformed.
    """
    from . import label_import

    tax = Taxonomy.load(cfg.taxonomy)
    ann = CatalogTextAnnotator(tax)
    text_labels = []
    for p in products.to_pylist():
        text_labels.append(ann.annotate(p["product_id"], p["title"], p["description"], p["category_text"],
                                        p["color"], p["material"]))
    items: dict[str, dict] = {}
    for d in drop_items.to_pylist():
        it = items.setdefault(d["item_id"], {"title": d["title"], "description": d["description"]})
        it["title"] = it["title"] or d["title"]
        it["description"] = it["description"] or d["description"]
    for item_id, it in sorted(items.items()):
        text_labels.append(ann.annotate(item_id, it["title"], it["description"]))
    mapper = label_import.LabelMapper(tax)
    extra, imported = label_import.candidates(cfg.drops, mapper, products, drop_items, image_refs)
    if not cfg.annotate.endpoint:
        rows, sources = label_import.apply([lb.row() for lb in text_labels], extra, mapper)
        counts = label_counts(rows)
        counts["annotator"] = ann.name
        counts["taxonomy_version"] = tax.version
        counts.update(imported=imported, sources=sources)
        return schemas.from_rows(rows, schemas.ANNOTATIONS), counts
    if image_refs is None or store is None:
        raise ValueError("annotate.endpoint is set: stage_attributes needs image_refs and the object store")
    table, counts = label_images(cfg, tax, text_labels, drop_items, image_refs, store)
    if not extra:
        return table, counts
    rows, sources = label_import.apply(table.to_pylist(), extra, mapper)
    counts = {k: v for k, v in counts.items() if not k.startswith(("category.", "labelled.", "rejected.", "failed."))}
    counts.update(label_counts(rows), imported=imported, sources=sources)
    return schemas.from_rows(rows, schemas.ANNOTATIONS), counts


def _legacy_sources(cfg: PipelineConfig, sources: list) -> tuple[list, list[str]]:
    """``(sources, skipped)``: paths resolved under ``data_dir``; a demo source's tree is generated when missing,
    and skipped (named in ``skipped``) when no demo site is configured to generate it from."""
    from .demo import shop as demo_shop  # the demo legacy tree is drawn by the demo shop

    out, skipped = [], []
    for src in sources:
        path = cfg.layout.resolve(src.path)
        if src.demo and not path.exists():
            demo = next((s for s in cfg.site_configs() if s.kind == "demo"), None)
            if demo is None:
                skipped.append(src.name)
                continue
            demo_shop.write_fashion200k(path, demo.demo_products, demo.demo_looks, demo.demo_seed)
        out.append(src.model_copy(update={"path": path}))
    return out, skipped


def stage_negatives(cfg: PipelineConfig, products: pa.Table, drop_items: pa.Table, image_refs: pa.Table,
                    images: pa.Table, annotations: pa.Table, store: ObjectStore,
                    window: Window) -> tuple[pa.Table, dict[str, Any]]:
    """Mine soft-negative distractors from the configured Fashion200K sources for every labelled item of the
    window (:mod:`lookbench_pipeline.negatives`); returns ``(negatives, counts)``. No sources: an empty table.

    Raises:
        EmbedderUnavailable: the mining model cannot be loaded here (the message says why).
    """
    from .embed import EmbeddingCache, load_embedder
    from .negatives import MiningConfig, mine, query_items

    nc = cfg.negatives
    sources, skipped = _legacy_sources(cfg, nc.sources)
    if not sources:
        return schemas.empty(schemas.NEGATIVES), {"enabled": False, "skipped_demo_sources": skipped}
    embedder = load_embedder(nc.model, device=nc.device, batch_size=nc.batch_size)
    info = embedder.info()
    cache = EmbeddingCache(cfg.layout.embeddings, info)
    items = query_items(products, drop_items, image_refs, annotations, window)
    mcfg = MiningConfig(band=tuple(nc.band), per_query=nc.per_query, candidates=nc.candidates,
                        same_category_only=nc.same_category_only, backend=nc.backend,
                        hamming_threshold=cfg.dedup.hamming_threshold, max_color_diff=cfg.dedup.max_color_diff,
                        max_pool=nc.max_pool)
    res = mine(items, sources, images, store, embedder, cache, Taxonomy.load(cfg.taxonomy), mcfg, cfg.images)
    counts = {"enabled": True, **res.counts, "model": info, "band": list(nc.band), "per_query": nc.per_query,
              "candidates": nc.candidates, "sources": [s.name for s in sources], "skipped_demo_sources": skipped,
              "embedding_cache": {"hits": cache.hits, "misses": cache.misses}}
    return res.negatives, counts


def stage_aigen_requests(cfg: PipelineConfig, products: pa.Table, drop_items: pa.Table, image_refs: pa.Table,
                         annotations: pa.Table, window: Window) -> tuple[pa.Table, dict[str, Any]]:
    """Generation requests for the AI-generated subsets (:func:`lookbench_pipeline.aigen.make_requests`): items
    labelled in ``annotations`` with an accepted gallery image, first seen inside ``window``."""
    from . import aigen

    if not cfg.aigen.enabled:
        return schemas.empty(schemas.GENERATION_REQUESTS), {"enabled": False, "requests": 0}
    refs, counts = aigen.reference_candidates(products, drop_items, image_refs, annotations, window)
    rows, picked = aigen.make_requests(cfg.aigen, refs, Taxonomy.load(cfg.taxonomy), cfg.aigen.endpoint.size)
    return schemas.from_rows(rows, schemas.GENERATION_REQUESTS), {"enabled": True, **counts, **picked}


def stage_aigen_generate(cfg: PipelineConfig, requests: pa.Table, store: ObjectStore, window: Window,
                         now: datetime | None = None) -> tuple[pa.Table, dict[str, Any]]:
    """Fulfil the generation requests with the configured backend (:func:`lookbench_pipeline.aigen.generate`).
    Without an image endpoint (``aigen.endpoint.base_url``) only the demo (a site of kind ``demo``) generates: with
    the scripted endpoint of :mod:`lookbench_pipeline.demo.aigen_server`; any other configuration is refused."""
    from . import aigen

    scripted = None
    if not cfg.aigen.endpoint.base_url and cfg.demo_site() is not None:
        from .demo import aigen_server  # the demo's stand-in image endpoint, wired in here and nowhere else

        scripted = aigen.ScriptedEndpoint(aigen_server.scripted_endpoint, aigen_server.MODEL, aigen_server.VERSION)
    rows, counts = aigen.generate(cfg, requests, store, window, now, scripted)
    return schemas.from_rows(rows, schemas.GENERATED_IMAGES), counts


def stage_aigen_intake(cfg: PipelineConfig, generated: pa.Table,
                       store: ObjectStore) -> tuple[pa.Table, pa.Table, dict[str, int]]:
    """The generated images through the same image intake as every other image: ``(image_refs, images, counts)``
    with owner type ``generated``."""
    from . import aigen

    res = take_in(aigen.image_refs_of(generated), SourceReader([], cfg.images.max_bytes), store, cfg.images)
    counts = res.counts
    assert counts["in"] == counts["accepted"] + counts["rejected"]
    return (schemas.from_rows(res.refs, schemas.IMAGE_REFS), schemas.from_rows(res.images, schemas.IMAGES), counts)


def stage_aigen_detect(cfg: PipelineConfig, generated: pa.Table, gen_refs: pa.Table, annotations: pa.Table,
                       store: ObjectStore, window: Window) -> tuple[pa.Table, dict[str, Any]]:
    """Garment detection on the generated street outfits: each is a look linking its reference item
    (:func:`lookbench_pipeline.aigen.detection_inputs`) through :func:`stage_detect`, so the detector finds every
    garment of the outfit and matches the reference item among them. ``(detections, counts)``; empty when
    detection or generation is off."""
    from . import aigen

    if not (cfg.aigen.enabled and cfg.detect.enabled):
        return schemas.empty(schemas.DETECTIONS), {"enabled": False}
    looks, refs = aigen.detection_inputs(generated, gen_refs)
    res = stage_detect(cfg, looks, schemas.empty(schemas.DROP_ITEMS), refs, annotations, store, window)
    return res.detections, {"outfits": looks.num_rows, **res.counts}


def stage_aigen_check(cfg: PipelineConfig, generated: pa.Table, gen_refs: pa.Table, gen_images: pa.Table,
                      images: pa.Table, annotations: pa.Table, contamination_index: pa.Table,
                      store: ObjectStore, detections: pa.Table | None = None) -> tuple[pa.Table, dict[str, Any]]:
    """Dedup against the real images, contamination, and the reference check of every generated image
    (:func:`lookbench_pipeline.aigen.check_generated`): ``(generated_checks, counts)``. ``detections``: garment
    detections of the street outfits (:func:`lookbench_pipeline.aigen.detection_inputs` fed to the detection
    stage); their matched boxes replace the window search."""
    from . import aigen
    from .contamination import find_contamination

    found = find_contamination(gen_images, contamination_index, cfg.dedup.hamming_threshold, **cfg.dedup.match)
    tax = Taxonomy.load(cfg.taxonomy)
    ctx = aigen.CheckContext(annotations=annotations, real_images=images, contamination=found, store=store,
                             taxonomy=tax,
                             detections=aigen.regions_from_detections(detections) if detections is not None else None,
                             vlm_annotator=lambda: annotator_from_config(cfg, tax))
    rows, counts = aigen.check_generated(cfg, generated, gen_refs, gen_images, ctx)
    return schemas.from_rows(rows, schemas.GENERATED_CHECKS), counts


def load_detector(cfg: PipelineConfig):
    """The configured garment detector (:class:`lookbench_pipeline.detect.Detector`), set up offline. With
    ``detect.weights: demo`` the demo detector is trained first when it is not cached (about a minute on a CPU);
    ``detect.weights: person-regions`` gives the person-region fallback
    (:class:`lookbench_pipeline.detect.person_regions.PersonRegionDetector`, same interface).

    Raises:
        lookbench_pipeline.detect.DetectorError: weights not found or a class mapping that does not fit.
    """
    from . import detect

    d = cfg.detect
    if d.weights == "person-regions":
        from .detect.person_regions import PersonRegionDetector

        return PersonRegionDetector(d.classes, Taxonomy.load(cfg.taxonomy).categories, conf=d.conf, iou=d.iou,
                                    max_det=d.max_det, keypoint_conf=d.person_regions.keypoint_conf,
                                    imgsz=d.imgsz, batch=d.batch, device=d.device)
    cache = cfg.detector_cache_dir
    detect.prepare_offline(cache, d.offline)
    report: dict[str, Any] = {}
    if d.weights == "demo":
        from .demo.detector import DEMO_CLASSES, demo_detector  # trained on looks the demo shop draws

        weights, report, trained = demo_detector(cache, d.demo.scenes, d.demo.seed, d.demo.train.model_dump(),
                                                 d.device, d.offline)
        report = {**report, "trained_now": trained}
        classes = d.classes or DEMO_CLASSES
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
    from .detect.street import detect_and_match, street_images

    street, gallery_sha, skipped = street_images(looks, drop_items, image_refs, annotations, window)
    if not street:  # nothing to detect: the detector is not loaded (nor trained)
        return DetectResult(schemas.empty(schemas.DETECTIONS), {"enabled": True, "used": False},
                            {"images": 0, **{f"skipped.{k}": v for k, v in sorted(skipped.items())}})
    detector = load_detector(cfg)
    rows, counts = detect_and_match(detector, street, gallery_sha, store, cfg.images, cfg.detect.min_box_side_px,
                                    cfg.detect.min_match_similarity)
    counts = {**counts, **{f"skipped.{k}": v for k, v in sorted(skipped.items())},
              "detector_sha256": detector.sha256, "detector_trained_now": bool(detector.report.get("trained_now"))}
    return DetectResult(schemas.from_rows(rows, schemas.DETECTIONS), detector.info(), counts)


def stage_release(cfg: PipelineConfig, version: str, window: Window, tables: dict[str, pa.Table],
                  store: ObjectStore) -> ReleaseTables:
    """Form the release's query and gallery files (see :mod:`lookbench_pipeline.releases.build`). Street looks use the
    ``detections`` table when detection is enabled, else the documented fallback (one whole-image query per linked
    product)."""
    tables = dict(tables)
    if not cfg.detect.enabled:
        tables["detections"] = None
    return build(version=version, window=window, taxonomy=Taxonomy.load(cfg.taxonomy), store=store,
                 gallery_min_side_px=cfg.images.gallery_min_side_px, **tables)


def stage_candidate(cfg: PipelineConfig, version: str, window: Window, tables: dict[str, pa.Table],
                    store: ObjectStore, detector: dict[str, Any] | None = None) -> Candidate:
    """The release candidate: the release built (:func:`stage_release`) and kept under
    ``<data_dir>/candidates/<version>`` for the checks, with the provenance its manifest will carry
    (:func:`releases.candidate.make_candidate`). ``tables`` as :func:`stage_release` takes them; ``detector``: the
    ``detector`` asset. The provenance comes from here, not from ``releases`` (its functions sit in modules that
    read releases: importing them there would be a cycle)."""
    from .aigen import manifest_summary

    rel = stage_release(cfg, version, window, tables, store)
    return make_candidate(rel, cfg.layout.candidate_dir(version), annotations=tables["annotations"],
                          negatives=negatives_provenance(cfg, tables["noise"]),
                          annotation=annotation_provenance(tables["annotations"]),
                          aigen=manifest_summary(cfg, tables["generated_checks"]), detector=detector)


def candidate_no_queries_why(cfg: PipelineConfig, cand: Candidate, tables: dict[str, pa.Table]) -> str:
    """Why the candidate :func:`stage_candidate` built from ``tables`` has no query row (the failed
    ``has_queries`` check's explanation: :func:`releases.build.why_no_queries`, with the sites' look rules)."""
    rules = {s.name: (s.look_rules.image, s.look_rules.products) for s in cfg.site_configs()}
    return why_no_queries(cand.tables, looks=tables["looks"], drop_items=tables["drop_items"],
                          generated_checks=tables.get("generated_checks"), products=tables.get("products"),
                          look_rules=rules)


def stage_publish(cfg: PipelineConfig, rel: ReleaseTables, store: ObjectStore, annotators: list[str],
                  extra_provenance: dict[str, Any] | None = None) -> dict[str, Any]:
    """Publish a checked candidate (:func:`releases.publish.publish`) with its provenance
    (:func:`provenance.publish_provenance`); returns the manifest."""
    return publish(rel, store, publish_provenance(cfg, annotators, extra_provenance), now=datetime.now(timezone.utc),
                   card=cfg.card.model_dump(), taxonomy=cfg.taxonomy)


def write_demo_legacy_trees(cfg: PipelineConfig) -> list[Path]:
    """Write the demo legacy benchmarks the evaluation scores (``cfg.evaluate.legacy`` sources with ``demo: true``)
    that are missing, before it scores them: the evaluation stage and ``lookbench evaluate`` call this. The paths
    written (lookbench_pipeline.demo.legacy.write_demo_trees)."""
    from .demo.legacy import write_demo_trees  # the demo legacy trees are drawn by the demo shop

    return write_demo_trees(cfg.evaluate.legacy, cfg.layout.root)


def stage_evaluate(cfg: PipelineConfig, store: ObjectStore, version: str, contamination_index: pa.Table | None = None,
                   model_ids: list[str] | None = None, cutoff: str | None = None, registry: bool | None = None,
                   legacy: bool = True, report: bool = True, report_dir: Path | None = None,
                   report_to_store: bool = True, progress: bool = False) -> tuple[Any, dict[str, Any] | None]:
    """Score models on a published release and its legacy benchmarks and write the leaderboard and HTML report
    (lookbench_pipeline.evaluate.run_evaluation, lookbench_pipeline.report.write_report).

    Models: ``model_ids`` (default ``cfg.evaluate.models``) and, when ``registry`` (default
    ``cfg.evaluate.registry``), every registry model; those that cannot run here are skipped with the reason.
    ``cutoff`` (default ``cfg.evaluate.cutoff``): a date or ``"model"``. Queries matching a legacy benchmark of
    ``contamination_index`` are excluded and counted (when ``cfg.evaluate.exclude_contaminated``). The report
    (when ``report``) goes to ``report_dir`` (default ``<data_dir>/reports/<version>[-cutoff-…]``) and, when
    ``report_to_store``, to ``reports/<name>/`` in the store.

    Returns ``(evaluation, report)``: an ``Evaluation`` and ``write_report``'s result (or None).
    """
    from .evaluate import evaluate_configured
    from .report import report_name, write_report

    if legacy:
        write_demo_legacy_trees(cfg)
    ev = evaluate_configured(
        cfg.evaluate, store, version, data_dir=cfg.layout.root, cache_dir=cfg.layout.embeddings,
        contamination_index=contamination_index,
        contamination_match=(cfg.dedup.hamming_threshold, cfg.dedup.max_color_diff, cfg.dedup.max_foreground_delta_e),
        model_ids=model_ids,
        cutoff=cutoff, registry=registry, legacy=legacy, progress=progress)
    for w in ev.warnings:  # what was left unscored: a warning in the build's log and Dagster's, as on the CLI
        log.warning("%s", w)
    if not report:
        return ev, None
    out = Path(report_dir) if report_dir else cfg.layout.report_dir(report_name(ev))
    return ev, write_report(ev, out, store if report_to_store else None)
