"""Duplicate detection: exact (same sha256 of the original bytes) and near (pHash Hamming distance <= threshold).

Clusters are the connected components of the near-duplicate graph (union-find). The representative of a cluster
is deterministic: the earliest ``first_seen_at``, then the largest image (width x height, pixels), then the
smallest sha256. Images flagged ``uniform`` (blank, single-colour) are never merged as near duplicates of each
other: all blank images share a pHash and are not the same picture. pHash sees luminance only, so a near pair is
confirmed only when the images' colours also agree, twice: the 8 x 8 colour signatures (the 90th percentile of the
per-channel absolute differences <= ``max_color_diff`` levels of 255), and the foreground's colours
(:func:`lookbench_pipeline.foreground.foreground_delta_e` <= ``max_foreground_delta_e`` ΔE*ab): on a packshot the
background decides the first, so the red and the blue version of a small shirt on white pass it and only the
second tells them apart. A greyscale file (one grey channel) is compared with a colour one by grey levels instead
(:func:`confirmed_by_colour`). A re-encoded or resized copy passes both; a copy cropped by 5% or more, mirrored or
turned greyscale but stored as RGB mostly does not, nor does a rotated one (measured:
``benchmarks/dedup_realdata.py``, BENCHMARKS.md).

A background-removed cut-out of a photograph and the photograph itself share the subject's pixels but not their
pHash; :func:`cluster` also joins such pairs (:func:`lookbench_pipeline.foreground.cutout_candidates`, confirmed
by :func:`lookbench_pipeline.foreground.cutout_match`) unless ``cutouts=False``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .foreground import (LUMA, MAX_FOREGROUND_DELTA_E, cutout_candidates, cutout_match, foreground_delta_e,
                         foreground_grey_delta, grey_foreground)


def hex_to_u64(hashes: Sequence[str]) -> np.ndarray:
    """16-hex-digit pHashes -> ``uint64`` array of shape (n,)."""
    return np.array([int(h, 16) for h in hashes], dtype=np.uint64)


_POP8 = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def popcount64(x: np.ndarray) -> np.ndarray:
    """Bit count of each ``uint64``; returns ``uint8`` of the same shape."""
    if hasattr(np, "bitwise_count"):  # numpy >= 2.0: a hardware popcount
        return np.bitwise_count(x).astype(np.uint8)
    b = np.ascontiguousarray(x).view(np.uint8).reshape(*x.shape, 8)
    return _POP8[b].sum(axis=-1, dtype=np.uint8)


def near_pairs(hashes: np.ndarray, threshold: int, chunk: int = 2048) -> np.ndarray:
    """All pairs ``(i, j)``, ``i < j``, with Hamming distance ``<= threshold``, by chunked brute force.

    Args:
        hashes: ``uint64`` array (n,).
        threshold: maximum Hamming distance in bits (0..64).
    Returns:
        ``int64`` array (m, 3): ``i, j, distance``, sorted by ``i`` then ``j``. Exact: O(n^2 / 2) comparisons,
        memory O(chunk * n).
    """
    n = len(hashes)
    out = []
    for s in range(0, n, chunk):
        block = hashes[s : s + chunk]
        d = popcount64(block[:, None] ^ hashes[None, :])  # (b, n)
        ii, jj = np.nonzero(d <= threshold)
        ii = ii + s
        keep = jj > ii
        out.append(np.stack([ii[keep], jj[keep], d[ii[keep] - s, jj[keep]].astype(np.int64)], axis=1))
    if not out:
        return np.zeros((0, 3), dtype=np.int64)
    return np.concatenate(out).astype(np.int64)


def near_pairs_mih(hashes: np.ndarray, threshold: int) -> np.ndarray:
    """All pairs ``(i, j)``, ``i < j``, with Hamming distance ``<= threshold``: :func:`lookbench_pipeline.hamming.
    pairs_within` (exact; multi-index hashing, or brute force where the cost model says it is cheaper).

    Returns ``int64`` (m, 3): ``i, j, distance``, sorted by ``i`` then ``j`` (same as :func:`near_pairs`).
    """
    from .hamming import pairs_within  # numba compiles on first use: imported only when a search runs

    return pairs_within(hashes, threshold)


class UnionFind:
    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, a: int) -> int:
        while self.parent[a] != a:
            self.parent[a] = self.parent[self.parent[a]]
            a = self.parent[a]
        return a

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def p90(values: np.ndarray) -> float:
    """``np.percentile(values, 90)`` (its default linear interpolation, the same float result for integer and
    float64 input) by a partial sort: about 5 µs against 57 µs for 192 values, and the colour checks of
    :func:`cluster` call it once or twice a pair. ``values``: a non-empty 1-d array."""
    n = values.size
    rank = (n - 1) * 0.9
    lo = int(rank)
    t = rank - lo
    hi = min(lo + 1, n - 1)
    s = np.partition(values, (lo, hi) if hi != lo else lo)
    a, b = float(s[lo]), float(s[hi])
    return b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t  # numpy's _lerp, for the same rounding


def _rgb_cells(color_signature: str) -> np.ndarray:
    """The 64 cells of a colour signature (:func:`lookbench_pipeline.images.color_signature`): ``uint8`` (64, 3)."""
    return np.frombuffer(bytes.fromhex(color_signature), dtype=np.uint8).reshape(-1, 3)


def color_diff(a: str | None, b: str | None) -> float:
    """90th percentile of the absolute differences (0..255) of two colour signatures; 0 when either is missing."""
    if not a or not b:
        return 0.0
    return p90(np.abs(_rgb_cells(a).astype(np.int16) - _rgb_cells(b)).reshape(-1))


_LUMA64 = LUMA.astype(np.float64)  # grey levels in float64: p90 gives numpy's percentile exactly there


def grey_diff(a: str | None, b: str | None) -> float:
    """:func:`color_diff` of two colour signatures turned grey (:data:`lookbench_pipeline.foreground.LUMA`, as
    Pillow's ``convert("L")``): the 90th percentile of the 64 cells' absolute grey-level differences (0..255); 0
    when either is missing."""
    if not a or not b:
        return 0.0
    return p90(np.abs(_rgb_cells(a) @ _LUMA64 - _rgb_cells(b) @ _LUMA64))


ACHROMATIC_SPREAD = 3
"""Most difference (0..255) between the channels of any cell of an 8 x 8 colour signature for the picture to count
as grey (:func:`achromatic`): a one-channel picture saved as RGB JPEG and decoded again stays within 1-2 levels."""


def achromatic(color_signature: str | None) -> bool:
    """Whether a colour signature is grey: in each of its 64 cells the three channels are within
    :data:`ACHROMATIC_SPREAD` levels of each other. False when the signature is missing."""
    if not color_signature:
        return False
    c = _rgb_cells(color_signature)
    return int((c.max(axis=1).astype(np.int16) - c.min(axis=1)).max()) <= ACHROMATIC_SPREAD


def confirmed_by_colour(a: dict, b: dict, max_color_diff: float,
                        max_foreground_delta_e: float = MAX_FOREGROUND_DELTA_E) -> bool:
    """Whether a pHash-near pair (``images`` rows) also agrees in colour: the whole picture's 8 x 8 signature
    within ``max_color_diff`` (0..255) and the foreground's colour within ``max_foreground_delta_e`` (ΔE*ab; rows
    without ``fg_signature``, e.g. an index built before it existed, skip this part).

    When exactly one of the two is a greyscale file (flagged ``grayscale``: stored as one grey channel), its
    colours cannot be compared, so both are compared as greyscale copies: the signatures' grey levels
    (:func:`grey_diff`) and the foreground's (:func:`lookbench_pipeline.foreground.foreground_grey_delta`, ΔL*),
    with the same limits. A greyscale copy of a colour picture made as Pillow makes one passes; a grey packshot of
    one colour of a garment no longer confirms every other colour of it, only one whose grey level is the same
    (which a greyscale file cannot tell apart from a copy). A greyscale copy stored as RGB is not flagged and is
    compared in colour: mostly not confirmed (BENCHMARKS.md, "Which edited copies the rule misses")."""
    grey_a, grey_b = ("grayscale" in (r.get("flags") or []) for r in (a, b))
    if grey_a != grey_b:
        return (grey_diff(a.get("color_signature"), b.get("color_signature")) <= max_color_diff
                and foreground_grey_delta(a.get("fg_signature"), b.get("fg_signature")) <= max_foreground_delta_e)
    if color_diff(a.get("color_signature"), b.get("color_signature")) > max_color_diff:
        return False
    return foreground_delta_e(a.get("fg_signature"), b.get("fg_signature")) <= max_foreground_delta_e


def cutout_pairs(images: list[dict], split: int | None = None) -> list[tuple[int, int]]:
    """Index pairs ``(i, j)`` of ``images`` (rows with ``fg_signature`` and ``block_codes``) where ``i`` is a
    background-removed cut-out of ``j`` on the same canvas (see :mod:`lookbench_pipeline.foreground`). Images
    flagged ``uniform`` take no part. With ``split``, only pairs across it (one index below, one at or above) are
    confirmed and returned: new images against an index, not the index against itself."""
    ok = ["uniform" not in (r.get("flags") or []) for r in images]
    cand = cutout_candidates([r.get("fg_signature") if o else None for r, o in zip(images, ok)],
                             [r.get("block_codes") if o else None for r, o in zip(images, ok)])
    if split is not None:
        cand = cand[(cand[:, 0] < split) != (cand[:, 1] < split)]
    return [(int(i), int(j)) for i, j in cand if cutout_match(images[i], images[j])]


class _ColourCheck:
    """:func:`confirmed_by_colour` between rows of ``images`` by index, remembered per pair of colour keys: the
    check reads only a row's ``grayscale`` flag, ``color_signature`` and ``fg_signature``, so copies that carry
    the same three (the same picture re-served) are checked once, however many there are. Called, it is the
    clustering's first phase: a pair of a greyscale file and a picture in colour (:meth:`in_colour`) is never
    confirmed there (:func:`cluster` attaches greyscale files afterwards, :func:`_attach_greyscale`, with
    :meth:`confirmed`); a greyscale file and a grey picture stored as RGB are compared as usual."""

    def __init__(self, images: list[dict], max_color_diff: float, max_foreground_delta_e: float):
        self.images, self.max_color_diff, self.max_fg = images, max_color_diff, max_foreground_delta_e
        self.grey = ["grayscale" in (r.get("flags") or []) for r in images]
        self.keys = [(g, r.get("color_signature"), r.get("fg_signature")) for g, r in zip(self.grey, images)]
        self.known: dict[tuple, bool] = {}
        self._in_colour: dict[int, bool] = {}

    def in_colour(self, k: int) -> bool:
        """Whether image ``k`` is a picture in colour: not a greyscale file, and not grey both over the whole picture
        (:func:`achromatic`) and in its foreground (:func:`lookbench_pipeline.foreground.grey_foreground`: a small
        red shirt on white can leave every cell of the 8 x 8 signature grey). Read on first use: only pairs with a
        greyscale file ask."""
        v = self._in_colour.get(k)
        if v is None:
            r = self.images[k]
            v = self._in_colour[k] = not self.grey[k] and not (achromatic(r.get("color_signature"))
                                                                and grey_foreground(r.get("fg_signature")))
        return v

    def __call__(self, i: int, j: int) -> bool:
        if self.grey[i] != self.grey[j] and self.in_colour(j if self.grey[i] else i):
            return False
        return self.confirmed(i, j)

    def confirmed(self, i: int, j: int) -> bool:
        """:func:`confirmed_by_colour` of images ``i`` and ``j``, remembered per unordered pair of colour keys."""
        a, b = self.keys[i], self.keys[j]
        pair = (a, b) if hash(a) <= hash(b) else (b, a)  # the check is symmetric: one answer per unordered pair
        ok = self.known.get(pair)
        if ok is None:
            ok = self.known[pair] = confirmed_by_colour(self.images[i], self.images[j], self.max_color_diff,
                                                        self.max_fg)
        return ok


def _attach_greyscale(groups_by_hash: list[list[int]], near: np.ndarray, check: _ColourCheck,
                      uf: UnionFind) -> None:
    """Join each cluster of greyscale files to the colour cluster its members match by grey level
    (:func:`confirmed_by_colour` on a pHash-near pair), when there is exactly one such cluster. A greyscale
    picture cannot tell apart two colours of one grey level (the red and the blue of a shirt can both turn the same
    grey), so a greyscale file that matches two colour clusters joins neither: it would merge them. A cluster of
    greyscale files that already holds a picture in colour (joined through a grey picture stored as RGB, a copy of
    it) joins nothing more, whichever colours its files match: neither pHash distance nor grey level is
    transitive, so a match elsewhere could be another colour.

    ``groups_by_hash``: image indices per distinct pHash; ``near``: pairs of those groups within the threshold
    (``int64`` (m, 3)); ``uf``: the clusters so far, in which a greyscale file and a picture in colour were never
    compared directly.
    """
    with_grey = np.array([u for u, g in enumerate(groups_by_hash) if any(check.grey[k] for k in g)], dtype=np.int64)
    if not len(with_grey):
        return
    neighbours: dict[int, set[int]] = {u: {u} for u in with_grey.tolist()}
    touching = near[np.isin(near[:, 0], with_grey) | np.isin(near[:, 1], with_grey)]  # touching a greyscale file
    for a, b, _ in touching.tolist():
        if a in neighbours:
            neighbours[a].add(b)
        if b in neighbours:
            neighbours[b].add(a)
    grey_roots = {uf.find(k) for u in with_grey.tolist() for k in groups_by_hash[u] if check.grey[k]}
    holds_colour = {r for k in range(len(check.grey)) if not check.grey[k]
                    for r in (uf.find(k),) if r in grey_roots and check.in_colour(k)}
    matches: dict[int, set[int]] = {}  # a greyscale cluster's root -> the roots of the colour pictures it matches
    for u, nb in neighbours.items():
        colour: dict[tuple, int] = {}  # one member in colour per cluster and colour key: the others answer the same
        for v in nb:
            for c in groups_by_hash[v]:
                if check.in_colour(c):
                    colour.setdefault((uf.find(c), check.keys[c]), c)
        for g in groups_by_hash[u]:
            own = uf.find(g) if check.grey[g] else None
            if own is None or own in holds_colour:
                continue
            found = matches.setdefault(own, set())
            for (root, _), c in colour.items():
                if len(found) > 1:
                    break  # two colour clusters: this greyscale cluster joins none, whatever else it matches
                if root not in found and check.confirmed(g, c):
                    found.add(root)
    for grey_root, roots in matches.items():
        if len(roots) == 1:
            uf.union(grey_root, roots.pop())


def _join_within(group: list[int], agree: _ColourCheck, uf: UnionFind) -> None:
    """Join the members of one hash group whose colours agree: every pair's answer, in any input order. Members
    with one colour key (copies of one picture) are one cluster at once; the distinct keys are then joined as two
    near groups are (:func:`_join_groups`), so N copies of one picture cost O(N) and N distinct colours
    O(N x clusters), as across groups."""
    by_key: dict[tuple, list[int]] = {}
    for k in group:
        by_key.setdefault(agree.keys[k], []).append(k)
    reps = []
    for members in by_key.values():
        reps.append(members[0])
        if agree(members[0], members[0]):  # a colour key agrees with itself (the same signatures)
            for k in members[1:]:
                uf.union(members[0], k)
    if len(reps) > 1:
        _join_groups(reps, reps, agree, uf)


def _join_groups(first: list[int], second: list[int], agree: _ColourCheck, uf: UnionFind) -> None:
    """Join the members of two near hash groups whose colours agree (``agree``, :func:`confirmed_by_colour`).

    Gives the clusters that checking every pair of ``first`` x ``second`` gives: a pair already in one cluster is
    skipped, which changes no cluster, and of the second group's members only one per colour key is checked (the
    others give the same answer). The second group's members are kept by cluster, so a member of the first costs
    one step per distinct colour of each cluster of the second, not one per member: two groups of thousands of
    copies of one picture cost O(|first| + |second|), whether their colours agree or not. (Colour is not
    transitive, so the distinct colours of one cluster are still checked one by one until one agrees; groups whose
    every member has its own colour stay |first| x |second|.) ``first`` and ``second`` may be one group: its
    members among themselves, in any order the same clusters.
    """
    if len(first) == 1 and len(second) == 1:
        i, j = first[0], second[0]
        if uf.find(i) != uf.find(j) and agree(i, j):
            uf.union(i, j)
        return
    by_root: dict[int, dict[tuple, int]] = {}  # a cluster's root -> one member per colour key
    for j in second:
        by_root.setdefault(uf.find(j), {}).setdefault(agree.keys[j], j)
    for i in first:
        for r in list(by_root):
            ri = uf.find(i)
            if r == ri or r not in by_root:
                continue
            if any(agree(i, j) for j in by_root[r].values()):
                uf.union(i, r)
                merged = by_root.pop(r)
                for key, j in by_root.pop(ri, {}).items():
                    merged.setdefault(key, j)
                by_root[uf.find(i)] = merged


def cluster(images: list[dict], threshold: int, max_color_diff: float = 32.0,
            max_foreground_delta_e: float = MAX_FOREGROUND_DELTA_E, cutouts: bool = True) -> list[dict]:
    """Cluster accepted images (rows of the ``images`` table) into duplicate groups: pHash within ``threshold``
    bits and confirmed by colour (:func:`confirmed_by_colour`), or (``cutouts``) a cut-out and its photograph
    (:func:`cutout_pairs`). Greyscale files are clustered among themselves first, then each of their clusters
    joins the one colour cluster it matches by grey level, or none when it matches several
    (:func:`_attach_greyscale`).

    Returns one ``image_clusters`` row per input image: ``cluster_id`` (the representative's sha256),
    ``is_representative``, ``duplicate_kind`` (``unique`` for a singleton, ``near`` otherwise; exact byte
    duplicates never reach here as two rows, the sha256 already made them one) and ``hamming_to_representative``.
    """
    n = len(images)
    if n == 0:
        return []
    hashes = hex_to_u64([im["phash"] for im in images])
    uniform = np.array(["uniform" in (im.get("flags") or []) for im in images])
    uf = UnionFind(n)
    # Pairs are searched among the distinct hashes of non-uniform images only: many copies of one hash would
    # otherwise make the pair list quadratic. Members of a hash group are then paired within the group.
    idx = np.nonzero(~uniform)[0]
    uniq, inverse = np.unique(hashes[idx], return_inverse=True)
    groups_by_hash: list[list[int]] = [[] for _ in range(len(uniq))]
    for k, u in zip(idx.tolist(), inverse.tolist()):
        groups_by_hash[u].append(k)
    # Within a hash group the members are joined as two near groups are (the colour check is not transitive: a red
    # and a blue shirt share a hash, and so do their copies), so the colour confirmation does not depend on the
    # input's order.
    agree = _ColourCheck(images, max_color_diff, max_foreground_delta_e)
    for g in groups_by_hash:
        if len(g) > 1:
            _join_within(g, agree, uf)
    near = near_pairs_mih(uniq, threshold)
    for a, b, _ in near.tolist():
        _join_groups(groups_by_hash[a], groups_by_hash[b], agree, uf)
    if any(agree.grey):
        _attach_greyscale(groups_by_hash, near, agree, uf)
    if cutouts:  # among one member of each cluster so far: near-copies are joined already
        reps = [i for i in range(n) if uf.find(i) == i]
        for i, j in cutout_pairs([images[k] for k in reps]):
            uf.union(reps[i], reps[j])
    groups: dict[int, list[int]] = {}
    for i in range(n):
        groups.setdefault(uf.find(i), []).append(i)
    rows = []
    for members in groups.values():
        rep = min(members, key=lambda k: (images[k]["first_seen_at"], -(images[k]["width"] * images[k]["height"]),
                                          images[k]["image_sha256"]))
        rep_sha = images[rep]["image_sha256"]
        for k in members:
            rows.append({
                "image_sha256": images[k]["image_sha256"],
                "cluster_id": rep_sha,
                "is_representative": k == rep,
                "duplicate_kind": "unique" if len(members) == 1 else "near",
                "hamming_to_representative": int(popcount64(np.array([hashes[k] ^ hashes[rep]]))[0]),
            })
    return sorted(rows, key=lambda r: r["image_sha256"])


def exact_duplicate_refs(refs: list[dict]) -> int:
    """Number of accepted references whose bytes another accepted reference already had (same sha256)."""
    seen, dup = set(), 0
    for r in refs:
        if r["status"] == "accepted":
            if r["image_sha256"] in seen:
                dup += 1
            seen.add(r["image_sha256"])
    return dup
