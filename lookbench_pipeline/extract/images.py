"""Image URLs of a page and of its structured data: ``srcset`` candidates (``parse_srcset``), an element's best
image URL (``_best_attr``) and a rule's (``page_image_urls``, with ``select``, which applies a CSS or XPath rule),
absolute URLs each once (``_absolute``), and each picture as the largest rendition the page offers
(``_page_renditions``, ``_full_size``; ``lookbench_pipeline.renditions``). Imports no sibling."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

from parsel import Selector
from w3lib.html import replace_entities

from ..renditions import _SUFFIX as _SHOPIFY_SUFFIX
from ..renditions import RenditionIndex, image_urls_in


def parse_srcset(value: str) -> list[tuple[str, float]]:
    """Candidates of a ``srcset`` as ``(url, width-or-density)``, following the HTML standard's parser: a URL is
    a run of non-space characters (commas inside it, as CDN URLs have, are kept; trailing commas end it), then
    an optional ``<n>w`` or ``<n>x`` descriptor. A candidate without a descriptor counts as ``1x``."""
    out, i, n = [], 0, len(value)
    while i < n:
        while i < n and (value[i].isspace() or value[i] == ","):
            i += 1
        j = i
        while j < n and not value[j].isspace():
            j += 1
        url = value[i:j]
        i = j
        descriptor = ""
        if url.endswith(","):
            url = url.rstrip(",")
        else:
            k = i
            depth = 0
            while k < n and (value[k] != "," or depth):
                depth += {"(": 1, ")": -1}.get(value[k], 0)
                k += 1
            descriptor = value[i:k].strip()
            i = k + 1
        if not url:
            continue
        size = 1.0
        m = re.fullmatch(r"(\d+(?:\.\d+)?)([wxh])", descriptor)
        if m:
            size = float(m.group(1)) * (1.0 if m.group(2) == "w" else 1000.0 if m.group(2) == "x" else 1.0)
        out.append((url, size))
    return out


def page_image_urls(sel: Selector, css: str, base: str, refused: list[str] | None = None) -> list[str]:
    """The best URL of every element ``css`` selects (``img`` or ``source``): the largest ``srcset`` /
    ``data-srcset`` candidate, else ``data-src`` (lazy loading), else ``src``; ``data:`` placeholders ignored;
    resolved against ``base`` (so ``<base href>``, relative and protocol-relative URLs work). One of another
    scheme (``file:``, ``javascript:``…) goes to ``refused`` when given (:func:`rule_image_urls`)."""
    return rule_image_urls(sel, css, base, refused)


_SCHEME = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*):")
REFUSED_URL_CHARS = 200
"""A refused image reference longer than this is recorded as its start and a digest (:func:`refused_form`)."""


def _all_image_urls(v: Any) -> list[str]:
    out: list[str] = []
    for x in v if isinstance(v, list) else [v]:
        if isinstance(x, str):
            out.append(x.strip())
        elif isinstance(x, dict):
            u = x.get("contentUrl") or x.get("url") or x.get("@id")
            out.extend(_all_image_urls(u) if u is not None else [])
    return [u for u in out if u]


def unsupported_scheme(url: str) -> bool:
    """Whether ``url`` names a scheme other than http(s) (``file:``, ``data:``, ``javascript:``, ``ftp:``,
    ``gopher:``…): such an image reference is refused ``unsupported_scheme``, never fetched or read. A relative or
    protocol-relative URL has no scheme of its own (it takes the page's)."""
    m = _SCHEME.match(url.strip())
    return bool(m) and m.group(1).lower() not in ("http", "https")


def refused_form(url: str) -> str:
    """How a refused image reference (or a refused redirect's target, in the crawl log) is recorded: as it is
    when short; a ``data:`` URI as its media type and
    the sha256 and length of the whole URI, never its payload (``data:image/png;base64,…#sha256=<16 hex>,
    <n> chars``); any other longer than :data:`REFUSED_URL_CHARS` as its start and the same digest."""
    import hashlib

    u = url.strip()
    digest = f"#sha256={hashlib.sha256(u.encode('utf-8', 'surrogatepass')).hexdigest()[:16]},{len(u)} chars"
    if u[:5].lower() == "data:":
        head = u.split(",", 1)[0][:60]
        return f"{head},…{digest}"
    return u if len(u) <= REFUSED_URL_CHARS else u[:REFUSED_URL_CHARS - 60] + "…" + digest


def _image_urls(v: Any) -> list[str]:
    """The image URLs of a structured-data ``image`` value (strings, ``ImageObject``s, lists of them) that may be
    fetched: http(s), relative or protocol-relative; the others are :func:`_refused_image_urls`."""
    return [u for u in _all_image_urls(v) if not unsupported_scheme(u)]


def _refused_image_urls(v: Any) -> list[str]:
    """The image URLs of a structured-data ``image`` value with an unsupported scheme, each once in
    :func:`refused_form`: recorded ``unsupported_scheme`` in ``image_downloads`` and ``image_refs``."""
    return list(dict.fromkeys(refused_form(u) for u in _all_image_urls(v) if unsupported_scheme(u)))


def join_url(base: str, url: str) -> str | None:
    """``url`` resolved against ``base`` (``urljoin``), or None when it is malformed (``http://[::1/x``: an
    unclosed IPv6 bracket, which ``urllib`` refuses with ValueError): one bad reference on a page costs that
    reference, never the page."""
    try:
        return urljoin(base, url)
    except ValueError:
        return None


def _absolute(urls: Iterable[str], base: str, refused: list[str] | None = None) -> list[str]:
    """Absolute http(s) URLs, each once, in order; HTML entities left in a URL by JSON-LD (``&amp;``) decoded.

    A URL that resolves to another scheme (``file:``, ``javascript:``, ``ftp:``…), or that is malformed
    (:func:`join_url`), is left out; with ``refused`` (a list) it is appended there once, in :func:`refused_form`,
    so that the caller records it (``unsupported_scheme``, ``malformed_url``) rather than losing it."""
    seen, out = set(), []
    for u in urls:
        if not isinstance(u, str) or not u.strip():
            continue  # an empty src would resolve to the page itself
        a = join_url(base, replace_entities(u.strip()) if "&" in u else u.strip())
        if a is None:  # malformed: recorded, in its written form (the crawl never requests it)
            if refused is not None and refused_form(u.strip()) not in refused:
                refused.append(refused_form(u.strip()))
            continue
        if a.startswith(("http://", "https://")):
            if a not in seen:
                seen.add(a)
                out.append(a)
        elif refused is not None and unsupported_scheme(a) and refused_form(a) not in refused:
            refused.append(refused_form(a))
    return out


def page_base(html: str, url: str) -> str:
    """The URL a page's relative references resolve against: its ``<base href>`` (w3lib's ``get_base_url``) when
    that is http(s), else the page's own ``url`` (a ``javascript:``, ``data:`` or ``file:`` base is ignored, as
    browsers ignore the first two)."""
    from w3lib.html import get_base_url

    base = get_base_url(html, url)
    return base if base.startswith(("http://", "https://")) else url


def select(sel: Selector, rule: str):
    """Apply a rule: XPath when it starts with ``/`` or ``(``, else CSS (``::text`` / ``::attr(x)`` allowed)."""
    return sel.xpath(rule) if rule.lstrip().startswith(("/", "(")) else sel.css(rule)


def _page_renditions(sel: Selector, html: str, base: str) -> RenditionIndex:
    """Every image rendition the page names: ``srcset`` / ``data-srcset`` candidates with their width
    descriptors, ``src`` / ``data-src``-style attributes, and image URLs written in scripts and JSON."""
    index = RenditionIndex()
    for el in sel.xpath("//img | //source | //a[@data-zoom-image] | //*[@data-srcset]"):
        for attr in ("srcset", "data-srcset"):
            val = el.attrib.get(attr)
            if val:
                for u, size in parse_srcset(val):
                    a = join_url(base, u) if not u.startswith("data:") else None
                    if a:
                        index.add(a, size if size and size < 1000 or size % 1000 else None)
        for attr in ("src", "data-src", "data-lazy-src", "data-original", "data-zoom-image", "data-large"):
            u = (el.attrib.get(attr) or "").strip()
            a = join_url(base, u) if u and not u.startswith("data:") else None
            if a:
                index.add(a)
    for u in image_urls_in(html):
        a = join_url(base, u)
        if a:
            index.add(a)
    return index


def _full_size(urls: list[str], index: RenditionIndex) -> list[str]:
    """Each picture once, as the largest rendition the page offers (``renditions``); a Shopify size suffix
    (``_200x``) with no larger rendition on the page is dropped, which Shopify's CDN serves as the original."""
    out = []
    for u in index.collapse(urls):
        m = _SHOPIFY_SUFFIX.search(urlsplit(u).path)
        if m and ("/cdn/shop/" in u or "/s/files/" in u):
            parts = urlsplit(u)
            u = urlunsplit(parts._replace(path=parts.path[:m.start()] + parts.path[m.end():]))
        out.append(u)
    return list(dict.fromkeys(out))


def _placeholder(v: str) -> bool:
    """A value that names no picture: empty, or a ``data:`` URI (a lazy-loading placeholder)."""
    return not v or v[:5].lower() == "data:"


def _best_attr(el: Selector) -> str:
    """The best image URL of one element: the largest ``srcset`` / ``data-srcset`` candidate, else ``data-src``
    and the other lazy-loading attributes, else ``src``; ``data:`` placeholders skipped, and a value of another
    scheme (``about:blank``, ``javascript:void(0)``) only when the element names nothing fetchable (it is then
    recorded refused); empty when none."""
    cands = []
    for attr in ("srcset", "data-srcset"):
        v = el.attrib.get(attr)
        if v:
            cands += [c for c in parse_srcset(v) if not _placeholder(c[0]) and not unsupported_scheme(c[0])]
    if cands:
        return max(cands, key=lambda c: c[1])[0]
    found = [v for v in ((el.attrib.get(a) or "").strip() for a in ("data-src", "data-lazy-src", "data-original",
                                                                      "src")) if not _placeholder(v)]
    return next((v for v in found if not unsupported_scheme(v)), found[0] if found else "")


def rule_image_urls(sel: Selector, rule: str, base: str, refused: list[str] | None = None) -> list[str]:
    """The image URLs a site rule selects, resolved against ``base`` (:func:`_absolute`, which hands references of
    another scheme or malformed ones to ``refused``): a rule naming elements takes each one's :func:`_best_attr`;
    a rule naming an attribute (``img.i::attr(src)``) takes it per element, and where it is a placeholder
    (``data:``) or of another scheme (``about:blank``) the element's lazy-loading attributes instead; a text or
    XPath attribute rule its values, ``data:`` ones skipped."""
    m = re.search(r"::attr\(([^)]+)\)\s*$", rule)
    if m:
        urls = []
        for el in select(sel, rule[: m.start()]):
            v = (el.attrib.get(m.group(1).strip()) or "").strip()
            if _placeholder(v) or unsupported_scheme(v):
                alt = _best_attr(el)
                v = alt if alt and not unsupported_scheme(alt) else ("" if _placeholder(v) else v)
            if v:
                urls.append(v)
        return _absolute(urls, base, refused)
    if "::" in rule or "/@" in rule or rule.rstrip().endswith("text()"):
        return _absolute([u for u in select(sel, rule).getall() if not _placeholder(u.strip())], base, refused)
    return _absolute([_best_attr(el) for el in select(sel, rule)], base, refused)
