"""Scoring one subset: the metrics from its embeddings (:func:`score_subset`), which queries count (first seen
after a cutoff, :func:`_after`; not matching a legacy benchmark, :func:`contamination_flags`), the noise-gallery
rates (:func:`noise_hits`), and the pieces of the report's examples (whether a result matches a query's attributes,
:func:`_fine`; thumbnails, :func:`_thumb`). Imports no sibling. Formulas: docs/METRICS.md.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from datetime import date, datetime, timezone
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from PIL import Image

from .. import schemas
from ..foreground import MAX_FOREGROUND_DELTA_E
from ..metrics import LabelCodes, evaluate_top, topk_from_embeddings


def _after(t: pa.Table, cutoff: date | None) -> np.ndarray:
    """Bool mask of rows first seen on or after ``cutoff`` (00:00 UTC); all rows when None."""
    if cutoff is None:
        return np.ones(t.num_rows, dtype=bool)
    ts = datetime(cutoff.year, cutoff.month, cutoff.day, tzinfo=timezone.utc)
    return np.asarray(pc.greater_equal(t["first_seen_at"], pa.scalar(ts, schemas.TS)).fill_null(False),
                      dtype=bool)


def score_subset(qv: np.ndarray, gv: np.ndarray, codes: LabelCodes, ks: Sequence[int],
                 q_items: Sequence[str], g_items: Sequence[str], chunk: int = 512, progress: Any = None,
                 ndcg_ks: Sequence[int] | None = None) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Every metric of one subset from its embeddings: Coarse / Fine / exact-item Recall@K for each K in ``ks``
    and graded nDCG@K for each K in ``ndcg_ks`` (None: ``ks``).

    Args:
        qv, gv: ``(n_q, d)``, ``(n_g, d)`` float32 unit vectors.
    Returns:
        ``(per_query, top, top_scores)``: ``{metric: (n_q,) float64}``, the ranked gallery indices
        ``(n_q, min(max K, n_g))`` int64 and their similarities.
    """
    ndcg_ks = list(ndcg_ks or ks)
    top, top_scores = topk_from_embeddings(qv, gv, max([*ks, *ndcg_ks]), chunk, progress)
    return evaluate_top(top, codes, ks, ndcg_ks, q_items, g_items, chunk), top, top_scores


def contamination_flags(queries: pa.Table, index: pa.Table, threshold: int = 6, max_color_diff: float = 32.0,
                        max_foreground_delta_e: float = MAX_FOREGROUND_DELTA_E) -> dict[str, str]:
    """Query images of a published release that match a legacy benchmark of the contamination index (exact
    sha256, or pHash within ``threshold`` bits and colour-confirmed, as at release time), for an index updated
    after publication. Matches against releases (``release:*`` sources) do not count: a release is not
    contaminated by itself or by later releases, and earlier ones were checked when it was built.

    Returns ``{image_sha256: source}``.
    """
    from ..contamination import _row, find_contamination

    legacy = index.filter(pc.invert(pc.starts_with(index["source"], "release:")))
    if legacy.num_rows == 0 or queries.num_rows == 0:
        return {}
    rows, seen = [], set()
    for r in queries.select(["image", "image_sha256", "sample_id"]).to_pylist():
        if r["image_sha256"] in seen:
            continue
        seen.add(r["image_sha256"])
        row = _row("query", r["sample_id"], None, r["image"]["bytes"], "", None, mirrored=False)
        if row is not None:
            rows.append(row)
    found = find_contamination(pa.Table.from_pylist(rows), legacy, threshold, max_color_diff, max_foreground_delta_e)
    return {r["image_sha256"]: r["source"] for r in found.to_pylist()}


def noise_hits(sim: np.ndarray, codes: LabelCodes, n_own: int) -> dict[str, np.ndarray]:
    """Per-query ``distractor@1`` and ``soft_negative@1`` (float 0/1, shape ``(q,)``) for a similarity matrix whose
    gallery columns ``n_own:`` are the noise gallery. The top-1 is the highest score, ties to the lower column
    (the ranking rule of :mod:`lookbench_pipeline.metrics`)."""
    if sim.shape[0] == 0:
        return {"distractor@1": np.zeros(0), "soft_negative@1": np.zeros(0)}
    return _noise_hits_top(np.argmax(sim, axis=1), codes, n_own)


def _noise_hits_top(top1: np.ndarray, codes: LabelCodes, n_own: int) -> dict[str, np.ndarray]:
    """:func:`noise_hits` from each query's top-1 gallery index."""
    noise = top1 >= n_own
    same = codes.qc == codes.gc[top1]
    qa, ga = codes.qa, codes.ga[top1]
    differs = ((qa >= 0) & (ga >= 0) & (qa != ga)).any(axis=1)
    return {"distractor@1": noise.astype(float), "soft_negative@1": (noise & same & differs).astype(float)}


def _fine(qa: Mapping[str, str], ga: Mapping[str, str]) -> bool:
    from ..metrics import NOT_VISIBLE

    return all(ga[n] == v for n, v in qa.items() if v != NOT_VISIBLE and ga.get(n, NOT_VISIBLE) != NOT_VISIBLE)


def _thumb(data: bytes, side: int = 160) -> bytes:
    im = Image.open(io.BytesIO(data)).convert("RGB")
    im.thumbnail((side, side), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=82)
    return buf.getvalue()
