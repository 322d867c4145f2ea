"""The product sources, each giving items in one shape (``_sources`` says where each field came from): schema.org
nodes of JSON-LD, microdata and RDFa (``_schema_products``: ``ProductGroup`` variants, per-offer colours),
OpenGraph, the site's rules, inline state JSON and Shopify's analytics object, the visible page (``pagetext``),
Shopify's product JSON (``shopify_products``), and the colours a platform states only in its own variant data
(``shopify_page_products``, ``woocommerce_page_products``, ``magento_page_products``); ``decode_html`` decodes a
page's bytes."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from parsel import Selector

from ..config import ProductRules
from ..pagetext import (normalise_availability, shopify_analytics_product, state_documents, state_products,
                        visible_product)
from ..renditions import RenditionIndex
from .identity import _group_id, _identifiers, clean_value
from .images import _absolute, _full_size, _image_urls, _refused_image_urls, page_image_urls, select
from .jsonld import _first, _text, _types, _walk
from .offers import _offer_availability, _offer_colour, _offer_price, _offers, parse_price

_PRODUCT_TYPES = {"product", "productgroup", "individualproduct", "productmodel"}


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


def _facet_colour(v: Any) -> str | None:
    """The colour an ``additionalProperty`` states (a PropertyValue named "Color" / "Colour" / "Farbe"…), or None."""
    for f in _property_values(v) or []:
        if f["name"].strip().lower() in _COLOUR_OPTION:
            return clean_value("color", f["value"])
    return None


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
        "color": clean_value("color", _text(props.get("color"))) or _facet_colour(props.get("additionalProperty")),
        "material": clean_value("material", _text(props.get("material"))),
        "category_text": _text(props.get("category")),
        "facets": _property_values(props.get("additionalProperty")),
        "image_urls": _image_urls(props.get("image")),
        "availability": _offer_availability(offers),
        "group_id": _group_id(props),
        "offer_url": _text(_first([o.get("url") for o in offers if isinstance(o.get("url"), str)] or [None]))
        or _text(props.get("url") if isinstance(props.get("url"), str) else None),
        "extracted_from": syntax,
        "_images_refused": _refused_image_urls(props.get("image")),  # recorded unsupported_scheme, never fetched
        "_ids": ids,
        "_size": _text(props.get("size")),
    }
    p["_sources"] = {k: syntax for k, v in p.items() if v not in (None, "", []) and not k.startswith("_")}
    if sku_key and sku_key != "sku":
        p["_sources"]["sku"] = f"{syntax}:{sku_key}"
    return p


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


_INHERITED = ("title", "brand", "description", "material", "category_text", "price", "currency", "availability",
              "color")
_MAX_GROUP_DEPTH = 4


def _schema_products(data: Any, syntax: str) -> list[dict[str, Any]]:
    """Products of one syntax's tree, one per sellable item, in the order of the tree.

    A product group's variants are its ``hasVariant`` children and the Product nodes whose ``isVariantOf`` names
    it, inline or by ``@id`` reference (``{"@id": "#red"}`` resolved against the nodes of the same tree; a reference
    to no node is not an item). Each variant inherits the group's name, brand, description, material, category,
    price, availability, colour and images where it has none, and carries the group's ``productGroupID`` (else its
    sku, ``@id``, name) as ``group_id``. A variant that is itself a group (model → colour → sizes, up to
    ``_MAX_GROUP_DEPTH`` levels) passes both on to its own variants, which keep the outermost group's id, so the
    colours of one model share it. The group node is not an item itself; a group without variants is. Every other
    Product node is an item of its own (per-offer colours split)."""
    nodes = list(_walk(data))
    by_ref: dict[str, dict] = {}
    for n in nodes:
        ref = n.get("@id")
        if isinstance(ref, str) and len(n) > 1:
            by_ref.setdefault(ref, n)

    def deref(v: Any) -> dict | None:
        if isinstance(v, dict) and set(v) == {"@id"}:
            return by_ref.get(v["@id"]) if isinstance(v["@id"], str) else None
        return v if isinstance(v, dict) else None

    products = [n for n in nodes if _types(n) & _PRODUCT_TYPES]
    is_product = {id(n) for n in products}
    variants: dict[int, list[dict]] = {}
    for n in products:
        listed = n.get("hasVariant") if isinstance(n.get("hasVariant"), list) else [n.get("hasVariant")]
        for v in map(deref, listed):
            if v is not None and v is not n and all(v is not x for x in variants.get(id(n), [])):
                variants.setdefault(id(n), []).append(v)
    for n in products:
        parent = deref(_first(n.get("isVariantOf")))
        if parent is not None and parent is not n and id(parent) in is_product \
                and all(n is not x for x in variants.get(id(parent), [])):
            variants.setdefault(id(parent), []).append(n)
    member = {id(v) for vs in variants.values() for v in vs}
    covered: set[int] = set()

    def expand(g: dict, inherited: dict[str, Any] | None, gid: str | None, depth: int) -> list[dict[str, Any]]:
        covered.add(id(g))
        group = _from_schema_node(g, syntax)
        if inherited is not None:
            _inherit(group, inherited, syntax)
        gid = gid or _text(g.get("productGroupID")) or group["sku"] or _text(g.get("@id")) or group["title"]
        out: list[dict[str, Any]] = []
        for v in variants[id(g)]:
            if id(v) in covered:
                continue
            if id(v) in variants and depth < _MAX_GROUP_DEPTH:
                out.extend(expand(v, group, gid, depth + 1))
                continue
            covered.update(id(x) for x in _walk(v))
            child = _from_schema_node(v, syntax)
            _inherit(child, group, syntax)
            child["group_id"] = _text(v.get("inProductGroupWithID")) or gid
            if child["title"] or child["sku"]:
                out.append(child)
        return out

    expanded: dict[int, list[dict[str, Any]]] = {}
    for roots_only in (True, False):   # the outermost groups first; then any left (a cycle of references)
        for n in products:
            if id(n) in variants and id(n) not in covered and not (roots_only and id(n) in member):
                expanded[id(n)] = expand(n, None, None, 0)
    out: list[dict[str, Any]] = []
    for n in products:
        if id(n) in expanded:
            out.extend(expanded[id(n)])
        elif id(n) not in covered and id(n) not in member:
            p = _from_schema_node(n, syntax)
            if p["title"] or p["sku"]:
                out.extend(_split_offer_colours(p, n, syntax))
    return out


def _inherit(child: dict[str, Any], group: dict[str, Any], syntax: str) -> None:
    """Fill ``child``'s empty inheritable fields and its images from its ``group``, in place."""
    for k in _INHERITED:
        if child.get(k) in (None, "") and group.get(k) not in (None, ""):
            child[k] = group[k]
            child["_sources"][k] = f"{syntax}:group"
    if not child["image_urls"]:
        child["image_urls"] = group["image_urls"]


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
        "_images_refused": _refused_image_urls(og.get("og:image", [])),
        "availability": normalise_availability(_text(og.get("product:availability") or og.get("og:availability"))),
        "group_id": _text(og.get("product:item_group_id")),
        "offer_url": None,
        "extracted_from": "opengraph",
    }
    p["_sources"] = {k: "opengraph" for k, v in p.items() if v not in (None, "", []) and not k.startswith("_")}
    return p


# What a server sends when nobody set a charset (RFC 2616 §3.7.1's default for text/*; w3lib resolves both names
# to windows-1252): a page's own <meta charset> that disagrees with it is the more specific statement.
_DEFAULT_HEADER_CHARSETS = frozenset({"cp1252", "iso8859-1", "iso-8859-1", "latin-1", "latin1"})
# Text codecs Python knows that no browser decodes a page with: a page declaring one would show the extractor text
# no visitor sees (``unicode-escape`` turns "\x41" into "A"). The WHATWG Encoding Standard drops UTF-7 too.
_NOT_WEB_CODECS = frozenset({"utf-7", "unicode-escape", "raw-unicode-escape", "idna", "punycode", "undefined",
                             "mbcs", "oem", "palmos"})


_WHATWG_DECODER = {"gbk": "gb18030"}
"""Python codecs a browser decodes with another, wider one (WHATWG Encoding Standard, "gbk decoder")."""


def _web_codec(label: str | None) -> str | None:
    """The Python text codec a declared charset ``label`` names (w3lib's WHATWG-style aliases: ``latin1`` →
    ``cp1252``, ``gbk`` → ``gb18030``…), or None when it names none a browser would use: unknown, not a text
    encoding (``rot13``, ``hex``, ``base64``, ``zlib``), or one of :data:`_NOT_WEB_CODECS`."""
    import codecs

    from w3lib.encoding import resolve_encoding

    if not label:
        return None
    try:
        info = codecs.lookup(resolve_encoding(label) or label)
    except (LookupError, TypeError, ValueError):
        return None
    if not getattr(info, "_is_text_encoding", True) or info.name in _NOT_WEB_CODECS:
        return None
    # The WHATWG Encoding Standard decodes every GBK label (gbk, gb2312, x-gbk...) with the gb18030 decoder, a
    # superset of Python's gbk codec; w3lib 2.5 resolved them so, 2.6 resolves them to gbk.
    return _WHATWG_DECODER.get(info.name, info.name)


def decode_html(body: bytes, content_type: str | None = None) -> tuple[str, str]:
    """Decode a page's bytes; returns ``(text, encoding)`` (encoding: the Python codec name used).

    The one rule for page bytes, in the crawl (``lookbench_crawlers.spiders.shop``), in a WARC replay
    (``lookbench_pipeline.warc``) and for a saved page given to ``extract_products`` as bytes:

    1. a byte-order mark, or an HTTP ``charset`` of the UTF-16 / UTF-32 family: that encoding;
    2. bytes that are not all ASCII and decode strictly as UTF-8: UTF-8, whatever is declared. Text in a legacy
       encoding with bytes above 0x7F is almost never valid UTF-8 (Dürst, "The Properties and Promises of
       UTF-8", 1997), while a stale declaration on UTF-8 bytes is common: a server's ISO-8859-1 default, a page
       saved or re-encoded with its old ``<meta charset>``;
    3. the declared charsets, the HTTP header's before the page's ``<meta charset>`` (HTML's order), except that
       a header of ISO-8859-1 / windows-1252 (the server default) yields to a ``<meta charset>`` that names
       another: the first under which the bytes decode strictly wins. A ``<meta charset>`` of the UTF-16 / UTF-32
       family means UTF-8 (the HTML standard: a page that can declare it in ASCII is not UTF-16);
    4. otherwise the first declared charset, else UTF-8, with replacement characters.

    Only the charsets a browser would use count (:func:`_web_codec`): an unknown name, a codec that is no text
    encoding (``rot13``, ``base64``) or one no browser decodes with (``unicode-escape``, ``utf-7``) is ignored.
    Never raises for any ``body`` and ``content_type``.
    """
    from w3lib.encoding import html_body_declared_encoding, html_to_unicode, http_content_type_encoding, read_bom

    try:
        header = _web_codec(http_content_type_encoding(content_type)) if content_type else None
    except Exception:  # a header w3lib cannot parse declares nothing
        header = None
    bom, _ = read_bom(body)
    if bom:
        enc, text = html_to_unicode(None, body)  # the byte-order mark decides, and is not part of the text
        return text, enc
    if header and header.startswith(("utf-16", "utf-32")):
        return body.decode(header, "replace"), header
    if not body.isascii():
        try:
            return body.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            pass
    try:
        meta = _web_codec(html_body_declared_encoding(body))
    except Exception:  # a meta tag w3lib cannot parse declares nothing
        meta = None
    if meta and meta.startswith(("utf-16", "utf-32")):
        meta = "utf-8"
    declared = [header, meta]
    if header in _DEFAULT_HEADER_CHARSETS and meta and meta != header:
        declared.reverse()
    declared = list(dict.fromkeys(e for e in declared if e))
    for enc in declared:
        try:
            return body.decode(enc), enc
        except UnicodeDecodeError:
            continue
    enc = declared[0] if declared else "utf-8"
    return body.decode(enc, "replace"), enc


def _from_rules(sel: Selector, rules: ProductRules, base: str = "") -> dict[str, Any] | None:
    if not rules.title:
        return None
    def get(rule: str | None) -> str | None:
        return _text(select(sel, rule).get()) if rule else None
    title = get(rules.title)
    if not title:
        return None
    price, currency = parse_price(get(rules.price))
    refused: list[str] = []  # <img> references of another scheme: recorded unsupported_scheme, never fetched
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
        "image_urls": page_image_urls(sel, rules.images, base, refused) if rules.images else [],
        "availability": None,
        "group_id": None,
        "offer_url": None,
        "extracted_from": "rules",
        "_images_refused": refused,
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


# Arrays of a page's state JSON that list a product's colours (each entry a colour: its name under ``name`` /
# ``label``…) or its variants (a variant's colour only under an explicit colour key).
_COLOUR_ARRAY = re.compile(r"""["']?(colou?rs|colou?rways|colou?r_?options|colou?r_?variants|swatches|variants|"""
                           r"""variations)["']?\s*:\s*\[""", re.IGNORECASE)
_ENTRY_IDS = ("id", "code", "colorId", "colourId", "colorCode", "colourCode", "sku", "skuId", "variantId", "variant_id")
_ENTRY_COLOUR = ("colorName", "colourName", "color", "colour", "colorDescription", "colourDescription")
_ENTRY_NAME = ("name", "label", "displayName", "title", "value")
_MAX_ARRAYS = 50                 # state arrays read per page
_MAX_ENTRIES = 1000              # entries read per array
_MAX_ARRAY_CHARS = 1_000_000     # characters one array may span
_MAX_SCAN_CHARS = 4_000_000      # characters all of a page's arrays may span together
_MAX_SCRIPT_CHARS = 3_000_000    # a longer script is not read (as ``pagetext.state_documents``)
_NOT_A_COLOUR_NAME = re.compile(r"#?[0-9a-fA-F]{3,8}|\d+|rgba?\(.*\)")
_ID_SEP = re.compile(r"[-_/. ]+")


def _entry_text(v: Any) -> str | None:
    """A string scalar of a state entry (a number as its digits); None for anything else (lists, objects, bools)."""
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        return None
    t = str(v).strip()
    return t if 0 < len(t) <= 100 else None


def _entry_colour(entry: dict, colour_array: bool) -> str | None:
    for key in _ENTRY_COLOUR + (_ENTRY_NAME if colour_array else ()):
        v = entry.get(key)
        if isinstance(v, dict):  # {"color": {"name": "Red", "hex": "#f00"}}
            v = v.get("name") or v.get("label")
        if not isinstance(v, str):
            continue
        name = clean_value("color", v)
        if name and not _NOT_A_COLOUR_NAME.fullmatch(name):
            return name
    return None


def state_colour_entries(sel: Selector) -> dict[str, dict[str, str]]:
    """The colour names of the page's state JSON by entry id (lower-cased; ``{id: {name.lower(): name}}``): each
    entry of the colour and variant arrays in the page's scripts (JSON-LD aside), ``"colors": [{"id": "611",
    "name": "Purple"}, …]``, ``"variants": [{"sku": "T-RED", "colour": "Red"}, …]``.

    Each array is read as JSON, else as a JavaScript literal (``chompjs``); one that is neither, or is not a list
    of objects, is skipped, as are entries without an id or a colour name (a hex code or a number is not a name).
    Bounded, whatever the page: 50 arrays, 1,000 entries each, 1,000,000 characters an array and 4,000,000 all of
    them; scripts over 3,000,000 characters are not read."""
    import chompjs

    decoder = json.JSONDecoder(strict=False)
    out: dict[str, dict[str, str]] = {}
    arrays = scanned = 0
    for raw in sel.xpath("//script[not(contains(translate(@type, 'LDJSON', 'ldjson'), 'ld+json'))]/text()").getall():
        if len(raw) > _MAX_SCRIPT_CHARS:
            continue
        for m in _COLOUR_ARRAY.finditer(raw):
            if arrays >= _MAX_ARRAYS or scanned >= _MAX_SCAN_CHARS:
                return out
            arrays += 1
            text = raw[m.end() - 1:m.end() - 1 + _MAX_ARRAY_CHARS]
            scanned += len(text)
            try:
                arr, _ = decoder.raw_decode(text)
            except (ValueError, RecursionError):
                try:
                    arr = chompjs.parse_js_object(text)
                except Exception:  # chompjs raises ValueError, and its C scanner others, on what is not data
                    continue
            if not isinstance(arr, list):
                continue
            colour_array = "colo" in m.group(1).lower() or m.group(1).lower() == "swatches"
            for entry in arr[:_MAX_ENTRIES]:
                if not isinstance(entry, dict):
                    continue
                name = _entry_colour(entry, colour_array)
                for key in _ENTRY_IDS if name else ():
                    eid = _entry_text(entry.get(key))
                    if eid:
                        out.setdefault(eid.lower(), {})[name.lower()] = name
    return out


def _state_colours(sel: Selector, products: list[dict[str, Any]]) -> None:
    """Fill the colour of the items that have none from the page's state JSON (``state_colour_entries``), keyed
    by the item's own id; in place (source ``state-json:colors``).

    An entry is the item's when one of its ids is one of the item's identifiers (``variant_id``, ``sku``, the
    others it carries), else when it is a separator-delimited part of one of them that no other item of the page
    has (``611`` of ``84994776-611``, beside ``84994776-800``: the colour code of the item's id, not the model's
    number every colour shares). An item takes a colour only when its entries name one (ignoring case): two
    names, or none, leave it without."""
    if all(p.get("color") for p in products):
        return
    by_id = state_colour_entries(sel)
    if not by_id:
        return
    idents = []
    for p in products:
        values = {p.get("variant_id"), p.get("sku"), *(v for _, v in p.get("_ids") or [])}
        idents.append({str(v).lower() for v in values if v})
    parts = [{t for v in ids for t in _ID_SEP.split(v) if len(t) >= 2} - ids for ids in idents]
    owners: dict[str, int] = {}
    for ps in parts:
        for t in ps:
            owners[t] = owners.get(t, 0) + 1
    for p, ids, ps in zip(products, idents, parts):
        if p.get("color") or not ids:
            continue
        names = {k: v for i in ids for k, v in by_id.get(i, {}).items()}
        if not names:
            names = {k: v for t in ps if owners[t] == 1 for k, v in by_id.get(t, {}).items()}
        if len(names) == 1:
            p["color"] = next(iter(names.values()))
            p.setdefault("_sources", {})["color"] = "state-json:colors"


_MAX_PLATFORM_JSON_CHARS = 3_000_000  # a longer product JSON script is not read (as ``_MAX_SCRIPT_CHARS``)


def _script_docs(scripts: list[str], needle: str) -> Iterator[Any]:
    """The JSON document of each of ``scripts`` (a page's script texts) that holds ``needle``; one longer than
    ``_MAX_PLATFORM_JSON_CHARS`` characters, or not JSON (or nested past Python's recursion limit), is skipped."""
    for raw in scripts:
        if len(raw) > _MAX_PLATFORM_JSON_CHARS or needle not in raw:
            continue
        try:
            yield json.loads(raw)
        except (ValueError, RecursionError):
            continue


def _theme_product(doc: Any) -> dict | None:
    """A Shopify theme's product JSON (Liquid's ``product | json``: ``options`` as names, ``images`` as URLs,
    prices in cents) in the Admin API's shape that ``shopify_products`` reads (options as ``{name, position}``,
    images as ``{src}``, prices as decimal strings); None when ``doc`` is not a product with option variants."""
    if isinstance(doc, dict) and isinstance(doc.get("product"), dict):
        doc = doc["product"]
    if not isinstance(doc, dict) or not isinstance(doc.get("title"), str) or not isinstance(doc.get("variants"), list):
        return None
    variants = [v for v in doc["variants"] if isinstance(v, dict)]
    if not variants or not any("option1" in v for v in variants):
        return None
    options = [{"name": o, "position": n} if isinstance(o, str) else o
               for n, o in enumerate(doc.get("options") or [], start=1)]
    images = [{"src": i} if isinstance(i, str) else i for i in doc.get("images") or []]
    cents = [{**v, "price": f"{v['price'] / 100:.2f}"} if isinstance(v.get("price"), int)
             and not isinstance(v.get("price"), bool) else v for v in variants]
    return {**doc, "options": options, "images": images, "variants": cents}


def shopify_page_products(sel: Selector, url: str, title_hint: str | None) -> list[dict[str, Any]]:
    """The colour items of the Shopify product JSON a product page embeds (``<script type="application/json"
    data-product-json>`` and the like; ``_theme_product``), one per colour as ``shopify_products`` makes them,
    in ``extract_products``' item form (source ``shopify-json``); [] unless the product has two colours or more.

    The JSON is the page's own product when its ``handle`` is the URL's ``/products/<handle>``, or its title is
    ``title_hint`` (the page's structured product's name); a page's other product JSON (a recommendation, a quick
    view) is not. The colour first is the one the page shows: that of the variant the URL's ``?variant=`` names,
    else that of the first available variant (Shopify's ``selected_or_first_available_variant``)."""
    from urllib.parse import parse_qs, urlsplit

    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    scripts = sel.xpath("//script[contains(translate(@type, 'JSON', 'json'), 'application/json')]/text()").getall()
    for doc in _script_docs(scripts, '"option1"'):
        product = _theme_product(doc)
        if product is None:
            continue
        handle = product.get("handle")
        own = (isinstance(handle, str) and handle and path.endswith(f"/products/{handle}")) or (
            title_hint and _text(product["title"]) and _text(product["title"]).lower() == title_hint.lower())
        if not own:
            continue
        items = shopify_products({"product": product}, url)
        if len(items) < 2:
            return []
        pos = next((o["position"] for o in product["options"] if isinstance(o, dict) and isinstance(
            o.get("position"), int) and str(o.get("name", "")).strip().lower() in _COLOUR_OPTION), None)
        wanted = (parse_qs(parts.query).get("variant") or [None])[0]
        shown = next((v for v in product["variants"] if str(v.get("id")) == wanted), None) or next(
            (v for v in product["variants"] if v.get("available") is True), None)
        colour = _text(shown.get(f"option{pos}")) if shown and pos else None
        items.sort(key=lambda q: q["color"] != colour)
        out = []
        for q in items:
            q.pop("field_sources", None)
            q.pop("variant_id", None)
            q["offer_url"] = q.pop("url", None)
            q["_ids"] = [("sku", q["sku"])] if q["sku"] else []
            q["_sources"] = {k: "shopify-json" for k, v in q.items()
                             if v not in (None, "", []) and not k.startswith("_")}
            out.append(q)
        return out
    return []


def _woo_attribute_name(key: str) -> str:
    """``attribute_pa_color`` → ``color``; ``attribute_Farbe`` → ``farbe``."""
    name = key[len("attribute_"):] if key.startswith("attribute_") else key
    return (name[3:] if name.startswith("pa_") else name).strip().lower()


def woocommerce_page_products(sel: Selector, url: str, main: dict[str, Any]) -> list[dict[str, Any]]:
    """The colour items of a WooCommerce variable product (``<form class="variations_form"
    data-product_variations="[…]">``), one per colour, each a copy of the page's structured item ``main`` with
    the colour's own fields (source ``woocommerce-json``); [] unless the variations have two colours or more.

    A variation's colour is its attribute whose name (``attribute_pa_color``, ``attribute_farbe``…) is a colour
    option; its label is the one the form's ``<select>`` shows for that value (else the value). Each colour takes
    its first variation's ``sku`` (else ``main``'s) and ``display_price``, that variation's ``variation_id`` as
    its own identifier (``productID``, after ``main``'s ids, as Magento's child id: variations often inherit the
    parent's sku, which the colours then share, so it becomes their group's), ``InStock`` when any of its
    variations ``is_in_stock``, and its variations' pictures (``image.full_src``, else ``image.url`` /
    ``image.src``); the form's
    ``data-product_id`` (else ``main``'s sku) is their ``group_id``. The colour first is the one the URL's
    ``?attribute_pa_color=`` names, else the form's preselected one, else the first. A form whose variations are
    loaded later (``data-product_variations="false"``, a long list) gives nothing."""
    from urllib.parse import parse_qsl, urlsplit

    form = sel.xpath("//form[contains(concat(' ', normalize-space(@class), ' '), ' variations_form ')]"
                     "[@data-product_variations]")
    if not form:
        return []
    raw = form[0].attrib.get("data-product_variations", "")
    if len(raw) > _MAX_PLATFORM_JSON_CHARS:
        return []
    try:
        variations = json.loads(raw)
    except (ValueError, RecursionError):
        return []
    if not isinstance(variations, list):
        return []
    groups: dict[str, list[dict]] = {}
    key = None
    for v in variations:
        attrs = v.get("attributes") if isinstance(v, dict) else None
        if not isinstance(attrs, dict):
            continue
        k = next((a for a in attrs if _woo_attribute_name(a) in _COLOUR_OPTION and _text(attrs[a])), None)
        if k is None:
            continue
        key = key or k
        groups.setdefault(_text(attrs[k]), []).append(v)
    if len(groups) < 2 or key is None:
        return []
    labels = {o.attrib.get("value"): _text(o.xpath("normalize-space(.)").get())
              for o in form[0].xpath(".//select[@name=$k]/option[@value!='']", k=key)}
    wanted = dict(parse_qsl(urlsplit(url).query)).get(key) or form[0].xpath(
        ".//select[@name=$k]/option[@selected]/@value", k=key).get()
    gid = _text(form[0].attrib.get("data-product_id")) or main.get("sku")
    out = []
    for value, vs in sorted(groups.items(), key=lambda kv: kv[0] != wanted):
        v0 = vs[0]
        price, _ = parse_price(v0.get("display_price"))
        images = []
        for v in vs:
            img = v.get("image") if isinstance(v.get("image"), dict) else {}
            src = next((img[k] for k in ("full_src", "url", "src") if isinstance(img.get(k), str) and img[k]), None)
            if src:
                images.append(src)
        stock = [v.get("is_in_stock") for v in vs if isinstance(v.get("is_in_stock"), bool)]
        own = clean_value("sku", _text(v0.get("sku")))
        q = {**main, "_sources": dict(main.get("_sources") or {}), "color": labels.get(value) or value,
             "sku": own or main.get("sku"),
             "price": price if price is not None else main.get("price"),
             "availability": ("InStock" if any(stock) else "OutOfStock") if stock else main.get("availability"),
             "image_urls": list(dict.fromkeys(images)) or main.get("image_urls") or [],
             "group_id": gid, "extracted_from": "woocommerce-json"}
        vid = v0.get("variation_id")
        vid = _text(str(vid)) if isinstance(vid, (int, str)) and not isinstance(vid, bool) else None
        # the colour's own sku first; main's ids (shared by every colour, so never one's own); its first
        # variation's id, its own identifier when the variations inherit the parent's sku (as Magento's child id)
        q["_ids"] = [*([("sku", own)] if own else []), *(main.get("_ids") or []),
                     *([("productID", vid)] if vid else [])]
        for f in ("color", "sku", "price", "availability", "image_urls", "group_id"):
            if q[f] not in (None, "", []) and q[f] != main.get(f):
                q["_sources"][f] = "woocommerce-json"
        out.append(q)
    return out


def _magento_config(doc: Any, depth: int = 0) -> dict | None:
    """The configurable product's options in a ``text/x-magento-init`` document: the ``jsonConfig`` /
    ``spConfig`` object (``attributes``, ``index``, ``images``…), found at most 6 levels deep."""
    if depth > 6 or not isinstance(doc, dict):
        return None
    for k in ("jsonConfig", "spConfig"):
        if isinstance(doc.get(k), dict) and isinstance(doc[k].get("attributes"), dict):
            return doc[k]
    for v in doc.values():
        found = _magento_config(v, depth + 1)
        if found is not None:
            return found
    return None


def magento_page_products(sel: Selector, url: str, main: dict[str, Any]) -> list[dict[str, Any]]:
    """The colour items of a Magento 2 configurable product (the ``jsonConfig`` / ``spConfig`` of its
    ``<script type="text/x-magento-init">``), one per colour option, each a copy of the page's structured item
    ``main`` with the colour's own fields (source ``magento-json``); [] unless the colour attribute (its ``code``
    or ``label`` a colour option) has two options with products or more.

    Each colour: the option's ``label``; the price of its first child (``optionPrices[id].finalPrice.amount``);
    its children's pictures (``images[id]``: ``full``, else ``img``, the main one first), not the page's small
    cached rendition; its first child's id as its own identifier (``productID``: the config states no child
    sku), ``productId`` (else ``main``'s sku) as ``group_id``. Magento lists only saleable children here, so
    availability is ``main``'s. Option order is the page's; the first colour stays first."""
    scripts = sel.xpath("//script[@type='text/x-magento-init']/text()").getall()
    config = next((c for c in map(_magento_config, _script_docs(scripts, "Config")) if c is not None), None)
    if config is None:
        return []
    attrs = [a for a in config["attributes"].values() if isinstance(a, dict) and any(
        str(a.get(k) or "").strip().lower() in _COLOUR_OPTION for k in ("code", "label"))]
    options = [o for o in (attrs[0].get("options") if attrs else None) or []
               if isinstance(o, dict) and _text(o.get("label")) and isinstance(o.get("products"), list)
               and o["products"]]
    if len(options) < 2:
        return []
    prices = config.get("optionPrices") if isinstance(config.get("optionPrices"), dict) else {}
    images = config.get("images") if isinstance(config.get("images"), dict) else {}
    gid = _text(config.get("productId")) or main.get("sku")
    out = []
    for o in options:
        children = [str(c) for c in o["products"]]
        amount = (((prices.get(children[0]) or {}).get("finalPrice") or {}).get("amount")
                  if isinstance(prices.get(children[0]), dict) else None)
        price, _ = parse_price(amount) if isinstance(amount, (int, float, str)) else (None, None)
        pictures = []
        for c in children:
            entries = [e for e in images.get(c) or [] if isinstance(e, dict)]
            for e in sorted(entries, key=lambda e: not e.get("isMain")):
                src = next((e[k] for k in ("full", "img") if isinstance(e.get(k), str) and e[k]), None)
                if src:
                    pictures.append(src)
        q = {**main, "_sources": dict(main.get("_sources") or {}), "color": clean_value("color", _text(o["label"])),
             "price": price if price is not None else main.get("price"),
             "image_urls": list(dict.fromkeys(pictures)) or main.get("image_urls") or [],
             "group_id": gid, "extracted_from": "magento-json"}
        q["_ids"] = [*(main.get("_ids") or []), ("productID", children[0])]
        for f in ("color", "price", "image_urls", "group_id"):
            if q[f] not in (None, "", []) and q[f] != main.get(f):
                q["_sources"][f] = "magento-json"
        out.append(q)
    return out
