"""The documents a release carries so that someone holding only the release folder can read it.

A release answers, from its own files, what its columns mean, which taxonomy its labels use, how its metrics are
defined, where its pictures and labels come from and how good the labels are:

==========================  ============================================================================
path inside the release     content
==========================  ============================================================================
``docs/taxonomy.yaml``      the taxonomy file the labels were made with, byte for byte (its version and
                            sha256 are in the manifest under ``taxonomy``)
``docs/METRICS.md``         the metric definitions (Coarse / Fine / exact-item Recall@K, graded nDCG@K,
                            distractor@1, the cutoff rule), the same text as the pipeline's
                            ``lookbench_pipeline/data/METRICS.md``
``docs/schema.json``        every table of the release as machine-readable columns: name, Arrow type,
                            nullable, meaning (:func:`schema_document`)
``docs/SOURCES.md``         every source of pictures and labels with its licence and provenance, the label
                            sources with their measured precision (judge acceptance, audit interval) and
                            the models that shaped the release (:func:`sources_markdown`)
==========================  ============================================================================

The dataset card (``README.md``) and ``croissant.json`` refer to these files by these paths, and the manifest lists
them under ``metadata_files`` with their sha256 like every other file. Everything here is a pure function of the
release's inputs (no clock), so a rebuild gives the same bytes.
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path
from typing import Any

import pyarrow as pa

from .. import schemas

TAXONOMY = "docs/taxonomy.yaml"
METRICS = "docs/METRICS.md"
SCHEMA = "docs/schema.json"
SOURCES = "docs/SOURCES.md"
PATHS = (METRICS, SCHEMA, SOURCES, TAXONOMY)
"""Every path this module writes into a release, relative to the release folder."""

CHANGES_COLUMN_DOCS = {
    "version": "the release this diff belongs to",
    "previous_version": "the release it is compared with (null for the first release)",
    "change": "`item_added`, `item_retired`, `category_share` or `attribute_share`",
    "subset": "the subset (config) of the file",
    "role": "`query` or `gallery`",
    "item_ID": "the item added or retired (item rows); null otherwise",
    "category": "the item's category, or the category whose share is counted",
    "attribute": "attribute name (attribute_share rows)",
    "value": "attribute value (attribute_share rows)",
    "previous_count": "rows (samples) in the previous release's file",
    "current_count": "rows (samples) in this release's file",
    "previous_share": "share in [0, 1] in the previous release (share rows; null for item rows)",
    "current_share": "share in [0, 1] in this release (share rows; null for item rows)",
    "share_delta": "current_share - previous_share",
}


def metrics_text() -> bytes:
    """The metric definitions shipped with the package (``lookbench_pipeline/data/METRICS.md``), as bytes."""
    return resources.files("lookbench_pipeline").joinpath("data/METRICS.md").read_bytes()


def _type_name(t: pa.DataType) -> str:
    return "Image (struct<bytes: binary, path: string>)" if t == schemas.IMAGE else str(t)


def schema_document(tables: dict[str, tuple[str, pa.Schema, dict[str, str]]],
                    required: dict[str, tuple[str, ...]] | None = None) -> dict[str, Any]:
    """A machine-readable description of the release's tables.

    Args:
        tables: ``{table name: (file pattern, Arrow schema, {column: meaning})}``.
        required: ``{table name: columns no row may leave null}`` (``schemas.RELEASE_REQUIRED``): stated
            ``"nullable": false`` whatever the Arrow field says (every Parquet column is nullable in Arrow).

    Returns:
        ``{"format": "lookbench-release-schema/1", "tables": {name: {"files": pattern, "columns": [{"name",
        "type" (Arrow's type string, e.g. ``timestamp[us, tz=UTC]``), "nullable", "description"}]}}}``.

    Raises:
        ValueError: a ``required`` column is not in its table.
    """
    required = required or {}
    out: dict[str, Any] = {"format": "lookbench-release-schema/1", "tables": {}}
    for name, (pattern, schema, docs) in sorted(tables.items()):
        must = set(required.get(name, ()))
        if must - set(schema.names):
            raise ValueError(f"table {name} has no column {', '.join(sorted(must - set(schema.names)))}")
        out["tables"][name] = {"files": pattern, "columns": [
            {"name": f.name, "type": _type_name(f.type), "nullable": f.nullable and f.name not in must,
             "description": docs.get(f.name, "")}
            for f in schema]}
    return out


def _fmt_rate(x: Any) -> str:
    return f"{100 * x:.1f}%" if isinstance(x, (int, float)) else "not measured"


def sources_markdown(version: str, provenance: dict[str, Any], card_license: str) -> str:
    """``docs/SOURCES.md``: where the release's pictures and labels come from, with licences and label quality.

    Args:
        provenance: the manifest's provenance entries (``sites``, ``drops``, ``annotation``, ``aigen``, ``models``,
            ``negatives``, ``taxonomy`` …, as :func:`lookbench_pipeline.pipeline.stage_publish` assembles them);
            entries that are absent are said to be absent, never invented.
        card_license: the licence statement of the pictures (the card's licence text).
    """
    lines = [f"# Sources of LookBench {version}", "",
             "Where every picture and every label of this release comes from, under which terms, and how good the "
             "labels are measured to be. The same facts, as data, are in `manifest.json`.", "",
             "## Pictures", ""]
    sites = provenance.get("site_sources") or [{"name": s} for s in provenance.get("sites") or []]
    if sites:
        lines += ["Crawled shops (public product and \"shop the look\" pages, robots.txt and page opt-outs obeyed):",
                  "", "| site | where | licence / terms |", "|---|---|---|"]
        for s in sites:
            lines.append(f"| {s['name']} | {s.get('url') or 'n/a'} | {s.get('license') or card_license} |")
        lines.append("")
    drops = provenance.get("drop_sources") or [{"name": d} for d in provenance.get("drops") or []]
    if drops:
        lines += ["Image drops (folders of pictures taken in without a crawl):", "",
                  "| drop | provenance | licence |", "|---|---|---|"]
        for d in drops:
            lines.append(f"| {d['name']} | {d.get('source') or 'not declared'} | {d.get('license') or 'not declared'} |")
        lines.append("")
    aigen = provenance.get("aigen") or {}
    if aigen.get("enabled"):
        lines += ["AI-generated pictures (subsets `aigen_studio`, `aigen_streetlook`): generator "
                  f"`{aigen.get('model') or aigen.get('generator') or 'see manifest'}`; every generated row carries "
                  "its generator, prompt, seed and reference picture in the `generation` column.", ""]
    neg = provenance.get("negatives") or {}
    if neg.get("sources"):
        lines += ["Distractors (`noise/gallery.parquet`) mined from: " +
                  ", ".join(f"`{s}`" for s in neg["sources"]) + " (each under its own data set licence).", ""]
    if not (sites or drops):
        lines += ["No source is recorded.", ""]
    lines += ["## Labels", ""]
    ann = provenance.get("annotation") or {}
    annotators = ann.get("annotators") or provenance.get("annotators") or []
    tax = provenance.get("taxonomy") or {}
    lines += [f"Taxonomy: version `{tax.get('version') or provenance.get('taxonomy_version')}` "
              f"(`{TAXONOMY}`, sha256 `{tax.get('sha256', 'n/a')}`). The `annotator` column of every row names "
              "what labelled it:", ""]
    for a in annotators:
        lines.append(f"* `{a}`")
    if not annotators:
        lines.append("* none recorded")
    lines.append("")
    acc = ann.get("acceptance") or {}
    lines += ["| measure | value |", "|---|---|",
              f"| labelled items | {ann.get('labelled_items', 'n/a')} |",
              f"| judge acceptance (first-round verdicts) | {_fmt_rate(acc.get('overall'))}"
              f"{' of ' + str(acc['judged']) + ' verdicts' if acc.get('judged') else ''} |"]
    audit = provenance.get("audit") or {}
    if audit.get("precision") is not None:
        ci = audit.get("interval") or audit.get("ci") or []
        lines.append(f"| human audit precision | {_fmt_rate(audit['precision'])}"
                     + (f" (95% interval {_fmt_rate(ci[0])}–{_fmt_rate(ci[1])})" if len(ci) == 2 else "") + " |")
    else:
        lines.append("| human audit precision | no audit recorded for this release |")
    lines += ["", "Labels from catalogue text (`text-baseline`) or imported annotation files are not judged by a "
              "model; their precision is what an audit measures (none above means none was run).", ""]
    models = provenance.get("models") or []
    if models:
        lines += ["## Models that shaped the release", "", "| role | model | weights sha256 |", "|---|---|---|"]
        for m in models:
            lines.append(f"| {m.get('role', '')} | {m.get('id') or m.get('weights') or ''} | "
                         f"{(m.get('weights_sha256') or '')[:16]} |")
        lines.append("")
    lines += ["## Licence of the pictures", "", card_license, ""]
    return "\n".join(lines)


def release_documents(version: str, taxonomy_path: Path, provenance: dict[str, Any], card_license: str,
                      release_column_docs: dict[str, str]) -> tuple[dict[str, bytes], dict[str, Any]]:
    """The release's documents and the manifest entry of its taxonomy.

    Returns:
        ``({path inside the release: bytes}, {"version", "path", "sha256"})`` — the paths are :data:`PATHS`.
    Raises:
        OSError: the taxonomy file cannot be read.
        TaxonomyError: it is not a taxonomy.
    """
    from ..taxonomy import Taxonomy

    tax_bytes = Path(taxonomy_path).read_bytes()
    tax = {"version": Taxonomy.load(taxonomy_path).version, "path": TAXONOMY,
           "sha256": hashlib.sha256(tax_bytes).hexdigest()}
    schema = schema_document({
        "release": ("<subset>/{query,gallery}.parquet and noise/gallery.parquet", schemas.RELEASE,
                    release_column_docs),
        "release_changes": ("changes.parquet", schemas.RELEASE_CHANGES, CHANGES_COLUMN_DOCS),
    }, required={"release": schemas.RELEASE_REQUIRED})
    docs = {
        TAXONOMY: tax_bytes,
        METRICS: metrics_text(),
        SCHEMA: (json.dumps(schema, indent=1, ensure_ascii=False) + "\n").encode(),
        SOURCES: sources_markdown(version, {**provenance, "taxonomy": tax}, card_license).encode(),
    }
    return docs, tax
