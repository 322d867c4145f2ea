"""What is kept so that nothing is asked or fitted twice: :func:`cache_key` and :class:`ResponseCache` (every
validated answer, in SQLite), and :class:`FittedCache` (fitted images in memory, least recently used first out).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .fit import PreparedImage


def cache_key(kind: str, image_sha256: str, box: Sequence[float] | None, model: str, prompt_version: str,
              taxonomy_version: str, extra: Any = None) -> str:
    """The cache key of one request: sha256 of the JSON of (kind, image sha256, box, model, prompt version,
    taxonomy version, extra) where ``extra`` is what else the question depends on (the category; the labels a
    judge verifies)."""
    box_l = None if box is None else [round(float(v), 3) for v in box]
    blob = json.dumps([kind, image_sha256, box_l, model, prompt_version, taxonomy_version, extra],
                      sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


class ResponseCache:
    """Validated model answers on disk (SQLite in WAL mode; each answer committed when it arrives, so a crash loses
    at most the requests in flight). ``path=None`` keeps them in memory only.

    Tables: ``responses(key, kind, image_sha256, box, model, prompt_version, taxonomy_version, extra, response,
    server_version, created_at)`` and ``failures(key, kind, reason, attempts, at)`` (a log; failures are retried
    by the next run).
    """

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path) if self.path else ":memory:", isolation_level=None,
                                   check_same_thread=False)
        self._lock = threading.Lock()
        with self._lock:
            if self.path:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, kind TEXT, image_sha256 TEXT, box TEXT, "
                "model TEXT, prompt_version TEXT, taxonomy_version TEXT, extra TEXT, response TEXT NOT NULL, "
                "server_version TEXT, created_at TEXT)")
            self._db.execute("CREATE TABLE IF NOT EXISTS failures (key TEXT, kind TEXT, reason TEXT, attempts INTEGER, "
                             "at TEXT)")

    def get(self, key: str) -> tuple[dict, str | None] | None:
        """``(answer, server_version)`` stored for ``key``, or None."""
        with self._lock:
            row = self._db.execute("SELECT response, server_version FROM responses WHERE key = ?", (key,)).fetchone()
        return (json.loads(row[0]), row[1]) if row else None

    def put(self, key: str, answer: dict, *, kind: str, image_sha256: str, box: Sequence[float] | None, model: str,
            prompt_version: str, taxonomy_version: str, extra: Any, server_version: str | None) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO responses VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (key, kind, image_sha256, json.dumps(list(box) if box is not None else None), model, prompt_version,
                 taxonomy_version, json.dumps(extra, sort_keys=True, ensure_ascii=False),
                 json.dumps(answer, sort_keys=True, ensure_ascii=False), server_version,
                 datetime.now(timezone.utc).isoformat()))

    def log_failure(self, key: str, kind: str, reason: str, attempts: int) -> None:
        with self._lock:
            self._db.execute("INSERT INTO failures VALUES (?,?,?,?,?)",
                             (key, kind, reason, attempts, datetime.now(timezone.utc).isoformat()))

    def count(self, kind: str | None = None) -> int:
        with self._lock:
            q = "SELECT COUNT(*) FROM responses" + (" WHERE kind = ?" if kind else "")
            return self._db.execute(q, (kind,) if kind else ()).fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()


class FittedCache:
    """Fitted images (:class:`PreparedImage`) keyed by (image sha256, box, token budget), at most ``max_bytes`` of
    data URLs, the least recently used dropped first. ``hits`` / ``misses`` count look-ups."""

    def __init__(self, max_bytes: int):
        self.max_bytes, self.bytes, self.hits, self.misses = max_bytes, 0, 0, 0
        self._items: OrderedDict[tuple, PreparedImage] = OrderedDict()

    def get(self, key: tuple) -> PreparedImage | None:
        p = self._items.get(key)
        if p is None:
            self.misses += 1
            return None
        self.hits += 1
        self._items.move_to_end(key)
        return p

    def put(self, key: tuple, p: PreparedImage) -> None:
        if key in self._items or len(p.data_url) > self.max_bytes:
            return
        self._items[key] = p
        self.bytes += len(p.data_url)
        while self.bytes > self.max_bytes:
            _, old = self._items.popitem(last=False)
            self.bytes -= len(old.data_url)

    def __len__(self) -> int:
        return len(self._items)
