"""`.ci/run` resumes the suite once after the test process crashes (tests/crash_resume.py).

Each test runs a small suite in a subprocess the way `.ci/run` runs the real one: first with pytest-reportlog's
``--report-log`` and a test that really segfaults (``faulthandler._sigsegv``), then with ``LOOKBENCH_TEST_RESUME``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from crash_resume import read_report_log

TESTS = Path(__file__).resolve().parent

CRASH_ONCE = '''
import faulthandler, pathlib
def test_crash():
    marker = pathlib.Path(__file__).with_name("crashed-once")
    if not marker.exists():
        marker.write_text("1")
        faulthandler._sigsegv()
'''


def _suite(root: Path, first: str) -> None:
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "test_a.py").write_text(first)
    (root / "test_b.py").write_text(CRASH_ONCE)
    (root / "test_c.py").write_text("def test_after():\n    assert True\n")


def _pytest(root: Path, *args: str, resume: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "LOOKBENCH_TEST_RESUME")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(TESTS), env.get("PYTHONPATH")] if p)
    if resume is not None:
        env["LOOKBENCH_TEST_RESUME"] = str(resume)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "crash_resume",
                           *args], cwd=root, env=env, capture_output=True, text=True, timeout=120)


def _outcomes(out: str) -> str:
    """The counts of pytest's last summary line, e.g. ``2 passed, 1 deselected``."""
    last = [line for line in out.splitlines() if re.search(r" in [0-9.]+s", line)][-1]
    return re.sub(r" in [0-9.]+s.*$", "", last).strip("= ")


def test_a_crashed_run_resumes_with_the_tests_it_did_not_finish(tmp_path):
    _suite(tmp_path, "def test_ok():\n    assert True\n")
    log = tmp_path / "report.jsonl"
    first = _pytest(tmp_path, f"--report-log={log}")
    assert first.returncode != 0 and "Fatal Python error" in first.stdout + first.stderr
    assert '"SessionFinish"' not in log.read_text()  # what .ci/run checks before resuming

    second = _pytest(tmp_path, resume=log)
    out = second.stdout
    assert second.returncode == 0, out + second.stderr
    assert _outcomes(out) == "2 passed, 1 deselected"
    assert "running when the process died: test_b.py::test_crash" in out
    assert "finished in the crashed run and not run again: 1" in out


FAILING = '''
import pytest

def test_fails():
    assert 1 == 2, "the call failed"

@pytest.fixture
def broken_setup():
    raise RuntimeError("the setup failed")

def test_setup_error(broken_setup):
    pass

@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("the teardown failed")

def test_teardown_error(broken_teardown):
    pass

@pytest.mark.xfail(strict=True)
def test_strict_xpass():
    pass

@pytest.mark.xfail
def test_plain_xfail():
    assert False
'''


def test_a_test_that_failed_before_the_crash_fails_the_resumed_session(tmp_path):
    _suite(tmp_path, FAILING)
    log = tmp_path / "report.jsonl"
    assert _pytest(tmp_path, f"--report-log={log}").returncode != 0

    second = _pytest(tmp_path, resume=log)
    out = second.stdout
    assert second.returncode == pytest.ExitCode.TESTS_FAILED, out + second.stderr
    assert _outcomes(out) == "2 passed, 5 deselected"  # the finished tests are not rerun ...
    assert "FAILED in the crashed run (4)" in out  # ... and their failures, in any phase, still fail the session
    for name, why in [("test_fails", "the call failed"), ("test_setup_error", "the setup failed"),
                      ("test_teardown_error", "the teardown failed"), ("test_strict_xpass", "XPASS(strict)")]:
        assert any(f"FAILED test_a.py::{name} - " in line and why in line for line in out.splitlines()), (name, out)
    assert "test_plain_xfail" not in out


def test_a_crash_in_a_fixture_names_the_first_test_not_finished(tmp_path):
    _suite(tmp_path, "def test_ok():\n    assert True\n")
    (tmp_path / "test_b.py").write_text('''
import faulthandler, pathlib, pytest

@pytest.fixture(scope="module")
def crashes_once():
    marker = pathlib.Path(__file__).with_name("crashed-once")
    if not marker.exists():
        marker.write_text("1")
        faulthandler._sigsegv()

def test_needs_it(crashes_once):
    pass
''')
    log = tmp_path / "report.jsonl"
    assert _pytest(tmp_path, f"--report-log={log}").returncode != 0
    second = _pytest(tmp_path, resume=log)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "running when the process died: test_b.py::test_needs_it (or its setup)" in second.stdout


def _finished_run(root: Path) -> Path:
    """Run a one-test suite that passes, with a report log; its path."""
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "test_c.py").write_text("def test_after():\n    assert True\n")
    log = root / "report.jsonl"
    assert _pytest(root, f"--report-log={log}").returncode == 0
    return log


def test_a_crash_after_the_last_test_passes_when_every_test_had_passed(tmp_path):
    log = _finished_run(tmp_path)
    cut = [line for line in log.read_text().splitlines() if '"SessionFinish"' not in line]
    log.write_text("\n".join(cut) + "\n")  # as if the process died after the last teardown
    second = _pytest(tmp_path, resume=log)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "running when the process died: (after the last test)" in second.stdout


def test_a_run_that_finished_or_a_missing_log_is_not_resumed(tmp_path):
    log = _finished_run(tmp_path)
    assert '"SessionFinish"' in log.read_text()

    finished = _pytest(tmp_path, resume=log)
    assert finished.returncode == pytest.ExitCode.USAGE_ERROR
    assert "only a crashed run is resumed" in finished.stderr
    missing = _pytest(tmp_path, resume=tmp_path / "nope.jsonl")
    assert missing.returncode == pytest.ExitCode.USAGE_ERROR
    assert "cannot read the crashed run's report log" in missing.stderr


def test_a_line_cut_by_the_crash_is_ignored_and_garbage_elsewhere_is_refused(tmp_path):
    recs = [{"$report_type": "SessionStart"},
            {"$report_type": "TestReport", "nodeid": "t.py::a", "when": "setup", "outcome": "passed"},
            {"$report_type": "TestReport", "nodeid": "t.py::a", "when": "call", "outcome": "failed"},
            {"$report_type": "TestReport", "nodeid": "t.py::a", "when": "teardown", "outcome": "passed"},
            {"$report_type": "TestReport", "nodeid": "t.py::b", "when": "setup", "outcome": "passed"}]
    log = tmp_path / "r.jsonl"
    log.write_text("\n".join(json.dumps(r) for r in recs) + '\n{"$report_type": "TestRep')
    run = read_report_log(log)
    assert (run.finished, list(run.failed), run.unfinished) == ({"t.py::a"}, ["t.py::a"], ["t.py::b"])
    assert run.failed["t.py::a"] == "call: no details recorded"

    error = {"$report_type": "CollectReport", "nodeid": "t2.py", "outcome": "failed",
             "longrepr": "ImportError while importing test module\nE   ModuleNotFoundError: nope"}
    log.write_text("\n".join(json.dumps(r) for r in [recs[0], error]) + "\n")
    assert read_report_log(log).failed == {"t2.py": "collect: E   ModuleNotFoundError: nope"}

    log.write_text(json.dumps(recs[1]) + "\n")
    with pytest.raises(pytest.UsageError, match="no SessionStart record"):
        read_report_log(log)

    log.write_text("\n".join([json.dumps(recs[0]), "[1, 2]", json.dumps(recs[1])]))
    with pytest.raises(pytest.UsageError, match="line 2 is not a report-log record"):
        read_report_log(log)
