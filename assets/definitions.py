"""The Definitions object that ``dagster dev`` (through workspace.yaml) and the CLI load."""


import os
from pathlib import Path

from dagster import (AssetSelection, DefaultSensorStatus, Definitions, SensorEvaluationContext, SensorResult,
                     SkipReason, define_asset_job, sensor)

from . import aigen, attributes, checks, crawl, dedup, detect, evaluate, images, negatives, release, schedules
from .io import TableIOManager
from .partitions import RELEASE_TIMEZONE, crawl_partitions, release_partitions, site_partitions
from .resources import (CONFIG_TAG, STORE_TAG, ImageEndpointResource, LookbenchConfig, ObjectStoreResource,
                        VllmEndpointResource, config_origin, store_tag)
from .stale_runs import fail_gone_runs

ALL_ASSETS = [crawl.crawl, crawl.crawl_catalog, images.drop_items, images.image_intake, dedup.image_clusters,
              dedup.contamination_check, attributes.annotations, detect.detect_garments, negatives.negatives, aigen.generation_requests,
              aigen.generated_images, aigen.aigen_intake, aigen.aigen_detections, aigen.generated_checks, release.release_candidate,
              release.release, evaluate.evaluation]
ALL_CHECKS = checks.ALL_CHECKS

# the weekly crawl (week x site partitions) and its checks; everything else is partitioned by release window
CRAWL_SELECTION = AssetSelection.assets(crawl.crawl)

ORIGIN_TAGS = (CONFIG_TAG, "lookbench/data_dir", STORE_TAG)
"""The run tags that say which configuration a run built from (:func:`origin_tags`): every run of the jobs that
:func:`build_defs` returns carries them, so that runs of the demo, ``make real`` and another configuration, which
materialise the same asset keys and partitions in one Dagster instance, can be told apart (filter the Runs page by
tag, e.g. ``lookbench/data_dir:/srv/lookbench/data``)."""


def origin_tags(config_path: str | None = None) -> dict[str, str]:
    """``lookbench/config``: the configuration file's absolute path (``config_path``, else ``$LOOKBENCH_CONFIG``),
    or ``built-in demo`` for the embedded default; ``lookbench/data_dir``: the absolute data folder the run's
    stages read and write; ``lookbench/store``: the object store the release is published to (a URL's user
    and password left out). Raises ConfigError for an invalid configuration."""
    from lookbench_pipeline.config import load_config

    config_path = config_path or os.environ.get("LOOKBENCH_CONFIG")
    cfg = load_config(config_path)
    return {CONFIG_TAG: config_origin(config_path),
            "lookbench/data_dir": str(Path(cfg.layout.root).resolve()), STORE_TAG: store_tag(cfg.store_url)}


def _jobs(origin: dict[str, str]) -> list:
    """The weekly crawl and the release job, their runs tagged with ``origin`` (:func:`origin_tags`)."""
    crawl_job = define_asset_job(
        "crawl_job", selection=CRAWL_SELECTION, partitions_def=crawl_partitions,
        tags={**schedules.CRAWL_TAGS, **origin},
        description="Crawl one site for one week (a partition per week and site); weekly crawls accumulate into "
                    "their release window's catalogue.",
    )
    release_job = define_asset_job(
        "release_job", selection=AssetSelection.all() - CRAWL_SELECTION, partitions_def=release_partitions,
        tags={**schedules.RELEASE_TAGS, **origin},
        description="From every weekly crawl of a window: accumulate the catalogue, take in images, dedup, check "
                    "contamination, annotate, detect the garments of street looks, generate and check the "
                    "AI-generated subsets' images, publish the release and evaluate it.",
    )
    return [crawl_job, release_job]

release_schedule = schedules.semiannual_release



@sensor(description="Registers one dynamic 'sites' partition per configured site file.",
        minimum_interval_seconds=300)
def register_sites(context: SensorEvaluationContext, lookbench: LookbenchConfig) -> SensorResult:
    names = [s.name for s in lookbench.load().site_configs()]
    new = [n for n in names if not context.instance.has_dynamic_partition(site_partitions.name, n)]
    # the sensor launches no run, so Dagster shows every tick as skipped: its reason says what the tick did
    # (without one the UI says "Sensor function returned an empty result", even on the tick that registered)
    done = (f"registered site partition(s): {', '.join(new)}" if new else
            f"every configured site is registered: {', '.join(names) or 'none'}")
    return SensorResult(dynamic_partitions_requests=[site_partitions.build_add_request(new)] if new else [],
                        skip_reason=f"{done} (this sensor launches no run: crawl_job runs come from the weekly_crawl "
                                    "schedule or the Launchpad)")


@sensor(name="fail_gone_runs", minimum_interval_seconds=60, default_status=DefaultSensorStatus.RUNNING,
        description="Marks failed the runs whose process is gone (a CLI build killed with SIGKILL, a run worker "
                    "that died): they would hold the run queue's limits for ever (assets/stale_runs.py).")
def fail_gone_runs_sensor(context: SensorEvaluationContext) -> SkipReason:
    marked = fail_gone_runs(context.instance, say=context.log.warning,
                            by=f"the fail_gone_runs sensor (Dagster's code server, pid {os.getpid()})")
    return SkipReason(f"marked {len(marked)} run(s) failed: {', '.join(marked)}" if marked else
                      "no run whose process is gone")


def _executor():
    """``$LOOKBENCH_EXECUTOR``: unset or ``multiprocess`` -> Dagster's default (a process per step); ``in_process``;
    ``k8s`` -> every step its own Kubernetes Job (dagster-k8s, the ``deploy`` extra; deploy/executor.yaml)."""
    kind = os.environ.get("LOOKBENCH_EXECUTOR", "").lower()
    if kind in ("", "multiprocess"):
        return None
    if kind == "in_process":
        from dagster import in_process_executor

        return in_process_executor
    if kind == "k8s":
        from dagster_k8s import k8s_job_executor

        return k8s_job_executor
    raise ValueError(f"LOOKBENCH_EXECUTOR must be multiprocess, in_process or k8s, not {kind!r}")


def build_defs(config_path: str | None = None, reuse_unchanged: bool | None = None) -> Definitions:
    """The definitions with resources bound to a config file (None: ``$LOOKBENCH_CONFIG`` or the demo);
    ``reuse_unchanged=False``: every asset is computed, none reused (``assets/reuse.py``); None: reused unless
    ``$LOOKBENCH_REUSE_UNCHANGED`` is ``0`` (how a Dagster deployment turns reuse off). The jobs' runs are
    tagged with the configuration they build from (:func:`origin_tags`). Raises ConfigError for an invalid
    configuration."""
    if reuse_unchanged is None:
        reuse_unchanged = os.environ.get("LOOKBENCH_REUSE_UNCHANGED", "1").strip().lower() not in ("0", "false", "no")
    config_path = config_path or os.environ.get("LOOKBENCH_CONFIG")
    origin = origin_tags(config_path)  # loads the configuration: an invalid one stops here, with its error
    if config_path:
        from lookbench_pipeline.config import ConfigError, load_config

        tz = load_config(config_path).timezone
        if tz != RELEASE_TIMEZONE:
            raise ConfigError(f"{config_path}: timezone {tz!r}, but the partitions were defined in "
                              f"{RELEASE_TIMEZONE!r} when the code was imported; set LOOKBENCH_TIMEZONE={tz} "
                              "before starting Dagster")
    # one resource per external system, typed and shown in the Launchpad; ``lookbench`` applies them. Configured at
    # launch: Dagster binds ``lookbench``'s fields to the top-level keys (by identity), so a run's settings of
    # ``object_store``, ``vllm`` and ``image_endpoint`` reach it (a fully configured nested resource would not be
    # bound: the run config of its key would be ignored)
    object_store, vllm, image_endpoint = (ObjectStoreResource.configure_at_launch(),
                                          VllmEndpointResource.configure_at_launch(),
                                          ImageEndpointResource.configure_at_launch())
    return Definitions(
        assets=ALL_ASSETS,
        asset_checks=ALL_CHECKS,
        executor=_executor(),
        jobs=_jobs(origin),
        schedules=[release_schedule, schedules.weekly_crawl],
        sensors=[register_sites, fail_gone_runs_sensor],
        resources={
            "lookbench": LookbenchConfig(config_path=config_path, object_store=object_store, vllm=vllm,
                                         image_endpoint=image_endpoint, reuse_unchanged=reuse_unchanged),
            "object_store": object_store,
            "vllm": vllm,
            "image_endpoint": image_endpoint,
            "io_manager": TableIOManager(config_path=config_path),
        },
    )


if os.environ.get("LOOKBENCH_LOG_FORMAT"):  # e.g. json in a cluster's pods: one JSON line per library record
    from lookbench_pipeline.logs import configure

    configure()

defs = build_defs()
