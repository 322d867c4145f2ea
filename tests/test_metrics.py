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
