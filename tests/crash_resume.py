"""Resume the test suite after the test process itself crashed (a pytest plugin; `.ci/run` uses it).

A native crash (faulthandler's "Fatal Python error: Segmentation fault" in a library's own thread) kills pytest with
no summary. `.ci/run` runs the suite with pytest-reportlog's ``--report-log=FILE`` (one JSON object per line, written
and flushed as each test phase ends) and, when the process crashed, runs the README's test command once more with
``LOOKBENCH_TEST_RESUME=FILE``. Then this plugin:

- deselects every test whose teardown report is in FILE (it finished in the crashed run; its outcome counts);
- runs the rest, the test that was running at the crash first among them as collected;
- fails the session when FILE holds a failed report (any phase, or a collection error), naming those tests with the
  place and message of the failure, so a test that failed before the crash fails CI even though it is not run again
  (one whose teardown the crash cut is run again, and its recorded failure still counts);
- says in the summary which test was running when the process died (for a crash in a fixture's setup, which leaves
  no report, the first test not finished).

When every test had finished before the crash (it came at the session's end), the resumed session deselects them
all and passes unless one had failed.

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
    failed: dict[str, str] = field(default_factory=dict)  # node id -> "path:line: message" of its first failure
    unfinished: list[str] = field(default_factory=list)


def read_report_log(path: Path) -> CrashedRun:
    """Read a pytest-reportlog file (JSON lines) of a run that crashed.

    The last line may be cut by the crash and is then ignored; any other line that is not a JSON object raises
    ``pytest.UsageError``, as do a missing file, a log with no ``SessionStart`` record (pytest never ran: nothing to
    resume) and a log whose run finished (a ``SessionFinish`` record).
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise pytest.UsageError(f"{ENV}={path}: cannot read the crashed run's report log: {e}") from None
    run, started, session_started = CrashedRun(), [], False
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
        session_started = session_started or kind == "SessionStart"
        if kind == "SessionFinish":
            raise pytest.UsageError(f"{ENV}={path}: that run finished (exit status {rec.get('exitstatus')}); "
                                    "only a crashed run is resumed")
        if kind not in ("TestReport", "CollectReport"):
            continue
        nodeid = str(rec.get("nodeid", "")) or "<collection>"
        if rec.get("outcome") == "failed" and nodeid not in run.failed:
            run.failed[nodeid] = f"{rec.get('when') or 'collect'}: {_reason(rec.get('longrepr'))}"
        if kind == "TestReport":
            if rec.get("when") == "setup":
                started.append(nodeid)
            elif rec.get("when") == "teardown":
                run.finished.add(nodeid)
    if not session_started:
        raise pytest.UsageError(f"{ENV}={path}: no SessionStart record: pytest did not start, nothing to resume")
    run.unfinished = [n for n in dict.fromkeys(started) if n not in run.finished]
    return run


def _reason(longrepr) -> str:
    """A failure's location and message from a serialized report's ``longrepr`` (a dict, a string or null)."""
    if isinstance(longrepr, dict):
        crash = longrepr.get("reprcrash") or {}
        if crash:
            return f"{crash.get('path')}:{crash.get('lineno')}: {crash.get('message')}"
        longrepr = longrepr.get("reprtraceback") or longrepr
    text = str(longrepr or "no details recorded").strip().splitlines()
    return text[-1] if text else "no details recorded"


class CrashResume:
    """The plugin object registered by :func:`register`."""

    def __init__(self, path: Path):
        self.path = path
        self.run = read_report_log(path)
        self.deselected = 0
        self.crashed_in = ", ".join(self.run.unfinished)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        done = [i for i in items if i.nodeid in self.run.finished]
        if done:
            config.hook.pytest_deselected(items=done)
            items[:] = [i for i in items if i.nodeid not in self.run.finished]
        self.deselected = len(done)
        if not self.crashed_in:  # a crash in a test's setup leaves no report for it: the first test not finished
            self.crashed_in = f"{items[0].nodeid} (or its setup)" if items else "(after the last test)"

    def pytest_sessionfinish(self, session, exitstatus):
        if self.run.failed and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        elif session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and self.deselected:
            session.exitstatus = pytest.ExitCode.OK  # every test had finished before the crash

    def pytest_terminal_summary(self, terminalreporter):
        tr = terminalreporter
        tr.write_sep("=", "resumed after a crash of the test process", yellow=True)
        tr.write_line(f"report log of the crashed run: {self.path}")
        tr.write_line(f"running when the process died: {self.crashed_in}")
        tr.write_line(f"finished in the crashed run and not run again: {self.deselected}")
        if self.run.failed:
            tr.write_line(f"FAILED in the crashed run ({len(self.run.failed)}), so this session fails:", red=True)
            for nodeid, reason in self.run.failed.items():
                tr.write_line(f"FAILED {nodeid} - {reason}", red=True)


def register(config) -> None:
    """Register the plugin when ``LOOKBENCH_TEST_RESUME`` names a report log; otherwise do nothing."""
    path = os.environ.get(ENV)
    if path and not config.pluginmanager.has_plugin("lookbench-crash-resume"):
        config.pluginmanager.register(CrashResume(Path(path)), "lookbench-crash-resume")


def pytest_configure(config):
    """Entry point when loaded with ``-p crash_resume`` (tests/conftest.py calls :func:`register` itself)."""
    register(config)
