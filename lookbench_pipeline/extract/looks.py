"""``extract_look``: a "shop the look" block (its picture and the products it links) by the site's rules."""

from __future__ import annotations

from typing import Any

from parsel import Selector

from ..config import LookRules
from .images import _absolute, page_base, rule_image_urls, select


def extract_look(html: str | bytes, url: str, rules: LookRules) -> dict[str, Any] | None:
    """Extract a "shop the look" block: ``{image_url, product_urls}`` or ``None`` when the page has none.

    A rule that selects elements rather than an attribute (no ``::attr(...)``) takes the element's best image URL
    (``srcset``, then lazy-loading ``data-src``, then ``src``; ``data:`` placeholders skipped) or its ``href``,
    never its HTML; a selected ``data:`` URL falls back to the element's lazy-loading attributes. A picture named
    only by another scheme than http(s) is kept as its recorded form (``images.refused_form``), which the crawl
    records refused ``unsupported_scheme``."""
    if isinstance(html, bytes):
        html = html.decode("utf-8", errors="replace")
    base = page_base(html, url)
    sel = Selector(text=html)
    refused: list[str] = []
    imgs = _look_image(sel, rules.image, base, refused)
    products = _rule_urls(sel, rules.products, base, ("href", "data-href", "data-url"))
    if not (imgs or refused) or not products:
        return None
    # a look whose picture is named only by another scheme (file:, javascript:…) is kept with that reference in
    # its recorded form: the crawl records the picture refused unsupported_scheme, unfetched, rather than losing
    # the look without a row
    return {"image_url": imgs[0] if imgs else refused[0], "product_urls": products}


def _look_image(sel: Selector, rule: str, base: str, refused: list[str]) -> list[str]:
    return rule_image_urls(sel, rule, base, refused)


def _rule_urls(sel: Selector, rule: str, base: str, attrs: tuple[str, ...]) -> list[str]:
    if "::" in rule or "/@" in rule or rule.rstrip().endswith("text()"):
        return _absolute(select(sel, rule).getall(), base)
    out = []
    for el in select(sel, rule):
        v = next((el.attrib[a] for a in attrs if el.attrib.get(a)), "")
        if v and not v.startswith(("javascript:", "data:", "mailto:")):
            out.append(v)
    return _absolute(out, base)
