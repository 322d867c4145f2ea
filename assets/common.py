"""Helpers shared by the asset modules: metadata from counts and table previews."""


from typing import Any

import pyarrow as pa
from dagster import MetadataValue


def table_metadata(table: pa.Table, counts: dict[str, Any] | None = None, preview_cols: list[str] | None = None,
                   n: int = 5) -> dict[str, Any]:
    """Row count, the counts dict (flattened), and a Markdown preview of the first ``n`` rows."""
    md: dict[str, Any] = {"dagster/row_count": table.num_rows}
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
