"""Resume the test suite after the test process itself crashed (a pytest plugin; `.ci/run` uses it).

A native crash (faulthandler's "Fatal Python error: Segmentation fault" in a library's own thread) kills pytest with
no summary. `.ci/run` runs the suite with pytest-reportlog's ``--report-log=FILE`` (one JSON object per line, written
and flushed as each test phase ends) and, when the process crashed, runs the README's test command once more with
``LOOKBENCH_TEST_RESUME=FILE``. Then this plugin:

- deselects every test whose teardown report is in FILE (it finished in the crashed run; its outcome counts);
- runs the rest, the test that was running at the crash first among them as collected;
- fails the session when FILE holds a failed report (any phase, or a collection error), naming those tests, so a
  test that failed before the crash fails CI even though it is not run again;
- says in the summary which test was running when the process died.

A file that cannot be read, or that ends with a session-finished record (the run did not crash), is a usage error.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ENV = "LOOKBENCH_TEST_RESUME"


@dataclass
class CrashedRun:
    """What a report log says about a run: node ids finished, failed, and started but not finished."""

    finished: set[str] = field(default_factory=set)
    failed: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)


def read_report_log(path: Path) -> CrashedRun:
    """Read a pytest-reportlog file (JSON lines) of a run that crashed.

    The last line may be cut by the crash and is then ignored; any other line that is not a JSON object raises
    ``pytest.UsageError``, as do a missing file and a log whose run finished (a ``SessionFinish`` record).
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise pytest.UsageError(f"{ENV}={path}: cannot read the crashed run's report log: {e}") from None
    run, started = CrashedRun(), []
    for n, line in enumerate(lines, 1):
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            if n == len(lines):
                break  # written when the process died
            raise pytest.UsageError(f"{ENV}={path}: line {n} is not a report-log record ({e})") from None
        kind = rec.get("$report_type")
        if kind == "SessionFinish":
            raise pytest.UsageError(f"{ENV}={path}: that run finished (exit status {rec.get('exitstatus')}); "
                                    "only a crashed run is resumed")
        if kind not in ("TestReport", "CollectReport"):
            continue
        nodeid = str(rec.get("nodeid", ""))
        if rec.get("outcome") == "failed" and nodeid not in run.failed:
            run.failed.append(nodeid or "<collection>")
        if kind == "TestReport":
            if rec.get("when") == "setup":
                started.append(nodeid)
            elif rec.get("when") == "teardown":
                run.finished.add(nodeid)
    run.unfinished = [n for n in dict.fromkeys(started) if n not in run.finished]
    return run


class CrashResume:
    """The plugin object registered by :func:`register`."""

    def __init__(self, path: Path):
        self.path = path
        self.run = read_report_log(path)
        self.deselected = 0

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        done = [i for i in items if i.nodeid in self.run.finished]
        if done:
            config.hook.pytest_deselected(items=done)
            items[:] = [i for i in items if i.nodeid not in self.run.finished]
        self.deselected = len(done)

    def pytest_sessionfinish(self, session, exitstatus):
        if self.run.failed and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        tr = terminalreporter
        tr.write_sep("=", "resumed after a crash of the test process", yellow=True)
        tr.write_line(f"report log of the crashed run: {self.path}")
        tr.write_line(f"running when the process died: {', '.join(self.run.unfinished) or '(between tests)'}")
        tr.write_line(f"finished in the crashed run and not run again: {self.deselected}")
        if self.run.failed:
            tr.write_line(f"FAILED in the crashed run ({len(self.run.failed)}), so this session fails:", red=True)
            for nodeid in self.run.failed:
                tr.write_line(f"  {nodeid}", red=True)


def register(config) -> None:
    """Register the plugin when ``LOOKBENCH_TEST_RESUME`` names a report log; otherwise do nothing."""
    path = os.environ.get(ENV)
    if path and not config.pluginmanager.has_plugin("lookbench-crash-resume"):
        config.pluginmanager.register(CrashResume(Path(path)), "lookbench-crash-resume")


def pytest_configure(config):
    """Entry point when loaded with ``-p crash_resume`` (tests/conftest.py calls :func:`register` itself)."""
    register(config)
