"""Stage 4b, negatives: soft-negative distractors mined from Fashion200K for every query item of the window;
the release publishes them as its ``noise`` gallery."""


import pyarrow as pa
from dagster import AssetExecutionContext, AssetIn, Failure, MetadataValue, Output, asset

from lookbench_pipeline.embed import EmbedderUnavailable
from lookbench_pipeline.pipeline import stage_negatives

from .common import observed, summary, table_metadata
from .partitions import by_window, release_partitions, window_and_version
from .resources import LookbenchConfig


@asset(partitions_def=release_partitions, group_name="negatives", compute_kind="numpy",
       ins={"products": AssetIn(partition_mapping=by_window), "drop_items": AssetIn(), "image_refs": AssetIn(),
            "images": AssetIn(), "annotations": AssetIn()},
       description="Distractors that look like a query item but are not it (cosine similarity in the configured "
                   "band, not the same product), with category/attribute agreement (soft / ambiguous / easy).")
@observed
def negatives(context: AssetExecutionContext, lookbench: LookbenchConfig, products: pa.Table, drop_items: pa.Table,
              image_refs: pa.Table, images: pa.Table, annotations: pa.Table) -> Output[pa.Table]:
    window, _ = window_and_version(context.partition_key)
    try:
        table, counts = stage_negatives(lookbench.load(), products, drop_items, image_refs, images, annotations,
                                        lookbench.store(), window)
    except EmbedderUnavailable as exc:
        raise Failure(description=f"negatives: the mining model cannot run here: {exc}") from exc
    g = counts.get
    context.log.info(summary("negatives", f"pool {g('pool.in', 0)} (embedded {g('pool.embedded', 0)}, rejected "
                             f"{g('pool.rejected', 0)}); distractors selected {g('selected', 0)} (kept "
                             f"{g('kept', 0)}, dropped {g('dropped', 0)}); pairs {g('pairs', 0)} for "
                             f"{g('query_items', 0)} query items" if g("enabled", True) else "disabled", counts))
    md = table_metadata(table, {k: v for k, v in counts.items() if k != "model"},
                        ["query_item_id", "distractor_item_id", "similarity", "kind"])
    if counts.get("model"):
        md["model"] = MetadataValue.json(counts["model"])
    return Output(table, metadata=md)
