"""Regression tests for defects an adversarial review found in extraction, intake, dedup and the spider."""

import gzip
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import yaml
from PIL import Image

from lookbench_pipeline.demo import serve, shop as demo_shop
from lookbench_pipeline.config import ConfigError, SiteConfig
from lookbench_pipeline.crawl import run_spider
from lookbench_pipeline.extract import extract_products, parse_price, shopify_products
from lookbench_pipeline.images import ImageRef, ImageRejected, Reject, SourceReader, decode, take_in


def test_charset_choice_is_deterministic_across_hash_seeds():
    code = ("from lookbench_pipeline.extract import decode_html;"
            "html='<meta charset=\"gbk\"><title>\\u8fde\\u8863\\u88d9</title>';"
            "print(decode_html(html.encode('gbk'), 'text/html; charset=ISO-8859-1')[1])")
    seen = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout.strip() for seed in range(6)}
    assert len(seen) == 1, seen


@pytest.mark.parametrize("raw", ['{"@type": 5, "name": "x"}', "[" * 3000 + "]" * 3000,
                                 '{"@type": "Product", "name": "n", "sku": ' + "9" * 5000 + "}"])
def test_hostile_jsonld_does_not_crash(raw):
    html = f"<script type='application/ld+json'>{raw}</script><script type='application/ld+json'>" \
           '{"@type": "Product", "name": "Survivor", "sku": "S1"}</script>'
    assert [p["sku"] for p in extract_products(html, "https://s.test/p")] == ["S1"]


def test_opengraph_product_without_price_and_xhtml():
    html = ('<meta property="og:type" content="product"><meta property="og:title" content="T">'
            '<meta property="og:image" content="/x.jpg">')
    [p] = extract_products(html, "https://s.test/p")
    assert p["image_urls"] == ["https://s.test/x.jpg"]
    xhtml = ('<?xml version="1.0" encoding="UTF-8"?><html xmlns="http://www.w3.org/1999/xhtml"><body>'
             '<div itemscope="" itemtype="http://schema.org/Product"><span itemprop="name">X coat</span></div>'
             '</body></html>')
    assert [p["title"] for p in extract_products(xhtml, "https://s.test/p")] == ["X coat"]


def test_prices_are_sane():
    assert parse_price("1.234")[0] == 1.234, "schema.org uses a decimal point"
    assert parse_price("1.234,56 €")[0] == 1234.56
    for bad in ("-5", "NaN", "Infinity", float("nan"), float("inf"), -3):
        assert parse_price(bad)[0] is None, bad


def test_shopify_odd_field_types():
    doc = {"products": [{"title": "A", "handle": 3, "body_html": 42, "images": [{"src": 7}, {"src": "/a.jpg"}],
                         "variants": [{"price": "10.00", "sku": 5}]}]}
    [p] = shopify_products(doc, "https://s.test/products.json")
    assert p["description"] == "42" and p["image_urls"] == ["https://s.test/a.jpg"] and p["sku"] == "5"


def _broken_tiff() -> bytes:
    im = Image.new("RGB", (64, 64))
    b = io.BytesIO()
    im.save(b, "TIFF", save_all=True, append_images=[im])
    data = bytearray(b.getvalue())
    # rename every ImageWidth tag (256) after the first IFD so the second page has no width
    first = data.find(b"\x00\x01\x03\x00")
    second = data.find(b"\x00\x01\x03\x00", first + 4)
    if second > 0:
        data[second : second + 2] = b"\x99\x99"
    return bytes(data)


def test_a_broken_file_never_ends_the_batch(tmp_path):
    from datetime import datetime, timezone

    from lookbench_pipeline.store import LocalStore

    bad = tmp_path / "bad.tif"
    bad.write_bytes(_broken_tiff())
    good = tmp_path / "good.png"
    Image.effect_noise((64, 64), 40).convert("RGB").save(good)
    now = datetime.now(timezone.utc)
    res = take_in([ImageRef("drop", "b", 0, str(bad), "t", now), ImageRef("drop", "g", 0, str(good), "t", now)],
                  SourceReader(), LocalStore(tmp_path / "s"))
    assert [r["status"] for r in res.refs][1] == "accepted"
    assert res.counts["in"] == res.counts["accepted"] + res.counts["rejected"] == 2


def test_sixteen_bit_dark_and_32_bit_grey():
    dark = Image.fromarray(np.array([[40, 200], [300, 200]], dtype=np.uint16).repeat(20, 0).repeat(20, 1))
    b = io.BytesIO()
    dark.save(b, "PNG")
    px = np.asarray(decode(b.getvalue(), ).rgb)[..., 0]
    assert px.max() <= 2, "16-bit values are scaled by the bit depth (300 >> 8 == 1)"
    with pytest.raises(ImageRejected) as e:
        decode(b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n")  # never handed to Ghostscript
    assert e.value.reason == Reject.UNSUPPORTED_FORMAT and e.value.detail.startswith("EPS")


def test_many_identical_hashes_cluster_in_linear_checks(monkeypatch):
    """Thousands of images sharing one pHash, or two pHashes one bit apart, once made the pair list quadratic
    (minutes and gigabytes), and so did two neighbouring hashes whose copies disagree in colour. Counted, not
    timed: the colour checks and the codes searched stay linear in n."""
    from datetime import datetime, timezone

    from lookbench_pipeline import dedup

    checks, searched = [], []
    real_check, real_search = dedup.confirmed_by_colour, dedup.near_pairs_mih
    monkeypatch.setattr(dedup, "confirmed_by_colour", lambda *a: checks.append(1) or real_check(*a))
    monkeypatch.setattr(dedup, "near_pairs_mih", lambda h, t: searched.append(len(h)) or real_search(h, t))
    t = datetime(2026, 1, 1, tzinfo=timezone.utc)
    n = 3000
    dark, light = "00" * 192, "ff" * 192  # 8 x 8 RGB colour signatures that disagree
    for codes, colours, clusters in ((["0123456789abcdef"], [None], 1),
                                     (["0123456789abcdef", "0123456789abcdee"], [None], 1),
                                     # a dark picture's copies on one hash, a light one's on its neighbour
                                     (["0123456789abcdef", "0123456789abcdee"], [dark, light], 2)):
        checks.clear()
        searched.clear()
        imgs = [{"image_sha256": f"{i:064x}", "phash": codes[i % len(codes)], "first_seen_at": t, "width": 10,
                 "height": 10, "flags": [], "color_signature": colours[i % len(colours)]} for i in range(n)]
        rows = dedup.cluster(imgs, 8)
        assert len(rows) == n and len({r["cluster_id"] for r in rows}) == clusters
        assert searched == [len(codes)]  # the distinct hashes, not every copy
        assert len(checks) <= n  # at most one per member within its hash group, one across the two groups


def test_bad_rules_fail_at_load(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({"name": "s", "product_rules": {"title": "h1[[[", "price": "//span["}}))
    with pytest.raises(ConfigError, match="not valid"):
        SiteConfig.from_yaml(p)


def _site(tmp_path, **extra):
    p = tmp_path / "site.yaml"
    p.write_text(yaml.safe_dump({"name": "s", "start_urls": [], "sitemap_urls": ["{{BASE}}/sitemap.xml.gz"],
                                 "allow_private_addresses": True, "follow_links": False, **extra}))
    return p


def test_gzipped_sitemap_and_robots_5xx(tmp_path):
    root = tmp_path / "shop"
    demo_shop.generate(root, 4, 1, 7, colour_models=0)  # four single-colour product pages
    sm = (root / "sitemap.xml").read_text()

    def resolve(path, base):
        if path == "/sitemap.xml.gz":
            return gzip.compress(sm.replace("{{BASE}}", base).encode()), "application/x-gzip"
        if path == "/robots.txt" and resolve.robots_500:
            return None, ""
        return serve.static_resolver(root)(path, base)

    resolve.robots_500 = False
    with serve.serving(resolve) as srv:
        feed, _ = run_spider(_site(tmp_path), srv.base_url, tmp_path / "a", "bot")
    items = [json.loads(x) for x in feed.read_text().splitlines()]
    assert len([i for i in items if i["kind"] == "product"]) == 4

    def resolve500(path, base):
        if path == "/robots.txt":
            raise RuntimeError("the shop's robots.txt handler is broken")  # served as HTTP 500
        return resolve(path, base)

    with serve.serving(resolve500) as srv:
        feed, _ = run_spider(_site(tmp_path), srv.base_url, tmp_path / "b", "bot")
        hits = list(srv.hits)
        assert ("/robots.txt", 500) in srv.statuses
    items = [json.loads(x) for x in feed.read_text().splitlines()]
    assert not [i for i in items if i["kind"] == "product"], "a 5xx robots.txt means disallow all"
    assert all(h == "/robots.txt" for h in hits)


def test_navigation_links_do_not_eat_the_page_budget(tmp_path):
    n = 40
    nav = "".join(f"<a href='/p/{i}.html'>{i}</a>" for i in range(n))

    def resolve(path, base):
        if path == "/robots.txt":
            return b"User-agent: *\nAllow: /\n", "text/plain"
        if path in ("/", "/index.html") or path.startswith("/p/"):
            i = path.rsplit("/", 1)[-1].split(".")[0]
            ld = json.dumps({"@type": "Product", "name": f"P{i}", "sku": f"S{i}"})
            return (f"<html><script type='application/ld+json'>{ld}</script>{nav}</html>").encode(), "text/html"
        return None, ""

    p = tmp_path / "nav.yaml"
    p.write_text(yaml.safe_dump({"name": "nav", "start_urls": ["{{BASE}}/"], "allow_private_addresses": True,
                                 "max_pages": n + 1}))
    with serve.serving(resolve) as srv:
        feed, _ = run_spider(p, srv.base_url, tmp_path / "n", "bot")
    items = [json.loads(x) for x in feed.read_text().splitlines()]
    assert len({i["sku"] for i in items if i["kind"] == "product"}) == n + 1


# A second adversarial review (2026-12-05): pages that cost time quadratic in their size, product groups written
# with @id references, prices the parser misread.

def test_image_urls_in_text_match_the_pattern_on_any_text():
    """``image_urls_in`` skips the restarts of the lazy pattern; its matches stay those of ``findall``."""
    import random

    from lookbench_pipeline.renditions import _URL_IN_TEXT, image_urls_in

    alphabet = list("/:.htps ?\"'<>(),\\a=&") + ["jpg", "png", "https:", "//", ".jpg", "\\/", "&amp;"]
    rng = random.Random(5)
    for _ in range(20000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        assert image_urls_in(text) == _URL_IN_TEXT.findall(text.replace("\\/", "/").replace("&amp;", "&")), text


@pytest.mark.parametrize("filler", ["/", "//a", "https:/"])
def test_a_page_of_slashes_is_read_in_one_pass(filler):
    """600 KB of slashes in a comment: the page's product is still found (a quadratic scan took ~40 minutes)."""
    ld = {"@type": "Product", "name": "Dress", "sku": "S1", "image": "https://c.test/a.jpg"}
    html = (f"<html><script type='application/ld+json'>{json.dumps(ld)}</script><body><!--"
            f"{filler * (600_000 // len(filler))}--></body></html>")
    [p] = extract_products(html, "https://s.test/p/1")
    assert p["sku"] == "S1" and p["image_urls"] == ["https://c.test/a.jpg"]


def _collapse_pairwise(found):
    """The pairwise ``_collapse`` the indexed one replaced (before 2026-12-05), as the reference of its rules."""
    from lookbench_pipeline.extract.identity import _colour_identity, _merge, _norm

    items = []
    for p in found:
        match = None
        for q in items:
            if p["sku"] and q["sku"]:
                if p["sku"].lower() == q["sku"].lower():
                    match = q
                    break
                continue
            if _norm(p["title"]) and _norm(p["title"]) == _norm(q["title"]) \
                    and _norm(p["color"]) == _norm(q["color"]):
                match = q
                break
        if match is None and not p["color"]:
            same = [q for q in items if _norm(q["title"]) == _norm(p["title"]) and _norm(p["title"])
                    and (not p["sku"] or not q["sku"])]
            match = same[0] if len(same) == 1 else None
        if match is not None:
            items[items.index(match)] = _merge(match, p)
        else:
            items.append(p)
    out = []
    for p in items:
        group = _norm(p["group_id"]) or _norm(p["title"])
        match = None
        for q in out:
            if (_norm(q["group_id"]) or _norm(q["title"])) != group or not group:
                continue
            if p["color"] or q["color"]:
                if _norm(p["color"]) == _norm(q["color"]):
                    match = q
                    break
            elif p["image_urls"] == q["image_urls"]:
                match = q
                break
        nodes = [(p.get("sku"), p.get("_ids") or [], p.get("_size"), p.get("title"))]
        if match is not None:
            merged = _merge(match, p)
            if "InStock" in (match.get("availability"), p.get("availability")):
                merged["availability"] = "InStock"
            merged["_nodes"] = match["_nodes"] + nodes
            out[out.index(match)] = merged
        else:
            out.append({**p, "_nodes": nodes})
    for p in out:
        _colour_identity(p)
    return out


def test_indexed_collapse_merges_as_the_pairwise_rules_do():
    import copy
    import random

    from lookbench_pipeline.extract.identity import _collapse

    rng = random.Random(11)
    for _ in range(5000):
        found = [{"sku": rng.choice([None, "", "A1", "a1", "B2"]),
                  "title": rng.choice([None, "", "Tee", "tee ", "Top"]),
                  "color": rng.choice([None, "", "Red", "red", "Blue", " "]),
                  "group_id": rng.choice([None, "", "G1", "g1", "G2"]),
                  "image_urls": rng.choice([[], ["a"], ["b"], ["a", "b"]]),
                  "availability": rng.choice([None, "InStock", "OutOfStock"]), "price": rng.choice([None, 1.0, 2.0]),
                  "_size": rng.choice([None, "S", "M"]), "_ids": [], "extracted_from": "json-ld", "_sources": {}}
                 for _ in range(rng.randint(0, 9))]
        assert _collapse(copy.deepcopy(found)) == _collapse_pairwise(copy.deepcopy(found)), found


def test_a_group_of_thousands_of_variants_is_one_item_per_colour():
    variants = [{"@type": "Product", "sku": f"T-{c}-{s}", "color": c, "size": str(s),
                 "image": f"https://c.test/{c}.jpg", "offers": {"price": "10", "priceCurrency": "EUR"}}
                for c in ("red", "blue") for s in range(2500)]
    html = _page({"@type": "ProductGroup", "name": "Tee", "productGroupID": "T", "hasVariant": variants})
    products = extract_products(html, "https://s.test/p/tee")
    assert [(p["color"], p["group_id"], p["image_urls"]) for p in products] == [
        ("red", "T", ["https://c.test/red.jpg"]), ("blue", "T", ["https://c.test/blue.jpg"])]


def _page(ld) -> str:
    return f"<html><head><script type='application/ld+json'>{json.dumps(ld)}</script></head><body></body></html>"


def test_group_variants_by_id_reference_are_the_items_and_the_group_is_not():
    red = {"@type": "Product", "@id": "#red", "sku": "R1", "color": "Red", "image": "https://c.test/r.jpg",
           "isVariantOf": {"@id": "#g"}, "offers": {"price": "10", "priceCurrency": "EUR"}}
    blue = {**red, "@id": "#blue", "sku": "B1", "color": "Blue", "image": "https://c.test/b.jpg"}
    group = {"@type": "ProductGroup", "@id": "#g", "name": "Tee", "productGroupID": "G1",
             "image": "https://c.test/g.jpg", "hasVariant": [{"@id": "#red"}, {"@id": "#blue"}, {"@id": "#gone"}]}
    expected = [("Tee", "R1", "G1", "Red", ["https://c.test/r.jpg"]),
                ("Tee", "B1", "G1", "Blue", ["https://c.test/b.jpg"])]
    for graph in ([group, red, blue], [red, blue, {k: v for k, v in group.items() if k != "hasVariant"}]):
        products = extract_products(_page({"@graph": graph}), "https://s.test/p/tee")
        assert [(p["title"], p["sku"], p["group_id"], p["color"], p["image_urls"]) for p in products] == expected


def test_nested_groups_keep_their_sizes_and_the_model_id():
    """model → colour group → sizes: the sizes of a colour are one item, and the colours share the model's id."""
    ld = {"@type": "ProductGroup", "name": "Tee", "productGroupID": "G1", "image": "https://c.test/g.jpg",
          "hasVariant": [{"@type": "ProductGroup", "productGroupID": "G1-B", "color": "Blue",
                          "hasVariant": [{"@type": "Product", "sku": "B-S", "size": "S"},
                                         {"@type": "Product", "sku": "B-M", "size": "M"}]},
                         {"@type": "ProductGroup", "productGroupID": "G1-R", "color": "Red",
                          "image": "https://c.test/r.jpg", "hasVariant": [{"@type": "Product", "sku": "R-S"}]}]}
    products = extract_products(_page(ld), "https://s.test/p/tee")
    assert [(p["title"], p["color"], p["group_id"], p["image_urls"]) for p in products] == [
        ("Tee", "Blue", "G1", ["https://c.test/g.jpg"]), ("Tee", "Red", "G1", ["https://c.test/r.jpg"])]


def test_a_cycle_of_group_references_ends():
    ld = {"@graph": [{"@type": "ProductGroup", "@id": "#a", "name": "A", "hasVariant": {"@id": "#b"}},
                     {"@type": "ProductGroup", "@id": "#b", "name": "B", "hasVariant": {"@id": "#a"}}]}
    assert isinstance(extract_products(_page(ld), "https://s.test/p/a"), list)


def test_prices_the_parser_would_misread_are_unreadable():
    for bad in ("1e309", "$1e5", "€-5", "-€5", "EUR −5", 10 ** 400):
        assert parse_price(bad)[0] is None, bad
    assert parse_price("10 - 20 €") == (10.0, "€"), "a range is its low end, not a negative price"
    ld = {"@type": "Product", "name": "X", "sku": "S", "offers": {"price": 10 ** 400, "priceCurrency": "EUR"}}
    [p] = extract_products(_page(ld), "https://s.test/p/x")
    assert (p["sku"], p["price"]) == ("S", None), "one unreadable field, not a lost page"


def test_a_page_whose_extraction_raises_is_a_rejection_in_the_warc_reader(tmp_path, monkeypatch):
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    from lookbench_pipeline import warc

    path = tmp_path / "crawl.warc.gz"
    with open(path, "wb") as fh:
        writer = WARCWriter(fh, gzip=True)
        for name in ("good", "bad"):
            ld = {"@type": "Product", "name": name, "sku": name.upper()}
            body = _page(ld).encode()
            headers = StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.1")
            writer.write_record(writer.create_warc_record(f"https://s.test/p/{name}", "response",
                                                          payload=io.BytesIO(body), http_headers=headers))
    real = warc.extract_products

    def hostile(text, url, *a, **k):
        if url.endswith("/bad"):
            raise RecursionError("hostile page")
        return real(text, url, *a, **k)

    monkeypatch.setattr(warc, "extract_products", hostile)
    records = warc.extract_from_warc([path], _warc_site(tmp_path))
    assert [(r["kind"], r["url"].rsplit("/", 1)[1]) for r in records] == [("product", "good"), ("page", "bad")]
    assert records[1]["reason"] == "extraction_error:RecursionError" and records[1]["outcome"] == "rejected"


def test_the_warc_reader_takes_no_item_from_an_error_page_or_a_redirect(tmp_path):
    """A 404 "product not found" page archived with a product's JSON-LD and a 500 give no item: each is the
    rejection the spider's row is for an HTTP error (``http_<status>``, the status an int); a redirect's own record,
    with or without an HTML Content-Type, is a hop, not a page, and gives nothing (the live crawl's row for a
    followed one is ``redirected``, no rejection);
    the 200 page's product is kept."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    from lookbench_pipeline import warc

    path = tmp_path / "crawl.warc.gz"
    with open(path, "wb") as fh:
        writer = WARCWriter(fh, gzip=True)
        html, moved = ("Content-Type", "text/html"), ("Location", "/p/ok")
        for name, status, extra in (("ok", "200 OK", [html]), ("gone", "404 Not Found", [html]),
                                    ("down", "500 Internal Server Error", [html]),
                                    ("moved", "301 Moved Permanently", [html, moved]),
                                    ("bare", "302 Found", [moved])):  # a redirect with no Content-Type
            body = _page({"@type": "Product", "name": name, "sku": name.upper()}).encode()
            headers = StatusAndHeaders(status, extra, protocol="HTTP/1.1")
            writer.write_record(writer.create_warc_record(f"https://s.test/p/{name}", "response",
                                                          payload=io.BytesIO(body), http_headers=headers))
    records = warc.extract_from_warc([path], _warc_site(tmp_path))
    assert [(r["kind"], r["url"].rsplit("/", 1)[1], r.get("sku")) for r in records if r["kind"] != "page"] == [
        ("product", "ok", "OK")]
    rejected = [(r["url"].rsplit("/", 1)[1], r["status"], r["outcome"], r["reason"], r["n_items"])
                for r in records if r["kind"] == "page"]
    assert rejected == [("gone", 404, "rejected", "http_404", 0), ("down", 500, "rejected", "http_500", 0)]
    assert len(records) == 3, "a redirect's record is no row, whatever its Content-Type"


def _warc_site(tmp_path):
    f = tmp_path / "site.yaml"
    f.write_text("name: s\nstart_urls: [https://s.test/]\n")
    return SiteConfig.from_yaml(f)


def test_an_unreadable_file_is_one_rejection_and_the_counts_reconcile(tmp_path):
    from datetime import datetime, timezone

    from lookbench_pipeline.store import LocalStore

    ok, locked = tmp_path / "ok.png", tmp_path / "locked.png"
    Image.new("RGB", (80, 60), (200, 30, 30)).save(ok)
    Image.new("RGB", (80, 60), (30, 30, 200)).save(locked)
    t = datetime(2026, 12, 1, tzinfo=timezone.utc)
    refs = [ImageRef("drop", f"o{i}", 0, str(p), "x", t) for i, p in enumerate((ok, locked, tmp_path / "gone.png"))]

    def reader(source):
        if source.endswith("locked.png"):
            raise PermissionError(13, "Permission denied", source)  # as a chmod 000 file gives a non-root user
        return SourceReader()(source)

    result = take_in(refs, reader, LocalStore(tmp_path / "store"))
    assert [r["reason"] for r in result.refs] == [None, "fetch_error", "file_not_found"]
    counts = result.counts
    assert (counts["in"], counts["accepted"], counts["rejected"]) == (3, 1, 2)
    # SourceReader's own read error: /proc/self/mem is a regular file whose read fails (EIO), even for root
    refs[1] = ImageRef("drop", "o1", 0, "/proc/self/mem", "x", t)
    result = take_in(refs, SourceReader(), LocalStore(tmp_path / "store"))
    assert [r["reason"] for r in result.refs] == [None, "file_unreadable", "file_not_found"]


@pytest.mark.parametrize("dtype,key,mode", [(np.uint8, 100, "L"), (np.uint16, 30000, "I;16")])
def test_a_grey_png_colour_key_is_white(dtype, key, mode):
    arr = np.full((60, 80), key, dtype)
    arr[20:40, 20:40] = 5
    b = io.BytesIO()
    Image.fromarray(arr).save(b, "PNG", transparency=key)
    dec = decode(b.getvalue())
    rgb = np.asarray(dec.rgb)
    assert "had_alpha" in dec.flags and (rgb[0, 0] == 255).all(), "the keyed grey is transparent: white"
    assert (rgb[30, 30] < 10).all(), "the other pixels keep their grey"


@pytest.mark.parametrize("label", ["rot13", "hex", "base64", "zlib", "unicode_escape", "raw_unicode_escape",
                                   "utf-7", "idna", "punycode", "no-such-codec", "", "utf-16", "utf-32le"])
def test_a_hostile_charset_declaration_never_raises_and_never_rewrites_the_text(label):
    """decode_html, the one rule for page bytes, ignores charsets no browser decodes a page with: a codec that is no
    text encoding raised LookupError (the page was lost as extraction_error), and ``unicode-escape`` would show the
    extractor "A" where the page says "\\x41". A meta UTF-16 on an ASCII page means UTF-8 (the HTML standard)."""
    from lookbench_pipeline.extract import decode_html

    for body in (f'<meta charset="{label}"><p>\\x41 caf\xe9</p>'.encode("latin-1"),
                 f'<meta charset="{label}"><p>\\x41 cafe</p>'.encode()):
        for ct in (None, f"text/html; charset={label}"):
            if ct and label.startswith("utf-"):
                continue  # a UTF-16 / UTF-32 header is honoured, as browsers do
            text, enc = decode_html(body, ct)
            assert "\\x41 caf" in text and enc in ("utf-8", "cp1252"), (label, ct, text, enc)


def test_decode_html_never_raises_on_random_bytes_and_declarations():
    import random

    from lookbench_pipeline.extract import decode_html

    rng = random.Random(5)
    labels = ["rot13", "hex", "utf-16", "utf-8", "latin1", "shift_jis", "gbk", "unicode_escape", "x", "utf-7", ""]
    for _ in range(500):
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 64)))
        body = f'<meta charset="{rng.choice(labels)}">'.encode() + junk if rng.random() < 0.8 else junk
        ct = f"text/html; charset={rng.choice(labels)}" if rng.random() < 0.5 else None
        text, enc = decode_html(body, ct)
        assert isinstance(text, str) and enc
