"""Running a whole release in process: register the site partitions, crawl every site for the current week (one
``crawl_job`` run per week × site partition), then run ``release_job`` for the window. Used by ``lookbench build``
/ ``lookbench demo`` and by the tests; in production the schedules and the sensor do the same.

:func:`rebuild_window` is the backfill of a past window from the crawl archive alone: every archived crawl of
every site replayed in order (``crawl_job`` with ``replay: true``, no network), then ``release_job``."""

import logging
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

from dagster import DagsterInstance, ExecuteInProcessResult, MultiPartitionKey

from .definitions import build_defs
from .partitions import RELEASE_TIMEZONE, crawl_key, release_partitions, site_partitions
from .resources import LookbenchConfig
from .stale_runs import fail_gone_runs, process_tags

QUIET = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}


class RunFailed(RuntimeError):
    """A step failed; the message names the step and its error."""


def plain_event(entry) -> tuple[str, str | None, int, str]:
    """A Dagster event-log entry as plain values for ``lookbench_pipeline.logs.BuildTerminal.event``: ``(kind,
    step, level, message)``; kind is the Dagster event type's name (``STEP_START``, ``STEP_SUCCESS``,
    ``STEP_FAILURE``, ``RUN_SUCCESS``…),
    ``CHECK_FAILED`` for a failed asset check, or ``LOG`` for a message a step logged."""
    ev = entry.dagster_event
    if ev is None:
        return "LOG", entry.step_key, entry.level, entry.user_message or ""
    kind = ev.event_type.name  # the enum's name (RUN_SUCCESS); its value is still PIPELINE_SUCCESS
    if kind == "ASSET_CHECK_EVALUATION":
        data = ev.event_specific_data
        if getattr(data, "passed", True):
            return kind, entry.step_key, entry.level, ""
        return "CHECK_FAILED", entry.step_key, entry.level, check_failure_line(data)
    return kind, entry.step_key, entry.level, ev.message or entry.user_message or ""


def _execute(job, instance: DagsterInstance, on_event=None, **kwargs) -> ExecuteInProcessResult:
    """``job.execute_in_process`` (errors returned, not raised); ``on_event(kind, step, level, message)`` is
    called with every event of the run as it happens (:func:`plain_event`), through the instance's event
    listeners, so the run's structured event log is stored as always."""
    run_id = None
    kwargs["tags"] = {**(kwargs.get("tags") or {}), **process_tags()}
    if on_event is not None:
        from dagster._core.utils import make_new_run_id

        run_id = make_new_run_id()
        instance.add_event_listener(run_id, lambda entry: on_event(*plain_event(entry)))
    return job.execute_in_process(instance=instance, raise_on_error=False, run_id=run_id, **kwargs)


def _md_text(value: object, limit: int = 1000) -> str:
    """A metadata value on one line, whole unless it is a dump (a list of thousands of ids) longer than ``limit``:
    a failed check's values are why it failed (a generator's error message is some 200 characters)."""
    v = getattr(value, "value", value)  # a MetadataValue's payload
    text = str(v).replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def failed_checks(result: ExecuteInProcessResult) -> list[str]:
    """One line per asset check that failed in the run: ``check <asset>/<name> failed (<severity>): key=value,
    ...`` with the check's metadata (the measured rate and its bound, the offending subsets...), so that a blocked
    release says why without the Dagster UI."""
    return [check_failure_line(ev) for ev in result.get_asset_check_evaluations() if not ev.passed]


def check_failure_line(ev) -> str:
    """``check <asset>/<name> failed (<severity>): key=value, ...`` for a failed ``AssetCheckEvaluation``: the
    one wording of a failed check, in the terminal's warning as the build runs and in a blocked build's error."""
    md = ", ".join(f"{k}={_md_text(v)}" for k, v in (ev.metadata or {}).items())
    head = f"check {ev.asset_key.to_user_string()}/{ev.check_name} failed ({ev.severity.value})"
    return f"{head}: {md}" if md else head


def _check(result: ExecuteInProcessResult) -> None:
    if result.success:
        return
    msgs = []
    for ev in result.all_events:
        if ev.is_step_failure:
            err = ev.step_failure_data.error
            while err is not None and err.cause is not None:  # the library's own exception, not the wrapper
                err = err.cause
            if err is not None and err.cls_name == "DagsterExecutionInterruptedError":  # Ctrl-C / SIGTERM
                msgs.append(f"step {ev.step_key} was interrupted: run the same command again to go on (a crawl "
                            "continues where it stopped)")
                continue
            msgs.append(f"step {ev.step_key} failed: {err.message.strip() if err else ''}")
    raise RunFailed("\n".join(msgs + failed_checks(result)) or "run failed")


def _register_sites(instance: DagsterInstance, sites: list[str]) -> None:
    instance.add_dynamic_partitions(site_partitions.name,
                                    [s for s in sites if not instance.has_dynamic_partition(site_partitions.name, s)])


EPHEMERAL_ENV = "LOOKBENCH_DAGSTER_EPHEMERAL"
"""Set to ``1`` to run without recording anything in a Dagster instance (the tests do: they must not register runs
in a developer's instance)."""

USER_INSTANCE = Path.home() / ".lookbench" / "dagster"
"""The instance folder CLI runs use when ``DAGSTER_HOME`` is unset and they do not run from a checkout."""


def default_instance_dir(cwd: Path | None = None) -> Path:
    """Where a CLI run (``lookbench demo`` / ``build`` / ``backfill``) records its runs when ``DAGSTER_HOME`` is
    unset: the checkout it runs from (a folder holding the project's ``dagster.yaml`` and ``workspace.yaml``: the
    instance ``make dev`` shows, since the Makefile sets ``DAGSTER_HOME`` to the checkout), else
    :data:`USER_INSTANCE`, where a ``dagster.yaml`` with telemetry off is written on first use."""
    cwd = Path.cwd() if cwd is None else cwd
    if (cwd / "dagster.yaml").is_file() and (cwd / "workspace.yaml").is_file():
        return cwd
    USER_INSTANCE.mkdir(parents=True, exist_ok=True)
    cfg = USER_INSTANCE / "dagster.yaml"
    if not cfg.is_file():
        cfg.write_text("# written by lookbench (assets/runner.py): the instance CLI runs record their runs in\n"
                       "telemetry:\n  enabled: false\n")
    return USER_INSTANCE


def _instance(instance: DagsterInstance | None) -> DagsterInstance:
    """The instance a CLI run records in: the one given; ``$DAGSTER_HOME``; none (ephemeral) with
    ``LOOKBENCH_DAGSTER_EPHEMERAL=1``; else :func:`default_instance_dir`, so that ``make dev`` afterwards lists
    the run."""
    if instance is not None:
        return instance
    if os.environ.get("DAGSTER_HOME"):
        return DagsterInstance.get()
    if os.environ.get(EPHEMERAL_ENV) == "1":
        return DagsterInstance.ephemeral()
    os.environ["DAGSTER_HOME"] = str(default_instance_dir().resolve())
    return DagsterInstance.get()


def _start(instance: DagsterInstance | None, on_event) -> DagsterInstance:
    """The instance of a CLI run (:func:`_instance`), cleared of runs whose process is gone
    (:func:`assets.stale_runs.fail_gone_runs`); the terminal says which (through ``on_event``, else on stderr)."""
    instance = _instance(instance)

    def say(line: str) -> None:
        if on_event is not None:
            on_event("NOTE", None, logging.WARNING, line)
        else:
            print(line, file=sys.stderr, flush=True)

    fail_gone_runs(instance, say)
    return instance


def run_release(config_path: str | None = None, window: str | None = None,
                instance: DagsterInstance | None = None, quiet: bool = True, on_event=None,
                reuse_unchanged: bool | None = None) -> dict:
    """Crawl every configured site and build, publish and evaluate the release of ``window`` (a partition key,
    default: the current window). Sites are crawled only while the window is open (into the current week's
    partition); a closed window is built from its stored weekly crawls. ``on_event``: see :func:`_execute`.
    Assets whose inputs, code and configuration did not change are reused, not computed (``assets/reuse.py``),
    unless ``reuse_unchanged`` is False (None: unless ``$LOOKBENCH_REUSE_UNCHANGED`` is ``0``).
    Returns ``{"window", "manifest", "scores", "crawl_run_ids", "run_id"}``.

    Raises:
        RunFailed: a step failed (the message names it).
    """
    instance = _start(instance, on_event)
    defs = build_defs(config_path, reuse_unchanged)
    window = window or release_partitions.get_last_partition_key()
    sites = [s.name for s in LookbenchConfig(config_path=config_path).load().site_configs()]
    _register_sites(instance, sites)
    run_config = QUIET if quiet else {}
    crawl_runs = []
    w = release_partitions.time_window_for_partition_key(window)
    if w.start <= datetime.now(timezone.utc) < w.end:
        for site in sites:
            r = _execute(defs.resolve_job_def("crawl_job"), instance, on_event,
                         partition_key=crawl_key(window, site), run_config=run_config)
            _check(r)
            crawl_runs.append(r.run_id)
    r = _execute(defs.resolve_job_def("release_job"), instance, on_event, partition_key=window,
                 run_config=run_config)
    _check(r)
    return {"window": window, "manifest": r.output_for_node("release"), "scores": r.output_for_node("evaluation"),
            "crawl_run_ids": crawl_runs, "run_id": r.run_id, "result": r}


def rebuild_window(config_path: str | None = None, window: str | None = None,
                   instance: DagsterInstance | None = None, quiet: bool = True, on_event=None) -> dict:
    """Rebuild release window ``window`` from the crawl archive (``warc/<site>/`` in the object store) without
    the network: for every configured site, every archived crawl that started before the window's end is
    replayed in start order into its weekly partition (``crawl_job``, run config ``replay: true``), which
    rebuilds the crawl state (``first_seen_at``) as it was; then ``release_job`` runs for the window.

    The crawl state must start empty (a fresh ``data_dir``): replaying on top of a live state would keep the
    live ``first_seen_at``. Returns what :func:`run_release` returns plus ``replayed`` (site -> WARC keys).

    ``on_event``: see :func:`_execute`.

    Raises:
        ValueError: the data directory already holds crawl state for a site, or a site has no archived crawl.
        RunFailed: a step failed.
    """
    from lookbench_pipeline.backfill import replay_plan

    instance = _start(instance, on_event)
    defs = build_defs(config_path)
    cfg = LookbenchConfig(config_path=config_path).load()
    store = LookbenchConfig(config_path=config_path).store()
    window = window or release_partitions.get_last_partition_key()
    end = release_partitions.time_window_for_partition_key(window).end
    sites = [s.name for s in cfg.site_configs()]
    for site in sites:
        if cfg.layout.site_state(site).exists():
            raise ValueError(f"{cfg.layout.site_state(site)} exists: rebuild into a fresh data_dir, so that the "
                             "archive alone decides first_seen_at")
    _register_sites(instance, sites)
    run_config = {**(QUIET if quiet else {}), "ops": {"crawl": {"config": {"replay": True}}}}
    crawl_runs, replayed = [], {}
    for site in sites:
        archived, weeks = replay_plan(store, site, end, RELEASE_TIMEZONE)
        if not archived:
            raise ValueError(f"no archived crawl of site {site} before {end.isoformat()} in {store.url}/warc/{site}/")
        replayed[site] = [a.key for a in archived]
        for week in weeks:
            r = _execute(defs.resolve_job_def("crawl_job"), instance, on_event,
                         partition_key=MultiPartitionKey({"week": week, "site": site}), run_config=run_config)
            _check(r)
            crawl_runs.append(r.run_id)
    r = _execute(defs.resolve_job_def("release_job"), instance, on_event, partition_key=window,
                 run_config=QUIET if quiet else {})
    _check(r)
    return {"window": window, "manifest": r.output_for_node("release"), "scores": r.output_for_node("evaluation"),
            "crawl_run_ids": crawl_runs, "run_id": r.run_id, "result": r, "replayed": replayed}
