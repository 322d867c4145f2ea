"""A release before it is published: its tables (:class:`ReleaseTables`), the candidate folder the checks read
(``data/candidates/<version>/``: :func:`write_candidate`, :func:`read_candidate`), the blocking checks
(:func:`check_candidate`), and the :class:`Candidate` the ``release_candidate`` asset hands to ``release``
(:func:`make_candidate`). Also the one Parquet encoding every release file uses (:func:`parquet_bytes`).
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .. import schemas
from ..windows import Window
from .reader import NOISE

PARQUET_OPTS = {"compression": "zstd", "compression_level": 3, "use_dictionary": True, "write_statistics": True}


@dataclass
class ReleaseTables:
    """The release's tables before publishing: ``files[(subset, role)] = pa.Table`` of schema RELEASE."""

    version: str
    window: Window
    files: dict[tuple[str, str], pa.Table]
    rejected: list[dict] = field(default_factory=list)
    counts: dict[str, Any] = field(default_factory=dict)


def _compliant(t: pa.DataType) -> pa.DataType:
    """``t`` with every list's value field named ``element``, as the Parquet format names it."""
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_compliant(f.type)) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        v = t.value_field
        value = pa.field("element", _compliant(v.type), v.nullable, v.metadata)
        if pa.types.is_fixed_size_list(t):
            return pa.list_(value, t.list_size)
        return pa.large_list(value) if pa.types.is_large_list(t) else pa.list_(value)
    return t


def parquet_bytes(table: pa.Table) -> bytes:
    """Deterministic Parquet encoding of a release table (same table -> same bytes).

    The same data gives the same bytes whether the table was built in memory (pyarrow names a list's values
    ``item``) or read back from Parquet (``element``): list value fields are named ``element`` before writing, since
    the Arrow schema stored in the file keeps the name. A same-day rerun that built a table one way and published
    it the other way met ``ReleaseExistsError`` on identical data."""
    schema = pa.schema([f.with_type(_compliant(f.type)) for f in table.schema], metadata=table.schema.metadata)
    if not schema.equals(table.schema, check_metadata=True):
        table = table.cast(schema)
    buf = io.BytesIO()
    pq.write_table(table, buf, **PARQUET_OPTS)
    return buf.getvalue()


REJECTED = pa.schema([("candidate", pa.string()), ("id", pa.string()), ("reason", pa.string()),
                      ("source", pa.string())])
"""A release candidate's rejections (``rejected.parquet`` beside the candidate, :func:`write_candidate`)."""


def write_candidate(rel: ReleaseTables, folder: Path) -> dict[str, Any]:
    """Keep a built, not yet published release under ``folder`` (``<subset>/<role>.parquet`` + ``candidate.json``)
    so that checks can look at it before anything is published, with every rejected candidate and its reason in
    ``rejected.parquet`` (columns ``candidate``: what it was — ``product_image``, ``drop_image``, ``look_item``,
    ``query``, ``gallery``…, ``id``: its id — a drop image's ``drop_image_id``, with ``@<subset>`` when the file
    belongs to several subsets —, ``reason``, ``source``: the picture's page URL or file path where known, so that
    every input picture can be followed to a row or a reason). Returns the candidate's summary."""
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rel.rejected, schema=REJECTED), folder / "rejected.parquet")
    files = {}
    for (subset, role), t in sorted(rel.files.items()):
        data = parquet_bytes(t)
        (folder / subset).mkdir(exist_ok=True)
        (folder / subset / f"{role}.parquet").write_bytes(data)
        files[f"{subset}/{role}.parquet"] = {"rows": t.num_rows, "sha256": hashlib.sha256(data).hexdigest()}
    summary = {"version": rel.version, "window": {"start": rel.window.start.isoformat(),
                                                   "end": rel.window.end.isoformat()},
               "folder": str(folder), "files": files, "counts": rel.counts}
    (folder / "candidate.json").write_text(json.dumps(summary, indent=1, sort_keys=True, default=str))
    return summary


@dataclass
class Candidate:
    """A release candidate as the ``release_candidate`` asset records it and ``release`` and the checks read it.

    The summary :func:`write_candidate` returns (``version``, ``window``, ``folder``, ``files``:
    ``{"<subset>/<role>.parquet": {"rows", "sha256"}}``, ``counts``: :attr:`ReleaseTables.counts`) and what the
    manifest will say of its inputs: ``annotators`` (the annotators of the ``annotations`` table), and the
    provenance sections (:data:`PROVENANCE`) ``negatives`` (``provenance.negatives_provenance``), ``annotation``
    (``provenance.annotation_provenance``), ``aigen`` (``aigen.manifest_summary``) and ``models`` (the garment
    detector, when one was used); a section is None when a recorded candidate lacks it.

    ``tables``: the built tables, only on the candidate :func:`make_candidate` returns (None after
    :meth:`from_dict`; :func:`read_candidate` reads them from ``folder``).
    """

    version: str
    window: Window
    folder: str
    files: dict[str, dict[str, Any]]
    counts: dict[str, Any]
    annotators: list[str] = field(default_factory=list)
    negatives: dict[str, Any] | None = None
    annotation: dict[str, Any] | None = None
    aigen: dict[str, Any] | None = None
    models: list[dict[str, Any]] | None = None
    tables: ReleaseTables | None = field(default=None, repr=False, compare=False)

    PROVENANCE = ("negatives", "annotation", "aigen", "models")
    """The sections :meth:`provenance` passes on to the manifest."""

    def provenance(self) -> dict[str, Any]:
        """The provenance sections this candidate has (``{}`` when none), as ``pipeline.stage_publish`` takes them."""
        return {k: getattr(self, k) for k in self.PROVENANCE if getattr(self, k) is not None}

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready summary (the ``release_candidate`` asset's value): :func:`write_candidate`'s keys,
        ``annotators`` and the provenance sections."""
        return {"version": self.version, "window": {"start": self.window.start.isoformat(),
                                                    "end": self.window.end.isoformat()},
                "folder": self.folder, "files": self.files, "counts": self.counts, "annotators": self.annotators,
                **self.provenance()}

    @classmethod
    def from_dict(cls, summary: Mapping[str, Any]) -> Candidate:
        """The candidate of a summary (:meth:`to_dict`, or :func:`write_candidate`'s without the provenance)."""
        w = summary["window"]
        return cls(summary["version"], Window(datetime.fromisoformat(w["start"]), datetime.fromisoformat(w["end"])),
                   summary["folder"], summary["files"], summary["counts"], list(summary.get("annotators", [])),
                   **{k: summary[k] for k in cls.PROVENANCE if k in summary})


def make_candidate(rel: ReleaseTables, folder: Path, *, annotations: pa.Table, negatives: dict[str, Any],
                   annotation: dict[str, Any], aigen: dict[str, Any], detector: dict[str, Any] | None = None
                   ) -> Candidate:
    """Write ``rel`` to ``folder`` (:func:`write_candidate`) and return its :class:`Candidate`: the annotators of
    ``annotations``, the provenance sections as given, and ``models``: ``[detector]`` when ``detector`` (the
    ``detector`` asset) is a garment detector (``role == "detector"``), else ``[]``."""
    summary = write_candidate(rel, folder)
    return Candidate(rel.version, rel.window, summary["folder"], summary["files"], rel.counts,
                     annotators=sorted({a for a in annotations.column("annotator").to_pylist() if a}),
                     negatives=negatives, annotation=annotation, aigen=aigen,
                     models=[detector] if detector and detector.get("role") == "detector" else [], tables=rel)


def read_candidate(candidate: Candidate | Mapping[str, Any]) -> ReleaseTables:
    """The release written by :func:`write_candidate` (``candidate``: a :class:`Candidate` or its summary)."""
    c = candidate if isinstance(candidate, Candidate) else Candidate.from_dict(candidate)
    folder = Path(c.folder)
    files = {}
    for key in c.files:
        subset, role = key.removesuffix(".parquet").split("/")
        files[(subset, role)] = pq.read_table(folder / key)
    return ReleaseTables(c.version, c.window, files, counts=c.counts)


def check_candidate(rel: ReleaseTables, overlap_allowed: tuple[str, ...] | list[str] = ()
                    ) -> dict[str, tuple[bool, dict[str, Any]]]:
    """The checks a release must pass before it is published: ``{name: (passed, details)}``.

    * ``has_queries``: at least one subset has a query row;
    * ``schema``: every file has exactly the RELEASE schema;
    * ``every_query_has_a_positive``: each query's item_ID is in its subset's gallery;
    * ``no_image_in_query_and_gallery``: no image (sha256) is both a query and a gallery item of a subset, except
      in the subsets of ``overlap_allowed`` (where it is intended; counted in the details either way), and the
      ``noise`` gallery holds no image and no item id of any subset;
    * ``unique_sample_ids``: no sample id repeats within a file.
    """
    out: dict[str, tuple[bool, dict[str, Any]]] = {}
    n_q = sum(t.num_rows for (_, r), t in rel.files.items() if r == "query")
    out["has_queries"] = (n_q > 0, {"query_rows": n_q})
    bad_schema = [f"{s}/{r}" for (s, r), t in rel.files.items() if not t.schema.equals(schemas.RELEASE)]
    out["schema"] = (not bad_schema, {"files_not_matching": bad_schema})
    no_pos, both, dup = {}, {}, []
    noise = rel.files.get((NOISE, "gallery"))
    noise_sha = set(noise["image_sha256"].to_pylist()) if noise is not None else set()
    noise_items = set(noise["item_ID"].to_pylist()) if noise is not None else set()
    if noise is not None and len(noise["sample_id"].to_pylist()) != len(set(noise["sample_id"].to_pylist())):
        dup.append(f"{NOISE}/gallery")
    for subset in sorted({s for s, _ in rel.files}):
        q, g = rel.files.get((subset, "query")), rel.files.get((subset, "gallery"))
        if q is None or g is None:
            continue
        g_items = set(g["item_ID"].to_pylist())
        missing = [i for i in q["item_ID"].to_pylist() if i not in g_items]
        if missing:
            no_pos[subset] = len(missing)
        overlap = set(q["image_sha256"].to_pylist()) & set(g["image_sha256"].to_pylist())
        if overlap:
            both[subset] = len(overlap)
        # the noise gallery joins every subset's gallery: it must hold no release image and no release item
        in_noise = (set(q["image_sha256"].to_pylist()) | set(g["image_sha256"].to_pylist())) & noise_sha
        in_noise_items = (set(q["item_ID"].to_pylist()) | g_items) & noise_items
        if in_noise or in_noise_items:
            both[f"{subset}+{NOISE}"] = len(in_noise) + len(in_noise_items)
        for role, t in (("query", q), ("gallery", g)):
            ids = t["sample_id"].to_pylist()
            if len(ids) != len(set(ids)):
                dup.append(f"{subset}/{role}")
    out["every_query_has_a_positive"] = (not no_pos, {"queries_without_positive": no_pos})
    out["no_image_in_query_and_gallery"] = (not {s for s in both if s not in overlap_allowed},
                                            {"images_in_both": both, "allowed_in": sorted(overlap_allowed)})
    out["unique_sample_ids"] = (not dup, {"files_with_repeats": dup})
    return out
