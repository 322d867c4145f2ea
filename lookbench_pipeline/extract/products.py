"""``extract_products``: the sellable items of a product page, one per colour, the page's main item first
(``main_product``), its fields filled from the lower sources and reconciled with the page's buy box (``_buy_box``),
its ``sku`` the reference the page prints (``_page_reference``)."""

from __future__ import annotations

import logging
import re
from typing import Any
from urllib.parse import urlsplit

import extruct
from parsel import Selector
from w3lib.html import replace_entities

from ..config import ProductRules
from ..pagetext import buy_control, labelled_identifier, page_images, price_candidates, url_identifier
from .identity import _SEP, _collapse, _merge, _norm, canonical, choose_identifier
from .images import _absolute, _full_size, _page_renditions, join_url, page_base, page_image_urls
from .jsonld import _XML_DECL, _short_keys, parse_jsonld_block
from .offers import parse_price
from .sources import (_from_opengraph, _from_rules, _from_state, _from_visible, _schema_products, _state_colours,
                      decode_html, magento_page_products, shopify_page_products, woocommerce_page_products)

log = logging.getLogger(__name__)


def extract_products(html: str | bytes, url: str, rules: ProductRules | None = None,
                     problems: list[str] | None = None) -> list[dict[str, Any]]:
    """Extract the sellable items on a product page, one per colour variant.

    Args:
        html: the page (text, or bytes decoded by ``decode_html``, the crawl's rule: valid UTF-8 is UTF-8, else a
            legacy page's declared ``<meta charset>`` (windows-1252, Shift_JIS…) is honoured).
        url: the page URL: relative image URLs are resolved against it (``<base href>`` honoured), and an
            identifier in it is the last sku fallback.
        rules: the site's CSS / XPath rules (``SiteConfig.product_rules``), tried before the visible page.
        problems: when given, a reason is appended for each JSON-LD block that could not be read
            (``jsonld_parse_error``, ``jsonld_too_deep``, ``jsonld_empty``), so a page with no product says why.

    Returns:
        One dict per item, the page's main item first (``main_product``). Keys: title, description, brand, sku
        (the shop's reference as the page states it: for the main item and its other colours the code the page
        prints after a "Ref." / "SKU" / "Product code" label, ``_page_reference``, else the structured identifier;
        it may be the model's, shared by its colours), variant_id (the item's own identifier at colour granularity, which
        ``product_key`` hashes: see "How item identity is decided" below), price (float), currency, color,
        material, category_text, image_urls (absolute, each picture once as its largest rendition), availability
        (schema.org short name: ``InStock``, ``OutOfStock``…, or None), group_id (the model the colour variant
        belongs to), facets (schema.org ``additionalProperty`` name/value pairs, or None), extracted_from (the
        source of the item), field_sources (``[{name: field, value: source}]``: where each field came from).

    Sources, most trusted first: JSON-LD (lenient, ``parse_jsonld_block``), microdata, RDFa, platform JSON
    (Shopify's analytics object) and inline state JSON, OpenGraph, the site's rules, the visible page
    (``pagetext``). Items come from the structured sources; where those state fewer than two colours, a
    platform's own variant data splits the product into its colours (Shopify's theme product JSON, WooCommerce's
    variations form, Magento 2's ``jsonConfig``: ``shopify_page_products``, ``woocommerce_page_products``,
    ``magento_page_products``); the main item's empty fields are filled from the lower
    ones, and its price and availability are reconciled with the page's buy box (``_buy_box``). How item identity
    is decided: ``_collapse`` and ``_colour_identity``, then ``choose_identifier`` (one the URL carries first) and
    an identifier shared by several colours made their ``group_id``; the result is ``variant_id``. Then the colours
    a page splits one product into get a shared ``group_id`` where none was stated (``_page_groups``), and the main
    item's ``sku``, and its colours', take the page's printed reference (``_page_reference``).
    """
    if isinstance(html, bytes):
        html, _ = decode_html(html)  # the one rule for page bytes, as in the crawl
    base = page_base(html, url)
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
    blocks = []
    for raw in sel.xpath("//script[contains(translate(@type, 'LDJSON', 'ldjson'), 'ld+json')]/text()").getall():
        doc, why = parse_jsonld_block(raw)
        if doc is not None:
            blocks.append(doc)
        elif problems is not None and why:
            problems.append(why)
    data["json-ld"] = blocks
    data["rdfa"] = _short_keys(data.get("rdfa", []))
    found: list[dict[str, Any]] = []
    for syntax in ("json-ld", "microdata", "rdfa"):
        found.extend(_schema_products(data.get(syntax, []), syntax))
    products = _collapse(found)
    page_title = page_title_of(sel)
    if '"option1"' in html and not _has_colours(products):  # a Shopify page's colours, in its product JSON only
        shop = shopify_page_products(sel, url, _order(products, url)[0]["title"] if products else None)
        if shop:
            products = _order(products, url)
            filler = products[0] if products else _from_state(sel, url, shop[0]["title"], low)  # analytics meta
            for q in shop:
                if filler:
                    q.update(_merge(q, filler, _SHOP_FILLED + (() if q["image_urls"] else ("image_urls",))))
            products = shop + products[1:]
    if "variations_form" in low and products and not _has_colours(products):  # WooCommerce's, in its form's JSON
        products = _order(products, url)
        products = (woocommerce_page_products(sel, url, products[0]) or products[:1]) + products[1:]
    if "x-magento-init" in low and products and not _has_colours(products):  # Magento 2's, in its jsonConfig
        products = _order(products, url)
        products = (magento_page_products(sel, url, products[0]) or products[:1]) + products[1:]
    # The page's state JSON and visible text are read only when the structured items leave a core field empty
    # (they are the costly sources: a full walk of the scripts and of the text).
    main0 = _order(products, url)[0] if products else None
    complete = main0 is not None and all(main0.get(k) not in (None, "", []) for k in _CORE)
    state = None if complete else _from_state(sel, url, page_title, low)
    lower = [p for p in (state, _from_opengraph(data.get("opengraph", [])),
                         _from_rules(sel, rules, base) if rules else None) if p]
    visible = {} if complete else _from_visible(sel, url, main0)
    if not products:
        if lower:
            products = [lower[0]]
            lower = lower[1:]
        elif visible and visible["title"] and (visible["price"] is not None or visible["sku"]) and visible["image_urls"]:
            products = [visible]  # a page with no markup at all: its title, price and picture as shown
    products = _order(products, url)
    if products:
        main = products[0]
        for extra in lower:
            main = _merge(main, extra, None if len(products) == 1 else ("sku", "availability", "price", "currency",
                                                                       "brand"))
        if visible and main is not visible:
            main = _merge(main, visible, ("sku", "availability", "price", "currency")
                          if len(products) == 1 else ("sku", "availability"))
        products[0] = _buy_box(sel, low, main)
    for p in products:
        if p.get("_ids"):
            sku, key = choose_identifier(p["_ids"], url)
            if sku != p["sku"]:
                p["sku"] = sku
                p.setdefault("_sources", {})["sku"] = f"{p['extracted_from']}:{key}" if key != "url" else "url"
    skus = [p["sku"] for p in products if p.get("sku")]
    shared: tuple[str | None, str | None] = (None, None)  # the main item's declared id, when its colours share it
    for p in products:  # an id shared by colour variants (the page's, the group's) is the group's, not an item's
        if p.get("sku") and skus.count(p["sku"]) > 1:
            if p is products[0]:
                shared = (p["sku"], (p.get("_sources") or {}).get("sku"))
            p["group_id"] = p.get("group_id") or p["sku"]
            own = [(k, v) for k, v in p.get("_ids") or [] if v != p["sku"] and sum(
                v in [w for _, w in q.get("_ids") or []] for q in products) == 1]
            p["sku"] = own[0][1] if own else None
            p.setdefault("_sources", {})["sku"] = f"{p['extracted_from']}:{own[0][0]}" if own else None
    for p in products:  # identity is decided: the item's own id at colour granularity (product_key's basis)
        p["variant_id"] = p.get("sku")
        if p["variant_id"]:
            p.setdefault("_sources", {})["variant_id"] = p["_sources"].get("sku")
    _state_colours(sel, products)
    _page_groups(sel, products, url, base)
    if products:
        _page_reference(sel, products, shared)
    index = _page_renditions(sel, html, base)
    out = []
    for p in products:
        p.pop("_ids", None)
        p.pop("_size", None)
        refused = list(p.pop("_images_refused", None) or [])
        p["image_urls"] = _absolute(p["image_urls"], base, refused)
        if not p["image_urls"] and rules and rules.images:
            p["image_urls"] = page_image_urls(sel, rules.images, base, refused)
        if not p["image_urls"] and p is products[0]:  # the page's own pictures of its main item
            p["image_urls"] = _absolute([replace_entities(u) for u in page_images(sel, p.get("title"))], base,
                                        refused)
            if p["image_urls"]:
                p.setdefault("_sources", {})["image_urls"] = "visible"
        p["image_urls"] = _full_size(p["image_urls"], index)
        # image references with a scheme other than http(s) (structured data's, and the page's <img> ones), in
        # their recorded form (a data: URI without its payload): listed after the others, so that the crawl
        # records each refused unsupported_scheme, unfetched
        p["image_urls"] += [u for u in refused if u not in p["image_urls"]]
        if p.get("brand") and page_title and p["brand"].lower() == page_title.lower():
            p["brand"] = None
        sources = p.pop("_sources", {})
        p.pop("offer_url", None)
        p["field_sources"] = [{"name": k, "value": sources[k]} for k in sorted(sources)
                              if k != "extracted_from" and sources[k] and p.get(k) not in (None, "", [])]
        out.append(p)
    return out


# what a colour item of the Shopify product JSON takes from the page's structured product (the JSON has no
# currency); its pictures only when the JSON ties none to it
_SHOP_FILLED = ("currency", "brand", "description", "material", "category_text")


def _has_colours(products: list[dict[str, Any]]) -> bool:
    """Whether the structured items already are one per colour (two colours or more stated)."""
    return len({_norm(p.get("color")) for p in products if p.get("color")}) > 1


def _page_reference(sel: Selector, products: list[dict[str, Any]], shared: tuple[str | None, str | None]) -> None:
    """Make the ``sku`` of the page's main item (``products[0]``), and of its other colours, the product reference
    the page states; in place.

    ``sku`` is the shop's reference of the product as the page states it: the code the page prints after a label
    ("Ref." / "SKU" / "Product code" / "Art.-Nr." …: ``pagetext.labelled_identifier``; a "Model #" is a
    manufacturer's number and is skipped), else the identifier chosen for the main item (``choose_identifier``:
    one the URL carries first) when the page's colours share it and it became their ``group_id`` (``shared``:
    ``(value, source)``, or Nones), else the item's own identifier. The page's reference is often not the
    item's own id: it may be the model's, shared by all its colours ("Purple - 7901/312", a URL's model number), or
    the code of the size the page shows first, which is why identity does not rest on it: ``variant_id``, decided
    before (``_collapse``, ``_colour_identity``, ``choose_identifier``, a shared id made the group's), stays the
    item's id at colour granularity and is what ``product_key`` hashes.

    The reference is the product's, so every colour of the main item (the items with its ``group_id``,
    ``_page_groups``) takes it, and one page gives all its colours one ``sku``; except when it is a colour's
    code, not the product's (one of the colours' own identifiers, or one of them with a size appended after a
    separator: ``T1-R-S`` of ``T1-R``): then only the main item takes it. The other products a page lists
    (recommendations, accessories: another ``group_id``, or none) keep their own."""
    main = products[0]
    ref, source = labelled_identifier(sel, model_numbers=False), "visible:label"
    if not ref and shared[0]:
        ref, source = shared
    if not ref:
        return
    siblings = [p for p in products[1:] if main.get("group_id") and p.get("group_id") == main["group_id"]]
    ids = {v for p in [main, *siblings] for v in (p.get("variant_id"), *(v for _, v in p.get("_ids") or []))
           if v and v != shared[0]}
    colour_level = any(ref == v or (ref.startswith(v) and ref[len(v)] in _SEP) for v in ids)
    for p in [main] + ([] if colour_level else siblings):
        if ref != p.get("sku"):
            p["sku"] = ref
            p.setdefault("_sources", {})["sku"] = source


def _page_groups(sel: Selector, products: list[dict[str, Any]], url: str, base: str) -> None:
    """Give the colour variants a page splits one product into a shared ``group_id`` where no source stated one;
    in place (source ``page-group:<how>``).

    The colours of one product on a page are its items with the same title (``_collapse`` has kept them apart
    because their colours, or their pictures, differ); items with other titles are other products (a
    recommendation, an accessory) and are not grouped with it, and an item alone keeps ``group_id`` None. A group
    without one takes, in order: the ``group_id`` one of its items carries (a ``ProductGroup``'s
    ``productGroupID``, an ``isVariantOf`` / ``inProductGroupWithID``, an id shared by the colours); the parent
    code the colours' ids share (the longest common prefix ending at a separator, four characters or more with a
    digit: ``84994776-611``, ``84994776-800`` → ``84994776``); the identifier in the page's canonical URL
    (``<link rel="canonical">``, else ``og:url``, else the page URL: ``…-12185160.html`` → ``12185160``,
    ``pagetext.url_identifier``); else that canonical URL's path and query (no host or port). The same page thus
    groups its colours the same way whether it is fetched live or replayed from another address."""
    by_title: dict[str, list[dict[str, Any]]] = {}
    for p in products:
        if _norm(p.get("title")):
            by_title.setdefault(_norm(p["title"]), []).append(p)
    page_url: str | None = None
    for items in by_title.values():
        if len(items) < 2 or all(p.get("group_id") for p in items):
            continue
        gid = next((p["group_id"] for p in items if p.get("group_id")), None)
        how = "item"
        if gid is None:
            gid, how = _common_parent([p.get("variant_id") for p in items]), "parent-id"
        if gid is None:
            page_url = page_url or _canonical_page_url(sel, url, base)
            gid, how = url_identifier(page_url), "url-id"
            if gid is None:  # the path and query alone: a replayed page served on another port groups alike
                parts = urlsplit(page_url)
                gid, how = parts.path + (f"?{parts.query}" if parts.query else ""), "url"
        for p in items:
            if not p.get("group_id"):
                p["group_id"] = gid
                p.setdefault("_sources", {})["group_id"] = f"page-group:{how}"


def _common_parent(ids: list[str | None]) -> str | None:
    """The longest common prefix of two or more distinct ids that ends at a separator of each, when it keeps four
    or more characters with a digit; None otherwise (an id missing, or nothing shared)."""
    values = list(dict.fromkeys(ids))
    if len(values) < 2 or not all(isinstance(v, str) and v for v in values):
        return None
    prefix = min(values, key=len)
    for v in values:
        while prefix and not v.startswith(prefix):
            prefix = prefix[:-1]
    while prefix and not all(len(v) > len(prefix) and v[len(prefix)] in _SEP for v in values):
        prefix = prefix[:-1]
    prefix = prefix.rstrip(_SEP)
    return prefix if len(prefix) >= 4 and re.search(r"\d", prefix) else None


_MAX_URL_CHARS = 2048


def _canonical_page_url(sel: Selector, url: str, base: str) -> str:
    """The page's own URL for itself: ``<link rel="canonical">``, else ``og:url``, when absolute http(s) (relative:
    against the page's base) and at most 2,048 characters; else the page URL; canonicalised (``canonical``)."""
    for href in (sel.xpath("//link[contains(concat(' ', translate(normalize-space(@rel), 'CANOICL', 'canoicl'), ' '),"
                           " ' canonical ')]/@href").get(),
                 sel.xpath("//meta[@property='og:url']/@content").get()):
        if href and href.strip():
            u = join_url(base, replace_entities(href.strip())) or ""
            if u.startswith(("http://", "https://")) and len(u) <= _MAX_URL_CHARS:
                return canonical(u)
    return canonical(url)


_CORE = ("title", "sku", "price", "currency", "availability", "image_urls")
_NOT_BUYABLE = ("OutOfStock", "SoldOut", "Discontinued")
_OLD_NEAR_PRICE = re.compile(r"(?:old|was|regular|original|strike|compare|rrp|list|before|crossed|prev)[-_]?price|"
                             r"price[-_]?(?:old|was|regular|original|strike|before|list|prev)")


def _old_price_markup(low_html: str) -> bool:
    """Whether a lower-cased page may show an old price: a ``<del>`` / ``<s>`` / ``<strike>`` element, or a class
    or id such as ``old-price`` / ``price-was`` / ``regularPrice`` (a cheap test before ``price_candidates``)."""
    if "<del" in low_html or "<s>" in low_html or "<s " in low_html or "<strike" in low_html:
        return True
    i = low_html.find("price")
    while i != -1:
        if _OLD_NEAR_PRICE.search(low_html, max(0, i - 9), i + 14):
            return True
        i = low_html.find("price", i + 5)
    return False


def _buy_box(sel: Selector, low_html: str, main: dict[str, Any]) -> dict[str, Any]:
    """Reconcile the main item's price and availability with the page's buy box (``pagetext``); returns the item.

    Trust rules, each recorded in ``field_sources``:

    1. *Sale price.* Structured data is trusted for the price, except when the page shows that very amount as an
       old price (struck through, or marked "was" / "regular" / "original"…) and never as a current one, while
       it shows a lower current price: then the structured price is the list price and the current one is the
       price (source ``visible:sale-price``).
    2. *Availability.* Structured availability is trusted, except that an enabled "add to cart" / "buy now"
       control in the buy box (``pagetext.buy_control``) makes an item that the structured data or the page's
       stock message calls ``OutOfStock`` / ``SoldOut``, or that has no availability, ``InStock`` (source
       ``visible:buy-control``): structured availability is often the default size's, and a shop that cannot
       sell the item does not offer to add it to the cart. A disabled or absent control changes nothing.
    3. *No price for what cannot be bought.* A price that only the visible page gave (no structured source) is
       dropped when the item is ``OutOfStock`` / ``SoldOut`` / ``Discontinued``: its buy box has no price, and
       the first price shown is another offer's (a marketplace's other sellers, a recommendation).
    """
    src = main.setdefault("_sources", {})
    if main.get("price") is not None and not str(src.get("price", "")).startswith("visible") \
            and _old_price_markup(low_html):
        shown = [(parse_price(text)[0], old) for text, old in price_candidates(sel)]
        olds = [a for a, old in shown if old and a is not None]
        currents = [a for a, old in shown if not old and a is not None]
        same = lambda a: abs(a - main["price"]) < 0.005  # noqa: E731
        if any(same(a) for a in olds) and not any(same(a) for a in currents) and currents \
                and currents[0] < main["price"]:
            main["price"] = currents[0]
            src["price"] = "visible:sale-price"
    if main.get("availability") in (None, "OutOfStock", "SoldOut") and buy_control(sel) is not None:
        main["availability"] = "InStock"
        src["availability"] = "visible:buy-control"
    if main.get("availability") in _NOT_BUYABLE and main.get("price") is not None \
            and str(src.get("price", "")).startswith("visible"):
        main["price"] = None
        if str(src.get("currency", "")).startswith("visible"):
            main["currency"] = None
    return main


def page_title_of(sel: Selector) -> str | None:
    """The page's ``<title>`` text, whitespace collapsed (a brand equal to it is template junk)."""
    t = sel.xpath("//title/text()").get()
    return re.sub(r"\s+", " ", t).strip() if t and t.strip() else None


def _order(products: list[dict[str, Any]], url: str) -> list[dict[str, Any]]:
    """The page's own item first: the one whose offer URL is the page URL (a colour variant selected by the URL),
    else document order."""
    if len(products) < 2:
        return products
    here = canonical(url)
    first = [p for p in products if p.get("offer_url") and canonical(join_url(url, p["offer_url"]) or "") == here]
    return first[:1] + [p for p in products if p not in first[:1]]


def main_product(products: list[dict[str, Any]], url: str | None = None) -> dict[str, Any] | None:
    """The item a product page is about: the first of ``extract_products`` (which puts it first); None when the
    page has no product."""
    return products[0] if products else None
