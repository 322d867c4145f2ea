"""All pairs of 64-bit codes (pHashes) within a Hamming distance: an exact self-join for millions of codes.

:func:`pairs_within` is the one entry point (``dedup``, ``negatives`` and ``contamination`` call it through
``dedup.near_pairs_mih``). Method: multi-index hashing (Norouzi, Punjani & Fleet, "Fast Search in Hamming Space with
Multi-Index Hashing", CVPR 2012) with the generalised pigeonhole principle (Qin et al., "GPH: Similarity Search in
Hamming Space", ICDE 2018): the 64 bits are split into ``m`` disjoint substrings with thresholds ``tau_i`` such that
``sum(tau_i + 1) = radius + 1``; two codes within ``radius`` then differ in at most ``tau_i`` bits of at least one
substring ``i`` (otherwise they would differ in ``sum(tau_i + 1) > radius`` bits). For each substring ("table"):

1. a counting sort of the codes by their substring key (``O(n + 2^width)``, in two cache-sized passes), the codes
   copied into key order so that each bucket is a contiguous run;
2. bucket by bucket (:func:`_join`; each worker takes a run of buckets in key order), the codes of every partner
   bucket ``b ^ f``, ``f`` a flip mask with 1..``tau_i`` bits set and ``b < b ^ f`` (the masks grouped by their
   highest bit, so that one test of ``b``'s bit skips a whole group), are gathered into a buffer (a fixed 8-slot copy
   per partner, so the copy has no data-dependent loop), and every code of ``b`` is compared with the whole buffer
   (:func:`_flush`): XOR, popcount, ``<= radius`` counted in a pass the compiler vectorises; a code with partners is
   compared again with its distances stored as bytes, and its hits are picked out eight at a time; pairs within
   ``b`` are compared directly (a large ``b`` through the same pass). A table at threshold 2 whose keys are dense
   enough is joined centre by centre instead (:func:`_join_ball`): each key's radius-1 ball (its bucket and the ``w``
   buckets one bit away) is gathered once, ``w`` gathers per key instead of ``(V(w, 2) - 1) / 2`` partner visits per
   bucket, with the same candidate pairs;
3. a pair is kept by the first table whose substring condition it meets (it also meets that condition in any later
   table only if the earlier one did not apply), so no pair is reported twice and no global ``unique`` is needed;
4. the pairs found, packed into one ``uint64`` each, are partitioned by the high bits of ``i`` and each partition is
   radix-sorted and unpacked into the result by the workers (:func:`_sorted_pairs`).

The kernels are compiled with numba (``nogil``, the hardware ``popcnt`` through an LLVM ``ctpop`` intrinsic; the
buckets of a table are shared among threads, and the next table is sorted while the workers join the current one). The
plan (the number of substrings, their widths and thresholds, and the bit order) is chosen per call from a cost model
of the two terms above: partner buckets visited (``2^w (V(w, tau) - 1) / 2``, or ``2^w w`` centre by centre) and
candidate pairs compared (``n^2 / 2^(w+1) * V(w, tau)``, ``V(w, t) = sum_{k <= t} C(w, k)``), against brute force
(``n^2 / 2``). On skewed codes (real pHashes: biased, correlated bits) the bits are dealt to the substrings by their
entropy so that every substring carries about the same information.
"""

from __future__ import annotations

import ctypes
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import combinations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .cpus import usable_cpus

MAX_KEY_BITS = 24
"""The widest substring key: a table's bucket starts take ``2^width`` int64 (128 MiB at 24 bits)."""

# Cost model weights, nanoseconds of one CPU per operation of the kernels below: a partner bucket visited by
# :func:`_join` (the 8-slot gather), a neighbour gathered by :func:`_join_ball` (with its share of the centre's
# work), a candidate pair compared, a code counted and placed into a table (both sorting passes), a bucket slot of a
# table, a pair compared by brute force. Fitted (non-negative least squares on relative error) to one-thread runs
# of 15 plans on 300,000 to 10,000,000 uniform codes on the 2-core development machine, 2026-12-03 (BENCHMARKS.md);
# the visit weight of :func:`_join` is the earlier fit's (its plans are rare at these sizes).
_C_VISIT, _C_BALL, _C_CAND, _C_CODE, _C_SLOT, _C_BRUTE = 14.0, 25.0, 0.42, 47.0, 2.0, 1.0


@dataclass(frozen=True)
class Plan:
    """How :func:`pairs_within` searches: ``tables`` is a tuple of ``(bits, tau)``, ``bits`` the code's bit positions
    (0 = least significant) forming that substring key (disjoint across tables; bits in no table are only compared
    in the final check), ``tau`` its threshold; empty for brute force. ``cost``: the model's estimate (ns)."""

    tables: tuple[tuple[tuple[int, ...], int], ...]
    cost: float

    @property
    def brute_force(self) -> bool:
        return not self.tables


def _volume(w: int, t: int) -> int:
    """Number of ``w``-bit masks with at most ``t`` bits set."""
    return sum(math.comb(w, k) for k in range(0, t + 1))


def _split(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` integers as equal as possible, larger first."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _bucket_visits(present: float, width: int, tau: int) -> float:
    """Partner buckets :func:`_join` visits: ``(V(w, tau) - 1) / 2`` flip masks pass the order test per non-empty
    bucket."""
    return present * (_volume(width, tau) - 1) / 2


def _ball_visits(width: int, tau: int) -> float:
    """Neighbour buckets :func:`_join_ball` gathers (threshold 2 only): ``width`` per key; infinite otherwise."""
    return float(2 ** width * width) if tau == 2 else math.inf


def table_cost(n: int, width: int, tau: int) -> float:
    """The cost model's estimate (ns) of one table of ``width`` bits at threshold ``tau`` over ``n`` uniform codes:
    bucket slots and codes sorted; the partner buckets visited, the fewer of :func:`_join`'s (one visit per non-empty
    bucket and flip mask that passes the order test: half of the ``V(w, tau) - 1`` masks, over the
    ``2^w (1 - e^(-n / 2^w))`` non-empty buckets) and :func:`_join_ball`'s (``w`` per key, threshold 2 only); and
    ``n^2 / 2^(w+1) * V(w, tau)`` candidate pairs."""
    slots = 2.0 ** width
    present = -slots * math.expm1(-n / slots)
    v = _volume(width, tau)
    visits = min(_C_VISIT * _bucket_visits(present, width, tau), _C_BALL * _ball_visits(width, tau))
    return _C_SLOT * slots + _C_CODE * n + visits + _C_CAND * n * n / (2 * slots) * v


def plan(n: int, radius: int, bit_order: np.ndarray | None = None) -> Plan:
    """The cheapest exact plan for ``n`` codes at ``radius`` by the cost model (see the module docstring).

    Tries ``m`` tables (1..64) of ``w`` bits each (``m * w <= 64``, ``w <= MAX_KEY_BITS``: the tables need not
    cover all 64 bits — the pigeonhole bound holds on any subset), thresholds ``tau_i + 1`` sharing ``radius + 1``
    as evenly as possible (with more tables than ``radius + 1`` only ``radius + 1`` are used, at ``tau = 0``), and
    brute force. ``bit_order``: bit positions from the most to the least useful, dealt to the tables round robin
    (:func:`bit_entropy_order`); default: contiguous runs from bit 63 down.

    Raises:
        ValueError: ``radius`` outside 0..64 or ``n`` negative.
    """
    if not 0 <= radius <= 64:
        raise ValueError(f"radius must be within 0..64 bits, got {radius}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    best_cost, best = _C_BRUTE * n * (n - 1) / 2, (0, 0, [])
    for m in range(1, min(64, radius + 1) + 1):
        taus = [s - 1 for s in _split(radius + 1, m)]
        for w in range(1, min(64 // m, MAX_KEY_BITS) + 1):
            cost = sum(table_cost(n, w, t) for t in taus)
            if cost < best_cost:
                best_cost, best = cost, (m, w, taus)
    m, w, taus = best
    if m == 0:
        return Plan((), best_cost)
    if bit_order is None:
        groups = [tuple(range(63 - k * w, 63 - (k + 1) * w, -1)) for k in range(m)]
    else:
        order = [int(b) for b in bit_order][: m * w]
        groups = [tuple(order[k::m]) for k in range(m)]
    return Plan(tuple(zip(groups, taus)), best_cost)


def bit_entropy_order(codes: np.ndarray, sample: int = 200_000, seed: int = 0) -> np.ndarray:
    """Bit positions of ``uint64`` codes from the most to the least balanced (binary entropy of each bit over a
    sample of at most ``sample`` codes); ``int64`` (64,)."""
    h = np.asarray(codes, dtype=np.uint64)
    if len(h) > sample:
        h = h[np.random.default_rng(seed).choice(len(h), sample, replace=False)]
    if len(h) == 0:
        return np.arange(63, -1, -1, dtype=np.int64)
    p = np.array([((h >> np.uint64(b)) & np.uint64(1)).mean() for b in range(64)])
    q = np.clip(p, 1e-12, 1 - 1e-12)
    ent = -(q * np.log2(q) + (1 - q) * np.log2(1 - q))
    return np.argsort(-ent, kind="stable").astype(np.int64)


def _flip_masks(w: int, t: int) -> np.ndarray:
    """All ``w``-bit masks with 1..``t`` bits set, as int64 (the zero mask is handled on its own)."""
    out = [sum(1 << b for b in c) for k in range(1, t + 1) for c in combinations(range(w), k)]
    return np.array(out, dtype=np.int64)


def _key_luts(bits: tuple[int, ...]) -> np.ndarray:
    """(8, 256) int64: ``key = OR_k lut[k, byte_k(code)]`` gathers the code's ``bits`` into a ``len(bits)``-bit
    key (the first listed bit is the key's most significant)."""
    w = len(bits)
    lut = np.zeros((8, 256), dtype=np.int64)
    for pos, b in enumerate(bits):
        k, bit = divmod(b, 8)
        sel = (np.arange(256) >> bit) & 1
        lut[k] |= sel.astype(np.int64) << (w - 1 - pos)
    return lut


def _bit_mask(bits: tuple[int, ...]) -> int:
    return sum(1 << b for b in bits)


# ------------------------------------------------------------------------------------------------- kernels


@intrinsic
def _ctpop(typingctx, x):
    """LLVM's ``ctpop`` on a uint64: the ``popcnt`` instruction where the CPU has one (numba compiles for the host),
    and a vectorised byte-table count inside loops the compiler vectorises."""
    sig = types.uint64(types.uint64)

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return sig, codegen


@intrinsic
def _cttz(typingctx, x):
    """LLVM's ``cttz`` on a nonzero uint64: the index of its lowest set bit (``tzcnt``)."""
    sig = types.uint64(types.uint64)

    def codegen(context, builder, signature, args):
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 1))

    return sig, codegen


@njit(cache=True, nogil=True, inline="always")
def _popcount(x):
    return _ctpop(np.uint64(x))


SLOTS = 8
"""Codes copied per partner bucket whatever its size (a bucket with more is copied in a loop)."""
_BUFFER = 4096  # gathered partner codes compared at once (32 KiB: in L2)


_PARTITION_BITS = 8
"""A table is sorted in two passes: into ``2^8`` partitions by the key's highest bits, then each partition by the rest
of the key. Each pass writes to a few hundred places at a time (the caches keep up), where one pass over ``2^width``
buckets writes every code to a random place in memory (at 10M codes and 21 bits: 1.3-1.6 s against 0.65 s)."""


@njit(cache=True, nogil=True)
def _bucket(h, lut, nbuckets):
    """Counting sort by substring key: (keys of the non-empty buckets ascending, start of every bucket (nbuckets + 1),
    the codes in key order followed by ``SLOTS`` zero codes (so that an 8-slot gather never reads past the end),
    their original indices). Stable: within a bucket the codes keep their original order. Two passes (see
    :data:`_PARTITION_BITS`): by the key's high bits into partitions, then by the whole key within each partition."""
    n = h.shape[0]
    width = 0
    while (1 << width) < nbuckets:
        width += 1
    high = min(width, _PARTITION_BITS)
    shift = width - high
    keys = np.empty(n, dtype=np.uint32)
    pstart = np.zeros((1 << high) + 1, dtype=np.int64)
    for i in range(n):
        x = h[i]
        k = np.int64(0)
        for byte in range(8):
            k |= lut[byte, np.int64((x >> np.uint64(8 * byte)) & np.uint64(255))]
        keys[i] = k
        pstart[(k >> shift) + 1] += 1
    for g in range(1 << high):
        pstart[g + 1] += pstart[g]
    fill = pstart[:-1].copy()
    pkeys = np.empty(n, dtype=np.uint32)
    pcodes = np.empty(n, dtype=np.uint64)
    pids = np.empty(n, dtype=np.int64)
    for i in range(n):  # pass 1: into partitions, in original order
        k = keys[i]
        g = np.int64(k >> np.uint32(shift))
        q = fill[g]
        fill[g] += 1
        pkeys[q] = k
        pcodes[q] = h[i]
        pids[q] = i
    counts = np.zeros(nbuckets + 1, dtype=np.int64)
    for i in range(n):  # partition by partition: the counts touched lie within one partition's key range
        counts[np.int64(pkeys[i]) + 1] += 1
    nonempty = 0
    for b in range(nbuckets):
        if counts[b + 1] > 0:
            nonempty += 1
        counts[b + 1] += counts[b]
    present = np.empty(nonempty, dtype=np.int64)
    j = 0
    for b in range(nbuckets):
        if counts[b + 1] > counts[b]:
            present[j] = b
            j += 1
    fill = counts[:-1].copy()
    codes = np.zeros(n + SLOTS, dtype=np.uint64)
    ids = np.empty(n, dtype=np.int64)
    for i in range(n):  # pass 2: within each partition, by the whole key (writes stay within the partition's range)
        k = np.int64(pkeys[i])
        p = fill[k]
        fill[k] += 1
        codes[p] = pcodes[i]
        ids[p] = pids[i]
    return present, counts, codes, ids


# A found pair travels as one uint64: i (28 bits) | j (28 bits) | distance (7 bits), so that the result is sorted in
# place and needs 8 bytes per pair until it is unpacked into the (k, 3) int64 result.
MAX_CODES = 1 << 28
_I_SHIFT, _J_SHIFT, _ID_MASK, _D_MASK = 35, 7, (1 << 28) - 1, (1 << 7) - 1


@njit(cache=True, nogil=True, inline="always")
def _pack(i, j, d):
    return (np.uint64(i) << np.uint64(_I_SHIFT)) | (np.uint64(j) << np.uint64(_J_SHIFT)) | np.uint64(d)


@njit(cache=True, nogil=True)
def _earlier(x, prev_masks, prev_taus):
    """Whether an earlier table's substring condition holds for the XOR ``x`` of a pair."""
    for t in range(prev_masks.shape[0]):
        if _popcount(x & prev_masks[t]) <= prev_taus[t]:
            return True
    return False


# The join kernels write found pairs (packed) into a preallocated ``out`` and return ``(kept, stop, need)``: the rows
# of ``out`` written for the units (buckets, centres, rows) before ``stop``; ``stop`` is the end of their range when
# all fitted. When a unit's pairs run past the end of ``out`` (they are counted, not written), the kernel stops after
# that unit and returns the rows before it, the unit's index and the number of rows it needs (``need``); the caller
# goes on from there with a new buffer (a buffer reassigned inside the loops would cost reference counting on every
# candidate, and running the whole range again would repeat its work).


_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_HIGH = np.uint64(0x8080808080808080)
_ONES = np.uint64(0x0101010101010101)


@njit(cache=True, nogil=True, inline="always")
def _flush(codes, ids, s, e, bc, vstart, vcs, nv, nb, r, prev_masks, prev_taus, out, used, dist, dist8):
    """Compare the codes ``[s, e)`` of a bucket with the ``nb`` gathered partner codes ``bc``: a pass over the whole
    buffer without branches (vectorised) counts a code's partners within ``r``; only a
    code with some is compared again, its distances stored as bytes (``dist8``, a ``uint8`` view of the ``uint64``
    scratch ``dist``, both vectorised), and the hits are picked out eight distances at a time (a byte-wise ``> r``
    test on one word: ``(word + 0x7F - r) & 0x80`` per byte, distances being at most 64), the scan stopping once all
    the code's partners are found. Near a crowded layout most codes have partners, so the cost of a hit decides the
    join's speed on skewed codes. A hit's position in the table: the gathered segment it falls in (``vstart``: the
    first buffer index of each of the ``nv`` segments, ``vcs``: that segment's first position in the table), found
    by bisection. Writes the new pairs from row ``used`` on; returns the new ``used``."""
    cap = out.shape[0]
    over = _LOW7 - r * _ONES  # a byte's high bit is set after adding this exactly when the byte is > r
    words = (nb + 7) >> 3
    for p in range(s, e):
        cp = codes[p]
        hit = 0
        for u in range(nb):
            hit += _popcount(cp ^ bc[u]) <= r
        if hit == 0:
            continue
        ip = ids[p]
        for u in range(nb):
            dist8[u] = _popcount(cp ^ bc[u])
        for u in range(nb, words << 3):
            dist8[u] = 127  # the last word's bytes past the buffer: never a hit
        left = hit
        for wd in range(words):
            m = ~(dist[wd] + over) & _HIGH
            while m:
                u = (wd << 3) + (_cttz(m) >> 3)
                m &= m - np.uint64(1)
                x = cp ^ bc[u]
                if not _earlier(x, prev_masks, prev_taus):
                    if used < cap:
                        lo, hi = 0, nv - 1  # the last segment starting at or before u (empty ones share a start)
                        while lo < hi:
                            mid = (lo + hi + 1) >> 1
                            if vstart[mid] <= u:
                                lo = mid
                            else:
                                hi = mid - 1
                        iq = ids[vcs[lo] + (u - vstart[lo])]
                        out[used] = _pack(min(ip, iq), max(ip, iq), _popcount(x))
                    used += 1
                left -= 1
            if left == 0:
                break
    return used


_WITHIN_DIRECT = 32
"""A bucket of at most this many codes has its pairs compared one by one; a larger one (crowded keys of skewed codes)
code by code against the codes after it, through :func:`_flush`'s vectorised pass."""


@njit(cache=True, nogil=True, inline="always")
def _within(codes, ids, s, e, r, prev_masks, prev_taus, out, used, dist, dist8, seg_start, seg_cs):
    """Every pair within one bucket ``[s, e)`` of the table; writes from row ``used`` on and returns the new ``used``
    (past ``out``'s end only counted). ``seg_start``, ``seg_cs``: one-entry scratch arrays for :func:`_flush`."""
    cap = out.shape[0]
    if e - s > _WITHIN_DIRECT:
        seg_start[0] = 0
        for p in range(s, e - 1):
            for o in range(p + 1, e, _BUFFER):  # the codes after p, at most the buffer's size at a time
                take = min(_BUFFER, e - o)
                seg_cs[0] = o
                used = _flush(codes, ids, p, p + 1, codes[o:o + take], seg_start, seg_cs, 1, take, r, prev_masks,
                              prev_taus, out, used, dist, dist8)
        return used
    for p in range(s, e):
        cp = codes[p]
        for q in range(p + 1, e):
            x = cp ^ codes[q]
            d = _popcount(x)
            if d <= r and not _earlier(x, prev_masks, prev_taus):
                if used < cap:
                    ip, iq = ids[p], ids[q]
                    out[used] = _pack(min(ip, iq), max(ip, iq), d)
                used += 1
    return used


@njit(cache=True, nogil=True)
def _join(present, starts, codes, ids, flips, group_starts, width, t0, t1, radius, prev_masks, prev_taus, out):
    """Pairs ``(i, j, d)`` (``i < j`` original indices) with ``d <= radius`` that no earlier table found, between the
    non-empty buckets ``b = present[t0:t1]`` and their partners ``b ^ f``, ``b < b ^ f``, and within each ``b``.
    ``flips`` sorted by their highest set bit, ``group_starts[k]`` the first mask whose highest bit is ``k``
    (``width + 1`` entries): ``b < b ^ f`` exactly when ``b`` lacks that bit. Returns ``(kept, stop, need)``, see
    above."""
    used = 0
    r = np.uint64(radius)
    bc = np.empty(_BUFFER + SLOTS, dtype=np.uint64)
    dist = np.empty((_BUFFER + SLOTS) // 8 + 1, dtype=np.uint64)
    dist8 = dist.view(np.uint8)
    vstart = np.empty(_BUFFER + 1, dtype=np.int64)
    vcs = np.empty(_BUFFER + 1, dtype=np.int64)
    seg_start = np.zeros(1, dtype=np.int64)
    seg_cs = np.empty(1, dtype=np.int64)
    cap = out.shape[0]
    mark = 0
    for t in range(t0, t1):
        mark = used
        b = present[t]
        s, e = starts[b], starts[b + 1]
        used = _within(codes, ids, s, e, r, prev_masks, prev_taus, out, used, dist, dist8, seg_start, seg_cs)
        nb = 0
        nv = 0
        for k in range(width):
            if (b >> k) & 1:
                continue
            for g in range(group_starts[k], group_starts[k + 1]):
                # unsigned indices: no negative-index wraparound code in the hot loop
                c = np.uint64(b ^ flips[np.uint64(g)])
                cs = starts[c]
                m = starts[c + np.uint64(1)] - cs
                if nb + max(m, SLOTS) > _BUFFER or nv == _BUFFER:
                    used = _flush(codes, ids, s, e, bc, vstart, vcs, nv, nb, r, prev_masks, prev_taus, out, used,
                                  dist, dist8)
                    nb = 0
                    nv = 0
                if m <= SLOTS:  # a fixed-size copy (the slots past m are overwritten or never read)
                    for u in range(SLOTS):
                        bc[np.uint64(nb + u)] = codes[np.uint64(cs + u)]
                    vstart[np.uint64(nv)] = nb
                    vcs[np.uint64(nv)] = cs
                    nv += 1
                    nb += m
                else:  # a crowded bucket: copied in pieces, the buffer compared whenever it is full
                    q = cs
                    while q < cs + m:
                        take = min(_BUFFER - nb, cs + m - q)
                        for u in range(take):
                            bc[nb + u] = codes[q + u]
                        vstart[nv] = nb
                        vcs[nv] = q
                        nv += 1
                        nb += take
                        q += take
                        if nb == _BUFFER or nv == _BUFFER:
                            used = _flush(codes, ids, s, e, bc, vstart, vcs, nv, nb, r, prev_masks, prev_taus,
                                          out, used, dist, dist8)
                            nb = 0
                            nv = 0
        used = _flush(codes, ids, s, e, bc, vstart, vcs, nv, nb, r, prev_masks, prev_taus, out, used, dist,
                      dist8)
        if used > cap:
            return mark, t, used - mark
    return used, t1, 0


@njit(cache=True, nogil=True)
def _join_ball(starts, codes, ids, width, c0, c1, radius, prev_masks, prev_taus, out):
    """:func:`_join` for a table at threshold 2, centre by centre: the pairs between buckets ``x`` and ``y`` with keys
    at most 2 bits apart that no earlier table found, for the centres ``c`` in ``[c0, c1)`` (every key, empty or
    not). Every such pair of buckets lies in the radius-1 ball of a centre: ``(c, c ^ e_i)`` and
    ``(c ^ e_i, c ^ e_j)``. The centre's bucket and its ``width`` neighbours ``c ^ e_i`` are gathered once (segments
    ``0`` and ``i + 1``); for each ``i`` with bit ``i`` of ``c`` clear, neighbour ``i``'s codes are compared with
    the segments before it (the centre and neighbours ``j < i``). That reports each pair of buckets exactly once:
    ``(c, c ^ e_i)`` only at ``c`` (its other centre ``c ^ e_i`` has bit ``i`` set), ``(c ^ e_i, c ^ e_j)``,
    ``i > j``, at the one of its two centres ``c`` and ``c ^ e_i ^ e_j`` whose bit ``i`` is clear; pairs within a
    bucket at that bucket's centre. ``width`` gathers per centre instead of ``(V(width, 2) - 1) / 2`` per non-empty
    bucket (21 against 116 at 21 bits). A ball holding more than the buffer is compared segment by segment from the
    table. Returns ``(kept, stop, need)``, see above."""
    used = 0
    r = np.uint64(radius)
    bc = np.empty(_BUFFER + SLOTS, dtype=np.uint64)
    dist = np.empty((_BUFFER + SLOTS) // 8 + 1, dtype=np.uint64)
    dist8 = dist.view(np.uint8)
    vstart = np.empty(width + 2, dtype=np.int64)
    vcs = np.empty(width + 2, dtype=np.int64)
    seg_start = np.zeros(1, dtype=np.int64)
    seg_cs = np.empty(1, dtype=np.int64)
    one = np.uint64(1)
    cap = out.shape[0]
    mark = 0
    for c in range(c0, c1):
        if used > cap:  # the previous centre's pairs did not fit
            return mark, c - 1, used - mark
        mark = used
        s, e = starts[c], starts[c + 1]
        used = _within(codes, ids, s, e, r, prev_masks, prev_taus, out, used, dist, dist8, seg_start, seg_cs)
        vstart[0] = 0
        vcs[0] = s
        total = e - s
        work = False
        for i in range(width):  # the neighbours' places in the table (segment i + 1)
            k = np.uint64(c) ^ (one << np.uint64(i))
            cs = starts[k]
            m = starts[k + one] - cs
            vcs[i + 1] = cs
            vstart[i + 1] = total  # the segment's start in the buffer (its end: the next one's start)
            total += m
            if m > 0 and (c >> i) & 1 == 0:
                work = True
        vstart[width + 1] = total
        if not work:
            continue
        if total + SLOTS <= _BUFFER:
            for g in range(width + 1):  # gather the ball: a fixed 8-slot copy per small segment
                cs = vcs[g]
                m = vstart[g + 1] - vstart[g]
                nb = vstart[g]
                if m <= SLOTS:
                    for u in range(SLOTS):
                        bc[np.uint64(nb + u)] = codes[np.uint64(cs + u)]
                else:
                    for u in range(m):
                        bc[np.uint64(nb + u)] = codes[np.uint64(cs + u)]
            for i in range(width):
                m = vstart[i + 2] - vstart[i + 1]
                if m == 0 or (c >> i) & 1:
                    continue
                cs = vcs[i + 1]
                used = _flush(codes, ids, cs, cs + m, bc, vstart, vcs, i + 1, vstart[i + 1], r, prev_masks,
                              prev_taus, out, used, dist, dist8)
        else:  # a crowded ball: neighbour i against each earlier segment, read in place from the table
            for i in range(width):
                m = vstart[i + 2] - vstart[i + 1]
                if m == 0 or (c >> i) & 1:
                    continue
                cs = vcs[i + 1]
                for g in range(i + 1):
                    gm = vstart[g + 1] - vstart[g]
                    for o in range(0, gm, _BUFFER):  # a segment at most the buffer's size at a time
                        gs = vcs[g] + o
                        take = min(_BUFFER, gm - o)
                        seg_cs[0] = gs
                        used = _flush(codes, ids, cs, cs + m, codes[gs:gs + take], seg_start, seg_cs, 1, take, r,
                                      prev_masks, prev_taus, out, used, dist, dist8)
    if used > cap:
        return mark, c1 - 1, used - mark
    return used, c1, 0


@njit(cache=True, nogil=True)
def _brute(h, start, stop, radius, out):
    """Pairs ``(i, j, d)``, ``start <= i < stop``, ``i < j``, ``d <= radius``, by comparing every pair. Returns
    ``(kept, stop, need)`` (see above)."""
    used = 0
    cap = out.shape[0]
    r = np.uint64(radius)
    n = h.shape[0]
    mark = 0
    for i in range(start, stop):
        if used > cap:
            return mark, i - 1, used - mark
        mark = used
        hi = h[i]
        for j in range(i + 1, n):
            d = _popcount(hi ^ h[j])
            if d <= r:
                if used < cap:
                    out[used] = _pack(i, j, d)
                used += 1
    if used > cap:
        return mark, stop - 1, used - mark
    return used, stop, 0


@njit(cache=True, nogil=True)
def _histogram(part, shift, counts):
    """Add the number of packed pairs of ``part`` in each partition (``pair >> shift``) to ``counts``."""
    for q in range(part.shape[0]):
        counts[np.int64(part[q] >> shift)] += 1


@njit(cache=True, nogil=True)
def _scatter(part, shift, fill, dest):
    """Copy the packed pairs of ``part`` into ``dest``, each at ``fill`` of its partition (advanced)."""
    for q in range(part.shape[0]):
        x = part[q]
        g = np.int64(x >> shift)
        dest[fill[g]] = x
        fill[g] += 1


@njit(cache=True, nogil=True)
def _sort_unpack(packed, bounds, g0, g1, ibits, low, out):
    """Sort the partitions ``g0..g1`` of ``packed`` (rows ``bounds[g]:bounds[g + 1]``, pairs whose ``i`` agree on all
    but the ``low`` lowest of its ``ibits`` bits) by ``i``, then ``j``, and unpack them into the same rows of ``out``
    (``i, j, distance``). Within a partition an LSD radix sort on the ``low + ibits`` bits that differ (``i``'s low
    bits, then ``j``), in passes of at most 12 bits: a few passes over data in the caches, where a comparison sort
    costs ``log2`` of the partition's size per pair."""
    keybits = low + ibits
    passes = max(1, (keybits + 11) // 12)
    digit = (keybits + passes - 1) // passes
    dmask = np.uint64((1 << digit) - 1)
    imask = np.uint64((1 << low) - 1)
    jmask = np.uint64((1 << ibits) - 1)
    size = 0
    for g in range(g0, g1):
        size = max(size, bounds[g + 1] - bounds[g])
    buf = np.empty(2 * size, dtype=np.uint64)
    counts = np.empty((1 << digit) + 1, dtype=np.int64)
    ishift, jshift, ib = np.uint64(_I_SHIFT), np.uint64(_J_SHIFT), np.uint64(ibits)
    for g in range(g0, g1):
        s, e = bounds[g], bounds[g + 1]
        m = e - s
        src, dst = 0, size  # the two halves of buf, swapped after every pass
        buf[:m] = packed[s:e]
        if m > 1:
            for d in range(passes):
                sh = np.uint64(d * digit)
                counts[:] = 0
                for q in range(m):
                    x = buf[src + q]
                    k = (((x >> ishift) & imask) << ib) | ((x >> jshift) & jmask)
                    counts[np.int64((k >> sh) & dmask) + 1] += 1
                if counts.max() == m:
                    continue  # every pair has the same digit: nothing to move
                for k in range(1 << digit):
                    counts[k + 1] += counts[k]
                for q in range(m):
                    x = buf[src + q]
                    k = (((x >> ishift) & imask) << ib) | ((x >> jshift) & jmask)
                    c = np.int64((k >> sh) & dmask)
                    buf[dst + counts[c]] = x
                    counts[c] += 1
                src, dst = dst, src
        for q in range(m):
            x = buf[src + q]
            out[s + q, 0] = np.int64(x >> np.uint64(_I_SHIFT))
            out[s + q, 1] = np.int64((x >> np.uint64(_J_SHIFT)) & np.uint64(_ID_MASK))
            out[s + q, 2] = np.int64(x & np.uint64(_D_MASK))


_SORT_PARTITION = 1 << 15
"""Pairs per partition (on average) when the found pairs are sorted: 256 KiB, radix-sorted within the caches (a
partition of skewed codes holds a few times that)."""


def _release_freed_memory() -> None:
    """Hand the heap memory freed so far back to the operating system (glibc's ``malloc_trim``; nothing elsewhere).
    The found pairs come in parts allocated by the worker threads, many inside glibc's per-thread arenas; freed, such
    memory stays with the process, and at 10M clustered codes about 300 MB of it would sit beside the 2 GB result."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError, TypeError):  # not glibc
        pass


def _sorted_pairs(parts: list[np.ndarray], n: int, ex: ThreadPoolExecutor, workers: int) -> np.ndarray:
    """The packed pairs of ``parts`` (emptied) as the ``(k, 3)`` int64 result sorted by ``i`` then ``j``: a counting
    pass into partitions by the high bits of ``i`` (the pairs are unique, so sorting the packed words sorts by
    ``i``, then ``j``), then the partitions sorted and unpacked by the workers. Memory: the pairs twice (8 bytes
    each) while they are partitioned, then once with the result (24 bytes each)."""
    total = sum(len(q) for q in parts)
    ibits = max(1, (n - 1).bit_length())
    pbits = min(ibits, max(0, (total // _SORT_PARTITION).bit_length()))
    shift = np.uint64(_I_SHIFT + ibits - pbits)
    counts = np.zeros((len(parts), (1 << pbits) + 1), dtype=np.int64)
    for k in range(len(parts)):
        _histogram(parts[k], shift, counts[k, 1:])
    bounds = np.concatenate(([0], np.cumsum(counts.sum(axis=0)[1:])))
    # where each part's pairs of each partition go: the partition's start plus the earlier parts' counts
    fills = bounds[:-1] + np.cumsum(counts[:, 1:], axis=0) - counts[:, 1:]
    packed = np.empty(total, dtype=np.uint64)

    def scatter(k: int) -> None:  # the parts write to disjoint places: the workers copy them side by side
        _scatter(parts[k], shift, fills[k], packed)
        parts[k] = None  # freed as soon as it is copied

    list(ex.map(scatter, range(len(parts))))
    parts.clear()
    _release_freed_memory()
    out = np.empty((total, 3), dtype=np.int64)
    # runs of partitions holding about the same number of pairs, a few per worker
    nparts = 1 << pbits
    inner = np.searchsorted(bounds, np.linspace(0, total, 4 * workers + 1)[1:-1]).clip(0, nparts)
    cuts = sorted({0, nparts, *inner.tolist()})
    jobs = [(lo, hi) for lo, hi in zip(cuts, cuts[1:])]
    list(ex.map(lambda j: _sort_unpack(packed, bounds, j[0], j[1], ibits, ibits - pbits, out), jobs))
    return out


class _Collector:
    """Runs a join kernel over a range of units (buckets, centres, rows) with an output buffer sized from the earlier
    jobs' yields (a hint shared by the jobs of one search), going on with a larger buffer where the kernel stopped
    because the buffer was full."""

    def __init__(self) -> None:
        self.hint = 1 << 12

    def __call__(self, kernel, head: tuple, lo: int, hi: int, tail: tuple) -> np.ndarray:
        pieces = []
        size = self.hint
        while True:
            out = np.empty(size, dtype=np.uint64)
            kept, stop, need = kernel(*head, lo, hi, *tail, out)
            pieces.append(out[:kept].copy() if kept < len(out) // 4 else out[:kept])
            if stop >= hi:
                break
            lo, size = stop, max(need, min(1 << 24, 2 * size))
        found = sum(len(q) for q in pieces)
        self.hint = max(1 << 12, min(1 << 24, 2 * found))
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


# --------------------------------------------------------------------------------------------- the search


def pairs_within(hashes: np.ndarray, radius: int, *, threads: int | None = None,
                 balance_bits: bool = True) -> np.ndarray:
    """All pairs ``(i, j)``, ``i < j``, of ``hashes`` within Hamming distance ``radius`` (exact).

    Args:
        hashes: ``uint64`` array (n,) (any integer array is read as its 64-bit pattern); duplicates allowed.
        radius: maximum Hamming distance in bits, 0..64.
        threads: worker threads (default: the CPUs this process may run on).
        balance_bits: deal the bits to the substrings by their entropy over the data (see
            :func:`bit_entropy_order`); False uses contiguous bit runs. Either way the result is exact.

    Returns:
        ``int64`` array (k, 3): ``i, j, distance``, sorted by ``i`` then ``j`` — the same rows as a brute-force
        comparison of every pair. Memory: the codes five times over plus two tables' buckets at a time
        (the one joined and the next one sorted: ``2^width`` int64 each, width <= :data:`MAX_KEY_BITS`); the pairs
        found at 8 bytes each, twice while they are partitioned for sorting, then once with the result (24 bytes
        per pair): 32 bytes per pair at the peak.

    Raises:
        ValueError: ``radius`` outside 0..64, ``hashes`` not a one-dimensional integer array, or more than
            :data:`MAX_CODES` (2^28) codes.
    """
    a = np.asarray(hashes)
    if a.dtype.kind not in "iu" and a.size:
        raise ValueError(f"hashes must be an integer array (uint64 codes), got dtype {a.dtype}")
    h = np.ascontiguousarray(a).astype(np.uint64, copy=False)
    if h.ndim != 1:
        raise ValueError(f"hashes must be one-dimensional, got shape {h.shape}")
    n = len(h)
    if n > MAX_CODES:
        raise ValueError(f"at most {MAX_CODES:,} codes per search, got {n:,}")  # before the entropy pass
    p = plan(n, int(radius), bit_entropy_order(h) if balance_bits and n > 1 else None)
    return search(h, int(radius), p, threads=threads)


def search(h: np.ndarray, radius: int, p: Plan, *, threads: int | None = None) -> np.ndarray:
    """:func:`pairs_within` with a given plan (any :class:`Plan` whose tables' bits are disjoint and whose
    ``sum(tau + 1)`` is at least ``radius + 1`` is exact); ``h`` contiguous ``uint64``.

    Raises:
        ValueError: more than :data:`MAX_CODES` codes, a plan that is not exact at ``radius``, or a table with no
            bits, a bit outside 0..63 or in two places, more than :data:`MAX_KEY_BITS` bits, a negative threshold.
    """
    n = len(h)
    if n > MAX_CODES:
        raise ValueError(f"at most {MAX_CODES:,} codes per search, got {n:,}")
    if n < 2:
        return np.zeros((0, 3), dtype=np.int64)
    if sum(t + 1 for _, t in p.tables) < radius + 1 and not p.brute_force:
        raise ValueError(f"plan {p} is not exact at radius {radius}")
    used = [b for bits, _ in p.tables for b in bits]
    if len(set(used)) != len(used) or not all(0 <= b < 64 for b in used) or any(not bits for bits, _ in p.tables):
        raise ValueError(f"plan {p}: every table needs bits within 0..63, no bit in two places")
    if any(len(bits) > MAX_KEY_BITS or tau < 0 for bits, tau in p.tables):
        raise ValueError(f"plan {p}: tables of at most {MAX_KEY_BITS} bits and thresholds >= 0")
    workers = usable_cpus(threads)
    parts: list[np.ndarray] = []
    collect = _Collector()
    with ThreadPoolExecutor(workers) as ex:
        if p.brute_force:
            # rows of decreasing length: many small chunks so that every worker gets about the same work
            chunk = max(1, math.ceil(n / (16 * workers)))
            bounds = [(s, min(n, s + chunk)) for s in range(0, n, chunk)]
            parts = list(ex.map(lambda b: collect(_brute, (h,), b[0], b[1], (radius,)), bounds))
        else:
            _join_tables(h, radius, list(p.tables), ex, workers, collect, parts)
        return _sorted_pairs(parts, n, ex, workers)


def _join_tables(h: np.ndarray, radius: int, tables: list, ex: ThreadPoolExecutor, workers: int,
                 collect: _Collector, parts: list[np.ndarray]) -> None:
    """Join the tables one after the other on the workers of ``ex``, appending the packed pairs found to ``parts``."""
    n = len(h)
    prev_masks: list[int] = []
    prev_taus: list[int] = []
    with ThreadPoolExecutor(1) as sorter:
        # the next table is sorted (one thread, memory-bound) while the workers join the current one
        pending = sorter.submit(_bucket, h, _key_luts(tables[0][0]), 1 << len(tables[0][0]))
        for k, (bits, tau) in enumerate(tables):
            w = len(bits)
            present, starts, codes, ids = pending.result()
            if k + 1 < len(tables):
                nxt = tables[k + 1][0]
                pending = sorter.submit(_bucket, h, _key_luts(nxt), 1 << len(nxt))
            flips = _flip_masks(w, tau)
            highest = np.array([int(f).bit_length() - 1 for f in flips], dtype=np.int64)
            order = np.argsort(highest, kind="stable")
            flips = flips[order]
            group_starts = np.searchsorted(highest[order], np.arange(w + 1)).astype(np.int64)
            pm = np.array(prev_masks, dtype=np.uint64)
            pt = np.array(prev_taus, dtype=np.uint64)
            # runs of buckets holding about the same number of codes, several per worker, so that the workers
            # share the work evenly (a crowded bucket of skewed codes is one run's)
            cuts = np.linspace(0, n, 16 * workers + 1)[1:-1]
            if _C_BALL * _ball_visits(w, tau) < _C_VISIT * _bucket_visits(len(present), w, tau):
                # centre by centre (threshold 2): the jobs are runs of keys
                firsts, kernel = starts[:-1], _join_ball
                args = (starts, codes, ids, w)
            else:  # bucket by bucket: the jobs are runs of non-empty buckets
                firsts, kernel = starts[present], _join
                args = (present, starts, codes, ids, flips, group_starts, w)
            # cut where the codes before a run reach each share
            bounds = [0, *np.unique(np.searchsorted(firsts, cuts)).tolist(), len(firsts)]
            jobs = [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo]
            parts += list(ex.map(lambda j: collect(kernel, args, j[0], j[1], (radius, pm, pt)), jobs))
            del present, starts, codes, ids, firsts, args
            prev_masks.append(_bit_mask(bits))
            prev_taus.append(tau)
