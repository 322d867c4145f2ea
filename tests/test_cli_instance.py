"""CLI runs record their run history where `make dev` reads it: with DAGSTER_HOME unset, a run started from the
checkout goes to the checkout's instance (the Makefile's DAGSTER_HOME), elsewhere to ~/.lookbench/dagster."""

from __future__ import annotations

import shutil
from pathlib import Path

from dagster import DagsterInstance

from assets import runner
from tiny_inputs import tiny_job

ROOT = Path(__file__).resolve().parents[1]


def test_a_cli_run_from_the_checkout_is_listed_by_its_instance(tmp_path, monkeypatch):
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for name in ("dagster.yaml", "workspace.yaml"):  # the project's own instance settings, as in a checkout
        shutil.copy(ROOT / name, checkout / name)
    monkeypatch.chdir(checkout)
    # _instance sets DAGSTER_HOME itself: registered here so that the test's end restores the variable's absence
    monkeypatch.setenv("DAGSTER_HOME", "")
    monkeypatch.delenv("DAGSTER_HOME")
    monkeypatch.delenv(runner.EPHEMERAL_ENV, raising=False)
    instance = runner._instance(None)
    try:
        assert not instance.is_ephemeral
        assert Path(instance.root_directory).resolve().is_relative_to(checkout.resolve())  # .dagster/ there
        result = runner._execute(tiny_job, instance)
        assert result.success
    finally:
        instance.dispose()
    # what `make dev` (DAGSTER_HOME = the checkout) opens afterwards lists that run
    monkeypatch.setenv("DAGSTER_HOME", str(checkout))
    with DagsterInstance.get() as later:
        assert result.run_id in [r.run_id for r in later.get_runs()]


def test_outside_a_checkout_runs_go_to_the_user_instance(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(runner, "USER_INSTANCE", tmp_path / "home/.lookbench/dagster")
    assert runner.default_instance_dir() == tmp_path / "home/.lookbench/dagster"
    assert "telemetry" in (tmp_path / "home/.lookbench/dagster/dagster.yaml").read_text()


def test_tests_and_an_explicit_flag_stay_ephemeral(monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setenv(runner.EPHEMERAL_ENV, "1")
    assert runner._instance(None).is_ephemeral
