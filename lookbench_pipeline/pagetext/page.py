"""The visible page as a product: its title (``page_title``), the fields it shows (``visible_product``: title,
price, identifier, availability, picture) and its pictures of the product (``page_images``)."""

from __future__ import annotations

import re
from typing import Any

from parsel import Selector

from .availability import page_availability
from .identifiers import labelled_identifier, url_identifier
from .nodes import _VISIBLE, _text_of
from .price import visible_price


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
