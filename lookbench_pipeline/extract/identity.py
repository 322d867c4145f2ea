"""Item identity: field values as data (``clean_value``), an item's identifiers and the one chosen as its sku
(``_identifiers``, ``choose_identifier``, ``_group_id``), one entry per sellable item at colour granularity
(``_collapse``, ``_merge``, ``_colour_identity``), and the stable ids made of it (``canonical``, ``product_key``,
``path_key``)."""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Hashable, Iterable
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from w3lib.url import canonicalize_url

from ..pagetext import is_placeholder, url_identifier
from .jsonld import _first, _text
from .offers import _ci

_IDENTIFIER_KEYS = ("sku", "productID", "gtin14", "gtin13", "gtin12", "gtin8", "gtin", "mpn")
_MAX_FIELD_WORDS = {"brand": 6, "sku": 1, "color": 6, "material": 12, "title": 60}


def clean_value(field: str, value: str | None, page_title: str | None = None) -> str | None:
    """A field value as data, or None when it is template junk or prose: an unrendered placeholder
    (``$metabrand``, ``{{brand}}``), a sentence where a name belongs (more words than the field takes, or a label
    with a colon such as "Ver mais artigos da Marca: X"), for a brand, the page's own title, or a title that is only
    a URL (a product card's ``<a itemprop="name" href=…>``, which microdata reads as its link)."""
    if value is None:
        return None
    v = value.strip()
    if not v or is_placeholder(v):
        return None
    limit = _MAX_FIELD_WORDS.get(field)
    if limit is not None and len(v.split()) > limit:
        return None
    if field in ("brand", "color") and (":" in v or (page_title and v.lower() == page_title.strip().lower())):
        return None
    if field == "title" and _URL_ONLY.match(v):
        return None
    return v


_URL_ONLY = re.compile(r"(?:https?:)?//\S+$", re.IGNORECASE)


def _identifiers(props: dict, offers: list[dict]) -> list[tuple[str, str]]:
    """Every identifier of the item as ``(key, value)``, most trusted first: the product's ``sku``, an offer's
    ``sku``, then ``productID``, the GTINs and ``mpn``, of the product and then of its offers; blank and placeholder
    values skipped."""
    out: list[tuple[str, str]] = []
    for key in _IDENTIFIER_KEYS:
        for source in [props, *offers]:
            v = clean_value("sku", _text(_ci(source, key)))
            if v and v not in (x[1] for x in out):
                out.append((("offers." if source is not props else "") + key, v))
    return out


def choose_identifier(candidates: list[tuple[str, str]], url: str) -> tuple[str | None, str | None]:
    """``(value, key)`` of the item's sku among its identifiers: one that the page URL carries (the site's own id
    for the item's page) first; else a ``sku`` / ``productID``; else an identifier in the URL itself
    (``pagetext.url_identifier``); else a GTIN, then an ``mpn`` (a manufacturer's part number, which the
    Product Extraction Benchmark's guidelines do not count as the shop's sku)."""
    path = urlsplit(url).path + "?" + urlsplit(url).query
    for key, v in candidates:
        if len(v) >= 4 and re.search(r"(?<![A-Za-z0-9])" + re.escape(v) + r"(?![A-Za-z0-9])", path):
            return v, key
        if len(v) >= 5 and re.search(r"(?<![0-9])" + re.escape(v) + r"(?![0-9])", path) and v.isdigit():
            return v, key
    for key, v in candidates:
        if key.rsplit(".", 1)[-1] in ("sku", "productID"):
            return v, key
    in_url = url_identifier(url)
    if in_url:
        return in_url, "url"
    for key, v in candidates:
        return v, key
    return None, None


def _group_id(props: dict) -> str | None:
    """The id of the product group (the model) a variant belongs to: ``inProductGroupWithID``, else its
    ``isVariantOf`` group's ``productGroupID`` / ``sku`` / ``@id``."""
    g = _text(props.get("inProductGroupWithID"))
    if g:
        return g
    parent = _first(props.get("isVariantOf"))
    if isinstance(parent, dict):
        return _text(parent.get("productGroupID") or parent.get("sku") or parent.get("@id") or parent.get("name"))
    return None


def _merge(primary: dict[str, Any], extra: dict[str, Any], fields: Iterable[str] | None = None) -> dict[str, Any]:
    """``primary`` with its empty fields filled from ``extra`` (images appended), recording each filled field's
    source. ``fields`` limits what may be filled."""
    out = dict(primary)
    out["_sources"] = dict(primary.get("_sources") or {})
    if extra.get("_images_refused") and (fields is None or "image_urls" in fields):  # refused images: kept too
        out["_images_refused"] = list(dict.fromkeys([*(primary.get("_images_refused") or []),
                                                     *extra["_images_refused"]]))
    for k, v in extra.items():
        if k.startswith("_") or k == "extracted_from" or (fields is not None and k not in fields):
            continue
        if k == "image_urls":
            if v:
                out[k] = list(dict.fromkeys([*out.get(k, []), *v]))
        elif out.get(k) in (None, "") and v not in (None, ""):
            out[k] = v
            out["_sources"][k] = (extra.get("_sources") or {}).get(k, extra.get("extracted_from"))
    return out


@lru_cache(maxsize=65536)
def _norm_text(v: str) -> str:
    return re.sub(r"\s+", " ", v).strip().lower()


def _norm(v: str | None) -> str:
    return _norm_text(v) if v else ""


class _FirstByKey:
    """The lowest position whose *current* key is ``key``, for keys that change as items merge: a heap of
    positions per key, stale entries (the item's key moved on) dropped when they reach the top. Pushes are O(log n)
    and each entry is popped at most once, so a page's collapse stays O(n log n) (a pairwise scan was O(n²): a
    hostile page of 5,000 variants took 25 s)."""

    def __init__(self, key_of: Callable[[int], Hashable | None]) -> None:
        self.key_of = key_of
        self.heaps: dict[Hashable, list[int]] = {}

    def add(self, i: int) -> None:
        key = self.key_of(i)
        if key is not None:
            heapq.heappush(self.heaps.setdefault(key, []), i)

    def first(self, key: Hashable) -> int | None:
        heap = self.heaps.get(key)
        while heap and self.key_of(heap[0]) != key:
            heapq.heappop(heap)
        return heap[0] if heap else None


def _first_of(*positions: int | None) -> int | None:
    found = [i for i in positions if i is not None]
    return min(found) if found else None


def _collapse(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per sellable item, at colour granularity.

    1. The same item seen through several syntaxes is merged: the same identifier, else the same title and colour
       (a node with no colour joins the only same-titled item there is).
    2. Size variants of one colour are one item: the same group (``group_id``, else the title) and the same colour;
       when no colour is given, the same images (sizes share photos, colours do not).
    Different colours are never merged, whatever their title and images. Each node joins the first earlier entry
    it matches; the entries are found through indexes on those keys, in O(n log n) for n nodes."""
    items: list[dict[str, Any]] = []

    def title(i: int) -> str:
        return _norm(items[i]["title"])

    def tc(i: int, with_sku: bool) -> tuple[str, str] | None:
        q = items[i]
        return (title(i), _norm(q["color"])) if title(i) and bool(q["sku"]) == with_sku else None

    by_sku = _FirstByKey(lambda i: items[i]["sku"].lower() if items[i]["sku"] else None)
    by_tc_sku = _FirstByKey(lambda i: tc(i, True))
    by_tc_nosku = _FirstByKey(lambda i: tc(i, False))
    indexes = (by_sku, by_tc_sku, by_tc_nosku)
    by_title: dict[str, set[int]] = {}
    by_title_nosku: dict[str, set[int]] = {}

    def index(i: int, old_title: str) -> None:
        for ix in indexes:
            ix.add(i)
        if old_title:
            by_title[old_title].discard(i)
            by_title_nosku.get(old_title, set()).discard(i)
        if title(i):
            by_title.setdefault(title(i), set()).add(i)
            if not items[i]["sku"]:
                by_title_nosku.setdefault(title(i), set()).add(i)

    for p in found:
        t, c = _norm(p["title"]), _norm(p["color"])
        match = _first_of(
            by_sku.first(p["sku"].lower()) if p["sku"] else None,
            by_tc_nosku.first((t, c)) if t else None,
            by_tc_sku.first((t, c)) if t and not p["sku"] else None)
        if match is None and not p["color"] and t:
            same = (by_title_nosku if p["sku"] else by_title).get(t, set())
            match = next(iter(same)) if len(same) == 1 else None
        if match is not None:
            old_title = title(match)
            items[match] = _merge(items[match], p)
            index(match, old_title)
        else:
            items.append(p)
            index(len(items) - 1, "")

    out: list[dict[str, Any]] = []

    def group(i: int) -> str:
        return _norm(out[i]["group_id"]) or _norm(out[i]["title"])

    def images(i: int) -> Hashable:
        v = out[i]["image_urls"]
        return tuple(v) if isinstance(v, list) else v

    by_colour = _FirstByKey(lambda i: (group(i), _norm(out[i]["color"])) if group(i) else None)
    by_blank_colour = _FirstByKey(lambda i: group(i) or None if out[i]["color"] and not _norm(out[i]["color"])
                                  else None)
    by_images = _FirstByKey(lambda i: (group(i), images(i)) if group(i) and not out[i]["color"] else None)
    for p in items:
        g = _norm(p["group_id"]) or _norm(p["title"])
        match = None
        if g and p["color"]:
            match = by_colour.first((g, _norm(p["color"])))
        elif g:
            v = p["image_urls"]
            match = _first_of(by_blank_colour.first(g), by_images.first((g, tuple(v) if isinstance(v, list) else v)))
        nodes = [(p.get("sku"), p.get("_ids") or [], p.get("_size"), p.get("title"))]
        if match is not None:
            merged = _merge(out[match], p)
            if "InStock" in (out[match].get("availability"), p.get("availability")):
                merged["availability"] = "InStock"
            merged["_nodes"] = out[match]["_nodes"] + nodes
            out[match] = merged
            at = match
        else:
            out.append({**p, "_nodes": nodes})
            at = len(out) - 1
        for ix in (by_colour, by_blank_colour, by_images):
            ix.add(at)
    for p in out:
        _colour_identity(p)
    return out


_SEP = "-_/. "


_TITLE_SIZE_SEP = " \t,/|-–—:(["


def _colour_title(p: dict[str, Any], nodes: list[tuple]) -> None:
    """Give an item made of size variants (``nodes``: each node's sku, identifiers, stated size and
    title) the name of its colour instead of its first size's, in place (``title``): "Linen shirt Red S" and "Linen
    shirt Red M" are the item "Linen shirt Red".

    Over the nodes that have a title: each title with its own stated size cut off its end (after a space, comma,
    slash, dash, colon or an opening bracket, whose closing bracket goes too; for an item of one node, not after a
    bare space: "Pack of 3" with size "3" keeps its name, "Tee - Blue / XL" is "Tee - Blue") when that leaves one
    value for all of them; else, for two or more distinct titles, their longest common prefix ending at a word boundary when it
    keeps at least one word and at least half of the shortest title. Otherwise the title is left as it is."""
    titled = [n for n in nodes if n[3]]
    if not titled:
        return
    # One node's size is cut only after punctuation ("Tee - Blue / XL"): after a space it may be the name's own
    # number ("Pack of 3", size "3"; "Romper 86").
    seps = _TITLE_SIZE_SEP if len(nodes) >= 2 else _TITLE_SIZE_SEP.replace(" ", "").replace("\t", "")
    titles = [n[3] for n in titled]
    cut: list[str | None] = []
    for _, _, size, title in titled:
        t = title.rstrip()
        size = (size or "").strip()
        if t.endswith((")", "]")) and size:
            t = t[:-1].rstrip()
        before = t[:-len(size)] if size and len(t) > len(size) and t[-len(size):].lower() == size.lower() else ""
        last = before.rstrip()[-1:]  # the punctuation before the size, spaces around it or not
        if before and (before[-1] in seps or (before[-1].isspace() and last and last in seps)):
            cut.append(before.rstrip(_TITLE_SIZE_SEP) or None)
        else:
            cut.append(None)
    if all(cut) and len(set(cut)) == 1:
        p["title"] = cut[0]
        return
    distinct = list(dict.fromkeys(titles))
    if len(distinct) < 2:
        return
    prefix = distinct[0]
    for t in distinct[1:]:
        while prefix and not t.startswith(prefix):
            prefix = prefix[:-1]
    if not all(len(t) == len(prefix) or t[len(prefix)] in _TITLE_SIZE_SEP for t in distinct):
        at = max(prefix.rfind(c) for c in _TITLE_SIZE_SEP)
        prefix = prefix[:at] if at > 0 else ""
    prefix = prefix.rstrip(_TITLE_SIZE_SEP)
    if prefix and len(prefix) * 2 >= min(map(len, distinct)):
        p["title"] = prefix


def _colour_identity(p: dict[str, Any]) -> None:
    """Give an item made of size variants (``p["_nodes"]``: each node's sku, identifiers, stated size and title) the
    identifier of its colour instead of its first size's sku, so its id does not depend on which sizes a page
    lists; in place (``sku``, ``_ids``, the sku's source).

    The colour's identifier, in order: an identifier every size node carries with the same value (a shared
    ``productID`` / ``mpn`` / GTIN); else the sku with the node's own size cut off when every node's sku ends in
    ``<separator><its size>`` and that leaves one value (``T1-R-S`` with size ``S`` → ``T1-R``; this also holds
    for a single stated size); else, for two or more distinct skus, their longest common prefix ending at a
    separator, when it keeps four or more characters with a digit and what each sku adds is at most four
    characters (``84518927-040-35``, ``84518927-040-36`` → ``84518927-040``). Without any of these the item keeps
    its first node's identifiers. A page-level visible reference is not used here: it may be the model's,
    shared by every colour of it (a colour of it on another page would then become the same item)."""
    nodes = p.pop("_nodes", None) or []
    _colour_title(p, nodes)
    skus = list(dict.fromkeys(n[0] for n in nodes if n[0]))
    source = p.get("extracted_from")
    colour: list[tuple[str, str]] = []
    if len(skus) >= 2:
        values = [{v for _, v in ids} for _, ids, _, _ in nodes]
        colour = [(k, v) for k, v in nodes[0][1] if v not in skus and all(v in vs for vs in values[1:])]
    cut = []
    for sku, _, size, _ in nodes:
        if sku and size and len(sku) > len(size) + 1 and sku[-len(size) - 1] in _SEP and \
                sku[-len(size):].lower() == size.lower():
            cut.append(sku[:-len(size) - 1].rstrip(_SEP))
        else:
            cut.append(None)
    derived = None
    if nodes and all(cut) and len(set(cut)) == 1 and len(cut[0]) >= 4:
        derived, how = cut[0], "sizes-cut"
    elif len(skus) >= 2:
        prefix = skus[0]
        for v in skus[1:]:
            while prefix and not v.startswith(prefix):
                prefix = prefix[:-1]
        while prefix and not all(len(v) > len(prefix) and v[len(prefix)] in _SEP for v in skus):
            prefix = prefix[:-1]
        prefix = prefix.rstrip(_SEP)
        if len(prefix) >= 4 and re.search(r"\d", prefix) and all(len(v) - len(prefix) <= 5 for v in skus):
            derived, how = prefix, "sizes-common"
    if derived and derived not in (v for _, v in colour):
        colour.append(("sku", derived))
    if not colour:
        return
    p["_ids"] = colour
    p["sku"] = colour[0][1]
    p.setdefault("_sources", {})["sku"] = f"{source}:{colour[0][0] if colour[0][1] != derived else how}"


def canonical(url: str) -> str:
    """Canonical form of a URL (sorted query, no fragment) used for identity and de-duplication of requests."""
    return canonicalize_url(url)


def product_key(site: str, url: str, variant_id: str | None, color: str | None = None,
                title: str | None = None) -> str:
    """The stable product id (sha1 hex) of one sellable item: of ``site`` and its ``variant_id`` (the item's own id
    at colour granularity, ``extract_products``; not its ``sku``, which may be the model's reference, shared by
    its colours); without one, of the URL path and query and the colour (colour variants on one page are distinct
    items; a product without a colour keeps the id it always had), and ``title`` when given: the caller gives it
    only for an item that would otherwise take the id of another product on the same page (two accessories a page
    lists with no id and no colour, ``crawl.merge_catalog``), so every other id stays as it was.

    The host and port are not part of it, so a replayed or re-served copy of a site keeps its product ids.
    """
    import hashlib
    from urllib.parse import urlsplit

    if variant_id:  # "sku" in the basis: the ids made before variant_id was split from sku stay the same
        basis = f"{site}\x00sku\x00{variant_id}"
    else:
        parts = urlsplit(canonical(url))
        basis = f"{site}\x00path\x00{parts.path}?{parts.query}"
        if color and color.strip():
            basis += "\x00color\x00" + re.sub(r"\s+", " ", color).strip().lower()
        if title and title.strip():
            basis += "\x00title\x00" + re.sub(r"\s+", " ", title).strip().lower()
    return hashlib.sha1(basis.encode()).hexdigest()


def path_key(site: str, url: str) -> str:
    """Stable id of a page by site and URL path (host and port ignored): sha1 hex."""
    import hashlib
    from urllib.parse import urlsplit

    parts = urlsplit(canonical(url))
    return hashlib.sha1(f"{site}\x00{parts.path}?{parts.query}".encode()).hexdigest()
