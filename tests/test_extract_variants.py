"""Colour variants split from one page: a shared group_id, the colour's name, one sku per page (issue: real pages
gave group_id None, colour None and one sibling a different sku).

The first test crawls the saved real pages with the shipped site configuration (configs/sites/realdata-pages.yaml,
the one configs/realdata.yaml builds from, replayed on 127.0.0.1 as `make real` does) and reads the products table
the crawl writes, grouped by page; the others are the rules on minimal and hostile input.
"""

import json
import time
from pathlib import Path

import pyarrow.parquet as pq

from lookbench_pipeline.extract import extract_products

ROOT = Path(__file__).resolve().parents[1]


def _ld(*blocks, body: str = "", head: str = "") -> str:
    scripts = "".join(f"<script type='application/ld+json'>{b if isinstance(b, str) else json.dumps(b)}</script>"
                      for b in blocks)
    return f"<html><head><title>Shop</title>{head}{scripts}</head><body>{body}</body></html>"


def _sizes(colours, name="Top", parent="84994776"):
    """A JSON-LD graph of one product in several colours, two sizes each (``<parent>-<colour>-<size>``), no colour
    stated: the shape of the real Zara page."""
    return {"@context": "https://schema.org", "@graph": [
        {"@type": "Product", "name": name, "sku": f"{parent}-{c}-{s}", "size": s, "image": f"https://c.test/{c}.jpg",
         "offers": {"@type": "Offer", "price": "12.95", "priceCurrency": "EUR"}}
        for c in colours for s in ("10", "98")]}


def test_real_pages_colour_variants_share_a_group_and_name_their_colour(realdata, tmp_path):
    from lookbench_pipeline.config import SiteConfig, load_config
    from lookbench_pipeline.crawl import crawl_site, merge_catalog
    from lookbench_pipeline.demo.serve import local_site

    [site_yaml] = load_config(ROOT / "configs/realdata.yaml").sites  # the site `make real` crawls, as shipped
    assert Path(SiteConfig.from_yaml(site_yaml).pages_dir).resolve() == (realdata / "pages").resolve()
    out = crawl_site(site_yaml, tmp_path / "crawl", "LookBenchBot/1.0 (+test)", local_server=local_site)
    merge_catalog(out, tmp_path / "state")
    rows = pq.read_table(tmp_path / "state/realdata-pages/products.parquet").to_pylist()
    pages: dict[str, list[dict]] = {}
    for r in rows:
        pages.setdefault(r["url"].rsplit("/", 1)[-1], []).append(r)

    # every page split into several items of one product (same title) gives them one group_id and distinct ids
    split = 0
    for name, items in pages.items():
        by_title: dict[str, list[dict]] = {}
        for r in items:
            by_title.setdefault((r["title"] or "").strip().lower(), []).append(r)
        for title, same in by_title.items():
            if len(same) > 1:
                split += 1
                assert title and len({r["group_id"] for r in same}) == 1 and same[0]["group_id"], (name, same)
                assert len({r["product_id"] for r in same}) == len(same), name
                # sku, one rule for all: the reference the page states for its product, else each colour's own id
                skus = [r["sku"] for r in same]
                assert len(set(skus)) == 1 or skus == [r["variant_id"] for r in same], (name, skus)
        assert not any((r["title"] or "").startswith(("http://", "https://")) for r in items), name
    assert split >= 2

    zara = pages["peb_zara-com_745644b6e2.html"]
    assert sorted(r["color"] for r in zara) == ["Black", "Chocolate", "Khaki", "Mid-mink", "Purple"]
    assert {(r["group_id"], r["sku"]) for r in zara} == {("84994776", "7901/312")}
    assert sorted(r["variant_id"] for r in zara) == [f"84994776-{c}" for c in ("505", "611", "717", "757", "800")]
    colour_of = {r["variant_id"]: r["color"] for r in zara}  # each name is its own colour's, by the colour's id
    assert (colour_of["84994776-611"], colour_of["84994776-800"]) == ("Purple", "Black")
    best = pages["peb_bestseller-com_b331d47650.html"]
    assert sorted(r["color"] for r in best) == ["Black", "Blue", "Grey"]
    assert {r["group_id"] for r in best} == {"12185160"}  # the model number of the page's canonical URL
    # a single-colour page names its colour from the same state JSON (the third Zara page asks not to be indexed:
    # the crawl keeps nothing of it, its extraction is checked directly)
    assert [r["color"] for r in pages["peb_zara-com_5c1ec210b0.html"]] == ["Silver"]
    assert "peb_zara-com_52ea2c6607.html" not in pages
    boots = realdata / "pages/peb_zara-com_52ea2c6607.html"
    assert [i["color"] for i in extract_products(boots.read_bytes(), "http://127.0.0.1:8000/pages/boots.html",
                                                 SiteConfig.from_yaml(site_yaml).product_rules)] == ["Black"]
    # other products a page lists are not colours of its product: no group shared with it
    leroy = pages["peb_leroymerlin-pl_7a838a167a.html"]
    main = next(r for r in leroy if r["sku"] == "45979556")
    assert main["group_id"] is None and main["color"] == "Ciemny niebieski"
    assert all(r["group_id"] is None for r in leroy)
    # Argos' recommendation cards (microdata Products whose name is a link) are not items; the page states no colour
    [argos] = pages["peb_argos-co-uk_442c155e30.html"]
    assert (argos["sku"], argos["color"], argos["group_id"]) == ("9249556", None, None)


def test_colour_names_from_state_json_keyed_by_the_variant_id():
    state = ("window.shop.dataLayer = {product: {id: 84994776, colors: [{id: '611', productId: 84994776, name: "
             "'Purple'}, {id: '800', productId: 84994776, name: 'Black', sizes: [{id: 10, name: 'XS'}]}]}};")
    items = extract_products(_ld(_sizes(["611", "800"]), body=f"<script>{state}</script>"), "https://s.test/top")
    assert [(i["variant_id"], i["color"], i["group_id"]) for i in items] == [
        ("84994776-611", "Purple", "84994776"), ("84994776-800", "Black", "84994776")]
    assert {d["name"]: d["value"] for d in items[0]["field_sources"]}["color"] == "state-json:colors"
    # a variants array names a colour only under a colour key, and matches by the variant's whole id
    variants = json.dumps({"variants": [{"sku": "T-RED", "name": "Top S", "colour": "Red"},
                                        {"sku": "T-BLU", "name": "Top S", "color": {"name": "Blue", "hex": "#00f"}}]})
    ld = {"@context": "https://schema.org", "@graph": [
        {"@type": "Product", "name": "Top", "sku": s, "image": f"https://c.test/{s}.jpg"} for s in ("T-RED", "T-BLU")]}
    items = extract_products(_ld(ld, body=f"<script type='application/json'>{variants}</script>"), "https://s.test/t")
    assert [i["color"] for i in items] == ["Red", "Blue"]
    # a colour the structured data states is kept; a PropertyValue "Colour" is a colour
    prop = {"@type": "Product", "name": "Cap", "sku": "C1", "additionalProperty": [
        {"@type": "PropertyValue", "name": "Colour", "value": "Olive"}]}
    assert extract_products(_ld(prop), "https://s.test/cap")[0]["color"] == "Olive"


def test_group_of_a_page_without_a_stated_group():
    # no parent code shared by the colours' ids: the identifier of the page's canonical URL, whatever URL served it
    ld = {"@context": "https://schema.org", "@graph": [
        {"@type": "Product", "name": "Cardigan", "color": c, "gtin13": g, "image": f"https://c.test/{g}.jpg"}
        for c, g in (("Blue", "5715093615745"), ("Black", "5715093615844"))]}
    canon = "<link rel='canonical' href='https://shop.test/ie/cardigans/zipped-cardigan-12185160.html'>"
    items = extract_products(_ld(ld, head=canon), "http://127.0.0.1:8123/pages/saved.html")
    assert [i["group_id"] for i in items] == ["12185160", "12185160"]
    assert {d["name"]: d["value"] for d in items[0]["field_sources"]}["group_id"] == "page-group:url-id"
    # no identifier in it: the canonical URL's path, whatever host and port served the page; a hostile canonical
    # (not http(s), too long) is not used
    for head in ("<link rel='canonical' href='javascript:alert(1)'>",
                 f"<link rel='canonical' href='https://shop.test/{'x' * 5000}'>"):
        for served in ("https://s.test/cardigan", "http://127.0.0.1:8123/cardigan", "http://127.0.0.1:9999/cardigan"):
            items = extract_products(_ld(ld, head=head), served)
            assert [i["group_id"] for i in items] == ["/cardigan"] * 2, served
    # a group the page states is kept; an item alone has none
    single = extract_products(_ld(ld["@graph"][0]), "https://s.test/cardigan")
    assert [i["group_id"] for i in single] == [None]


def test_hostile_colour_arrays_do_not_break_extraction():
    """Malformed colours arrays (not a list, not objects, ids and names of the wrong type, unterminated, nested
    past any parser's depth, repeated thousands of times, huge): extraction gives the items without a colour, in
    bounded time; two names for one colour give none."""
    cases = [
        'var a = {"colors": "purple", "variants": 5, "swatches": null};',
        'var a = {"colors": [1, null, true, "611", [611], {"id": "611"}]};',
        'var a = {"colors": [{"id": {"x": 1}, "name": ["Purple"]}, {"id": true, "name": "Mauve"}, '
        '{"id": "611", "name": 611}, {"id": "800", "name": {"name": {"deep": 1}}}, {"id": "611", "name": "#ff00ff"}]};',
        'var a = {"colors": ' + "[" * 100_000 + "]" * 100_000 + "};",
        'var a = {"colors": ' + "[" * 100_000 + "};",
        'var a = {"colors": [{"id": "611", "name": "Purple"',
        '"colors": [{"id": "611", ' * 5_000,
        ('"colours": [' + "{" * 500) * 100 + "x" * 500_000,
        'var a = {"colors": [' + ",".join('{"id": "%d", "name": "C%d"}' % (i, i) for i in range(50_000)) + "]};",
        'var a = {"colors": [{"id": "611", "name": "Purple"}]}; var b = {"colors": [{"id": "611", "name": "Mauve"}]};',
    ]
    for script in cases:
        t = time.monotonic()
        items = extract_products(_ld(_sizes(["611", "800"]), body=f"<script>{script}</script>"), "https://s.test/top")
        assert time.monotonic() - t < 10, script[:80]
        assert [(i["variant_id"], i["color"], i["group_id"]) for i in items] == [
            ("84994776-611", None, "84994776"), ("84994776-800", None, "84994776")], script[:80]
