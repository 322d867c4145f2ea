"""Extraction of products from real saved pages and from the forms structured data takes."""

import json
from pathlib import Path

import pytest

from lookbench_pipeline.config import LookRules, ProductRules
from lookbench_pipeline.extract import extract_look, extract_products, parse_price, product_key


def _page(realdata: Path, prefix: str) -> Path:
    return next((realdata / "pages").glob(f"{prefix}*.html"))


def test_real_jsonld_page_matches_ground_truth(realdata):
    gt = json.loads((realdata / "pages/peb_ground-truth.json").read_text())
    f = _page(realdata, "peb_zalando-ie_4f4a8f8ddd")
    truth = next(v for k, v in gt.items() if k.startswith("4f4a8f8ddd"))
    [p] = extract_products(f.read_bytes(), "http://127.0.0.1/x.html")
    assert p["brand"] == truth["brand"][0]
    assert p["sku"] == truth["sku"][0]
    assert p["price"] == float(truth["price"][0])
    assert p["currency"] == "EUR"
    assert p["extracted_from"] == "json-ld"
    assert p["image_urls"] and all(u.startswith("http") for u in p["image_urls"])


def test_real_microdata_page(realdata):
    f = _page(realdata, "peb_elkor-lv_04ba14498f")
    [p] = extract_products(f.read_bytes(), "http://127.0.0.1/x.html")
    assert (p["brand"], p["sku"], p["extracted_from"]) == ("CALVIN KLEIN", "545642356", "microdata")


def test_size_variants_collapse_to_one_item(realdata):
    f = _page(realdata, "peb_zara-com_5c1ec210b0")
    products = extract_products(f.read_bytes(), "http://127.0.0.1/x.html")
    assert len({p["title"] for p in products}) == len(products)


def test_page_without_structured_data_gives_nothing_or_rules(realdata):
    html = "<html><head><title>x</title></head><body><h1 class='t'>Red dress</h1><span class='p'>€ 12,50</span>" \
           "<img class='i' src='/a.jpg'></body></html>"
    assert extract_products(html, "http://shop.test/p/1") == []
    rules = ProductRules(title="h1.t::text", price="span.p::text", images="img.i::attr(src)")
    [p] = extract_products(html, "http://shop.test/p/1", rules)
    assert p["title"] == "Red dress" and p["price"] == 12.5 and p["image_urls"] == ["http://shop.test/a.jpg"]
    assert p["extracted_from"] == "rules"


def test_jsonld_graph_lowercase_type_nested_offers():
    ld = {"@context": "https://schema.org", "@graph": [
        {"@type": "WebPage", "name": "page"},
        {"@type": "product", "name": "Blue shirt", "brand": {"@type": "Brand", "name": "Acme"},
         "image": [{"@type": "ImageObject", "url": "//cdn.test/1.jpg"}, "data:image/gif;base64,AAAA"],
         "offers": [{"@type": "AggregateOffer", "lowPrice": "19.90", "priceCurrency": "GBP"}]}]}
    html = f"<html><head><script type='application/ld+json'>{json.dumps(ld)}</script></head></html>"
    [p] = extract_products(html, "https://shop.test/p")
    assert (p["title"], p["brand"], p["price"], p["currency"]) == ("Blue shirt", "Acme", 19.9, "GBP")
    # the data: URI is kept, after the fetchable URL, without its payload: the crawl records it unsupported_scheme
    assert p["image_urls"][0] == "https://cdn.test/1.jpg" and len(p["image_urls"]) == 2
    assert p["image_urls"][1].startswith("data:image/gif;base64,…#sha256=") and "AAAA" not in p["image_urls"][1]


def test_opengraph_product():
    html = ("<html><head><meta property='og:type' content='product'><meta property='og:title' content='Bag'>"
            "<meta property='og:image' content='https://cdn.test/b.jpg'>"
            "<meta property='product:price:amount' content='49.00'>"
            "<meta property='product:price:currency' content='USD'></head></html>")
    [p] = extract_products(html, "https://shop.test/bag")
    assert (p["title"], p["price"], p["currency"], p["extracted_from"]) == ("Bag", 49.0, "USD", "opengraph")


def test_look_block():
    html = ("<html><base href='https://shop.test/looks/'><body><img class='look-image' src='l1.jpg'>"
            "<a class='look-product' href='/p/1'>a</a><a class='look-product' href='../p/2'>b</a></body></html>")
    look = extract_look(html, "https://shop.test/looks/1", LookRules())
    assert look == {"image_url": "https://shop.test/looks/l1.jpg",
                    "product_urls": ["https://shop.test/p/1", "https://shop.test/p/2"]}


def test_page_image_references_of_other_schemes_are_kept_refused_not_lost():
    """<img> references a page names by file:, javascript:, ftp: are never fetchable, yet are kept on the item
    (product or look) in their recorded form, after the http(s) ones, so that the crawl records each refused
    unsupported_scheme instead of dropping it without a row; a data: placeholder of lazy loading is not a reference
    and stays out; a <base href> of another scheme is ignored (relative references resolve against the page)."""
    rules = ProductRules(title="h1::text", images="img.i")
    html = ("<html><body><h1>Linen shirt</h1><img class='i' src='https://cdn.test/a.jpg'>"
            "<img class='i' src='file:///etc/passwd'><img class='i' src='javascript:alert(1)'>"
            "<img class='i' src='data:image/gif;base64,R0lGOD' data-src='ftp://files.test/b.jpg'>"
            "<img class='i' src='data:image/gif;base64,R0lGOD'></body></html>")
    [p] = extract_products(html, "https://shop.test/p/1", rules)
    assert p["image_urls"] == ["https://cdn.test/a.jpg", "file:///etc/passwd", "javascript:alert(1)",
                               "ftp://files.test/b.jpg"]
    hostile_base = "<html><head><base href='file:///srv/'></head><body><h1>Shirt</h1><img class='i' src='a.jpg'>"
    [p] = extract_products(hostile_base, "https://shop.test/p/2", rules)
    assert p["image_urls"] == ["https://shop.test/p/a.jpg"], "a base of another scheme is ignored"
    look_page = hostile_base.replace("class='i'", "class='look-image'") + "<a class='look-product' href='/p/1'>"
    look = extract_look(look_page, "https://shop.test/l/1", LookRules())
    assert look["image_url"] == "https://shop.test/l/a.jpg"
    look = extract_look("<html><body><img class='look-image' src='file:///etc/passwd'>"
                        "<a class='look-product' href='/p/1'>a</a></body></html>", "https://shop.test/l/1", LookRules())
    assert look == {"image_url": "file:///etc/passwd", "product_urls": ["https://shop.test/p/1"]}
    assert extract_look("<html><body><img class='look-image' src='data:image/gif;base64,R0lGOD'>"
                        "<a class='look-product' href='/p/1'>a</a></body></html>", "https://shop.test/l/2",
                        LookRules()) is None, "a lone placeholder names no picture"


def test_a_malformed_image_or_link_costs_that_reference_not_the_page():
    """`http://[::1/x.jpg` (an unclosed IPv6 bracket) makes urllib raise ValueError: one such reference in the
    JSON-LD, an <img>, a srcset, a canonical link or a look block is kept in its written form to be recorded (the
    crawl never requests it), and the page's product and look are extracted as if it were not there."""
    ld = {"@type": "Product", "name": "Coat", "sku": "C1", "image": ["https://cdn.test/a.jpg", "http://[::1/b.jpg"],
          "offers": {"@type": "Offer", "price": "10", "priceCurrency": "EUR"}}
    html = (f"<html><head><script type='application/ld+json'>{json.dumps(ld)}</script>"
            "<link rel='canonical' href='http://[::1/p'></head><body><img src='http://[::1/c.jpg' "
            "srcset='http://[::1/d.jpg 2x'><img class='look-image' src='http://[::1/l.jpg'>"
            "<a class='look-product' href='http://[::1/p'>p</a><a class='look-product' href='/p/2'>p</a></body></html>")
    [p] = extract_products(html, "https://shop.test/p/1")
    assert (p["sku"], p["image_urls"]) == ("C1", ["https://cdn.test/a.jpg", "http://[::1/b.jpg"])
    assert extract_look(html, "https://shop.test/p/1", LookRules()) == {
        "image_url": "http://[::1/l.jpg", "product_urls": ["https://shop.test/p/2"]}


def test_a_placeholder_of_another_scheme_gives_way_to_the_lazy_loaded_picture():
    """`src="about:blank"` / `javascript:void(0)` with the picture in `data-src`: the picture is taken (a look, a
    product by an attribute rule); only an element naming nothing fetchable gives its hostile value, to be recorded
    refused. An element without the attribute does not shift the others' values."""
    look = extract_look("<img class='look-image' src='about:blank' data-src='https://cdn.test/x.jpg'>"
                        "<a class='look-product' href='/p/1'>a</a>", "https://shop.test/l", LookRules())
    assert look["image_url"] == "https://cdn.test/x.jpg"
    look = extract_look("<img class='look-image'><img class='look-image' src='/b.jpg'>"
                        "<a class='look-product' href='/p/1'>a</a>", "https://shop.test/l", LookRules())
    assert look["image_url"] == "https://shop.test/b.jpg"
    rules = ProductRules(title="h1::text", images="img.i::attr(src)")
    [p] = extract_products("<h1>Shirt</h1><img class='i' src='javascript:void(0)' data-src='/c.jpg'>"
                           "<img class='i' src='javascript:alert(1)'>", "https://shop.test/p", rules)
    assert p["image_urls"] == ["https://shop.test/c.jpg", "javascript:alert(1)"]


def test_price_parser_and_ids():
    assert parse_price("1.299,00 €") == (1299.0, "€")
    assert parse_price(15, "EUR") == (15.0, "EUR")
    a = product_key("s", "http://127.0.0.1:1234/p/1?b=2&a=1", None)
    b = product_key("s", "http://127.0.0.1:9999/p/1?a=1&b=2", None)
    assert a == b, "ids ignore host, port and query order"
    assert product_key("s", "http://x/p/1", "SKU1") == product_key("s", "http://y/other", "SKU1")


def test_lenient_jsonld():
    from lookbench_pipeline.extract import parse_jsonld

    raw = """//<![CDATA[
    {"@context": "https://schema.org", "@type": "Product", "name": "Line\tbreak
    shirt", "offers": {"price": "10.00", "priceCurrency": "EUR",},}
    //]]>"""
    d = parse_jsonld(raw)
    assert d["name"].startswith("Line") and d["offers"]["price"] == "10.00"
    html = f"<html><head><script type='application/LD+JSON'>{raw}</script></head></html>"
    [p] = extract_products(html, "https://shop.test/p")
    assert p["price"] == 10.0 and p["extracted_from"] == "json-ld"
    assert parse_jsonld("{not json at all") is None


def test_list_of_products_in_jsonld():
    ld = [{"@type": "Product", "name": "A", "sku": "1"}, {"@type": "Product", "name": "B", "sku": "2"}]
    html = f"<script type='application/ld+json'>{json.dumps(ld)}</script>"
    assert {p["sku"] for p in extract_products(html, "https://shop.test/")} == {"1", "2"}


def test_srcset_and_lazy_images():
    from lookbench_pipeline.extract import parse_srcset

    cdn = "https://cdn.test/image/upload/w_400,h_600,c_fill/shirt.jpg"
    cdn2 = "https://cdn.test/image/upload/w_1200,h_1800,c_fill/shirt.jpg"
    assert parse_srcset(f"{cdn} 400w, {cdn2} 1200w") == [(cdn, 400.0), (cdn2, 1200.0)]
    html = (f"<base href='https://shop.test/women/'><img class='pi' src='data:image/gif;base64,R0lGOD' "
            f"data-srcset='{cdn} 400w, {cdn2} 1200w'><img class='pi' data-src='//cdn.test/b.jpg' "
            f"src='data:image/png;base64,xx'><img class='pi' src='c.jpg'>")
    rules = ProductRules(title="title::text", images="img.pi")
    [p] = extract_products(f"<title>Shirt</title>{html}", "https://shop.test/p/1", rules)
    assert p["image_urls"] == [cdn2, "https://cdn.test/b.jpg", "https://shop.test/women/c.jpg"]


def test_charset_disagreement_decoded_right():
    from lookbench_pipeline.extract import decode_html

    page = "<html><head><meta charset='utf-8'><title>Crème brûlée dress</title></head></html>"
    text, enc = decode_html(page.encode("utf-8"), "text/html; charset=iso-8859-1")
    assert "Crème brûlée" in text and enc == "utf-8"
    page2 = "<html><head><meta charset='iso-8859-1'><title>Crème</title></head></html>"
    text2, enc2 = decode_html(page2.encode("latin-1"), "text/html; charset=utf-8")
    assert "Crème" in text2 and enc2 in ("iso-8859-1", "latin-1", "cp1252")
    text3, _ = decode_html(page.encode("utf-8"), None)
    assert "Crème" in text3


def test_xpath_rules_and_rdfa():
    html = ("<html><body><div id='p'><span>Green skirt</span><b>€ 30</b></div>"
            "<div vocab='https://schema.org/' typeof='Product'><span property='name'>RDFa coat</span>"
            "<span property='sku'>R-1</span></div></body></html>")
    rules = ProductRules(title="//div[@id='p']/span/text()", price="//div[@id='p']/b/text()")
    products = extract_products(html, "https://shop.test/x", rules)
    assert [(p["title"], p["extracted_from"]) for p in products] == [("RDFa coat", "rdfa")]
    no_rdfa = html.split("<div vocab")[0] + "</body></html>"
    [p] = extract_products(no_rdfa, "https://shop.test/x", rules)
    assert (p["title"], p["price"], p["extracted_from"]) == ("Green skirt", 30.0, "rules")


@pytest.mark.parametrize("body_enc, header, meta, expected_enc", [
    # a server's default ISO-8859-1 header on a UTF-8 page with no <meta charset>: the bytes are UTF-8
    ("utf-8", "text/html; charset=ISO-8859-1", None, "utf-8"),
    # a page re-encoded to UTF-8 that kept its old <meta charset>
    ("utf-8", None, "windows-1252", "utf-8"),
    # a real legacy page: its declaration is honoured
    ("cp1252", None, "windows-1252", "cp1252"),
    ("cp1252", "text/html; charset=utf-8", "iso-8859-1", "cp1252"),
    # the default header yields to the page's own, more specific <meta charset>
    ("gbk", "text/html; charset=ISO-8859-1", "gbk", "gb18030"),  # WHATWG: gbk is read as gb18030
    ("shift_jis", "text/html", "shift_jis", "cp932"),
    # a specific header wins over the page's meta when the bytes decode under it
    ("koi8-r", "text/html; charset=koi8-r", "windows-1251", "koi8-r"),
])
def test_one_decoding_rule_for_page_bytes(body_enc, header, meta, expected_enc):
    from lookbench_pipeline.extract import decode_html

    title = {"gbk": "连衣裙", "shift_jis": "ワンピース", "koi8-r": "Платье"}.get(body_enc, "Pull côtelé")
    head = f"<meta charset='{meta}'>" if meta else ""
    ld = json.dumps({"@context": "https://schema.org", "@type": "Product", "name": title, "sku": "P1"},
                    ensure_ascii=False)
    body = (f"<html><head>{head}<title>{title}</title><script type='application/ld+json'>{ld}</script></head>"
            f"<body>{title}</body></html>").encode(body_enc)
    text, enc = decode_html(body, header)
    assert title in text and enc == expected_enc
    if header is None:  # a saved page given as bytes is decoded as the crawl decodes it
        assert extract_products(body, "https://s.test/p")[0]["title"] == title


def test_decoding_never_raises_on_hostile_declarations():
    from lookbench_pipeline.extract import decode_html

    for header, meta in (("text/html; charset=no-such-codec", "x-unknown"), ("text/html; charset=utf-16", None),
                         (None, "utf-7"), ("text/html; charset=", "")):
        body = f"<meta charset='{meta}'><title>Robe \xe9t\xe9</title>".encode("latin-1") + b"\xff\xfe\x00"
        text, enc = decode_html(body, header)
        assert isinstance(text, str) and enc
    text, enc = decode_html("<title>Robe</title>".encode("utf-16"), "text/html; charset=utf-16")
    assert "Robe" in text
