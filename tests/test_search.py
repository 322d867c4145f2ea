"""Exact chunked top-k search against a brute-force ranking, ties, the band (max_score), and FAISS."""

import numpy as np
import pytest

from lookbench_pipeline.metrics import rank_topk
from lookbench_pipeline.search import topk


def _reference(q, g, k, max_score=None):
    sim = q @ g.T
    if max_score is not None:
        sim = np.where(sim > max_score, -np.inf, sim)
    idx = rank_topk(sim, k)
    sc = np.take_along_axis(sim, idx, axis=1)
    return sc, np.where(np.isfinite(sc), idx, -1)


@pytest.mark.parametrize("seed", range(12))
def test_matches_brute_force_any_chunking(seed):
    rng = np.random.default_rng(seed)
    nq, ng, d = int(rng.integers(1, 40)), int(rng.integers(1, 300)), 8
    q = rng.standard_normal((nq, d)).astype(np.float32)
    g = rng.standard_normal((ng, d)).astype(np.float32)
    if seed % 3 == 0:  # integer vectors: many exactly tied scores
        q, g = np.round(q), np.round(g)
    k = int(rng.integers(1, 40))
    ms = 0.5 if seed % 2 else None
    ref_s, ref_i = _reference(q, g, k, ms)
    res = topk(q, g, k, max_score=ms, query_chunk=int(rng.integers(1, 16)), gallery_chunk=int(rng.integers(1, 50)))
    assert res.indices.shape == (nq, min(k, ng)) and res.scores.dtype == np.float32
    np.testing.assert_array_equal(res.indices, ref_i)
    fin = np.isfinite(ref_s)
    np.testing.assert_array_equal(np.isfinite(res.scores), fin)
    np.testing.assert_allclose(res.scores[fin], ref_s[fin], atol=1e-5)


def test_ties_go_to_the_lower_gallery_index():
    q = np.ones((1, 2), np.float32)
    g = np.ones((10, 2), np.float32)  # every score equal
    res = topk(q, g, 3, gallery_chunk=4)
    assert res.indices.tolist() == [[0, 1, 2]]


def test_band_skips_near_duplicates_and_reports_too_few():
    q = np.array([[1, 0]], np.float32)
    g = np.array([[1, 0], [0.8, 0.6], [0, 1], [-1, 0]], np.float32)
    res = topk(q, g, 3, max_score=0.95)
    assert res.indices.tolist() == [[1, 2, 3]]
    res = topk(q, g, 3, max_score=-0.5)
    assert res.indices.tolist() == [[3, -1, -1]] and np.isneginf(res.scores[0, 1:]).all()


def test_errors_and_empty():
    with pytest.raises(ValueError, match="dimension"):
        topk(np.zeros((2, 3)), np.zeros((4, 5)), 1)
    with pytest.raises(ValueError, match="k must"):
        topk(np.zeros((2, 3)), np.zeros((4, 3)), 0)
    with pytest.raises(ValueError, match="backend"):
        topk(np.zeros((2, 3)), np.zeros((4, 3)), 1, backend="annoy")
    assert topk(np.zeros((0, 3)), np.zeros((4, 3)), 2).indices.shape == (0, 2)


def test_faiss_flat_index_agrees():
    faiss = pytest.importorskip("faiss")
    del faiss
    rng = np.random.default_rng(0)
    q = rng.standard_normal((50, 16)).astype(np.float32)
    g = rng.standard_normal((2000, 16)).astype(np.float32)
    a = topk(q, g, 10, gallery_chunk=300)
    b = topk(q, g, 10, backend="faiss")
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_allclose(a.scores, b.scores, atol=1e-4)
    a = topk(q, g, 10, max_score=1.0)
    b = topk(q, g, 10, max_score=1.0, backend="faiss")
    np.testing.assert_array_equal(a.indices, b.indices)
