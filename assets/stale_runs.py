"""Runs whose process is gone: a run killed with SIGKILL, or whose machine went down, stays ``STARTED`` in the
instance for ever, and the run queue counts it against its limits (one release run at a time: a later release
from the UI or the ``semiannual_release`` schedule would wait in the queue with no end and no message).

Dagster's run monitoring (``run_monitoring`` in ``dagster.yaml``, the daemon) fails such a run only where the run
launcher can check its worker (``K8sRunLauncher`` in ``deploy/``); the local ``DefaultRunLauncher`` of ``make dev``
cannot, and a run the CLI executes in process (``assets/runner.py``) was never launched at all. This module tells
those runs apart and fails them (:func:`fail_gone_runs`); the CLI calls it when a run starts, and the
``fail_gone_runs`` sensor (``assets/definitions.py``) every minute while the daemon runs.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter

HOST_TAG, PID_TAG, PROCESS_TAG = "lookbench/cli_host", "lookbench/cli_pid", "lookbench/cli_process"
"""Run tags of a run ``assets.runner`` executes in process: the host, the pid and the identity of the process
(:func:`process_identity`) that runs it, so that a later run or the sensor can tell that the process is gone."""

_LIVE = [DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING, DagsterRunStatus.STARTED]
_WORKER_EVENT = "Started process for run (pid: "  # Dagster's run worker (dagster api execute_run, the code server)
_REUSE_SLACK_S = 2.0  # a worker process starts before its run's start time; a later start is another process


def _start_ticks(pid: int) -> int:
    """Process ``pid``'s start in clock ticks since boot: field 22 of ``/proc/<pid>/stat`` (the name before it may
    hold ')'). Raises OSError (no such process, no /proc), IndexError or ValueError (an unexpected format)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def process_identity(pid: int) -> str | None:
    """What tells process ``pid`` apart from a later process with the same pid: on Linux the boot id and the
    process's start time in clock ticks since boot (``/proc``); elsewhere its creation time (psutil, when
    installed); None where neither can be read (the process is gone, or no way to tell)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot}:{_start_ticks(pid)}"
    except (OSError, IndexError, ValueError):
        pass
    try:
        import psutil

        return f"created:{psutil.Process(pid).create_time():.3f}"
    except Exception:  # no psutil, no such process, no access
        return None


def process_tags() -> dict[str, str]:
    """The tags :data:`HOST_TAG`, :data:`PID_TAG`, :data:`PROCESS_TAG` of this process."""
    pid = os.getpid()
    ident = process_identity(pid)
    return {HOST_TAG: socket.gethostname(), PID_TAG: str(pid), **({PROCESS_TAG: ident} if ident else {})}


def _alive(pid: int) -> bool | None:
    """True if a process has ``pid``, False if none has, None when it cannot be told."""
    if pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    except OSError:
        return None
    return True


def process_gone(pid: int, identity: str | None) -> bool:
    """True only when process ``pid`` of this host is certainly gone: no process has that pid, or one has it but
    started at another time than ``identity`` (the pid was reused). A live process (also another user's) whose
    identity matches or cannot be read is not gone."""
    alive = _alive(pid)
    if alive is not True:
        return alive is False
    now = process_identity(pid)
    return bool(identity and now and now != identity)


def _started_at(pid: int) -> float | None:
    """When process ``pid`` started (UTC seconds since the epoch), from ``/proc``: the boot time (now less
    ``/proc/uptime``, to 10 ms; ``/proc/stat``'s ``btime`` is whole seconds) plus the process's start in clock
    ticks since boot; else psutil; None when it cannot be read."""
    try:
        ticks = _start_ticks(pid)
        boot = time.time() - float(Path("/proc/uptime").read_text().split()[0])
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        pass
    try:
        import psutil

        return psutil.Process(pid).create_time()
    except Exception:  # no psutil, no such process, no access
        return None


def _worker_pid(instance: DagsterInstance, run_id: str) -> int | None:
    """The pid of a launched run's worker: Dagster's engine event ``Started process for run (pid: N).``"""
    records = instance.get_records_for_run(run_id, of_type=DagsterEventType.ENGINE_EVENT, limit=200).records
    for rec in records:
        entry = rec.event_log_entry
        ev = entry.dagster_event
        if ev is None or not (entry.user_message or ev.message or "").startswith(_WORKER_EVENT):
            continue
        pid = (ev.engine_event_data.metadata or {}).get("pid") if ev.engine_event_data else None
        try:
            return int(getattr(pid, "value", pid))
        except (TypeError, ValueError):
            return None
    return None


def _single_host(instance: DagsterInstance) -> bool:
    """Whether every run of ``instance`` ran on this machine: its run storage is a SQLite file (``make dev``,
    ``dagster.yaml``), which one machine uses; a PostgreSQL instance is shared by several."""
    from dagster._core.storage.runs import SqliteRunStorage

    return isinstance(instance.run_storage, SqliteRunStorage)


def _launched_run_gone(instance: DagsterInstance, record) -> int | None:
    """For a run launched by a run launcher on a single-host instance (no CLI tags): its worker's pid when that
    process is certainly gone (no such process, or one that started after the run did), else None."""
    run = record.dagster_run
    if run.status != DagsterRunStatus.STARTED or not _single_host(instance):
        return None  # NOT_STARTED / STARTING: run monitoring's start timeout (dagster.yaml) fails those
    pid = _worker_pid(instance, run.run_id)
    if pid is None:
        return None
    alive = _alive(pid)
    if alive is False:
        return pid
    began, started = record.start_time or record.create_timestamp.timestamp(), _started_at(pid)
    if alive and began and started is not None and started > began + _REUSE_SLACK_S:
        return pid  # the pid now belongs to a process younger than the run
    return None


def fail_gone_runs(instance: DagsterInstance, say=None, by: str | None = None) -> list[str]:
    """Mark as failed the runs of ``instance`` that are still not started, starting or started although their
    process is gone, with a ``RUN_FAILURE`` event that says so (``instance.report_run_failed``):

    * a run the CLI executed in process on this host (tags :data:`HOST_TAG`, :data:`PID_TAG`,
      :data:`PROCESS_TAG`) whose process is certainly gone (:func:`process_gone`);
    * on a single-host instance (SQLite), a ``STARTED`` run a run launcher started (the UI, a schedule, a sensor)
      whose worker process, named by Dagster's ``Started process for run (pid: N)`` event, no longer exists or
      started after the run did.

    Runs of another host, of a live process, and runs whose process cannot be told are left alone (on a
    Kubernetes deployment Dagster's run monitoring checks the launched runs). ``say(line)`` gets
    ``marked run <id> failed: its process <pid> is gone`` for each. ``by``: who marks them, as the failure
    message names it (default ``the lookbench command (pid <this process>)``, the CLI's; the sensor names itself
    and its code server). Returns the run ids marked."""
    if instance.is_ephemeral:
        return []
    host = socket.gethostname()
    by = by or f"the lookbench command (pid {os.getpid()})"
    marked = []
    for record in instance.get_run_records(RunsFilter(statuses=_LIVE)):
        run = record.dagster_run
        if PID_TAG in run.tags:
            if run.tags.get(HOST_TAG) != host:
                continue
            try:
                pid = int(run.tags[PID_TAG])
            except ValueError:
                continue
            if not process_gone(pid, run.tags.get(PROCESS_TAG)):
                continue
            how = "the lookbench command that ran it"
        else:
            pid = _launched_run_gone(instance, record)
            if pid is None:
                continue
            how = "its run worker"
        instance.report_run_failed(run, f"the process of this run, {how} (pid {pid} on {host}), is gone: it was "
                                        f"killed or its machine stopped; marked failed by {by} so that the "
                                        "run queue does not wait on it")
        marked.append(run.run_id)
        if say is not None:
            say(f"marked run {run.run_id} failed: its process {pid} is gone")
    return marked
