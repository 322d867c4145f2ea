"""Exact top-k search by inner product (cosine similarity of L2-normalised embeddings), memory bounded by chunks.

:func:`topk` ranks, for each query vector, the gallery vectors by inner product, descending, ties broken by
ascending gallery index: the same order as :func:`lookbench_pipeline.metrics.rank_topk`, so the result is exact
and deterministic. Two backends:

* ``numpy`` (default): for each block of ``query_chunk`` queries, the gallery is scanned in blocks of
  ``gallery_chunk`` vectors. Each block of scores is one BLAS matrix product (``np.matmul`` into a reused
  buffer). The first block of a query chunk gives each query its provisional top-k (``np.partition``); every
  later block is compared with each query's current k-th best score, and only the few scores above it are merged
  into the top-k (sorted by score, then index). Memory: the two blocks (``query_chunk x gallery_chunk`` float32
  scores and a boolean mask of the same shape) plus the inputs; no ``(n_queries, n_gallery)`` matrix is ever
  formed. Time: the matrix products plus one comparison pass per block (BENCHMARKS.md measures the overhead).
* ``faiss`` (optional, ``pip install faiss-cpu``): ``faiss.IndexFlatIP``, FAISS's exact flat index, for
  comparison; its order among exactly tied scores is FAISS's own.

``max_score`` turns the search into a band search: gallery items scoring above it (near duplicates of the query,
when mining distractors) are ignored, so the k results are the k best at or below it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BACKENDS = ("numpy", "faiss")


@dataclass
class TopK:
    """Top-k results: ``scores`` float32 ``(n_queries, k)`` best first, ``indices`` int64 of the same shape (gallery
    row numbers; ``-1`` with score ``-inf`` where fewer than k gallery items qualify)."""

    scores: np.ndarray
    indices: np.ndarray


def _as_f32(x: np.ndarray, name: str) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n, dim), got shape {x.shape}")
    return np.ascontiguousarray(x, dtype=np.float32)


def topk(queries: np.ndarray, gallery: np.ndarray, k: int, *, max_score: float | None = None,
         backend: str = "numpy", query_chunk: int = 1024, gallery_chunk: int = 16384) -> TopK:
    """The ``k`` gallery vectors with the largest inner product with each query.

    Args:
        queries: ``(n_q, d)`` float32 (other float dtypes are converted once).
        gallery: ``(n_g, d)``, same ``d``.
        k: results per query; ``min(k, n_g)`` columns are returned.
        max_score: when set, gallery items scoring strictly above it are skipped.
        backend: ``numpy`` or ``faiss``.
        query_chunk, gallery_chunk: block sizes of the numpy backend; peak extra memory is about
            ``5 * query_chunk * gallery_chunk`` bytes.
    Raises:
        ValueError: shapes disagree, ``k < 1``, or an unknown backend.
        ImportError: ``backend="faiss"`` without faiss installed.
    """
    q, g = _as_f32(queries, "queries"), _as_f32(gallery, "gallery")
    if q.shape[1] != g.shape[1]:
        raise ValueError(f"dimension mismatch: queries {q.shape[1]}, gallery {g.shape[1]}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown search backend {backend!r}; one of {BACKENDS}")
    kk = min(k, g.shape[0])
    if q.shape[0] == 0 or kk == 0:
        return TopK(np.zeros((q.shape[0], kk), np.float32), np.zeros((q.shape[0], kk), np.int64))
    if backend == "faiss":
        return _faiss(q, g, kk, max_score)
    scores = np.empty((q.shape[0], kk), np.float32)
    indices = np.empty((q.shape[0], kk), np.int64)
    qc, gc = max(1, query_chunk), max(kk, gallery_chunk)
    block = np.empty((min(qc, q.shape[0]), min(gc, g.shape[0])), np.float32)
    mask = np.empty(block.shape, bool)
    for s in range(0, q.shape[0], qc):
        sc, ix = _topk_chunk(q[s : s + qc], g, kk, max_score, gc, block, mask)
        scores[s : s + qc], indices[s : s + qc] = sc, ix
    return TopK(scores, indices)


def _topk_chunk(q: np.ndarray, g: np.ndarray, k: int, max_score: float | None, gc: int, block: np.ndarray,
                mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    nq = q.shape[0]
    best_s = np.full((nq, k), -np.inf, np.float32)
    best_i = np.full((nq, k), -1, np.int64)
    thr = np.full(nq, -np.inf, np.float32)  # each query's current k-th best score (-inf until it has k)
    for off in range(0, g.shape[0], gc):
        gb = g[off : off + gc]
        b = block[:nq, : gb.shape[0]]
        m = mask[:nq, : gb.shape[0]]
        np.matmul(q, gb.T, out=b)
        if max_score is not None:
            np.putmask(b, b > max_score, -np.inf)
        # candidates: scores above the current k-th best (a later index never wins a tie against an earlier one)
        np.greater(b, thr[:, None], out=m)
        counts = np.count_nonzero(m, axis=1)
        heavy = np.nonzero(counts > k)[0]
        if len(heavy):
            # more candidates than k in this block (always so in the first block): only the block's own top k
            # (ties by lower index) can enter the result
            counts[heavy] = _restrict_to_block_topk(b, m, heavy, thr, k)
        if not counts.any():
            continue
        rr, cc = np.nonzero(m)  # row-major: grouped by row, columns ascending
        width = int(counts.max())
        pos = np.arange(len(rr)) - np.repeat(np.cumsum(counts) - counts, counts)
        cand_s = np.full((nq, width), -np.inf, np.float32)
        cand_i = np.full((nq, width), -1, np.int64)
        cand_s[rr, pos] = b[rr, cc]
        cand_i[rr, pos] = cc + off
        all_s = np.concatenate([best_s, cand_s], axis=1)
        all_i = np.concatenate([best_i, cand_i], axis=1)
        # order: score descending, then index ascending; empty slots (-1) sort after every real index
        key_i = np.where(all_i < 0, np.iinfo(np.int64).max, all_i)
        order = np.lexsort((key_i, -all_s), axis=1)[:, :k]
        best_s = np.take_along_axis(all_s, order, axis=1)
        best_i = np.take_along_axis(all_i, order, axis=1)
        thr = best_s[:, k - 1].copy()
    best_i[~np.isfinite(best_s)] = -1
    return best_s, best_i


def _restrict_to_block_topk(b: np.ndarray, m: np.ndarray, rows: np.ndarray, thr: np.ndarray, k: int) -> np.ndarray:
    """Keep in ``m[rows]`` only each row's k best candidates of block ``b`` (by score, then lower column);
    returns the number kept per row."""
    everything = len(rows) == b.shape[0]
    sub = b if everything else b[rows]
    if np.isfinite(thr[rows]).any():
        sub = np.where(m if everything else m[rows], sub, -np.inf)
    n = sub.shape[1]
    kth = np.partition(sub, n - k, axis=1)[:, n - k]  # the k-th largest score of each row
    keep = sub >= kth[:, None]
    # rows where the k-th score is tied beyond k columns, or fewer than k scores are finite: exact repair
    n_keep = np.count_nonzero(keep, axis=1)
    for j in np.nonzero((n_keep > k) | ~np.isfinite(kth))[0]:
        row = sub[j]
        above = np.nonzero((row > kth[j]) & np.isfinite(row))[0]
        tied = np.nonzero(row == kth[j])[0] if np.isfinite(kth[j]) else np.zeros(0, np.int64)
        keep[j] = False
        keep[j, above] = True
        keep[j, tied[: k - len(above)]] = True
    if everything:
        m[...] = keep
    else:
        m[rows] = keep
    return np.count_nonzero(keep, axis=1)


def _faiss(q: np.ndarray, g: np.ndarray, k: int, max_score: float | None) -> TopK:
    import faiss  # optional dependency

    index = faiss.IndexFlatIP(g.shape[1])
    index.add(g)
    if max_score is None:
        d, i = index.search(q, k)
        return TopK(d.astype(np.float32), i.astype(np.int64))
    # band search: widen k until every query has k results at or below max_score (or the gallery is exhausted)
    want = k
    while True:
        kk = min(g.shape[0], want)
        d, i = index.search(q, kk)
        ok = d <= max_score
        if (ok.sum(axis=1) >= k).all() or kk == g.shape[0]:
            break
        want *= 4
    out_s = np.full((q.shape[0], k), -np.inf, np.float32)
    out_i = np.full((q.shape[0], k), -1, np.int64)
    for r in range(q.shape[0]):
        sel = np.nonzero(ok[r])[0][:k]
        out_s[r, : len(sel)] = d[r, sel]
        out_i[r, : len(sel)] = i[r, sel]
    return TopK(out_s, out_i)
