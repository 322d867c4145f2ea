"""The stages of a release build as plain functions over tables: what each Dagster asset calls, and what a test or
a notebook can call without Dagster. Each returns its tables and a ``counts`` dict that reconciles
(``in = kept + rejected``)."""

from __future__ import annotations

import json
import logging
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from . import __version__, crawl, dedup, drops, schemas
from .annotate import CatalogTextAnnotator
from .config import PipelineConfig
from .drops import subsets_of
from .images import PHASH_METHOD, ImageRef, SourceReader, take_in
from .release import ReleaseTables, Window, build, publish
from .store import ObjectStore, configured_store
from .taxonomy import Taxonomy

if TYPE_CHECKING:
    from . import vlm

log = logging.getLogger(__name__)


def store_of(cfg: PipelineConfig) -> ObjectStore:
    return configured_store(cfg)


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
                run_id: str = "run", archive_info: dict[str, str] | None = None,
                replay: dict[str, list[Path]] | None = None, week: str | None = None) -> CrawlResult:
    """Crawl every configured site (each in its own child process) and merge with the previous state. The crawl's
    WARC file goes to ``warc/<site>/<run_id>.warc.gz`` in ``store`` (the audit trail of a release), led by a
    ``warcinfo`` record (site, base URL, start time, ``archive_info`` such as the crawl partition) and described
    by ``warc/<site>/<run_id>.json`` (the same fields and the archive's ``sha256``), which is what
    :mod:`lookbench_pipeline.backfill` lists and checks.

    ``replay``: per site name, archived WARC files to crawl from instead of the network
    (:func:`crawl.replay_site`); a replay archives nothing. Raises CrawlError when a site has none.

    ``week``: a live crawl of that week runs in ``crawl.crawl_dir(data_dir, week, site)`` and resumes there after a
    kill (a finished week is read back, not crawled again); its archive is keyed by the crawl's own id (the same
    for every attempt), and an archive already in the store is not uploaded again."""
    import json

    from .store import sha256_hex
    from .warc import read_warcinfo, warcinfo_record

    parts: dict[str, list[pa.Table]] = {"products": [], "looks": [], "crawl_log": [], "downloads": []}
    counts: dict[str, Any] = {}
    for path in cfg.sites:
        site = crawl.SiteConfig.from_yaml(path)
        state = Path(cfg.data_dir) / "state"
        started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        if replay is not None:
            warcs = replay.get(site.name) or []
            if not warcs:
                raise crawl.CrawlError(f"no archived crawl of site {site.name} to replay")
            info = read_warcinfo(warcs[0])
            out = crawl.replay_site(Path(path), warcs, info.get("base-url", ""), run_dir / site.name, cfg.user_agent)
        else:
            work = crawl.crawl_dir(Path(cfg.data_dir), week, site.name) if week else run_dir / site.name
            out = crawl.crawl_site(Path(path), work, cfg.user_agent, cache_dir=state / site.name / "httpcache",
                                   resume=week is not None)
            started = out.started_at or started
        cat = crawl.merge_catalog(out, state)
        for k in parts:
            parts[k].append(getattr(cat, k))
        counts[site.name] = cat.counts
        warc = out.feed.parent / "crawl.warc.gz"
        archive_id = (out.crawl_id if week and replay is None else None) or run_id
        key = f"warc/{site.name}/{archive_id}.warc.gz"
        if store is not None and warc.is_file() and replay is None and store.exists(key):
            counts[site.name]["warc"] = key  # a resumed run of a crawl that was archived before the kill
        elif store is not None and warc.is_file() and replay is None:
            info = {"software": f"lookbench-pipeline/{__version__}", "site": site.name, "run-id": archive_id,
                    "base-url": out.base_url, "recorded-origin": site.recorded_origin or "",
                    "started-at": started, **(archive_info or {})}
            data = warcinfo_record(info) + warc.read_bytes()
            store.put_bytes(key, data, "application/warc")
            store.put_bytes(key.removesuffix(".warc.gz") + ".json",
                            json.dumps({**info, "key": key, "sha256": sha256_hex(data)}, indent=1,
                                       sort_keys=True).encode(), "application/json")
            counts[site.name]["warc"] = key
        if replay is not None:
            counts[site.name]["replayed_from"] = [str(p) for p in replay[site.name]]
    return CrawlResult(
        products=_concat(parts["products"], schemas.PRODUCTS), looks=_concat(parts["looks"], schemas.LOOKS),
        crawl_log=_concat(parts["crawl_log"], schemas.CRAWL_LOG),
        downloads=_concat(parts["downloads"], schemas.IMAGE_DOWNLOADS), counts=counts)


def stage_drops(cfg: PipelineConfig, now: datetime, store: ObjectStore | None = None) -> pa.Table:
    """List the images of every configured image drop; ``store``: where their first-seen records are kept (read
    and extended: :class:`lookbench_pipeline.records.DropState`)."""
    return _concat([drops.scan(d, Path(cfg.data_dir) / "state", now, store) for d in cfg.drops],
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
    reader = SourceReader(downloads.to_pylist(), cfg.images.max_bytes)
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
    from .release_reader import list_releases, read_manifest
    from . import contamination as cont
    from .demo import shop as demo_shop  # the demo legacy tree is drawn by the demo shop

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
        counts = _label_counts(rows)
        counts["annotator"] = ann.name
        counts["taxonomy_version"] = tax.version
        counts.update(imported=imported, sources=sources)
        return schemas.from_rows(rows, schemas.ANNOTATIONS), counts
    if image_refs is None or store is None:
        raise ValueError("annotate.endpoint is set: stage_attributes needs image_refs and the object store")
    table, counts = _vlm_attributes(cfg, tax, text_labels, drop_items, image_refs, store)
    if not extra:
        return table, counts
    rows, sources = label_import.apply(table.to_pylist(), extra, mapper)
    counts = {k: v for k, v in counts.items() if not k.startswith(("category.", "labelled.", "rejected.", "failed."))}
    counts.update(_label_counts(rows), imported=imported, sources=sources)
    return schemas.from_rows(rows, schemas.ANNOTATIONS), counts


def _label_counts(rows: list[dict]) -> dict[str, Any]:
    counts: dict[str, Any] = {"items": len(rows), "labelled": 0, "rejected": 0, "failed": 0}
    for r in rows:
        counts[r["status"]] += 1
        if r["reason"]:
            counts[f"{r['status']}.{r['reason']}"] = counts.get(f"{r['status']}.{r['reason']}", 0) + 1
        if r["category"]:
            counts[f"category.{r['category']}"] = counts.get(f"category.{r['category']}", 0) + 1
    assert counts["items"] == counts["labelled"] + counts["rejected"] + counts["failed"]
    return counts


def vlm_annotator(cfg: PipelineConfig, tax: Taxonomy) -> "vlm.VlmAnnotator":
    """The image annotator (and judge) ``cfg.annotate`` describes. Raises ValueError when ``endpoint`` is unset."""
    import os

    from . import vlm

    a = cfg.annotate
    if not a.endpoint:
        raise ValueError("annotate.endpoint is not set")
    judge = None
    if a.judge.enabled:
        judge = vlm.VlmJudge(a.judge.endpoint or a.endpoint, a.judge.model or a.model,
                             os.environ.get(a.judge.api_key_env or a.api_key_env))
    cache = a.cache or Path("annotate/vlm_cache.sqlite")
    cache = cache if cache.is_absolute() else Path(cfg.data_dir) / cache
    return vlm.VlmAnnotator(
        a.endpoint, a.model, tax, api_key=os.environ.get(a.api_key_env), judge=judge, on_reject=a.judge.on_reject,
        cache=cache, concurrency=a.concurrency, timeout_s=a.timeout_s, max_retries=a.max_retries,
        backoff_s=a.backoff_s, max_backoff_s=a.max_backoff_s, max_model_len=a.max_model_len,
        max_image_tokens=a.max_image_tokens, temperature=a.temperature, max_tokens=a.max_tokens, seed=a.seed,
        extra_body=a.extra_body)


def _vlm_attributes(cfg: PipelineConfig, tax: Taxonomy, text_labels: list, drop_items: pa.Table,
                    image_refs: pa.Table, store: ObjectStore) -> tuple[pa.Table, dict[str, Any]]:
    from . import vlm
    from .store import original_key

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
        items.append(vlm.ImageItem(tl.item_id, loader(sha), sha256=sha,
                                   category=tl.category if use_text_category and tl.category else None))
    annotator = vlm_annotator(cfg, tax)
    started = time.monotonic()
    try:
        from .logs import Progress

        with Progress("attribute annotation", len(items), "items") as prog:
            labels = annotator.annotate_images(items, progress=lambda done, total: prog.set(done))
    finally:
        annotator.cache.close()
    rows = [lb.row() for lb in labels]
    for item_id in no_image:
        rows.append({"item_id": item_id, "status": "rejected", "reason": "no_accepted_image", "category": None,
                     "attributes": [], "annotator": annotator.name, "taxonomy_version": tax.version,
                     "model": annotator.model, "prompt_version": vlm.PROMPT_VERSION, "requests": 0})
    counts = _label_counts(rows)
    run = vlm.summarize(labels, started)
    counts.update({"annotator": annotator.name, "taxonomy_version": tax.version, "model": annotator.model,
                   "server_version": next((lb.server_version for lb in labels if lb.server_version), None),
                   "prompt_version": vlm.PROMPT_VERSION, "requests": run["requests"],
                   "cache_hits": run["cache_hits"], "seconds": run["seconds"]})
    if annotator.judge is not None:
        rates = vlm.acceptance_rates(rows)
        counts.update({"judge_model": annotator.judge.model, "judge_prompt_version": vlm.JUDGE_PROMPT_VERSION,
                       "judge_on_reject": annotator.on_reject, "acceptance": rates,
                       "acceptance_rate": rates["overall"]})
    counts["agreement_with_catalog_text"] = _agreement(text_labels, labels)
    return schemas.from_rows(rows, schemas.ANNOTATIONS), counts


def _agreement(text_labels: list, labels: list) -> dict[str, Any]:
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


def _legacy_sources(cfg: PipelineConfig, sources: list) -> tuple[list, list[str]]:
    """``(sources, skipped)``: paths resolved under ``data_dir``; a demo source's tree is generated when missing,
    and skipped (named in ``skipped``) when no demo site is configured to generate it from."""
    from .demo import shop as demo_shop  # the demo legacy tree is drawn by the demo shop

    out, skipped = [], []
    for src in sources:
        path = src.path if src.path.is_absolute() else Path(cfg.data_dir) / src.path
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
    cache = EmbeddingCache(Path(cfg.data_dir) / "embeddings", info)
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


def negatives_provenance(cfg: PipelineConfig, negatives: pa.Table, counts: dict[str, Any] | None = None
                         ) -> dict[str, Any]:
    """What the manifest says about the noise gallery: the mining model (id, revision, input size, embedding
    size, weights checksum, as ``embed`` reports it), the thresholds and the counts."""
    nc = cfg.negatives
    has_demo = any(s.kind == "demo" for s in cfg.site_configs())
    usable = [s for s in nc.sources if not (s.demo and not has_demo and not
                                            (s.path if s.path.is_absolute() else Path(cfg.data_dir) / s.path).exists())]
    if not usable or (counts is not None and not counts.get("enabled")):
        return {"enabled": False}
    from .embed import resolve_spec

    model = dict((counts or {}).get("model") or {})
    if not model:
        spec = resolve_spec(nc.model)
        model = {"model_id": spec.id, "backend": spec.backend, "input_size": spec.input_size, "dim": spec.dim,
                 "training_cutoff": spec.training_cutoff}
        if negatives.num_rows:
            first = negatives.slice(0, 1).to_pylist()[0]
            model.update(model_id=first["model"], revision=first["model_revision"],
                         input_size=first["model_input_size"], dim=first["model_dim"],
                         weights_sha256=first["model_weights_sha256"])
    kinds = negatives["kind"].to_pylist() if negatives.num_rows else []
    return {"enabled": True, "model": model, "band": list(nc.band), "per_query": nc.per_query,
            "candidates": nc.candidates, "same_category_only": nc.same_category_only, "search_backend": nc.backend,
            "sources": [{"name": s.name, "kind": s.kind} for s in usable],
            "dedup": {"hamming_threshold": cfg.dedup.hamming_threshold, "max_color_diff": cfg.dedup.max_color_diff},
            "pairs": negatives.num_rows, "pairs_by_kind": {k: kinds.count(k) for k in ("soft", "ambiguous", "easy")},
            "distractors": len(set(negatives["distractor_sha256"].to_pylist())) if negatives.num_rows else 0}


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
                             vlm_annotator=lambda: vlm_annotator(cfg, tax))
    rows, counts = aigen.check_generated(cfg, generated, gen_refs, gen_images, ctx)
    return schemas.from_rows(rows, schemas.GENERATED_CHECKS), counts


STREET_SUBSETS = ("real_streetlook", "aigen_streetlook")
"""Subsets whose queries are street looks: with detection on, each detected item of such an image is a query."""


@dataclass
class DetectResult:
    detections: pa.Table
    detector: dict[str, Any]  # Detector.info() (what the manifest records); {"enabled": False} or {"used": False}
    counts: dict[str, Any]


def load_detector(cfg: PipelineConfig):
    """The configured garment detector (:class:`lookbench_pipeline.detect.Detector`), set up offline. With
    ``detect.weights: demo`` the demo detector is trained first when it is not cached (about a minute on a CPU);
    ``detect.weights: person-regions`` gives the person-region fallback
    (:class:`lookbench_pipeline.person_regions.PersonRegionDetector`, same interface).

    Raises:
        lookbench_pipeline.detect.DetectorError: weights not found or a class mapping that does not fit.
    """
    from . import detect

    d = cfg.detect
    if d.weights == "person-regions":
        from .person_regions import PersonRegionDetector

        return PersonRegionDetector(d.classes, Taxonomy.load(cfg.taxonomy).categories, conf=d.conf, iou=d.iou,
                                    max_det=d.max_det, keypoint_conf=d.person_regions.keypoint_conf,
                                    imgsz=d.imgsz, batch=d.batch, device=d.device)
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
        if d["role"] == "query" and any(p in STREET_SUBSETS for p in subsets_of(d["subset"])):
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
    from .logs import Progress

    with Progress("garment detection", len({s.image_sha256 for s in street}), "images") as prog:
        rows, counts = detect.detect_street_images(detector, street, load, put_crop, embedder.embed,
                                                   cfg.detect.min_box_side_px, cfg.detect.min_match_similarity,
                                                   progress=lambda done, total: prog.set(done))
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
    return build(version=version, window=window, taxonomy=Taxonomy.load(cfg.taxonomy), store=store,
                 gallery_min_side_px=cfg.images.gallery_min_side_px, **tables)


def code_version() -> str:
    """The package version and, when run from a git checkout, the commit (``0.1.0+g1a2b3c4``)."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        sha = ""
    return f"{__version__}+g{sha}" if sha else __version__


def aigen_summary(cfg: PipelineConfig) -> dict[str, Any]:
    from .aigen import manifest_summary

    return manifest_summary(cfg)


def _source_entry(site: Any) -> dict[str, Any]:
    """A site as a release's sources list it: name, where (its recorded origin or first start URL), licence."""
    where = site.recorded_origin or (site.start_urls[0] if site.start_urls else None)
    return {"name": site.name, "url": site.source or where, "license": site.license}


def provenance(cfg: PipelineConfig, annotators: list[str]) -> dict[str, Any]:
    tax = Taxonomy.load(cfg.taxonomy)
    return {
        "code_version": code_version(),
        "annotators": sorted(set(annotators)),
        "taxonomy_version": tax.version,
        "dedup": {"method": PHASH_METHOD, "hamming_threshold": cfg.dedup.hamming_threshold},
        "sites": [crawl.SiteConfig.from_yaml(p).name for p in cfg.sites],
        "drops": [d.name for d in cfg.drops],
        "site_sources": [_source_entry(crawl.SiteConfig.from_yaml(p)) for p in cfg.sites],
        "drop_sources": [{"name": d.name, "license": d.license, "source": d.source} for d in cfg.drops],
        "aigen": aigen_summary(cfg),
        "models": [],
    }


def annotation_provenance(annotations: pa.Table) -> dict[str, Any]:
    """What produced a release's labels, for its manifest: the annotators, and for image-model labels the models,
    server (vLLM) versions, prompt versions and sampling parameters, the judge models and the judge's acceptance
    rates. Read from the labelled rows of the ``annotations`` table."""
    from . import vlm

    rows = [r for r in annotations.to_pylist() if r["status"] == "labelled"]

    def distinct(col: str) -> list:
        return sorted({r.get(col) for r in rows if r.get(col) is not None})

    out: dict[str, Any] = {"annotators": distinct("annotator"), "labelled_items": len(rows)}
    if any(r.get("model") for r in rows):
        out.update({"models": distinct("model"), "server_versions": distinct("server_version"),
                    "prompt_versions": distinct("prompt_version"),
                    "sampling": [json.loads(s) for s in distinct("sampling")]})
    if any(r.get("judge_model") for r in rows):
        out.update({"judge_models": distinct("judge_model"), "judge_server_versions": distinct("judge_server_version"),
                    "judge_prompt_versions": distinct("judge_prompt_version"),
                    "acceptance": vlm.acceptance_rates(rows)})
    return out


def stage_publish(cfg: PipelineConfig, rel: ReleaseTables, store: ObjectStore, annotators: list[str],
                  extra_provenance: dict[str, Any] | None = None) -> dict[str, Any]:
    extra = dict(extra_provenance or {})
    models = list(extra.pop("models", []))  # e.g. the garment detector
    neg = extra.get("negatives") or {}
    if neg.get("model"):  # the manifest names every model whose embeddings shaped the release
        models.append({"role": "negatives_mining", **neg["model"]})
    prov = provenance(cfg, annotators)
    prov["models"] = prov.get("models", []) + models
    return publish(rel, store, {**prov, **extra}, now=datetime.now(timezone.utc), card=cfg.card.model_dump(),
                   taxonomy=cfg.taxonomy)


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

    data_dir = Path(cfg.data_dir)
    ev = evaluate_configured(
        cfg.evaluate, store, version, data_dir=data_dir, cache_dir=data_dir / "embeddings",
        contamination_index=contamination_index,
        contamination_match=(cfg.dedup.hamming_threshold, cfg.dedup.max_color_diff, cfg.dedup.max_foreground_delta_e),
        model_ids=model_ids,
        cutoff=cutoff, registry=registry, legacy=legacy, progress=progress)
    if not report:
        return ev, None
    out = Path(report_dir) if report_dir else data_dir / "reports" / report_name(ev)
    return ev, write_report(ev, out, store if report_to_store else None)
