"""The Definitions object that ``dagster dev`` (through workspace.yaml) and the CLI load."""


import os

from dagster import AssetSelection, Definitions, build_schedule_from_partitioned_job, define_asset_job

from . import attributes, crawl, dedup, evaluate, images, release
from .io import TableIOManager
from .partitions import release_partitions
from .resources import LookbenchConfig

ALL_ASSETS = [crawl.crawl, images.drop_items, images.image_intake, dedup.image_clusters, dedup.contamination_check,
              attributes.annotations,
              release.release, evaluate.evaluation]

release_job = define_asset_job(
    "release_job", selection=AssetSelection.all(), partitions_def=release_partitions,
    description="Crawl, take in images, dedup, annotate, publish the release and evaluate it: one LookBench release.",
)

release_schedule = build_schedule_from_partitioned_job(release_job, name="semiannual_release")



def build_defs(config_path: str | None = None) -> Definitions:
    """The definitions with resources bound to a config file (None: ``$LOOKBENCH_CONFIG`` or the demo)."""
    config_path = config_path or os.environ.get("LOOKBENCH_CONFIG")
    return Definitions(
        assets=ALL_ASSETS,
        jobs=[release_job],
        schedules=[release_schedule],
        resources={
            "lookbench": LookbenchConfig(config_path=config_path),
            "io_manager": TableIOManager(config_path=config_path),
        },
    )


defs = build_defs()
