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

import extruct
from parsel import Selector
from price_parser import Price
from w3lib.html import get_base_url
from w3lib.url import canonicalize_url

from .config import LookRules, ProductRules

log = logging.getLogger(__name__)

SYNTAXES = ["microdata", "rdfa", "opengraph"]  # JSON-LD is parsed here, leniently (see parse_jsonld)
_PRODUCT_TYPES = {"product", "productgroup", "individualproduct", "productmodel"}


_MACHINE_NUMBER = re.compile(r"^\d+(\.\d+)?$")
_XML_DECL = re.compile(r"^\s*<\?xml[^>]*\?>")
_CDATA = re.compile(r"^\s*(?://\s*)?<!\[CDATA\[|(?://\s*)?\]\]>\s*$")
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")
_LINE_COMMENT = re.compile(r"^\s*//.*$", re.MULTILINE)


def parse_jsonld(raw: str) -> Any | None:
    """Parse one JSON-LD block the way browsers and search engines tolerate it: CDATA wrappers and HTML comment
    markers removed, raw control characters inside strings allowed, trailing commas and ``//`` comment lines
    dropped. Returns None when the block is still not JSON."""
    text = raw.strip().replace("<!--", "").replace("-->", "")
    text = "\n".join(line for line in text.splitlines() if not _CDATA.match(line))
    text = re.sub(r"<!\[CDATA\[|\]\]>", "", text)
    for attempt in (text, _TRAILING_COMMA.sub(r"\1", text), _TRAILING_COMMA.sub(r"\1", _LINE_COMMENT.sub("", text))):
        try:
            return json.loads(attempt, strict=False)
        except json.JSONDecodeError:
            continue
        except (RecursionError, ValueError):  # absurd nesting or a number too long to convert: not data
            return None
    return None


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
    urls = []
    for el in select(sel, css):
        cands = []
        for attr in ("srcset", "data-srcset"):
            v = el.attrib.get(attr)
            if v:
                cands += [c for c in parse_srcset(v) if not c[0].startswith("data:")]
        if cands:
            urls.append(max(cands, key=lambda c: c[1])[0])
            continue
        for attr in ("data-src", "data-lazy-src", "data-original", "src"):
            v = (el.attrib.get(attr) or "").strip()
            if v and not v.startswith("data:"):
                urls.append(v)
                break
    return _absolute(urls, base)


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


def parse_price(amount: Any, currency: Any = None) -> tuple[float | None, str | None]:
    """Parse a price and its currency with ``price-parser``: ``("1.299,00 €", None) -> (1299.0, "€")``."""
    import math

    if amount is None:
        return None, _text(currency)
    if isinstance(amount, bool) or not isinstance(amount, (int, float, str)):
        return None, _text(currency)
    if isinstance(amount, (int, float)):
        value = float(amount)
    elif _MACHINE_NUMBER.match(amount.strip()):
        value = float(amount.strip())  # schema.org prices use "." as the decimal point ("1.234" is 1.234)
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


def _offer_price(offers: Any) -> tuple[float | None, str | None]:
    for offer in offers if isinstance(offers, list) else [offers]:
        if not isinstance(offer, dict):
            continue
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
        if amount is None and "offers" in offer:  # AggregateOffer with nested offers
            return _offer_price(offer["offers"])
        if amount is not None:
            return parse_price(amount, _ci(offer, "priceCurrency"))
    return None, None


def _from_schema_node(node: dict, syntax: str) -> dict[str, Any]:
    props = node.get("properties", node) if syntax == "rdfa-raw" else node
    price, currency = _offer_price(props.get("offers"))
    brand = props.get("brand") or props.get("manufacturer")
    return {
        "title": _text(props.get("name")),
        "description": _text(props.get("description")),
        "brand": _text(brand),
        "sku": _text(props.get("sku") or props.get("mpn") or props.get("productID")),
        "price": price,
        "currency": currency,
        "color": _text(props.get("color")),
        "material": _text(props.get("material")),
        "category_text": _text(props.get("category")),
        "image_urls": _image_urls(props.get("image")),
        "extracted_from": syntax,
    }


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
    return {
        "title": _text(og.get("og:title")),
        "description": _text(og.get("og:description")),
        "brand": _text(og.get("product:brand") or og.get("og:brand")),
        "sku": _text(og.get("product:retailer_item_id") or og.get("product:sku")),
        "price": price,
        "currency": currency,
        "color": _text(og.get("product:color")),
        "material": _text(og.get("product:material")),
        "category_text": _text(og.get("product:category")),
        "image_urls": _image_urls(og.get("og:image", [])),
        "extracted_from": "opengraph",
    }


def _absolute(urls: Iterable[str], base: str) -> list[str]:
    from urllib.parse import urljoin

    seen, out = set(), []
    for u in urls:
        if not isinstance(u, str) or not u.strip():
            continue  # an empty src would resolve to the page itself
        a = urljoin(base, u.strip())
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
    return {
        "title": title,
        "description": get(rules.description),
        "brand": get(rules.brand),
        "sku": get(rules.sku),
        "price": price,
        "currency": currency,
        "color": None,
        "material": None,
        "category_text": None,
        "image_urls": page_image_urls(sel, rules.images, base) if rules.images else [],
        "extracted_from": "rules",
    }


def _merge(primary: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(primary)
    for k, v in extra.items():
        if k == "image_urls":
            out[k] = list(dict.fromkeys([*out.get(k, []), *v]))
        elif out.get(k) in (None, "") and v not in (None, ""):
            out[k] = v
    return out


def extract_products(html: str | bytes, url: str, rules: ProductRules | None = None) -> list[dict[str, Any]]:
    """Extract schema.org products from a page.

    Args:
        html: the page (text, or bytes decoded as UTF-8 with replacement).
        url: the page URL, used to resolve relative image URLs (``<base href>`` honoured).
        rules: CSS fallback for pages with no structured data.

    Returns:
        One dict per distinct product (keys: title, description, brand, sku, price (float), currency, color,
        material, category_text, image_urls (absolute), extracted_from). JSON-LD wins over microdata over RDFa over
        OpenGraph; fields a higher source lacks are filled from the lower ones when the page has a single product.
        An empty list when the page carries no product.
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
    data["json-ld"] = [d for d in (parse_jsonld(raw) for raw in sel.xpath(
        "//script[contains(translate(@type, 'LDJSON', 'ldjson'), 'ld+json')]/text()").getall()) if d is not None]
    data["rdfa"] = _short_keys(data.get("rdfa", []))
    found: list[dict[str, Any]] = []
    for syntax in ("json-ld", "microdata", "rdfa"):
        for node in _walk(data.get(syntax, [])):
            if _types(node) & _PRODUCT_TYPES:
                p = _from_schema_node(node, syntax)
                if p["title"] or p["sku"]:
                    found.append(p)
    og = _from_opengraph(data.get("opengraph", []))
    ruled = _from_rules(sel, rules, base) if rules else None

    # Collapse the same product seen through several syntaxes (same sku, else same title).
    merged: dict[str, dict[str, Any]] = {}
    for p in found:
        key = (p["sku"] or p["title"] or "").lower()
        merged[key] = _merge(merged[key], p) if key in merged else p
    # Size/colour variants published as separate Product nodes with the same title and images are one item.
    variants: dict[tuple, dict[str, Any]] = {}
    for p in merged.values():
        variants.setdefault(((p["title"] or "").lower(), tuple(p["image_urls"])), p)
    products = list(variants.values())
    if not products:
        products = [p for p in (og, ruled) if p][:1]
    elif len(products) == 1:
        for extra in (og, ruled):
            if extra:
                products[0] = _merge(products[0], extra)
    for p in products:
        p["image_urls"] = _absolute(p["image_urls"], base)
        if not p["image_urls"] and rules and rules.images:
            p["image_urls"] = page_image_urls(sel, rules.images, base)
    return products


def extract_look(html: str | bytes, url: str, rules: LookRules) -> dict[str, Any] | None:
    """Extract a "shop the look" block: ``{image_url, product_urls}`` or ``None`` when the page has none."""
    if isinstance(html, bytes):
        html = html.decode("utf-8", errors="replace")
    base = get_base_url(html, url)
    sel = Selector(text=html)
    image = select(sel, rules.image).get()
    products = select(sel, rules.products).getall()
    if not image or not products:
        return None
    imgs = _absolute([image], base)
    if not imgs:
        return None
    return {"image_url": imgs[0], "product_urls": _absolute(products, base)}


def canonical(url: str) -> str:
    """Canonical form of a URL (sorted query, no fragment) used for identity and de-duplication of requests."""
    return canonicalize_url(url)


def product_key(site: str, url: str, sku: str | None) -> str:
    """The stable product id: sha1 of ``site`` and the sku, or the URL path when there is no sku.

    The host and port are not part of it, so a replayed or re-served copy of a site keeps its product ids.
    """
    import hashlib
    from urllib.parse import urlsplit

    if sku:
        basis = f"{site}\x00sku\x00{sku}"
    else:
        parts = urlsplit(canonical(url))
        basis = f"{site}\x00path\x00{parts.path}?{parts.query}"
    return hashlib.sha1(basis.encode()).hexdigest()


def path_key(site: str, url: str) -> str:
    """Stable id of a page by site and URL path (host and port ignored): sha1 hex."""
    import hashlib
    from urllib.parse import urlsplit

    parts = urlsplit(canonical(url))
    return hashlib.sha1(f"{site}\x00{parts.path}?{parts.query}".encode()).hexdigest()


def shopify_products(doc: Any, url: str) -> list[dict[str, Any]]:
    """Products from a Shopify JSON document: the public ``/products.json`` (``{"products": [...]}``) or
    ``/products/<handle>.json`` (``{"product": {...}}``), which share the Admin API's product shape.

    Fields: title, ``body_html`` as text, ``vendor`` as brand, ``product_type`` as category text, the first
    variant's sku and price, a ``Color``/``Colour`` option's first value as colour, every image ``src``.
    Shopify's product JSON carries no currency (it is the shop's), so ``currency`` is None. The product URL is
    ``<shop origin>/products/<handle>``.
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
        v0 = variants[0] if variants else {}
        price, _ = parse_price(v0.get("price"))
        color = None
        for opt in p.get("options") or []:
            if isinstance(opt, dict) and str(opt.get("name", "")).lower() in ("color", "colour"):
                color = _text(opt.get("values"))
        out.append({
            "url": f"{origin}/products/{p['handle']}" if isinstance(p.get("handle"), str) and p["handle"] else url,
            "title": _text(p.get("title")),
            "description": _text(remove_tags(str(p.get("body_html") or ""))),
            "brand": _text(p.get("vendor")),
            "sku": _text(v0.get("sku")) or (str(p["id"]) if p.get("id") else None),
            "price": price,
            "currency": None,
            "color": color,
            "material": None,
            "category_text": _text(p.get("product_type")),
            "image_urls": _absolute([i["src"] for i in p.get("images") or [] if isinstance(i, dict)
                                     and isinstance(i.get("src"), str) and i["src"]], url),
            "extracted_from": "shopify-json",
        })
    return out
