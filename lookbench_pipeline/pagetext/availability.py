"""Availability: a schema.org ``ItemAvailability`` short name from what a page or its data writes
(``normalise_availability``), from a stock message (``availability_from_text``) and from the page itself
(``page_availability``)."""

from __future__ import annotations

import re
from typing import Any

from parsel import Selector

from .nodes import _marked_nodes, _node_text, _repeated

# schema.org ItemAvailability values (https://schema.org/ItemAvailability), by their short name.
AVAILABILITY = ("InStock", "OutOfStock", "SoldOut", "Discontinued", "PreOrder", "PreSale", "BackOrder",
                "LimitedAvailability", "OnlineOnly", "InStoreOnly", "MadeToOrder", "Reserved")
_AVAIL_LOWER = {a.lower(): a for a in AVAILABILITY}
# Free-text availability a shop writes in its own markup or state ("in_stock", "available", "sold-out"…).
_AVAIL_WORDS = {"instock": "InStock", "available": "InStock", "in stock": "InStock", "true": "InStock",
                "outofstock": "OutOfStock", "out of stock": "OutOfStock", "unavailable": "OutOfStock",
                "notavailable": "OutOfStock", "not available": "OutOfStock", "false": "OutOfStock",
                "soldout": "SoldOut", "sold out": "SoldOut", "discontinued": "Discontinued",
                "preorder": "PreOrder", "backorder": "BackOrder", "limited": "LimitedAvailability"}


_CURIE = re.compile(r"^[a-z][\w.-]*:(?=[a-z]+$)")


def normalise_availability(value: Any) -> str | None:
    """A schema.org ``ItemAvailability`` short name (``"InStock"``, ``"OutOfStock"``…) from what a page writes
    (``"http://schema.org/InStock"``, ``"https://schema.org/OutOfStock"``, ``"schema:SoldOut"``, ``"instock"``,
    ``"in_stock"``, ``"Sold out"``, a boolean); None when it is none of these."""
    if isinstance(value, bool):
        return "InStock" if value else "OutOfStock"
    if isinstance(value, dict):
        value = value.get("@id") or value.get("name") or value.get("@value")
    if isinstance(value, list):
        value = value[0] if value else None
    if not isinstance(value, str):
        return None
    v = value.strip().rsplit("/", 1)[-1].rsplit("#", 1)[-1].strip().lower()
    v = _CURIE.sub("", v)  # a compact IRI's prefix (``schema:InStock``)
    if v in _AVAIL_LOWER:
        return _AVAIL_LOWER[v]
    v2 = re.sub(r"[\s_\-]+", " ", v).strip()
    return _AVAIL_WORDS.get(v2) or _AVAIL_WORDS.get(v2.replace(" ", ""))


# Stock messages in the languages of the shops we crawl; out-of-stock phrases are tried first ("not in stock"
# contains "in stock").
_OUT_PHRASES = re.compile(
    r"currently unavailable|out of stock|sold out|no longer available|not available|unavailable|"
    r"nicht verfügbar|nicht lieferbar|ausverkauft|nicht auf lager|non disponibile|esaurit[oa]|"
    r"épuisé|rupture de stock|indisponible|agotado|no disponible|sin stock|esgotado|indisponível|"
    r"sem estoque|niet op voorraad|uitverkocht|niet leverbaar|brak w magazynie|niedostępny|slutsåld|"
    r"udsolgt|utsolgt|loppu|нет в наличии|распродан|品切れ|在庫切れ|售完|缺貨|已售完|품절|일시품절", re.IGNORECASE)
_IN_PHRASES = re.compile(
    r"\bin stock\b|available now|auf lager|sofort lieferbar|lieferbar|disponibile|en stock|disponible|"
    r"en existencia|op voorraad|in magazzino|dostępny|på lager|varastossa|в наличии|在庫あり|有貨|재고있음",
    re.IGNORECASE)


def availability_from_text(text: str) -> str | None:
    """``"OutOfStock"`` / ``"InStock"`` from a stock message, None when it says neither."""
    if _OUT_PHRASES.search(text):
        return "OutOfStock"
    if _IN_PHRASES.search(text):
        return "InStock"
    return None


def page_availability(sel: Selector) -> str | None:
    """Availability from the page: a ``link``/``meta`` with ``itemprop="availability"`` outside any product
    markup, else the first stock message in an element whose id or class says ``availab`` or ``stock`` and that is
    not part of a template repeated per listed product (``_repeated``: the labels of a carousel's product cards,
    or the "unavailable" variant of a label the page's CSS shows or hides, are not the page's product's)."""
    for v in sel.xpath("//*[@itemprop='availability']/@href | //*[@itemprop='availability']/@content").getall():
        a = normalise_availability(v)
        if a:
            return a
    for node in _marked_nodes(sel, ("availab", "stock"), 40):
        if node.tag == "svg":
            continue
        text = _node_text(node, 200)
        if not text or re.match(r"(?i)(image|bild|immagine|imagen|image non)", text):
            continue
        a = availability_from_text(text)
        if a and not _repeated(sel, node):
            return a
    return None
