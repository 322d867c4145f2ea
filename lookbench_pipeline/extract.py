"""Product and look extraction from HTML pages (schema.org JSON-LD, microdata, RDFa, OpenGraph; CSS fallback rules).

Pure functions of (HTML, URL, rules): the Scrapy spider calls them on live responses, and the same calls re-run them
on archived pages, so extraction is reproducible without the network.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import extruct
from parsel import Selector
from price_parser import Price
from w3lib.html import get_base_url, replace_entities
from w3lib.url import canonicalize_url

from .config import LookRules, ProductRules
from .pagetext import (buy_control, is_placeholder, labelled_identifier, normalise_availability, page_images,
                       price_candidates, shopify_analytics_product, state_documents, state_products, url_identifier,
                       visible_product)
from .renditions import _SUFFIX as _SHOPIFY_SUFFIX
from .renditions import RenditionIndex, image_urls_in, is_full_size  # noqa: F401  (is_full_size: public here too)

log = logging.getLogger(__name__)

SYNTAXES = ["microdata", "rdfa", "opengraph"]  # JSON-LD is parsed here, leniently (see parse_jsonld)
_PRODUCT_TYPES = {"product", "productgroup", "individualproduct", "productmodel"}


_MACHINE_NUMBER = re.compile(r"^\d+(\.\d+)?$")
_XML_DECL = re.compile(r"^\s*<\?xml[^>]*\?>")
_WRAPPERS = re.compile(r"/\*\s*<!\[CDATA\[\s*\*/|/\*\s*\]\]>\s*\*/|(?://\s*)?<!\[CDATA\[|(?://\s*)?\]\]>|<!--|-->")


def parse_jsonld_block(raw: str) -> tuple[Any | None, str | None]:
    """Parse one JSON-LD block the way browsers and search engines tolerate it; returns ``(data, None)`` or
    ``(None, reason)``.

    Strict JSON first (``strict=False``: raw control characters inside strings allowed); then, with CDATA and
    comment wrappers (``/*<![CDATA[*/ … /*]]>*/``, ``<!-- … -->``) removed, ``chompjs`` reads what JavaScript would:
    trailing commas and semicolons, comments, single quotes, unquoted keys, ``undefined``; several concatenated
    objects (``{…}{…}``) come back as a list. Reasons: ``jsonld_empty``, ``jsonld_too_deep`` (nesting past the
    parser's recursion limit), ``jsonld_parse_error``."""
    import chompjs

    text = raw.strip()
    for attempt in (text, _WRAPPERS.sub("", text).strip().rstrip(";").strip()):
        if not attempt:
            return None, "jsonld_empty"
        try:
            return json.loads(attempt, strict=False), None
        except RecursionError:
            return None, "jsonld_too_deep"
        except ValueError:  # json.JSONDecodeError, or a number too long to convert
            continue
    cleaned = attempt
    try:
        docs = list(chompjs.parse_js_objects(cleaned, loader_kwargs={"strict": False}))
    except RecursionError:
        return None, "jsonld_too_deep"
    except Exception:  # chompjs raises ValueError, and its C scanner other errors, on what is not JavaScript data
        docs = []
    docs = [d for d in docs if isinstance(d, (dict, list)) and d]
    if not docs:
        return None, "jsonld_parse_error"
    return (docs[0] if len(docs) == 1 else docs), None


def parse_jsonld(raw: str) -> Any | None:
    """``parse_jsonld_block`` without the reason: the parsed block, or None when it is not data."""
    return parse_jsonld_block(raw)[0]


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


def page_image_urls(sel: Selector, css: str, base: str) -> list[str]:
    """The best URL of every element ``css`` selects (``img`` or ``source``): the largest ``srcset`` /
    ``data-srcset`` candidate, else ``data-src`` (lazy loading), else ``src``; ``data:`` placeholders ignored;
    resolved against ``base`` (so ``<base href>``, relative and protocol-relative URLs work)."""
    if "::" in css or "/@" in css:  # a rule that already names the attribute or text
        return _absolute([u for u in select(sel, css).getall() if u and not u.strip().startswith("data:")], base)
    return _absolute([_best_attr(el) for el in select(sel, css)], base)


def _short_keys(node: Any) -> Any:
    """RDFa as extruct gives it keys properties by full IRI (``https://schema.org/name``); use the local name."""
    if isinstance(node, list):
        return [_short_keys(x) for x in node]
    if isinstance(node, dict):
        return {(k.rsplit("/", 1)[-1].rsplit("#", 1)[-1] if "://" in k else k): _short_keys(v) for k, v in node.items()}
    return node


def _types(node: dict) -> set[str]:
    t = node.get("@type") or node.get("type") or []
    if not isinstance(t, list):
        t = [t]
    out = set()
    for x in t:
        if isinstance(x, str):
            out.add(x.rsplit("/", 1)[-1].rsplit("#", 1)[-1].lower())
    return out


def _walk(node: Any) -> Iterator[dict]:
    """Every dict in a JSON-LD / microdata tree (``@graph``, lists, nested values)."""
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


def _first(v: Any) -> Any:
    while isinstance(v, list):
        if not v:
            return None
        v = v[0]
    return v


def _text(v: Any) -> str | None:
    v = _first(v)
    if isinstance(v, dict):
        v = v.get("name") or v.get("@value") or v.get("value")
        v = _first(v)
    if v is None:
        return None
    s = re.sub(r"\s+", " ", str(v)).strip()
    return s or None


def _image_urls(v: Any) -> list[str]:
    out: list[str] = []
    for x in v if isinstance(v, list) else [v]:
        if isinstance(x, str):
            out.append(x.strip())
        elif isinstance(x, dict):
            u = x.get("contentUrl") or x.get("url") or x.get("@id")
            out.extend(_image_urls(u) if u is not None else [])
    return [u for u in out if u and not u.startswith("data:")]


# ISO 4217 currencies whose minor unit is 0 (no decimals): an amount written "24.990" in one of them has a
# thousands separator, not a decimal point (ISO 4217 list one, the "minor unit" column).
ZERO_DECIMAL_CURRENCIES = {"BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "UYI",
                           "VND", "VUV", "XAF", "XOF", "XPF"}


def parse_price(amount: Any, currency: Any = None) -> tuple[float | None, str | None]:
    """Parse a price and its currency with ``price-parser``: ``("1.299,00 €", None) -> (1299.0, "€")``.

    A number written for machines (``"1234.5"``, a JSON number) uses ``.`` as the decimal point, except that
    ``d.ddd`` in a currency without decimals (``ZERO_DECIMAL_CURRENCIES``: CLP, JPY, KRW…) is a thousands
    separator (``("24.990", "CLP") -> 24990.0``). Returns ``(None, currency)`` for a negative, NaN, infinite or
    unreadable amount."""
    import math

    if amount is None:
        return None, _text(currency)
    if isinstance(amount, bool) or not isinstance(amount, (int, float, str)):
        return None, _text(currency)
    if isinstance(amount, (int, float)):
        value = float(amount)
    elif _MACHINE_NUMBER.match(amount.strip()):
        value = float(amount.strip())  # schema.org prices use "." as the decimal point ("1.234" is 1.234)
        code = (_text(currency) or "").upper()
        if code in ZERO_DECIMAL_CURRENCIES and re.fullmatch(r"\d{1,3}\.\d{3}", amount.strip()):
            value = float(amount.strip().replace(".", ""))  # "24.990" CLP: a thousands separator, 24990
    else:
        p = Price.fromstring(amount, currency_hint=_text(currency))
        value = float(p.amount) if p.amount is not None else None
        currency = currency or p.currency
        if value is not None and re.search(r"(^|\s)-\s*\d", amount):
            value = -value
    if value is None or not math.isfinite(value) or value < 0:
        return None, _text(currency)  # a negative, NaN or infinite price is not a price
    return value, _text(currency)


def _ci(d: dict, key: str) -> Any:
    """``d[key]`` with a case-insensitive key (shops write ``lowprice``, ``PriceCurrency``…)."""
    if key in d:
        return d[key]
    low = key.lower()
    return next((v for k, v in d.items() if isinstance(k, str) and k.lower() == low), None)


def _dig_amount(v: Any) -> tuple[Any, Any]:
    """A price written as an object (``{"sales": {"value": 3499, "currency": "ARS"}}``): the first nested
    ``value`` / ``amount`` / ``price`` and its ``currency``."""
    for node in _walk(v):
        for k in ("value", "amount", "price", "decimalPrice"):
            amount = _ci(node, k)
            if amount is not None and not isinstance(amount, (dict, list)):
                return amount, _ci(node, "currency") or _ci(node, "priceCurrency")
    return None, None


def _offers(v: Any) -> list[dict]:
    """Every Offer node under ``offers`` (an AggregateOffer's nested ``offers`` flattened after it)."""
    out: list[dict] = []
    for offer in v if isinstance(v, list) else [v]:
        if isinstance(offer, dict):
            out.append(offer)
            nested = offer.get("offers")
            if nested is not None and nested is not offer:
                out.extend(_offers(nested))
    return out


def _offer_price(offers: Any) -> tuple[float | None, str | None]:
    for offer in _offers(offers):
        amount = _ci(offer, "price")
        if amount is None:
            amount = _ci(offer, "lowPrice")
        if isinstance(amount, (dict, list)):
            amount, cur = _dig_amount(amount)
            if cur and not _ci(offer, "priceCurrency"):
                offer = {**offer, "priceCurrency": cur}
        if amount is None and isinstance(offer.get("priceSpecification"), (dict, list)):
            spec = _first(offer["priceSpecification"])
            amount = spec.get("price") if isinstance(spec, dict) else None
            if isinstance(spec, dict) and not offer.get("priceCurrency"):
                offer = {**offer, "priceCurrency": spec.get("priceCurrency")}
        if amount is not None:
            price, cur = parse_price(amount, _ci(offer, "priceCurrency"))
            if price is not None:
                return price, cur
    return None, None


def _offer_availability(offers: Any) -> str | None:
    """One availability for the item: ``InStock`` when any offer is in stock (a size still sold), else the first
    offer's value (schema.org short name, ``pagetext.normalise_availability``)."""
    values = [normalise_availability(_ci(o, "availability")) for o in _offers(offers)]
    values = [v for v in values if v]
    if not values:
        return None
    return "InStock" if "InStock" in values else values[0]


_IDENTIFIER_KEYS = ("sku", "productID", "gtin14", "gtin13", "gtin12", "gtin8", "gtin", "mpn")
_MAX_FIELD_WORDS = {"brand": 6, "sku": 1, "color": 6, "material": 12, "title": 60}


def clean_value(field: str, value: str | None, page_title: str | None = None) -> str | None:
    """A field value as data, or None when it is template junk or prose: an unrendered placeholder
    (``$metabrand``, ``{{brand}}``), a sentence where a name belongs (more words than the field takes, or a label
    with a colon such as "Ver mais artigos da Marca: X"), or, for a brand, the page's own title."""
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
    return v


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


def _property_values(v: Any) -> list[dict[str, str]] | None:
    """schema.org ``additionalProperty`` (PropertyValue ``name`` or ``propertyID``, ``value``): the shop's own
    attribute facets as ``[{name, value}]``, None without any (mapped onto the taxonomy by label_import)."""
    out = []
    for pv in v if isinstance(v, list) else [v]:
        if isinstance(pv, dict):
            name = _text(pv.get("name") or pv.get("propertyID"))
            for val in pv.get("value") if isinstance(pv.get("value"), list) else [pv.get("value")]:
                if name and _text(val):
                    out.append({"name": name, "value": _text(val)})
    return out or None


def _from_schema_node(node: dict, syntax: str) -> dict[str, Any]:
    props = node.get("properties", node) if syntax == "rdfa-raw" else node
    offers = _offers(props.get("offers"))
    price, currency = _offer_price(offers)
    brand = props.get("brand") or props.get("manufacturer")
    ids = _identifiers(props, offers)
    sku, sku_key = ids[0][1] if ids else None, ids[0][0] if ids else None
    title = _text(props.get("name"))
    p = {
        "title": clean_value("title", title),
        "description": _text(props.get("description")),
        "brand": clean_value("brand", _text(brand)),
        "sku": sku,
        "price": price,
        "currency": currency,
        "color": clean_value("color", _text(props.get("color"))),
        "material": clean_value("material", _text(props.get("material"))),
        "category_text": _text(props.get("category")),
        "facets": _property_values(props.get("additionalProperty")),
        "image_urls": _image_urls(props.get("image")),
        "availability": _offer_availability(offers),
        "group_id": _group_id(props),
        "offer_url": _text(_first([o.get("url") for o in offers if isinstance(o.get("url"), str)] or [None]))
        or _text(props.get("url") if isinstance(props.get("url"), str) else None),
        "extracted_from": syntax,
        "_ids": ids,
        "_size": _text(props.get("size")),
    }
    p["_sources"] = {k: syntax for k, v in p.items() if v not in (None, "", []) and not k.startswith("_")}
    if sku_key and sku_key != "sku":
        p["_sources"]["sku"] = f"{syntax}:{sku_key}"
    return p


def _offer_colour(offer: dict) -> str | None:
    item = _first(offer.get("itemOffered"))
    return _text(offer.get("color") or (item.get("color") if isinstance(item, dict) else None))


def _split_offer_colours(p: dict, node: dict, syntax: str) -> list[dict]:
    """A Product whose offers carry different colours (``offers[].color`` or ``offers[].itemOffered.color``) is
    one item per colour, each with that colour's offers, sku, price, availability and images."""
    offers = _offers(node.get("offers"))
    by_colour: dict[str, list[dict]] = {}
    for o in offers:
        c = _offer_colour(o)
        if c:
            by_colour.setdefault(c.lower(), []).append(o)
    if len(by_colour) < 2:
        return [p]
    out = []
    for group in by_colour.values():
        item = _first(group[0].get("itemOffered"))
        child = {**node, "offers": group, "color": _offer_colour(group[0])}
        if isinstance(item, dict):
            for k in ("sku", "image", "name", "gtin13", "mpn"):
                if item.get(k):
                    child[k] = item[k]
        q = _from_schema_node(child, syntax)
        q["group_id"] = q["group_id"] or p["sku"] or p["title"]
        out.append(q)
    return out


def _schema_products(data: Any, syntax: str) -> list[dict[str, Any]]:
    """Products of one syntax's tree, one per sellable item: a ``ProductGroup``'s ``hasVariant`` children inherit
    the group's name, brand, description and images and carry its ``productGroupID`` as ``group_id``; every other
    Product node is an item of its own (per-offer colours split)."""
    out: list[dict[str, Any]] = []
    seen: set[int] = set()
    for node in _walk(data):
        if id(node) in seen or not (_types(node) & _PRODUCT_TYPES):
            continue
        seen.add(id(node))
        variants = [v for v in (node.get("hasVariant") if isinstance(node.get("hasVariant"), list)
                                else [node.get("hasVariant")]) if isinstance(v, dict)]
        if variants:
            group = _from_schema_node(node, syntax)
            gid = _text(node.get("productGroupID")) or group["sku"] or _text(node.get("@id")) or group["title"]
            for v in variants:
                seen.update(id(x) for x in _walk(v))
                child = _from_schema_node(v, syntax)
                for k in ("title", "brand", "description", "material", "category_text", "price", "currency",
                          "availability", "color"):
                    if child.get(k) in (None, "") and group.get(k) not in (None, ""):
                        child[k] = group[k]
                        child["_sources"][k] = f"{syntax}:group"
                if not child["image_urls"]:
                    child["image_urls"] = group["image_urls"]
                child["group_id"] = child["group_id"] or gid
                if child["title"] or child["sku"]:
                    out.append(child)
            continue
        p = _from_schema_node(node, syntax)
        if p["title"] or p["sku"]:
            out.extend(_split_offer_colours(p, node, syntax))
    return out


def _from_opengraph(items: list[dict]) -> dict[str, Any] | None:
    og: dict[str, list[str]] = {}
    for item in items:
        for k, v in item.items():
            if k.startswith("@"):
                continue
            og.setdefault(k, []).extend(v if isinstance(v, list) else [v])
    types = [str(t) for item in items for t in (item.get("@type") if isinstance(item.get("@type"), list)
                                                 else [item.get("@type")]) if t]
    otype = " ".join([*(og.get("og:type") or []), *types]).lower()
    has_price = any(k in og for k in ("product:price:amount", "og:price:amount"))
    if "product" not in otype and not has_price:
        return None
    amount = (og.get("product:price:amount") or og.get("og:price:amount") or [None])[0]
    cur = (og.get("product:price:currency") or og.get("og:price:currency") or [None])[0]
    price, currency = parse_price(amount, cur)
    p = {
        "title": _text(og.get("og:title")),
        "description": _text(og.get("og:description")),
        "brand": clean_value("brand", _text(og.get("product:brand") or og.get("og:brand"))),
        "sku": clean_value("sku", _text(og.get("product:retailer_item_id") or og.get("product:sku"))),
        "price": price,
        "currency": currency,
        "color": clean_value("color", _text(og.get("product:color"))),
        "material": _text(og.get("product:material")),
        "category_text": _text(og.get("product:category")),
        "image_urls": _image_urls(og.get("og:image", [])),
        "availability": normalise_availability(_text(og.get("product:availability") or og.get("og:availability"))),
        "group_id": _text(og.get("product:item_group_id")),
        "offer_url": None,
        "extracted_from": "opengraph",
    }
    p["_sources"] = {k: "opengraph" for k, v in p.items() if v not in (None, "", []) and not k.startswith("_")}
    return p


def _absolute(urls: Iterable[str], base: str) -> list[str]:
    """Absolute http(s) URLs, each once, in order; HTML entities left in a URL by JSON-LD (``&amp;``) decoded."""
    seen, out = set(), []
    for u in urls:
        if not isinstance(u, str) or not u.strip():
            continue  # an empty src would resolve to the page itself
        a = urljoin(base, replace_entities(u.strip()) if "&" in u else u.strip())
        if a.startswith(("http://", "https://")) and a not in seen:
            seen.add(a)
            out.append(a)
    return out


def select(sel: Selector, rule: str):
    """Apply a rule: XPath when it starts with ``/`` or ``(``, else CSS (``::text`` / ``::attr(x)`` allowed)."""
    return sel.xpath(rule) if rule.lstrip().startswith(("/", "(")) else sel.css(rule)


def decode_html(body: bytes, content_type: str | None = None) -> tuple[str, str]:
    """Decode a page's bytes; returns ``(text, encoding)``.

    Order: a byte-order mark; then the HTTP ``charset`` and the page's own ``<meta charset>``: when they
    disagree, the one under which the bytes decode strictly wins, UTF-8 first (a header that says ISO-8859-1 on a
    UTF-8 page is a common server default; the reverse, a UTF-8 header on Latin-1 bytes, fails strict UTF-8);
    when neither is declared, w3lib's detection.
    """
    from w3lib.encoding import html_body_declared_encoding, http_content_type_encoding, html_to_unicode, read_bom

    bom, _ = read_bom(body)
    header = http_content_type_encoding(content_type) if content_type else None
    meta = html_body_declared_encoding(body)
    if not bom and header and meta and header != meta:
        # ordered, deterministic: UTF-8 first (if declared), then the header's, then the meta's
        for enc in sorted([header, meta], key=lambda e: e.replace("_", "-") not in ("utf-8", "utf8")):
            try:
                return body.decode(enc), enc
            except (UnicodeDecodeError, LookupError):
                continue
    enc, text = html_to_unicode(content_type, body)
    return text, enc


def _from_rules(sel: Selector, rules: ProductRules, base: str = "") -> dict[str, Any] | None:
    if not rules.title:
        return None
    def get(rule: str | None) -> str | None:
        return _text(select(sel, rule).get()) if rule else None
    title = get(rules.title)
    if not title:
        return None
    price, currency = parse_price(get(rules.price))
    p = {
        "title": title,
        "description": get(rules.description),
        "brand": clean_value("brand", get(rules.brand)),
        "sku": clean_value("sku", get(rules.sku)),
        "price": price,
        "currency": currency,
        "color": None,
        "material": None,
        "category_text": None,
        "image_urls": page_image_urls(sel, rules.images, base) if rules.images else [],
        "availability": None,
        "group_id": None,
        "offer_url": None,
        "extracted_from": "rules",
    }
    p["_sources"] = {k: "rules" for k, v in p.items() if v not in (None, "", []) and not k.startswith("_")}
    return p


def _from_state(sel: Selector, url: str, title_hint: str | None, low_html: str = "") -> dict[str, Any] | None:
    """The page's own product in its inline state JSON: a platform's own object about the page's product first
    (Shopify's analytics ``meta``, ``pagetext.shopify_analytics_product``: source ``platform-json``); else the
    best product-like object of the state documents, trusted only when its identifier is in the URL or its name is
    the page's title (state documents also carry recommendations and recently viewed items). ``low_html``: the
    page lower-cased (the Shopify object is looked for only where its name occurs)."""
    shop = shopify_analytics_product(sel, url) if "shopifyanalytics" in low_html else None
    if shop:
        price, currency = parse_price(shop["price"], shop["currency"])
        p = {"title": clean_value("title", shop["title"]), "description": None,
             "brand": clean_value("brand", shop["brand"], title_hint), "sku": clean_value("sku", shop["sku"]),
             "price": price, "currency": currency, "color": None, "material": None, "category_text": None,
             "image_urls": [], "availability": None, "group_id": None, "offer_url": None,
             "extracted_from": "platform-json"}
        p["_sources"] = {k: "platform-json" for k, v in p.items() if v not in (None, "", []) and not k.startswith("_")}
        return p
    for cand in state_products(state_documents(sel), url, title_hint)[:1]:
        if not ((cand["sku"] and cand["sku"] in url) or (title_hint and cand["title"].lower() == title_hint.lower())):
            return None
        price, currency = parse_price(cand["price"], cand["currency"])
        p = {"title": clean_value("title", cand["title"]), "description": None,
             "brand": clean_value("brand", cand["brand"], title_hint), "sku": clean_value("sku", cand["sku"]),
             "price": price, "currency": currency, "color": None, "material": None, "category_text": None,
             "image_urls": cand["image_urls"], "availability": cand["availability"], "group_id": None,
             "offer_url": None, "extracted_from": "state-json"}
        p["_sources"] = {k: "state-json" for k, v in p.items() if v not in (None, "", []) and not k.startswith("_")}
        return p
    return None


def _from_visible(sel: Selector, url: str, main: dict[str, Any] | None = None) -> dict[str, Any]:
    """The visible page as a product; with ``main`` (the structured main item) only the fields it may take from
    the visible page and lacks are looked for."""
    need = None
    if main is not None:
        need = {f for f, k in (("sku", "sku"), ("availability", "availability"), ("price_text", "price"))
                if main.get(k) in (None, "")}
        if main.get("currency") in (None, "") and main.get("price") is None:
            need.add("price_text")
    v = visible_product(sel, url, need)
    price, currency = parse_price(v["price_text"]) if v["price_text"] else (None, None)
    p = {"title": clean_value("title", v["title"]), "description": None, "brand": None,
         "sku": clean_value("sku", v["sku"]), "price": price, "currency": currency, "color": None, "material": None,
         "category_text": None, "image_urls": [v["image_url"]] if v["image_url"] else [],
         "availability": v["availability"], "group_id": None, "offer_url": None, "extracted_from": "visible"}
    p["_sources"] = {k: "visible" for k, val in p.items() if val not in (None, "", []) and not k.startswith("_")}
    if p["sku"]:
        p["_sources"]["sku"] = f"visible:{v['sku_source']}"
    return p


def _merge(primary: dict[str, Any], extra: dict[str, Any], fields: Iterable[str] | None = None) -> dict[str, Any]:
    """``primary`` with its empty fields filled from ``extra`` (images appended), recording each filled field's
    source. ``fields`` limits what may be filled."""
    out = dict(primary)
    out["_sources"] = dict(primary.get("_sources") or {})
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


def _norm(v: str | None) -> str:
    return re.sub(r"\s+", " ", (v or "")).strip().lower()


def _collapse(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per sellable item, at colour granularity.

    1. The same item seen through several syntaxes is merged: the same identifier, else the same title and colour
       (a node with no colour joins the only same-titled item there is).
    2. Size variants of one colour are one item: the same group (``group_id``, else the title) and the same colour;
       when no colour is given, the same images (sizes share photos, colours do not).
    Different colours are never merged, whatever their title and images."""
    items: list[dict[str, Any]] = []
    for p in found:
        match = None
        for q in items:
            if p["sku"] and q["sku"]:
                if p["sku"].lower() == q["sku"].lower():
                    match = q
                    break
                continue
            if _norm(p["title"]) and _norm(p["title"]) == _norm(q["title"]):
                if _norm(p["color"]) == _norm(q["color"]):
                    match = q
                    break
        if match is None and not p["color"]:
            same = [q for q in items if _norm(q["title"]) == _norm(p["title"]) and _norm(p["title"])
                    and (not p["sku"] or not q["sku"])]
            match = same[0] if len(same) == 1 else None
        if match is not None:
            items[items.index(match)] = _merge(match, p)
        else:
            items.append(p)
    out: list[dict[str, Any]] = []
    for p in items:
        group = _norm(p["group_id"]) or _norm(p["title"])
        match = None
        for q in out:
            if (_norm(q["group_id"]) or _norm(q["title"])) != group or not group:
                continue
            if p["color"] or q["color"]:
                if _norm(p["color"]) == _norm(q["color"]):
                    match = q
                    break
            elif p["image_urls"] == q["image_urls"]:
                match = q
                break
        nodes = [(p.get("sku"), p.get("_ids") or [], p.get("_size"))]
        if match is not None:
            merged = _merge(match, p)
            if "InStock" in (match.get("availability"), p.get("availability")):
                merged["availability"] = "InStock"
            merged["_nodes"] = match["_nodes"] + nodes
            out[out.index(match)] = merged
        else:
            out.append({**p, "_nodes": nodes})
    for p in out:
        _colour_identity(p)
    return out


_SEP = "-_/. "


def _colour_identity(p: dict[str, Any]) -> None:
    """Give an item made of size variants (``p["_nodes"]``: each node's sku, identifiers and stated size) the
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
    skus = list(dict.fromkeys(n[0] for n in nodes if n[0]))
    source = p.get("extracted_from")
    colour: list[tuple[str, str]] = []
    if len(skus) >= 2:
        values = [{v for _, v in ids} for _, ids, _ in nodes]
        colour = [(k, v) for k, v in nodes[0][1] if v not in skus and all(v in vs for vs in values[1:])]
    cut = []
    for sku, _, size in nodes:
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


def _page_renditions(sel: Selector, html: str, base: str) -> RenditionIndex:
    """Every image rendition the page names: ``srcset`` / ``data-srcset`` candidates with their width
    descriptors, ``src`` / ``data-src``-style attributes, and image URLs written in scripts and JSON."""
    index = RenditionIndex()
    for el in sel.xpath("//img | //source | //a[@data-zoom-image] | //*[@data-srcset]"):
        for attr in ("srcset", "data-srcset"):
            val = el.attrib.get(attr)
            if val:
                for u, size in parse_srcset(val):
                    if not u.startswith("data:"):
                        index.add(urljoin(base, u), size if size and size < 1000 or size % 1000 else None)
        for attr in ("src", "data-src", "data-lazy-src", "data-original", "data-zoom-image", "data-large"):
            u = (el.attrib.get(attr) or "").strip()
            if u and not u.startswith("data:"):
                index.add(urljoin(base, u))
    for u in image_urls_in(html):
        index.add(urljoin(base, u))
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


def extract_products(html: str | bytes, url: str, rules: ProductRules | None = None,
                     problems: list[str] | None = None) -> list[dict[str, Any]]:
    """Extract the sellable items on a product page, one per colour variant.

    Args:
        html: the page (text, or bytes decoded as UTF-8 with replacement).
        url: the page URL: relative image URLs are resolved against it (``<base href>`` honoured), and an
            identifier in it is the last sku fallback.
        rules: the site's CSS / XPath rules (``SiteConfig.product_rules``), tried before the visible page.
        problems: when given, a reason is appended for each JSON-LD block that could not be read
            (``jsonld_parse_error``, ``jsonld_too_deep``, ``jsonld_empty``), so a page with no product says why.

    Returns:
        One dict per item, the page's main item first (``main_product``). Keys: title, description, brand, sku
        (the shop's reference as the page states it: for the main item the code the page prints after a "Ref." /
        "SKU" / "Product code" label, ``_page_reference``, else the structured identifier; it may be the model's,
        shared by its colours), variant_id (the item's own identifier at colour granularity, which
        ``product_key`` hashes: see "How item identity is decided" below), price (float), currency, color,
        material, category_text, image_urls (absolute, each picture once as its largest rendition), availability
        (schema.org short name: ``InStock``, ``OutOfStock``…, or None), group_id (the model the colour variant
        belongs to), facets (schema.org ``additionalProperty`` name/value pairs, or None), extracted_from (the
        source of the item), field_sources (``[{name: field, value: source}]``: where each field came from).

    Sources, most trusted first: JSON-LD (lenient, ``parse_jsonld_block``), microdata, RDFa, platform JSON
    (Shopify's analytics object) and inline state JSON, OpenGraph, the site's rules, the visible page
    (``pagetext``). Items come from the structured sources; the main item's empty fields are filled from the lower
    ones, and its price and availability are reconciled with the page's buy box (``_buy_box``). How item identity
    is decided: ``_collapse`` and ``_colour_identity``, then ``choose_identifier`` (one the URL carries first) and
    an identifier shared by several colours made their ``group_id``; the result is ``variant_id``. Only then does
    the main item's ``sku`` take the page's printed reference (``_page_reference``).
    """
    if isinstance(html, bytes):
        html = html.decode("utf-8", errors="replace")
    base = get_base_url(html, url)
    if not base.startswith(("http://", "https://")):  # a javascript: or data: <base href> is ignored, as browsers do
        base = url
    # Only run the parsers whose markup is on the page (RDFa needs typeof, microdata itemscope, OpenGraph og:
    # properties): the same result, without the cost of the RDFa parser on every page.
    low = html.lower()
    syntaxes = [syn for syn, marker in (("microdata", "itemscope"), ("rdfa", "typeof"), ("opengraph", "og:"))
                if marker in low]
    try:
        # lxml refuses a str that carries an XML encoding declaration (XHTML pages): drop the declaration
        data = extruct.extract(_XML_DECL.sub("", html, count=1), base_url=base, syntaxes=syntaxes, uniform=True,
                               errors="ignore") if syntaxes else {}
    except Exception as exc:  # a page extruct cannot parse at all: fall back to rules
        log.warning("extruct failed on %s: %s", url, exc)
        data = {}
    sel = Selector(text=html)
    blocks = []
    for raw in sel.xpath("//script[contains(translate(@type, 'LDJSON', 'ldjson'), 'ld+json')]/text()").getall():
        doc, why = parse_jsonld_block(raw)
        if doc is not None:
            blocks.append(doc)
        elif problems is not None and why:
            problems.append(why)
    data["json-ld"] = blocks
    data["rdfa"] = _short_keys(data.get("rdfa", []))
    found: list[dict[str, Any]] = []
    for syntax in ("json-ld", "microdata", "rdfa"):
        found.extend(_schema_products(data.get(syntax, []), syntax))
    products = _collapse(found)
    page_title = page_title_of(sel)
    # The page's state JSON and visible text are read only when the structured items leave a core field empty
    # (they are the costly sources: a full walk of the scripts and of the text).
    main0 = _order(products, url)[0] if products else None
    complete = main0 is not None and all(main0.get(k) not in (None, "", []) for k in _CORE)
    state = None if complete else _from_state(sel, url, page_title, low)
    lower = [p for p in (state, _from_opengraph(data.get("opengraph", [])),
                         _from_rules(sel, rules, base) if rules else None) if p]
    visible = {} if complete else _from_visible(sel, url, main0)
    if not products:
        if lower:
            products = [lower[0]]
            lower = lower[1:]
        elif visible and visible["title"] and (visible["price"] is not None or visible["sku"]) and visible["image_urls"]:
            products = [visible]  # a page with no markup at all: its title, price and picture as shown
    products = _order(products, url)
    if products:
        main = products[0]
        for extra in lower:
            main = _merge(main, extra, None if len(products) == 1 else ("sku", "availability", "price", "currency",
                                                                       "brand"))
        if visible and main is not visible:
            main = _merge(main, visible, ("sku", "availability", "price", "currency")
                          if len(products) == 1 else ("sku", "availability"))
        products[0] = _buy_box(sel, low, main)
    for p in products:
        if p.get("_ids"):
            sku, key = choose_identifier(p["_ids"], url)
            if sku != p["sku"]:
                p["sku"] = sku
                p.setdefault("_sources", {})["sku"] = f"{p['extracted_from']}:{key}" if key != "url" else "url"
    skus = [p["sku"] for p in products if p.get("sku")]
    shared: tuple[str | None, str | None] = (None, None)  # the main item's declared id, when its colours share it
    for p in products:  # an id shared by colour variants (the page's, the group's) is the group's, not an item's
        if p.get("sku") and skus.count(p["sku"]) > 1:
            if p is products[0]:
                shared = (p["sku"], (p.get("_sources") or {}).get("sku"))
            p["group_id"] = p.get("group_id") or p["sku"]
            own = [(k, v) for k, v in p.get("_ids") or [] if v != p["sku"] and sum(
                v in [w for _, w in q.get("_ids") or []] for q in products) == 1]
            p["sku"] = own[0][1] if own else None
            p.setdefault("_sources", {})["sku"] = f"{p['extracted_from']}:{own[0][0]}" if own else None
    for p in products:  # identity is decided: the item's own id at colour granularity (product_key's basis)
        p["variant_id"] = p.get("sku")
        if p["variant_id"]:
            p.setdefault("_sources", {})["variant_id"] = p["_sources"].get("sku")
    if products:
        _page_reference(sel, products[0], shared)
    index = _page_renditions(sel, html, base)
    out = []
    for p in products:
        p.pop("_ids", None)
        p.pop("_size", None)
        p["image_urls"] = _absolute(p["image_urls"], base)
        if not p["image_urls"] and rules and rules.images:
            p["image_urls"] = page_image_urls(sel, rules.images, base)
        if not p["image_urls"] and p is products[0]:  # the page's own pictures of its main item
            p["image_urls"] = _absolute([replace_entities(u) for u in page_images(sel, p.get("title"))], base)
            if p["image_urls"]:
                p.setdefault("_sources", {})["image_urls"] = "visible"
        p["image_urls"] = _full_size(p["image_urls"], index)
        if p.get("brand") and page_title and p["brand"].lower() == page_title.lower():
            p["brand"] = None
        sources = p.pop("_sources", {})
        p.pop("offer_url", None)
        p["field_sources"] = [{"name": k, "value": sources[k]} for k in sorted(sources)
                              if k != "extracted_from" and sources[k] and p.get(k) not in (None, "", [])]
        out.append(p)
    return out


def _page_reference(sel: Selector, main: dict[str, Any], shared: tuple[str | None, str | None]) -> None:
    """Make the main item's ``sku`` the product reference the page states; in place.

    ``sku`` is the shop's reference of the product as the page states it: the code the page prints after a label
    ("Ref." / "SKU" / "Product code" / "Art.-Nr." …: ``pagetext.labelled_identifier``; a "Model #" is a
    manufacturer's number and is skipped), else the identifier chosen for the main item (``choose_identifier``:
    one the URL carries first) when the page's colours share it and it became their ``group_id`` (``shared``:
    ``(value, source)``, or Nones), else the item's own identifier. The page's reference is often not the
    item's own id: it may be the model's, shared by all its colours ("Black - 1002/710", a URL's model number), or
    the code of the size the page shows first, which is why identity does not rest on it: ``variant_id``, decided
    before (``_collapse``, ``_colour_identity``, ``choose_identifier``, a shared id made the group's), stays the
    item's id at colour granularity and is what ``product_key`` hashes. Only the main item takes the page's
    reference: the page states it for the product it sells, not for the other colours or products it lists."""
    ref, source = labelled_identifier(sel, model_numbers=False), "visible:label"
    if not ref and shared[0]:
        ref, source = shared
    if ref and ref != main.get("sku"):
        main["sku"] = ref
        main.setdefault("_sources", {})["sku"] = source


_CORE = ("title", "sku", "price", "currency", "availability", "image_urls")
_NOT_BUYABLE = ("OutOfStock", "SoldOut", "Discontinued")
_OLD_NEAR_PRICE = re.compile(r"(?:old|was|regular|original|strike|compare|rrp|list|before|crossed|prev)[-_]?price|"
                             r"price[-_]?(?:old|was|regular|original|strike|before|list|prev)")


def _old_price_markup(low_html: str) -> bool:
    """Whether a lower-cased page may show an old price: a ``<del>`` / ``<s>`` / ``<strike>`` element, or a class
    or id such as ``old-price`` / ``price-was`` / ``regularPrice`` (a cheap test before ``price_candidates``)."""
    if "<del" in low_html or "<s>" in low_html or "<s " in low_html or "<strike" in low_html:
        return True
    i = low_html.find("price")
    while i != -1:
        if _OLD_NEAR_PRICE.search(low_html, max(0, i - 9), i + 14):
            return True
        i = low_html.find("price", i + 5)
    return False


def _buy_box(sel: Selector, low_html: str, main: dict[str, Any]) -> dict[str, Any]:
    """Reconcile the main item's price and availability with the page's buy box (``pagetext``); returns the item.

    Trust rules, each recorded in ``field_sources``:

    1. *Sale price.* Structured data is trusted for the price, except when the page shows that very amount as an
       old price (struck through, or marked "was" / "regular" / "original"…) and never as a current one, while
       it shows a lower current price: then the structured price is the list price and the current one is the
       price (source ``visible:sale-price``).
    2. *Availability.* Structured availability is trusted, except that an enabled "add to cart" / "buy now"
       control in the buy box (``pagetext.buy_control``) makes an item that the structured data or the page's
       stock message calls ``OutOfStock`` / ``SoldOut``, or that has no availability, ``InStock`` (source
       ``visible:buy-control``): structured availability is often the default size's, and a shop that cannot
       sell the item does not offer to add it to the cart. A disabled or absent control changes nothing.
    3. *No price for what cannot be bought.* A price that only the visible page gave (no structured source) is
       dropped when the item is ``OutOfStock`` / ``SoldOut`` / ``Discontinued``: its buy box has no price, and
       the first price shown is another offer's (a marketplace's other sellers, a recommendation).
    """
    src = main.setdefault("_sources", {})
    if main.get("price") is not None and not str(src.get("price", "")).startswith("visible") \
            and _old_price_markup(low_html):
        shown = [(parse_price(text)[0], old) for text, old in price_candidates(sel)]
        olds = [a for a, old in shown if old and a is not None]
        currents = [a for a, old in shown if not old and a is not None]
        same = lambda a: abs(a - main["price"]) < 0.005  # noqa: E731
        if any(same(a) for a in olds) and not any(same(a) for a in currents) and currents \
                and currents[0] < main["price"]:
            main["price"] = currents[0]
            src["price"] = "visible:sale-price"
    if main.get("availability") in (None, "OutOfStock", "SoldOut") and buy_control(sel) is not None:
        main["availability"] = "InStock"
        src["availability"] = "visible:buy-control"
    if main.get("availability") in _NOT_BUYABLE and main.get("price") is not None \
            and str(src.get("price", "")).startswith("visible"):
        main["price"] = None
        if str(src.get("currency", "")).startswith("visible"):
            main["currency"] = None
    return main


def page_title_of(sel: Selector) -> str | None:
    """The page's ``<title>`` text, whitespace collapsed (a brand equal to it is template junk)."""
    t = sel.xpath("//title/text()").get()
    return re.sub(r"\s+", " ", t).strip() if t and t.strip() else None


def _order(products: list[dict[str, Any]], url: str) -> list[dict[str, Any]]:
    """The page's own item first: the one whose offer URL is the page URL (a colour variant selected by the URL),
    else document order."""
    if len(products) < 2:
        return products
    here = canonical(url)
    first = [p for p in products if p.get("offer_url") and canonical(urljoin(url, p["offer_url"])) == here]
    return first[:1] + [p for p in products if p not in first[:1]]


def main_product(products: list[dict[str, Any]], url: str | None = None) -> dict[str, Any] | None:
    """The item a product page is about: the first of ``extract_products`` (which puts it first); None when the
    page has no product."""
    return products[0] if products else None


def extract_look(html: str | bytes, url: str, rules: LookRules) -> dict[str, Any] | None:
    """Extract a "shop the look" block: ``{image_url, product_urls}`` or ``None`` when the page has none.

    A rule that selects elements rather than an attribute (no ``::attr(...)``) takes the element's best image URL
    (``srcset``, then lazy-loading ``data-src``, then ``src``; ``data:`` placeholders skipped) or its ``href``,
    never its HTML; a selected ``data:`` URL falls back to the element's lazy-loading attributes."""
    if isinstance(html, bytes):
        html = html.decode("utf-8", errors="replace")
    base = get_base_url(html, url)
    sel = Selector(text=html)
    imgs = _look_image(sel, rules.image, base)
    products = _rule_urls(sel, rules.products, base, ("href", "data-href", "data-url"))
    if not imgs or not products:
        return None
    return {"image_url": imgs[0], "product_urls": products}


def _look_image(sel: Selector, rule: str, base: str) -> list[str]:
    m = re.search(r"::attr\(([^)]+)\)\s*$", rule)
    if m:  # an attribute rule: if it names a data: placeholder, read the element's lazy-loading attributes
        element_rule = rule[: m.start()]
        urls = []
        for el, value in zip(select(sel, element_rule), select(sel, rule).getall()):
            urls.append(value if value and not value.strip().startswith("data:") else _best_attr(el))
        return _absolute([u for u in urls if u], base)
    if "::" in rule or "/@" in rule or rule.rstrip().endswith("text()"):
        return _absolute([u for u in select(sel, rule).getall() if u and not u.strip().startswith("data:")], base)
    return _absolute([_best_attr(el) for el in select(sel, rule)], base)


def _best_attr(el: Selector) -> str:
    """The best image URL of one element: the largest ``srcset`` / ``data-srcset`` candidate, else ``data-src``
    and the other lazy-loading attributes, else a non-``data:`` ``src``; empty when none."""
    cands = []
    for attr in ("srcset", "data-srcset"):
        v = el.attrib.get(attr)
        if v:
            cands += [c for c in parse_srcset(v) if not c[0].startswith("data:")]
    if cands:
        return max(cands, key=lambda c: c[1])[0]
    for attr in ("data-src", "data-lazy-src", "data-original", "src"):
        v = (el.attrib.get(attr) or "").strip()
        if v and not v.startswith("data:"):
            return v
    return ""


def _rule_urls(sel: Selector, rule: str, base: str, attrs: tuple[str, ...]) -> list[str]:
    if "::" in rule or "/@" in rule or rule.rstrip().endswith("text()"):
        return _absolute(select(sel, rule).getall(), base)
    out = []
    for el in select(sel, rule):
        v = next((el.attrib[a] for a in attrs if el.attrib.get(a)), "")
        if v and not v.startswith(("javascript:", "data:", "mailto:")):
            out.append(v)
    return _absolute(out, base)


def canonical(url: str) -> str:
    """Canonical form of a URL (sorted query, no fragment) used for identity and de-duplication of requests."""
    return canonicalize_url(url)


def product_key(site: str, url: str, variant_id: str | None, color: str | None = None) -> str:
    """The stable product id (sha1 hex) of one sellable item: of ``site`` and its ``variant_id`` (the item's own id
    at colour granularity, ``extract_products``; not its ``sku``, which may be the model's reference, shared by
    its colours); without one, of the URL path and query and the colour (colour variants on one page are distinct
    items; a product without a colour keeps the id it always had).

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
    return hashlib.sha1(basis.encode()).hexdigest()


def path_key(site: str, url: str) -> str:
    """Stable id of a page by site and URL path (host and port ignored): sha1 hex."""
    import hashlib
    from urllib.parse import urlsplit

    parts = urlsplit(canonical(url))
    return hashlib.sha1(f"{site}\x00{parts.path}?{parts.query}".encode()).hexdigest()


_COLOUR_OPTION = {"color", "colour", "farbe", "couleur", "colore", "kleur", "färg", "farve", "farge", "cor", "kolor",
                  "väri", "цвет"}


def shopify_products(doc: Any, url: str) -> list[dict[str, Any]]:
    """Products from a Shopify JSON document: the public ``/products.json`` (``{"products": [...]}``) or
    ``/products/<handle>.json`` (``{"product": {...}}``), which share the Admin API's product shape.

    One item per colour: when the product has a colour option (``Color`` / ``Colour`` / ``Farbe``…), its variants
    are grouped by that option's value, each group an item with its first variant's sku and price, ``InStock`` when
    any of its variants is ``available``, and its own images (those whose ``variant_ids`` name one of its variants,
    or a variant's ``image_id`` / ``featured_image``; all of the product's images when none is tied to a variant);
    the Shopify product id is every colour's ``group_id``. Size variants of one colour stay one item. Without a
    colour option the product is one item. Fields: title, ``body_html`` as text, ``vendor`` as brand,
    ``product_type`` as category text. Shopify's product JSON carries no currency (it is the shop's), so
    ``currency`` is None. The product URL is ``<shop origin>/products/<handle>``. ``variant_id`` is the sku (the
    JSON states no other reference).
    """
    from urllib.parse import urlsplit

    from w3lib.html import remove_tags

    if isinstance(doc, list):  # a bare list of products (the Admin API fixtures' form)
        nodes = doc
    elif isinstance(doc, dict):
        nodes = doc.get("products") if "products" in doc else [doc.get("product")] if "product" in doc else []
    else:
        nodes = []
    parts = urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc}"
    out = []
    for p in nodes or []:
        if not isinstance(p, dict) or not p.get("title"):
            continue
        variants = [v for v in p.get("variants") or [] if isinstance(v, dict)]
        images = [i for i in p.get("images") or [] if isinstance(i, dict) and isinstance(i.get("src"), str) and i["src"]]
        colour_pos = None
        for n, opt in enumerate(p.get("options") or [], start=1):
            if isinstance(opt, dict) and str(opt.get("name", "")).strip().lower() in _COLOUR_OPTION:
                colour_pos = opt.get("position") if isinstance(opt.get("position"), int) else n
        groups: dict[str, list[dict]] = {}
        if colour_pos is not None:
            for v in variants:
                c = _text(v.get(f"option{colour_pos}"))
                groups.setdefault(c or "", []).append(v)
        if len(groups) < 2:
            groups = {"": variants}
        base_url = f"{origin}/products/{p['handle']}" if isinstance(p.get("handle"), str) and p["handle"] else url
        for colour, vs in groups.items():
            v0 = vs[0] if vs else {}
            ids = {v.get("id") for v in vs}
            own = [i["src"] for i in images if ids & set(i.get("variant_ids") or [])]
            own += [i["src"] for v in vs for i in images if v.get("image_id") is not None and i.get("id") == v.get("image_id")]
            own += [v["featured_image"]["src"] for v in vs if isinstance(v.get("featured_image"), dict)
                    and isinstance(v["featured_image"].get("src"), str)]
            price, _ = parse_price(v0.get("price"))
            avail = [v.get("available") for v in vs if isinstance(v.get("available"), bool)]
            colour_value = colour or None
            if colour_value is None and colour_pos is not None:
                colour_value = _text(next((o.get("values") for o in p.get("options") or []
                                           if isinstance(o, dict) and str(o.get("name", "")).strip().lower()
                                           in _COLOUR_OPTION), None))
            item = {
                "url": base_url,
                "title": _text(p.get("title")),
                "description": _text(remove_tags(str(p.get("body_html") or ""))),
                "brand": clean_value("brand", _text(p.get("vendor"))),
                "sku": clean_value("sku", _text(v0.get("sku"))) or (
                    (str(v0["id"]) if len(groups) > 1 and v0.get("id") else None) or (str(p["id"]) if p.get("id") else None)),
                "price": price,
                "currency": None,
                "color": colour_value,
                "material": None,
                "category_text": _text(p.get("product_type")),
                "image_urls": _full_size(_absolute(list(dict.fromkeys(own)) or [i["src"] for i in images], url),
                                         RenditionIndex()),
                "availability": ("InStock" if any(avail) else "OutOfStock") if avail else None,
                "group_id": str(p["id"]) if len(groups) > 1 and p.get("id") else None,
                "extracted_from": "shopify-json",
            }
            item["variant_id"] = item["sku"]  # the JSON states no separate reference: the sku is the item's id
            item["field_sources"] = [{"name": k, "value": "shopify-json"} for k in sorted(item)
                                     if k not in ("url", "extracted_from") and item[k] not in (None, "", [])]
            out.append(item)
    return out
