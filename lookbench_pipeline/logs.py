"""Logs and progress.

* Every record of the ``lookbench_pipeline`` loggers carries ``run_id`` and ``stage`` from the current
  :func:`stage_context` (the Dagster assets open one per step with the Dagster run id; the CLI around a build).
* :func:`configure` writes them as text or as JSON lines (one object per record: ``ts`` (UTC, ISO 8601),
  ``level``, ``logger``, ``message``, ``run_id``, ``stage`` and any ``extra`` fields such as ``progress``), for a
  log collector on a cluster. ``$LOOKBENCH_LOG_FORMAT`` (``text`` | ``json``) chooses it where no flag does.
* :class:`Progress` reports a long stage: a tqdm bar on an interactive terminal, otherwise (Dagster steps, pods,
  JSON logs) an ``INFO`` record every ``every_frac`` of the work or ``every_s`` seconds, with done, total, rate
  (items per second) and an ETA (seconds), so the progress shows in Dagster's logs too.
* :class:`BuildTerminal` and :func:`output_to_file` make a build's terminal quiet: a line per stage, a progress
  bar, each warning once; everything else (Dagster's console, library chatter, ultralytics' training output) in
  the log file.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, TextIO

_run_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("lookbench_run_id", default=None)
_stage: contextvars.ContextVar[str | None] = contextvars.ContextVar("lookbench_stage", default=None)

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime", "run_id",
                                                                                "stage"}
log = logging.getLogger("lookbench_pipeline.progress")


@contextmanager
def stage_context(stage: str, run_id: str | None = None) -> Iterator[None]:
    """Records logged inside carry ``stage`` and ``run_id`` (the enclosing run id when None)."""
    t1 = _stage.set(stage)
    t2 = _run_id.set(run_id if run_id is not None else _run_id.get())
    try:
        yield
    finally:
        _stage.reset(t1)
        _run_id.reset(t2)


def current() -> dict[str, str | None]:
    return {"run_id": _run_id.get(), "stage": _stage.get()}


class ContextFilter(logging.Filter):
    """Puts ``run_id`` and ``stage`` of the current :func:`stage_context` on every record (keeps explicit ones)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for k, v in current().items():
            if getattr(record, k, None) is None:
                setattr(record, k, v)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage(),
            "run_id": getattr(record, "run_id", None), "stage": getattr(record, "stage", None),
        }
        out.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")})
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [run=%(run_id)s stage=%(stage)s]: %(message)s"


def configure(fmt: str | None = None, level: int | str = logging.INFO, stream: TextIO | None = None,
              logger: str = "lookbench_pipeline") -> logging.Handler:
    """Send ``logger``'s records (default: the library's) to ``stream`` (stderr) as ``fmt`` (``text`` or ``json``;
    None: ``$LOOKBENCH_LOG_FORMAT``, else text). Replaces a handler an earlier call installed. Returns it.

    Raises:
        ValueError: an unknown format.
    """
    fmt = (fmt or os.environ.get("LOOKBENCH_LOG_FORMAT") or "text").lower()
    if fmt not in ("text", "json"):
        raise ValueError(f"log format must be text or json, not {fmt!r}")
    target = logging.getLogger(logger)
    for h in list(target.handlers):
        if getattr(h, "_lookbench", False):
            target.removeHandler(h)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler._lookbench = True  # type: ignore[attr-defined]
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    target.addHandler(handler)
    target.setLevel(level)
    return handler


def json_logs() -> bool:
    return (os.environ.get("LOOKBENCH_LOG_FORMAT") or "").lower() == "json"


class Progress:
    """Progress of ``total`` units of work in ``stage``.

    ``total`` 0 means unknown (records then come every ``every_s`` seconds). ``bar``: a tqdm bar (default: when stderr is a terminal and the logs are not JSON); otherwise log records at
    most every ``every_s`` seconds or ``every_frac`` of ``total``, and one at the end. ``update(n)`` adds ``n``
    done units; use as a context manager or call ``close()``.
    """

    def __init__(self, stage: str, total: int, unit: str = "items", *, bar: bool | None = None,
                 every_s: float = 30.0, every_frac: float = 0.1, logger: logging.Logger | None = None):
        self.stage, self.total, self.unit = stage, int(total), unit
        self.done = 0
        self.t0 = self._last_t = time.monotonic()
        self._last_done = 0
        self.every_s, self.every_frac = every_s, every_frac
        self.log = logger or log
        self._closed = False
        if bar is None:
            bar = sys.stderr.isatty() and not json_logs()
        self.bar = None
        if bar:
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, unit=unit, desc=stage, leave=False)

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _emit(self, final: bool = False) -> None:
        elapsed = time.monotonic() - self.t0
        rate = self.done / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 and self.total else None
        pct = 100.0 * self.done / self.total if self.total else 100.0
        # an unknown total (0) prints the count alone: "40 files (2.0 files/s)", never "40/0"
        done = f"{self.done}/{self.total} {self.unit} ({pct:.0f}%, " if self.total else f"{self.done} {self.unit} ("
        self.log.info("%s: %s%.1f %s/s%s)", self.stage, done, rate,
                      self.unit, "" if final or eta is None else f", ~{eta:.0f} s left",
                      extra={"progress": {"done": self.done, "total": self.total, "unit": self.unit,
                                          "rate_per_s": round(rate, 3), "eta_s": None if eta is None else round(eta),
                                          "elapsed_s": round(elapsed, 3), "final": final}})

    def update(self, n: int = 1) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            return
        now = time.monotonic()
        step = max(1, int(self.total * self.every_frac)) if self.total else float("inf")  # total 0: unknown
        if now - self._last_t >= self.every_s or self.done - self._last_done >= step:
            self._last_t, self._last_done = now, self.done
            if self.done < self.total or not self.total:
                self._emit()

    def set(self, done: int) -> None:
        """Set the done count (for callbacks that report ``(done, total)``)."""
        self.update(done - self.done)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        self._emit(final=True)


# ---------------------------------------------------------------------------------------------------------------
# The build's terminal


@contextmanager
def output_to_file(path: str | os.PathLike) -> Iterator[tuple[TextIO, TextIO]]:
    """Send everything this process writes to stdout and stderr (file descriptors 1 and 2: Python, C libraries,
    Dagster's console logger, ultralytics, child processes alike) to ``path`` (appended) while inside; yields
    line-buffered text streams on the original stdout and stderr (the terminal). Restored on exit, also on error.

    Raises:
        OSError: ``path`` cannot be opened.
    """
    from pathlib import Path

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    log_file = open(path, "ab")
    for s in (sys.stdout, sys.stderr):
        s.flush()
    saved = os.dup(1), os.dup(2)
    out = os.fdopen(os.dup(saved[0]), "w", buffering=1, encoding="utf-8", errors="replace")
    err = os.fdopen(os.dup(saved[1]), "w", buffering=1, encoding="utf-8", errors="replace")
    py_streams = sys.stdout, sys.stderr
    try:
        os.dup2(log_file.fileno(), 1)
        os.dup2(log_file.fileno(), 2)
        # Python's own streams too, in case they were replaced by objects that do not write to fds 1 and 2
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
        yield out, err
    finally:
        for s in (sys.stdout, sys.stderr):
            try:
                s.flush()
            except (OSError, ValueError):
                pass
        sys.stdout, sys.stderr = py_streams
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (out, err, log_file):
            f.close()
        for fd in saved:
            os.close(fd)


_DICT = re.compile(r"\{.*\}", re.S)


def compact(message: str, width: int | None = None) -> str:
    """The first line of a stage's summary message, its ``{key: value}`` counts shown as ``key value, …`` (nested
    ones left out), cut to ``width`` characters with an ellipsis (None: whole; a stage's line is wrapped instead,
    :func:`wrap_line`)."""
    import ast

    line = (message or "").strip().splitlines()[0] if (message or "").strip() else ""
    m = _DICT.search(line)
    if m:
        try:
            d = ast.literal_eval(m.group(0))
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            d = None
        if isinstance(d, dict):
            flat = ", ".join(f"{k} {v}" for k, v in d.items() if not isinstance(v, (dict, list, tuple)))
            line = (line[: m.start()] + flat + line[m.end():]).strip()
    return line if width is None or len(line) <= width else line[: max(0, width - 1)] + "…"


def wrap_line(head: str, text: str, tail: str, width: int) -> list[str]:
    """``head + text + tail`` in lines of at most ``width`` columns (at least 40 for the text): ``text`` wrapped
    at spaces (not between a name and its count), never cut, its continuation lines indented under its start;
    ``tail`` ends the last line. A single word longer than a line (a long path) stays whole on a line of its own. A
    head that leaves the text less than 40 columns is a line of its own, the text under it, indented."""
    import textwrap

    if width - len(head) < 40 and head.strip():  # a long head (a check's step name): the text on the next lines
        return [head.rstrip(), *wrap_line(" " * 6, text, tail, width)]
    avail = max(40, width - len(head))
    text = re.sub(r" (?=\d)", "\x00", text)  # a count stays on the line of its name ("pages 64")
    glued = text + tail.replace(" ", "\x00")  # the tail moves to the next line with the last word, never alone
    lines = textwrap.wrap(glued, avail, break_long_words=False, break_on_hyphens=False) or [""]
    if len(lines[-1]) > avail:  # a long last word and a long tail: the tail on a line of its own
        lines = textwrap.wrap(text, avail, break_long_words=False, break_on_hyphens=False) or [""]
        lines.append(tail.strip() if len(lines[-1]) + len(tail) > avail else lines.pop() + tail)
    lines = [line.replace("\x00", " ") for line in lines]
    return [head + lines[0], *(" " * len(head) + line for line in lines[1:])]


_NOT_EXECUTING = re.compile(r"Dependencies for step (\S+?)(?: failed: \[.*?\])?(?: were not executed: \[.*?\])?\. "
                            r"Not executing\.?\s*$", re.S)
"""Dagster's record of a step it abandons because a step before it failed or was itself abandoned (dagster
``_core/execution/plan/active.py``); one per downstream step, so the terminal gathers them into one line."""


_CHECK_NAME = re.compile(r"check (\S+) failed\b")
"""A failed check's line (``assets.runner.check_failure_line``): ``check <asset>/<name> failed (<severity>)...``."""

_STEP_FAILED = re.compile(r'Execution of step "[^"]*" failed\.?$')
"""Dagster's message for a failed step, which names no check: a check's step says which of its checks failed."""


def _warning_key(text: str) -> str:
    """A warning's text without a short ``label:`` prefix, lowercased (two records of one warning compare alike)."""
    t = " ".join(text.split()).lower()
    head, sep, rest = t.partition(": ")
    return rest if sep and len(head.split()) <= 3 and "(" not in head else t


def log_line(text: str) -> str:
    """``text`` as a build log file's line of our own: ``<UTC time> +0000 lookbench: <text>\\n`` (the time as
    Dagster's console writes its own, so the two sort together)."""
    from datetime import datetime, timezone

    return f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M:%S} +0000 lookbench: {text}\n"


class BuildTerminal(logging.Handler):
    """What a build shows on the terminal (``lookbench demo`` / ``build`` / ``backfill`` without ``--verbose``;
    the rest goes to the log file, :func:`output_to_file`):

    * one line per finished stage: its name, the first line of the first summary message the stage itself logged
      (its counts: ``assets.common.summary``; a ``{key: value}`` dict shown as ``key value``; the library's records
      that Dagster relays are not summaries), its duration; wrapped onto indented lines when it is wider than
      ``width``, never cut, so no count is lost; asset checks counted per run; a failed stage or asset check on a
      line of its own: a failed check's line (:meth:`check_failed`) whole, wrapped, and its step's ``FAILED`` line
      naming the check rather than Dagster's ``Execution of step "…" failed.``;
    * while a stage runs, one progress bar (tqdm, on a terminal only): the stage's progress records
      (:class:`Progress`) when it reports any, else its elapsed time;
    * each warning once, on one line (one longer than three terminal lines: its start, saying that the whole text
      is in the log file, where it is written whole): a library record and the Dagster record of the same warning in the same stage (their
      texts alike, difflib ratio >= 0.5) are shown once; ``notes`` adds a label to a stage's line (the demo's
      deliberate faults), ``expected`` labels warnings that contain one of its keys;
    * the steps Dagster did not run because one before them failed, gathered on one line at the end of the run,
      not a warning each.

    Fed by :meth:`event` (the Dagster run's events as plain values, from ``assets/runner.py``) and, as a logging
    handler on the library's logger, by its warning and progress records. Writes no ANSI codes unless ``bars``.
    ``log``: a stream that also gets every line shown (not the bars), each prefixed ``<UTC time> lookbench:``, so
    that the log file holds the stage lines, the warnings and the failed asset checks in order with the rest.
    """

    def __init__(self, out: TextIO, err: TextIO, *, bars: bool = False, width: int = 110,
                 notes: dict[str, str] | None = None, expected: dict[str, str] | None = None,
                 log: TextIO | None = None):
        super().__init__(logging.INFO)
        self.out, self.err, self.bars, self.width, self.log = out, err, bars, width, log
        self.notes, self.expected = notes or {}, expected or {}
        self.started: dict[str, float] = {}
        self.summary: dict[str, str] = {}
        self.shown: dict[str | None, list[str]] = {}
        self.bar = None
        self.bar_stage: str | None = None
        self.failed: list[str] = []
        self.check_steps: set[str] = set()
        self.materialized: set[str] = set()  # steps that materialized an asset: always listed
        self.library_messages: set[str] = set()  # the library's own records, which Dagster may also relay
        self.checks = {"passed": 0, "failed": 0}
        self.not_run: list[str] = []  # steps Dagster abandoned after a failure upstream (:data:`_NOT_EXECUTING`)
        self.failed_check_names: dict[str, list[str]] = {}  # step -> its failed checks (``<asset>/<name>``)

    # -- output
    def _write(self, stream: TextIO, text: str, log: bool = True) -> None:
        if self.bar is not None:
            self.bar.clear()
        stream.write(text + "\n")
        stream.flush()
        if self.bar is not None:
            self.bar.refresh()
        if self.log is not None and log:
            self.log.write(log_line(text.strip()))
            self.log.flush()

    def _close_bar(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar, self.bar_stage = None, None

    def _open_bar(self, stage: str, total: int | None = None, unit: str = "it") -> None:
        if not self.bars:
            return
        from tqdm import tqdm

        self._close_bar()
        self.bar = tqdm(total=total, desc=f"  {stage}", unit=unit, file=self.err, leave=False, dynamic_ncols=True)
        self.bar_stage = stage

    def warning(self, text: str, stage: str | None = None) -> None:
        """Show ``text`` once (see the class docstring)."""
        import difflib

        key = _warning_key(text)
        for seen_stage, keys in self.shown.items():
            for k in keys:
                if k == key or (seen_stage == stage and difflib.SequenceMatcher(None, k[:80], key[:80]).ratio() >= 0.5):
                    return
        self.shown.setdefault(stage, []).append(key)
        label = next((v for k, v in self.expected.items() if k in text), None)
        first = " ".join(text.split())
        head = f"  warning{f' ({label})' if label else ''}: "
        if len(first) > 3 * self.width:  # a long one (a traceback, a dump) whole in the log file, its start here
            if self.log is not None:
                self.log.write(log_line(f"{head.strip()} {first}"))
            first = first[: 3 * self.width].rsplit(" ", 1)[0] + " … (whole in the log file)"
        self._write(self.err, head + first)

    def check_failed(self, text: str, stage: str | None = None) -> None:
        """A failed asset check (``check <asset>/<name> failed (<severity>): key=value, ...``) as a warning,
        always shown and whole, wrapped onto indented lines when wider than the terminal (never cut, never taken
        for a repeat of another warning): which check failed and why is what the data engineer has to read."""
        self.shown.setdefault(stage, []).append(_warning_key(text))
        m = _CHECK_NAME.match(text)
        if m and stage:
            self.failed_check_names.setdefault(stage, []).append(m.group(1))
        label = next((v for k, v in self.expected.items() if k in text), None)
        self._wrapped(f"  warning{f' ({label})' if label else ''}: ", " ".join(text.split()))

    def _wrapped(self, head: str, text: str) -> None:
        """``head + text`` on the terminal wrapped onto indented lines, never cut (:func:`wrap_line`), and as one
        line in the log file, however many it takes on the terminal."""
        if self.log is not None:
            self.log.write(log_line(head.strip() + " " + text))
            self.log.flush()
        for line in wrap_line(head, text, "", self.width):
            self._write(self.err, line, log=False)

    # -- Dagster events
    def event(self, kind: str, step: str | None, level: int, message: str) -> None:
        """One event of a Dagster run (``assets.runner.plain_event``), or ``NOTE``: a line of the runner's own,
        shown as it is (``assets.runner`` marked a run whose process is gone failed)."""
        if kind == "STEP_START" and step:
            self.started[step] = time.monotonic()
            self._open_bar(step)
        elif kind == "LOG" and step:
            m = _NOT_EXECUTING.match(message.strip()) if level >= logging.WARNING else None
            if m:
                self.not_run.append(m.group(1))
            elif level >= logging.WARNING:
                self.warning(message, step)
            elif level >= logging.INFO and step not in self.summary and message.strip() \
                    and message not in self.library_messages:
                self.summary[step] = message  # the step's own first summary (not a relayed progress record)
        elif kind == "ASSET_MATERIALIZATION" and step:
            self.materialized.add(step)
        elif kind in ("ASSET_CHECK_EVALUATION", "CHECK_FAILED"):
            if step:
                self.check_steps.add(step)
            self.checks["passed" if kind == "ASSET_CHECK_EVALUATION" else "failed"] += 1
            if kind == "CHECK_FAILED" and message:
                self.check_failed(message, step)
        elif kind in ("RUN_SUCCESS", "RUN_FAILURE"):
            self._close_bar()
            if self.not_run:
                for line in wrap_line("  not run ", f"(a stage or blocking asset check before them failed): "
                                      f"{', '.join(self.not_run)}", "", self.width):
                    self._write(self.err, line)
                self.not_run = []
            if sum(self.checks.values()):
                self._write(self.out, f"  asset checks: {self.checks['passed']} passed"
                            + (f", {self.checks['failed']} failed (above)" if self.checks["failed"] else ""))
            self.checks = {"passed": 0, "failed": 0}
        elif kind == "STEP_SUCCESS" and step:
            self._close_bar()
            if step in self.check_steps and step not in self.summary and step not in self.materialized:
                return  # an asset check's own step: counted, not listed
            took = time.monotonic() - self.started.get(step, time.monotonic())
            note = self.notes.get(step)
            head = f"  done {step:<20} "
            tail = f"  ({took:.0f} s)" + (f"  [{note}]" if note else "")
            for line in wrap_line(head, compact(self.summary.get(step, "")), tail, self.width):
                self._write(self.out, line)
        elif kind == "NOTE":  # the runner's own line, outside any run (a stale run marked failed)
            self._write(self.err, f"  {message}")
        elif kind == "STEP_FAILURE" and step:
            self._close_bar()
            self.failed.append(step)
            checks = self.failed_check_names.get(step)
            text = (f"check{'s' if len(checks) > 1 else ''} {', '.join(checks)} failed (above)"
                    if checks and _STEP_FAILED.match(message.strip()) else compact(message))
            self._wrapped(f"  FAILED {step}: ", text)  # whole: which check, and why

    # -- library records
    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.library_messages.add(record.getMessage())
            prog = getattr(record, "progress", None)
            stage = getattr(record, "stage", None) or current()["stage"]
            if record.levelno >= logging.WARNING:
                self.warning(record.getMessage(), stage)
            elif isinstance(prog, dict) and self.bars and stage:
                if self.bar is None or self.bar_stage != stage or (prog.get("total") and self.bar.total is None):
                    self._open_bar(stage, prog.get("total") or None, prog.get("unit") or "it")
                if self.bar is not None:
                    self.bar.n = int(prog.get("done") or 0)
                    self.bar.refresh()
        except Exception:  # a display problem must never break a build
            self.handleError(record)

    def close(self) -> None:
        self._close_bar()
        super().close()
