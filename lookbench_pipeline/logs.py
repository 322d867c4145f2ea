"""Logs and progress.

* Every record of the ``lookbench_pipeline`` loggers carries ``run_id`` and ``stage`` from the current
  :func:`stage_context` (the Dagster assets open one per step with the Dagster run id; the CLI around a build).
* :func:`configure` writes them as text or as JSON lines (one object per record: ``ts`` (UTC, ISO 8601),
  ``level``, ``logger``, ``message``, ``run_id``, ``stage`` and any ``extra`` fields such as ``progress``), for a
  log collector on a cluster. ``$LOOKBENCH_LOG_FORMAT`` (``text`` | ``json``) chooses it where no flag does.
* :class:`Progress` reports a long stage: a tqdm bar on an interactive terminal, otherwise (Dagster steps, pods,
  JSON logs) an ``INFO`` record every ``every_frac`` of the work or ``every_s`` seconds, with done, total, rate
  (items per second) and an ETA (seconds), so the progress shows in Dagster's logs too.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
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
