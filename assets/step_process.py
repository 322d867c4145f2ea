"""A step process of Dagster's multiprocess executor dies with its run worker.

The multiprocess executor (the default of runs launched from the UI, a schedule or a sensor: ``make dev``,
``deploy/``) runs each step in a process of its own, started by the run worker (the process that executes the
run). When the run worker is killed with SIGKILL (``kill -9``, the OOM killer), nothing stops those step
processes: they used to run on as orphans, finish their step and record its outputs and ``ASSET_MATERIALIZATION``
events in the instance under the killed run (which ``assets/stale_runs.py`` marks failed), and a later run reused
them (``assets/reuse.py``, Dagster's re-execution "from failure"). A data engineer who kills a build expects it to
stop, and the Dagster UI's lineage to be honest.

:func:`die_with_run_worker`, called when a step process sets up the resources every asset and check uses
(``LookbenchConfig`` and the IO manager), asks Linux to kill the step process with SIGKILL when the run worker dies
(``prctl(PR_SET_PDEATHSIG)``); the crawl's own subprocess dies with the step in the same way
(``lookbench_crawlers.extensions.DieWithParent``). So ``kill -9`` of the run worker ends the whole run, as it
ends a ``lookbench build`` (which runs its steps in its own process) and its crawl.

Two things make the parent-death signal alone not enough, and are handled:

* the signal fires when the *thread* that started the child exits, and only for the child's direct parent. With
  the ``spawn`` start method (Dagster's default) the direct parent is the run worker, whose executor loop (the
  thread that starts the steps) lives until every step has ended. With ``forkserver`` the direct parent is the
  fork server, which exits when the run worker does, but to be certain of the run worker the step process also
  watches it (a daemon thread, :data:`WATCH_INTERVAL_S`) and kills itself when it is gone;
* the run worker may die before the request takes effect: checked after it, and the step process exits at once.

Which process is the run worker: the one Dagster's engine event ``Executing steps using multiprocess executor:
parent process (pid: N)`` names, when it is the process that started this one (``multiprocessing``'s parent).
A run worker itself (the code server starts it with ``multiprocessing`` too: reloading the code server must not
kill runs), a step running inside the run worker (the in-process executor; ``lookbench build``, whose steps run in
the command's process) and one in a Kubernetes pod of its own (``k8s_job_executor``) do nothing here. Not on
Linux: the watching thread alone.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading

from dagster import DagsterEventType, DagsterInstance

from lookbench_pipeline.parent_death import die_with_parent

from .stale_runs import process_gone, process_identity

_EXECUTOR_EVENT = "Executing steps using multiprocess executor: parent process (pid: "
WATCH_INTERVAL_S = 0.5
"""How often a step process whose direct parent is not the run worker (``forkserver``) checks that it lives."""

_armed: int | None = None  # the run worker this process dies with, once armed


def executor_pids(instance: DagsterInstance, run_id: str) -> set[int]:
    """The pids of the processes that ran ``run_id``'s multiprocess executor (their engine events ``Executing
    steps using multiprocess executor: parent process (pid: N)``): one, or more for a run resumed by Dagster's run
    monitoring after its worker died."""
    pids = set()
    for rec in instance.get_records_for_run(run_id, of_type=DagsterEventType.ENGINE_EVENT).records:
        ev = rec.event_log_entry.dagster_event
        if ev is None or not (ev.message or "").startswith(_EXECUTOR_EVENT):
            continue
        pid = (ev.engine_event_data.metadata or {}).get("pid") if ev.engine_event_data else None
        pid = str(getattr(pid, "value", pid) or ev.message[len(_EXECUTOR_EVENT):].split(")", 1)[0])
        if pid.isdigit():
            pids.add(int(pid))
    return pids


def _ask_kernel() -> bool:
    """``prctl(PR_SET_PDEATHSIG, SIGKILL)`` for this process; False where it cannot be asked (not Linux)."""
    try:
        die_with_parent()
    except OSError:
        return False
    return True


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _watch(worker: int, identity: str | None) -> None:
    stop = threading.Event()
    while not stop.wait(WATCH_INTERVAL_S):
        if process_gone(worker, identity):
            _die()


def die_with_run_worker(context) -> int | None:
    """Make this process die (SIGKILL) with the run worker when it is a step process of Dagster's multiprocess
    executor (module docstring); ``context``: the ``InitResourceContext`` of a resource's setup. Once per process.
    Returns the run worker's pid when armed (also by an earlier call), else None."""
    global _armed
    if _armed is not None:
        return _armed
    parent = multiprocessing.parent_process()
    run = getattr(context, "dagster_run", None)
    instance = getattr(context, "instance", None)
    if parent is None or run is None or instance is None or instance.is_ephemeral:
        return None  # not started by multiprocessing, or outside a run: not a step process of a stored run
    worker = parent.pid
    try:
        started_by_worker = worker in executor_pids(instance, run.run_id)
    except Exception:  # an event log that cannot be read here: nothing to go by
        return None
    if not started_by_worker or worker == os.getpid():
        return None  # a run worker itself (its parent is the code server), or another executor's step
    identity = process_identity(worker)
    kernel = _ask_kernel()
    if kernel and os.getppid() == worker:
        _armed = worker  # the direct parent: the kernel's signal is enough, and it was asked while it lived
        return worker
    if process_gone(worker, identity):
        _die()  # the run worker died before the request took effect
    threading.Thread(target=_watch, args=(worker, identity), name="lookbench-die-with-run-worker",
                     daemon=True).start()
    _armed = worker
    return worker


__all__ = ["WATCH_INTERVAL_S", "die_with_run_worker", "executor_pids"]
