"""``kill -9`` of a Dagster run worker ends its run: the multiprocess executor's step processes die with it
(assets/step_process.py) and record nothing more under the killed run, and the next run crawls the week to its end
under its own run id. Before, a step process ran on as an orphan, finished the week's crawl and recorded its four
materialisations and ``STEP_SUCCESS`` under the killed run.

The run worker here is what Dagster's run worker (``dagster api execute_run``, the code server's run process)
does: ``execute_job`` of a reconstructable job, with the job's executor (multiprocess), in a process of its own."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus
from dagster._core.events import EngineEventData
from dagster._core.storage.dagster_run import DagsterRun
from dagster._core.utils import make_new_run_id

from assets import step_process
from assets.partitions import crawl_key, release_partitions, site_partitions
from assets.stale_runs import fail_gone_runs
from lookbench_pipeline.config import DEMO_SITE

ROOT = Path(__file__).resolve().parents[1]

WORKER = textwrap.dedent('''
    import os, sys
    from dagster import DagsterInstance, execute_job
    from dagster._core.definitions.reconstruct import ReconstructableRepository
    from assets.stale_runs import process_tags

    if __name__ == "__main__":  # the executor's spawn / forkserver children import this file again
        job, key, start = sys.argv[1:4]
        repo = ReconstructableRepository.for_module("assets.definitions", "defs", working_directory=os.getcwd())
        recon = repo.get_reconstructable_job(job)
        tags = {**recon.get_definition().partitions_def.get_tags_for_partition_key(key), **process_tags()}
        executor = {"in_process": {}} if start == "in_process" else {"multiprocess": {"start_method": {start: {}}}}
        config = {"execution": {"config": executor}}
        sys.exit(0 if execute_job(recon, DagsterInstance.get(), tags=tags, run_config=config).success else 1)
''')


@pytest.fixture
def setup(tmp_path):
    """A Dagster instance in ``tmp_path/dagster`` with the demo site registered, the demo configuration, the
    current week's crawl partition key and the environment of a run worker."""
    home = tmp_path / "dagster"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    cfg = {"data_dir": str(tmp_path / "data"), "store": {"url": str(tmp_path / "store")}, "sites": [str(DEMO_SITE)]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    (tmp_path / "worker.py").write_text(WORKER)
    instance = DagsterInstance.local_temp(str(home))
    instance.add_dynamic_partitions(site_partitions.name, ["demo"])
    key = str(crawl_key(release_partitions.get_last_partition_key(), "demo"))
    env = {k: v for k, v in os.environ.items() if k != "LOOKBENCH_DAGSTER_EPHEMERAL"}
    env.update(DAGSTER_HOME=str(home), LOOKBENCH_CONFIG=str(tmp_path / "c.yaml"), PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "crawlers"), env.get("PYTHONPATH", "")]))
    try:
        yield instance, key, env
    finally:
        instance.dispose()


def _feed_lines(data: Path) -> int:
    found = sorted(data.glob("crawls/*/demo/crawl/items.jsonl"))
    return found[0].read_bytes().count(b"\n") if found else 0


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (dead, not yet reaped by its new parent)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _step_pid(instance, run_id: str) -> int | None:
    """The crawl step's process: Dagster's ``STEP_WORKER_STARTED`` event names it."""
    for rec in instance.get_records_for_run(run_id, of_type=DagsterEventType.STEP_WORKER_STARTED).records:
        pid = rec.event_log_entry.dagster_event.engine_event_data.metadata["pid"]
        return int(getattr(pid, "value", pid))
    return None


def _events(instance, run_id: str, kind: DagsterEventType) -> list:
    return instance.get_records_for_run(run_id, of_type=kind).records


def _kill_the_worker_mid_crawl(tmp_path, instance, key, env, start: str) -> tuple[str, int]:
    """Start the crawl of the demo shop in a run worker, kill the worker alone with SIGKILL while its crawl step
    is crawling, and wait for that step's process to be gone. Returns the killed run's id and the step's pid."""
    cmd = [sys.executable, str(tmp_path / "worker.py"), "crawl_job", key, start]
    worker = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    step = None
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and worker.poll() is None and _feed_lines(tmp_path / "data") < 10:
            time.sleep(0.05)
        assert worker.poll() is None, "the run ended before the kill"
        (run,) = instance.get_runs()
        step = _step_pid(instance, run.run_id)
        assert step is not None and _running(step), "no step process is crawling"
        os.kill(worker.pid, signal.SIGKILL)  # the worker alone, as the OOM killer or `kill -9 <pid>` does
        worker.wait()
        # the step ends either way, killed with its worker or (before) after finishing its crawl as an orphan:
        # what it recorded is final once it is gone
        gone = time.monotonic() + 120
        while time.monotonic() < gone and _running(step):
            time.sleep(0.05)
        assert not _running(step), "the step process outlived its run worker by two minutes"
        return run.run_id, step
    finally:
        try:
            os.killpg(worker.pid, signal.SIGKILL)  # whatever of the run is left (the step, its crawl)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("start", ["spawn", "forkserver"])
def test_a_killed_run_worker_takes_its_step_processes_with_it(tmp_path, setup, start):
    """With Dagster's default start method (spawn: the run worker is the step's parent) and with forkserver
    (the fork server is): the killed run records no materialisation and no step success after the kill."""
    instance, key, env = setup
    run_id, _ = _kill_the_worker_mid_crawl(tmp_path, instance, key, env, start)
    assert not _events(instance, run_id, DagsterEventType.ASSET_MATERIALIZATION), \
        "the orphaned step recorded materialisations under the killed run"
    assert not _events(instance, run_id, DagsterEventType.STEP_SUCCESS)


def test_the_next_run_finishes_the_crawl_under_its_own_id(tmp_path, setup):
    """After the kill, the killed run is marked failed (assets/stale_runs.py, as the CLI and the sensor do) and
    the next run crawls the week to its end: the week's four tables are materialised by it, none by the killed
    run."""
    instance, key, env = setup
    killed, _ = _kill_the_worker_mid_crawl(tmp_path, instance, key, env, "spawn")
    assert fail_gone_runs(instance) == [killed]
    # in process: the asset checks' steps each in a process of their own would double the test's time
    done = subprocess.run([sys.executable, str(tmp_path / "worker.py"), "crawl_job", key, "in_process"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = {r.run_id: r for r in instance.get_runs()}
    (after,) = set(runs) - {killed}
    assert runs[killed].status == DagsterRunStatus.FAILURE and runs[after].status == DagsterRunStatus.SUCCESS
    assert not _events(instance, killed, DagsterEventType.ASSET_MATERIALIZATION)
    made = {r.event_log_entry.dagster_event.asset_key.to_user_string()
            for r in _events(instance, after, DagsterEventType.ASSET_MATERIALIZATION)}
    assert made == {"weekly_products", "weekly_looks", "weekly_crawl_log", "weekly_image_downloads"}


class _Context:
    """What ``die_with_run_worker`` reads of a resource's ``InitResourceContext``."""

    def __init__(self, instance, run_id: str):
        self.instance, self.dagster_run = instance, instance.get_run_by_id(run_id)


def _arm_in_child(ref, run_id: str, out) -> None:
    with DagsterInstance.from_ref(ref) as instance:
        out.put(step_process.die_with_run_worker(_Context(instance, run_id)))


def _arm_in_a_child(instance, run_id: str):
    """What ``die_with_run_worker`` returns in a process this one starts with ``multiprocessing`` (spawn)."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    child = ctx.Process(target=_arm_in_child, args=(instance.get_ref(), run_id, out))
    child.start()
    try:
        return out.get(timeout=120)
    finally:
        child.join(30)
        assert child.exitcode == 0


def test_only_a_step_process_of_the_multiprocess_executor_is_tied_to_its_parent(tmp_path):
    """A process started by ``multiprocessing`` is tied to its parent only when the run's engine event names the
    parent as the process running its multiprocess executor. Not a run worker, which the code server starts so
    (reloading the code server must not kill runs), nor a process without a ``multiprocessing`` parent (a
    ``lookbench build``, whose steps run in its own process)."""
    (tmp_path / "dagster").mkdir()
    instance = DagsterInstance.local_temp(str(tmp_path / "dagster"))
    try:
        run_id = make_new_run_id()
        run = instance.add_run(DagsterRun(job_name="release_job", run_id=run_id, status=DagsterRunStatus.STARTED))
        assert step_process.die_with_run_worker(_Context(instance, run_id)) is None  # no multiprocessing parent
        assert step_process.executor_pids(instance, run_id) == set()
        assert _arm_in_a_child(instance, run_id) is None  # this process ran no executor of the run
        instance.report_engine_event(
            f"Executing steps using multiprocess executor: parent process (pid: {os.getpid()})", run,
            EngineEventData.multiprocess(os.getpid()))
        assert step_process.executor_pids(instance, run_id) == {os.getpid()}
        assert _arm_in_a_child(instance, run_id) == os.getpid()  # a step process of this (pretend) run worker
    finally:
        instance.dispose()
