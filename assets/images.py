"""Stage 2, images: image drops listed, and every image reference taken in (stored, decoded, normalised, hashed)."""


from datetime import datetime, timezone

import pyarrow as pa
from dagster import AssetExecutionContext, AssetIn, AssetOut, Output, asset, multi_asset

from lookbench_pipeline.pipeline import stage_drops, stage_images

from .common import observed, reasons, summary, table_metadata
from .partitions import by_window, release_partitions
from .resources import LookbenchConfig


@asset(partitions_def=release_partitions, group_name="images", compute_kind="python",
       description="Images that enter from image-drop folders (real photo sets, AI-generated images).")
@observed
def drop_items(context: AssetExecutionContext, lookbench: LookbenchConfig) -> Output[pa.Table]:
    cfg = lookbench.load()
    table = stage_drops(cfg, datetime.now(timezone.utc), lookbench.store())
    context.log.info(drops_summary(table, [d.name for d in cfg.drops]))
    return Output(table, metadata=table_metadata(table, None, ["drop", "path", "subset", "role", "item_id"]))


def drops_summary(table: pa.Table, drops: list[str]) -> str:
    """The drop listing's counts: every file of every drop is listed (none skipped: intake takes each in or rejects
    it with a reason), per drop and per ``subset:role``."""
    rows = table.select(["drop", "subset", "role"]).to_pylist()
    per_drop = {d: sum(1 for r in rows if r["drop"] == d) for d in drops}
    per_role: dict[str, int] = {}
    for r in rows:
        per_role[f"{r['subset']}:{r['role']}"] = per_role.get(f"{r['subset']}:{r['role']}", 0) + 1
    if not drops:
        return summary("drop items", "files 0 (no image drop configured)")
    return summary("drop items", f"files {len(rows)} in {len(drops)} drops ("
                   + ", ".join(f"{d} {n}" for d, n in per_drop.items()) + "), listed "
                   f"{len(rows)}, skipped 0; " + ", ".join(f"{k} {v}" for k, v in sorted(per_role.items())),
                   {"files": len(rows), "per_drop": per_drop, "per_subset_role": per_role})


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
    context.log.info(intake_summary("image intake", counts))
    yield Output(refs, "image_refs", metadata=table_metadata(refs, counts, ["owner_type", "source", "status", "reason"]))
    yield Output(images, "images", metadata=table_metadata(images, None, ["image_sha256", "format", "width", "height", "flags"]))


def intake_summary(title: str, counts: dict) -> str:
    """An image intake's counts: references in = accepted + rejected (by reason), the distinct images kept."""
    return summary(title, f"in {counts['in']}, accepted {counts['accepted']}, rejected {counts['rejected']}"
                   f"{reasons(counts)}; distinct images {counts['distinct_images']}", counts)
