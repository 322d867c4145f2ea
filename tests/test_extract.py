"""Extraction of products from real saved pages and from the forms structured data takes."""

import json
from pathlib import Path

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
    assert p["image_urls"] == ["https://cdn.test/1.jpg"]


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


def test_price_parser_and_ids():
    assert parse_price("1.299,00 €") == (1299.0, "€")
    assert parse_price(15, "EUR") == (15.0, "EUR")
    a = product_key("s", "http://127.0.0.1:1234/p/1?b=2&a=1", None)
    b = product_key("s", "http://127.0.0.1:9999/p/1?a=1&b=2", None)
    assert a == b, "ids ignore host, port and query order"
    assert product_key("s", "http://x/p/1", "SKU1") == product_key("s", "http://y/other", "SKU1")
