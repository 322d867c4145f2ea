"""Exact top-k search by inner product (cosine similarity of L2-normalised embeddings), memory bounded by chunks.

:func:`topk` ranks, for each query vector, the gallery vectors by inner product, descending, ties broken by
ascending gallery index: the same order as :func:`lookbench_pipeline.metrics.rank_topk`, so the result is exact
and deterministic. Two backends:

* ``numpy`` (default): for each block of ``query_chunk`` queries, the gallery is scanned in blocks of
  ``gallery_chunk`` vectors. Each block of scores is one BLAS matrix product (``np.matmul`` into a reused
  buffer). In the first block each query keeps the scores at or above its block-wise k-th best
  (``np.partition``); in every later block only the scores strictly above the query's current k-th best are
  candidates (one comparison pass writing a boolean mask, whose set bytes are found eight at a time through a
  ``uint64`` view). Candidates are merged into the top k as 64-bit keys (score bits, then gallery index), so
  one ``np.partition`` per block selects exactly, ties included. Memory: one ``query_chunk x gallery_chunk``
  float32 block, its mask, and a copy of the first block for the partition (``9 * query_chunk *
  gallery_chunk`` bytes, 151 MB at the defaults) plus the inputs; no ``(n_queries, n_gallery)`` matrix is
  formed. Time: the matrix products plus about 10% (BENCHMARKS.md).
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
            ``9 * query_chunk * gallery_chunk`` bytes.
    Raises:
        ValueError: shapes disagree, ``k < 1``, an unknown backend, or a gallery of 2**32 vectors or more.
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
    cells = min(qc, q.shape[0]) * min(gc, g.shape[0])
    bbuf = np.empty(cells, np.float32)  # one block of scores, reused
    mbuf = np.zeros(-(-cells // 8) * 8, bool)  # its candidate mask, padded to whole 8-byte words
    for s in range(0, q.shape[0], qc):
        sc, ix = _topk_chunk(q[s : s + qc], g, kk, max_score, gc, bbuf, mbuf)
        scores[s : s + qc], indices[s : s + qc] = sc, ix
    return TopK(scores, indices)


_EMPTY = np.uint64(0xFFFFFFFF_FFFFFFFF)  # the key of an empty slot: after every real result
_matmul = np.matmul  # the block product (a module attribute, so a benchmark can time it)


def _keys(scores: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """One uint64 sort key per (score, gallery index): ascending key = score descending, then index ascending.
    The high 32 bits are the float32 score's bits mapped to a descending unsigned order, the low 32 the index."""
    u = np.ascontiguousarray(scores + np.float32(0), np.float32).view(np.uint32)  # -0.0 -> +0.0: they tie
    asc = np.where(u & np.uint32(0x80000000), ~u, u | np.uint32(0x80000000))  # ascending with the score
    return ((~asc).astype(np.uint64) << np.uint64(32)) | idx.astype(np.uint64)


def _unkey(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    asc = ~(keys >> np.uint64(32)).astype(np.uint32)
    u = np.where(asc & np.uint32(0x80000000), asc & np.uint32(0x7FFFFFFF), ~asc)
    idx = (keys & np.uint64(0xFFFFFFFF)).astype(np.int64)
    scores = u.view(np.float32).copy()
    empty = keys == _EMPTY
    scores[empty], idx[empty] = -np.inf, -1
    return scores, idx


def _topk_chunk(q: np.ndarray, g: np.ndarray, k: int, max_score: float | None, gc: int, bbuf: np.ndarray,
                mbuf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if g.shape[0] >= 1 << 32:
        raise ValueError("gallery too large for 32-bit result keys")
    nq = q.shape[0]
    best = np.full((nq, k), _EMPTY, np.uint64)  # the current top k of each query, as sort keys (unordered)
    above = np.full(nq, -np.finfo(np.float32).max, np.float32)  # a candidate scores >= this (finite only)
    for off in range(0, g.shape[0], gc):
        gb = g[off : off + gc]
        n = nq * gb.shape[0]
        b = bbuf[:n].reshape(nq, gb.shape[0])
        _matmul(q, gb.T, out=b)
        if max_score is not None:
            np.putmask(b, b > max_score, -np.inf)
        thr = above
        if off == 0:
            # first block: only the block's own k best (and scores tied with the k-th) can be among the top k
            kth = np.partition(b, b.shape[1] - k, axis=1)[:, b.shape[1] - k]
            thr = np.where(np.isfinite(kth), kth, above)
        np.greater_equal(b, thr[:, None], out=mbuf[:n].reshape(b.shape))
        # candidates: the set bytes of the mask, found 8 bytes (one uint64 word) at a time
        words = np.flatnonzero(mbuf.view(np.uint64)[: -(-n // 8)])
        if len(words) == 0:
            continue
        cand = (words[:, None] * 8 + np.arange(8)).ravel()
        cand = cand[mbuf[cand]]
        mbuf[cand] = False  # leave the buffer clean for the next block (its padding stays False)
        rr, cc = np.divmod(cand, b.shape[1])  # sorted by row
        counts = np.bincount(rr, minlength=nq)
        width = int(counts.max())
        pos = np.arange(len(cand)) - np.repeat(np.cumsum(counts) - counts, counts)
        merged = np.full((nq, k + width), _EMPTY, np.uint64)
        merged[:, :k] = best
        merged[rr, k + pos] = _keys(bbuf[cand], cc + off)
        best = np.partition(merged, k - 1, axis=1)[:, :k]  # keys are unique per row: an exact selection
        # a later block's score enters only if strictly above the k-th (an equal one has a higher index)
        kth_s, _ = _unkey(best.max(axis=1))
        above = np.where(np.isfinite(kth_s), np.nextafter(kth_s, np.float32(np.inf)), above)
    return _unkey(np.sort(best, axis=1))


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
