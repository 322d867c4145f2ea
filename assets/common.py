"""Helpers shared by the asset modules: metadata from counts and table previews."""


import functools
import inspect
import time
from typing import Any

import pyarrow as pa
from dagster import MetadataValue, Output

# count keys whose ratio a person wants to see: (numerator, denominator) -> metadata name
RATES = {("rejected", "in"): "rejection_rate", ("rejected", "items"): "rejection_rate",
         ("rejected", "candidates"): "rejection_rate",
         ("near_duplicate_images", "distinct_images"): "near_duplicate_rate",
         ("exact_duplicate_refs", "accepted_refs"): "exact_duplicate_rate",
         ("contaminated_images", "images"): "contamination_rate"}


def rates(counts: dict[str, Any]) -> dict[str, float]:
    """The rates of :data:`RATES` that ``counts`` allows (fractions, 4 decimals; 0 when the denominator is 0)."""
    out = {}
    for (num, den), name in RATES.items():
        if isinstance(counts.get(num), (int, float)) and isinstance(counts.get(den), (int, float)):
            out[name] = round(counts[num] / counts[den], 4) if counts[den] else 0.0
    return out


def _with_duration(x: Any, t0: float) -> Any:
    if isinstance(x, Output):
        return x.with_metadata({**x.metadata, "duration_s": round(time.perf_counter() - t0, 3)})
    return x


def observed(fn):
    """Put under ``@asset`` / ``@multi_asset``: the library's log records inside carry the Dagster run id and the
    stage (the function's name; ``lookbench_pipeline.logs.stage_context``), and every ``Output`` gets
    ``duration_s`` (wall-clock seconds from the start of the function to that output) in its metadata. The
    function's first argument must be the asset's context."""
    from lookbench_pipeline.logs import stage_context

    def ctx(args):
        try:
            return stage_context(fn.__name__, args[0].run.run_id)
        except Exception:  # direct invocation without a run
            return stage_context(fn.__name__)

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def gen(*args, **kwargs):
            t0 = time.perf_counter()
            with ctx(args):
                for x in fn(*args, **kwargs):
                    yield _with_duration(x, t0)
        return gen

    @functools.wraps(fn)
    def one(*args, **kwargs):
        t0 = time.perf_counter()
        with ctx(args):
            return _with_duration(fn(*args, **kwargs), t0)
    return one


def md_table(rows: list[dict[str, Any]], cols: list[str]) -> MetadataValue:
    """A small Markdown table (the UI renders it) of ``rows``."""
    head = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n"
    body = "".join("| " + " | ".join(str(r.get(c, ""))[:60].replace("|", "/") for c in cols) + " |\n" for r in rows)
    return MetadataValue.md(head + body)


def table_metadata(table: pa.Table, counts: dict[str, Any] | None = None, preview_cols: list[str] | None = None,
                   n: int = 5) -> dict[str, Any]:
    """Row count, the counts dict (flattened), and a Markdown preview of the first ``n`` rows."""
    md: dict[str, Any] = {"dagster/row_count": table.num_rows, **rates(counts or {})}
    for k, v in (counts or {}).items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            md[k] = v
        elif isinstance(v, dict):
            md[k] = MetadataValue.json(v)
        elif v is not None:
            md[k] = str(v)
    cols = [c for c in (preview_cols or table.column_names[:6]) if c in table.column_names]
    if table.num_rows and cols:
        rows = table.select(cols).slice(0, n).to_pylist()
        head = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n"
        body = "".join("| " + " | ".join(str(r[c])[:60].replace("|", "/") for c in cols) + " |\n" for r in rows)
        md["preview"] = MetadataValue.md(head + body)
    return md


def summary(title: str, headline: str, counts: dict[str, Any] | None = None) -> str:
    """A stage's summary message: ``title: headline`` on its first line, the stage's counts that reconcile (in,
    kept, rejected…), which is the line the build's terminal shows for the stage (``logs.BuildTerminal``, wrapped
    there, never cut); then, for the log file and Dagster's event log, ``title: counts`` in full."""
    return f"{title}: {headline}" + (f"\n{title}: {counts}" if counts is not None else "")


def reasons(counts: dict[str, Any], prefix: str = "rejected.") -> str:
    """`` (reason n, …)`` of the ``<prefix><reason>`` counts of ``counts``, or ``""`` when there are none."""
    parts = [f"{k[len(prefix):]} {v}" for k, v in sorted(counts.items())
             if k.startswith(prefix) and isinstance(v, int) and not isinstance(v, bool)]
    return f" ({', '.join(parts)})" if parts else ""


def detections_headline(c: dict[str, Any]) -> str:
    """Garment detection's counts: images, boxes (kept + dropped), linked items (matched + not detected),
    unlabelled boxes."""
    g = c.get
    return (f"images {g('images', 0)}, boxes {g('boxes', 0)} (kept {g('kept', 0)}, dropped {g('dropped', 0)}); "
            f"linked items {g('linked_items', 0)} (matched {g('matched', 0)}, not detected "
            f"{g('linked_items_not_detected', 0)}), unlabelled {g('unlabelled', 0)}")
