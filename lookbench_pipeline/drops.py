"""Image drops: folders of images that enter the pipeline without a crawl (real photo sets, AI-generated images).

A drop is configured by :class:`~lookbench_pipeline.config.DropConfig`. Every image file under a mapped subfolder
becomes one ``drop_items`` row; ``subfolders`` maps a subfolder name to ``"<subset>:<role>"`` (role ``query`` or
``gallery``). An optional CSV (``items.csv`` in the folder, or ``items_csv``) with the header
``path,item_id,role,subset,title,description`` overrides per file (``path`` relative to the drop folder): files
that share an ``item_id`` show the same item, which is how query and gallery get ground truth. Optional columns
``category`` and ``attributes`` (``name: value; name: value``) are the item's own facets, mapped onto the taxonomy
like a shop's (:mod:`lookbench_pipeline.label_import`). Files are read in place: nothing is copied.

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
        for part in subsets_of(r.get("subset") or ""):
            if part not in SUBSET_NAMES:
                raise ConfigError(f"{path}:{n}: unknown subset {part!r} (known: {', '.join(SUBSET_NAMES)})")
        if r.get("subset") and len(subsets_of(r["subset"])) != len(set(subsets_of(r["subset"]))):
            raise ConfigError(f"{path}:{n}: subset {r['subset']!r} names a subset twice")
        if not (root / r["path"]).is_file():
            raise ConfigError(f"{path}:{n}: {r['path']} does not exist under {root}")
        try:
            r["facets"] = parse_facets(r.get("attributes") or "")
        except ValueError as exc:
            raise ConfigError(f"{path}:{n}: attributes: {exc}") from exc
        rows[r["path"]] = r
    return rows


SUBSET_SEPARATOR = "+"


def subsets_of(value: str) -> list[str]:
    """The subsets a drop file belongs to: the sheet's ``subset`` may name several joined by ``+``
    (``real_streetlook+real_studio_flat``: a worn photo on a studio background is a street-look query through its
    detected garments AND a whole-image studio query). ``""`` gives ``[]``."""
    return [p.strip() for p in value.split(SUBSET_SEPARATOR) if p.strip()]


def parse_facets(text: str) -> list[dict[str, str]]:
    """An items sheet's ``attributes`` cell, ``name: value; name: value``, as ``[{name, value}]``. Raises
    ValueError for a part without ``name: value``."""
    out = []
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        name, sep, value = part.partition(":")
        if not sep or not name.strip() or not value.strip():
            raise ValueError(f"{part!r} is not 'name: value'")
        out.append({"name": name.strip(), "value": value.strip()})
    return out


def files(drop: DropConfig) -> list[tuple[str, str, Path]]:
    """``(subfolder, path relative to the drop folder, file)`` of every file under the drop's mapped subfolders,
    sorted by subfolder then path."""
    root = Path(drop.path)
    out = []
    for sub in sorted(drop.subfolders):
        for f in sorted((root / sub).rglob("*")):
            if f.is_file():  # every file counts: a non-image is rejected not_an_image at intake, never skipped
                out.append((sub, f.relative_to(root).as_posix(), f))
    return out


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
    overrides = item_sheet(drop)
    state = DropState(drop.name, state_dir, store)
    rows = []
    for sub, rel, f in files(drop):
        subset, role = drop.subfolders[sub].split(":", 1)  # validated by DropConfig
        o = overrides.get(rel, {})
        did = hashlib.sha1(f"{drop.name}\x00{rel}".encode()).hexdigest()
        rows.append({
            "drop_image_id": did,
            "item_id": o.get("item_id") or f"{drop.name}:{rel}",
            "drop": drop.name, "path": str(f.resolve()),
            "subset": o.get("subset") or subset, "role": o.get("role") or role,
            "title": o.get("title") or None, "description": o.get("description") or None,
            "category_text": o.get("category") or None, "facets": o.get("facets") or None,
            "first_seen_at": state.first_seen_at(did, rel, now),
        })
    table = schemas.from_rows(rows, DROP_ITEMS)
    state.save(rows)
    return table
