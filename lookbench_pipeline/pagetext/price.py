"""The buy box: the page's enabled "add to cart" / "buy now" control (``buy_control``), the current and old
prices it shows (``price_candidates``) and the page's current price (``visible_price``), without the prices of a
listing's cards or of a template repeated per listed product (``_template``, ``_shape``, ``_in_card``).

``buy_control`` lives here, not in ``page``, because ``visible_price`` falls back to the price printed before it.
"""

from __future__ import annotations

import re
from typing import Any

from parsel import Selector

from .nodes import _NO_TEXT, _hidden, _marked_nodes, _node_text, _repeated

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
