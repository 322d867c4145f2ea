"""Foreground signatures: what dedup compares when the background must not decide.

pHash and the 8 x 8 colour signature see the whole picture, so on a packshot the white background dominates: the
red and the blue version of a small shirt on white get pHash distance 0-6 and a colour difference near 0. Two
signatures here look at the foreground instead; both are computed at intake from the normalised image and kept on
the ``images`` (and ``contamination_index``) rows.

* :func:`foreground_signature`: an 8 x 8 grid over a 32 x 32 box-filtered thumbnail; per cell the share of
  foreground pixels and their mean CIELAB colour. The background is the median colour of the thumbnail's outer
  ring when that ring is uniform (at least :data:`UNIFORM_BORDER_SHARE` of it within :data:`BACKGROUND_DELTA_E`
  of the median); a pixel is foreground when it is further than :data:`BACKGROUND_DELTA_E` from it. A photo with
  a busy border (a street scene) has no estimable background: every pixel is foreground.
  :func:`foreground_delta_e` compares two signatures (colour confirmation of a pHash-near pair).
* :func:`block_codes`: a 128 x 128 greyscale thumbnail cut into 16 x 16 blocks of 8 x 8 pixels; a block's 16-bit code
  says which of its 4 x 4 sub-squares (2 x 2 pixels each) are brighter than the block's mean; a flat block
  (standard deviation below :data:`FLAT_BLOCK_STD` grey levels) has code 0. A background-removed cut-out keeps the
  photograph's pixels where the subject is, so the blocks inside the subject keep their codes (within a few bits)
  while the pHash of the whole picture changes. :func:`cutout_candidates` finds such pairs through an inverted
  index of (block position, code), :func:`cutout_match` confirms one.

Cut-outs are found when the cut-out keeps the photograph's canvas (same framing, any scale): what background
removal tools write. A cut-out that was also re-cropped or re-centred is not found (documented limit).

Colour difference: CIE 1976 ΔE*ab (Euclidean distance in CIELAB, D65 white, sRGB companding per IEC 61966-2-1);
a ΔE*ab of about 2.3 is a "just noticeable difference" (Sharma, *Digital Color Imaging Handbook*, 2003, ch. 1).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from PIL import Image

THUMB = 32
"""Side (pixels) of the thumbnail the foreground signature is computed on."""
GRID = 8
"""Cells per side of the foreground signature (each cell is 4 x 4 thumbnail pixels)."""
BACKGROUND_DELTA_E = 10.0
"""ΔE*ab from the background colour above which a thumbnail pixel is foreground; also the tolerance of a uniform
border. JPEG noise and soft shadows on a white sweep stay below it; a pale garment (ecru on white: ΔE*ab 12-15)
is above it."""
UNIFORM_BORDER_SHARE = 0.85
"""Share of the outer ring's pixels within :data:`BACKGROUND_DELTA_E` of its median for the border to be a
uniform background (a packshot, a cut-out); below it every pixel is foreground."""
MAX_FOREGROUND_DELTA_E = 6.0
"""Default most :func:`foreground_delta_e` for a pHash-near pair to be confirmed as one picture
(``dedup.max_foreground_delta_e``). Measured on the real studio photos (benchmarks/dedup_realdata.py): a JPEG
re-encode at quality 60 and half size stays at 0-1.4; a recoloured garment is at 5.5-150 (most above 10)."""
MIN_CELL_COVERAGE = 0.5
"""Share of foreground pixels a cell needs in both images for its colour to be compared."""
BLOCK_GRID = 16
"""Blocks per side of the block codes (:func:`block_codes`)."""
BLOCK_SIDE = 8 * BLOCK_GRID
"""Side (pixels) of the greyscale thumbnail the block codes are computed on (blocks of 8 x 8 pixels)."""
FLAT_BLOCK_STD = 4.0
"""A block whose grey levels' standard deviation is below this (0..255 scale) is flat: code 0, never indexed."""
HEADER_UNIFORM = 1
"""Flag in the signature's first byte: the border was a uniform background (the image is a packshot or cut-out)."""


def srgb_to_lab(rgb: np.ndarray) -> np.ndarray:
    """sRGB (``uint8`` or float 0..255, shape ``(..., 3)``) -> CIELAB ``float32`` ``(..., 3)``: L* 0..100, a* and
    b* about -128..127; D65 reference white (IEC 61966-2-1 companding, CIE 1976 L*a*b*)."""
    c = np.asarray(rgb, dtype=np.float32) / 255.0
    lin = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    m = np.array([[0.4124564, 0.3575761, 0.1804375],
                  [0.2126729, 0.7151522, 0.0721750],
                  [0.0193339, 0.1191920, 0.9503041]], dtype=np.float32)
    xyz = lin @ m.T / np.array([0.95047, 1.0, 1.08883], dtype=np.float32)
    eps, kappa = 216 / 24389, 24389 / 27
    f = np.where(xyz > eps, np.cbrt(xyz), (kappa * xyz + 16) / 116)
    return np.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])], axis=-1)


def _ring(a: np.ndarray) -> np.ndarray:
    return np.concatenate([a[0], a[-1], a[1:-1, 0], a[1:-1, -1]])


def foreground_mask(lab: np.ndarray) -> tuple[np.ndarray, bool, np.ndarray]:
    """Foreground of a CIELAB image ``(h, w, 3)``: ``(mask (h, w) bool, uniform_background, background Lab (3,))``;
    see the module docstring for the rule."""
    ring = _ring(lab)
    bg = np.median(ring, axis=0)
    if float(np.mean(np.linalg.norm(ring - bg, axis=-1) <= BACKGROUND_DELTA_E)) < UNIFORM_BORDER_SHARE:
        return np.ones(lab.shape[:2], dtype=bool), False, bg
    return np.linalg.norm(lab - bg, axis=-1) > BACKGROUND_DELTA_E, True, bg


def foreground_signature(rgb: Image.Image) -> str:
    """The foreground signature of a normalised RGB image: ``4 + 4 * 64`` bytes as 520 hex digits.

    Byte 0: flags (:data:`HEADER_UNIFORM`); bytes 1-3: the background's colour (the border's median; L* x 2.55,
    a* + 128, b* + 128). Then per cell of the 8 x 8 grid, row-major: foreground coverage
    (0..255 = share of the cell's 16 thumbnail pixels), L* x 2.55, a* + 128, b* + 128 (each rounded and clipped to
    0..255; the mean over the cell's foreground pixels, 0 when it has none).
    """
    small = np.asarray(rgb.convert("RGB").resize((THUMB, THUMB), Image.Resampling.BOX), dtype=np.float32)
    lab = srgb_to_lab(small)
    mask, uniform, bg = foreground_mask(lab)
    k = THUMB // GRID
    m = mask.reshape(GRID, k, GRID, k).transpose(0, 2, 1, 3).reshape(GRID, GRID, k * k)
    v = lab.reshape(GRID, k, GRID, k, 3).transpose(0, 2, 1, 3, 4).reshape(GRID, GRID, k * k, 3)
    n = m.sum(axis=-1)
    mean = (v * m[..., None]).sum(axis=2) / np.maximum(n, 1)[..., None]
    cells = np.stack([n / (k * k) * 255, mean[..., 0] * 2.55, mean[..., 1] + 128, mean[..., 2] + 128], axis=-1)
    body = np.clip(np.rint(cells), 0, 255).astype(np.uint8).reshape(-1)
    head = np.clip(np.rint([bg[0] * 2.55, bg[1] + 128, bg[2] + 128]), 0, 255).astype(np.uint8)
    return (bytes([HEADER_UNIFORM if uniform else 0]) + head.tobytes() + body.tobytes()).hex()


def _cells(sig: str) -> tuple[int, np.ndarray, np.ndarray]:
    """``(flags, coverage (64,) float 0..1, lab (64, 3) float)`` of a signature."""
    b = np.frombuffer(bytes.fromhex(sig), dtype=np.uint8)
    if b.size != 4 + 4 * GRID * GRID:
        raise ValueError(f"foreground signature of {b.size} bytes, expected {4 + 4 * GRID * GRID}")
    c = b[4:].reshape(GRID * GRID, 4).astype(np.float32)
    return int(b[0]), c[:, 0] / 255, np.stack([c[:, 1] / 2.55, c[:, 2] - 128, c[:, 3] - 128], axis=-1)


def srgb_from_lab(lab: np.ndarray) -> np.ndarray:
    """CIELAB ``(..., 3)`` -> sRGB ``float32`` 0..255 ``(..., 3)``: the inverse of :func:`srgb_to_lab` (D65, IEC
    61966-2-1), out-of-gamut values clipped."""
    lab = np.asarray(lab, dtype=np.float32)
    fy = (lab[..., 0] + 16) / 116
    f = np.stack([fy + lab[..., 1] / 500, fy, fy - lab[..., 2] / 200], axis=-1)
    eps, kappa = 216 / 24389, 24389 / 27
    xyz = np.where(f ** 3 > eps, f ** 3, (116 * f - 16) / kappa) * np.array([0.95047, 1.0, 1.08883], np.float32)
    m = np.array([[3.2404542, -1.5371385, -0.4985314],
                  [-0.9692660, 1.8760108, 0.0415560],
                  [0.0556434, -0.2040259, 1.0572252]], dtype=np.float32)
    lin = np.clip(xyz @ m.T, 0.0, 1.0)
    c = np.where(lin <= 0.0031308, lin * 12.92, 1.055 * lin ** (1 / 2.4) - 0.055)
    return np.clip(c * 255, 0, 255).astype(np.float32)


LUMA = np.array([0.299, 0.587, 0.114], dtype=np.float32)
"""ITU-R 601-2 luma weights on sRGB values: the grey level Pillow's ``convert("L")`` gives a colour (Pillow's
``Image.convert`` documentation), i.e. how a colour picture turned greyscale looks."""


def _grey_lightness(lab: np.ndarray) -> np.ndarray:
    """L* ``(n, 1)`` of the grey each CIELAB colour ``(n, 3)`` becomes in a greyscale copy (:data:`LUMA`)."""
    y = srgb_from_lab(lab) @ LUMA
    return srgb_to_lab(np.repeat(y[..., None], 3, axis=-1))[..., :1]


def _foreground_distance(a: str | None, b: str | None, grey: bool) -> float:
    if not a or not b:
        return 0.0
    _, ca, la = _cells(a)
    _, cb, lb = _cells(b)
    if grey:
        la, lb = _grey_lightness(la), _grey_lightness(lb)
    both = (ca >= MIN_CELL_COVERAGE) & (cb >= MIN_CELL_COVERAGE)
    if both.any():
        return float(np.median(np.linalg.norm(la[both] - lb[both], axis=-1)))
    if ca.sum() == 0 or cb.sum() == 0:
        return 0.0
    mean_a, mean_b = (ca @ la) / ca.sum(), (cb @ lb) / cb.sum()
    return float(np.linalg.norm(mean_a - mean_b))


def foreground_delta_e(a: str | None, b: str | None) -> float:
    """How far apart the foreground colours of two images are (ΔE*ab): the median over the grid cells where both
    are at least :data:`MIN_CELL_COVERAGE` foreground; where no cell is (a garment a few thumbnail pixels wide),
    the distance between the two foregrounds' mean colours; 0.0 when either signature is missing or either image
    has no foreground (nothing to compare: the other checks decide). A re-encoded or resized copy stays at 0-2;
    the red and blue version of one shirt are at 50 and more."""
    return _foreground_distance(a, b, grey=False)


def foreground_grey_delta(a: str | None, b: str | None) -> float:
    """:func:`foreground_delta_e` of the two images as greyscale copies (ΔL*, the cells' colours turned grey as
    Pillow's ``convert("L")`` does, :data:`LUMA`): how a greyscale picture is compared with a colour one. A
    greyscale copy of a colour picture stays at 0-2 (the cells' means are turned grey, not the pixels: within
    about 1 L* of the copy's own); two colours of one shirt are as far apart as their grey levels (red (200, 30,
    40) and grey (150, 150, 150): ΔL* about 27). Same cells, fallback and missing-signature rule."""
    return _foreground_distance(a, b, grey=True)


GREY_CHROMA = 3.0
"""Most |a*| and |b*| of any foreground cell for the foreground to count as grey (:func:`grey_foreground`): a grey
picture's cells, JPEG-compressed, stay within about 1."""


def grey_foreground(sig: str | None) -> bool:
    """Whether every cell of a foreground signature that holds foreground is grey (|a*| and |b*| <=
    :data:`GREY_CHROMA`); True when the signature is missing or there is no foreground (nothing says otherwise)."""
    if not sig:
        return True
    _, cov, lab = _cells(sig)
    held = cov > 0
    return bool(np.all(np.abs(lab[held, 1:]) <= GREY_CHROMA))


def background_lab(sig: str) -> np.ndarray:
    """The background colour (CIELAB ``(3,)``) recorded in a signature: the border's median colour."""
    b = np.frombuffer(bytes.fromhex(sig[2:8]), dtype=np.uint8).astype(np.float32)
    return np.array([b[0] / 2.55, b[1] - 128, b[2] - 128], dtype=np.float32)


def has_uniform_background(sig: str | None) -> bool:
    """Whether the signature's image had a uniform background (a packshot or a cut-out)."""
    return bool(sig) and bool(int(sig[:2], 16) & HEADER_UNIFORM)


# -------------------------------------------------------------------------------------------- cut-outs


def block_codes(rgb: Image.Image) -> str:
    """The 256 block codes of a normalised image, row-major (``uint16`` big-endian each), then a 256-bit mask of
    the blocks wholly inside the foreground of an image with a uniform background (:func:`foreground_mask` on the
    thumbnail; all zero for a busy picture): what a cut-out shares with its photograph. 1088 hex digits; see the
    module docstring."""
    small = np.asarray(rgb.convert("RGB").resize((BLOCK_SIDE, BLOCK_SIDE), Image.Resampling.BOX), dtype=np.float32)
    g = small @ np.array([0.299, 0.587, 0.114], dtype=np.float32)  # ITU-R BT.601 luma, as Pillow's "L"
    n = BLOCK_GRID
    blocks = g.reshape(n, 8, n, 8).transpose(0, 2, 1, 3)  # (block row, block col, y, x)
    sub = blocks.reshape(n, n, 4, 2, 4, 2).mean(axis=(3, 5)).reshape(n, n, 16)
    bits = sub > sub.mean(axis=-1, keepdims=True)
    codes = (bits * (1 << np.arange(15, -1, -1))).sum(axis=-1).astype(np.uint16)
    codes[blocks.reshape(n, n, 64).std(axis=-1) < FLAT_BLOCK_STD] = 0
    mask, uniform, _ = foreground_mask(srgb_to_lab(small))
    inside = mask.reshape(n, 8, n, 8).transpose(0, 2, 1, 3).reshape(n, n, 64).all(axis=-1) & uniform
    return (codes.reshape(-1).astype(">u2").tobytes() + np.packbits(inside.reshape(-1)).tobytes()).hex()


def _codes(h: str) -> np.ndarray:
    """The block codes ``(256,) int64`` of a :func:`block_codes` string."""
    return _split(h)[0]


def _inside(h: str) -> np.ndarray:
    """Blocks ``(256,) bool`` wholly inside a uniform-background image's foreground."""
    return _split(h)[1]


def _split(h: str) -> tuple[np.ndarray, np.ndarray]:
    b = bytes.fromhex(h)
    n = BLOCK_GRID * BLOCK_GRID
    if len(b) != 2 * n + n // 8:
        raise ValueError(f"block codes of {len(b)} bytes, expected {2 * n + n // 8}")
    return (np.frombuffer(b[:2 * n], dtype=">u2").astype(np.int64),
            np.unpackbits(np.frombuffer(b[2 * n:], dtype=np.uint8)).astype(bool))


MIN_INTERIOR_BLOCKS = 8
"""A cut-out needs this many textured interior blocks (of 256) to be matched at all: a tiny subject says too
little."""
CODE_TOLERANCE = 3
"""Bits (of 16) in which a block's code may differ and still count as the same block: re-encoding and rescaling
move sub-squares near the block's mean across it. Chosen on the 58 real street photos and a GrabCut cut-out of each
(re-encoded at quality 85, 0.7x), while designing the codes on an 8 x 8 grid: a cut-out and its own photograph
agreed within 3 bits on 67-100% of the inside blocks (exactly on 0-100%), the cut-out and any other photograph on
at most 50% where it had four or more such blocks. The shipped 16 x 16 grid's figures are the benchmark's
(benchmarks/dedup_realdata.py)."""
MIN_SHARED_BLOCKS = 0.75
"""Share of the cut-out's textured interior blocks whose code the photograph repeats (within
:data:`CODE_TOLERANCE` bits) at the same position."""
MAX_CUTOUT_DELTA_E = 6.0
"""Median ΔE*ab, over the signature cells wholly inside the cut-out's subject, between the cut-out and the
photograph (a cell at the subject's edge mixes in the photograph's background, so only inner cells count)."""
MIN_SILHOUETTE_IOU = 0.8
"""A studio shot and a cut-out on the same backdrop colour must also share their outline: intersection over union
of their silhouettes (signature cells at least half foreground). Measured: a cut-out and its studio photograph
0.43-1.0 (GrabCut in a box also trims the subject; below 0.8 they are missed when the backdrop colour is the same),
a shirt lying inside trousers' outline 0.74."""

MIN_PROBE_HITS = 2
"""Index hits (same position, code within one bit) a pair needs to become a candidate."""
MAX_POSTING = 64
"""An (position, code) key shared by more images than this is too common to say anything (a stop word)."""

_BITS = np.unpackbits(np.arange(1 << 16, dtype=">u2").view(np.uint8).reshape(-1, 2), axis=1).sum(
    axis=1, dtype=np.uint8)
"""Set bits of every 16-bit code (vectorised: this module is imported by config, so by every command)."""


def cutout_match(cut: dict, photo: dict) -> bool:
    """Whether ``cut`` (an ``images`` row with ``fg_signature`` and ``block_codes``) is a background-removed cut-out
    of ``photo``, kept on the same canvas: ``cut`` has a uniform background; at least :data:`MIN_INTERIOR_BLOCKS`
    of its blocks are textured and inside its foreground; at least :data:`MIN_SHARED_BLOCKS` of those have the
    same (textured) code in ``photo`` within :data:`CODE_TOLERANCE` bits; the colours agree inside the subject
    (median ΔE*ab <= :data:`MAX_CUTOUT_DELTA_E` over the signature cells wholly inside it); and, when ``photo`` has a
    uniform background too (a studio shot), the backdrops differ (further apart than :data:`BACKGROUND_DELTA_E`) or
    the outlines agree (:data:`MIN_SILHOUETTE_IOU`)."""
    sa, sb = cut.get("fg_signature"), photo.get("fg_signature")
    ca, cb = cut.get("block_codes"), photo.get("block_codes")
    if not (sa and sb and ca and cb) or not has_uniform_background(sa):
        return False
    a, b = _codes(ca), _codes(cb)
    inner = _inside(ca) & (a != 0)
    if int(inner.sum()) < MIN_INTERIOR_BLOCKS:
        return False
    same = (b[inner] != 0) & (_BITS[a[inner] ^ b[inner]] <= CODE_TOLERANCE)
    if float(np.mean(same)) < MIN_SHARED_BLOCKS:
        return False
    _, cov, la = _cells(sa)
    _, cov_b, lb = _cells(sb)
    cells = cov >= 0.999
    if cells.any() and float(np.median(np.linalg.norm(la[cells] - lb[cells], axis=-1))) > MAX_CUTOUT_DELTA_E:
        return False  # (a slim subject with no inner cell: the codes alone decide)
    if has_uniform_background(sb):
        # A studio shot and its cut-out: the backdrop changed, or (same backdrop) the outline did, a little. Two
        # packshots on one backdrop that agree only where they overlap are two garments printed with one pattern
        # (a shirt lying inside trousers' outline), not a cut-out.
        if float(np.linalg.norm(background_lab(sa) - background_lab(sb))) > BACKGROUND_DELTA_E:
            return True
        sil_a, sil_b = cov >= 0.5, cov_b >= 0.5
        return float((sil_a & sil_b).sum()) >= MIN_SILHOUETTE_IOU * float((sil_a | sil_b).sum())
    return True


_KEYS = (BLOCK_GRID * BLOCK_GRID) << 16
"""Distinct (block position, code) keys: the size of the index's direct-address table."""
MAX_PROBED_BLOCKS = 16
"""Blocks of a cut-out probed in the index: its textured inside blocks whose codes the fewest images share (the most
telling ones), so the search costs at most 17 x 16 lookups and 17 x 16 x :data:`MAX_POSTING` pairs per cut-out."""


def _matrix(codes: Sequence[str | None]) -> tuple[np.ndarray, np.ndarray]:
    """``(codes (n, 256) uint16, inside (n, 256) bool)`` of many :func:`block_codes` strings (zeros for None)."""
    n, m = len(codes), BLOCK_GRID * BLOCK_GRID
    raw = np.zeros((n, 2 * m + m // 8), dtype=np.uint8)
    for i, c in enumerate(codes):
        if c:
            b = np.frombuffer(bytes.fromhex(c), dtype=np.uint8)
            if b.size != raw.shape[1]:
                raise ValueError(f"block codes of row {i}: {b.size} bytes, expected {raw.shape[1]}")
            raw[i] = b
    code = raw[:, : 2 * m].copy().view(">u2").astype(np.uint16)
    return code, np.unpackbits(raw[:, 2 * m :], axis=1).astype(bool)


PROBE_CHUNK = 8192
"""Cut-outs probed at a time (bounds the probe arrays: 17 x 16 keys each)."""


def cutout_candidates(fg_signatures: Sequence[str | None], codes: Sequence[str | None]) -> np.ndarray:
    """Pairs ``(i, j)`` (``int64`` (m, 2), ``i`` the cut-out side, ``i != j``, sorted) worth confirming with
    :func:`cutout_match`: ``i`` has a uniform background and at least :data:`MIN_INTERIOR_BLOCKS` textured inside
    blocks, and at least :data:`MIN_PROBE_HITS` of its :data:`MAX_PROBED_BLOCKS` rarest ones find ``j`` in an
    inverted index of every image's (block position, code) keys, probed with the code and its 16 one-bit neighbours
    (multi-probe). Keys held by more than :data:`MAX_POSTING` images are skipped.

    Cost (vectorised): the index is a direct-address table of the 2^24 keys (offsets, 134 MB) over every textured
    block (at most 256 per image, 4 bytes each), grouped by a two-pass radix sort; then, :data:`PROBE_CHUNK`
    cut-outs at a time, at most ``17 * MAX_PROBED_BLOCKS`` lookups and ``17 * MAX_PROBED_BLOCKS * MAX_POSTING``
    pairs per cut-out. Memory grows about linearly with the images; time does not: a key's posting list grows with
    the images (16-bit codes collide by chance) until :data:`MAX_POSTING` cuts it, so the pairs gathered grow with
    about n², measured exponent about 1.4 between 100,000 and 300,000 images (BENCHMARKS.md, "The cut-out search at
    scale": not yet fit for a window of a million images, where ``dedup.cutouts: false`` turns it off)."""
    n = len(codes)
    code, inside = _matrix([c if s else None for s, c in zip(fg_signatures, codes)])
    uniform = np.array([has_uniform_background(s) for s in fg_signatures], dtype=bool)
    # The index as a direct-address table: a key (position: 8 bits, code: 16 bits) is its own slot, so a lookup is
    # two reads of `offsets`, not a binary search (a binary search per probe was 2/3 of the time at 30,000 images).
    rows, cols = np.nonzero(code)
    rows = rows.astype(np.int32)
    vals = code[rows, cols]
    cols = cols.astype(np.uint8)
    counts = np.bincount(cols.astype(np.int32) * 65536 + vals, minlength=_KEYS)
    offsets = np.zeros(_KEYS + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    # owners grouped by key: a two-pass LSD radix sort (numpy sorts 16- and 8-bit integers by radix, stably)
    order = np.argsort(vals, kind="stable")
    order = order[np.argsort(cols[order], kind="stable")]
    o_all = rows[order]
    del rows, cols, vals, order
    inner = inside & (code != 0) & uniform[:, None]
    cut = np.nonzero(inner.sum(axis=1) >= MIN_INTERIOR_BLOCKS)[0]
    flips = np.concatenate([[0], 1 << np.arange(16)])
    found = []
    for s in range(0, len(cut), PROBE_CHUNK):
        ids = cut[s : s + PROBE_CHUNK]
        # each cut-out's textured inside blocks, the rarest first (ties by position)
        r, c = np.nonzero(inner[ids])
        r = ids[r]
        key = c.astype(np.int64) * 65536 + code[r, c]
        o = np.lexsort((c, counts[key], r))
        r, key = r[o], key[o]
        first = np.searchsorted(r, r, "left")
        keep = (np.arange(len(r)) - first) < MAX_PROBED_BLOCKS
        r, key = r[keep], key[keep]
        kc = ((key >> 16)[:, None] << 16 | ((key & 0xFFFF)[:, None] ^ flips[None, :])).reshape(-1)
        oc = np.repeat(r, len(flips))
        lo, hi = offsets[kc], offsets[kc + 1]
        ok = (hi > lo) & ((hi - lo) <= MAX_POSTING)
        lo, hi, oc = lo[ok], hi[ok], oc[ok]
        lengths = hi - lo
        total = int(lengths.sum())
        if total == 0:
            continue
        partner = o_all[np.repeat(lo - (np.cumsum(lengths) - lengths), lengths) + np.arange(total)]
        src = np.repeat(oc, lengths)
        pid = src[src != partner].astype(np.int64) * n + partner[src != partner]
        uniq, hits = np.unique(pid, return_counts=True)
        found.append(uniq[hits >= MIN_PROBE_HITS])
    if not found:
        return np.zeros((0, 2), dtype=np.int64)
    pid = np.concatenate(found)  # chunks hold disjoint cut-outs, each sorted: the whole is sorted
    return np.stack([pid // n, pid % n], axis=1).astype(np.int64)
