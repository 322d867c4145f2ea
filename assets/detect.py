"""Stage 4b, detect: garments found in every street-look image, cropped, and matched to the products the look
links (ultralytics YOLO, offline). The ``detector`` asset records the weights used (checksum, classes, measured
mAP), which the release manifest publishes."""


from pathlib import Path

import pyarrow as pa
from dagster import AssetExecutionContext, AssetIn, AssetOut, MetadataValue, Output, multi_asset

from lookbench_pipeline.config import PipelineConfig
from lookbench_pipeline.pipeline import stage_detect
from lookbench_pipeline.store import ObjectStore, derived_key

from .common import detections_headline, observed, summary, table_metadata
from .partitions import by_window, release_partitions, window_and_version
from .resources import LookbenchConfig
from .reuse import reuse_unchanged


def detector_files(cfg: PipelineConfig) -> list[Path]:
    """The files that decide which detector runs: a local weights file, the weights and reports kept in the
    detector cache (the demo detector, trained on the first run), the file a Hugging Face id resolves to in the
    local cache, and the local weight caches' refs (a newer snapshot of the model)."""
    from lookbench_pipeline.evaluate import weight_caches

    d, cache = cfg.detect, cfg.detector_cache_dir
    files = [Path(p).resolve() for p in (d.weights_file, d.weights) if p and p not in ("demo", "person-regions")]
    if d.weights not in ("demo", "person-regions"):
        from lookbench_pipeline.detect import DetectorError, resolve_weights

        try:
            files.append(resolve_weights(d.weights, weights_file=d.weights_file, revision=d.revision, offline=True))
        except DetectorError:  # not here yet: the stage fetches it (or fails) and the record then names it
            pass
    return (files + sorted(cache.glob("*/*.pt")) + sorted(cache.glob("*/*.onnx")) + sorted(cache.glob("*/report.json"))
            + weight_caches())


def crops_in_store(cfg: PipelineConfig, store: ObjectStore, values: dict, metadata: dict,
                   table: str = "detections") -> str | None:
    """None when every crop of the stored detections is in the object store, else which is missing."""
    for sha in sorted({s for s in values[table].column("crop_sha256").to_pylist() if s}):
        if not store.exists(derived_key(sha)):
            return f"crop {derived_key(sha)} is no longer in the object store"
    return None


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
@reuse_unchanged(outputs=("detections", "detector"), reads=detector_files, verify=crops_in_store)
def detect_garments(context: AssetExecutionContext, lookbench: LookbenchConfig, looks: pa.Table,
                    drop_items: pa.Table, image_refs: pa.Table, annotations: pa.Table):
    window, _ = window_and_version(context.partition_key)
    res = stage_detect(lookbench.load(), looks, drop_items, image_refs, annotations, lookbench.store(), window)
    context.log.info(summary("detections", detections_headline(res.counts), res.counts))
    if res.counts.get("detector_trained_now"):
        context.log.warning(f"no garment-trained weights configured: trained the demo detector "
                            f"(mAP50 {res.detector.get('map50', 0):.3f} on held-out looks, cached)")
    yield Output(res.detections, "detections", metadata=table_metadata(
        res.detections, res.counts, ["owner_type", "model_class", "score", "status", "reason", "item_id"]))
    yield Output(res.detector, "detector", metadata={k: (MetadataValue.json(v) if isinstance(v, (dict, list)) else v)
                                                     for k, v in res.detector.items() if v is not None})
