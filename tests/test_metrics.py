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


def test_graded_hand_worked_case_with_ties():
    """Tied similarities are ordered by ascending gallery index; the tie decides Fine Recall@2 and nDCG here.

    query: top {color: red}; gallery: 0 dress (0.9), 1 top {blue} (0.5), 2 top {red} (0.5), 3 top {} (0.1).
    Ranking by the tie rule: 0, 1, 2, 3. Gains: 0; (1+0)/(1+1) = 1/2; (1+1)/(1+1) = 1; no shared attribute: 1.
    """
    codes = LabelCodes(["top"], [{"color": "red"}], ["dress", "top", "top", "top"],
                       [{"color": "red"}, {"color": "blue"}, {"color": "red"}, {}])
    sim = np.array([[0.9, 0.5, 0.5, 0.1]])
    r = evaluate_rankings(sim, codes, ks=[1, 2, 3, 20], ndcg_k=[1, 2, 3, 20], q_items=["Q"],
                          g_items=["a", "b", "Q", "c"])
    assert [r[f"coarse_recall@{k}"][0] for k in (1, 2, 3, 20)] == [0, 1, 1, 1]
    assert [r[f"fine_recall@{k}"][0] for k in (1, 2, 3, 20)] == [0, 0, 1, 1], "blue (index 1) wins the tie"
    assert [r[f"item_recall@{k}"][0] for k in (1, 2, 3, 20)] == [0, 0, 1, 1]
    d = [1 / math.log2(i + 1) for i in range(1, 5)]
    ideal = [1 * d[0], 1 * d[0] + 1 * d[1], 1 * d[0] + 1 * d[1] + 0.5 * d[2]]
    assert r["ndcg@1"][0] == 0.0
    assert r["ndcg@2"][0] == pytest.approx(0.5 * d[1] / ideal[1])
    assert r["ndcg@3"][0] == pytest.approx((0.5 * d[1] + 1 * d[2]) / ideal[2])
    # K beyond the gallery: the whole ranking counts, IDCG over every item
    assert r["ndcg@20"][0] == pytest.approx((0.5 * d[1] + d[2] + d[3]) / (d[0] + d[1] + 0.5 * d[2]))
    # the other tie order (the red top first) would have made Fine Recall@2 a hit: the rule matters
    swapped = evaluate_rankings(sim[:, [0, 2, 1, 3]], LabelCodes(["top"], [{"color": "red"}],
                                ["dress", "top", "top", "top"], [{"color": "red"}, {"color": "red"},
                                                                  {"color": "blue"}, {}]), [2], 2)
    assert swapped["fine_recall@2"][0] == 1


def test_not_visible_and_category_mismatch():
    """'not visible' on either side is not carried; a category mismatch gains 0 even when attributes agree."""
    codes = LabelCodes(["skirt"], [{"color": "not visible", "length": "mini"}], ["top", "skirt", "skirt"],
                       [{"color": "black", "length": "mini"}, {"color": "black", "length": "not visible"},
                        {"color": "red", "length": "maxi"}])
    r = evaluate_rankings(np.array([[0.9, 0.8, 0.7]]), codes, [1, 2, 3], [1, 2, 3])
    assert r["fine_recall@1"][0] == 0 and r["fine_recall@2"][0] == 1  # nothing both sides carry: a Fine hit
    assert r["ndcg@1"][0] == 0.0
    # gains: 0, 1 (no shared attribute), (1+0)/(1+1) = 0.5
    assert r["ndcg@3"][0] == pytest.approx((1 / math.log2(3) + 0.5 / 2) / (1 + 0.5 / math.log2(3)))


def test_topk_from_embeddings_matches_full_ranking():
    from lookbench_pipeline.metrics import topk_from_embeddings

    rng = np.random.default_rng(3)
    q = rng.standard_normal((37, 8)).astype(np.float32)
    g = np.round(rng.standard_normal((50, 8)), 1).astype(np.float32)
    g[10] = g[3]  # exact ties
    top, scores = topk_from_embeddings(q, g, 7, chunk=5)
    assert top.tolist() == rank_topk(q @ g.T, 7).tolist()
    assert np.allclose(scores, np.take_along_axis(q @ g.T, top, axis=1))


def test_bootstrap_many_equals_one_at_a_time():
    from lookbench_pipeline.metrics import bootstrap_ci, bootstrap_ci_many

    rng = np.random.default_rng(4)
    v = np.stack([(rng.random(300) < p).astype(float) for p in (0.2, 0.5, 0.9)], axis=1)
    lo, hi = bootstrap_ci_many(v, block=7)
    for j in range(3):
        assert (lo[j], hi[j]) == pytest.approx(bootstrap_ci(v[:, j]))
        assert lo[j] <= v[:, j].mean() <= hi[j]


def _retrieval_case(seed=5, n_items=40, n_q=60, n_distract=200, dim=32):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_items, dim))
    q_lab = rng.integers(0, n_items, n_q)
    g_lab = np.concatenate([np.repeat(np.arange(n_items), 2), rng.integers(n_items, 10 * n_items, n_distract)])
    q = centres[q_lab] + 1.2 * rng.standard_normal((n_q, dim))
    g = np.concatenate([centres[np.repeat(np.arange(n_items), 2)], rng.standard_normal((n_distract, dim))])
    g[: 2 * n_items] += 1.2 * rng.standard_normal((2 * n_items, dim))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    return q, q_lab, g, g_lab


def test_item_recall_equals_look_bench_evaluate_rank_accuracy():
    """Exact-item Recall@K equals the public look-bench package's evaluate_rank_accuracy (percent, 2 decimals)
    on the same features and labels (continuous features: no tied scores, where torch.argsort is unordered)."""
    rank = pytest.importorskip("look_bench.metrics.rank")
    torch = pytest.importorskip("torch")
    from lookbench_pipeline.metrics import evaluate_top, topk_from_embeddings

    q, q_lab, g, g_lab = _retrieval_case()
    theirs = rank.evaluate_rank_accuracy(torch.from_numpy(q), q_lab, torch.from_numpy(g), g_lab,
                                         rank_values=[1, 5, 10, 20])
    top, _ = topk_from_embeddings(q, g, 20)
    codes = LabelCodes(["x"] * len(q), [{}] * len(q), ["x"] * len(g), [{}] * len(g))
    ours = evaluate_top(top, codes, [1, 5, 10, 20], [20], [str(x) for x in q_lab], [str(x) for x in g_lab])
    for k in (1, 5, 10, 20):
        assert theirs[f"recall@{k}"] == pytest.approx(round(100 * ours[f"item_recall@{k}"].mean(), 2), abs=1e-9), k
    assert 0 < theirs["recall@1"] < theirs["recall@20"] < 100, "a case where the metric discriminates"


def test_binary_ndcg_equals_look_bench_ndcg():
    """Binary-relevance nDCG (relevance = same item) equals look-bench's NDCGEvaluator."""
    metrics = pytest.importorskip("look_bench.metrics")
    torch = pytest.importorskip("torch")
    from lookbench_pipeline.metrics import ndcg_from_gains

    q, q_lab, g, g_lab = _retrieval_case(seed=6)
    theirs = metrics.NDCGEvaluator(rank_values=[1, 5, 10, 20]).evaluate(
        torch.from_numpy(q), q_lab, torch.from_numpy(g), g_lab)
    gains = (q_lab[:, None] == g_lab[None, :]).astype(float)
    top = rank_topk(q @ g.T, 20)
    for k in (1, 5, 10, 20):
        assert theirs[f"ndcg@{k}"] == pytest.approx(round(100 * ndcg_from_gains(gains, top, k).mean(), 2), abs=1e-9)


def test_rank_topk_ties_at_the_boundary_and_nan():
    sim = np.array([[0.2, 0.7, 0.7, 0.7, 0.1, 0.7], [0.5, 0.5, 0.5, 0.5, 0.5, 0.5]])
    assert rank_topk(sim, 2).tolist() == [[1, 2], [0, 1]]
    assert rank_topk(sim, 5).tolist() == [[1, 2, 3, 5, 0], [0, 1, 2, 3, 4]]
    rng = np.random.default_rng(9)
    heavy = rng.integers(0, 4, (50, 300)).astype(np.float32)
    ref = np.argsort(-heavy, axis=1, kind="stable")[:, :20]
    assert rank_topk(heavy, 20).tolist() == ref.tolist()
    with pytest.raises(ValueError, match="NaN"):
        rank_topk(np.array([[0.1, np.nan, 0.3]]), 2)


def test_arrow_label_codes_compare_like_the_python_ones():
    """evaluate.label_codes (vectorised from Arrow columns) gives the same comparisons and metrics as LabelCodes
    built from Python dicts: "not visible" and null values not carried, a repeated name keeps its last value."""
    import pyarrow as pa

    from lookbench_pipeline import schemas
    from lookbench_pipeline.evaluate import label_codes
    from lookbench_pipeline.metrics import evaluate_top

    rng = np.random.default_rng(11)

    def rows(n):
        out = []
        for _ in range(n):
            attrs = [{"name": k, "value": [None, "not visible", "red", "blue", "s"][rng.integers(5)]}
                     for k in ("color", "size", "fit") if rng.random() < 0.7]
            if rng.random() < 0.1 and attrs:  # a repeated name: the last value wins
                attrs.append({"name": attrs[0]["name"], "value": ["not visible", "green"][rng.integers(2)]})
            out.append((["top", "dress", "bag"][rng.integers(3)], attrs if rng.random() < 0.95 else None))
        return out

    def table(rs):
        return pa.table({"category": [c for c, _ in rs],
                         "attributes": pa.array([a for _, a in rs], pa.list_(schemas.ATTRIBUTE))})

    def dicts(rs):  # in order, so a repeated name keeps its last value; a null value is not carried
        return [c for c, _ in rs], [{x["name"]: x["value"] if x["value"] is not None else "not visible"
                                     for x in a or []} for _, a in rs]

    q, g = rows(40), rows(90)
    fast = label_codes(table(q), table(g))
    slow = LabelCodes(*dicts(q), *dicts(g))
    qi = np.arange(40)
    for a, b in zip(fast.compare(qi), slow.compare(qi)):
        assert np.array_equal(a, b)
    top = rank_topk(rng.random((40, 90)), 20)
    f, s = evaluate_top(top, fast, [1, 5, 20], [1, 5, 20]), evaluate_top(top, slow, [1, 5, 20], [1, 5, 20])
    for m in s:
        assert np.allclose(f[m], s[m]), m
