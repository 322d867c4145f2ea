"""Image renditions: one picture a shop serves at several sizes, and the largest one a page offers.

Shops serve each product photo through a resizing CDN: the same file under width parameters (``?imwidth=103`` /
``?imwidth=1800``, ``?w=``, ``?width=``, ``?wid=``), size suffixes (Shopify's ``shirt_200x.jpg``,
``shirt_200x300@2x.jpg``, ``_small`` … ``_grande``, ``_master``), or size path segments (``/w/560/``,
``/w_400,h_600,c_fill/``). A page lists several of them (a thumbnail strip, a ``srcset``, a zoom URL). This
module keys every URL by the picture it shows (the URL without its size markers) and keeps the largest declared
rendition of each picture, so a gallery gets the full-size file and never the thumbnail beside it.

Pure functions of URL strings: no network.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

# Query parameters that only choose a rendition (width, height, quality, format, crop) of the same picture.
SIZE_PARAMS = {"imwidth", "imheight", "w", "width", "h", "height", "wid", "hei", "sw", "sh", "size", "maxwidth",
               "maxheight", "resize", "fit", "crop", "q", "quality", "qlt", "fmt", "format", "auto", "dpr", "scale",
               "im", "filter", "op_sharpen", "resmode", "sm", "strip", "trim", "bg", "v", "ts", "cb", "version"}
WIDTH_PARAMS = ("imwidth", "w", "width", "wid", "sw", "maxwidth", "size")
HEIGHT_PARAMS = ("imheight", "h", "height", "hei", "sh", "maxheight")

# Shopify's image URL suffixes (shopify.dev, "img_url" filter): _<w>x, _x<h>, _<w>x<h>, optional @2x / _crop_*,
# and the named sizes it still serves.
_SHOPIFY_NAMED = {"pico": 16, "icon": 32, "thumb": 50, "small": 100, "compact": 160, "medium": 240, "large": 480,
                  "grande": 600, "1024x1024": 1024, "2048x2048": 2048, "master": None, "original": None}
_SUFFIX = re.compile(r"_(?:(?P<w>\d{2,5})x(?P<h>\d{2,5})?|x(?P<h2>\d{2,5})|(?P<named>pico|icon|thumb|small|compact|medium|"
                     r"large|grande|master|original))(?P<crop>_crop_[a-z]+)?(?P<scale>@[23]x)?(?=\.[A-Za-z0-9]{2,5}$)")
# Amazon's image service: "<id>._SX38_SY50_CR,0,0,38,50_.jpg", "<id>._AC_SL1500_.jpg", "<id>._SY355_.jpg" (the
# original is "<id>.jpg"): S/U + X/Y/L is the longest side asked for.
_AMAZON = re.compile(r"\.(?:_[A-Z0-9,]+)*_(?:[SU][XYL](?P<n>\d{2,5})_)+(?:[A-Z0-9,]+_)*(?=\.[A-Za-z]{3,4}$)")
# Size path segments: /w/560/ (a key and a number), /w_400,h_600,c_fill/ (Cloudinary-style transformations),
# /400x600/ and /s400/ are left alone (too often part of the picture's own name).
_PATH_KV = re.compile(r"/(?P<k>w|h|width|height)/(?P<n>\d{2,5})(?=/)")
_PATH_TRANSFORM = re.compile(r"/(?P<t>(?:[a-z]{1,2}_[A-Za-z0-9.:]+,)*(?:w|h)_\d{2,5}(?:,[a-z]{1,2}_[A-Za-z0-9.:]+)*)(?=/)")


def _int(v: str | None) -> int | None:
    try:
        n = int(float(v)) if v is not None else None
    except ValueError:
        return None
    return n if n and 0 < n < 100_000 else None


def rendition(url: str) -> tuple[str, int | None]:
    """``(picture key, declared width in pixels or None)`` of an image URL.

    The key is the URL with every size marker removed (size query parameters dropped and the rest sorted, the
    Shopify suffix and size path segments cut out); two URLs with one key show the same picture. The width is the
    largest side the URL asks for (a width parameter, else a height one; a ``@2x`` suffix doubles it); None when the
    URL names no size (usually the original file)."""
    parts = urlsplit(url)
    path = parts.path
    width: int | None = None
    m = _SUFFIX.search(path)
    if m:
        if m.group("named"):
            width = _SHOPIFY_NAMED[m.group("named")]
        else:
            width = max(filter(None, [_int(m.group("w")), _int(m.group("h")), _int(m.group("h2"))]), default=None)
        if width and m.group("scale"):
            width *= int(m.group("scale")[1])
        path = path[: m.start()] + path[m.end():]
    am = _AMAZON.search(path)
    if am:
        sizes = [int(n) for n in re.findall(r"[SU][XYL](\d{2,5})_", am.group(0))]
        width = max(sizes) if sizes else width
        path = path[: am.start()] + path[am.end():]
    for km in list(_PATH_KV.finditer(path)):
        width = max(width or 0, _int(km.group("n")) or 0) or None
    path = _PATH_KV.sub("", path)
    tm = _PATH_TRANSFORM.search(path)
    if tm:
        sizes = [_int(x) for x in re.findall(r"(?:^|,)[wh]_(\d{2,5})", tm.group("t"))]
        width = max([width or 0, *[s or 0 for s in sizes]]) or None
        path = path[: tm.start()] + path[tm.end():]
    query = parse_qsl(parts.query, keep_blank_values=True)
    qw = [_int(v) for k, v in query if k.lower() in WIDTH_PARAMS]
    qh = [_int(v) for k, v in query if k.lower() in HEIGHT_PARAMS]
    declared = [x for x in qw if x] or [x for x in qh if x]
    if declared:
        width = max(declared)
    rest = sorted((k, v) for k, v in query if k.lower() not in SIZE_PARAMS)
    key = urlunsplit((parts.scheme.lower(), parts.netloc.lower(), re.sub(r"/{2,}", "/", path), urlencode(rest), ""))
    return key, width


def is_full_size(url: str, min_side: int = 500) -> bool:
    """True when the URL asks for no size (the original) or for at least ``min_side`` pixels."""
    w = rendition(url)[1]
    return w is None or w >= min_side


class RenditionIndex:
    """The largest rendition of each picture among the URLs a page carries.

    ``add(url, width)`` records a URL (``width``: a ``srcset`` ``w`` descriptor in pixels, else what the URL itself
    declares); ``best(url)`` returns the URL of the largest known rendition of the same picture (an undeclared size,
    the original, beats every declared one), or ``url`` itself when nothing larger is known."""

    def __init__(self, urls: Iterable[str] = ()) -> None:
        self._best: dict[str, tuple[float, str]] = {}
        for u in urls:
            self.add(u)

    def add(self, url: str, width: float | None = None) -> None:
        key, declared = rendition(url)
        size = width or declared
        rank = float("inf") if size is None else float(size)
        cur = self._best.get(key)
        if cur is None or rank > cur[0]:
            self._best[key] = (rank, url)

    def best(self, url: str) -> str:
        cur = self._best.get(rendition(url)[0])
        return cur[1] if cur else url

    def collapse(self, urls: Iterable[str]) -> list[str]:
        """``urls`` with each picture once, as its largest known rendition, in first-seen order."""
        out: dict[str, str] = {}
        for u in urls:
            key = rendition(u)[0]
            if key not in out:
                out[key] = self.best(u)
        return list(out.values())


_URL_IN_TEXT = re.compile(r"""(?:https?:)?//[^\s"'<>()\\,]+?\.(?:jpe?g|png|webp|avif|gif)(?:\?[^\s"'<>\\]*)?(?=["'\s<>\\,)]|$)""",
                          re.IGNORECASE)


_URL_START = re.compile(r"(?:https?:)?//", re.IGNORECASE)
_URL_RUN = re.compile(r"""[^\s"'<>()\\,]*""")


def image_urls_in(text: str) -> list[str]:
    """Image URLs written anywhere in a page's source (attributes, inline JSON with ``\\/`` unescaped), as
    absolute or protocol-relative strings: the renditions a page offers beyond its ``img`` tags.

    The same matches as ``_URL_IN_TEXT.findall``, in time linear in ``len(text)``: ``findall`` would retry the lazy
    scan from every ``//`` of a run of URL characters (quadratic on a hostile page of slashes), but an end that fails
    from a run's first start fails from every later start in it, so a failed start skips the rest of its run."""
    text = text.replace("\\/", "/").replace("&amp;", "&")
    out: list[str] = []
    pos = 0
    while (start := _URL_START.search(text, pos)) is not None:
        m = _URL_IN_TEXT.match(text, start.start())
        if m is not None:
            out.append(m.group())
            pos = m.end()
        else:
            pos = max(_URL_RUN.match(text, start.end()).end(), start.end())
    return out
