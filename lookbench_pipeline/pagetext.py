"""Product fields from what a page shows and from the state JSON its scripts carry, for pages without schema.org.

Two lower-trust sources of ``lookbench_pipeline.extract`` (most trusted first: JSON-LD, microdata, RDFa, inline
state JSON, OpenGraph, the site's own rules, the visible page):

- ``state_products``: product-like objects inside the JSON a page ships for its scripts: ``<script
  type="application/json">`` (Next.js ``__NEXT_DATA__`` among them), and ``window.X = {…}`` /
  ``__INITIAL_STATE__`` / ``__PRELOADED_STATE__`` assignments, parsed with ``chompjs`` (JavaScript object literals,
  not strict JSON). An object counts as a product when it has a name and a price or an identifier under the keys
  shops use for them.
- ``shopify_analytics_product``: the product a Shopify storefront describes in its analytics ``meta`` object.
- ``visible_product``: the page's ``<h1>`` (the one its ``<title>`` names; else ``og:title``, else ``<title>``),
  the first current price shown in an element marked as a price (struck-through, "was", unit and instalment
  prices skipped, and so are the prices of a listing's cards), else the price beside a struck-through one, else
  the price printed before the buy control; identifiers by their visible label ("SKU", "Art.-Nr.", "Item #",
  "Ref.", "Код" …) or in the URL; availability from the page's stock message (not from a template repeated on
  every listed product).
- ``buy_control`` and ``price_candidates``: the buy box's enabled "add to cart" control and the current and old
  prices it shows, which ``extract`` uses to reconcile structured data with what the page offers.

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


def _repeated(sel: Selector, node: Any, min_count: int = 3) -> bool:
    """Whether the lxml element ``node`` is part of a template the page repeats once per listed product (a
    recommendation carousel, a listing grid): it has no ``id`` and ``min_count`` or more elements of its tag carry
    exactly its ``class``. A page's own buy box is written once (twice at most: a desktop and a sticky or mobile
    copy)."""
    cls = node.get("class")
    if node.get("id") or not cls:
        return False
    return sum(1 for x in sel.root.iter(node.tag) if x.get("class") == cls) >= min_count


_HIDING_CLASSES = {"hidden", "d-none", "is-hidden"}


def _hidden(node: Any) -> bool:
    """Whether an lxml element is hidden by its markup (CSS in style sheets is not evaluated): it or an ancestor
    has the ``hidden`` attribute, an inline ``display:none`` / ``visibility:hidden``, or a ``hidden`` /
    ``d-none`` / ``is-hidden`` class."""
    for e in (node, *node.iterancestors()):
        style = (e.get("style") or "").replace(" ", "").lower()
        if e.get("hidden") is not None or "display:none" in style or "visibility:hidden" in style \
                or _HIDING_CLASSES & set((e.get("class") or "").split()):
            return True
    return False


_NO_TEXT = {"script", "style", "noscript", "template"}


def _node_text(node: Any, limit: int = 400) -> str:
    """``_text_of`` on an lxml element, without XPath (it runs on many elements): the text of the element and its
    descendants in document order, ``script`` / ``style`` / ``noscript`` / ``template`` and comments skipped,
    whitespace collapsed, cut at ``limit`` characters."""
    parts: list[str] = []
    size = 0
    stack: list[Any] = [("node", node)]  # iterative: a hostile page's deep nesting cannot exhaust the stack
    while stack and size <= 2 * limit:
        kind, item = stack.pop()
        if kind == "text":
            parts.append(item)
            size += len(item)
            continue
        if not isinstance(item.tag, str) or item.tag.lower() in _NO_TEXT:
            continue
        if item.text:
            parts.append(item.text)
            size += len(item.text)
        for c in reversed(item):
            if c.tail:
                stack.append(("text", c.tail))
            stack.append(("node", c))
    return re.sub(r"\s+", " ", " ".join(parts)).strip()[:limit]


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


# The words of an "add to cart" / "buy now" control, in the languages of the shops we crawl, and the names shops give
# such a control in their markup (add-to-cart, addToBasket, btn-cart, buy-now…).
_BUY_TEXT = re.compile(
    r"(?i)\badd\s+to\s+(?:cart|bag|basket|trolley)\b|\bbuy\s+(?:it\s+)?now\b|in\s+den\s+(?:warenkorb|einkaufswagen)|"
    r"ajouter\s+au\s+panier|a[ñn]adir\s+al\s+(?:carrito|carro|cesta)|agregar\s+al\s+carrito|aggiungi\s+al\s+carrello|"
    r"adicionar\s+ao\s+(?:carrinho|cesto)|toevoegen\s+aan\s+(?:winkelwagen|winkelmand)|in\s+winkelwagen|"
    r"dodaj\s+do\s+koszyka|l[äa]gg\s+i\s+(?:varukorg|kundvagn)|l[æa]g\s+i\s+kurv|legg\s+i\s+handlekurv|"
    r"lis[äa][äa]\s+ostoskoriin|lisa\s+ostukorvi|ielikt\s+groz|[вВ]\s+корзину|добавить\s+в\s+корзину|"
    r"do\s+ko[šs][íi]ka|kos[áa]rba|カートに入れる|加入購物車|加入购物车|장바구니\s*담기|הוסף\s+לעגלה")
_BUY_NAME = re.compile(r"(?i)add[-_\s]?to[-_\s]?(?:cart|bag|basket|trolley)|addproducttocart|\bbtn[-_]cart\b|"
                       r"buy[-_]?(?:now|btn|button)|btn[-_]buy|\bbuy[-_]box\b")
_NOT_BUY = re.compile(r"(?i)wish|\blist[ea]?\b|liste|favou?rite|compare|notify|benachrichtig|pr[ée]venez|avvisami|"
                      r"go\s+to|view\s+(?:cart|bag|basket)|zum\s+warenkorb|przejd[źz]|ir\s+para|voir\s+le\s+panier")


def buy_control(sel: Selector) -> Any | None:
    """The page's own enabled "add to cart" / "buy now" control (an lxml element), or None.

    A ``button``, an ``input`` of type submit / button / image, or a link, whose text, value, ``aria-label`` or
    ``title`` says "add to cart" / "buy now" (``_BUY_TEXT``) or whose id or class names one (``_BUY_NAME``); not a
    wishlist, compare, notify-me or go-to-cart control; not disabled (``disabled``, ``aria-disabled="true"``, a
    ``disabled`` class); not hidden by its markup (``_hidden``); not in the page's header, navigation or footer; and
    not part of a template repeated per listed product (``_repeated``). A disabled control is no evidence either
    way (shops disable it until a size is chosen)."""
    body = sel.root.find("body")
    if body is None:
        return None
    for n, node in enumerate(body.iter("button", "input", "a")):
        if n >= 4000:
            break
        if node.tag == "input" and (node.get("type") or "").lower() not in ("submit", "button", "image"):
            continue
        if node.tag == "a" and node.get("href") is None and node.get("onclick") is None:
            continue
        label = " ".join(node.get(a, "") for a in ("aria-label", "title"))
        names = " ".join(node.get(a, "") for a in ("id", "class", "name", "data-action", "data-test"))
        text = node.get("value", "") if node.tag == "input" else _node_text(node, 60)
        if not (_BUY_NAME.search(names) or _BUY_TEXT.search(label) or _BUY_TEXT.search(text)):
            continue
        if _NOT_BUY.search(text) or _NOT_BUY.search(label) or _NOT_BUY.search(names):
            continue
        cls = f" {(node.get('class') or '').lower()} "
        if (node.get("disabled") is not None or (node.get("aria-disabled") or "").lower() == "true"
                or " disabled " in cls or "--disabled" in cls or " is-disabled " in cls):
            continue
        if any(True for _ in node.iterancestors("header", "nav", "footer")) or _hidden(node) or _repeated(sel, node):
            continue
        return node
    return None


# Class / id words of a price that is not the current one: a struck-through list price ("was", "old", "regular",
# "original", "rrp", "compare-at"…) or a unit, saving or instalment amount.
_OLD = ("old", "was", "strike", "regular", "list", "crossed", "before", "rrp", "original", "compare", "prev")
_STRUCK_TAGS = ("del", "s", "strike")
_STRUCK = (*_OLD, "saving", "save", "per-unit", "unit-price", "perunit", "instalment", "installment", "monthly")
_CURRENCY = r"(?:[$€£¥₩₪₹₽₺₴₦₫฿₱]|(?<![^\W\d_])(?:USD|EUR|GBP|CHF|SEK|NOK|DKK|PLN|CZK|HUF|RON|BGN|RUB|UAH|KZT|TRY|ILS|INR|JPY|" \
            r"CNY|TWD|HKD|KRW|AUD|NZD|CAD|MXN|BRL|ARS|CLP|COP|PEN|ZAR|lei|zł|kr|Kč|Ft|руб|тг|грн|₸|NT\$|R\$)(?![^\W\d_])|円|元|원)"
_PRICE_TEXT = re.compile(rf"{_CURRENCY}\s*\d|\d[\d.,\s]*\s*{_CURRENCY}")


def _marked_nodes(sel: Selector, words: str | tuple[str, ...], limit: int) -> list[Any]:
    """The first ``limit`` lxml elements whose id or class contains one of ``words`` (case-insensitive), outside
    ``script`` / ``style`` / ``noscript``: ``//*[_marked(word)]`` without XPath's ``translate()`` on every element."""
    words = (words,) if isinstance(words, str) else words
    out = []
    for node in sel.root.iter():
        if not isinstance(node.tag, str):
            continue
        marks = ((node.get("class") or "") + " " + (node.get("id") or "")).lower()
        if any(w in marks for w in words):
            if node.tag.lower() in _NO_TEXT or any(True for _ in node.iterancestors(*_NO_TEXT)):
                continue
            out.append(node)
            if len(out) >= limit:
                break
    return out


def _template(node: Any, depth: int = 3) -> tuple:
    """The template an lxml element was written from: its own and ``depth`` ancestors' tag and class; an element
    with an id (or under one within that depth) is its own."""
    sig: list = []
    for _ in range(depth + 1):
        if node is None or not isinstance(node.tag, str):
            break
        if node.get("id"):
            return ("#" + node.get("id"), *sig)
        sig.append((node.tag, node.get("class")))
        node = node.getparent()
    return tuple(sig)


def _shape(node: Any) -> tuple:
    """The tags and classes of an lxml element's children: cards drawn from one template have the same shape;
    the sections of a page that share a wrapper class (``<div class="widget">`` around everything) do not."""
    return tuple((c.tag, c.get("class")) for c in node if isinstance(c.tag, str))


def _in_card(node: Any, memo: dict, depth: int = 8) -> bool:
    """Whether the lxml element ``node`` sits in one card of a list of product cards: one of its ``depth`` nearest
    ancestors with a class has two or more siblings of its tag, class and shape (``_shape``), three or more of
    them holding a link, whose texts show two or more different prices (a carousel of recommendations, a listing
    grid; not the rows of one product's own price table, which hold no links, nor page sections that share a
    wrapper class). ``memo`` caches the answer per ancestor."""
    seen = 0
    for anc in node.iterancestors():
        cls = anc.get("class")
        if not cls:
            continue
        seen += 1
        if seen > depth:
            break
        if anc not in memo:
            parent, card = anc.getparent(), False
            if parent is not None:
                shape = _shape(anc)
                sibs = [c for c in parent if c.tag == anc.tag and c.get("class") == cls and _shape(c) == shape]
                if len(sibs) >= 3:
                    linked = [c for c in sibs[:30] if (c.tag == "a" and c.get("href") is not None)
                              or c.find(".//a[@href]") is not None]
                    card = len(linked) >= 3 and len({m for c in linked
                                                     for m in _PRICE_TEXT.findall(_node_text(c, 300))}) >= 2
            memo[anc] = card
        if memo[anc]:
            return True
    return False


def price_candidates(sel: Selector, limit: int = 200) -> list[tuple[str, bool]]:
    """The prices the page shows in elements marked as a price (id / class containing ``price``), in document
    order, as ``(text, old)``: ``old`` when it is a struck-through or list price (inside ``<del>`` / ``<s>`` /
    ``<strike>``, or marked with one of ``_OLD``). Left out: unit, saving and instalment amounts; containers of
    several prices or of a struck-through one (their parts are listed instead); texts without a currency next to
    a number, or longer than 40 characters; and a listing's prices, i.e. elements of one template (``_template``:
    the same tags and classes down from their parents, no id) that show three or more different amounts (a carousel's product cards; a buy box repeated
    for desktop and mobile shows one amount, a table of the product's formats or sizes two or so)."""
    found: list[tuple[Any, str, bool, tuple]] = []
    memo: dict = {}
    for node in _marked_nodes(sel, "price", limit):
        cls = ((node.get("class") or "") + " " + (node.get("id") or "")).lower()
        if any(w in cls for w in _STRUCK if w not in _OLD):
            continue
        text = _node_text(node, 80)
        if not text or len(text) > 40 or not _PRICE_TEXT.search(text):
            continue
        if len(_PRICE_TEXT.findall(text)) > 1 or any(True for _ in node.iterdescendants("del", "s", "strike")):
            continue
        if _in_card(node, memo):
            continue
        old = any(w in cls for w in _OLD) or node.tag in _STRUCK_TAGS or any(
            True for _ in node.iterancestors(*_STRUCK_TAGS))
        found.append((node, text, old, _template(node)))
    amounts: dict[tuple, set[str]] = {}
    for _, text, _, sig in found:
        amounts.setdefault(sig, set()).add(re.sub(r"\s+", "", text))
    return [(text, old) for _, text, old, sig in found if len(amounts[sig]) < 3]


def visible_price(sel: Selector) -> str | None:
    """The current price the page shows: an ``itemprop="price"`` value, else the first current (not old) price of
    ``price_candidates``, else the price shown right after a struck-through one (``<del>`` / ``<s>`` /
    ``<strike>``: a sale price beside its list price), else a price printed just before the page's buy control
    (``buy_control``: the element's preceding siblings, then its parent's)."""
    for v in sel.xpath("//*[@itemprop='price']/@content").getall():
        if v.strip():
            return v.strip()
    for text, old in price_candidates(sel):
        if not old:
            return text
    memo: dict = {}
    struck_nodes = [n for n in sel.root.iter(*_STRUCK_TAGS)
                    if not any(True for _ in n.iterancestors(*_STRUCK_TAGS, *_NO_TEXT))][:20]
    for struck in struck_nodes:
        if not _PRICE_TEXT.search(_node_text(struck, 60)) or _in_card(struck, memo):
            continue
        parent = struck.getparent()
        nearby = list(struck.itersiblings())[:3] + (list(parent.itersiblings())[:2] if parent is not None else [])
        for near in nearby:
            if not isinstance(near.tag, str) or near.tag in _STRUCK_TAGS:
                continue
            text = _node_text(near, 60)
            m = _PRICE_TEXT.search(text)
            if m and len(_PRICE_TEXT.findall(text)) == 1:
                return text[: m.end() + 10] if len(text) > 40 else text
    control = buy_control(sel)
    if control is not None:
        parent = control.getparent()
        nearby = list(control.itersiblings(preceding=True))[:3] + (
            list(parent.itersiblings(preceding=True))[:3] if parent is not None else [])
        for near in nearby:
            if not isinstance(near.tag, str) or near.tag in _STRUCK_TAGS or any(
                    True for _ in near.iterdescendants(*_STRUCK_TAGS)):
                continue
            text = _node_text(near, 60)
            if text and _PRICE_TEXT.search(text):
                return text
    return None


# The lookahead lists the first letter of every label below: the regex engine then skips other positions at once
# (4x faster on a page's text); a new label's first letter must be added to it.
_ID_LABEL = re.compile(
    r"(?=[SAIPRCMVTN\u0410\u041a\u5546\uc0c1])"
    r"(?:\bSKU|\bArt(?:ikel)?\.?[\s-]*Nr\.?|Artikelnummer|Item\s*(?:#|No\.?|number)|Item\s+code|Product\s*(?:code|#|"
    r"no\.?|number|ID)|\bRef(?:erence|\.)|Référence|Referencia|Riferimento|Codice(?:\s+articolo)?|Código|"
    r"Cod\.|Model\s*(?:#|No\.?)|Varenummer|Artikelnr\.?|Tuotenumero|Numer\s+produktu|Артикул|Код(?:\s+товара)?|商品編號|商品番号|"
    r"상품번호)\s*[:#.]?\s*(?P<id>[A-Za-z0-9][A-Za-z0-9\-/._]{2,30})")
_PLACEHOLDER = re.compile(r"^\s*(?:\$\w+|\{\{.*\}\}|\$\{.*\}|%\w+%|\[\[.*\]\]|<%.*%>|#\{.*\}|undefined|null|none|"
                          r"n/?a|-+|\.+)\s*$", re.IGNORECASE)


def is_placeholder(value: str | None) -> bool:
    """An unrendered template value (``$metabrand``, ``{{ product.brand }}``, ``${sku}``, ``%BRAND%``) or an empty
    marker (``null``, ``N/A``, ``-``)."""
    return bool(value) and bool(_PLACEHOLDER.match(value))


_ID_MARKS = ("sku", "reference", "product-code", "productcode", "item-number", "article-number", "artnr")
_FORM_TAGS = {"option", "select", "button", "input"}
_MODEL_LABEL = re.compile(r"Model\s*(?:#|No)")


def _identifier_nodes(sel: Selector, limit: int = 20) -> list[Any]:
    """The first ``limit`` lxml elements marked as an identifier: an id or class containing ``sku`` /
    ``reference`` / ``product-code`` / ``item-number`` / ``article-number`` / ``artnr``, or a
    ``data-qa-qualifier`` containing ``reference``; not a form control (an ``option``, ``input``, ``button`` or
    anything in a ``select`` / ``button``: their texts are sizes) and not in ``script`` / ``style`` / ``noscript`` /
    ``template``. One walk of the tree (an XPath ``translate()`` on every element costs ~50 ms on a large page)."""
    out = []
    for node in sel.root.iter():
        if not isinstance(node.tag, str):
            continue
        marks = ((node.get("class") or "") + " " + (node.get("id") or "")).lower()
        if not (any(w in marks for w in _ID_MARKS) or "reference" in (node.get("data-qa-qualifier") or "").lower()):
            continue
        if node.tag.lower() in _NO_TEXT | _FORM_TAGS or any(
                isinstance(a.tag, str) and a.tag.lower() in _NO_TEXT | {"select", "button"}
                for a in node.iterancestors()):
            continue
        out.append(node)
        if len(out) >= limit:
            break
    return out


def _body_texts(sel: Selector, limit: int) -> list[str]:
    """The first ``limit`` text nodes of the page's ``<body>`` in document order, outside ``script`` / ``style`` /
    ``noscript`` (``//body//text()[_VISIBLE]`` as one iterative walk: a third of XPath's time, and a hostile page's
    deep nesting cannot exhaust the stack)."""
    parts: list[str] = []
    for body in sel.root.iter("body"):
        stack: list[Any] = [("node", body)]
        while stack and len(parts) < limit:
            kind, item = stack.pop()
            if kind == "text":
                parts.append(item)
                continue
            if not isinstance(item.tag, str) or item.tag.lower() in ("script", "style", "noscript"):
                continue
            if item.text:
                parts.append(item.text)
            for c in reversed(item):
                if c.tail:
                    stack.append(("text", c.tail))
                stack.append(("node", c))
    return parts[:limit]


def labelled_identifier(sel: Selector, body_text: bool = True, model_numbers: bool = True) -> str | None:
    """An identifier the page prints after a label ("SKU: 123", "Art.-Nr. 4711", "Ref. 1044/320", "Item #
    99-1"): from an element marked as an identifier (``_identifier_nodes``; its text is the label and the code, or
    the code alone; it must carry at least four digits); else, when ``body_text``, after such a label anywhere in
    the visible text (it must then carry at least four digits: a bare label scan meets sizes and counts too).
    ``model_numbers=False`` skips a "Model #" / "Model No." label: a manufacturer's model number, not the shop's
    own reference."""
    for node in _identifier_nodes(sel):
        text = _node_text(node, 120)
        m = _ID_LABEL.search(text)
        if m and not model_numbers and _MODEL_LABEL.match(m.group(0)):
            continue
        cand = m.group("id") if m else text if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9\-/._]{2,30}", text) else None
        if cand and len(re.findall(r"\d", cand)) >= 4:
            return cand.rstrip("./-")
    if not body_text:
        return None
    body = " ".join(_body_texts(sel, 4000))
    for m in _ID_LABEL.finditer(re.sub(r"\s+", " ", body)):
        if not model_numbers and _MODEL_LABEL.match(m.group(0)):
            continue
        if len(re.findall(r"\d", m.group("id"))) >= 4:
            return m.group("id").rstrip("./-")
    return None


_ID_PARAMS = {"id", "pid", "productid", "product_id", "itemid", "item_id", "sku", "item", "artnr", "article",
              "prodid", "product", "goodsno", "goods_no", "no"}
_CODE = re.compile(r"^(?=.*\d)(?:\d{5,20}|[A-Z0-9]{8,14})$")
_LETTERED_NUMBER = re.compile(r"[A-Za-z](?:[A-Za-z0-9]*[A-Za-z])?(\d{6,20})")


def url_identifier(url: str) -> str | None:
    """An item identifier in a product URL: an id-like query parameter (``?pid=262388``), else the last path token
    that is all digits (5–20) or an 8–14 character upper-case code with a digit (``/dp/B07FW264WL``,
    ``…-12185160.html``, ``/deal/3454863898``), or the run of 6–20 digits that ends a token after a letter
    (``/p1821267``, ``/c7200a278526196/``: a type or category letter before the number). None when the URL has
    none."""
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
            m = _LETTERED_NUMBER.fullmatch(tok)
            if m:
                return m.group(1)
    return None


def page_title(sel: Selector) -> str | None:
    """The product's name as the page shows it: the first ``<h1>`` whose text the page's ``<title>`` or
    ``og:title`` contains (pages also carry ``<h1>`` of cart messages and section headings), else the first
    non-empty ``<h1>``, else ``og:title``, else ``<title>``."""
    heads = [t for t in (_text_of(el, 300) for el in sel.xpath(f"//h1[{_VISIBLE}]")[:12]) if t]
    metas = [re.sub(r"\s+", " ", v).strip() for v in (sel.xpath("//meta[@property='og:title']/@content").get(),
                                                       sel.xpath("//title/text()").get()) if v and v.strip()]
    named = " | ".join(metas).lower()
    for t in heads:
        if len(t) >= 4 and t.lower() in named:
            return t
    return heads[0] if heads else metas[0] if metas else None


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


_SHOPIFY_META = re.compile(r"(?:\bvar\s+meta|ShopifyAnalytics\.meta)\s*=\s*(?=\{\s*\"product\")")


def shopify_analytics_product(sel: Selector, url: str) -> dict[str, Any] | None:
    """The product a Shopify storefront page describes in its analytics object (``var meta = {"product": {…},
    "page": {"pageType": "product", "resourceId": …}}``, which Shopify's theme layer writes into every product
    page for ``window.ShopifyAnalytics.meta``): ``{title, sku, price (raw), currency, brand}`` of the variant the
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
                    "currency": _scalar(doc.get("currency")), "brand": _scalar(product.get("vendor"))}
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
