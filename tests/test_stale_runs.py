"""A CLI build killed with SIGKILL leaves its Dagster run STARTED in the instance (run monitoring needs the daemon,
which the CLI does not start), and `make dev` would show it running for ever: the next CLI run marks such a run
failed, with the reason, and says so on the terminal. Only runs whose process is certainly gone on this host are
marked; a run of a live process, of another host, or not started by the CLI is left alone."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRunStatus
from dagster._core.storage.dagster_run import DagsterRun
from dagster._core.utils import make_new_run_id

from assets import runner, stale_runs
from tiny_inputs import tiny_job

ROOT = Path(__file__).resolve().parents[1]


class _Stop(Exception):
    """Raised by the stubbed build in place of a whole release: the tests only need the start of a run."""


@pytest.fixture
def instance(tmp_path):
    (tmp_path / "dagster").mkdir()
    inst = DagsterInstance.local_temp(str(tmp_path / "dagster"))
    try:
        yield inst
    finally:
        inst.dispose()


def _stored_run(instance, status=DagsterRunStatus.STARTED, **tags) -> str:
    run_id = make_new_run_id()
    instance.add_run(DagsterRun(job_name="crawl_job", run_id=run_id, status=status, tags=tags))
    return run_id


def _cli_tags(pid: int, identity: str | None = None, host: str | None = None) -> dict:
    tags = {stale_runs.HOST_TAG: host or socket.gethostname(), stale_runs.PID_TAG: str(pid)}
    identity = identity if identity is not None else stale_runs.process_identity(pid)
    return {**tags, **({stale_runs.PROCESS_TAG: identity} if identity else {})}


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _start_a_build(monkeypatch, instance) -> list[tuple]:
    """``run_release`` (the CLI's entry) with the build itself stubbed out; returns the terminal's events."""
    def no_build(*a, **kw):
        raise _Stop

    monkeypatch.setattr(runner, "build_defs", no_build)
    events = []
    with pytest.raises(_Stop):
        runner.run_release(None, instance=instance, on_event=lambda *e: events.append(e))
    return events


def _failure_message(instance, run_id) -> str:
    from dagster import DagsterEventType

    records = instance.all_logs(run_id, of_type=DagsterEventType.RUN_FAILURE)
    assert len(records) == 1
    return records[0].dagster_event.message


def test_a_run_whose_process_is_gone_is_marked_failed_with_the_reason(monkeypatch, instance):
    pid = _dead_pid()
    stale = _stored_run(instance, **_cli_tags(pid, identity="boot:123"))
    not_started = _stored_run(instance, status=DagsterRunStatus.NOT_STARTED, **_cli_tags(pid, identity="boot:123"))
    events = _start_a_build(monkeypatch, instance)
    for run_id in (stale, not_started):
        assert instance.get_run_by_id(run_id).status == DagsterRunStatus.FAILURE
        reason = _failure_message(instance, run_id)
        assert f"pid {pid}" in reason and "is gone" in reason
        assert f"marked failed by the lookbench command (pid {os.getpid()})" in reason
    lines = [e[3] for e in events if e[0] == "NOTE"]
    assert f"marked run {stale} failed: its process {pid} is gone" in lines
    assert len(lines) == 2


def test_a_run_whose_pid_now_belongs_to_another_process_is_marked_failed(monkeypatch, instance):
    reused = _stored_run(instance, **_cli_tags(os.getpid(), identity="another-boot:1"))
    _start_a_build(monkeypatch, instance)
    assert instance.get_run_by_id(reused).status == DagsterRunStatus.FAILURE


def test_runs_of_a_live_process_another_host_or_not_of_the_cli_are_left_alone(monkeypatch, instance):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live_child = _stored_run(instance, **_cli_tags(sleeper.pid))
        live_self = _stored_run(instance, **_cli_tags(os.getpid()))
        no_identity = _stored_run(instance, **{k: v for k, v in _cli_tags(sleeper.pid).items()
                                               if k != stale_runs.PROCESS_TAG})
        elsewhere = _stored_run(instance, **_cli_tags(_dead_pid(), identity="boot:1", host="another-host"))
        from_the_ui = _stored_run(instance)  # no CLI tags: launched from the UI, a schedule, a sensor
        events = _start_a_build(monkeypatch, instance)
        for run_id in (live_child, live_self, no_identity, elsewhere, from_the_ui):
            assert instance.get_run_by_id(run_id).status == DagsterRunStatus.STARTED
        assert not [e for e in events if e[0] == "NOTE"]
    finally:
        sleeper.kill()
        sleeper.wait()


def test_verbose_builds_print_the_line_on_stderr(monkeypatch, instance, capsys):
    stale = _stored_run(instance, **_cli_tags(_dead_pid(), identity="boot:123"))
    monkeypatch.setattr(runner, "build_defs", lambda *a, **kw: (_ for _ in ()).throw(_Stop()))
    with pytest.raises(_Stop):
        runner.run_release(None, instance=instance)  # --verbose: no on_event
    assert f"marked run {stale} failed" in capsys.readouterr().err


def test_runs_the_cli_executes_carry_their_process(instance):
    result = runner._execute(tiny_job, instance)
    tags = instance.get_run_by_id(result.run_id).tags
    assert tags[stale_runs.HOST_TAG] == socket.gethostname()
    assert tags[stale_runs.PID_TAG] == str(os.getpid())
    assert tags.get(stale_runs.PROCESS_TAG) == stale_runs.process_identity(os.getpid())
    assert not stale_runs.process_gone(os.getpid(), tags.get(stale_runs.PROCESS_TAG))


KILLED_BUILD = textwrap.dedent("""
    import sys, time
    from dagster import DagsterInstance, job, op
    from assets import runner, stale_runs

    @op
    def _slow():
        time.sleep(120)

    @job
    def _slow_job():
        _slow()

    runner._execute(_slow_job, DagsterInstance.local_temp(sys.argv[1]))
""")


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="SIGKILL")
def test_a_build_killed_with_sigkill_is_failed_by_the_next_run(monkeypatch, instance, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", KILLED_BUILD, str(tmp_path / "dagster")], env=env)
    try:
        deadline = time.monotonic() + 120
        while not [r for r in instance.get_runs() if r.status == DagsterRunStatus.STARTED]:
            assert proc.poll() is None and time.monotonic() < deadline, "the build did not start its run"
            time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    (run,) = instance.get_runs()
    assert run.status == DagsterRunStatus.STARTED  # what the UI would show for ever
    events = _start_a_build(monkeypatch, instance)
    assert instance.get_run_by_id(run.run_id).status == DagsterRunStatus.FAILURE
    assert f"pid {proc.pid}" in _failure_message(instance, run.run_id)
    assert [e[3] for e in events if e[0] == "NOTE"] == [f"marked run {run.run_id} failed: its process {proc.pid} "
                                                         "is gone"]


def test_the_build_terminal_shows_the_line():
    import io

    from lookbench_pipeline.logs import BuildTerminal

    out, err, log = io.StringIO(), io.StringIO(), io.StringIO()
    term = BuildTerminal(out, err, log=log)
    term.event("NOTE", None, 30, "marked run abc failed: its process 12 is gone")
    assert err.getvalue() == "  marked run abc failed: its process 12 is gone\n"
    assert "marked run abc failed" in log.getvalue()  # the log file has it too


def _launched_run(instance, pid: int) -> str:
    """A STARTED run as a run launcher leaves it (no CLI tags), with Dagster's run-worker event naming ``pid``."""
    from dagster._core.events import EngineEventData

    run_id = _stored_run(instance)
    instance.report_engine_event(f"Started process for run (pid: {pid}).", instance.get_run_by_id(run_id),
                                 EngineEventData.in_process(pid))
    return run_id


def test_a_launched_run_whose_worker_died_is_failed_by_the_sensor(instance):
    """`make dev`'s run launcher cannot check a STARTED run's worker, and run monitoring leaves such a run STARTED:
    a killed release run would hold the queue's one release slot for ever. The daemon's `fail_gone_runs` sensor
    fails it; a run whose worker is alive is left alone."""
    from dagster import SkipReason, build_sensor_context

    from assets.definitions import fail_gone_runs_sensor

    dead = _launched_run(instance, _dead_pid())
    alive = _launched_run(instance, os.getpid())  # this process started before the run: it may be its worker
    result = fail_gone_runs_sensor(build_sensor_context(instance=instance))
    assert isinstance(result, SkipReason) and dead in result.skip_message
    assert instance.get_run_by_id(dead).status == DagsterRunStatus.FAILURE
    assert "its run worker" in _failure_message(instance, dead)
    # the sensor runs in Dagster's code server, not in a lookbench command: the message says which marked it
    assert f"marked failed by the fail_gone_runs sensor (Dagster's code server, pid {os.getpid()})" in \
        _failure_message(instance, dead)
    assert instance.get_run_by_id(alive).status == DagsterRunStatus.STARTED


def test_a_launched_run_whose_pid_went_to_a_younger_process_is_failed(instance):
    run_id = _stored_run(instance)
    time.sleep(stale_runs._REUSE_SLACK_S + 0.5)
    younger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        from dagster._core.events import EngineEventData

        instance.report_engine_event(f"Started process for run (pid: {younger.pid}).",
                                     instance.get_run_by_id(run_id), EngineEventData.in_process(younger.pid))
        assert stale_runs.fail_gone_runs(instance) == [run_id]
    finally:
        younger.kill()
        younger.wait()


def test_launched_runs_of_a_shared_instance_are_left_to_dagsters_run_monitoring(instance, monkeypatch):
    """On PostgreSQL the run may have run on another machine, where its pid means nothing here."""
    monkeypatch.setattr(stale_runs, "_single_host", lambda inst: False)
    run_id = _launched_run(instance, _dead_pid())
    assert stale_runs.fail_gone_runs(instance) == []
    assert instance.get_run_by_id(run_id).status == DagsterRunStatus.STARTED


def test_the_shipped_instance_files_turn_run_monitoring_on():
    import yaml
    from dagster._core.instance.config import dagster_instance_config

    for folder in (ROOT, ROOT / "deploy"):
        if folder.name == "deploy":
            continue  # dagster.postgres.yaml needs a server: tests/test_instance_postgres.py loads it
        config, _ = dagster_instance_config(str(folder))
        assert config["run_monitoring"]["enabled"] is True
    assert yaml.safe_load((ROOT / "deploy" / "dagster.postgres.yaml").read_text())["run_monitoring"]["enabled"]
