"""Running a whole release in process: register the site partitions, crawl every site for the window (one
``crawl_job`` run per site partition), then run ``release_job`` for the window. Used by ``lookbench build`` /
``lookbench demo`` and by the tests; in production the schedule and sensors do the same."""

import os

from dagster import DagsterInstance, ExecuteInProcessResult

from .definitions import build_defs
from .partitions import crawl_key, release_partitions, site_partitions
from .resources import LookbenchConfig

QUIET = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}


class RunFailed(RuntimeError):
    """A step failed; the message names the step and its error."""


def _check(result: ExecuteInProcessResult) -> None:
    if result.success:
        return
    msgs = []
    for ev in result.all_events:
        if ev.is_step_failure:
            err = ev.step_failure_data.error
            while err is not None and err.cause is not None:  # the library's own exception, not the wrapper
                err = err.cause
            msgs.append(f"step {ev.step_key} failed: {err.message.strip() if err else ''}")
    raise RunFailed("\n".join(msgs) or "run failed")


def run_release(config_path: str | None = None, window: str | None = None,
                instance: DagsterInstance | None = None, quiet: bool = True) -> dict:
    """Crawl every configured site and build, publish and evaluate the release of ``window`` (a partition key,
    default: the current window). Returns ``{"window", "manifest", "scores", "crawl_run_ids", "run_id"}``.

    Raises:
        RunFailed: a step failed (the message names it).
    """
    defs = build_defs(config_path)
    instance = instance or (DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else DagsterInstance.ephemeral())
    window = window or release_partitions.get_last_partition_key()
    sites = [s.name for s in LookbenchConfig(config_path=config_path).load().site_configs()]
    instance.add_dynamic_partitions(site_partitions.name,
                                    [s for s in sites if not instance.has_dynamic_partition(site_partitions.name, s)])
    run_config = QUIET if quiet else {}
    crawl_runs = []
    for site in sites:
        r = defs.resolve_job_def("crawl_job").execute_in_process(
            partition_key=crawl_key(window, site), instance=instance, raise_on_error=False, run_config=run_config)
        _check(r)
        crawl_runs.append(r.run_id)
    r = defs.resolve_job_def("release_job").execute_in_process(
        partition_key=window, instance=instance, raise_on_error=False, run_config=run_config)
    _check(r)
    return {"window": window, "manifest": r.output_for_node("release"), "scores": r.output_for_node("evaluation"),
            "crawl_run_ids": crawl_runs, "run_id": r.run_id, "result": r}
