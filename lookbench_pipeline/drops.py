"""Image drops: folders of images that enter the pipeline without a crawl (real photo sets, AI-generated images).

A drop is configured by :class:`~lookbench_pipeline.config.DropConfig`. Every image file under a mapped subfolder
becomes one ``drop_items`` row; ``subfolders`` maps a subfolder name to ``"<subset>:<role>"`` (role ``query`` or
``gallery``). An optional CSV (``items.csv`` in the folder, or ``items_csv``) with the header
``path,item_id,role,subset,title,description`` overrides per file (``path`` relative to the drop folder): files
that share an ``item_id`` show the same item, which is how query and gallery get ground truth. Optional columns
``category`` and ``attributes`` (``name: value; name: value``) are the item's own facets, mapped onto the taxonomy
like a shop's (:mod:`lookbench_pipeline.label_import`). Files are read in place: nothing is copied. A sheet row
that leaves the drop folder, lies in no mapped subfolder or contradicts another row for its file is a ConfigError
(:func:`item_sheet`); a symbolic link that leads out of the drop folder is listed where it lies and rejected
``link_outside_drop`` at intake, never read (:func:`files`; README.md "Image drops").

``first_seen_at`` of a file is the first ingestion that saw it, kept in ``state_dir/drops/<name>.parquet`` and, with
an object store, in the drop's records there (:class:`lookbench_pipeline.records.DropState`), which a backfill into
an empty ``data_dir`` reads.
"""

from __future__ import annotations

import csv
import hashlib
import io
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Iterable

import pyarrow as pa  # noqa: F401

from . import schemas
from .config import ConfigError, DropConfig
from .records import DropState
from .store import ObjectStore


DROP_ITEMS = schemas.DROP_ITEMS


def _read_csv(path: Path, root: Path, subfolders: Iterable[str] = ()) -> dict[str, dict[str, str]]:
    """The item sheet, validated: a ``path`` column, roles ``query``/``gallery``, known subsets, files that
    exist inside the drop folder under a mapped subfolder, one row per file. Keyed by the file's path relative to
    the drop folder, normalised (``./studio//a.jpg`` is ``studio/a.jpg``). A quoted cell may hold a line break
    (a file name with a newline). Rows that repeat a file with the same cells are one row; rows that give one file
    different cells are refused. Raises ConfigError naming the file and line (a row's first line)."""
    from .config import SUBSET_NAMES

    try:
        text = path.read_text(encoding="utf-8-sig")  # a spreadsheet's byte-order mark is not part of the header
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc})") from exc
    reader = csv.reader(io.StringIO(text, newline=""))  # not splitlines(): a quoted cell may span lines
    try:
        header = next(reader, None)
        if not header or "path" not in header:
            raise ConfigError(f"{path}: needs a header with at least a 'path' column")
        subs = [PurePosixPath(s) for s in subfolders]
        real_root = root.resolve()
        rows: dict[str, dict[str, str]] = {}
        first: dict[str, int] = {}
        end = reader.line_num
        for cells in reader:
            n, end = end + 1, reader.line_num
            if not cells:  # a blank line
                continue
            if any(c.strip() for c in cells[len(header):]):  # e.g. a title with an unquoted comma
                raise ConfigError(f"{path}:{n}: {len(cells)} cells but the header names {len(header)} columns "
                                  f"(quote a cell that holds a comma)")
            r = {k: "" for k in header if k} | {k: (v or "").strip() for k, v in zip(header, cells) if k}
            if r.get("role") and r["role"] not in ("query", "gallery"):
                raise ConfigError(f"{path}:{n}: role {r['role']!r} is not query or gallery")
            for part in subsets_of(r.get("subset") or ""):
                if part not in SUBSET_NAMES:
                    raise ConfigError(f"{path}:{n}: unknown subset {part!r} (known: {', '.join(SUBSET_NAMES)})")
            if r.get("subset") and len(subsets_of(r["subset"])) != len(set(subsets_of(r["subset"]))):
                raise ConfigError(f"{path}:{n}: subset {r['subset']!r} names a subset twice")
            r["path"] = _sheet_path(path, n, r.get("path") or "", root, real_root, subs)
            try:
                r["facets"] = parse_facets(r.get("attributes") or "")
            except ValueError as exc:
                raise ConfigError(f"{path}:{n}: attributes: {exc}") from exc
            key = r["path"]
            if key in rows:
                differ = sorted(k for k in set(r) | set(rows[key]) if k != "facets" and r.get(k) != rows[key].get(k))
                if differ:
                    was = "; ".join(f"{k}: {rows[key].get(k)!r} there, {r.get(k)!r} here" for k in differ)
                    raise ConfigError(f"{path}:{n}: {key} is already on line {first[key]} with other "
                                      f"{', '.join(differ)} ({was}): one file is one item, so keep one of the "
                                      f"two rows")
                continue  # the same cells again: one row
            rows[key], first[key] = r, n
    except csv.Error as exc:
        raise ConfigError(f"{path}:{reader.line_num}: not CSV ({exc})") from exc
    return rows


def _sheet_path(sheet: Path, n: int, value: str, root: Path, real_root: Path, subs: list[PurePosixPath]) -> str:
    """A sheet row's ``path`` as the key :func:`files` gives its file, or ConfigError: empty, absolute, ``..``,
    leading out of the drop folder through a symbolic link, outside every mapped subfolder (the row would
    describe no listed file), or no file."""
    if not value:
        raise ConfigError(f"{sheet}:{n}: the row has no path")
    rel = PurePosixPath(value)
    if rel.is_absolute() or ".." in rel.parts or rel == PurePosixPath("."):
        raise ConfigError(f"{sheet}:{n}: path {value!r} leaves the drop folder {root}: a sheet path is relative to "
                          f"the drop folder, without '..'")
    key = rel.as_posix()
    full = root / key
    try:
        target = full.resolve()
    except (OSError, RuntimeError) as exc:  # a link loop
        raise ConfigError(f"{sheet}:{n}: path {value!r}: {exc}") from exc
    if not target.is_relative_to(real_root):
        raise ConfigError(f"{sheet}:{n}: path {value!r} leads out of the drop folder {root} through a symbolic "
                          f"link (to {target}); such a file is never read")
    if subs and not any(rel.is_relative_to(s) and rel != s for s in subs):
        raise ConfigError(f"{sheet}:{n}: path {value!r} is in none of the drop's subfolders "
                          f"({', '.join(s.as_posix() for s in subs)}): no file of the drop would take this row")
    if full.is_dir():
        raise ConfigError(f"{sheet}:{n}: {value} is a folder under {root}, not a file: a row describes one file")
    if full.exists() and not full.is_file():
        raise ConfigError(f"{sheet}:{n}: {value} is not a regular file (a FIFO, socket or device) under {root}")
    if not full.is_file():
        raise ConfigError(f"{sheet}:{n}: {value} does not exist under {root}")
    return key


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
    sorted by subfolder then path. ``file`` is the file's place in the (resolved) drop folder, its symbolic links
    NOT followed: ``drop_items.path``. A symbolic link is listed as a file (a dangling one too: intake rejects it
    ``file_not_found``; one that leads out of the drop folder, a file or a folder: ``link_outside_drop``, never
    read), except a link to a folder inside the drop, whose files are listed where they are. Whatever is not a
    folder is listed: a FIFO, a socket or a device is rejected ``not_a_regular_file`` at intake, never opened."""
    root = Path(drop.path).resolve()
    out = []
    for sub in sorted(drop.subfolders):
        for f in sorted((root / sub).rglob("*")):
            # every file counts: a non-image is rejected not_an_image at intake, never skipped; so does every entry
            # that is no folder (a FIFO, a socket, a device: rejected not_a_regular_file at intake, never opened)
            if not f.is_dir() or (f.is_symlink() and not inside(f, root)):
                out.append((sub, f.relative_to(root).as_posix(), f))
    return out


def inside(path: Path, root: Path) -> bool:
    """Whether ``path``, its symbolic links followed, is in the folder ``root`` (resolved); a link loop is not."""
    try:
        return path.resolve().is_relative_to(root)
    except (OSError, RuntimeError):
        return False


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
    if (csv_path.exists() or csv_path.is_symlink()) and not csv_path.is_file():
        # a folder, a FIFO (whose open would block), a dangling link: never a sheet, and never silently none
        raise ConfigError(f"drop {drop.name!r}: {csv_path} is there but is not a regular file: an item sheet is a "
                          "CSV file (README.md, \"Image drops\"); remove it or replace it with the sheet")
    try:
        return _read_csv(csv_path, root, drop.subfolders) if csv_path.is_file() else {}
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
            "drop": drop.name, "path": str(f),
            "subset": o.get("subset") or subset, "role": o.get("role") or role,
            "title": o.get("title") or None, "description": o.get("description") or None,
            "category_text": o.get("category") or None, "facets": o.get("facets") or None,
            "first_seen_at": state.first_seen_at(did, rel, now),
        })
    table = schemas.from_rows(rows, DROP_ITEMS)
    state.save(rows)
    return table
