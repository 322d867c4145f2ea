"""Stage 4b, detect: garments found in every street-look image, cropped, and matched to the products the look
links (ultralytics YOLO, offline). The ``detector`` asset records the weights used (checksum, classes, measured
mAP), which the release manifest publishes."""


import pyarrow as pa
from dagster import AssetExecutionContext, AssetIn, AssetOut, MetadataValue, Output, multi_asset

from lookbench_pipeline.pipeline import stage_detect

from .common import observed, table_metadata
from .partitions import by_window, release_partitions, window_and_version
from .resources import LookbenchConfig


@multi_asset(
    outs={
        "detections": AssetOut(description="Every box the garment detector gave on a street-look image: kept (with "
                                           "its crop, item index and matched product, or 'unlabelled') or dropped "
                                           "with a reason (schemas.DETECTIONS)."),
        "detector": AssetOut(description="The detector that produced them: weights and their sha256, classes and "
                                         "their mapping to taxonomy categories, measured mAP when trained here."),
    },
    ins={"looks": AssetIn(partition_mapping=by_window), "drop_items": AssetIn(), "image_refs": AssetIn(),
         "annotations": AssetIn()},
    partitions_def=release_partitions,
    group_name="detect",
    compute_kind="ultralytics",
)
@observed
def detect_garments(context: AssetExecutionContext, lookbench: LookbenchConfig, looks: pa.Table,
                    drop_items: pa.Table, image_refs: pa.Table, annotations: pa.Table):
    window, _ = window_and_version(context.partition_key)
    res = stage_detect(lookbench.load(), looks, drop_items, image_refs, annotations, lookbench.store(), window)
    context.log.info(f"detections: {res.counts}")
    if res.counts.get("detector_trained_now"):
        context.log.warning(f"no garment-trained weights configured: trained the demo detector "
                            f"(mAP50 {res.detector.get('map50', 0):.3f} on held-out looks, cached)")
    yield Output(res.detections, "detections", metadata=table_metadata(
        res.detections, res.counts, ["owner_type", "model_class", "score", "status", "reason", "item_id"]))
    yield Output(res.detector, "detector", metadata={k: (MetadataValue.json(v) if isinstance(v, (dict, list)) else v)
                                                     for k, v in res.detector.items() if v is not None})
