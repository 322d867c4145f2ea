"""Retrieval metrics of LookBench: Coarse / Fine Recall@K and graded nDCG@K. Formulas and sources: docs/METRICS.md.

Inputs are per-row labels: a category (str) and attributes (``{name: value}``) for each query and gallery item.
"not visible" and absent attributes are "not carried": they neither agree nor disagree.

Ranking: gallery items in descending cosine similarity; ties broken by ascending gallery index (stable sort),
so results are deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

NOT_VISIBLE = "not visible"


def rank_topk(sim: np.ndarray, k: int) -> np.ndarray:
    """Indices of the top-``k`` gallery items per query: ``(q, min(k, g))`` int64, best first, ties by ascending
    gallery index (exactly: every item tied with the k-th score is a candidate, then the stable order decides).

    Cost: one ``np.partition`` per row to find the k-th score, then only the candidates (usually k) are sorted.
    Raises ValueError when a row contains NaN (no order is defined).
    """
    n, m = sim.shape
    k = min(k, m)
    if k == m:
        return np.argsort(-sim, axis=1, kind="stable")
    if n == 0 or k == 0:
        return np.zeros((n, k), dtype=np.int64)
    kth = np.partition(sim, m - k, axis=1)[:, m - k]  # the k-th largest score of each row
    rows, cols = np.nonzero(sim >= kth[:, None])  # row-major: rows ascending, then gallery index ascending
    counts = np.bincount(rows, minlength=n)
    if (counts < k).any():
        raise ValueError("similarities contain NaN: no ranking is defined")
    order = np.lexsort((cols, -sim[rows, cols], rows))  # by row, then score descending, then gallery index
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return cols[order][starts[:, None] + np.arange(k)].astype(np.int64)


class LabelCodes:
    """Categories and attributes encoded as integer codes for vectorised comparison.

    ``qc``/``gc``: ``(n,)`` int32 category codes; ``qa``/``ga``: ``(n, n_attribute_names)`` int32 codes of
    ``(name, value)`` pairs, ``-1`` where the attribute is not carried (absent or "not visible")."""

    def __init__(self, q_cat: Sequence[str], q_attrs: Sequence[Mapping[str, str]],
                 g_cat: Sequence[str], g_attrs: Sequence[Mapping[str, str]]):
        cats = {c: i for i, c in enumerate(sorted(set(q_cat) | set(g_cat)))}
        self.qc = np.array([cats[c] for c in q_cat], dtype=np.int32)
        self.gc = np.array([cats[c] for c in g_cat], dtype=np.int32)
        names = sorted({n for a in [*q_attrs, *g_attrs] for n in a})
        col = {n: j for j, n in enumerate(names)}
        self.qa = np.full((len(q_cat), len(names)), -1, dtype=np.int32)
        self.ga = np.full((len(g_cat), len(names)), -1, dtype=np.int32)
        vocab: dict[tuple[str, str], int] = {}
        for arr, rows in ((self.qa, q_attrs), (self.ga, g_attrs)):
            for i, a in enumerate(rows):
                for n, v in a.items():
                    if v is not None and v != NOT_VISIBLE:
                        arr[i, col[n]] = vocab.setdefault((n, v), len(vocab))
        self.n_values = len(vocab)
        self._onehot: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    @classmethod
    def from_codes(cls, qc: np.ndarray, qa: np.ndarray, gc: np.ndarray, ga: np.ndarray, n_values: int) -> LabelCodes:
        """From codes made elsewhere (e.g. vectorised from Arrow columns, ``evaluate.label_codes``): category codes
        ``(n,)`` and attribute codes ``(n, n_names)`` (``-1`` = not carried) on one shared vocabulary of
        ``n_values`` (name, value) pairs."""
        self = cls.__new__(cls)
        self.qc, self.gc = np.asarray(qc, dtype=np.int32), np.asarray(gc, dtype=np.int32)
        self.qa, self.ga = np.asarray(qa, dtype=np.int32), np.asarray(ga, dtype=np.int32)
        self.n_values = int(n_values)
        self._onehot = None
        return self

    def _indicators(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """One-hot ``(n, n_values)`` of the carried (name, value) pairs and ``(n, n_names)`` carried flags, float32,
        for queries and gallery: ``agree = Q1 @ G1.T`` and ``shared = Qc @ Gc.T`` are then matrix products."""
        if self._onehot is None:
            out = []
            for arr in (self.qa, self.ga):
                oh = np.zeros((arr.shape[0], max(self.n_values, 1)), dtype=np.float32)
                r, c = np.nonzero(arr >= 0)
                oh[r, arr[r, c]] = 1.0
                out += [oh, (arr >= 0).astype(np.float32)]
            self._onehot = (out[0], out[1], out[2], out[3])
        return self._onehot

    def compare(self, qi: np.ndarray, gi: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For queries ``qi`` against gallery items ``gi`` (all when None): ``(same_category, shared, agree)``,
        arrays of shape (len(qi), n_gallery): bool, int16 (attributes both carry), int16 (of those, equal).
        Computed as matrix products of one-hot indicators (exact: small integers in float32)."""
        gc = self.gc if gi is None else self.gc[gi]
        same = self.qc[qi][:, None] == gc[None, :]
        q1, qcar, g1, gcar = self._indicators()
        g1, gcar = (g1, gcar) if gi is None else (g1[gi], gcar[gi])
        agree = np.rint(q1[qi] @ g1.T).astype(np.int16)
        shared = np.rint(qcar[qi] @ gcar.T).astype(np.int16)
        return same, shared, agree


def graded_gain(same: np.ndarray, shared: np.ndarray, agree: np.ndarray) -> np.ndarray:
    """Gain of a gallery item for a query, in [0, 1]: 0 when the category differs, else
    ``(1 + agreeing attributes) / (1 + attributes both carry)`` (docs/METRICS.md)."""
    return np.where(same, (1.0 + agree) / (1.0 + shared), 0.0)


def topk_from_embeddings(q: np.ndarray, g: np.ndarray, k: int, chunk: int = 512,
                         progress: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` gallery items per query by inner product (cosine for unit vectors), computed in chunks of
    ``chunk`` queries so memory stays ``O(chunk * g)``. ``progress`` (a tqdm bar) is advanced by the queries of
    each chunk.

    Args:
        q: ``(n_q, d)`` float32 query embeddings; g: ``(n_g, d)`` float32 gallery embeddings.
    Returns:
        ``(top, scores)``: ``(n_q, min(k, n_g))`` int64 gallery indices, best first, ties by ascending index
        (:func:`rank_topk`), and their float32 similarities.
    """
    kk = min(k, g.shape[0])
    top = np.zeros((q.shape[0], kk), dtype=np.int64)
    scores = np.zeros((q.shape[0], kk), dtype=np.float32)
    for s in range(0, q.shape[0], chunk):
        sim = q[s : s + chunk] @ g.T
        t = rank_topk(sim, kk)
        top[s : s + chunk] = t
        scores[s : s + chunk] = np.take_along_axis(sim, t, axis=1)
        if progress is not None:
            progress.update(len(t))
    return top, scores


def evaluate_rankings(sim: np.ndarray, codes: LabelCodes, ks: Sequence[int], ndcg_k: int | Sequence[int],
                      q_items: Sequence[str] | None = None, g_items: Sequence[str] | None = None,
                      chunk: int = 512) -> dict[str, np.ndarray]:
    """Per-query metric values from a similarity matrix ``(q, g)`` (higher is closer): ranks with
    :func:`rank_topk` and scores the ranking with :func:`evaluate_top` (see there for the arguments and the
    returned dict)."""
    ndcg_ks = [ndcg_k] if isinstance(ndcg_k, int) else list(ndcg_k)
    kmax = max([*ks, *ndcg_ks])
    n_q = sim.shape[0]
    top = np.concatenate([rank_topk(sim[s : s + chunk], kmax) for s in range(0, n_q, chunk)]) if n_q else \
        np.zeros((0, min(kmax, sim.shape[1])), dtype=np.int64)
    return evaluate_top(top, codes, ks, ndcg_ks, q_items, g_items, chunk)


def evaluate_top(top: np.ndarray, codes: LabelCodes, ks: Sequence[int], ndcg_k: int | Sequence[int],
                 q_items: Sequence[str] | None = None, g_items: Sequence[str] | None = None,
                 chunk: int = 512) -> dict[str, np.ndarray]:
    """Per-query metric values from the ranked gallery indices of each query.

    Args:
        top: ``(q, >= max K)`` int gallery indices, best first (:func:`rank_topk` / :func:`topk_from_embeddings`;
            fewer columns only when the gallery is smaller than K).
        codes: labels of the same queries and gallery items.
        ks: the K of Recall@K (e.g. 1, 5, 10, 20).
        ndcg_k: the K (one or several) of nDCG@K.
        q_items, g_items: item ids, for exact-item Recall@K (optional).
    Returns:
        ``{"coarse_recall@K": (q,) float64 in {0,1}, "fine_recall@K": ..., "item_recall@K": ..., "ndcg@K": (q,)
        float64 in [0,1]}``.

    Cost: labels are compared only for the top-K pairs and, for the ideal DCG, between each query and the
    gallery items of its own category (every other item gains 0), so scoring is dominated by the ranking.
    """
    ndcg_ks = [ndcg_k] if isinstance(ndcg_k, int) else list(ndcg_k)
    n_q = top.shape[0]
    same = codes.qc[:, None] == codes.gc[top]
    qa, ga = codes.qa[:, None, :], codes.ga[top]
    both = (qa >= 0) & (ga >= 0)
    shared = both.sum(axis=2)
    agree = (both & (qa == ga)).sum(axis=2)
    out: dict[str, np.ndarray] = {}
    fine = same & (agree == shared)
    item = None
    if q_items is not None and g_items is not None:
        item = np.asarray(g_items, dtype=object)[top] == np.asarray(q_items, dtype=object)[:, None]
    for k in ks:
        out[f"coarse_recall@{k}"] = same[:, :k].any(axis=1).astype(float)
        out[f"fine_recall@{k}"] = fine[:, :k].any(axis=1).astype(float)
        if item is not None:
            out[f"item_recall@{k}"] = item[:, :k].any(axis=1).astype(float)
    # a K beyond the gallery ranks the whole gallery: nDCG@K = nDCG@n_g, computed at n_g (no (q, K) arrays)
    nk = min(max(ndcg_ks), len(codes.gc))
    discounts = 1.0 / np.log2(np.arange(2, nk + 2))
    gains_top = graded_gain(same, shared, agree)[:, :nk]
    dcg_cum = np.cumsum(gains_top * discounts[: gains_top.shape[1]], axis=1)  # DCG@1..min(nk, g)
    idcg_cum = np.zeros((n_q, nk))
    for c in np.unique(codes.qc):
        qi = np.nonzero(codes.qc == c)[0]
        gi = np.nonzero(codes.gc == c)[0]
        if len(gi) == 0:
            continue
        kk = min(nk, len(gi))
        for s in range(0, len(qi), chunk):
            qs = qi[s : s + chunk]
            _, sh, ag = codes.compare(qs, gi)
            gains = (1.0 + ag) / (1.0 + sh)
            best = -np.partition(-gains, kk - 1, axis=1)[:, :kk] if kk < gains.shape[1] else gains
            best = -np.sort(-best, axis=1)[:, :kk]
            cum = np.cumsum(best * discounts[:kk], axis=1)
            idcg_cum[qs, :kk] = cum
            idcg_cum[qs, kk:] = cum[:, -1:]
    for k in ndcg_ks:
        if dcg_cum.shape[1] == 0:
            out[f"ndcg@{k}"] = np.zeros(n_q)
            continue
        dcg = dcg_cum[:, min(k, dcg_cum.shape[1]) - 1]
        idcg = idcg_cum[:, min(k, nk) - 1]
        out[f"ndcg@{k}"] = np.divide(dcg, idcg, out=np.zeros_like(dcg), where=idcg > 0)
    return out


def ndcg_from_gains(gains: np.ndarray, top: np.ndarray, k: int) -> np.ndarray:
    """nDCG@k per query from the gains of every gallery item ``(q, g)`` and the ranked indices ``(q, >=k)``:
    ``DCG = sum_i gain_i / log2(i + 1)`` over the top k, divided by the DCG of the k largest gains (0 when a
    query has no positive gain), linear gains as in ``sklearn.metrics.ndcg_score``."""
    discounts = 1.0 / np.log2(np.arange(2, k + 2))
    rows = np.arange(gains.shape[0])[:, None]
    g_top = gains[rows, top[:, :k]]
    dcg = (g_top * discounts[: g_top.shape[1]]).sum(axis=1)
    ideal = -np.sort(-gains, axis=1)[:, :k]
    idcg = (ideal * discounts[: ideal.shape[1]]).sum(axis=1)
    return np.divide(dcg, idcg, out=np.zeros_like(dcg, dtype=float), where=idcg > 0)


def bootstrap_ci(values: np.ndarray, n_boot: int = 2000, alpha: float = 0.05, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean of per-query values (Efron & Tibshirani 1993):
    resample queries with replacement ``n_boot`` times; returns the ``alpha/2`` and ``1 - alpha/2`` quantiles
    (NaN, NaN for no queries)."""
    lo, hi = bootstrap_ci_many(np.asarray(values, dtype=float)[:, None], n_boot, alpha, seed)
    return float(lo[0]), float(hi[0])


def bootstrap_ci_many(values: np.ndarray, n_boot: int = 2000, alpha: float = 0.05, seed: int = 0,
                      block: int = 250) -> tuple[np.ndarray, np.ndarray]:
    """:func:`bootstrap_ci` for several metrics of the same queries at once, with the same resamples for every
    column (so the intervals of one model's metrics are consistent with each other).

    Args:
        values: ``(n_queries, n_metrics)`` per-query values.
    Returns:
        ``(low, high)``, each ``(n_metrics,)`` float64. Each resample is a row of counts (how often each query
        was drawn), so all metrics' means are one matrix product; ``block`` resamples at a time bound memory.
    """
    v = np.asarray(values, dtype=float)
    n = v.shape[0]
    if n == 0:
        return np.full(v.shape[1], np.nan), np.full(v.shape[1], np.nan)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n))
    means = np.empty((n_boot, v.shape[1]))
    for s in range(0, n_boot, block):
        b = idx[s : s + block]
        counts = np.bincount((b + n * np.arange(len(b))[:, None]).ravel(), minlength=len(b) * n)
        means[s : s + block] = counts.reshape(len(b), n) @ v / n
    return np.quantile(means, alpha / 2, axis=0), np.quantile(means, 1 - alpha / 2, axis=0)


def paired_bootstrap(a: np.ndarray, b: np.ndarray, n_boot: int = 2000, seed: int = 0) -> dict[str, float]:
    """Paired bootstrap test of model A against model B on the same queries (Koehn 2004; Sakai 2014): resample
    queries, recompute the mean difference; ``p_value`` is the two-sided share of resamples whose difference has
    the opposite sign to the observed one (doubled, capped at 1).

    Returns ``{"diff": mean(a - b), "ci_low", "ci_high", "p_value"}``. Raises ValueError when lengths differ.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired test needs the same queries: {a.shape} vs {b.shape}")
    d = a - b
    rng = np.random.default_rng(seed)
    boots = d[rng.integers(0, len(d), size=(n_boot, len(d)))].mean(axis=1)
    obs = float(d.mean())
    if obs == 0:
        p = 1.0
    else:
        p = min(1.0, 2 * float(np.mean(boots <= 0) if obs > 0 else np.mean(boots >= 0)))
    return {"diff": obs, "ci_low": float(np.quantile(boots, 0.025)), "ci_high": float(np.quantile(boots, 0.975)),
            "p_value": p}


def weighted_overall(per_subset: Mapping[str, tuple[float, int]]) -> float:
    """Query-count-weighted mean over subsets: ``sum(value_s * n_s) / sum(n_s)`` (how LookBench's "Overall"
    column is computed). ``per_subset[s] = (value, n_queries)``."""
    n = sum(c for _, c in per_subset.values())
    return float(sum(v * c for v, c in per_subset.values()) / n) if n else float("nan")
