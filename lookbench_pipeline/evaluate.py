"""Scoring retrieval models on a published release: per subset and overall (query-count weighted)."""

from __future__ import annotations

import io
import logging
from collections.abc import Callable
from datetime import date, datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from PIL import Image

from . import schemas
from .embed import Embedder, EmbedderUnavailable, load_embedder
from .metrics import LabelCodes, bootstrap_ci, evaluate_rankings, weighted_overall
from .release import SUBSETS, read_file, read_manifest
from .store import ObjectStore

log = logging.getLogger(__name__)


class EmbeddingCache:
    """Embeddings on disk, one ``.npy`` per (model id, revision, image sha256): a re-run embeds nothing twice."""

    def __init__(self, root: Path, info: dict):
        slug = f"{info['model_id']}@{info.get('revision') or 'main'}".replace("/", "__").replace(":", "_")
        self.dir = root / slug
        self.dir.mkdir(parents=True, exist_ok=True)

    def embed(self, embedder: Embedder, shas: list[str], images: Callable[[int], Image.Image],
              batch: int = 64) -> np.ndarray:
        out = np.zeros((len(shas), embedder.dim), dtype=np.float32)
        todo = []
        for i, s in enumerate(shas):
            f = self.dir / f"{s}.npy"
            if f.is_file():
                out[i] = np.load(f)
            else:
                todo.append(i)
        for b in range(0, len(todo), batch):
            idx = todo[b : b + batch]
            vecs = embedder.embed([images(i) for i in idx])
            for i, v in zip(idx, vecs):
                out[i] = v
                np.save(self.dir / f"{shas[i]}.npy", v)
        return out


def _labels(t: pa.Table) -> tuple[list[str], list[dict[str, str]]]:
    cats = t.column("category").to_pylist()
    attrs = [{a["name"]: a["value"] for a in row or []} for row in t.column("attributes").to_pylist()]
    return cats, attrs


def _cut(t: pa.Table, cutoff: date | None) -> pa.Table:
    if cutoff is None:
        return t
    ts = datetime(cutoff.year, cutoff.month, cutoff.day, tzinfo=timezone.utc)
    return t.filter(pc.greater_equal(t["first_seen_at"], pa.scalar(ts, schemas.TS)))


def evaluate_release(store: ObjectStore, version: str, model_ids: list[str], cache_dir: Path,
                     ks: list[int] | None = None, ndcg_k: int = 5, cutoff: date | None = None,
                     ) -> tuple[pa.Table, list[dict]]:
    """Score each model on every subset of a published release.

    Args:
        cutoff: only queries first seen on or after this date (UTC) are scored (the gallery is kept whole).
    Returns:
        ``(scores, skipped)``: the ``scores`` table (schema SCORES), and ``[{"model", "reason"}]`` for models that
        cannot run here.
    """
    ks = ks or [1, 5, 10]
    manifest = read_manifest(store, version)
    subsets = [s for s in SUBSETS if f"{s}/query.parquet" in manifest["files"]]
    rows, skipped = [], []
    for model_id in model_ids:
        try:
            emb = load_embedder(model_id)
        except EmbedderUnavailable as exc:
            skipped.append({"model": model_id, "reason": str(exc)})
            continue
        cache = EmbeddingCache(cache_dir, emb.info())
        per_metric: dict[str, dict[str, tuple[float, int]]] = {}
        per_query: dict[str, list[np.ndarray]] = {}
        for subset in subsets:
            q = _cut(read_file(store, version, subset, "query"), cutoff)
            g = read_file(store, version, subset, "gallery")
            if q.num_rows == 0 or g.num_rows == 0:
                continue
            qimg, gimg = q.column("image").to_pylist(), g.column("image").to_pylist()
            qv = cache.embed(emb, q.column("image_sha256").to_pylist(),
                             lambda i: Image.open(io.BytesIO(qimg[i]["bytes"])))
            gv = cache.embed(emb, g.column("image_sha256").to_pylist(),
                             lambda i: Image.open(io.BytesIO(gimg[i]["bytes"])))
            qc, qa = _labels(q)
            gc, ga = _labels(g)
            res = evaluate_rankings(qv @ gv.T, LabelCodes(qc, qa, gc, ga), ks, ndcg_k,
                                    q.column("item_ID").to_pylist(), g.column("item_ID").to_pylist())
            for metric, values in res.items():
                v = float(values.mean())
                per_metric.setdefault(metric, {})[subset] = (v, q.num_rows)
                per_query.setdefault(metric, []).append(values)
                lo, hi = bootstrap_ci(values)
                rows.append({"release": version, "model": model_id, "subset": subset, "metric": metric,
                             "value": v, "ci_low": lo, "ci_high": hi, "n_queries": q.num_rows,
                             "cutoff": cutoff.isoformat() if cutoff else None})
        for metric, by_subset in per_metric.items():
            # query-count weighting is the mean over the pooled queries, so the interval resamples the pool
            lo, hi = bootstrap_ci(np.concatenate(per_query[metric]))
            rows.append({"release": version, "model": model_id, "subset": "overall", "metric": metric,
                         "value": weighted_overall(by_subset), "ci_low": lo, "ci_high": hi,
                         "n_queries": sum(n for _, n in by_subset.values()),
                         "cutoff": cutoff.isoformat() if cutoff else None})
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
                                 "n_queries": int(res["queries"]), "cutoff": None})
    return schemas.from_rows(rows, schemas.SCORES)


def format_table(scores: pa.Table, metrics: tuple[str, ...] = ("coarse_recall@1", "coarse_recall@5",
                                                               "coarse_recall@10", "fine_recall@1", "fine_recall@5",
                                                               "fine_recall@10", "ndcg@5", "item_recall@1",
                                                               "item_recall@10")) -> str:
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
