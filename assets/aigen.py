"""The AI-generated subsets (AIGen-Studio, AIGen-StreetLook): requests -> generated images -> the same image
intake -> dedup, contamination and reference checks -> the release."""


from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
from dagster import AssetExecutionContext, AssetIn, AssetOut, Output, asset, multi_asset

from lookbench_pipeline.pipeline import (stage_aigen_check, stage_aigen_detect, stage_aigen_generate,
                                         stage_aigen_intake, stage_aigen_requests)

from lookbench_pipeline.config import PipelineConfig
from lookbench_pipeline.store import ObjectStore

from .common import detections_headline, observed, reasons, summary, table_metadata
from .images import intake_summary
from .detect import crops_in_store, detector_files
from .partitions import by_window, release_partitions, window_and_version
from .resources import LookbenchConfig
from .reuse import reuse_unchanged


def job_folders(cfg: PipelineConfig) -> list:
    """The job-file backend's drop folder: its results are read from there in place (the job folder is written by
    the stage, not read)."""
    if cfg.aigen.backend != "job_file":
        return []
    return [cfg.aigen.drop_dir or cfg.layout.aigen_drop]


def results_in_place(cfg: PipelineConfig, store: ObjectStore, values: dict, metadata: dict) -> str | None:
    """None when every generated image of the stored table still has its result record and the recorded sha256
    (``aigen.ResultCache``), else which does not: computing again restores it from the store. Nor is a table that
    fails the ``generation_failure_rate`` check (more than ``checks.max_generation_failure_rate`` of the requests
    sent failed: the generator was down) reused: its failed requests are sent again, since the generator may be
    back (the generated ones come from their records); otherwise the check would fail on every run until --force.
    A few failures under the bound (the demo's scripted endpoint fails some on purpose) keep the table reused."""
    from lookbench_pipeline import quality
    from lookbench_pipeline.aigen import ResultCache

    cache = ResultCache(cfg.layout.aigen_results, images=cfg.layout.aigen_images)
    t = values["generated_images"]
    if "status" in t.column_names:
        rate, asked, _ = quality.generation_failure_rate(t)
        if rate > cfg.checks.max_generation_failure_rate:
            return (f"{round(rate * asked)} of {asked} requests failed when it was computed (over "
                    f"checks.max_generation_failure_rate): they are sent again")
    for request_id, path in zip(t.column("request_id").to_pylist(), t.column("path").to_pylist()):
        if path and not cache.intact(request_id):
            return f"the generated image {path} is missing or changed"
    return None


@asset(partitions_def=release_partitions, group_name="aigen", compute_kind="python",
       ins={"products": AssetIn(partition_mapping=by_window), "drop_items": AssetIn(), "image_refs": AssetIn(),
            "annotations": AssetIn()},
       description="What to generate: for chosen labelled items, a prompt from their category and attributes, "
                   "their gallery image as the reference, and a seed (studio shot and street outfit).")
@observed
def generation_requests(context: AssetExecutionContext, lookbench: LookbenchConfig, products: pa.Table,
                        drop_items: pa.Table, image_refs: pa.Table, annotations: pa.Table) -> Output[pa.Table]:
    window, _ = window_and_version(context.partition_key)
    table, counts = stage_aigen_requests(lookbench.load(), products, drop_items, image_refs, annotations, window)
    g = counts.get
    context.log.info(summary("generation requests", f"items {g('items', 0)} (eligible {g('eligible', 0)}, "
                             f"not eligible {g('items', 0) - g('eligible', 0)}), requests {g('requests', 0)}"
                             f"{reasons(counts, 'requests.')}" if g("enabled", True) else "disabled", counts))
    return Output(table, metadata=table_metadata(table, counts, ["subset", "reference_item_id", "category", "prompt"]))


@asset(partitions_def=release_partitions, group_name="aigen", compute_kind="openai",
       description="One row per request: the generated image (endpoint or job-file backend) with its provenance "
                   "(generator model and version, prompt, seed, reference, first_seen_at), or why there is none.")
@observed
@reuse_unchanged(reads=job_folders, verify=results_in_place)
def generated_images(context: AssetExecutionContext, lookbench: LookbenchConfig,
                     generation_requests: pa.Table) -> Output[pa.Table]:
    window, _ = window_and_version(context.partition_key)
    table, counts = stage_aigen_generate(lookbench.load(), generation_requests, lookbench.store(), window,
                                         datetime.now(timezone.utc))
    g = counts.get
    context.log.info(summary("generated images", f"requests {g('requests', 0)}: generated {g('generated', 0)}, "
                             f"failed {g('failed', 0)}{reasons(counts, 'failed.')}, pending {g('pending', 0)}, "
                             f"skipped {g('skipped', 0)}; from earlier runs {g('from_earlier_runs', 0)}", counts))
    if counts.get("endpoint"):  # which endpoint and model drew them: information, not a warning; after the summary,
        context.log.info(f"generated images: {counts['endpoint']}")  # whose first line is the stage's terminal line
    return Output(table, metadata=table_metadata(table, counts, ["subset", "status", "reason", "generator_model",
                                                                 "first_seen_at"]))


@multi_asset(
    outs={
        "aigen_image_refs": AssetOut(description="The generated images' intake outcome (owner type generated)."),
        "aigen_images": AssetOut(description="One row per distinct accepted generated image: size, flags, pHash."),
    },
    partitions_def=release_partitions,
    group_name="aigen",
    compute_kind="pillow",
)
@observed
def aigen_intake(context: AssetExecutionContext, lookbench: LookbenchConfig, generated_images: pa.Table):
    refs, images, counts = stage_aigen_intake(lookbench.load(), generated_images, lookbench.store())
    context.log.info(intake_summary("generated image intake", counts))
    yield Output(refs, "aigen_image_refs", metadata=table_metadata(refs, counts, ["owner_id", "status", "reason"]))
    yield Output(images, "aigen_images", metadata=table_metadata(images, None, ["image_sha256", "width", "height"]))


@asset(partitions_def=release_partitions, group_name="aigen", compute_kind="ultralytics",
       description="Garments detected in the generated street outfits (each a look linking its reference item), "
                   "matched to the reference item: the regions the reference check looks at and the crops the "
                   "release publishes (schemas.DETECTIONS).")
@observed
@reuse_unchanged(reads=detector_files,
                 verify=lambda cfg, store, values, md: crops_in_store(cfg, store, values, md, "aigen_detections"))
def aigen_detections(context: AssetExecutionContext, lookbench: LookbenchConfig, generated_images: pa.Table,
                     aigen_image_refs: pa.Table, annotations: pa.Table) -> Output[pa.Table]:
    window, _ = window_and_version(context.partition_key)
    table, counts = stage_aigen_detect(lookbench.load(), generated_images, aigen_image_refs, annotations,
                                       lookbench.store(), window)
    context.log.info(summary("detections on generated street outfits",
                             f"outfits {counts.get('outfits', 0)}, " + detections_headline(counts), counts))
    return Output(table, metadata=table_metadata(table, counts, ["owner_id", "model_class", "status", "item_id"]))


@asset(partitions_def=release_partitions, group_name="aigen", compute_kind="numpy",
       description="Every generated image accepted or rejected with the reason: intake, duplicate of a real "
                   "image, contamination, and whether it still shows its reference product (attribute "
                   "agreement and embedding similarity above the configured thresholds).")
@observed
@reuse_unchanged()
def generated_checks(context: AssetExecutionContext, lookbench: LookbenchConfig, generated_images: pa.Table,
                     aigen_image_refs: pa.Table, aigen_images: pa.Table, images: pa.Table, annotations: pa.Table,
                     contamination_index: pa.Table, aigen_detections: pa.Table) -> Output[pa.Table]:
    cfg = lookbench.load()
    table, counts = stage_aigen_check(cfg, generated_images, aigen_image_refs, aigen_images, images, annotations,
                                      contamination_index, lookbench.store(),
                                      aigen_detections if cfg.detect.enabled else None)
    context.log.info(summary("generated checks", f"in {counts.get('in', 0)}, accepted {counts.get('accepted', 0)}, "
                             f"rejected {counts.get('rejected', 0)}{reasons(counts)}", counts))
    return Output(table, metadata=table_metadata(table, counts, ["subset", "status", "reason", "similarity"]))
