"""Stage 3, dedup: exact (sha256) and near (pHash Hamming distance) duplicate clusters."""


import pyarrow as pa
from dagster import AssetExecutionContext, Output, asset

from lookbench_pipeline.pipeline import stage_dedup

from .common import table_metadata
from .partitions import release_partitions
from .resources import LookbenchConfig


@asset(partitions_def=release_partitions, group_name="dedup", compute_kind="imagehash",
       description="Every accepted image mapped to its duplicate cluster and the cluster's representative.")
def image_clusters(context: AssetExecutionContext, lookbench: LookbenchConfig, image_refs: pa.Table,
                   images: pa.Table) -> Output[pa.Table]:
    table, counts = stage_dedup(lookbench.load(), image_refs, images)
    context.log.info(f"dedup: {counts}")
    return Output(table, metadata=table_metadata(table, counts, ["image_sha256", "cluster_id", "duplicate_kind"]))
