"""Asset checks on every stage: schema validity (against the asset's schema in ``assets/tables.py``), counts
within expected ranges, rejection, duplicate and contamination rates, annotation acceptance, a positive for every
query, no image in both the query and gallery files of a subset unless the configuration says it is intended,
published files equal to the checked candidate, valid scores.

Every check is partitioned like its asset and blocking: a check whose result has severity ``ERROR`` stops the
assets downstream of the checked one in the same run (so a bad value before ``release`` stops the publish step);
a ``WARN`` result is recorded and the run goes on. Thresholds and severities come from the ``checks`` section of
the configuration (``lookbench_pipeline.config.ChecksConfig``); the measures from
``lookbench_pipeline.quality``. The release candidate's own checks (``has_queries``, ``schema``,
``every_query_has_a_positive``, ``no_image_in_query_and_gallery``, ``unique_sample_ids``) run inside
``release_candidate`` (``assets/release.py``).
"""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from dagster import (AssetCheckExecutionContext, AssetCheckResult, AssetCheckSeverity, AssetIn,
                     AssetChecksDefinition, MetadataValue, asset_check)

from lookbench_pipeline import crawl_tables, quality
from lookbench_pipeline.config import ChecksConfig
from lookbench_pipeline.releases import Candidate

from .partitions import crawl_partitions, release_partitions
from .resources import LookbenchConfig
from .tables import CRAWL_ASSETS, WINDOW_ASSETS

ERROR, WARN = AssetCheckSeverity.ERROR, AssetCheckSeverity.WARN

# table assets, the schema each must have (assets/tables.py) and their partitions
TABLE_SCHEMAS: dict[str, tuple[pa.Schema, Any]] = {
    **{name: (schema, crawl_partitions) for name, schema in CRAWL_ASSETS.items()},
    **{name: (schema, release_partitions) for name, schema in WINDOW_ASSETS.items()},
}


def _md(v: Any) -> Any:
    if isinstance(v, (dict, list)):
        return MetadataValue.json(v)
    if isinstance(v, float):
        return round(v, 6)
    return v


def _result(context: AssetCheckExecutionContext, cfg: ChecksConfig, passed: bool, default: AssetCheckSeverity,
            **metadata: Any) -> AssetCheckResult:
    name = context.check_specs[0].name
    severity = {"error": ERROR, "warn": WARN}[cfg.severity[name]] if name in cfg.severity else default
    return AssetCheckResult(passed=bool(passed), severity=severity,
                            metadata={k: _md(v) for k, v in metadata.items() if v is not None})


def _schema_check(asset: str, schema: pa.Schema, partitions_def) -> AssetChecksDefinition:
    @asset_check(asset=asset, name="schema", partitions_def=partitions_def, blocking=True,
                 description=f"The table has exactly the columns and types of its schema ({asset}; assets/tables.py).")
    def _check(context: AssetCheckExecutionContext, lookbench: LookbenchConfig, table: pa.Table):
        problems = quality.schema_mismatches(table, schema)
        return _result(context, lookbench.load().checks, not problems, ERROR, rows=table.num_rows,
                       problems=problems)

    return _check


def _check(asset: str, name: str, description: str, partitions_def, *, additional: dict[str, str] | None = None,
           ) -> Callable[[Callable], AssetChecksDefinition]:
    """A blocking, partitioned check of ``asset`` named ``name``. The function takes ``context``, the
    ``lookbench`` resource, the asset's value (the one parameter not in ``additional``) and the ``additional``
    assets (parameter name -> asset name)."""
    ins = {k: AssetIn(v) for k, v in (additional or {}).items()} or None
    return asset_check(asset=asset, name=name, description=description, partitions_def=partitions_def,
                       blocking=True, additional_ins=ins)


# --- crawl (one site, one week) -----------------------------------------------------------------------------

@_check("weekly_products", "products_in_range", "A site's weekly crawl found a number of products within "
        "checks.products_per_crawl.", crawl_partitions)
def weekly_products_in_range(context: AssetCheckExecutionContext, lookbench: LookbenchConfig, value: pa.Table):
    cfg = lookbench.load().checks
    b = cfg.products_per_crawl
    return _result(context, cfg, b.holds(value.num_rows), ERROR, products=value.num_rows, min=b.min, max=b.max)


@_check("weekly_crawl_log", "page_rejection_rate", "Failed pages / pages fetched is at most "
        "checks.max_page_rejection_rate (a redirected URL is no page, a URL the site's max_pages cut was not "
        "fetched: counted in neither).", crawl_partitions)
def page_rejection_rate(context: AssetCheckExecutionContext, lookbench: LookbenchConfig, value: pa.Table):
    cfg = lookbench.load().checks
    rate, _, reasons = crawl_tables.page_rejection_rate(value)
    t = crawl_tables.page_tally(crawl_tables.log_counts(value))
    # pages, kept, redirected, rejected as the crawl's line says them: "pages <rows> (kept, redirected, rejected)"
    return _result(context, cfg, rate <= cfg.max_page_rejection_rate, WARN, rate=rate,
                   max=cfg.max_page_rejection_rate, failed=t["failed"], fetched=t["fetched"], pages=t["rows"],
                   kept=t["kept"], redirected=t["redirected"], rejected=t["rejected"],
                   not_fetched_max_pages=t["not_fetched"], failed_by_reason=reasons)


@_check("weekly_image_downloads", "download_failure_rate", "Image URLs not downloaded / image URLs is at most "
        "checks.max_download_failure_rate.", crawl_partitions)
def download_failure_rate(context: AssetCheckExecutionContext, lookbench: LookbenchConfig, value: pa.Table):
    cfg = lookbench.load().checks
    rows = value.select(["stored_path", "reason"]).to_pylist()
    failed = [r for r in rows if not r["stored_path"]]
    rate = quality.ratio(len(failed), len(rows))
    reasons: dict[str, int] = {}
    for r in failed:
        reasons[r["reason"] or ""] = reasons.get(r["reason"] or "", 0) + 1
    return _result(context, cfg, rate <= cfg.max_download_failure_rate, WARN, rate=rate, image_urls=len(rows),
                   max=cfg.max_download_failure_rate, failed_by_reason=reasons)


# --- the window's catalogue ---------------------------------------------------------------------------------

@_check("products", "products_in_range", "The window's catalogue has a number of products within "
        "checks.products_per_window.", release_partitions)
def products_in_range(context: AssetCheckExecutionContext, lookbench: LookbenchConfig, value: pa.Table):
    cfg = lookbench.load().checks
    b = cfg.products_per_window
    per_site: dict[str, int] = {}
    for s in value.column("site").to_pylist():
        per_site[s] = per_site.get(s, 0) + 1
    return _result(context, cfg, b.holds(value.num_rows), ERROR, products=value.num_rows, min=b.min, max=b.max,
                   per_site=per_site)


@_check("products", "every_site_crawled", "Every configured site has products in the window's catalogue.",
        release_partitions)
def every_site_crawled(context: AssetCheckExecutionContext, lookbench: LookbenchConfig, value: pa.Table):
    conf = lookbench.load()
    sites = [s.name for s in conf.site_configs()]
    present = set(value.column("site").to_pylist())
    missing = [s for s in sites if s not in present]
    return _result(context, conf.checks, not missing, WARN, configured=sites, without_products=missing)


@_check("products", "unique_product_ids", "No product id repeats in the window's catalogue.", release_partitions)
def unique_product_ids(context: AssetCheckExecutionContext, lookbench: LookbenchConfig, value: pa.Table):
    cfg = lookbench.load().checks
    dup = quality.duplicates(value, "product_id")
    return _result(context, cfg, not dup, ERROR, duplicated_ids=dup)


# --- images -------------------------------------------------------------------------------------------------

@_check("image_refs", "rejection_rate", "Rejected image references / references is at most "
        "checks.max_image_rejection_rate.", release_partitions)
def image_rejection_rate(context: AssetCheckExecutionContext, lookbench: LookbenchConfig, value: pa.Table):
    cfg = lookbench.load().checks
    rate, reasons = quality.status_rate(value)
    return _result(context, cfg, rate <= cfg.max_image_rejection_rate, ERROR, rate=rate, references=value.num_rows,
                   max=cfg.max_image_rejection_rate, rejected_by_reason=reasons)


@_check("image_refs", "outcomes_reconcile", "Every reference is accepted (with a sha256) or rejected (with a "
        "reason): in = accepted + rejected.", release_partitions)
def image_refs_reconcile(context: AssetCheckExecutionContext, lookbench: LookbenchConfig, value: pa.Table):
    cfg = lookbench.load().checks
    problems = quality.image_refs_problems(value)
    return _result(context, cfg, not problems, ERROR, problems=problems)


# --- dedup and contamination ----------------------------------------------------------------------------------

@_check("image_clusters", "near_duplicate_rate", "Near-duplicate images / distinct images is at most "
        "checks.max_near_duplicate_rate.", release_partitions)
def near_duplicate_rate(context: AssetCheckExecutionContext, lookbench: LookbenchConfig, value: pa.Table):
    cfg = lookbench.load().checks
    rate = quality.near_duplicate_rate(value)
    return _result(context, cfg, rate <= cfg.max_near_duplicate_rate, WARN, rate=rate, images=value.num_rows,
                   max=cfg.max_near_duplicate_rate)


@_check("image_clusters", "every_image_clustered", "Every distinct accepted image has exactly one cluster row.",
        release_partitions, additional={"images": "images"})
def every_image_clustered(context: AssetCheckExecutionContext, lookbench: LookbenchConfig, value: pa.Table,
                          images: pa.Table):
    cfg = lookbench.load().checks
    have = value.column("image_sha256").to_pylist()
    want = set(images.column("image_sha256").to_pylist())
    missing = sorted(want - set(have))[:20]
    return _result(context, cfg, not missing and len(have) == len(set(have)) == len(want), ERROR,
                   images=len(want), cluster_rows=len(have), missing=missing)


@_check("contamination", "contamination_rate", "New images matching a legacy benchmark or an earlier release / "
        "new images is at most checks.max_contamination_rate (matching queries are rejected either way; a high "
        "rate means a site republishes benchmark images or the index is wrong).", release_partitions,
        additional={"images": "images"})
def contamination_rate(context: AssetCheckExecutionContext, lookbench: LookbenchConfig, value: pa.Table,
                       images: pa.Table):
    cfg = lookbench.load().checks
    rate, per_source = quality.contamination_rate(images, value)
    return _result(context, cfg, rate <= cfg.max_contamination_rate, ERROR, rate=rate, images=images.num_rows,
                   max=cfg.max_contamination_rate, contaminated_per_source=per_source)


# --- annotation -----------------------------------------------------------------------------------------------

@_check("annotations", "acceptance_rate", "Labelled items / items the annotator could judge is at least "
        "checks.min_annotation_acceptance_rate (the annotator's, or its judge's, acceptance; items rejected for a "
        "reason in checks.annotation_not_attempted, e.g. no_text, are counted apart).", release_partitions)
def annotation_acceptance_rate(context: AssetCheckExecutionContext, lookbench: LookbenchConfig, value: pa.Table):
    cfg = lookbench.load().checks
    rows = value.select(["status", "reason", "annotator"]).to_pylist()
    skip = set(cfg.annotation_not_attempted)
    not_attempted = sum(1 for r in rows if r["status"] != "labelled" and r["reason"] in skip)
    attempted = len(rows) - not_attempted
    labelled = sum(1 for r in rows if r["status"] == "labelled")
    rate = quality.ratio(labelled, attempted)
    _, reasons = quality.status_rate(value)
    per_annotator: dict[str, int] = {}
    for r in rows:
        per_annotator[r["annotator"] or ""] = per_annotator.get(r["annotator"] or "", 0) + 1
    return _result(context, cfg, attempted > 0 and rate >= cfg.min_annotation_acceptance_rate, ERROR, rate=rate,
                   items=len(rows), attempted=attempted, not_attempted=not_attempted,
                   min=cfg.min_annotation_acceptance_rate, rejected_by_reason=reasons, per_annotator=per_annotator)


# --- detect -------------------------------------------------------------------------------------------------

@_check("detector", "record_matches_detections", "The detector record the manifest publishes is that of the "
        "detector that ran: its weights' sha256, its classes each mapped to taxonomy categories (and no other), "
        "every detection of one of its classes with that mapping's categories; no detections without a detector.",
        release_partitions, additional={"detections": "detections"})
def detector_record(context: AssetCheckExecutionContext, lookbench: LookbenchConfig, value: dict,
                    detections: pa.Table):
    from lookbench_pipeline.taxonomy import Taxonomy

    conf = lookbench.load()
    problems = quality.detector_problems(value, detections, set(Taxonomy.load(conf.taxonomy).categories))
    return _result(context, conf.checks, not problems, ERROR, problems=problems, detections=detections.num_rows,
                   weights_sha256=value.get("weights_sha256"), classes=value.get("classes"))


# --- AI-generated subsets -------------------------------------------------------------------------------------

@_check("generated_images", "generation_failure_rate", "Failed / requests a generator was asked to answer "
        "(generated + failed; pending and skipped are not counted) is at most checks.max_generation_failure_rate: "
        "a generator that is down (connection_error…) stops the release, which would otherwise be published, "
        "immutably, without its AI-generated subsets.", release_partitions)
def generation_failure_rate(context: AssetCheckExecutionContext, lookbench: LookbenchConfig, value: pa.Table):
    cfg = lookbench.load().checks
    rate, asked, reasons = quality.generation_failure_rate(value)
    statuses: dict[str, int] = {}
    for s in value.column("status").to_pylist():
        statuses[s or ""] = statuses.get(s or "", 0) + 1
    return _result(context, cfg, rate <= cfg.max_generation_failure_rate, ERROR, rate=rate, asked=asked,
                   max=cfg.max_generation_failure_rate, failed_by_reason=reasons,
                   detail_by_reason=quality.generation_failure_details(value) or None, rows_by_status=statuses)


# --- release ------------------------------------------------------------------------------------------------

@_check("release_candidate", "counts_in_range", "Each subset with a query file has query and gallery row counts "
        "within checks.queries_per_subset / checks.gallery_per_subset (gallery-only files such as the noise "
        "gallery are reported, not bounded), and rejected / candidates is at most "
        "checks.max_candidate_rejection_rate.", release_partitions)
def candidate_counts(context: AssetCheckExecutionContext, lookbench: LookbenchConfig, value: dict):
    cfg = lookbench.load().checks
    cand = Candidate.from_dict(value)
    rows = quality.per_subset_rows(cand.files)
    with_queries = {s: r for s, r in rows.items() if f"{s}/query.parquet" in cand.files}
    bad = {s: r for s, r in with_queries.items()
           if not (cfg.queries_per_subset.holds(r["query"]) and cfg.gallery_per_subset.holds(r["gallery"]))}
    c = cand.counts
    rate = quality.ratio(c["rejected"], c["candidates"])
    return _result(context, cfg, bool(with_queries) and not bad and rate <= cfg.max_candidate_rejection_rate, ERROR,
                   rows_per_subset=rows, out_of_range=bad, rejection_rate=rate,
                   max_rejection_rate=cfg.max_candidate_rejection_rate,
                   queries=cfg.queries_per_subset.model_dump(), gallery=cfg.gallery_per_subset.model_dump())


@_check("release_candidate", "requested_subsets_have_queries", "Every AI-generated subset a generator was asked "
        "for in this window (generated_checks rows other than generation_pending / generation_skipped) has queries "
        "in the candidate: a subset the configuration asks for does not silently go missing from a release.",
        release_partitions, additional={"generated_checks": "generated_checks"})
def requested_subsets_have_queries(context: AssetCheckExecutionContext, lookbench: LookbenchConfig, value: dict,
                                   generated_checks: pa.Table):
    cfg = lookbench.load().checks
    rows = quality.per_subset_rows(Candidate.from_dict(value).files)
    empty = quality.requested_subsets_without_queries(generated_checks,
                                                      {s: r["query"] for s, r in rows.items()})
    return _result(context, cfg, not empty, ERROR, subsets_without_queries=empty,
                   queries_per_subset={s: r["query"] for s, r in rows.items()})


@_check("release_candidate", "no_contaminated_query", "No query image matches the contamination index (legacy "
        "benchmarks, earlier releases).", release_partitions, additional={"contamination": "contamination"})
def no_contaminated_query(context: AssetCheckExecutionContext, lookbench: LookbenchConfig, value: dict,
                          contamination: pa.Table):
    cfg = lookbench.load().checks
    leaked = set(contamination.column("image_sha256").to_pylist())
    cand = Candidate.from_dict(value)
    found: dict[str, int] = {}
    for key in cand.files:
        if key.endswith("/query.parquet"):
            shas = pq.read_table(Path(cand.folder) / key, columns=["image_sha256"]).column(0).to_pylist()
            n = sum(1 for s in shas if s in leaked)
            if n:
                found[key.split("/")[0]] = n
    return _result(context, cfg, not found, ERROR, contaminated_queries=found, index_matches=len(leaked))


@_check("release", "published_files_match_candidate", "The published release has the checked candidate's files "
        "with the same row counts (publishing re-encodes the candidate's tables and verifies every file it wrote "
        "against the manifest's sha256).", release_partitions, additional={"candidate": "release_candidate"})
def published_files_match(context: AssetCheckExecutionContext, lookbench: LookbenchConfig, value: dict,
                          candidate: dict):
    cfg = lookbench.load().checks
    pub = {k: v["rows"] for k, v in value["files"].items()}
    checked = Candidate.from_dict(candidate)
    cand = {k: v["rows"] for k, v in checked.files.items()}
    diff = sorted(k for k in pub.keys() | cand.keys() if pub.get(k) != cand.get(k))
    return _result(context, cfg, not diff and value.get("version") == checked.version, ERROR,
                   version=value.get("version"), files=len(pub), differing=diff,
                   sha256={k: v["sha256"][:16] for k, v in value["files"].items()})


# --- evaluation -----------------------------------------------------------------------------------------------

@_check("evaluation", "scores_valid", "Every score is in [0, 1] and inside its bootstrap interval, and every "
        "configured model was scored.", release_partitions)
def scores_valid(context: AssetCheckExecutionContext, lookbench: LookbenchConfig, value: pa.Table):
    cfg = lookbench.load().checks
    problems = quality.score_problems(value)
    scored = sorted(set(value.column("model").to_pylist()))
    return _result(context, cfg, not problems and bool(scored), ERROR, problems=problems, models_scored=scored,
                   rows=value.num_rows)


SCHEMA_CHECKS = [_schema_check(asset, schema, pdef) for asset, (schema, pdef) in TABLE_SCHEMAS.items()]

ALL_CHECKS = [*SCHEMA_CHECKS, weekly_products_in_range, page_rejection_rate, download_failure_rate,
              products_in_range, every_site_crawled, unique_product_ids, image_rejection_rate, image_refs_reconcile,
              near_duplicate_rate, every_image_clustered, contamination_rate, annotation_acceptance_rate,
              detector_record, generation_failure_rate, candidate_counts, requested_subsets_have_queries,
              no_contaminated_query, published_files_match, scores_valid]
