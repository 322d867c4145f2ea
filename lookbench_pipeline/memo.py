"""Skipping a stage whose inputs, code and configuration did not change: content fingerprints and the record of
what each stage last computed from which fingerprint.

A stage's **fingerprint** is the sha256 of its parts, each a digest (64 hex characters) under a name:

* ``code``: :func:`code_digest`, the library's source and package data, the callers' own source folders, and the
  name and version of every installed distribution (a new torch or ultralytics is new code);
* ``config``: :func:`json_digest` of the run's parsed configuration;
* one part per input table or value (:func:`table_digest`, :func:`json_digest`): the upstream stages' outputs;
* ``reads``: :func:`files_digest` of the files the stage reads in place (a legacy tree, detector weights, a drop
  folder), by path, size, modification and status-change time and inode (``make`` looks at the modification
  time alone).

A :class:`MemoStore` keeps, per stage and partition, the last fingerprint with the run that computed it
(``<data_dir>/memo/<stage>/<partition>.json``). A later run with the same fingerprint may reuse that run's stored
outputs instead of computing them again, after checking that they are still what that run wrote (the caller does:
this module knows nothing of where outputs are stored). Digests are one-way: equal digests mean equal content; a
different digest of equal content (a table read back in other chunks) only costs a recomputation, never a stale
result.

Knows nothing of Dagster: ``assets/reuse.py`` wires it to the assets.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa

DIGEST_VERSION = 1
"""Bumped when a digest's definition changes, so that records of the old definition never match."""

_PACKAGE = Path(__file__).resolve().parent


class _HashSink:
    """A write-only file object feeding sha256 (so a table is hashed without being copied into one buffer)."""

    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self.closed = False

    def write(self, b) -> int:
        self.h.update(b)
        return len(b)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def _plain(t: pa.DataType) -> pa.DataType:
    """``t`` with list item fields named as Arrow names them (Parquet names them ``element``), recursively."""
    if pa.types.is_list(t):
        return pa.list_(_plain(t.value_type))
    if pa.types.is_large_list(t):
        return pa.large_list(_plain(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _plain(f.type), f.nullable) for f in t])
    return t


def table_digest(table: pa.Table) -> str:
    """sha256 (hex) of ``table``'s schema and values: its Arrow IPC stream after the chunks are combined and list
    item fields renamed as Arrow names them, so the same rows give the same digest in any chunking and after a
    Parquet round trip (schema metadata is left out). Cost: one pass over the table's buffers and a copy of each
    column that has more than one chunk (about 0.3 s for 100 MB)."""
    sink = _HashSink()
    schema = pa.schema([pa.field(f.name, _plain(f.type), f.nullable) for f in table.schema])
    t = table.replace_schema_metadata(None)
    t = (t if str(schema) == str(t.schema) else t.cast(schema)).combine_chunks()  # equals() ignores item names
    with pa.ipc.new_stream(pa.PythonFile(sink, mode="w"), t.schema) as w:
        w.write_table(t)
    return sink.h.hexdigest()


def json_digest(value: Any) -> str:
    """sha256 (hex) of ``value`` as canonical JSON (sorted keys, no spaces; values JSON does not know, such as
    paths and datetimes, as ``str``): equal for a dict and its JSON file read back."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def value_digest(value: Any) -> str:
    """:func:`table_digest` of a ``pyarrow.Table``, ``"none"`` for None, else :func:`json_digest`."""
    if value is None:
        return "none"
    if isinstance(value, pa.Table):
        return table_digest(value)
    return json_digest(value)


def _walk(path: Path) -> Iterable[Path]:
    if path.is_file():
        yield path
    elif path.is_dir():
        for root, dirs, files in os.walk(path):
            dirs.sort()
            for f in sorted(files):
                yield Path(root) / f


def file_stamp(st: os.stat_result) -> str:
    """What a file is without reading it, from ``os.stat``: ``"size:mtime_ns:ctime_ns:inode"`` (bytes,
    nanoseconds since the epoch, the inode number). A file edited, replaced or copied over keeps none of them
    unchanged together: a copy that keeps the size and modification time (``cp -p``, ``rsync -t``, ``tar x``, or
    a rewrite within one second) still gets a new status-change time, which no user can set back. The one rule for
    every "unchanged, not read again" decision: stage fingerprints (:func:`files_digest`), the contamination
    index, the evaluator's verified release files, the label readers' cache."""
    return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}"


def files_digest(paths: Iterable[Path | str | None]) -> str:
    """sha256 (hex) of every file under ``paths`` (files, or folders walked recursively; None skipped) as
    ``path, size in bytes, modification time, status-change time (ns), inode``, plus ``missing`` for a path that
    does not exist: a file edited, added, removed or replaced changes it, also when its size and modification time
    are set back (the status-change time cannot be). Contents are not read (a folder of 100,000 images costs one
    ``stat`` each)."""
    h = hashlib.sha256()
    for p in paths:
        if p is None:
            continue
        p = Path(p)
        if not p.exists():
            h.update(f"{p}\0missing\n".encode())
            continue
        for f in _walk(p):
            try:
                st = f.stat()
            except OSError:
                h.update(f"{f}\0unreadable\n".encode())
                continue
            h.update(f"{f}\0{file_stamp(st)}\n".encode())
    return h.hexdigest()


def _source_files(folder: Path) -> Iterable[Path]:
    """Every file of ``folder`` but Python's byte-code caches (sources, templates, package data)."""
    for f in _walk(folder):
        if "__pycache__" not in f.parts and f.suffix not in (".pyc", ".pyo"):
            yield f


@functools.lru_cache(maxsize=8)
def code_digest(*extra_folders: Path) -> str:
    """sha256 (hex) of the code a stage runs: the bytes of every source and data file of this package and of
    ``extra_folders`` (e.g. the Dagster layer's ``assets/``), and the name and version of every installed
    distribution. Computed once per process and set of folders (about 0.3 s)."""
    import importlib.metadata as md

    h = hashlib.sha256(f"digest-v{DIGEST_VERSION}\n".encode())
    for folder in (_PACKAGE, *[Path(f).resolve() for f in extra_folders]):
        for f in sorted(_source_files(folder)):
            h.update(f"{f.relative_to(folder.parent)}\0".encode())
            h.update(hashlib.sha256(f.read_bytes()).digest())
    dists = sorted({f"{(d.metadata['Name'] or '').lower()}=={d.version}" for d in md.distributions()})
    h.update("\n".join(dists).encode())
    return h.hexdigest()


def fingerprint(parts: dict[str, str]) -> str:
    """sha256 (hex) of named digests (the order of ``parts`` does not matter)."""
    return hashlib.sha256("\n".join(f"{k}={v}" for k, v in sorted(parts.items())).encode()).hexdigest()


@dataclass
class MemoRecord:
    """What a run computed a stage's outputs from.

    ``fingerprint``: :func:`fingerprint` of ``parts``; ``run_id``: the run that computed and stored the outputs;
    ``recorded_at``: UTC, ISO 8601; ``extra``: what the caller needs to reuse them (e.g. the outputs' metadata)."""

    fingerprint: str
    run_id: str
    recorded_at: str
    parts: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def changed(self, parts: dict[str, str]) -> list[str]:
        """The names of the parts that differ from ``parts`` (added or removed ones included), sorted."""
        return sorted(k for k in set(self.parts) | set(parts) if self.parts.get(k) != parts.get(k))


class MemoStore:
    """The last :class:`MemoRecord` of each stage and partition, one JSON file each under ``root``
    (``<data_dir>/memo``). Writes are atomic (a temporary file renamed); an unreadable record, or one of another
    shape, reads as none."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def _path(self, stage: str, partition: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in partition) or "all"
        return self.root / stage / f"{safe}.json"

    def get(self, stage: str, partition: str) -> MemoRecord | None:
        """The stage's last record for ``partition``, or None (never recorded, or unreadable)."""
        p = self._path(stage, partition)
        try:
            d = json.loads(p.read_text())
            rec = MemoRecord(d["fingerprint"], d["run_id"], d["recorded_at"], d.get("parts", {}), d.get("extra", {}))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        shapes = ((rec.fingerprint, str), (rec.run_id, str), (rec.recorded_at, str), (rec.parts, dict),
                  (rec.extra, dict))
        if not all(isinstance(v, t) for v, t in shapes) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in rec.parts.items()):
            return None  # valid JSON of another shape (edited by hand, another version): not a record
        return rec

    def put(self, stage: str, partition: str, parts: dict[str, str], run_id: str,
            extra: dict[str, Any] | None = None) -> MemoRecord:
        """Record that ``run_id`` computed the stage's outputs for ``partition`` from ``parts``."""
        rec = MemoRecord(fingerprint(parts), run_id, datetime.now(timezone.utc).isoformat(timespec="seconds"),
                         dict(parts), dict(extra or {}))
        p = self._path(stage, partition)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps(rec.__dict__, indent=1, sort_keys=True))
        os.replace(tmp, p)
        return rec

    def forget(self, stage: str, partition: str) -> None:
        """Drop the record (the next run computes the stage)."""
        self._path(stage, partition).unlink(missing_ok=True)


__all__ = ["DIGEST_VERSION", "MemoRecord", "MemoStore", "code_digest", "files_digest", "fingerprint", "json_digest",
           "table_digest", "value_digest"]
