"""Does a generated image still show its reference product?

Two independent checks (thresholds in ``aigen.check``, docs/AIGEN.md):

1. **Embedding similarity.** The reference garment is cut out of its gallery image (pixels farther than 10 levels
   from the median border colour, holes filled; a picture without such a background is used whole) and embedded
   with the configured embedder (default: the classical ``baseline/hsv-hog-v1`` of :mod:`lookbench_pipeline.embed`)
   with the background replaced by one fill colour. The garment is then *located* in the generated image: candidate
   regions are either given (a garment detector's boxes) or found by a sliding-window search — windows of the
   garment's aspect ratio at ten scales are ranked by the Bhattacharyya coefficient of their HSV histograms
   (the baseline's 8 x 4 x 4 bins, read at the garment's silhouette only) against the reference's, the five best
   (non-maximum suppression at IoU 0.3) are refined over 3 scales x 9 shifts, and every candidate is embedded the
   same way (the region resized to the garment and masked with its silhouette). The similarity is the best cosine.
2. **Attribute agreement.** An annotator labels the generated image's pixels inside the garment's silhouette fitted
   to that region, read at full resolution without interpolation and leaving out the pixels on the boundary
   between two colours (the baseline, :class:`PixelColourAnnotator`, reads the colour, and "solid" when there is
   one colour), and its labels are compared with the reference item's labels from the annotations table:
   ``agreed / compared`` over the attributes both carry.

Colour naming: each pixel takes the taxonomy colour of its nearest anchor, a CSS Color Module Level 4 named colour
(W3C, 2022, section 6.1), by the CMC l:c = 2:1 colour difference (Clarke, McDonald & Rigg 1984; the textile
industry's acceptability formula, ISO 105-J03), which weighs lightness half as much as chroma and hue, so a garment
under other lighting keeps its name. sRGB to CIE 1976 L*a*b* uses IEC 61966-2-1 and the D65 white point.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image

from ..embed import Embedder

ANNOTATOR_PIXEL_COLOUR = "pixel-colour/1"
WORK_SIDE = 192  # pixels: the longer side the generated image is searched at
GARMENT_SIDE = 64  # pixels: the longer side of the garment template (the baseline embedder's input size)
SAMPLE_GRID = 24  # silhouette sample points per side for the histogram search
SCALES = (1.0, 0.8, 0.64, 0.5, 0.4, 0.32, 0.25, 0.2, 0.16, 0.12)  # window height / image height
FOREGROUND_TOLERANCE = 10  # levels of 255: farther than this from the border colour is garment

# CSS Color Module Level 4 named colours (sRGB hex) that name each colour family or a shade of it (navy under blue,
# maroon under red, olive under green: see COLOUR_FAMILY). "tan" is counted as beige here (its sRGB value is one).
COLOUR_ANCHORS: dict[str, tuple[str, ...]] = {
    "black": ("000000", "2f4f4f"),
    "white": ("ffffff", "fffff0", "f5f5f5", "fffafa", "faf0e6"),
    "grey": ("808080", "a9a9a9", "696969", "c0c0c0", "708090", "778899"),
    "red": ("ff0000", "8b0000", "b22222", "dc143c", "800000"),
    "pink": ("ffc0cb", "ff69b4", "ffb6c1", "db7093", "ff1493", "c71585"),
    "orange": ("ffa500", "ff8c00", "ff7f50", "ff4500"),
    "yellow": ("ffff00", "ffd700", "f0e68c"),
    "green": ("008000", "228b22", "808000", "2e8b57", "32cd32", "006400", "6b8e23", "556b2f"),
    "blue": ("0000ff", "000080", "4169e1", "4682b4", "1e90ff", "0000cd", "00008b", "191970", "6495ed", "40e0d0"),
    "purple": ("800080", "9400d3", "9370db", "ee82ee", "663399", "8b008b", "e6e6fa", "da70d6"),
    "brown": ("a52a2a", "8b4513", "a0522d"),
    "beige": ("f5f5dc", "f5deb3", "deb887", "ffe4c4", "eee8aa", "d2b48c"),
}
ACHROMATIC = frozenset({"black", "white", "grey"})
COLOUR_FAMILY = {"navy": "blue", "turquoise": "blue", "burgundy": "red", "khaki": "green", "cream": "white",
                 "silver": "grey", "gold": "yellow"}
"""Finer colour values of the taxonomy (v2) and the family the pixel annotator names them by: telling navy from
blue or burgundy from red under unknown lighting, or metallic gold and silver from flat yellow and grey, is beyond
a colour statistic."""


def srgb_to_lab(rgb: np.ndarray) -> np.ndarray:
    """sRGB (uint8, shape (..., 3)) to CIE 1976 L*a*b* (float64, same shape; D65 white, IEC 61966-2-1 transfer)."""
    c = np.asarray(rgb, dtype=np.float64) / 255.0
    lin = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    m = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
    xyz = lin @ m.T / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])], axis=-1)


def delta_e_cmc(sample: np.ndarray, standard: np.ndarray, l: float = 2.0, c: float = 1.0) -> np.ndarray:
    """CMC l:c colour difference of L*a*b* ``sample`` from ``standard`` (broadcasting, shape (..., 3)).

    Clarke, McDonald & Rigg (1984), J. Soc. Dyers Colour. 100:128; the tolerance ellipsoid is centred on
    ``standard`` (the formula is not symmetric)."""
    L1, a1, b1 = standard[..., 0], standard[..., 1], standard[..., 2]
    L2, a2, b2 = sample[..., 0], sample[..., 1], sample[..., 2]
    C1, C2 = np.hypot(a1, b1), np.hypot(a2, b2)
    dL, dC = L1 - L2, C1 - C2
    dH2 = np.maximum((a1 - a2) ** 2 + (b1 - b2) ** 2 - dC**2, 0.0)
    H1 = np.degrees(np.arctan2(b1, a1)) % 360
    F = np.sqrt(C1**4 / (C1**4 + 1900))
    T = np.where((H1 >= 164) & (H1 <= 345), 0.56 + np.abs(0.2 * np.cos(np.radians(H1 + 168))),
                 0.36 + np.abs(0.4 * np.cos(np.radians(H1 + 35))))
    SL = np.where(L1 < 16, 0.511, 0.040975 * L1 / (1 + 0.01765 * L1))
    SC = 0.0638 * C1 / (1 + 0.0131 * C1) + 0.638
    SH = SC * (F * T + 1 - F)
    return np.sqrt((dL / (l * SL)) ** 2 + (dC / (c * SC)) ** 2 + dH2 / SH**2)


class PixelColourAnnotator:
    """Labels the colour of a garment from its pixels (the baseline image annotator of the reference check).

    Every pixel is named by its nearest anchor (:data:`COLOUR_ANCHORS`, CMC 2:1); the label is the most frequent
    chromatic name when it covers at least ``min_chromatic_share`` of the pixels (a red garment with white stripes
    is red), else the most frequent name. Fewer than ``min_pixels`` pixels: no label. Colours that the taxonomy does
    not list are never produced. A region that is one colour is also labelled ``pattern: solid`` (see
    :meth:`label`).
    """

    name = ANNOTATOR_PIXEL_COLOUR

    def __init__(self, allowed: Sequence[str] | None = None, min_pixels: int = 50, min_chromatic_share: float = 0.25,
                 solid_share: float | None = 0.9):
        names, hexes = [], []
        for value, anchors in COLOUR_ANCHORS.items():
            if allowed is None or value in allowed:
                for h in anchors:
                    names.append(value)
                    hexes.append([int(h[i:i + 2], 16) for i in (0, 2, 4)])
        if not names:
            raise ValueError(f"no colour anchor for any of the taxonomy's colours {list(allowed or [])}")
        self._names = np.array(names)
        self._anchors = srgb_to_lab(np.array(hexes, dtype=np.uint8))
        self.min_pixels, self.min_chromatic_share, self.solid_share = min_pixels, min_chromatic_share, solid_share

    def shares(self, pixels: np.ndarray) -> dict[str, float]:
        """Share of the pixels (uint8, shape (n, 3)) named by each colour, largest first."""
        px = np.asarray(pixels, dtype=np.uint8).reshape(-1, 3)
        if len(px) > 4096:
            px = px[np.linspace(0, len(px) - 1, 4096).astype(np.int64)]
        if len(px) == 0:
            return {}
        d = delta_e_cmc(srgb_to_lab(px)[:, None, :], self._anchors[None, :, :])
        counts = Counter(self._names[d.argmin(axis=1)].tolist())
        return {k: v / len(px) for k, v in counts.most_common()}

    def label(self, pixels: np.ndarray) -> dict[str, str]:
        """``{"color": value}``, plus ``"pattern": "solid"`` when one colour name covers at least ``solid_share``
        of the pixels (a region of one colour is not striped, checked or dotted; a patterned region gets no
        pattern label: telling stripes from checks is beyond this annotator). ``{}`` with too few pixels."""
        if len(np.asarray(pixels).reshape(-1, 3)) < self.min_pixels:
            return {}
        shares = self.shares(pixels)
        chromatic = [(s, k) for k, s in shares.items() if k not in ACHROMATIC]
        if chromatic and max(chromatic)[0] >= self.min_chromatic_share:
            out = {"color": max(chromatic)[1]}
        else:
            out = {"color": next(iter(shares))}
        if self.solid_share is not None and next(iter(shares.values())) >= self.solid_share:
            out["pattern"] = "solid"
        return out


def compare_attributes(generated: dict[str, str], reference: dict[str, str],
                       not_visible: str = "not visible") -> tuple[int, int, list[str]]:
    """``(compared, agreed, disagreeing attribute names)`` over the attributes both label (not "not visible")."""
    both = sorted(a for a in generated if a in reference and not_visible not in (generated[a], reference[a]))
    bad = [a for a in both if generated[a] != reference[a]]
    return len(both), len(both) - len(bad), bad


# ------------------------------------------------------------------------------------------- locating the garment


def _hsv_bins(rgb: Image.Image) -> np.ndarray:
    """The baseline embedder's HSV colour bins (8 x 4 x 4 = 128) of every pixel, int array (h, w)."""
    hsv = np.asarray(rgb.convert("HSV"), dtype=np.int32)
    return hsv[..., 0] * 8 // 256 * 16 + hsv[..., 1] * 4 // 256 * 4 + hsv[..., 2] * 4 // 256


def silhouette(fg: np.ndarray, close_frac: float = 0.04) -> Image.Image:
    """A garment's silhouette (L, 255 inside) from its foreground pixels (bool (h, w)): a morphological closing
    with a disc of ``close_frac`` of the image's longer side, then every hole filled
    (``scipy.ndimage``). White stripes of a shirt on a white packshot are as close to the background as the
    background itself; the closing bridges them where they reach the outline, the filling where they do not."""
    from scipy.ndimage import binary_closing, binary_fill_holes

    r = max(1, round(close_frac * max(fg.shape)))
    yy, xx = np.mgrid[-r:r + 1, -r:r + 1]
    disc = xx**2 + yy**2 <= r * r
    padded = np.pad(fg, r + 1)
    closed = binary_closing(padded, structure=disc)[r + 1:-r - 1, r + 1:-r - 1]
    return Image.fromarray(binary_fill_holes(closed | fg).astype(np.uint8) * 255, "L")


@dataclass
class ReferenceGarment:
    """A reference item's garment prepared for the check: the template (RGB, longer side :data:`GARMENT_SIDE`),
    its silhouette (L, 255 inside), the fill colour outside it, its embedding, and the silhouette's sample points
    and HSV histogram for the sliding-window search. ``whole_image`` when no background could be told apart."""

    template: Image.Image
    mask: Image.Image
    fill: tuple[int, int, int]
    embedding: np.ndarray
    uv: np.ndarray  # (k, 2) sample points in [0, 1) x [0, 1) inside the silhouette
    hist: np.ndarray  # (128,) HSV bin shares at those points
    whole_image: bool

    @property
    def aspect(self) -> float:
        return self.template.width / self.template.height

    def masked(self, region: Image.Image) -> Image.Image:
        """``region`` resized to the template and everything outside the silhouette replaced by the fill."""
        r = region.convert("RGB").resize(self.template.size, Image.Resampling.BILINEAR)
        return Image.composite(r, Image.new("RGB", r.size, self.fill), self.mask)


def prepare_reference(rgb: Image.Image, embedder: Embedder, tolerance: int = FOREGROUND_TOLERANCE) -> ReferenceGarment:
    """Cut the garment out of a (normalised, RGB) gallery image and embed it (see the module docstring)."""
    rgb = rgb.convert("RGB")
    a = np.asarray(rgb, dtype=np.int16)
    border = np.concatenate([a[0], a[-1], a[:, 0], a[:, -1]])
    bg = np.median(border, axis=0)
    mask = silhouette(np.abs(a - bg).max(axis=2) > tolerance)
    box = mask.getbbox()
    whole = box is None or float(np.asarray(mask).mean()) / 255 < 0.02
    if whole:
        crop, mask_c, fill = rgb, Image.new("L", rgb.size, 255), (128, 128, 128)
    else:
        crop, mask_c, fill = rgb.crop(box), mask.crop(box), tuple(int(v) for v in bg)
    s = GARMENT_SIDE / max(crop.size)
    size = (max(8, round(crop.width * s)), max(8, round(crop.height * s)))
    template = crop.resize(size, Image.Resampling.LANCZOS)
    mask_s = mask_c.resize(size, Image.Resampling.BILINEAR).point(lambda v: 255 if v > 127 else 0)
    ref = ReferenceGarment(template, mask_s, fill, np.zeros(0, np.float32), np.zeros((0, 2)), np.zeros(128), whole)
    ref.embedding = embedder.embed([Image.composite(template, Image.new("RGB", size, fill), mask_s)])[0]
    g = np.asarray(mask_c.resize((SAMPLE_GRID, SAMPLE_GRID), Image.Resampling.BILINEAR)) > 127
    if not g.any():
        g[:] = True
    vv, uu = np.nonzero(g)
    ref.uv = np.stack([(uu + 0.5) / SAMPLE_GRID, (vv + 0.5) / SAMPLE_GRID], axis=1)
    bins = _hsv_bins(crop.resize((SAMPLE_GRID, SAMPLE_GRID), Image.Resampling.BILINEAR))[g]
    ref.hist = np.bincount(bins, minlength=128) / len(bins)
    return ref


@dataclass
class Match:
    """Where the garment is in the generated image: ``box`` (x1, y1, x2, y2) in pixels of the image given,
    ``similarity`` the cosine there, ``pixels`` the image's pixels inside the silhouette fitted to the box
    (uint8 (n, 3)), ``candidates`` the number of regions embedded, ``seed_box`` the given region (a detector's box)
    that the best candidate refines, when regions were given."""

    similarity: float
    box: tuple[float, float, float, float]
    pixels: np.ndarray
    candidates: int
    seed_box: tuple[float, float, float, float] | None = None  # the given region the best candidate refines
    seed_index: int | None = None  # its position in ``regions``


def _grid(w: int, h: int, aspect: float) -> np.ndarray:
    out = []
    for s in SCALES:
        bh = s * h
        bw = aspect * bh
        if bw > w:
            bw, bh = w, w / aspect
        nx = max(1, int(round((w - bw) / (bw / 3))) + 1)
        ny = max(1, int(round((h - bh) / (bh / 3))) + 1)
        for y in np.linspace(0, h - bh, ny):
            for x in np.linspace(0, w - bw, nx):
                out.append((x, y, bw, bh))
    return np.array(out, dtype=np.float64)


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    iw = max(0.0, min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1]))
    inter = iw * ih
    return inter / (a[2] * a[3] + b[2] * b[3] - inter)


def _refine(c: Sequence[float], w: int, h: int) -> list[tuple[float, float, float, float]]:
    x, y, bw, bh = c
    out = []
    for sc in (0.9, 1.0, 1.1):
        nw, nh = min(bw * sc, w), min(bh * sc, h)
        cx, cy = x + bw / 2, y + bh / 2
        for dx in (-bw / 8, 0.0, bw / 8):
            for dy in (-bh / 8, 0.0, bh / 8):
                out.append((min(max(0.0, cx + dx - nw / 2), w - nw), min(max(0.0, cy + dy - nh / 2), h - nh), nw, nh))
    return out


def locate(ref: ReferenceGarment, image: Image.Image, embedder: Embedder,
           regions: Sequence[Sequence[float]] | None = None, top: int = 3) -> Match:
    """Find the reference garment in ``image`` (see the module docstring).

    Args:
        regions: candidate boxes ``(x1, y1, x2, y2)`` in pixels of ``image`` (a garment detector's); ``None``
            searches sliding windows.
    """
    work = image.convert("RGB")
    scale = WORK_SIDE / max(work.size)
    if scale < 1:
        work = work.resize((max(1, round(work.width * scale)), max(1, round(work.height * scale))),
                           Image.Resampling.BILINEAR)
    else:
        scale = 1.0
    w, h = work.size
    if regions:
        seeds = [np.array([x1 * scale, y1 * scale, max(1.0, (x2 - x1) * scale), max(1.0, (y2 - y1) * scale)])
                 for x1, y1, x2, y2 in regions]
    else:
        boxes = _grid(w, h, ref.aspect)
        labels = _hsv_bins(work)
        px = (boxes[:, None, 0] + ref.uv[None, :, 0] * boxes[:, None, 2]).astype(np.int64).clip(0, w - 1)
        py = (boxes[:, None, 1] + ref.uv[None, :, 1] * boxes[:, None, 3]).astype(np.int64).clip(0, h - 1)
        n, k = len(boxes), len(ref.uv)
        hist = np.bincount((np.arange(n)[:, None] * 128 + labels[py, px]).ravel(), minlength=n * 128)
        score = np.sqrt(hist.reshape(n, 128) / k * ref.hist).sum(axis=1)  # Bhattacharyya coefficient
        seeds = []
        for i in np.argsort(-score, kind="stable"):
            if all(_iou(boxes[i], s) < 0.3 for s in seeds):
                seeds.append(boxes[i])
            if len(seeds) == top:
                break
    refined = [_refine(s, w, h) for s in seeds]
    cands = [tuple(s) for s in seeds] + [r for rs in refined for r in rs]
    origin = list(range(len(seeds))) + [k for k, rs in enumerate(refined) for _ in rs]  # seed of each candidate
    crops = [ref.masked(work.crop((round(x), round(y), round(x + bw), round(y + bh)))) for x, y, bw, bh in cands]
    sims = embedder.embed(crops) @ ref.embedding
    i = int(np.argmax(sims))
    x, y, bw, bh = cands[i]
    box = (x / scale, y / scale, (x + bw) / scale, (y + bh) / scale)
    # Colours are read at full resolution and sampled without interpolation: a downscaled pattern blends its
    # colours (yellow and black checks average to olive).
    side = 2 * GARMENT_SIDE
    size = (max(8, round(side * ref.aspect)), side) if ref.aspect <= 1 else (side, max(8, round(side / ref.aspect)))
    full = np.asarray(image.convert("RGB").crop(tuple(round(v) for v in box)).resize(size, Image.Resampling.NEAREST))
    inside = np.asarray(ref.mask.resize(size, Image.Resampling.NEAREST)) > 127
    seed_box = tuple(float(v) for v in regions[origin[i]]) if regions else None
    return Match(float(sims[i]), box, _flat_pixels(full, inside), len(cands), seed_box,
                 origin[i] if regions else None)


def _flat_pixels(rgb: np.ndarray, inside: np.ndarray, max_step: int = 24, min_share: float = 0.3) -> np.ndarray:
    """The pixels of ``rgb`` (h, w, 3) inside the mask that differ from each 4-neighbour by at most ``max_step``
    levels in every channel: the boundary between two colours of a pattern is a blend of both (red and white
    stripes meet in pink) and says nothing about the garment's colours. When fewer than ``min_share`` of the
    pixels are flat (a fine texture), all of them are used."""
    a = rgb.astype(np.int16)
    step = np.zeros(a.shape[:2], dtype=np.int16)
    dy = np.abs(a[1:] - a[:-1]).max(axis=2)
    dx = np.abs(a[:, 1:] - a[:, :-1]).max(axis=2)
    step[1:] = np.maximum(step[1:], dy)
    step[:-1] = np.maximum(step[:-1], dy)
    step[:, 1:] = np.maximum(step[:, 1:], dx)
    step[:, :-1] = np.maximum(step[:, :-1], dx)
    flat = inside & (step <= max_step)
    return rgb[flat] if flat.sum() >= min_share * inside.sum() else rgb[inside]
