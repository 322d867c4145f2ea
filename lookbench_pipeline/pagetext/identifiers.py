"""Identifiers a page shows: the code printed after a label ("SKU", "Art.-Nr.", "Ref.", "Код" …:
``labelled_identifier``), an id in the URL (``url_identifier``), and unrendered template values that are no
identifier at all (``is_placeholder``)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from parsel import Selector

from .nodes import _NO_TEXT, _node_text

# The lookahead lists the first letter of every label below: the regex engine then skips other positions at once
# (4x faster on a page's text); a new label's first letter must be added to it.
_ID_LABEL = re.compile(
    r"(?=[SAIPRCMVTN\u0410\u041a\u5546\uc0c1])"
    r"(?:\bSKU|\bArt(?:ikel)?\.?[\s-]*Nr\.?|Artikelnummer|\bArt(?:icle)?\.?\s*(?:#|No\.?|[Nn]umber)(?![A-Za-z])|"
    r"\bStyle\s*(?:#|No\.?|[Nn]umber|[Cc]ode)(?![A-Za-z])|Item\s*(?:#|No\.?|[Nn]umber)|Item\s+[Cc]ode|"
    r"Product\s*(?:[Cc]ode|#|[Nn]o\.?|[Nn]umber|ID)|\bRef(?:erence|\.)|Référence|Referencia|Riferimento|"
    r"Codice(?:\s+articolo)?|Código|Cod\.|Model\s*(?:#|No\.?)|Varenummer|Artikelnr\.?|Tuotenumero|Numer\s+produktu|"
    r"Артикул|Код(?:\s+товара)?|商品編號|商品番号|상품번호)"
    r"\s*(?:[:#.\uff1a]|[-\u2013\u2014](?=\s))?\s*(?P<id>[A-Za-z0-9][A-Za-z0-9\-/._]{2,30})")
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
    99-1", "Product Code - 39139301", "商品編號：M14876706"; the label and the code apart by spaces, or by a colon
    (also the full-width "："), "#", "." or a spaced dash): from an element marked as an identifier
    (``_identifier_nodes``; its text is the label and the code, or the code alone; it must carry at least four
    digits); else, when ``body_text``, after such a label anywhere in the visible text (it must then carry at least
    four digits: a bare label scan meets sizes and counts too).
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
