"""Product pages of the common shop platforms, and hostile ones, written here as small synthetic pages modelled on
how each platform marks a product up (no saved page is copied): what a user of the benchmark expects from each —
one item per colour with its own pictures, sizes of one colour one item, price, currency and availability right."""

import json

from lookbench_pipeline.extract import extract_products

LD = "<script type='application/ld+json'>{}</script>"


def test_legacy_charset_bytes_are_decoded_as_the_page_declares():
    """A windows-1252 page given as bytes: its declared charset is honoured (decoding it as UTF-8 turned "côtelé"
    into "c�tel�"); bytes that are valid UTF-8 stay UTF-8, whatever a stale ``<meta>`` says."""
    node = {"@context": "https://schema.org", "@type": "Product", "name": "Pull côtelé", "sku": "P1",
            "image": "https://cdn.test/p1.jpg", "offers": {"@type": "Offer", "price": "59", "priceCurrency": "EUR"}}
    page = "<html><head>META" + LD.format(json.dumps(node, ensure_ascii=False)) + "</head><body><h1>Pull côtelé</h1>"
    for meta in ('<meta charset="windows-1252">',
                 '<meta http-equiv="Content-Type" content="text/html; charset=iso-8859-1">'):
        legacy = page.replace("META", meta).encode("cp1252")
        assert extract_products(legacy, "https://s.test/p1")[0]["title"] == "Pull côtelé"
    stale = page.replace("META", '<meta charset="iso-8859-1">').encode("utf-8")
    assert extract_products(stale, "https://s.test/p1")[0]["title"] == "Pull côtelé"


def _shopify_page(ld: bool = True) -> str:
    """A Shopify theme's product page (Dawn's shape): JSON-LD with one offer per variant and no colour, the
    analytics ``meta``, and the theme's ``product | json`` (options as names, prices in cents, each variant's
    ``featured_image``): colours Sand (in stock) and Navy (sold out), sizes S and M."""
    variants, vid = [], 100
    for colour in ("Sand", "Navy"):
        for size in ("S", "M"):
            vid += 1
            variants.append({"id": vid, "title": f"{colour} / {size}", "option1": colour, "option2": size,
                             "sku": f"LS-{colour[:3].upper()}-{size}", "available": colour == "Sand", "price": 4990,
                             "featured_image": {"src": f"//shop.test/cdn/shop/files/ls-{colour.lower()}.jpg?v=1"}})
    product = {"id": 777, "title": "Linen shirt", "handle": "linen-shirt", "vendor": "Acme",
               "options": ["Color", "Size"], "variants": variants, "price": 4990,
               "images": ["//shop.test/cdn/shop/files/ls-sand.jpg?v=1", "//shop.test/cdn/shop/files/ls-navy.jpg?v=1"]}
    meta = {"product": {"id": 777, "vendor": "Acme", "variants": [
        {"id": v["id"], "price": 4990, "name": f"Linen shirt - {v['title']}", "sku": v["sku"]} for v in variants]},
        "page": {"pageType": "product", "resourceType": "product", "resourceId": 777}}
    node = {"@context": "http://schema.org/", "@type": "Product", "name": "Linen shirt", "brand": {"name": "Acme"},
            "image": ["https://shop.test/cdn/shop/files/ls-sand.jpg?v=1&width=1920"],
            "offers": [{"@type": "Offer", "sku": v["sku"], "price": 49.90, "priceCurrency": "EUR",
                        "availability": "http://schema.org/" + ("InStock" if v["available"] else "OutOfStock"),
                        "url": f"https://shop.test/products/linen-shirt?variant={v['id']}"} for v in variants]}
    return ("<html><head><script>window.ShopifyAnalytics = window.ShopifyAnalytics || {}; window.ShopifyAnalytics"
            ".meta = window.ShopifyAnalytics.meta || {}; window.ShopifyAnalytics.meta.currency = 'EUR'; "
            f"var meta = {json.dumps(meta)}; for (var attr in meta) "
            "{ window.ShopifyAnalytics.meta[attr] = meta[attr]; }</script>"
            + (LD.format(json.dumps(node)) if ld else "") + "</head><body><h1>Linen shirt</h1>"
            f"<script type='application/json' data-product-json>{json.dumps(product)}</script></body></html>")


def test_shopify_theme_product_json_colours_are_items_of_their_own():
    """The colours of a Shopify page are stated only in the theme's product JSON (JSON-LD lists one offer per
    variant, no colour): one item per colour, with its own picture, sku, price (cents / 100) and stock, the
    JSON-LD's currency, the product id as group; sizes of one colour are one item. The colour first is the one
    the page shows: the ``?variant=`` one, else the first available."""
    for ld in (True, False):
        items = extract_products(_shopify_page(ld), "https://shop.test/products/linen-shirt")
        assert [(p["color"], p["sku"], p["price"], p["availability"], p["group_id"]) for p in items] == [
            ("Sand", "LS-SAN-S", 49.9, "InStock", "777"), ("Navy", "LS-NAV-S", 49.9, "OutOfStock", "777")]
        assert [p["image_urls"] for p in items] == [["https://shop.test/cdn/shop/files/ls-sand.jpg?v=1"],
                                                    ["https://shop.test/cdn/shop/files/ls-navy.jpg?v=1"]]
        assert all(p["currency"] == "EUR" and p["title"] == "Linen shirt" for p in items)
    navy = extract_products(_shopify_page(), "https://shop.test/products/linen-shirt?variant=104")
    assert [(p["color"], p["availability"]) for p in navy] == [("Navy", "OutOfStock"), ("Sand", "InStock")]


def test_shopify_product_json_of_another_product_is_not_the_page_s():
    """A product JSON whose handle is not the URL's and whose title is not the page product's (a quick view of a
    recommendation) leaves the page's item alone; so does broken JSON."""
    page = _shopify_page().replace('"handle": "linen-shirt"', '"handle": "wool-coat"').replace(
        '"title": "Linen shirt", "handle"', '"title": "Wool coat", "handle"')
    items = extract_products(page, "https://shop.test/products/linen-shirt")
    assert len(items) == 1 and items[0]["title"] == "Linen shirt" and items[0]["color"] is None
    broken = _shopify_page().replace('"option1": "Navy"', '"option1": Navy,,')
    assert len(extract_products(broken, "https://shop.test/products/linen-shirt")) == 1


def _woo_page(variations: object) -> str:
    """A WooCommerce variable product: JSON-LD (an ``AggregateOffer``, comma decimals, no colour) and the
    variations form, its colour select labelling the slugs, "dark-blue" preselected."""
    import html

    node = {"@context": "https://schema.org/", "@graph": [{"@type": "Product", "name": "Wool sweater", "sku": "WS",
            "image": "https://wp.test/wp-content/uploads/ws-black.jpg", "offers": [{
                "@type": "AggregateOffer", "lowPrice": "39,50", "highPrice": "39,50", "offerCount": 4,
                "priceCurrency": "EUR", "availability": "http://schema.org/InStock"}]}]}
    return (f"<html><head>{LD.format(json.dumps(node))}</head><body><h1 class='product_title'>Wool sweater</h1>"
            f"<form class='variations_form cart' data-product_id='12' data-product_variations='"
            f"{html.escape(json.dumps(variations), quote=True)}'><select name='attribute_pa_color'>"
            "<option value=''>Choose</option><option value='black'>Black</option>"
            "<option value='dark-blue' selected='selected'>Dark Blue</option></select></form></body></html>")


def test_woocommerce_variations_form_colours_are_items_of_their_own():
    """A WooCommerce page states its colours only in the variations form: one item per colour, labelled as the
    select shows it, with its own sku, stock and full-size picture (``full_src``, not the 600 px ``src`` or the
    thumbnail), the JSON-LD's currency; sizes of one colour are one item; the preselected colour first."""
    variations = [{"attributes": {"attribute_pa_color": c, "attribute_pa_size": s}, "variation_id": n,
                   "sku": f"WS-{c}-{s}", "display_price": 39.5, "is_in_stock": c == "black",
                   "image": {"full_src": f"https://wp.test/wp-content/uploads/ws-{c}.jpg",
                             "src": f"https://wp.test/wp-content/uploads/ws-{c}-600x600.jpg",
                             "thumb_src": f"https://wp.test/wp-content/uploads/ws-{c}-100x100.jpg"}}
                  for n, (c, s) in enumerate([(c, s) for c in ("black", "dark-blue") for s in ("s", "m")])]
    items = extract_products(_woo_page(variations), "https://wp.test/product/wool-sweater/")
    assert [(p["color"], p["sku"], p["price"], p["currency"], p["availability"], p["group_id"]) for p in items] == [
        ("Dark Blue", "WS-dark-blue-s", 39.5, "EUR", "OutOfStock", "12"), ("Black", "WS-black-s", 39.5, "EUR",
                                                                          "InStock", "12")]
    assert [p["image_urls"] for p in items] == [["https://wp.test/wp-content/uploads/ws-dark-blue.jpg"],
                                                ["https://wp.test/wp-content/uploads/ws-black.jpg"]]
    black = extract_products(_woo_page(variations), "https://wp.test/product/wool-sweater/?attribute_pa_color=black")
    assert black[0]["color"] == "Black"


def test_woocommerce_variations_without_their_own_sku_get_a_variant_id_per_colour():
    """Variations that carry no sku of their own (WooCommerce's inherit the parent's: none, or the parent's
    repeated) share the page's sku, which becomes the group's: each colour's own identifier is then its first
    variation's ``variation_id``, a distinct ``variant_id`` per colour (it was None for every colour)."""
    for sku in ({}, {"sku": "WS"}):
        variations = [{"attributes": {"attribute_pa_color": c, "attribute_pa_size": s}, "variation_id": n,
                       "display_price": 39.5, "is_in_stock": True, **sku}
                      for n, (c, s) in enumerate([(c, s) for c in ("black", "dark-blue") for s in ("s", "m")], 101)]
        items = extract_products(_woo_page(variations), "https://wp.test/product/wool-sweater/")
        assert [(p["color"], p["variant_id"]) for p in items] == [("Dark Blue", "103"), ("Black", "101")], sku


def test_woocommerce_form_without_colours_or_with_hostile_json_leaves_the_item_alone():
    """Sizes only, variations loaded later (``false``), broken JSON, a hostile attribute name: the one item."""
    sizes = [{"attributes": {"attribute_pa_size": s}, "sku": f"WS-{s}", "display_price": 39.5} for s in "SM"]
    hostile = [{"attributes": {"attribute_pa_color']/x|//*[('": c}, "sku": c} for c in ("a", "b")]
    for variations in (sizes, False, "[{,", hostile):
        page = _woo_page(variations).replace('"[{,"', "[{,")
        items = extract_products(page, "https://wp.test/product/wool-sweater/")
        assert [(p["title"], p["sku"], p["price"], p["color"]) for p in items] == [("Wool sweater", "WS", 39.5, None)]


def test_availability_and_price_as_platforms_write_them():
    """``availability`` as http / https IRIs, short names, lower case and a compact IRI (``schema:OutOfStock``,
    which was read as no availability at all); prices with comma decimals, thousands separators, a currency sign
    or code in the amount and no ``priceCurrency``."""
    def item(price, availability):
        node = {"@context": "https://schema.org", "@type": "Product", "name": "Tee", "sku": "T1",
                "image": "https://cdn.test/t.jpg", "offers": {"@type": "Offer", "price": price,
                                                              "availability": availability}}
        return extract_products(LD.format(json.dumps(node)) + "<h1>Tee</h1>", "https://s.test/p/t1")[0]

    for written, short in (("http://schema.org/InStock", "InStock"), ("https://schema.org/InStock", "InStock"),
                           ("InStock", "InStock"), ("instock", "InStock"), ("schema:OutOfStock", "OutOfStock"),
                           ("http://schema.org/OutOfStock", "OutOfStock"), ("schema:SoldOut", "SoldOut"),
                           ("https://schema.org/PreOrder", "PreOrder")):
        assert item("10", written)["availability"] == short, written
    for written, price, currency in (("1.234,56", 1234.56, None), ("1,234.56", 1234.56, None), ("12,5", 12.5, None),
                                     ("49.90 EUR", 49.9, "EUR"), ("1 299,00", 1299.0, None), (49.9, 49.9, None)):
        assert (item(written, "InStock")["price"], item(written, "InStock")["currency"]) == (price, currency), written


def _magento_page(config: object) -> str:
    """A Magento 2 configurable product: microdata Product (no colour), an ``og:image`` of the small cached
    rendition, and the swatch renderer's ``jsonConfig`` in ``text/x-magento-init``: colours Black and Red, two
    sizes each, each child with its cached thumbnail, medium and full-size picture."""
    init = {"[data-role=swatch-options]": {"Magento_Swatches/js/swatch-renderer": {"jsonConfig": config,
                                                                                   "jsonSwatchConfig": {}}}}
    return ("<html><head><meta property='og:type' content='product'><meta property='og:title' content='Linen shirt'>"
            "<meta property='og:image' content='https://m2.test/media/catalog/product/cache/s/b.jpg'></head><body>"
            "<div itemscope itemtype='http://schema.org/Product'><h1 itemprop='name'>Linen shirt</h1>"
            "<div itemprop='sku'>LS100</div><div itemprop='offers' itemscope itemtype='http://schema.org/Offer'>"
            "<meta itemprop='price' content='59,00'><meta itemprop='priceCurrency' content='EUR'>"
            "<link itemprop='availability' href='http://schema.org/InStock'></div></div>"
            f"<script type='text/x-magento-init'>{json.dumps(init)}</script></body></html>")


def _magento_config() -> dict:
    children = {"101": ("black", "166"), "102": ("black", "167"), "103": ("red", "166"), "104": ("red", "167")}
    return {"productId": "100", "prices": {"finalPrice": {"amount": 59}},
            "attributes": {
                "93": {"id": "93", "code": "color", "label": "Color", "options": [
                    {"id": "49", "label": "Black", "products": ["101", "102"]},
                    {"id": "57", "label": "Red", "products": ["103", "104"]}]},
                "144": {"id": "144", "code": "size", "label": "Size", "options": [
                    {"id": "166", "label": "S", "products": ["101", "103"]},
                    {"id": "167", "label": "M", "products": ["102", "104"]}]}},
            "optionPrices": {pid: {"finalPrice": {"amount": 59 if c == "black" else 49}} for pid, (c, _) in
                             children.items()},
            "images": {pid: [{"thumb": f"https://m2.test/media/catalog/product/cache/t/{c}.jpg",
                              "img": f"https://m2.test/media/catalog/product/cache/m/{c}.jpg",
                              "full": f"https://m2.test/media/catalog/product/{c}.jpg", "isMain": True}]
                       for pid, (c, _) in children.items()},
            "index": {pid: {"93": "49" if c == "black" else "57", "144": s} for pid, (c, s) in children.items()}}


def test_magento_configurable_colours_are_items_of_their_own():
    """A Magento 2 page states its colours only in the configurable ``jsonConfig``: one item per colour with its
    own price and full-size picture (not the og:image's cached rendition), its first child's id as its own id,
    the product id as group, the printed reference as sku; sizes of one colour are one item."""
    items = extract_products(_magento_page(_magento_config()), "https://m2.test/linen-shirt.html")
    assert [(p["color"], p["sku"], p["variant_id"], p["price"], p["currency"], p["group_id"]) for p in items] == [
        ("Black", "LS100", "101", 59.0, "EUR", "100"), ("Red", "LS100", "103", 49.0, "EUR", "100")]
    assert [p["image_urls"] for p in items] == [["https://m2.test/media/catalog/product/black.jpg"],
                                                ["https://m2.test/media/catalog/product/red.jpg"]]


def test_magento_config_without_colours_or_broken_leaves_the_item_alone():
    sizes = _magento_config()
    del sizes["attributes"]["93"]
    for page in (_magento_page(sizes), _magento_page(_magento_config()).replace('"jsonConfig": {', '"jsonConfig": {,'),
                 _magento_page({"attributes": "x"}), _magento_page([1] * 3)):
        items = extract_products(page, "https://m2.test/linen-shirt.html")
        assert [(p["title"], p["sku"], p["color"]) for p in items] == [("Linen shirt", "LS100", None)]


def test_hostile_pages_are_read_without_harm():
    """What already held, kept: a ``ProductGroup`` varying by colour and size is one item per colour with its
    own full-size picture (``data-srcset`` / ``data-src`` renditions beside a small one, relative to ``<base
    href>``); ``javascript:`` / ``data:`` image references are never fetched as pictures; deeply nested and huge
    JSON in scripts, and broken JSON-LD, neither raise nor make an item."""
    group = {"@context": "https://schema.org/", "@type": "ProductGroup", "name": "Parka", "productGroupID": "PK1",
             "variesBy": ["https://schema.org/color", "https://schema.org/size"],
             "offers": {"@type": "Offer", "price": "199,00", "priceCurrency": "EUR", "availability": "InStock"},
             "hasVariant": [{"@type": "Product", "sku": f"PK1-{c[:3].upper()}-{s}", "color": c, "size": s,
                             "image": f"img/pk1-{c.lower()}_200x.jpg"} for c in ("Olive", "Black") for s in "SM"]}
    page = ("<html><head><base href='https://cdn.test/shop/'>" + LD.format(json.dumps(group)) + "</head><body>"
            "<h1>Parka</h1><img src='img/pk1-olive_200x.jpg' data-srcset='img/pk1-olive_200x.jpg 200w, "
            "img/pk1-olive_2000x.jpg 2000w'><img src='data:image/gif;base64,R0lGOD=' "
            "data-src='img/pk1-black_2000x.jpg'></body></html>")
    items = extract_products(page, "https://s.test/products/parka")
    assert [(p["color"], p["group_id"], p["price"], p["image_urls"]) for p in items] == [
        ("Olive", "PK1", 199.0, ["https://cdn.test/shop/img/pk1-olive_2000x.jpg"]),
        ("Black", "PK1", 199.0, ["https://cdn.test/shop/img/pk1-black_2000x.jpg"])]

    node = {"@context": "https://schema.org", "@type": "Product", "name": "Tee", "sku": "T1",
            "image": ["javascript:alert(1)", "data:image/png;base64,AAAA", "t-big.jpg"],
            "offers": {"@type": "Offer", "price": "10", "priceCurrency": "USD"}}
    page = "<html><head><base href='https://cdn.test/a/'>" + LD.format(json.dumps(node)) + "</head></html>"
    urls = extract_products(page, "https://s.test/p/t1")[0]["image_urls"]
    assert urls[0] == "https://cdn.test/a/t-big.jpg" and not any(u.startswith(("http", "https")) for u in urls[1:])

    deep = "[" * 100_000 + "]" * 100_000
    huge = json.dumps({"variants": [{"id": n, "option1": "x" * 50} for n in range(40_000)]})
    for page in (LD.format(deep) + f"<script>var s = {deep};</script><h1>Tee</h1>",
                 LD.format('{"@type": "Product", "name": "Tee",, "offers": {"price": "10"}') + "<h1>Tee</h1>",
                 f"<script type='application/json' data-product-json>{huge}</script><h1>Tee</h1>"):
        assert extract_products(page, "https://s.test/products/tee") == []
