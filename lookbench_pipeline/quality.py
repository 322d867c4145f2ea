"""Data-quality measures of the stage tables: what the asset checks (``assets/checks.py``) compare with the
thresholds of ``config.ChecksConfig``. Plain functions over pyarrow tables; each returns the measured value and
the details a person needs to see why a check failed."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa


def ratio(num: int | float, den: int | float) -> float:
    """``num / den``, 0.0 when ``den`` is 0 (an empty stage has no rejections to speak of)."""
    return float(num) / float(den) if den else 0.0


def _same_type(a: pa.DataType, b: pa.DataType) -> bool:
    # Parquet names a list's child "element" where pyarrow says "item": the same list type for our purposes
    if pa.types.is_list(a) and pa.types.is_list(b):
        return _same_type(a.value_type, b.value_type)
    if pa.types.is_struct(a) and pa.types.is_struct(b):
        return [f.name for f in a] == [f.name for f in b] and all(_same_type(x.type, y.type) for x, y in zip(a, b))
    return a.equals(b)


def schema_mismatches(table: pa.Table, schema: pa.Schema) -> list[str]:
    """Differences between ``table``'s schema and ``schema`` (``schemas.py``): missing or extra columns, column
    order, types. Empty when the table is valid."""
    out = []
    have = {f.name: f.type for f in table.schema}
    want = {f.name: f.type for f in schema}
    out += [f"missing column {n}" for n in want if n not in have]
    out += [f"extra column {n}" for n in have if n not in want]
    out += [f"column {n}: {have[n]} instead of {t}" for n, t in want.items() if n in have and not _same_type(have[n], t)]
    if not out and table.schema.names != schema.names:
        out.append(f"column order {table.schema.names} instead of {schema.names}")
    return out


def duplicates(table: pa.Table, column: str) -> list[str]:
    """Values of ``column`` that occur more than once (at most 20, sorted)."""
    c = Counter(table.column(column).to_pylist())
    return sorted(str(k) for k, n in c.items() if n > 1)[:20]


def status_rate(table: pa.Table, rejected: str = "rejected", column: str = "status") -> tuple[float, dict[str, int]]:
    """Share of rows whose ``column`` is ``rejected``, and the rejected rows by ``reason``."""
    rows = table.select([c for c in (column, "reason") if c in table.column_names]).to_pylist()
    bad = [r for r in rows if r[column] == rejected]
    return ratio(len(bad), len(rows)), dict(sorted(Counter(r.get("reason") or "" for r in bad).items()))


def image_refs_problems(image_refs: pa.Table) -> list[str]:
    """Rows that break intake's contract: an accepted reference has a sha256 and no reason, a rejected one has a
    reason; the status is one of the two (``in = accepted + rejected``)."""
    out = []
    for r in image_refs.select(["ref_id", "status", "reason", "image_sha256"]).to_pylist():
        if r["status"] == "accepted" and (not r["image_sha256"] or r["reason"]):
            out.append(f"{r['ref_id']}: accepted without sha256 or with a reason")
        elif r["status"] == "rejected" and not r["reason"]:
            out.append(f"{r['ref_id']}: rejected without a reason")
        elif r["status"] not in ("accepted", "rejected"):
            out.append(f"{r['ref_id']}: status {r['status']!r}")
    return out[:20]


def near_duplicate_rate(image_clusters: pa.Table) -> float:
    """Near-duplicate images (not their cluster's representative) / distinct images."""
    reps = image_clusters.column("is_representative").to_pylist()
    return ratio(sum(1 for r in reps if not r), len(reps))


def contamination_rate(images: pa.Table, contamination: pa.Table) -> tuple[float, dict[str, int]]:
    """Distinct new images that match the contamination index / distinct new images, and matches per source."""
    found = contamination.select(["image_sha256", "source"]).to_pylist()
    per_source: dict[str, set[str]] = {}
    for r in found:
        per_source.setdefault(r["source"], set()).add(r["image_sha256"])
    n = len({r["image_sha256"] for r in found})
    return ratio(n, images.num_rows), {k: len(v) for k, v in sorted(per_source.items())}


def per_subset_rows(files: dict[str, dict[str, Any]]) -> dict[str, dict[str, int]]:
    """``{subset: {"query": rows, "gallery": rows}}`` from a candidate's or manifest's ``files`` entry."""
    out: dict[str, dict[str, int]] = {}
    for key, meta in files.items():
        subset, role = key.removesuffix(".parquet").split("/")
        out.setdefault(subset, {"query": 0, "gallery": 0})[role] = int(meta["rows"])
    return out


def score_problems(scores: pa.Table) -> list[str]:
    """Scores outside [0, 1] or outside their own confidence interval (``ci_low <= value <= ci_high``)."""
    out = []
    for r in scores.to_pylist():
        v, lo, hi = r["value"], r["ci_low"], r["ci_high"]
        name = f"{r['model']}/{r['subset']}/{r['metric']}"
        if v is None or not (0.0 <= v <= 1.0):
            out.append(f"{name}: value {v}")
        elif lo is not None and hi is not None and not (lo - 1e-9 <= v <= hi + 1e-9):
            out.append(f"{name}: {v} outside [{lo}, {hi}]")
    return out[:20]


def generation_failure_rate(generated_images: pa.Table) -> tuple[float, int, dict[str, int]]:
    """Of the requests a generator was asked to answer (``generated`` + ``failed`` rows of ``generated_images``),
    the share that failed, how many were asked, and the failures by reason (``connection_error``, ``http_500``…).
    ``pending`` (a job file nobody answered yet) and ``skipped`` (``window_closed``) rows were not asked and are
    not counted: a generator that could not be reached fails every request it was sent (rate 1.0)."""
    rows = generated_images.select(["status", "reason"]).to_pylist()
    asked = [r for r in rows if r["status"] in ("generated", "failed")]
    failed = [r for r in asked if r["status"] == "failed"]
    return (ratio(len(failed), len(asked)), len(asked),
            dict(sorted(Counter(r["reason"] or "" for r in failed).items())))


def generation_failure_details(generated_images: pa.Table) -> dict[str, str]:
    """Per reason of a ``failed`` row of ``generated_images``, the ``detail`` of its first such row (what the
    generator or the connection said: ``connection refused: nothing answered at <url>…``), so that a failed
    :func:`generation_failure_rate` check says why, not only ``connection_error``. Empty for a table without the
    ``detail`` column."""
    if "detail" not in generated_images.column_names:
        return {}
    out: dict[str, str] = {}
    for r in generated_images.select(["status", "reason", "detail"]).to_pylist():
        if r["status"] == "failed" and r["detail"]:
            out.setdefault(r["reason"] or "", r["detail"])
    return dict(sorted(out.items()))


NOT_ASKED = ("generation_pending", "generation_skipped")
"""``generated_checks`` reasons of a request no generator was asked to answer (a job file waiting, a window over)."""


def requested_subsets_without_queries(generated_checks: pa.Table, query_rows: dict[str, int]
                                      ) -> dict[str, dict[str, int]]:
    """The AI-generated subsets the run asked a generator for (a ``generated_checks`` row whose request was sent:
    any reason but :data:`NOT_ASKED`) that have no query in the release candidate (``query_rows``: subset ->
    rows of its query file), each with why: its rows' reasons (``generation_failed:connection_error``,
    ``similarity_below_threshold``…). Empty when every such subset has queries."""
    asked: dict[str, Counter] = {}
    for r in generated_checks.select(["subset", "status", "reason"]).to_pylist():
        reason = r["reason"] or ""
        if reason.split(":")[0] in NOT_ASKED:
            continue
        asked.setdefault(r["subset"], Counter())[reason if r["status"] != "accepted" else "accepted"] += 1
    return {s: dict(sorted(why.items())) for s, why in sorted(asked.items()) if not query_rows.get(s)}


def detector_problems(detector: dict[str, Any], detections: pa.Table, categories: set[str]) -> list[str]:
    """What is wrong with the ``detector`` record (what the release manifest publishes as the detector) against the
    ``detections`` it is said to have produced and the taxonomy's ``categories``: a detector that ran records its
    weights' sha256 (64 hex digits), its classes, and a mapping of every class (and no other) to taxonomy
    categories; every detection is of one of its classes, with the categories the mapping gives. A record of no
    detector (detection disabled, or no street image to detect) has no detections. Empty when all holds."""
    out: list[str] = []
    rows = detections.select(["model_class", "categories"]).to_pylist()
    if "weights_sha256" not in detector:
        return [f"{len(rows)} detections but no detector recorded ({detector})"] if rows else []
    sha = str(detector.get("weights_sha256") or "")
    if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        out.append(f"weights_sha256 {sha!r} is not a sha256")
    classes = list(detector.get("classes") or [])
    cmap = detector.get("class_map") or {}
    if not classes:
        out.append("no classes recorded")
    if set(cmap) != set(classes):
        out.append(f"class_map keys {sorted(cmap)} are not the classes {sorted(classes)}")
    unknown = {k: sorted(set(v) - categories) for k, v in cmap.items() if set(v) - categories}
    if unknown:
        out.append(f"class_map names categories not in the taxonomy: {unknown}")
    odd = Counter(r["model_class"] for r in rows if r["model_class"] not in cmap)
    if odd:
        out.append(f"detections of classes the detector does not have: {dict(sorted(odd.items()))}")
    mismatched = Counter(r["model_class"] for r in rows if r["model_class"] in cmap
                         and sorted(r["categories"] or []) != sorted(cmap[r["model_class"]]))
    if mismatched:
        out.append(f"detections whose categories are not their class's mapping: {dict(sorted(mismatched.items()))}")
    return out
