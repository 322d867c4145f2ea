"""Retrieval metrics of LookBench: Coarse / Fine Recall@K and graded nDCG@K. Formulas and sources: docs/METRICS.md.

Inputs are per-row labels: a category (str) and attributes (``{name: value}``) for each query and gallery item.
"not visible" and absent attributes are "not carried": they neither agree nor disagree.

Ranking: gallery items in descending cosine similarity; ties broken by ascending gallery index (stable sort),
so results are deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

NOT_VISIBLE = "not visible"


def rank_topk(sim: np.ndarray, k: int) -> np.ndarray:
    """Indices of the top-``k`` gallery items per query: ``(q, min(k, g))`` int64, best first, ties by index."""
    k = min(k, sim.shape[1])
    if k == sim.shape[1]:
        return np.argsort(-sim, axis=1, kind="stable")
    part = np.argpartition(-sim, k - 1, axis=1)[:, :k]
    vals = np.take_along_axis(sim, part, axis=1)
    order = np.lexsort((part, -vals), axis=-1)  # by score, then by gallery index
    out = np.take_along_axis(part, order, axis=1)
    # Rows where the k-th score is tied with items left outside the partition: redo those exactly.
    kth = vals.min(axis=1)
    boundary = (sim >= kth[:, None]).sum(axis=1) > k
    for i in np.nonzero(boundary)[0]:
        cand = np.nonzero(sim[i] >= kth[i])[0]  # ascending index order
        out[i] = cand[np.argsort(-sim[i, cand], kind="stable")][:k]
    return out


class LabelCodes:
    """Categories and attributes encoded as integer codes for vectorised comparison."""

    def __init__(self, q_cat: Sequence[str], q_attrs: Sequence[Mapping[str, str]],
                 g_cat: Sequence[str], g_attrs: Sequence[Mapping[str, str]]):
        cats = {c: i for i, c in enumerate(sorted(set(q_cat) | set(g_cat)))}
        self.qc = np.array([cats[c] for c in q_cat], dtype=np.int32)
        self.gc = np.array([cats[c] for c in g_cat], dtype=np.int32)
        names = sorted({n for a in [*q_attrs, *g_attrs] for n in a})
        self.qa = np.full((len(q_cat), len(names)), -1, dtype=np.int32)
        self.ga = np.full((len(g_cat), len(names)), -1, dtype=np.int32)
        vocab: dict[tuple[str, str], int] = {}
        for arr, rows in ((self.qa, q_attrs), (self.ga, g_attrs)):
            for i, a in enumerate(rows):
                for j, n in enumerate(names):
                    v = a.get(n)
                    if v is not None and v != NOT_VISIBLE:
                        arr[i, j] = vocab.setdefault((n, v), len(vocab))

    def compare(self, qi: np.ndarray, gi: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For queries ``qi`` against gallery items ``gi`` (all when None): ``(same_category, shared, agree)``,
        arrays of shape (len(qi), n_gallery): bool, int16 (attributes both carry), int16 (of those, equal)."""
        gc = self.gc if gi is None else self.gc[gi]
        ga = self.ga if gi is None else self.ga[gi]
        same = self.qc[qi][:, None] == gc[None, :]
        shared = np.zeros(same.shape, dtype=np.int16)
        agree = np.zeros(same.shape, dtype=np.int16)
        for j in range(self.qa.shape[1]):
            q = self.qa[qi, j][:, None]
            g = ga[None, :, j]
            both = (q >= 0) & (g >= 0)
            shared += both
            agree += both & (q == g)
        return same, shared, agree


def graded_gain(same: np.ndarray, shared: np.ndarray, agree: np.ndarray) -> np.ndarray:
    """Gain of a gallery item for a query, in [0, 1]: 0 when the category differs, else
    ``(1 + agreeing attributes) / (1 + attributes both carry)`` (docs/METRICS.md)."""
    return np.where(same, (1.0 + agree) / (1.0 + shared), 0.0)


def evaluate_rankings(sim: np.ndarray, codes: LabelCodes, ks: Sequence[int], ndcg_k: int,
                      q_items: Sequence[str] | None = None, g_items: Sequence[str] | None = None,
                      chunk: int = 512) -> dict[str, np.ndarray]:
    """Per-query metric values from a similarity matrix.

    Args:
        sim: ``(q, g)`` similarities (higher is closer).
        codes: labels of the same queries and gallery items.
        ks: the K of Recall@K.
        ndcg_k: the K of nDCG@K.
        q_items, g_items: item ids, for exact-item Recall@K (optional).
    Returns:
        ``{"coarse_recall@K": (q,) float64 in {0,1}, "fine_recall@K": ..., "item_recall@K": ..., "ndcg@K": (q,)}``

    Cost: labels are compared only for the top-K pairs and, for the ideal DCG, between each query and the
    gallery items of its own category (every other item gains 0), so scoring is dominated by the ranking.
    """
    kmax = max([*ks, ndcg_k])
    n_q = sim.shape[0]
    top = np.concatenate([rank_topk(sim[s : s + chunk], kmax) for s in range(0, n_q, chunk)]) if n_q else \
        np.zeros((0, min(kmax, sim.shape[1])), dtype=np.int64)
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
    gains_top = graded_gain(same, shared, agree)[:, :ndcg_k]
    discounts = 1.0 / np.log2(np.arange(2, ndcg_k + 2))
    dcg = (gains_top * discounts[: gains_top.shape[1]]).sum(axis=1)
    idcg = np.zeros(n_q)
    for c in np.unique(codes.qc):
        qi = np.nonzero(codes.qc == c)[0]
        gi = np.nonzero(codes.gc == c)[0]
        if len(gi) == 0:
            continue
        kk = min(ndcg_k, len(gi))
        for s in range(0, len(qi), chunk):
            qs = qi[s : s + chunk]
            _, sh, ag = codes.compare(qs, gi)
            gains = (1.0 + ag) / (1.0 + sh)
            best = -np.partition(-gains, kk - 1, axis=1)[:, :kk] if kk < gains.shape[1] else gains
            best = -np.sort(-best, axis=1)
            idcg[qs] = (best * discounts[:kk]).sum(axis=1)
    out[f"ndcg@{ndcg_k}"] = np.divide(dcg, idcg, out=np.zeros_like(dcg), where=idcg > 0)
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
    resample queries with replacement ``n_boot`` times; returns the ``alpha/2`` and ``1 - alpha/2`` quantiles."""
    values = np.asarray(values, dtype=float)
    if len(values) == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(n_boot, len(values)))].mean(axis=1)
    return float(np.quantile(means, alpha / 2)), float(np.quantile(means, 1 - alpha / 2))


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
