"""Retrieval metrics on hand-worked cases (docs/METRICS.md)."""

import math

import numpy as np
import pytest

from lookbench_pipeline.metrics import LabelCodes, evaluate_rankings, rank_topk, weighted_overall


def test_rank_ties_by_gallery_index():
    sim = np.array([[0.5, 0.9, 0.5, 0.9, 0.1]])
    assert rank_topk(sim, 3).tolist() == [[1, 3, 0]]
    assert rank_topk(sim, 5).tolist() == [[1, 3, 0, 2, 4]]


def test_hand_worked_case():
    # one query: top, {color: red, sleeve_length: short}
    q_cat, q_attr = ["top"], [{"color": "red", "sleeve_length": "short"}]
    g_cat = ["dress", "top", "top", "top"]
    g_attr = [{"color": "red"}, {"color": "blue", "sleeve_length": "short"}, {"color": "red", "sleeve_length": "not visible"},
              {"color": "red", "sleeve_length": "short"}]
    sim = np.array([[0.9, 0.8, 0.7, 0.1]])  # ranking: dress, top(blue), top(red, nv), top(exact)
    r = evaluate_rankings(sim, LabelCodes(q_cat, q_attr, g_cat, g_attr), ks=[1, 2, 3], ndcg_k=3,
                          q_items=["A"], g_items=["X", "Y", "Z", "A"])
    assert r["coarse_recall@1"][0] == 0 and r["coarse_recall@2"][0] == 1
    assert r["fine_recall@2"][0] == 0, "blue contradicts red"
    assert r["fine_recall@3"][0] == 1, "'not visible' is not carried: colour agrees, nothing contradicts"
    assert r["item_recall@3"][0] == 0
    # gains: dress 0; blue top (1+1)/(1+2)=2/3; red top nv (1+1)/(1+1)=1; exact (1+2)/(1+2)=1
    dcg = 0 + (2 / 3) / math.log2(3) + 1 / math.log2(4)
    idcg = 1 + 1 / math.log2(3) + (2 / 3) / math.log2(4)
    assert r["ndcg@3"][0] == pytest.approx(dcg / idcg)


def test_weighted_overall():
    assert weighted_overall({"a": (1.0, 10), "b": (0.0, 30)}) == 0.25


def test_binary_ndcg_equals_sklearn():
    sklearn = pytest.importorskip("sklearn.metrics")
    from lookbench_pipeline.metrics import ndcg_from_gains

    rng = np.random.default_rng(0)
    gains = (rng.random((40, 60)) < 0.1).astype(float)
    gains[:, 0] = 1.0  # every query has a positive
    sim = rng.random((40, 60))  # continuous scores: no ties, where sklearn averages
    for k in (1, 5, 10, 20):
        ours = ndcg_from_gains(gains, rank_topk(sim, k), k)
        theirs = [sklearn.ndcg_score(gains[i : i + 1], sim[i : i + 1], k=k) for i in range(40)]
        assert ours == pytest.approx(theirs), k
    graded = rng.random((10, 30)) * (rng.random((10, 30)) < 0.3)
    graded[:, 1] = 0.5
    ours = ndcg_from_gains(graded, rank_topk(sim[:10, :30], 5), 5)
    assert ours == pytest.approx([sklearn.ndcg_score(graded[i : i + 1], sim[i : i + 1, :30], k=5) for i in range(10)])


def test_bootstrap_intervals_and_paired_test():
    from lookbench_pipeline.metrics import bootstrap_ci, paired_bootstrap

    rng = np.random.default_rng(1)
    a = (rng.random(500) < 0.6).astype(float)
    lo, hi = bootstrap_ci(a)
    assert lo < a.mean() < hi and hi - lo < 0.12
    b = np.where(rng.random(500) < 0.2, 0.0, a)  # model B loses a fifth of A's hits
    t = paired_bootstrap(a, b)
    assert t["diff"] > 0 and t["p_value"] < 0.01 and t["ci_low"] > 0
    same = paired_bootstrap(a, a.copy())
    assert same["p_value"] == 1.0
    with pytest.raises(ValueError):
        paired_bootstrap(a, b[:10])


def test_vectorised_metrics_equal_a_plain_reference():
    """Random labels, many tied scores: the fast path equals a per-query, per-item reference."""
    rng = np.random.default_rng(7)
    cats = ["top", "dress", "bag"]
    def lab(n):
        c = [cats[i] for i in rng.integers(0, 3, n)]
        a = [{k: v for k, v in (("color", ["red", "blue", "not visible"][rng.integers(3)]),
                                ("size", ["s", "m"][rng.integers(2)])) if rng.random() < 0.8} for _ in range(n)]
        return c, a
    qc, qa = lab(30)
    gc, ga = lab(80)
    sim = rng.integers(0, 6, (30, 80)).astype(float)  # heavy ties
    ks, nk = [1, 3, 10], 5
    got = evaluate_rankings(sim, LabelCodes(qc, qa, gc, ga), ks, nk)

    def carried(a):
        return {k: v for k, v in a.items() if v != "not visible"}

    def gain(i, j):
        if qc[i] != gc[j]:
            return 0.0
        x, y = carried(qa[i]), carried(ga[j])
        sh = [k for k in x if k in y]
        return (1 + sum(x[k] == y[k] for k in sh)) / (1 + len(sh))

    for i in range(30):
        order = sorted(range(80), key=lambda j: (-sim[i, j], j))
        for k in ks:
            assert got[f"coarse_recall@{k}"][i] == any(qc[i] == gc[j] for j in order[:k])
            fine = any(qc[i] == gc[j] and all(carried(qa[i])[a] == carried(ga[j])[a]
                                               for a in carried(qa[i]) if a in carried(ga[j])) for j in order[:k])
            assert got[f"fine_recall@{k}"][i] == fine
        dcg = sum(gain(i, j) / math.log2(r + 2) for r, j in enumerate(order[:nk]))
        ideal = sorted((gain(i, j) for j in range(80)), reverse=True)[:nk]
        idcg = sum(g / math.log2(r + 2) for r, g in enumerate(ideal))
        assert got[f"ndcg@{nk}"][i] == pytest.approx(dcg / idcg if idcg else 0.0)
