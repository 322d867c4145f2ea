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
