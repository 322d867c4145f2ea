"""Stage 5, release: query and gallery Parquet files per subset and a manifest, published to the object store."""


import pyarrow as pa

from dagster import (AssetCheckResult, AssetCheckSeverity, AssetCheckSpec, AssetExecutionContext, AssetIn, Failure,
                     MetadataValue, Output, asset)

from lookbench_pipeline.pipeline import candidate_no_queries_why, stage_candidate, stage_publish
from lookbench_pipeline.releases import Candidate, ReleaseExistsError, check_candidate, read_candidate
from lookbench_pipeline.releases.publish import EmptyReleaseError

from .common import md_table, observed, rates, summary
from .partitions import by_window, release_partitions, window_and_version
from .resources import LookbenchConfig


CHECKS = {
    "has_queries": "At least one subset has a query row.",
    "schema": "Every file has exactly the release schema.",
    "every_query_has_a_positive": "Each query's item is in its subset's gallery.",
    "no_image_in_query_and_gallery": "No image is both a query and a gallery item of a subset.",
    "unique_sample_ids": "No sample id repeats within a file.",
}


def release_headline(c: dict) -> str:
    """A release's counts: candidates -> query rows, distinct gallery images, rejected (by reason in the log)."""
    return (f"candidates {c.get('candidates', 0)} -> queries {c.get('query_rows', 0)}, gallery "
            f"{c.get('gallery_rows_distinct', 0)}, rejected {c.get('rejected', 0)}")


@asset(partitions_def=release_partitions, group_name="release", compute_kind="parquet",
       ins={"products": AssetIn(partition_mapping=by_window), "looks": AssetIn(partition_mapping=by_window),
            "drop_items": AssetIn(), "image_refs": AssetIn(), "images": AssetIn(), "image_clusters": AssetIn(),
            "annotations": AssetIn(), "contamination": AssetIn(), "negatives": AssetIn(),
            "generated_checks": AssetIn(), "detections": AssetIn(), "detector": AssetIn()},
       check_specs=[AssetCheckSpec(name, asset="release_candidate", blocking=True, description=d)
                    for name, d in CHECKS.items()],
       description="The release built but not yet published (files under data/candidates/<version>), for the "
                   "blocking checks to inspect.")
@observed
def release_candidate(context: AssetExecutionContext, lookbench: LookbenchConfig, products: pa.Table,
                      looks: pa.Table, drop_items: pa.Table, image_refs: pa.Table, images: pa.Table,
                      image_clusters: pa.Table, annotations: pa.Table, contamination: pa.Table,
                      negatives: pa.Table, generated_checks: pa.Table, detections: pa.Table,
                      detector: dict):
    cfg = lookbench.load()
    window, version = window_and_version(context.partition_key)
    tables = {"products": products, "looks": looks, "drop_items": drop_items, "image_refs": image_refs,
              "images": images, "clusters": image_clusters, "annotations": annotations,
              "contamination": contamination, "noise": negatives,
              "generated_checks": generated_checks, "detections": detections}
    cand = stage_candidate(cfg, version, window, tables, lookbench.store(), detector)
    c = cand.counts
    context.log.info(summary(version, release_headline(c), c))
    yield Output(cand.to_dict(), metadata={
        "version": version, "query_rows": c["query_rows"],
        "gallery_rows_distinct": c["gallery_rows_distinct"], "rejected": c["rejected"],
        "candidates": c["candidates"], **rates(c),
        "rejected_by_reason": MetadataValue.json(c["rejected_by_reason"]),
        "files": MetadataValue.json(cand.files),
        "preview": md_table([{"file": k, **v} for k, v in sorted(cand.files.items())], ["file", "rows", "sha256"])})
    # Blocking checks: a failed one stops `release` (the publish step) in the same run.
    for name, (passed, details) in check_candidate(
            cand.tables, overlap_allowed=cfg.checks.query_gallery_overlap_allowed).items():
        if name == "has_queries" and not passed:  # why: no looks found, none drop-supplied, all rejected...
            details = {**details, "why": candidate_no_queries_why(cfg, cand, tables)}
        yield AssetCheckResult(check_name=name, passed=passed, severity=AssetCheckSeverity.ERROR,
                               description=details.get("why") if not passed else None,
                               metadata={k: MetadataValue.json(v) if isinstance(v, (dict, list)) else v
                                         for k, v in details.items()})


@asset(partitions_def=release_partitions, group_name="release", compute_kind="parquet",
       description="The published release: its manifest (version, window, files with sha256, counts, provenance). "
                   "Runs only when the release candidate's blocking checks pass.")
@observed
def release(context: AssetExecutionContext, lookbench: LookbenchConfig, release_candidate: dict) -> Output[dict]:
    cfg = lookbench.load()
    store = lookbench.store()
    cand = Candidate.from_dict(release_candidate)
    rel = read_candidate(cand)
    version = rel.version
    try:
        manifest = stage_publish(cfg, rel, store, cand.annotators, cand.provenance() or None)
    except (ReleaseExistsError, EmptyReleaseError) as exc:
        raise Failure(description=str(exc)) from exc
    state = "unchanged, already published" if manifest.get("already_published") else "published"
    context.log.info(summary(f"{version} {state}", release_headline(rel.counts), rel.counts)
                     + f"\nat {store.url}/releases/{version}")
    return Output(manifest, metadata={
        "version": version, "location": f"{store.url}/releases/{version}", "state": state,
        "query_rows": rel.counts["query_rows"], "gallery_rows_distinct": rel.counts["gallery_rows_distinct"],
        "rejected": rel.counts["rejected"], "candidates": rel.counts["candidates"],
        "rejected_by_reason": MetadataValue.json(rel.counts["rejected_by_reason"]),
        "files": MetadataValue.json(manifest["files"]), **rates(rel.counts),
        "preview": md_table([{"file": k, **v} for k, v in sorted(manifest["files"].items())],
                            ["file", "rows", "bytes", "sha256"]),
    })
