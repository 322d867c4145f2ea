"""Product fields from what a page shows and from the state JSON its scripts carry, for pages without schema.org.

Two lower-trust sources of ``lookbench_pipeline.extract`` (most trusted first: JSON-LD, microdata, RDFa, inline
state JSON, OpenGraph, the site's own rules, the visible page):

- ``state_products``: product-like objects inside the JSON a page ships for its scripts: ``<script
  type="application/json">`` (Next.js ``__NEXT_DATA__`` among them), and ``window.X = {…}`` /
  ``__INITIAL_STATE__`` / ``__PRELOADED_STATE__`` assignments, parsed with ``chompjs`` (JavaScript object literals,
  not strict JSON). An object counts as a product when it has a name and a price or an identifier under the keys
  shops use for them.
- ``visible_product``: the page's ``<h1>`` (else ``og:title``, else ``<title>``), the first price shown in an
  element marked as a price (struck-through and "was" prices skipped), identifiers by their visible label
  ("SKU", "Art.-Nr.", "Item #", "Ref." …) or in the URL, availability from the page's stock message.

Rules here are general: none names a shop. Per-site selectors belong in the site's YAML (``product_rules``).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from parsel import Selector

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


def normalise_availability(value: Any) -> str | None:
    """A schema.org ``ItemAvailability`` short name (``"InStock"``, ``"OutOfStock"``…) from what a page writes
    (``"http://schema.org/InStock"``, ``"https://schema.org/OutOfStock"``, ``"instock"``, ``"in_stock"``,
    ``"Sold out"``, a boolean); None when it is none of these."""
    if isinstance(value, bool):
        return "InStock" if value else "OutOfStock"
    if isinstance(value, dict):
        value = value.get("@id") or value.get("name") or value.get("@value")
    if isinstance(value, list):
        value = value[0] if value else None
    if not isinstance(value, str):
        return None
    v = value.strip().rsplit("/", 1)[-1].rsplit("#", 1)[-1].strip().lower()
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


_VISIBLE = "not(ancestor-or-self::script) and not(ancestor-or-self::style) and not(ancestor-or-self::noscript)"


def _lc(attr: str) -> str:
    return f"translate({attr}, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')"


def _marked(word: str) -> str:
    """XPath predicate: the element's id or class contains ``word`` (case-insensitive)."""
    return f"(contains({_lc('@id')}, '{word}') or contains({_lc('@class')}, '{word}'))"


def _text_of(el: Selector, limit: int = 400) -> str:
    t = " ".join(el.xpath(f".//text()[{_VISIBLE}]").getall())
    return re.sub(r"\s+", " ", t).strip()[:limit]


def page_availability(sel: Selector) -> str | None:
    """Availability from the page: a ``link``/``meta`` with ``itemprop="availability"`` outside any product
    markup, else the first stock message in an element whose id or class says ``availab`` or ``stock``."""
    for v in sel.xpath("//*[@itemprop='availability']/@href | //*[@itemprop='availability']/@content").getall():
        a = normalise_availability(v)
        if a:
            return a
    for el in sel.xpath(f"//*[{_VISIBLE}][{_marked('availab')} or {_marked('stock')}][not(self::svg)]")[:40]:
        text = _text_of(el, 200)
        if not text or re.match(r"(?i)(image|bild|immagine|imagen|image non)", text):
            continue
        a = availability_from_text(text)
        if a:
            return a
    return None


_STRUCK = ("old", "was", "strike", "regular", "list", "crossed", "before", "rrp", "original", "compare", "prev",
           "saving", "save", "per-unit", "unit-price", "perunit", "instalment", "installment", "monthly")
_CURRENCY = r"(?:[$€£¥₩₪₹₽₺₴₦₫฿₱]|\b(?:USD|EUR|GBP|CHF|SEK|NOK|DKK|PLN|CZK|HUF|RON|BGN|RUB|UAH|KZT|TRY|ILS|INR|JPY|" \
            r"CNY|TWD|HKD|KRW|AUD|NZD|CAD|MXN|BRL|ARS|CLP|COP|PEN|ZAR|lei|zł|kr|Kč|Ft|руб|₸|NT\$|R\$)\b|円|元|원)"
_PRICE_TEXT = re.compile(rf"{_CURRENCY}\s*\d|\d[\d.,\s]*\s*{_CURRENCY}")


def visible_price(sel: Selector) -> str | None:
    """The first price text shown in an element marked as a price (id / class containing ``price``, or
    ``itemprop="price"``), skipping struck-through, "was", unit and instalment prices; the text must carry a
    currency next to a number."""
    for v in sel.xpath("//*[@itemprop='price']/@content").getall():
        if v.strip():
            return v.strip()
    marked = f"//*[{_VISIBLE}][{_marked('price')}][not(ancestor::del) and not(ancestor::s) and not(self::del)]"
    for el in sel.xpath(marked)[:200]:
        cls = ((el.attrib.get("class") or "") + " " + (el.attrib.get("id") or "")).lower()
        if any(w in cls for w in _STRUCK):
            continue
        text = _text_of(el, 80)
        if text and len(text) <= 40 and _PRICE_TEXT.search(text):
            return text
    return None


_ID_LABEL = re.compile(
    r"(?:\bSKU|\bArt(?:ikel)?\.?[\s-]*Nr\.?|Artikelnummer|Item\s*(?:#|No\.?|number)|Item\s+code|Product\s*(?:code|#|"
    r"no\.?|number|ID)|\bRef(?:erence|\.)|Référence|Referencia|Riferimento|Codice(?:\s+articolo)?|Código|"
    r"Cod\.|Model\s*(?:#|No\.?)|Varenummer|Artikelnr\.?|Tuotenumero|Numer\s+produktu|Артикул|商品編號|商品番号|"
    r"상품번호)\s*[:#.]?\s*(?P<id>[A-Za-z0-9][A-Za-z0-9\-/._]{2,30})")
_PLACEHOLDER = re.compile(r"^\s*(?:\$\w+|\{\{.*\}\}|\$\{.*\}|%\w+%|\[\[.*\]\]|<%.*%>|#\{.*\}|undefined|null|none|"
                          r"n/?a|-+|\.+)\s*$", re.IGNORECASE)


def is_placeholder(value: str | None) -> bool:
    """An unrendered template value (``$metabrand``, ``{{ product.brand }}``, ``${sku}``, ``%BRAND%``) or an empty
    marker (``null``, ``N/A``, ``-``)."""
    return bool(value) and bool(_PLACEHOLDER.match(value))


def labelled_identifier(sel: Selector, body_text: bool = True) -> str | None:
    """An identifier the page prints after a label ("SKU: 123", "Art.-Nr. 4711", "Ref. 1044/320", "Item #
    99-1"): from an element marked ``sku`` / ``reference`` / ``product-code`` / ``item-number`` (not a form option or
    button, whose texts are sizes; it must carry at least four digits); else, when ``body_text``, after such a label anywhere in the visible text (it must then carry at least
    four digits: a bare label scan meets sizes and counts too)."""
    marked = (f"//*[{_VISIBLE}][{_marked('sku')} or {_marked('reference')} or {_marked('product-code')} or "
              f"{_marked('productcode')} or {_marked('item-number')} or {_marked('article-number')} or "
              f"{_marked('artnr')} or contains({_lc('@data-qa-qualifier')}, 'reference')]"
              "[not(self::option or ancestor::select or self::button or ancestor::button or self::input)]")
    for el in sel.xpath(marked)[:20]:
        text = _text_of(el, 120)
        m = _ID_LABEL.search(text)
        cand = m.group("id") if m else text if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9\-/._]{2,30}", text) else None
        if cand and len(re.findall(r"\d", cand)) >= 4:
            return cand.rstrip("./-")
    if not body_text:
        return None
    body = " ".join(sel.xpath(f"//body//text()[{_VISIBLE}]").getall()[:4000])
    for m in _ID_LABEL.finditer(re.sub(r"\s+", " ", body)):
        if len(re.findall(r"\d", m.group("id"))) >= 4:
            return m.group("id").rstrip("./-")
    return None


_ID_PARAMS = {"id", "pid", "productid", "product_id", "itemid", "item_id", "sku", "item", "artnr", "article",
              "prodid", "product", "goodsno", "goods_no", "no"}
_CODE = re.compile(r"^(?=.*\d)(?:\d{5,20}|[A-Z0-9]{8,14})$")


def url_identifier(url: str) -> str | None:
    """An item identifier in a product URL: an id-like query parameter (``?pid=262388``), else the last path token
    that is all digits (5–20) or an 8–14 character upper-case code with a digit (``/dp/B07FW264WL``,
    ``…-12185160.html``, ``/deal/3454863898``). None when the URL has none."""
    parts = urlsplit(url)
    for k, v in parse_qsl(parts.query):
        if k.lower() in _ID_PARAMS and _CODE.match(v.strip()):
            return v.strip()
    segments = [s for s in parts.path.split("/") if s]
    for seg in reversed(segments):
        seg = re.sub(r"\.(?:html?|aspx?|php|jsp|htm)$", "", seg, flags=re.IGNORECASE)
        for tok in reversed(re.split(r"[-_.,~]", seg)):
            if _CODE.match(tok):
                return tok
    return None


def page_title(sel: Selector) -> str | None:
    """The product's name as the page shows it: the first non-empty ``<h1>``, else ``og:title``, else ``<title>``."""
    for el in sel.xpath("//h1")[:3]:
        t = _text_of(el, 300)
        if t:
            return t
    for v in (sel.xpath("//meta[@property='og:title']/@content").get(), sel.xpath("//title/text()").get()):
        if v and v.strip():
            return re.sub(r"\s+", " ", v).strip()
    return None


def visible_product(sel: Selector, url: str, need: set[str] | None = None) -> dict[str, Any]:
    """Fields the visible page gives (see the module docstring): ``title``, ``price_text``, ``sku`` (in an element
    marked as an identifier, else in the URL, else after a label in the text), ``sku_source`` (``label`` /
    ``url``), ``availability``, ``image_url`` (``og:image``, else the first large ``img`` in the main content).
    ``need``: only these fields are looked for (the others are None); all when None."""
    want = (lambda f: True) if need is None else need.__contains__
    sku = sku_source = image = None
    if want("sku"):
        sku, sku_source = labelled_identifier(sel, body_text=False), "label"
        if not sku:
            sku, sku_source = url_identifier(url), "url"
        if not sku:
            sku, sku_source = labelled_identifier(sel), "label"
        sku_source = sku_source if sku else None
    if want("image_url"):
        image = sel.xpath("//meta[@property='og:image']/@content | //meta[@name='og:image']/@content").get()
        if not image:
            for el in sel.xpath("//main//img | //*[@id='main' or @role='main']//img | //body//img")[:60]:
                w = el.attrib.get("width", "")
                if w.isdigit() and int(w) < 200:
                    continue
                src = el.attrib.get("data-src") or el.attrib.get("src") or ""
                if src and not src.startswith("data:") and not re.search(r"(?i)logo|icon|sprite|pixel|spacer", src):
                    image = src
                    break
    return {"title": page_title(sel) if want("title") else None,
            "price_text": visible_price(sel) if want("price_text") else None, "sku": sku, "sku_source": sku_source,
            "availability": page_availability(sel) if want("availability") else None, "image_url": image}


def page_images(sel: Selector, title: str | None) -> list[str]:
    """The pictures a page shows of its product when its markup names none: ``<img>`` whose ``alt`` text starts
    with the product's title (shops label their gallery so), then ``og:image`` / ``twitter:image`` /
    ``link rel=image_src``. URLs as written (relative ones resolved by the caller)."""
    out: list[str] = []
    key = re.sub(r"\s+", " ", title or "").strip().lower()[:40]
    if len(key) >= 8:
        for el in sel.xpath("//img[@alt]")[:400]:
            alt = re.sub(r"\s+", " ", el.attrib.get("alt", "")).strip().lower()
            if alt.startswith(key):
                u = (el.attrib.get("data-src") or el.attrib.get("data-lazy-src") or el.attrib.get("src") or "").strip()
                if u and not u.startswith("data:"):
                    out.append(u)
    out += sel.xpath("//meta[@property='og:image' or @name='og:image' or @name='twitter:image' or "
                     "@property='twitter:image']/@content | //link[@rel='image_src']/@href").getall()
    return list(dict.fromkeys(u.strip() for u in out if u and u.strip()))


# --- inline state JSON ----------------------------------------------------------------------------------------

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
