"""Stage 4, attributes: category and attribute labels for every product and drop item."""


import pyarrow as pa
from dagster import AssetExecutionContext, AssetIn, Output, asset

from lookbench_pipeline.pipeline import stage_attributes

from .common import table_metadata
from .partitions import by_window, release_partitions
from .resources import LookbenchConfig


@asset(partitions_def=release_partitions, group_name="attributes", compute_kind="python",
       ins={"products": AssetIn(partition_mapping=by_window), "drop_items": AssetIn()},
       description="Category and attributes per item, with the annotator that produced them.")
def annotations(context: AssetExecutionContext, lookbench: LookbenchConfig, products: pa.Table,
                drop_items: pa.Table) -> Output[pa.Table]:
    table, counts = stage_attributes(lookbench.load(), products, drop_items)
    context.log.info(f"annotations: {counts}")
    return Output(table, metadata=table_metadata(table, counts, ["item_id", "status", "reason", "category"]))
