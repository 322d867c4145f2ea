"""The Definitions object that ``dagster dev`` (through workspace.yaml) and the CLI load."""


import os

from dagster import (AssetSelection, Definitions, SensorEvaluationContext, SensorResult,
                     build_schedule_from_partitioned_job, define_asset_job, sensor)

from . import attributes, crawl, dedup, detect, evaluate, images, release
from .io import TableIOManager
from .partitions import crawl_partitions, release_partitions, site_partitions
from .resources import LookbenchConfig

ALL_ASSETS = [crawl.crawl, images.drop_items, images.image_intake, dedup.image_clusters, dedup.contamination_check,
              attributes.annotations, detect.detect_garments, release.release_candidate, release.release,
              evaluate.evaluation]

CRAWL_SELECTION = AssetSelection.assets(crawl.crawl)

crawl_job = define_asset_job(
    "crawl_job", selection=CRAWL_SELECTION, partitions_def=crawl_partitions,
    description="Crawl one site for one release window (a partition per window and site).",
)

release_job = define_asset_job(
    "release_job", selection=AssetSelection.all() - CRAWL_SELECTION, partitions_def=release_partitions,
    description="From every site's crawl of a window: take in images, dedup, check contamination, annotate, "
                "detect the garments of street looks, publish the release and evaluate it.",
)

release_schedule = build_schedule_from_partitioned_job(release_job, name="semiannual_release")



@sensor(description="Registers one dynamic 'sites' partition per configured site file.",
        minimum_interval_seconds=300)
def register_sites(context: SensorEvaluationContext, lookbench: LookbenchConfig) -> SensorResult:
    names = [s.name for s in lookbench.load().site_configs()]
    new = [n for n in names if not context.instance.has_dynamic_partition(site_partitions.name, n)]
    return SensorResult(dynamic_partitions_requests=[site_partitions.build_add_request(new)] if new else [])


def build_defs(config_path: str | None = None) -> Definitions:
    """The definitions with resources bound to a config file (None: ``$LOOKBENCH_CONFIG`` or the demo)."""
    config_path = config_path or os.environ.get("LOOKBENCH_CONFIG")
    return Definitions(
        assets=ALL_ASSETS,
        jobs=[crawl_job, release_job],
        schedules=[release_schedule],
        sensors=[register_sites],
        resources={
            "lookbench": LookbenchConfig(config_path=config_path),
            "io_manager": TableIOManager(config_path=config_path),
        },
    )


defs = build_defs()
