"""Scoring retrieval models on a published release: per subset and overall (query-count weighted).

When the release has a ``noise`` gallery (distractors mined from Fashion200K, :mod:`lookbench_pipeline.negatives`),
it is added to every subset's gallery, and two more per-query rates are reported: ``distractor@1`` (the top-1
result is a noise-gallery image) and ``soft_negative@1`` (the top-1 result is a soft negative: a noise-gallery
image of the query's category that differs in at least one attribute both carry; docs/METRICS.md).

Each score row names the model's id, revision, input size, embedding size and weights checksum.
"""

from __future__ import annotations

import hashlib
import io
import logging
from datetime import date, datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from PIL import Image

from . import schemas
from .embed import EmbedderUnavailable, EmbeddingCache, load_embedder, resolve_spec
from .metrics import LabelCodes, bootstrap_ci, evaluate_rankings, weighted_overall
from .release import SUBSETS, read_file, read_manifest
from .store import ObjectStore

log = logging.getLogger(__name__)


def _embed_published(cache: EmbeddingCache, emb, t: pa.Table) -> np.ndarray:
    """Vectors of a release file's images, embedded from the published bytes and cached under the sha256 of those
    bytes (not the original's ``image_sha256``): the score never depends on what else this machine embedded."""
    imgs = t.column("image").to_pylist()
    shas = [hashlib.sha256(x["bytes"]).hexdigest() for x in imgs]
    return cache.embed(emb, shas, lambda i: Image.open(io.BytesIO(imgs[i]["bytes"])))


def _labels(t: pa.Table) -> tuple[list[str], list[dict[str, str]]]:
    cats = t.column("category").to_pylist()
    attrs = [{a["name"]: a["value"] for a in row or []} for row in t.column("attributes").to_pylist()]
    return cats, attrs


def noise_hits(sim: np.ndarray, codes: LabelCodes, n_own: int) -> dict[str, np.ndarray]:
    """Per-query ``distractor@1`` and ``soft_negative@1`` (float 0/1, shape ``(q,)``) for a similarity matrix whose
    gallery columns ``n_own:`` are the noise gallery. The top-1 is the highest score, ties to the lower column
    (the ranking rule of :mod:`lookbench_pipeline.metrics`)."""
    if sim.shape[0] == 0:
        return {"distractor@1": np.zeros(0), "soft_negative@1": np.zeros(0)}
    top = np.argmax(sim, axis=1)
    noise = top >= n_own
    same = codes.qc == codes.gc[top]
    qa, ga = codes.qa, codes.ga[top]
    both = (qa >= 0) & (ga >= 0)
    differs = (both & (qa != ga)).any(axis=1)
    return {"distractor@1": noise.astype(float), "soft_negative@1": (noise & same & differs).astype(float)}


def _model_columns(info: dict) -> dict:
    return {"model_revision": info.get("revision"), "model_input_size": info.get("input_size"),
            "model_dim": info.get("dim"), "model_weights_sha256": info.get("weights_sha256")}


def _cut(t: pa.Table, cutoff: date | None) -> pa.Table:
    if cutoff is None:
        return t
    ts = datetime(cutoff.year, cutoff.month, cutoff.day, tzinfo=timezone.utc)
    return t.filter(pc.greater_equal(t["first_seen_at"], pa.scalar(ts, schemas.TS)))


def model_cutoff(model_id: str) -> date | None:
    """The declared training cutoff of a model (registry ``training_cutoff``), or None when none is declared."""
    try:
        c = resolve_spec(model_id).training_cutoff
    except ValueError:
        return None
    return date.fromisoformat(str(c)) if c else None


def evaluate_release(store: ObjectStore, version: str, model_ids: list[str], cache_dir: Path,
                     ks: list[int] | None = None, ndcg_k: int = 5, cutoff: date | str | None = None,
                     ) -> tuple[pa.Table, list[dict]]:
    """Score each model on every subset of a published release.

    Args:
        cutoff: only queries first seen on or after this date (UTC) are scored (the gallery is kept whole);
            ``"model"``: each model's own declared training cutoff (the registry's ``training_cutoff``; a model
            without one is scored on every query).
    Returns:
        ``(scores, skipped)``: the ``scores`` table (schema SCORES), and ``[{"model", "reason"}]`` for models that
        cannot run here.
    """
    ks = ks or [1, 5, 10]
    manifest = read_manifest(store, version)
    subsets = [s for s in SUBSETS if f"{s}/query.parquet" in manifest["files"]]
    noise = read_file(store, version, "noise", "gallery") if "noise/gallery.parquet" in manifest["files"] else None
    rows, skipped = [], []
    for model_id in model_ids:
        try:
            emb = load_embedder(model_id)
        except EmbedderUnavailable as exc:
            skipped.append({"model": model_id, "reason": str(exc)})
            continue
        info = emb.info()
        cut = model_cutoff(model_id) if cutoff == "model" else cutoff
        cut_s = cut.isoformat() if cut else None
        cache = EmbeddingCache(cache_dir, info)
        nv = None
        if noise is not None and noise.num_rows:
            nv = _embed_published(cache, emb, noise)
            nc, na = _labels(noise)
        per_metric: dict[str, dict[str, tuple[float, int]]] = {}
        per_query: dict[str, list[np.ndarray]] = {}
        for subset in subsets:
            q = _cut(read_file(store, version, subset, "query"), cut)
            g = read_file(store, version, subset, "gallery")
            if q.num_rows == 0 or g.num_rows == 0:
                continue
            qv, gv = _embed_published(cache, emb, q), _embed_published(cache, emb, g)
            qc, qa = _labels(q)
            gc, ga = _labels(g)
            g_items = g.column("item_ID").to_pylist()
            if nv is not None:  # the noise gallery joins every subset's gallery as distractors
                gv = np.concatenate([gv, nv])
                gc, ga = gc + nc, ga + na
                g_items = g_items + noise.column("item_ID").to_pylist()
            sim = qv @ gv.T
            codes = LabelCodes(qc, qa, gc, ga)
            res = evaluate_rankings(sim, codes, ks, ndcg_k, q.column("item_ID").to_pylist(), g_items)
            if nv is not None:
                res.update(noise_hits(sim, codes, g.num_rows))
            for metric, values in res.items():
                v = float(values.mean())
                per_metric.setdefault(metric, {})[subset] = (v, q.num_rows)
                per_query.setdefault(metric, []).append(values)
                lo, hi = bootstrap_ci(values)
                rows.append({"release": version, "model": model_id, "subset": subset, "metric": metric,
                             "value": v, "ci_low": lo, "ci_high": hi, "n_queries": q.num_rows,
                             "cutoff": cut_s, **_model_columns(info)})
        for metric, by_subset in per_metric.items():
            # query-count weighting is the mean over the pooled queries, so the interval resamples the pool
            lo, hi = bootstrap_ci(np.concatenate(per_query[metric]))
            rows.append({"release": version, "model": model_id, "subset": "overall", "metric": metric,
                         "value": weighted_overall(by_subset), "ci_low": lo, "ci_high": hi,
                         "n_queries": sum(n for _, n in by_subset.values()), "cutoff": cut_s,
                         **_model_columns(info)})
    return schemas.from_rows(rows, schemas.SCORES), skipped


def evaluate_legacy(sources: list, model_ids: list[str], data_dir: Path, release: str) -> pa.Table:
    """Each model's exact-item Recall@K on each legacy benchmark (``subset = "legacy:<name>"``), for the report
    to show beside the live scores. Demo sources (``demo: true``) are generated under ``data_dir`` if missing."""
    from .legacy import score_inshop, write_demo_inshop

    rows = []
    for src in sources:
        path = src.path if Path(src.path).is_absolute() else data_dir / src.path
        if src.kind != "deepfashion_inshop":
            raise ValueError(f"legacy scoring supports deepfashion_inshop, not {src.kind} ({src.name})")
        if src.demo and not path.exists():
            write_demo_inshop(path)
        for model_id in model_ids:
            try:
                emb = load_embedder(model_id)
            except EmbedderUnavailable:
                continue
            res = score_inshop(path, emb)
            for metric, v in res.items():
                if metric.startswith("item_recall@"):
                    rows.append({"release": release, "model": model_id, "subset": f"legacy:{src.name}",
                                 "metric": metric, "value": v, "ci_low": None, "ci_high": None,
                                 "n_queries": int(res["queries"]), "cutoff": None, **_model_columns(emb.info())})
    return schemas.from_rows(rows, schemas.SCORES)


def format_table(scores: pa.Table, metrics: tuple[str, ...] = ("coarse_recall@1", "coarse_recall@5",
                                                               "coarse_recall@10", "fine_recall@1", "fine_recall@5",
                                                               "fine_recall@10", "ndcg@5", "item_recall@1",
                                                               "item_recall@10", "distractor@1",
                                                               "soft_negative@1")) -> str:
    """A plain-text table: one row per (model, subset), one column per metric, values in percent."""
    data: dict[tuple[str, str], dict[str, float]] = {}
    nq: dict[tuple[str, str], int] = {}
    for r in scores.to_pylist():
        data.setdefault((r["model"], r["subset"]), {})[r["metric"]] = r["value"]
        nq[(r["model"], r["subset"])] = r["n_queries"]
    metrics = tuple(m for m in metrics if any(m in d for d in data.values()))
    head = ["model", "subset", "queries", *metrics]
    lines = []
    order = {s: i for i, s in enumerate([*SUBSETS, "overall"])}
    # "-" where a metric does not apply (a legacy benchmark has item ids but no LookBench labels)
    for (model, subset), d in sorted(data.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], 99))):
        lines.append([model, subset, str(nq[(model, subset)]),
                      *(f"{100 * d[m]:.1f}" if m in d else "-" for m in metrics)])
    widths = [max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(head)]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([fmt(head), fmt(["-" * w for w in widths]), *(fmt(line) for line in lines)])
