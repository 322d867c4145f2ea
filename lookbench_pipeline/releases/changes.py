"""What changed between a release and the previous published one: items added and retired, and distribution
shifts per category and per attribute, as a table (``changes.parquet``, schema
:data:`lookbench_pipeline.schemas.RELEASE_CHANGES`) and a readable summary (``CHANGES.md``).

Definitions (per file, i.e. per ``(subset, role)``):

* ``item_added`` / ``item_retired``: an ``item_ID`` that has rows in this release's file and none in the previous
  release's file of the same subset and role (added), or the other way round (retired). ``previous_count`` /
  ``current_count`` are its rows (samples) in each.
* ``category_share``: for every category present in either release, its rows in the file divided by the file's
  rows (a share in [0, 1]).
* ``attribute_share``: for every ``(category, attribute name, value)`` present in either release, the rows of that
  category carrying that value divided by the rows of that category in the file.
* ``share_delta = current_share - previous_share``; a share whose denominator is 0 is 0.

The previous release is the newest published version older than this one (versions sort by date), so rebuilding a
version gives the same diff; for the first release it is ``None`` and every item is ``item_added``.
"""

from __future__ import annotations

import hashlib
import io
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .. import schemas
from ..store import ObjectStore

COLUMNS = ["item_ID", "category", "attributes"]


class ChangesError(RuntimeError):
    """The previous release could not be read to compute the diff (a file is missing or does not match its
    manifest's sha256)."""


def previous_version(store: ObjectStore, version: str) -> str | None:
    """The newest published version older than ``version`` (``None`` when there is none)."""
    from .reader import list_releases

    older = [v for v in list_releases(store) if v < version]
    return older[-1] if older else None


def read_previous(store: ObjectStore, version: str) -> dict[tuple[str, str], pa.Table]:
    """The label columns (``item_ID``, ``category``, ``attributes``) of every data file of a published version,
    each file checked against its manifest's sha256 and size.

    Raises:
        ChangesError: a file is missing or does not match the manifest.
    """
    from .reader import read_manifest, release_prefix
    from ..store import StoreError

    manifest = read_manifest(store, version)
    out = {}
    for key, meta in sorted(manifest["files"].items()):
        subset, role = key.removesuffix(".parquet").split("/")
        try:
            data = store.get_bytes(f"{release_prefix(version)}/{key}")
        except StoreError as exc:
            raise ChangesError(f"previous release {version}: {exc}") from exc
        if len(data) != meta["bytes"] or hashlib.sha256(data).hexdigest() != meta["sha256"]:
            raise ChangesError(f"previous release {version}/{key} does not match its manifest")
        out[(subset, role)] = pq.read_table(io.BytesIO(data), columns=COLUMNS)
    return out


def _labels(t: pa.Table | None) -> tuple[Counter, Counter, Counter, dict[str, str]]:
    """(rows per item, rows per category, rows per (category, attribute, value), item -> category)."""
    items, cats, attrs, item_cat = Counter(), Counter(), Counter(), {}
    if t is None:
        return items, cats, attrs, item_cat
    for item, cat, al in zip(t["item_ID"].to_pylist(), t["category"].to_pylist(), t["attributes"].to_pylist()):
        items[item] += 1
        cats[cat] += 1
        item_cat.setdefault(item, cat)
        for a in al or []:
            attrs[(cat, a["name"], a["value"])] += 1
    return items, cats, attrs, item_cat


def diff(version: str, previous: str | None, current: dict[tuple[str, str], pa.Table],
         before: dict[tuple[str, str], pa.Table]) -> pa.Table:
    """The changes between two releases' files (``{(subset, role): table}`` with at least the columns
    ``item_ID``, ``category``, ``attributes``). Rows are sorted, so the same inputs give the same table.

    Returns:
        a table of schema ``RELEASE_CHANGES``.
    """
    rows: list[dict[str, Any]] = []
    for subset, role in sorted(set(current) | set(before)):
        base = {"version": version, "previous_version": previous, "subset": subset, "role": role}
        n_items, n_cats, n_attrs, cat_now = _labels(current.get((subset, role)))
        p_items, p_cats, p_attrs, cat_before = _labels(before.get((subset, role)))
        for item in sorted(set(n_items) - set(p_items)):
            rows.append({**base, "change": "item_added", "item_ID": item, "category": cat_now[item],
                         "previous_count": 0, "current_count": n_items[item]})
        for item in sorted(set(p_items) - set(n_items)):
            rows.append({**base, "change": "item_retired", "item_ID": item, "category": cat_before[item],
                         "previous_count": p_items[item], "current_count": 0})
        n_total, p_total = sum(n_cats.values()), sum(p_cats.values())
        for cat in sorted(set(n_cats) | set(p_cats)):
            rows.append(_share({**base, "change": "category_share", "category": cat}, p_cats[cat], p_total,
                               n_cats[cat], n_total))
        for cat, name, value in sorted(set(n_attrs) | set(p_attrs)):
            key = (cat, name, value)
            rows.append(_share({**base, "change": "attribute_share", "category": cat, "attribute": name,
                                "value": value}, p_attrs[key], p_cats[cat], n_attrs[key], n_cats[cat]))
    return schemas.from_rows(rows, schemas.RELEASE_CHANGES)


def _share(row: dict, prev: int, prev_total: int, cur: int, cur_total: int) -> dict:
    ps = prev / prev_total if prev_total else 0.0
    cs = cur / cur_total if cur_total else 0.0
    return {**row, "previous_count": prev, "current_count": cur, "previous_share": ps, "current_share": cs,
            "share_delta": cs - ps}


def summary(changes: pa.Table) -> dict[str, Any]:
    """Counts for the manifest: ``{"previous_version", "items_added", "items_retired"}`` with per-file numbers
    (``"<subset>/<role>": n``)."""
    added: Counter = Counter()
    retired: Counter = Counter()
    prev = None
    for r in changes.select(["previous_version", "change", "subset", "role"]).to_pylist():
        prev = r["previous_version"]
        if r["change"] == "item_added":
            added[f"{r['subset']}/{r['role']}"] += 1
        elif r["change"] == "item_retired":
            retired[f"{r['subset']}/{r['role']}"] += 1
    return {"previous_version": prev, "items_added": dict(sorted(added.items())),
            "items_retired": dict(sorted(retired.items()))}


def item_counts(current: dict[tuple[str, str], pa.Table], before: dict[tuple[str, str], pa.Table]
                ) -> dict[tuple[str, str], dict[str, int]]:
    """Per file ``(subset, role)``: distinct items (``item_ID``) and rows (samples) before and now, as
    ``{"items_before", "items_now", "rows_before", "rows_now"}``. A file holds one row per picture, so an item with
    three gallery pictures is one item and three rows."""
    out = {}
    for key in sorted(set(current) | set(before)):
        now, prev = current.get(key), before.get(key)
        out[key] = {"items_before": len(set(prev["item_ID"].to_pylist())) if prev is not None else 0,
                    "items_now": len(set(now["item_ID"].to_pylist())) if now is not None else 0,
                    "rows_before": prev.num_rows if prev is not None else 0,
                    "rows_now": now.num_rows if now is not None else 0}
    return out


def markdown(changes: pa.Table, version: str, previous: str | None,
             counts: dict[tuple[str, str], dict[str, int]] | None = None, top: int = 10) -> str:
    """``CHANGES.md``: per file the items (distinct ``item_ID``) added and retired and, from ``counts``
    (:func:`item_counts`), the items and the rows before and now, said apart; then the largest category and
    attribute shifts (by absolute change of share, ties by name). Deterministic for the same inputs."""
    rows = changes.to_pylist()
    lines = [f"# Changes in LookBench {version}", ""]
    if previous:
        lines += [f"Compared with the previous release, **{previous}**. The full diff, one row per change, is "
                  "`changes.parquet` (its columns: table `release_changes` in `docs/schema.json`).", ""]
    else:
        lines += ["This is the first published release: every item is new. The full diff is `changes.parquet` "
                  "(its columns: table `release_changes` in `docs/schema.json`).", ""]
    lines += ["An **item** is one product (`item_ID`); a **row** is one picture of it (a sample), so a file can hold "
              "several rows of one item. Added and retired count items; shares below count rows.", ""]
    files = sorted({(r["subset"], r["role"]) for r in rows} | set(counts or {}))
    lines += ["## Items", "", "| file | items before | items now | items added | items retired | rows before | "
              "rows now |", "|---|---:|---:|---:|---:|---:|---:|"]
    for subset, role in files:
        mine = [r for r in rows if (r["subset"], r["role"]) == (subset, role)]
        a = sum(r["change"] == "item_added" for r in mine)
        d = sum(r["change"] == "item_retired" for r in mine)
        c = (counts or {}).get((subset, role))
        cells = (f"{c['items_before']} | {c['items_now']} | {a} | {d} | {c['rows_before']} | {c['rows_now']}" if c
                 else f"n/a | n/a | {a} | {d} | n/a | n/a")
        lines.append(f"| {subset}/{role} | {cells} |")
    lines.append("")
    for kind, title in (("category_share", "Largest category shifts"),
                        ("attribute_share", "Largest attribute shifts (share within the category)")):
        shifts = [r for r in rows if r["change"] == kind and r["share_delta"] != 0]
        shifts.sort(key=lambda r: (-abs(r["share_delta"]), r["subset"], r["role"], r["category"] or "",
                                   r["attribute"] or "", r["value"] or ""))
        lines += [f"## {title}", ""]
        if not shifts:
            lines += ["No shift.", ""]
            continue
        label = "category" if kind == "category_share" else "category / attribute: value"
        lines += [f"| file | {label} | before (rows) | now (rows) | change (points) |", "|---|---|---:|---:|---:|"]
        for r in shifts[:top]:
            what = r["category"] if kind == "category_share" else f"{r['category']} / {r['attribute']}: {r['value']}"
            lines.append(f"| {r['subset']}/{r['role']} | {what} | {100 * r['previous_share']:.1f}% "
                         f"({r['previous_count']}) | {100 * r['current_share']:.1f}% ({r['current_count']}) | "
                         f"{100 * r['share_delta']:+.1f} |")
        if len(shifts) > top:
            lines.append(f"\n{len(shifts) - top} smaller shifts are in `changes.parquet`.")
        lines.append("")
    return "\n".join(lines)
