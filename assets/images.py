"""Stage 2, images: image drops listed, and every image reference taken in (stored, decoded, normalised, hashed)."""


from datetime import datetime, timezone

import pyarrow as pa
from dagster import AssetExecutionContext, AssetIn, AssetOut, Output, asset, multi_asset

from lookbench_pipeline.pipeline import stage_drops, stage_images

from .common import table_metadata, observed
from .partitions import by_window, release_partitions
from .resources import LookbenchConfig


@asset(partitions_def=release_partitions, group_name="images", compute_kind="python",
       description="Images that enter from image-drop folders (real photo sets, AI-generated images).")
@observed
def drop_items(context: AssetExecutionContext, lookbench: LookbenchConfig) -> Output[pa.Table]:
    table = stage_drops(lookbench.load(), datetime.now(timezone.utc), lookbench.store())
    return Output(table, metadata=table_metadata(table, None, ["drop", "path", "subset", "role", "item_id"]))


@multi_asset(
    outs={
        "image_refs": AssetOut(description="Every image reference and its intake outcome (accepted / rejected + reason)."),
        "images": AssetOut(description="One row per distinct accepted image: size, format, flags, pHash."),
    },
    ins={"products": AssetIn(partition_mapping=by_window), "looks": AssetIn(partition_mapping=by_window),
         "drop_items": AssetIn(), "image_downloads": AssetIn(partition_mapping=by_window)},
    partitions_def=release_partitions,
    group_name="images",
    compute_kind="pillow",
)
@observed
def image_intake(context: AssetExecutionContext, lookbench: LookbenchConfig, products: pa.Table, looks: pa.Table,
                 drop_items: pa.Table, image_downloads: pa.Table):
    cfg = lookbench.load()
    refs, images, counts = stage_images(cfg, products, looks, drop_items, image_downloads, lookbench.store())
    context.log.info(f"image intake: {counts}")
    yield Output(refs, "image_refs", metadata=table_metadata(refs, counts, ["owner_type", "source", "status", "reason"]))
    yield Output(images, "images", metadata=table_metadata(images, None, ["image_sha256", "format", "width", "height", "flags"]))
