"""Stage 3, dedup: exact (sha256) and near (pHash Hamming distance) duplicate clusters."""


import pyarrow as pa
from dagster import AssetExecutionContext, AssetOut, MetadataValue, Output, asset, multi_asset

from lookbench_pipeline.pipeline import stage_contamination, stage_dedup

from .common import observed, summary, table_metadata
from .partitions import release_partitions, window_and_version
from .resources import LookbenchConfig


@asset(partitions_def=release_partitions, group_name="dedup", compute_kind="imagehash",
       description="Every accepted image mapped to its duplicate cluster and the cluster's representative.")
@observed
def image_clusters(context: AssetExecutionContext, lookbench: LookbenchConfig, image_refs: pa.Table,
                   images: pa.Table) -> Output[pa.Table]:
    table, counts = stage_dedup(lookbench.load(), image_refs, images)
    g = counts.get
    context.log.info(summary("dedup", f"images {g('distinct_images', 0)} ({g('representatives', 0)} kept, "
                             f"{g('near_duplicate_images', 0)} near duplicates); exact duplicate refs "
                             f"{g('exact_duplicate_refs', 0)}", counts))
    return Output(table, metadata=table_metadata(table, counts, ["image_sha256", "cluster_id", "duplicate_kind"]))


@multi_asset(
    outs={
        "contamination_index": AssetOut(description="Hashes of legacy benchmarks and earlier releases."),
        "contamination": AssetOut(description="New images that match the index, with the source they leak from."),
    },
    partitions_def=release_partitions,
    group_name="dedup",
    compute_kind="imagehash",
)
@observed
def contamination_check(context: AssetExecutionContext, lookbench: LookbenchConfig, images: pa.Table):
    window, _ = window_and_version(context.partition_key)
    index, found, counts = stage_contamination(lookbench.load(), images, lookbench.store(), window)
    g = counts.get
    unreadable = sum(v for k, v in counts.items() if k.endswith(".unreadable") and isinstance(v, int))
    context.log.info(summary("contamination", f"images {g('images', 0)}, contaminated {g('contaminated_images', 0)}; "
                             f"index {g('index_size', 0)} (unreadable files {unreadable})", counts))
    yield Output(index, "contamination_index", metadata=table_metadata(index, None, ["source", "path", "phash"]))
    # images, contaminated_images and their contamination_rate (common.RATES), as docs/ARCHITECTURE.md lists
    yield Output(found, "contamination", metadata={
        **table_metadata(found, {"images": g("images", 0), "contaminated_images": g("contaminated_images", 0)},
                         ["source", "matched_path", "hamming", "kind"]),
        "rate_per_source": MetadataValue.json(counts["rate"]), "index_size": counts["index_size"]})
