"""Products in the JSON a page ships for its scripts: the state documents (``state_documents``), the
product-like objects in them (``state_products``) and the product of Shopify's analytics object
(``shopify_analytics_product``)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from parsel import Selector

from .availability import normalise_availability

_NAME_KEYS = ("name", "title", "productName", "product_name", "displayName")
_PRICE_KEYS = ("price", "salePrice", "currentPrice", "finalPrice", "priceValue", "sellingPrice", "offerPrice",
               "price_amount", "amount")
_SKU_KEYS = ("sku", "skuId", "productId", "product_id", "itemId", "articleNumber", "partNumber", "styleId",
             "productCode", "code", "id")
_ASSIGN = re.compile(r"(?:window\.|self\.)?(__[A-Z_]+__|__NEXT_DATA__|__NUXT__|[A-Za-z_$][\w$]*(?:State|STATE|Data|"
                     r"DATA|Props|PROPS))\s*=\s*(?=[\[{])")


def state_documents(sel: Selector, max_chars: int = 3_000_000) -> list[Any]:
    """The JSON documents a page's scripts carry: ``application/json`` script bodies and object literals assigned
    to state variables (``window.__INITIAL_STATE__ = {…}``). Unparseable ones are skipped."""
    import json

    import chompjs

    docs: list[Any] = []
    for raw in sel.xpath("//script[contains(@type, 'json') and not(contains(@type, 'ld+json'))]/text()").getall():
        if len(raw) > max_chars:
            continue
        try:
            docs.append(json.loads(raw))
        except (ValueError, RecursionError):
            continue
    for raw in sel.xpath("//script[not(@type) or contains(@type, 'javascript')]/text()").getall():
        if len(raw) > max_chars or "=" not in raw:
            continue
        for m in _ASSIGN.finditer(raw):
            try:
                docs.append(chompjs.parse_js_object(raw[m.end():m.end() + max_chars]))
            except (ValueError, RecursionError, TypeError):
                continue
    return docs


def _walk(node: Any, depth: int = 0, limit: int = 60) -> Any:
    stack = [(node, depth)]
    while stack:
        n, d = stack.pop()
        if d > limit:
            continue
        if isinstance(n, dict):
            yield n, d
            stack.extend((v, d + 1) for v in n.values() if isinstance(v, (dict, list)))
        elif isinstance(n, list):
            stack.extend((v, d + 1) for v in n if isinstance(v, (dict, list)))


def _scalar(v: Any) -> str | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, str) and v.strip():
        return v.strip()
    return None


def _get(node: dict, keys: tuple[str, ...]) -> Any:
    low = {k.lower(): v for k, v in node.items() if isinstance(k, str)}
    for k in keys:
        if k.lower() in low:
            return low[k.lower()]
    return None


_SHOPIFY_META = re.compile(r"(?:\bvar\s+meta|ShopifyAnalytics\.meta)\s*=\s*(?=\{\s*\"product\")")
# the shop's currency, which the theme layer sets beside ``meta`` (``window.ShopifyAnalytics.meta.currency = 'EUR';``)
_SHOPIFY_CURRENCY = re.compile(r"ShopifyAnalytics\.meta\.currency\s*=\s*['\"]([A-Za-z]{3})['\"]")


def _shopify_currency(raw: str) -> str | None:
    m = _SHOPIFY_CURRENCY.search(raw)
    return m.group(1).upper() if m else None


def shopify_analytics_product(sel: Selector, url: str) -> dict[str, Any] | None:
    """The product a Shopify storefront page describes in its analytics object (``var meta = {"product": {…},
    "page": {"pageType": "product", "resourceId": …}}``, which Shopify's theme layer writes into every product
    page for ``window.ShopifyAnalytics.meta``): ``{title, sku, price (raw), currency (``meta``'s, else the
    ``ShopifyAnalytics.meta.currency = 'EUR'`` the theme layer sets beside it), brand}`` of the variant the
    URL selects (``?variant=<id>``), else of the first; None when the page has no such object or it is not about
    this product. Prices there are in the currency's minor unit (cents): ``10900`` is ``109.00``."""
    import chompjs

    for raw in sel.xpath("//script[contains(., 'ShopifyAnalytics') and contains(., 'meta')]/text()").getall()[:3]:
        for m in _SHOPIFY_META.finditer(raw):
            try:
                doc = chompjs.parse_js_object(raw[m.end():m.end() + 200_000])
            except (ValueError, RecursionError, TypeError):
                continue
            product, page = doc.get("product"), doc.get("page")
            if not (isinstance(product, dict) and isinstance(page, dict) and page.get("pageType") == "product"
                    and product.get("id") is not None and page.get("resourceId") == product.get("id")):
                continue
            variants = [v for v in product.get("variants") or [] if isinstance(v, dict)]
            if not variants:
                continue
            wanted = dict(parse_qsl(urlsplit(url).query)).get("variant")
            v = next((x for x in variants if wanted and str(x.get("id")) == wanted), variants[0])
            cents = v.get("price")
            price = f"{cents / 100:.2f}" if isinstance(cents, (int, float)) and not isinstance(cents, bool) else None
            return {"title": _scalar(v.get("name")), "sku": _scalar(v.get("sku")), "price": price,
                    "currency": _scalar(doc.get("currency")) or _shopify_currency(raw),
                    "brand": _scalar(product.get("vendor"))}
    return None


def state_products(docs: list[Any], url: str, title_hint: str | None = None) -> list[dict[str, Any]]:
    """Product-like objects in state documents, best first: each ``{title, price (raw), currency, sku,
    availability, image_urls, brand}``. Ranked by whether its identifier is in the URL or its name is the page
    title, then by how many product fields it carries, then by depth (shallower first)."""
    path = urlsplit(url).path + "?" + urlsplit(url).query
    found = []
    for doc in docs:
        for node, depth in _walk(doc):
            name = _scalar(_get(node, _NAME_KEYS))
            if not name or len(name) > 300:
                continue
            price = _get(node, _PRICE_KEYS)
            if isinstance(price, dict):
                price = _scalar(_get(price, ("value", "amount", "price", "current", "sale", "final")))
            else:
                price = _scalar(price)
            sku = _scalar(_get(node, _SKU_KEYS))
            if sku and (len(sku) > 40 or not re.search(r"\d", sku)):
                sku = None
            if not price and not sku:
                continue
            if price and not re.search(r"\d", price):
                price = None
            avail = normalise_availability(_get(node, ("availability", "stockStatus", "stock_status", "inStock",
                                                        "isInStock", "available", "isAvailable")))
            images = []
            img = _get(node, ("image", "images", "imageUrl", "image_url", "mainImage", "thumbnail"))
            for x in img if isinstance(img, list) else [img]:
                u = x if isinstance(x, str) else _scalar(_get(x, ("url", "src", "href"))) if isinstance(x, dict) else None
                if u and re.match(r"^(https?:)?//", u):
                    images.append(u)
            brand = _get(node, ("brand", "brandName", "manufacturer"))
            brand = _scalar(_get(brand, ("name",))) if isinstance(brand, dict) else _scalar(brand)
            fields = sum(bool(x) for x in (price, sku, avail, images, brand))
            rank = (bool(sku and sku in path), bool(title_hint and name.lower() == title_hint.lower()), fields, -depth)
            found.append((rank, {"title": name, "price": price, "currency": _scalar(_get(node, (
                "currency", "priceCurrency", "currencyCode"))), "sku": sku, "availability": avail,
                "image_urls": images, "brand": brand}))
    found.sort(key=lambda x: x[0], reverse=True)
    return [p for _, p in found]
