"""What an evaluation run produces (:class:`Evaluation`), the model columns of its score rows, the paired tests
between models on the same queries (:func:`_paired_tests`), and the scores as a plain-text table
(:func:`format_table`, for the command line and the asset's log). Imports no sibling.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from ..metrics import paired_bootstrap
from ..releases.reader import SUBSETS

PAIRED_METRICS = ("coarse_recall@1", "fine_recall@1", "item_recall@1", "ndcg@5")


@dataclass
class Evaluation:
    """Everything an evaluation run produced, for the leaderboard and the report (lookbench_pipeline.report).

    * ``scores``: the SCORES table (per model, subset, metric; ``overall``; ``legacy:<name>`` rows).
    * ``skipped``: ``[{"model", "reason"}]`` for models that cannot run here.
    * ``models``: ``[{"model", "info", "cutoff", "cutoff_source", "description", "license"}]`` for scored models
      (``info`` is the embedder's :meth:`info`: id, revision, input size, dim, weights checksum; ``description``
      and ``license`` are the registry's words, e.g. that ImageNet features are not a fashion model).
    * ``counts``: per subset ``{"queries_in_release", "excluded_contamination", "gallery", "noise"}``, and
      ``"release_rejected_contamination": {source: n}`` from the manifest.
    * ``examples``: for sampled queries, each model's top-5 with hit/miss (see ``run._add_examples``).
    * ``thumbs``: ``"<subset>/<role>/<sample_id>" -> JPEG bytes`` of the images the examples show.
    * ``paired``: paired bootstrap tests of the best model against each other on the same queries.
    * ``legacy_counts``: per legacy source ``{"queries", "gallery", "unreadable", "no_positive"}``.
    * ``unscored``: ``[{"model", "subset", "reason"}]`` for a model and subset with no query left to score (every
      query flagged as contamination, or first seen before the model's cutoff), so that an empty result says why.
    * ``notes``: what a reader of the scores should know about how they were computed (a K larger than a subset's
      gallery, a model's own training cutoff used instead of ``evaluate.model_cutoffs``').
    * ``warnings``: what was left out that the caller may not have meant to leave out (subsets of a pulled folder
      that were not pulled, subsets this version does not know, an empty noise gallery): ``lookbench evaluate``
      prints each as ``warning: …``, :func:`lookbench_pipeline.score` raises each as a ``UserWarning``.
    * ``manifest_sha256``: the sha256 (hex) of the scored release's ``manifest.json`` as stored, the digest
      ``lookbench info`` ends with: the scores name the exact release they were computed on.
    """

    release: str
    ks: list[int]
    scores: pa.Table
    skipped: list[dict] = field(default_factory=list)
    models: list[dict] = field(default_factory=list)
    counts: dict[str, Any] = field(default_factory=dict)
    examples: list[dict] = field(default_factory=list)
    thumbs: dict[str, bytes] = field(default_factory=dict)
    paired: list[dict] = field(default_factory=list)
    legacy_counts: dict[str, dict] = field(default_factory=dict)
    cutoff: str | None = None
    unscored: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    manifest_sha256: str | None = None


def _model_columns(info: dict) -> dict:
    return {"model_revision": info.get("revision"), "model_input_size": info.get("input_size"),
            "model_dim": info.get("dim"), "model_weights_sha256": info.get("weights_sha256")}


def _paired_tests(rows: list[dict], per_query: dict, pooled_ids: dict, seed: int) -> list[dict]:
    """Best model (by overall value) against each other model on each of :data:`PAIRED_METRICS`, over the
    pooled queries both scored (the same queries only: models with different cutoffs are compared on the
    queries they share)."""
    out = []
    overall = {(r["model"], r["metric"]): r["value"] for r in rows if r["subset"] == "overall"}
    for metric in PAIRED_METRICS:
        models = sorted((m for m in per_query if (m, metric) in overall), key=lambda m: (-overall[(m, metric)], m))
        if len(models) < 2:
            continue
        best = models[0]
        ids_a = np.concatenate(pooled_ids[best])
        va = np.concatenate(per_query[best][metric])
        for other in models[1:]:
            ids_b = np.concatenate(pooled_ids[other])
            vb = np.concatenate(per_query[other][metric])
            shared, ia, ib = np.intersect1d(ids_a.astype(str), ids_b.astype(str), return_indices=True)
            if len(shared) == 0:
                continue
            t = paired_bootstrap(va[ia], vb[ib], seed=seed)
            out.append({"metric": metric, "model_a": best, "model_b": other, "n_queries": len(shared), **t})
    return out


def format_table(scores: pa.Table, metrics: tuple[str, ...] | None = None, ks: Sequence[int] | None = None) -> str:
    """A plain-text table: one row per (model, subset), one column per metric, values in percent. ``ks``: the
    Recall@K columns at exactly these K, then every nDCG@K scored, then the noise-gallery rates. By default (no
    ``ks``, no ``metrics``) the metrics at K = 1 and 10, nDCG@5 and the noise-gallery rates (those present); "-"
    where a metric does not apply (a legacy benchmark has item ids but no LookBench labels)."""
    data: dict[tuple[str, str], dict[str, float]] = {}
    nq: dict[tuple[str, str], int] = {}
    for r in scores.to_pylist():
        data.setdefault((r["model"], r["subset"]), {})[r["metric"]] = r["value"]
        nq[(r["model"], r["subset"])] = r["n_queries"]
    if metrics is None and ks is not None:
        ndcg = sorted({m for d in data.values() for m in d if m.startswith("ndcg@")}, key=lambda m: int(m[5:]))
        metrics = (*(f"{fam}@{k}" for fam in ("coarse_recall", "fine_recall", "item_recall")
                     for k in sorted(set(ks))), *ndcg, "distractor@1", "soft_negative@1")
    if metrics is None:
        metrics = ("coarse_recall@1", "coarse_recall@10", "fine_recall@1", "fine_recall@10", "item_recall@1",
                   "item_recall@10", "ndcg@5", "distractor@1", "soft_negative@1")
    metrics = tuple(m for m in metrics if any(m in d for d in data.values()))
    head = ["model", "subset", "queries", *metrics]
    lines = []
    order = {s: i for i, s in enumerate([*SUBSETS, "overall"])}
    for (model, subset), d in sorted(data.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], 99), kv[0][1])):
        lines.append([model, subset, str(nq[(model, subset)]),
                      *(f"{100 * d[m]:.1f}" if m in d else "-" for m in metrics)])
    widths = [max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(head)]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(head), fmt(["-" * w for w in widths]), *(fmt(line) for line in lines)])
