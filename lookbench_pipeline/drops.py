"""Image drops: folders of images that enter the pipeline without a crawl (real photo sets, AI-generated images).

A drop is configured by :class:`~lookbench_pipeline.config.DropConfig`. Every image file under a mapped subfolder
becomes one ``drop_items`` row; ``subfolders`` maps a subfolder name to ``"<subset>:<role>"`` (role ``query`` or
``gallery``). An optional CSV (``items.csv`` in the folder, or ``items_csv``) with the header
``path,item_id,role,subset,title,description`` overrides per file (``path`` relative to the drop folder): files
that share an ``item_id`` show the same item, which is how query and gallery get ground truth. Files are read in
place: nothing is copied.

``first_seen_at`` of a file is the first ingestion that saw it, kept in ``state_dir/drops/<name>.parquet`` and, with
an object store, in the drop's records there (:class:`lookbench_pipeline.records.DropState`), which a backfill into
an empty ``data_dir`` reads.
"""

from __future__ import annotations

import csv
import hashlib
from datetime import datetime
from pathlib import Path

import pyarrow as pa  # noqa: F401

from . import schemas
from .config import ConfigError, DropConfig
from .records import DropState
from .store import ObjectStore


DROP_ITEMS = schemas.DROP_ITEMS


def _read_csv(path: Path, root: Path) -> dict[str, dict[str, str]]:
    """The item sheet, validated: a ``path`` column, roles ``query``/``gallery``, known subsets, files that
    exist. Raises ConfigError naming the file and line."""
    from .config import SUBSET_NAMES

    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc})") from exc
    reader = csv.DictReader(text.splitlines())
    if not reader.fieldnames or "path" not in reader.fieldnames:
        raise ConfigError(f"{path}: needs a header with at least a 'path' column")
    rows = {}
    for n, row in enumerate(reader, 2):
        r = {k: (v or "").strip() for k, v in row.items() if k}
        if r.get("role") and r["role"] not in ("query", "gallery"):
            raise ConfigError(f"{path}:{n}: role {r['role']!r} is not query or gallery")
        if r.get("subset") and r["subset"] not in SUBSET_NAMES:
            raise ConfigError(f"{path}:{n}: unknown subset {r['subset']!r}")
        if not (root / r["path"]).is_file():
            raise ConfigError(f"{path}:{n}: {r['path']} does not exist under {root}")
        rows[r["path"]] = r
    return rows


def item_sheet(drop: DropConfig) -> dict[str, dict[str, str]]:
    """The drop's validated item sheet (``items_csv``, else ``items.csv`` in the folder; ``{}`` without one),
    keyed by ``path``. ``lookbench build`` / ``backfill`` call it before any run, so a bad sheet is a configuration
    error up front rather than a failed step after the crawl.

    Raises:
        ConfigError: the folder does not exist, or the sheet is malformed or names a file that does not exist
            (the message names the sheet, its line and the path).
    """
    root = Path(drop.path)
    if not root.is_dir():
        raise ConfigError(f"drop {drop.name}: {root} is not a folder")
    if drop.items_csv is not None and not Path(drop.items_csv).is_file():
        raise ConfigError(f"drop {drop.name!r}: items_csv {drop.items_csv} is not a file")
    csv_path = Path(drop.items_csv or (root / "items.csv"))
    try:
        return _read_csv(csv_path, root) if csv_path.is_file() else {}
    except ConfigError as exc:
        raise ConfigError(f"drop {drop.name!r}: {exc}") from exc


def scan(drop: DropConfig, state_dir: Path, now: datetime, store: ObjectStore | None = None) -> pa.Table:
    """List a drop's images as ``drop_items`` rows (sorted by path); ``store``: where the first-seen records live.

    Raises:
        lookbench_pipeline.records.RecordError: a first-seen record in the store is corrupt or hostile.
        ConfigError: the folder does not exist, a mapping is not ``subset:role``, or the CSV is malformed or
            names a missing file (:func:`item_sheet`).
    """
    root = Path(drop.path)
    overrides = item_sheet(drop)
    state = DropState(drop.name, state_dir, store)
    rows = []
    for sub, target in sorted(drop.subfolders.items()):
        subset, role = target.split(":", 1)  # validated by DropConfig
        for f in sorted((root / sub).rglob("*")):
            if not f.is_file():  # every file counts: a non-image is rejected not_an_image at intake, never skipped
                continue
            rel = f.relative_to(root).as_posix()
            o = overrides.get(rel, {})
            did = hashlib.sha1(f"{drop.name}\x00{rel}".encode()).hexdigest()
            rows.append({
                "drop_image_id": did,
                "item_id": o.get("item_id") or f"{drop.name}:{rel}",
                "drop": drop.name, "path": str(f.resolve()),
                "subset": o.get("subset") or subset, "role": o.get("role") or role,
                "title": o.get("title") or None, "description": o.get("description") or None,
                "first_seen_at": state.first_seen_at(did, rel, now),
            })
    table = schemas.from_rows(rows, DROP_ITEMS)
    state.save(rows)
    return table
