"""Item identity, full-size images and the fallbacks of extraction (issue: right items from real shop pages).

Each test builds the minimal input of one defect seen on real pages; the last ones run on the saved real pages.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from scrapy.http import HtmlResponse, Request

from lookbench_pipeline.config import LookRules
from parsel import Selector

from lookbench_pipeline.extract import (choose_identifier, extract_look, extract_products, main_product,
                                        parse_jsonld_block, parse_price, product_key)
from lookbench_pipeline.pagetext import labelled_identifier, normalise_availability, url_identifier, visible_product
from lookbench_pipeline.renditions import RenditionIndex, is_full_size, rendition

ROOT = Path(__file__).resolve().parents[1]


def _ld(*blocks) -> str:
    scripts = "".join(f"<script type='application/ld+json'>{b if isinstance(b, str) else json.dumps(b)}</script>"
                      for b in blocks)
    return f"<html><head><title>Shop</title>{scripts}</head><body></body></html>"


def test_colour_variants_in_one_graph_are_two_items():
    page = _ld({"@context": "https://schema.org", "@graph": [
        {"@type": "Product", "name": "S", "color": "Green", "image": "https://cdn.test/g.jpg"},
        {"@type": "Product", "name": "S", "color": "Black", "image": "https://cdn.test/b.jpg"}]})
    products = extract_products(page, "https://shop.test/p/s")
    assert [(p["color"], p["image_urls"]) for p in products] == [
        ("Green", ["https://cdn.test/g.jpg"]), ("Black", ["https://cdn.test/b.jpg"])]
    ids = {product_key("shop", "https://shop.test/p/s", p["sku"], p["color"]) for p in products}
    assert len(ids) == 2  # distinct product ids downstream, although the page and the (missing) sku are shared


def test_product_group_variants_one_item_per_colour_sizes_merged():
    group = {"@context": "https://schema.org", "@type": "ProductGroup", "name": "Tee", "productGroupID": "T1",
             "brand": {"@type": "Brand", "name": "Acme"}, "variesBy": ["size", "color"], "hasVariant": [
                 {"@type": "Product", "sku": "T1-R-S", "color": "Red", "size": "S", "image": "https://c.test/r.jpg",
                  "offers": {"@type": "Offer", "price": "10", "availability": "https://schema.org/OutOfStock"}},
                 {"@type": "Product", "sku": "T1-R-M", "color": "Red", "size": "M", "image": "https://c.test/r.jpg",
                  "offers": {"@type": "Offer", "price": "10", "availability": "https://schema.org/InStock"}},
                 {"@type": "Product", "sku": "T1-B-S", "color": "Blue", "size": "S", "image": "https://c.test/b.jpg",
                  "offers": {"@type": "Offer", "price": "12", "availability": "http://schema.org/SoldOut"}}]}
    products = extract_products(_ld(group), "https://shop.test/tee")
    # each colour's id is its own, not its first size's: the size cut off its sku (identity does not depend on
    # which sizes the page lists)
    assert [(p["color"], p["sku"], p["group_id"], p["brand"], p["availability"]) for p in products] == [
        ("Red", "T1-R", "T1", "Acme", "InStock"), ("Blue", "T1-B", "T1", "Acme", "SoldOut")]
    assert products[1]["image_urls"] == ["https://c.test/b.jpg"] and products[1]["price"] == 12.0


def test_offer_colours_split_and_variant_of_group():
    node = {"@type": "Product", "name": "Bag", "sku": "BAG", "offers": [
        {"@type": "Offer", "price": "30", "itemOffered": {"@type": "Product", "color": "Tan", "sku": "BAG-T",
                                                          "image": "https://c.test/t.jpg"}},
        {"@type": "Offer", "price": "31", "itemOffered": {"@type": "Product", "color": "Navy", "sku": "BAG-N",
                                                          "image": "https://c.test/n.jpg"}}]}
    products = extract_products(_ld(node), "https://shop.test/bag")
    assert [(p["color"], p["sku"], p["price"], p["image_urls"]) for p in products] == [
        ("Tan", "BAG-T", 30.0, ["https://c.test/t.jpg"]), ("Navy", "BAG-N", 31.0, ["https://c.test/n.jpg"])]
    assert {p["group_id"] for p in products} == {"BAG"}
    v = {"@type": "Product", "name": "Cap", "sku": "C-1", "isVariantOf": {"@type": "ProductGroup",
                                                                         "productGroupID": "CAP"}}
    assert extract_products(_ld(v), "https://shop.test/cap")[0]["group_id"] == "CAP"


def test_same_product_through_two_syntaxes_is_one_item():
    html = ("<html><head><script type='application/ld+json'>" + json.dumps(
        {"@type": "Product", "name": "Coat", "color": "Camel", "image": "https://c.test/c.jpg"}) +
        "</script></head><body><div itemscope itemtype='https://schema.org/Product'>"
        "<span itemprop='name'>Coat</span><meta itemprop='sku' content='CO-1'></div></body></html>")
    [p] = extract_products(html, "https://shop.test/coat")
    assert (p["color"], p["sku"]) == ("Camel", "CO-1")


def test_thumbnail_replaced_by_the_largest_rendition_on_the_page():
    small = "https://img.test/article/abc.jpg?imwidth=103"
    page = _ld({"@type": "Product", "name": "Dress", "sku": "D1", "image": [small]}).replace(
        "<body></body>", "<body><img src='https://img.test/article/abc.jpg?imwidth=103' srcset="
        "'https://img.test/article/abc.jpg?imwidth=762 762w, https://img.test/article/abc.jpg?imwidth=1800 1800w'>"
        "<script>var z = {\"zoom\": \"https:\\/\\/img.test\\/article\\/abc.jpg?imwidth=2400&filter=packshot\"}"
        "</script></body>")
    [p] = extract_products(page, "https://shop.test/d1")
    assert p["image_urls"] == ["https://img.test/article/abc.jpg?imwidth=2400&filter=packshot"]
    assert not is_full_size(small) and is_full_size(p["image_urls"][0])


def test_renditions_collapse_and_shopify_suffix():
    assert rendition("https://cdn.test/files/shirt_200x.jpg?v=1") == ("https://cdn.test/files/shirt.jpg", 200)
    assert rendition("https://cdn.test/files/shirt_200x300@2x.jpg")[1] == 600
    assert rendition("https://cdn.test/files/shirt_grande.jpg") == ("https://cdn.test/files/shirt.jpg", 600)
    assert rendition("https://static.test/photos/p/1/w/560/1.jpg") == ("https://static.test/photos/p/1/1.jpg", 560)
    assert rendition("https://res.test/image/upload/w_400,h_600,c_fill/x.jpg")[1] == 600
    idx = RenditionIndex(["https://a.test/x.jpg?w=100", "https://a.test/x.jpg?w=900", "https://a.test/y.jpg"])
    assert idx.collapse(["https://a.test/x.jpg?w=100", "https://a.test/x.jpg?w=300", "https://a.test/y.jpg"]) == [
        "https://a.test/x.jpg?w=900", "https://a.test/y.jpg"]
    page = _ld({"@type": "Product", "name": "Tee", "sku": "T", "image": [
        "https://shop.test/cdn/shop/files/tee_200x.jpg", "https://shop.test/cdn/shop/files/tee_400x.jpg"]})
    assert extract_products(page, "https://shop.test/t")[0]["image_urls"] == ["https://shop.test/cdn/shop/files/tee.jpg"]


@pytest.mark.parametrize("raw", [
    '/*<![CDATA[*/{"@type":"Product","name":"Hat","sku":"H1"}/*]]>*/',
    '{"@type":"Product","name":"a\tb","sku":"H1",};',
    '<!-- {"@type":"Product","name":"Hat","sku":"H1"} -->',
    "{'@type': 'Product', name: 'Hat', sku: 'H1', brand: undefined, }",
])
def test_lenient_jsonld(raw):
    doc, why = parse_jsonld_block(raw)
    assert why is None and doc["sku"] == "H1"
    assert extract_products(_ld(raw), "https://shop.test/h")[0]["sku"] == "H1"


def test_concatenated_jsonld_objects_and_parse_error_reason():
    doc, why = parse_jsonld_block('{"@type":"Product","name":"Hat","sku":"H1"}{}')
    assert why is None and doc["sku"] == "H1"
    problems: list[str] = []
    assert extract_products(_ld('{"@type": "Product", "name": '), "https://shop.test/x", problems=problems) == []
    assert problems == ["jsonld_parse_error"]


def test_spider_names_the_parse_error(tmp_path):
    from lookbench_crawlers.spiders.shop import ShopSpider

    site = tmp_path / "site.yaml"
    site.write_text("name: t\nstart_urls: ['https://shop.test/']\nallowed_hosts: ['shop.test']\n")
    spider = ShopSpider(site_config=str(site))
    resp = HtmlResponse("https://shop.test/x", body=_ld('{"@type": "Product", "name": ').encode(),
                        headers={"Content-Type": "text/html"}, request=Request("https://shop.test/x",
                                                                               meta={"from_sitemap": True}))
    [page] = [it for it in spider.parse_page(resp) if it["kind"] == "page"]
    assert (page["outcome"], page["reason"]) == ("rejected", "jsonld_parse_error")


def test_rendered_page_decoded_by_its_own_encoding_not_the_header():
    from lookbench_crawlers.spiders.shop import page_text

    html = "<html><body><h1>Müllers Mantel</h1></body></html>"
    # scrapy-playwright: the rendered DOM re-encoded as UTF-8, the original response's Latin-1 header kept
    resp = HtmlResponse("https://shop.test/m", body=html.encode("utf-8"), encoding="utf-8",
                        headers={"Content-Type": "text/html; charset=iso-8859-1"},
                        request=Request("https://shop.test/m", meta={"playwright": True}))
    assert "Müllers Mantel" in page_text(resp)
    plain = HtmlResponse("https://shop.test/m", body=html.encode("latin-1"),
                         headers={"Content-Type": "text/html; charset=iso-8859-1"}, request=Request("https://shop.test/m"))
    assert "Müllers Mantel" in page_text(plain)


def test_sku_fallbacks_and_blank_values():
    assert extract_products(_ld({"@type": "Product", "name": "A", "sku": " ", "mpn": "M-77"}),
                            "https://s.test/a")[0]["sku"] == "M-77"
    assert extract_products(_ld({"@type": "Product", "name": "A", "offers": {"@type": "Offer", "sku": "OF-9"}}),
                            "https://s.test/a")[0]["sku"] == "OF-9"
    assert extract_products(_ld({"@type": "Product", "name": "A", "productID": "PID-5"}),
                            "https://s.test/a")[0]["sku"] == "PID-5"
    assert extract_products(_ld({"@type": "Product", "name": "A", "gtin13": "4006381333931"}),
                            "https://s.test/a")[0]["sku"] == "4006381333931"
    # the page URL's identifier beats a GTIN and an MPN; an identifier the URL carries beats the others
    assert extract_products(_ld({"@type": "Product", "name": "A", "gtin13": "4006381333931"}),
                            "https://s.test/c/red-shirt-12185160.html")[0]["sku"] == "12185160"
    assert choose_identifier([("sku", "X1"), ("productID", "3897500")], "https://s.test/p3897500") == (
        "3897500", "productID")
    visible = ("<html><body><h1>Wool coat</h1><span class='price'>€ 129,00</span>"
               "<p>Art.-Nr. 1044/320</p><img src='https://s.test/coat.jpg' width='800'></body></html>")
    [p] = extract_products(visible, "https://s.test/coat")
    assert (p["sku"], p["price"], p["extracted_from"]) == ("1044/320", 129.0, "visible")
    assert url_identifier("https://s.test/dp/B07FW264WL") == "B07FW264WL"
    assert url_identifier("https://s.test/store/36064?pid=262388") == "262388"
    assert url_identifier("https://s.test/women/dresses") is None


def test_labelled_identifier_separators_and_capitals():
    """The label and the code apart by a spaced dash ("Product Code - 39139301", John Lewis), a full-width colon
    ("商品編號：M14876706", PChome), or a capitalised label word; an unspaced dash ("Item-1234") and prose numbers
    are no such label, and a code needs four digits."""
    def ident(body):
        return labelled_identifier(Selector(text=f"<html><body>{body}</body></html>"))

    assert ident("<li><strong>Product Code - </strong>39139301</li><li>Brand GANT</li>") == "39139301"
    assert ident("<td>〈商品編號：M14876706〉</td>") == "M14876706"
    assert ident("<p>Item Number: AB-12345</p>") == "AB-12345"
    assert ident("<p>Product Code \u2013 7712-001</p>") == "7712-001"
    assert ident("<p>Product Code - XL</p><p>Item-1234 sold</p>") is None
    assert ident("<p>SKU: 12</p>") is None
    # English article / style labels (H&M's "Art. No.", US shops' "Style #"); the bare words are no label
    assert ident("<p>Article number: CH-2211-GRY</p>") == "CH-2211-GRY"
    assert ident("<dt>Art. No.:</dt><dd>0713995001</dd>") == "0713995001"
    assert ident("<p>Style No. AB12345</p>") == ident("<p>Style # AB12345</p>") == "AB12345"
    assert ident("<p>Article: our 2024 collection</p><p>Style: Casual 12345</p>") is None
    assert ident("<p>Art Nouveau 12345 print</p><p>Style Notes: 12345</p><p>Style Nordic 20245</p>") is None


def test_template_junk_and_prose_refused():
    page = _ld({"@type": "Product", "name": "Scarf", "sku": "{{ product.sku }}", "brand": "$metabrand",
                "color": "Ver mais artigos da Marca: X"})
    [p] = extract_products(page, "https://s.test/scarf")
    assert (p["sku"], p["brand"], p["color"]) == (None, None, None)
    page = _ld({"@type": "Product", "name": "Scarf", "sku": "S1", "brand": "Shop"})  # the page's <title>
    assert extract_products(page, "https://s.test/scarf")[0]["brand"] is None


def test_availability_normalised_and_from_the_page():
    assert normalise_availability("http://schema.org/InStock") == "InStock"
    assert normalise_availability("https://schema.org/OutOfStock") == "OutOfStock"
    assert normalise_availability("out_of_stock") == "OutOfStock"
    assert normalise_availability("PreOrder") == "PreOrder"
    assert normalise_availability("blue") is None
    page = _ld({"@type": "Product", "name": "Boot", "sku": "B1"}).replace(
        "<body></body>", "<body><div id='availability'><span>Currently unavailable.</span></div></body>")
    [p] = extract_products(page, "https://s.test/boot")
    assert p["availability"] == "OutOfStock"
    assert {"name": "availability", "value": "visible"} in p["field_sources"]


def test_inline_state_json_product():
    state = {"props": {"pageProps": {"related": [{"name": "Other", "price": 5, "sku": "99999"}],
                                     "product": {"name": "Linen shirt", "sku": "LS-48213", "price": {"value": 59.9},
                                                 "currency": "EUR", "availability": "in_stock",
                                                 "images": [{"url": "https://c.test/ls.jpg"}]}}}}
    html = (f"<html><head><title>Linen shirt | Shop</title></head><body><h1>Linen shirt</h1>"
            f"<script id='__NEXT_DATA__' type='application/json'>{json.dumps(state)}</script></body></html>")
    [p] = extract_products(html, "https://s.test/p/LS-48213")
    assert (p["title"], p["sku"], p["price"], p["availability"], p["extracted_from"]) == (
        "Linen shirt", "LS-48213", 59.9, "InStock", "state-json")
    js = ("<html><body><h1>Knit cap</h1><script>window.__INITIAL_STATE__ = {product: {title: 'Knit cap', "
          "productId: '77120', salePrice: '19.00', image: 'https://c.test/k.jpg'}};</script></body></html>")
    [p] = extract_products(js, "https://s.test/cap-77120")
    assert (p["sku"], p["price"]) == ("77120", 19.0)


def test_lazy_look_image_and_element_rules():
    html = ("<html><body><img class='look-image' src='data:image/gif;base64,R0lGOD' data-src='/looks/1.jpg'>"
            "<a class='look-product' href='/p/1'>a</a></body></html>")
    look = extract_look(html, "https://s.test/looks/1", LookRules())
    assert look == {"image_url": "https://s.test/looks/1.jpg", "product_urls": ["https://s.test/p/1"]}
    html2 = ("<html><body><div class='look'><img data-srcset='/l_400.jpg 400w, /l_1200.jpg 1200w' src='data:x'>"
             "</div><a class='p' href='/p/2'>b</a></body></html>")
    look = extract_look(html2, "https://s.test/looks/2", LookRules(image="div.look img", products="a.p"))
    assert look == {"image_url": "https://s.test/l_1200.jpg", "product_urls": ["https://s.test/p/2"]}


def test_real_bestseller_page_colour_variants(realdata):
    f = next((realdata / "pages").glob("peb_bestseller-com_*.html"))
    products = extract_products(f.read_bytes(), "https://shop.bestseller.com/ie/en/x/cardigan-12185160.html")
    colours = [p["color"] for p in products]
    assert len(colours) == len(set(colours)) >= 2
    images = [set(p["image_urls"]) for p in products]
    assert all(a.isdisjoint(b) for i, a in enumerate(images) for b in images[i + 1:])
    assert len({p["variant_id"] for p in products}) == len(products)
    assert {p["group_id"] for p in products} == {"12185160"}
    assert products[0]["sku"] == "12185160"  # the page's reference of its product: the model's, in its URL


def test_real_zalando_pages_full_size(realdata):
    for f in sorted((realdata / "pages").glob("peb_zalando-*.html")):
        p = main_product(extract_products(f.read_bytes(), "https://www.zalando.test/x.html"))
        assert p["image_urls"] and all(is_full_size(u) for u in p["image_urls"]), f.name


def test_peb_scorer_on_the_real_pages(realdata, tmp_path):
    """The benchmark script runs as BENCHMARKS.md gives it; its figures stay at least where they were measured
    when the extractor was rewritten (a regression floor, not the target: BENCHMARKS.md has the target)."""
    out = tmp_path / "peb.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks/extraction_accuracy.py"), "--pages",
                    str(realdata / "pages"), "--n-bootstrap", "50", "--json", str(out)], check=True,
                   capture_output=True)
    r = json.loads(out.read_text())
    m = r["metrics"]
    assert m["price"]["f1"] >= 0.93 and m["sku"]["f1"] >= 0.92 and m["availability"]["f1"] >= 0.97
    assert r["with_product"] / r["pages"] >= 0.95


def test_shopify_variants_one_item_per_colour_with_their_images():
    from lookbench_pipeline.extract import shopify_products

    doc = {"product": {"id": 77, "title": "Polo", "handle": "polo", "vendor": "Acme", "options": [
        {"name": "Size", "position": 1, "values": ["S", "M"]}, {"name": "Colour", "position": 2,
                                                               "values": ["Navy", "White"]}],
        "variants": [{"id": 1, "sku": "P-N-S", "price": "20.00", "option1": "S", "option2": "Navy", "available": False},
                     {"id": 2, "sku": "P-N-M", "price": "20.00", "option1": "M", "option2": "Navy", "available": True},
                     {"id": 3, "sku": "P-W-S", "price": "22.00", "option1": "S", "option2": "White", "image_id": 11}],
        "images": [{"id": 10, "src": "https://cdn.test/s/files/1/polo-navy_200x.jpg", "variant_ids": [1, 2]},
                   {"id": 11, "src": "https://cdn.test/s/files/1/polo-white.jpg", "variant_ids": []}]}}
    items = shopify_products(doc, "https://shop.test/products/polo.json")
    assert [(i["color"], i["sku"], i["price"], i["availability"], i["group_id"], i["image_urls"]) for i in items] == [
        ("Navy", "P-N-S", 20.0, "InStock", "77", ["https://cdn.test/s/files/1/polo-navy.jpg"]),
        ("White", "P-W-S", 22.0, None, "77", ["https://cdn.test/s/files/1/polo-white.jpg"])]


def _src(p, field):
    return {d["name"]: d["value"] for d in p["field_sources"]}.get(field)


def test_size_variants_take_the_identifier_of_their_colour():
    """Several Product nodes that are the sizes of one colour are one item whose sku is the colour's, not the first
    size's: a value every size shares, else the size cut off, else the common code of the size skus."""
    def sizes(*nodes):
        return _ld({"@context": "https://schema.org", "@graph": [
            {"@type": "Product", "name": "Boot", "image": "https://c.test/boot.jpg", **n} for n in nodes]})
    [p] = extract_products(sizes({"sku": "84518927-040-35"}, {"sku": "84518927-040-36"}), "https://s.test/boot")
    assert (p["sku"], _src(p, "sku")) == ("84518927-040", "json-ld:sizes-common")
    [p] = extract_products(sizes({"sku": "B-1", "mpn": "BT-77"}, {"sku": "B-2", "mpn": "BT-77"}), "https://s.test/b")
    assert (p["sku"], _src(p, "sku")) == ("BT-77", "json-ld:mpn")  # an identifier every size carries
    [p] = extract_products(sizes({"sku": "CT-9-XL", "size": "XL"}), "https://s.test/c")
    assert p["sku"] == "CT-9"  # one stated size is still a size: the id does not change when others come back
    [p] = extract_products(sizes({"sku": "100231"}, {"sku": "100232"}), "https://s.test/d")
    assert p["sku"] == "100231"  # no separator, no shared value: nothing to derive, the first node's sku


def test_sku_is_the_printed_reference_identity_stays_the_colours():
    """The main item's sku is the reference the page prints under a label (marked, or in the text); its
    variant_id, the basis of its product id, stays the colour's own id, so two colours of a model that print the
    model's one reference stay two items. A "Model #" (a manufacturer's number) is not taken as the reference."""
    def sizes(colour, ref_html, url):
        ld = _ld({"@context": "https://schema.org", "@graph": [
            {"@type": "Product", "name": "Boot", "image": f"https://c.test/{colour}.jpg", "sku": f"{colour}-{n}"}
            for n in (35, 36)]})
        return extract_products(ld.replace("<body></body>", f"<body>{ref_html}</body>"), url)
    black = "<p><span>Black</span> - <span data-qa-qualifier='product-reference'>1002/710</span></p>"
    [b] = sizes("84518927-040", black, "https://s.test/boot-p11002710.html?v1=1")
    assert (b["sku"], _src(b, "sku"), b["variant_id"], _src(b, "variant_id")) == (
        "1002/710", "visible:label", "84518927-040", "json-ld:sizes-common")
    [r] = sizes("84518927-600", black.replace("Black", "Red"), "https://s.test/boot-p11002710.html?v1=2")
    assert r["sku"] == b["sku"] and r["variant_id"] == "84518927-600"
    assert product_key("s", "https://s.test/boot-p11002710.html?v1=1", b["variant_id"], b["color"]) != product_key(
        "s", "https://s.test/boot-p11002710.html?v1=2", r["variant_id"], r["color"])
    # a labelled code in the text (its element unmarked) beats a structured id, even one the URL carries
    page = _ld({"@type": "Product", "name": "Tablet", "productID": "1821267"}).replace(
        "<body></body>", "<body><p class='prd-code'>Product code: 287807</p></body>")
    [p] = extract_products(page, "https://s.test/tablet/p1821267")
    assert (p["sku"], p["variant_id"]) == ("287807", "1821267")
    # a model number is the manufacturer's: the structured sku stays
    [p] = extract_products(page.replace("Product code: 287807", "Model # AB1234"), "https://s.test/tablet/p1821267")
    assert (p["sku"], p["variant_id"], _src(p, "sku")) == ("1821267", "1821267", "json-ld:productID")
    # the reference is the product's: every colour of it on the page (its group) takes it, each keeping its own
    # variant_id; another product the page lists (a recommendation) keeps its own id
    two = _ld({"@context": "https://schema.org", "@graph": [
        *({"@type": "Product", "name": "Top", "color": c, "sku": s, "image": f"https://c.test/{s}.jpg"}
          for c, s in (("Purple", "T-611"), ("Black", "T-800"))),
        {"@type": "Product", "name": "Belt", "sku": "B-1", "image": "https://c.test/b.jpg"}]}).replace(
        "<body></body>", "<body><span class='product-reference'>7901/312</span></body>")
    assert [(i["sku"], i["variant_id"], i["group_id"]) for i in extract_products(two, "https://s.test/top")] == [
        ("7901/312", "T-611", "/top"), ("7901/312", "T-800", "/top"), ("B-1", "B-1", None)]  # the page's path
    # a printed code that is a colour's own id, or its size's, is that colour's, not the product's: the others
    # keep theirs
    colours = two.replace("T-611", "1002-611").replace("T-800", "1002-800")
    for code in ("1002-611", "1002-611-38", "1002-800"):
        items = extract_products(colours.replace("7901/312", code), "https://s.test/top")
        assert [(i["sku"], i["group_id"]) for i in items] == [(code, "1002"), ("1002-800", "1002"), ("B-1", None)]


def test_sku_is_the_id_the_page_declares_even_when_its_colours_share_it():
    """Colour variants that share the identifier chosen for them (here the URL's, the model's number) keep it as
    their group_id and their own ids as variant_id; their sku is that declared id, the page's reference of its
    product (no label printed)."""
    page = _ld({"@context": "https://schema.org", "@graph": [
        {"@type": "Product", "name": "Cardigan", "color": c, "gtin8": g, "image": f"https://c.test/{g}.jpg"}
        for c, g in (("Blue", "5715093615745"), ("Black", "5715093615844"))]})
    items = extract_products(page, "https://s.test/cardigans/zipped-cardigan-12185160.html")
    assert [(i["sku"], i["variant_id"], i["group_id"]) for i in items] == [
        ("12185160", "5715093615745", "12185160"), ("12185160", "5715093615844", "12185160")]
    assert (_src(items[0], "sku"), _src(items[0], "variant_id")) == ("url", "json-ld:gtin8")


def test_sale_price_beside_a_struck_list_price():
    body = ("<div class='buy'><span class='price old-price'>€219.99</span><span class='price'>€110.00</span>"
            "<button id='add-to-cart'>Add to cart</button></div>")
    page = _ld({"@type": "Product", "name": "Bag", "sku": "BG1", "offers": {
        "@type": "Offer", "price": "219.99", "priceCurrency": "EUR", "availability": "https://schema.org/InStock"}})
    [p] = extract_products(page.replace("<body></body>", f"<body>{body}</body>"), "https://s.test/bag")
    assert (p["price"], _src(p, "price")) == (110.0, "visible:sale-price")
    # the structured price also shown as a current price: it is the price, whatever else is struck through
    both = body.replace("</div>", "<span class='price'>€219.99</span></div>")
    [p] = extract_products(page.replace("<body></body>", f"<body>{both}</body>"), "https://s.test/bag")
    assert (p["price"], _src(p, "price")) == (219.99, "json-ld")
    # no markup at all: the price beside the struck-through one
    plain = ("<html><body><h1>Cap</h1><img src='https://s.test/cap.jpg' width='900'><p><s>49 890 тг.</s><br>"
             "<span class='now'>44 890 тг.</span></p></body></html>")
    [p] = extract_products(plain, "https://s.test/cap-51267")
    assert p["price"] == 44890.0


def test_visible_price_is_not_a_listing_card_nor_for_what_cannot_be_bought():
    cards = "".join(f"<li class='card'><a href='/p/{i}'>Other {i}</a><span class='price'>€{i}.99</span></li>"
                    for i in (5, 7, 12))
    page = (f"<html><body><h1>Dog hair dye 50ml</h1><img src='https://s.test/dye.jpg' width='900'>"
            f"<ul class='recs'>{cards}</ul></body></html>")
    [p] = extract_products(page, "https://s.test/dp/B0756B4GVG")
    assert p["price"] is None  # every price shown is a recommended product's
    sold_out = page.replace("<ul", "<div id='availability'>Currently unavailable.</div>"
                                   "<span class='price'>€29.99</span><ul")
    [p] = extract_products(sold_out, "https://s.test/dp/B0756B4GVG")
    assert (p["availability"], p["price"]) == ("OutOfStock", None)  # the €29.99 is another offer's


def test_buy_control_and_stock_messages_of_the_buy_box():
    page = _ld({"@type": "Product", "name": "Boot", "sku": "BT1", "offers": {
        "@type": "Offer", "price": "136", "availability": "OutOfStock"}})

    def avail(body):
        [p] = extract_products(page.replace("<body></body>", f"<body>{body}</body>"), "https://s.test/boot")
        return p["availability"], _src(p, "availability")
    assert avail("<form><button id='add-to-basket-button' type='submit'>Add to your basket</button></form>") == (
        "InStock", "visible:buy-control")
    assert avail("<button class='atc' disabled>Add to basket</button>") == ("OutOfStock", "json-ld")
    assert avail("<button hidden class='atc'>Add to basket</button>") == ("OutOfStock", "json-ld")
    assert avail("<button>Add to wishlist</button>") == ("OutOfStock", "json-ld")
    cards = "".join(f"<div class='card'><a href='/p/{i}'>p{i}</a><button class='card-atc'>Add to basket</button>"
                    f"</div>" for i in range(3))
    assert avail(cards) == ("OutOfStock", "json-ld")  # the recommendations' buttons are not this item's
    # a stock label repeated on every listed product's card is not the page's product's
    labels = "".join(f"<a href='/p/{i}'><span class='unavailable-label'>Out of stock</span></a>" for i in range(3))
    html = (f"<html><body><h1>Panel</h1><span class='price'>32 zł</span><img src='https://s.test/p.jpg' width='900'>"
            f"{labels}</body></html>")
    [p] = extract_products(html, "https://s.test/panel-466383")
    assert p["availability"] is None


def test_minor_units_shopify_meta_url_numbers_labels_and_title():
    assert parse_price("24.990", "CLP") == (24990.0, "CLP")  # ISO 4217: CLP has no decimals
    assert parse_price("24.990", "EUR") == (24.99, "EUR")
    meta = {"product": {"id": 17, "vendor": "Panasonic", "variants": [
        {"id": 5, "price": 10900, "name": "Microwave", "sku": "1236291"}]},
        "page": {"pageType": "product", "resourceId": 17}}
    html = (f"<html><head><title>Microwave</title></head><body><h1>Microwave</h1><script>window.ShopifyAnalytics = "
            f"window.ShopifyAnalytics || {{}}; var meta = {json.dumps(meta)}; "
            f"window.ShopifyAnalytics.meta = meta;</script><img src='https://s.test/m.jpg' width='900'></body></html>")
    [p] = extract_products(html, "https://s.test/products/microwave")
    assert (p["sku"], p["price"], p["brand"], _src(p, "sku")) == ("1236291", 109.0, "Panasonic", "platform-json")
    assert url_identifier("https://s.test/tv/c7200a278526196/remote.html") == "278526196"
    assert url_identifier("https://s.test/boots/v2021") is None
    kz = "<html><body><h1><span>Phone A01</span> <span class='element-article'>Код: 01245</span></h1></body></html>"
    assert visible_product(Selector(text=kz), "https://s.test/product/phone-a01/")["sku"] == "01245"
    heads = ("<html><head><title>Wine opener : Amazon.it</title></head><body><h1>Adding to cart...</h1>"
             "<h1 id='title'>Wine opener</h1></body></html>")
    assert visible_product(Selector(text=heads), "https://s.test/x")["title"] == "Wine opener"


def test_colour_item_takes_its_colours_name_not_its_first_sizes():
    """A ProductGroup whose variants are named per size ("Linen shirt Red S") gives colour items named for their
    colour: the stated size cut off the end, else the common words of the sizes' names."""
    def group(names_sizes):
        return _ld({"@context": "https://schema.org", "@type": "ProductGroup", "name": "Linen shirt",
                    "productGroupID": "LS", "hasVariant": [
                        {"@type": "Product", "name": name, "sku": f"LS-{colour}-{i}", "color": colour,
                         **({"size": size} if size else {}), "image": f"https://c.test/{colour}.jpg"}
                        for i, (name, colour, size) in enumerate(names_sizes)]})
    products = extract_products(group([
        ("Linen shirt Red S", "Red", "S"), ("Linen shirt Red M", "Red", "M"), ("Linen shirt - Blue / XL", "Blue", "XL"),
        ("Linen shirt (W 32)", "Sand", "W 32")]), "https://shop.test/ls")
    assert [(p["color"], p["title"]) for p in products] == [
        ("Red", "Linen shirt Red"), ("Blue", "Linen shirt - Blue"), ("Sand", "Linen shirt")]
    # no stated size: the words the sizes' names share
    [p] = extract_products(group([("Linen shirt Red Small", "Red", None), ("Linen shirt Red Large", "Red", None)]),
                           "https://shop.test/ls")
    assert p["title"] == "Linen shirt Red"
    # names that share too little, or no word boundary, are left as they are
    [p] = extract_products(group([("Shirt S", "Red", None), ("Linen shirt in washed red, medium", "Red", None)]),
                           "https://shop.test/ls")
    assert p["title"] == "Shirt S"
    [p] = extract_products(group([("Linen shirt RedS", "Red", "S")]), "https://shop.test/ls")
    assert p["title"] == "Linen shirt RedS"
    # an item of one node: its size is cut only after punctuation, a bare space may precede the name's own number
    [p] = extract_products(group([("Socks, pack of 3", "Grey", "3")]), "https://shop.test/ls")
    assert p["title"] == "Socks, pack of 3"
    [p] = extract_products(group([("Romper 86", "Grey", "86")]), "https://shop.test/ls")
    assert p["title"] == "Romper 86"
    # a size node without a name does not keep the others from naming the colour
    nameless = _ld({"@context": "https://schema.org", "@type": "ProductGroup", "productGroupID": "T", "hasVariant": [
        {"@type": "Product", "sku": f"T-{size}", "color": "Red", "size": size, "image": "https://c.test/t.jpg",
         **({"name": f"Tee - {size}"} if size != "M" else {})} for size in ("XL", "L", "M")]})
    [p] = extract_products(nameless, "https://shop.test/t")
    assert p["title"] == "Tee"
