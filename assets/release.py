"""Stage 5, release: query and gallery Parquet files per subset and a manifest, published to the object store."""


import pyarrow as pa
from dagster import AssetExecutionContext, AssetIn, Failure, MetadataValue, Output, asset

from lookbench_pipeline.pipeline import stage_publish, stage_release
from lookbench_pipeline.release import EmptyReleaseError, ReleaseExistsError

from .partitions import by_window, release_partitions, window_and_version
from .resources import LookbenchConfig


@asset(partitions_def=release_partitions, group_name="release", compute_kind="parquet",
       ins={"products": AssetIn(partition_mapping=by_window), "looks": AssetIn(partition_mapping=by_window),
            "drop_items": AssetIn(), "image_refs": AssetIn(), "images": AssetIn(), "image_clusters": AssetIn(),
            "annotations": AssetIn(), "contamination": AssetIn()},
       description="The published release: its manifest (version, window, files with sha256, counts, provenance).")
def release(context: AssetExecutionContext, lookbench: LookbenchConfig, products: pa.Table, looks: pa.Table,
            drop_items: pa.Table, image_refs: pa.Table, images: pa.Table, image_clusters: pa.Table,
            annotations: pa.Table, contamination: pa.Table) -> Output[dict]:
    cfg = lookbench.load()
    store = lookbench.store()
    window, version = window_and_version(context.partition_key)
    rel = stage_release(cfg, version, window, {
        "products": products, "looks": looks, "drop_items": drop_items, "image_refs": image_refs,
        "images": images, "clusters": image_clusters, "annotations": annotations,
        "contamination": contamination}, store)
    annotators = sorted({a for a in annotations.column("annotator").to_pylist() if a})
    try:
        manifest = stage_publish(cfg, rel, store, annotators)
    except (ReleaseExistsError, EmptyReleaseError) as exc:
        raise Failure(description=str(exc)) from exc
    state = "unchanged, already published" if manifest.get("already_published") else "published"
    context.log.info(f"release {version} {state} at {store.url}/releases/{version}: {rel.counts}")
    return Output(manifest, metadata={
        "version": version, "location": f"{store.url}/releases/{version}", "state": state,
        "query_rows": rel.counts["query_rows"], "gallery_rows_distinct": rel.counts["gallery_rows_distinct"],
        "rejected": rel.counts["rejected"], "candidates": rel.counts["candidates"],
        "rejected_by_reason": MetadataValue.json(rel.counts["rejected_by_reason"]),
        "files": MetadataValue.json(manifest["files"]),
    })
