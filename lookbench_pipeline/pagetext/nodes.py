"""The bottom of ``pagetext``: reading lxml elements as a reader sees them (imports no sibling).

Visible text (``_text_of`` by XPath, ``_node_text`` by one iterative walk, ``script`` / ``style`` / ``noscript`` /
``template`` skipped), elements marked by a word in their id or class (``_marked``, ``_marked_nodes``), elements
hidden by their markup (``_hidden``) and templates repeated once per listed product (``_repeated``).
"""

from __future__ import annotations

import re
from typing import Any

from parsel import Selector

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
