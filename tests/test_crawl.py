"""The Scrapy spider on the demo shop: discovery, robots.txt, first_seen_at across runs."""

import json
from pathlib import Path

import pyarrow.compute as pc
import yaml

from lookbench_pipeline.demo import serve, shop as demo_shop
from lookbench_pipeline.crawl import crawl_site, merge_catalog, run_spider
from lookbench_pipeline.demo.serve import local_site


def _items(n_products: int = 12) -> int:
    """How many items (one per colour) the shipped demo site sells with ``n_products`` planned products."""
    colour_models = yaml.safe_load(Path("lookbench_pipeline/data/sites/demo.yaml").read_text())["demo_colour_models"]
    return len(demo_shop.catalogue(n_products, 3, 7, colour_models))


def _site(tmp_path: Path) -> Path:
    site = yaml.safe_load(Path("lookbench_pipeline/data/sites/demo.yaml").read_text())
    site.update(demo_products=12, demo_looks=3)
    p = tmp_path / "demo.yaml"
    p.write_text(yaml.safe_dump(site))
    return p


def test_demo_crawl_finds_everything_and_obeys_robots(tmp_path):
    site = _site(tmp_path)
    root = tmp_path / "shop"
    truth = demo_shop.generate(root, 12, 3, 7)
    with serve.serving(serve.static_resolver(root)) as srv:
        feed, _ = run_spider(site, srv.base_url, tmp_path / "crawl", "test-bot (+https://example.invalid)")
        hits = list(srv.hits)
    items = [json.loads(line) for line in feed.read_text().splitlines()]
    skus = {i["sku"] for i in items if i["kind"] == "product"}
    assert skus == set(truth["products"])
    looks = [i for i in items if i["kind"] == "look"]
    assert len(looks) == 3 and all(len(lk["product_urls"]) >= 2 for lk in looks)
    assert "/robots.txt" in hits
    assert not any(h.startswith("/private/") for h in hits), "a disallowed URL was fetched"
    pages = {i["url"].split("/", 3)[-1]: i for i in items if i["kind"] == "page"}
    assert pages["private/staff-sale.html"]["reason"] == "robots_disallowed"
    assert pages["about.html"]["reason"] == "no_structured_data"
    products = [i for i in items if i["kind"] == "product"]
    assert all(len(p["images"]) == 2 and all(d["path"] for d in p["images"]) for p in products)
    # each product carries its place among its page's products, in the page's order (the feed's is the downloads')
    from lookbench_pipeline.extract import extract_products

    by_page: dict[str, list[dict]] = {}
    for p in products:
        by_page.setdefault(p["url"], []).append(p)
    assert any(len(v) > 1 for v in by_page.values())
    for url, ps in by_page.items():
        page = (root / url.split("/", 3)[-1]).read_text()
        assert [p["variant_id"] for p in sorted(ps, key=lambda p: p["page_position"])] == \
            [e["variant_id"] for e in extract_products(page, url)]


def test_first_seen_kept_across_runs(tmp_path):
    site = _site(tmp_path)
    out1 = crawl_site(site, tmp_path / "run1", "test-bot", local_server=local_site)
    cat1 = merge_catalog(out1, tmp_path / "state")
    out2 = crawl_site(site, tmp_path / "run2", "test-bot", local_server=local_site)
    cat2 = merge_catalog(out2, tmp_path / "state")
    f1 = dict(zip(cat1.products["product_id"].to_pylist(), cat1.products["first_seen_at"].to_pylist()))
    f2 = dict(zip(cat2.products["product_id"].to_pylist(), cat2.products["first_seen_at"].to_pylist()))
    assert f1 == f2 and len(f1) == _items()
    assert pc.all(pc.greater(cat2.products["last_seen_at"], cat1.products["last_seen_at"])).as_py()
    assert cat2.products["crawled_at"].to_pylist() == cat1.products["crawled_at"].to_pylist(), \
        "unchanged content keeps the crawl that fetched it"
    assert all(u.startswith("https://demo.demo.lookbench.invalid/") for u in cat2.products["url"].to_pylist())
    assert cat1.counts["products"] == _items() and cat1.counts["looks"] == 3


def test_look_links_resolve_to_the_colour_the_look_shows_whatever_the_feed_order(tmp_path):
    """A look links a model's page (several colours); the spider's feed holds that page's colours in the order their
    image downloads finished. The look's product is the colour the page opens on (the colour the demo look shows),
    and the tables are the same for every order of the feed."""
    import random

    site = _site(tmp_path)
    out = crawl_site(site, tmp_path / "run", "test-bot", local_server=local_site)
    truth = json.loads((tmp_path / "run" / "site" / "ground_truth.json").read_text())
    feed = list(out.items)
    orders = [feed, feed[::-1]] + [random.Random(k).sample(feed, len(feed)) for k in range(3)]
    tables = []
    for k, items in enumerate(orders):
        out.items = items
        cat = merge_catalog(out, tmp_path / f"state{k}")
        sku = dict(zip(cat.products["product_id"].to_pylist(), cat.products["sku"].to_pylist()))
        for lk in cat.looks.to_pylist():
            number = str(int(lk["url"].rsplit("look-", 1)[1].split(".")[0]))
            assert [sku[p] for p in lk["product_ids"]] == truth["looks"][number]["skus"], (k, lk["url"])
        assert cat.counts["look_links.page_default"] >= 1, "a look links a page of several colours"
        assert sum(v for c, v in cat.counts.items() if c.startswith("look_links.")) == \
            sum(len(lk["product_urls"]) for lk in cat.looks.to_pylist())
        tables.append((cat.products.drop(["crawled_at", "first_seen_at", "last_seen_at"]), cat.looks.drop(
            ["crawled_at", "first_seen_at", "last_seen_at"])))
    assert all(t[0].equals(tables[0][0]) and t[1].equals(tables[0][1]) for t in tables[1:])


def test_resolve_look_link():
    from lookbench_pipeline.crawl import PageProduct, resolve_look_link
    from lookbench_pipeline.extract import path_key

    base = "https://shop.test/products/coat"
    colours = [PageProduct("p-black", "COAT-1-BLACK", "COAT-1"), PageProduct("p-red", "COAT-1-RED", "COAT-1"),
               PageProduct("p-blue", "4711", None)]
    on_page = {path_key("s", base): colours,
               path_key("s", "https://shop.test/products/hat"): [PageProduct("p-hat", None, None)]}
    assert resolve_look_link("s", base, on_page) == ("p-black", "page_default")
    assert resolve_look_link("s", base + "#reviews", on_page) == ("p-black", "page_default")
    assert resolve_look_link("s", "https://shop.test/products/hat", on_page) == ("p-hat", "single")
    # the exact page (with its query) was not crawled: only a query naming one of the colours resolves it
    assert resolve_look_link("s", base + "?variant=coat-1-red", on_page) == ("p-red", "named_in_link")
    assert resolve_look_link("s", base + "?ref=look&variant=4711", on_page) == ("p-blue", "named_in_link")
    assert resolve_look_link("s", base + "?ref=look", on_page) == (None, "unresolved")
    # a reference every colour shares names the product, as a link to its page does: the page's first colour
    assert resolve_look_link("s", base + "?sku=COAT-1", on_page) == ("p-black", "named_in_link")
    assert resolve_look_link("s", "https://shop.test/products/shoe", on_page) == (None, "unresolved")
    # the exact page was crawled (a variant URL lists all the model's colours): the named colour, else its first
    on_page[path_key("s", base + "?variant=COAT-1-RED")] = colours
    on_page[path_key("s", base + "?ref=look")] = colours
    assert resolve_look_link("s", base + "?variant=COAT-1-RED", on_page) == ("p-red", "named_in_link")
    assert resolve_look_link("s", base + "?ref=look", on_page) == ("p-black", "page_default")


def test_warc_replay_conditional_requests_and_x_robots_tag(tmp_path):
    from lookbench_pipeline.config import SiteConfig
    from lookbench_pipeline.warc import extract_from_warc

    site = _site(tmp_path)
    root = tmp_path / "shop"
    demo_shop.generate(root, 12, 3, 7)
    noindex = "/images/products/demo-0003-0.jpg"
    headers = lambda path: {"X-Robots-Tag": "noimageindex"} if path == noindex else {}  # noqa: E731
    cache = tmp_path / "httpcache"
    with serve.serving(serve.static_resolver(root), headers) as srv:
        feed, _ = run_spider(site, srv.base_url, tmp_path / "c1", "test-bot", cache_dir=cache)
        first = list(srv.statuses)
        srv.statuses.clear()
        run_spider(site, srv.base_url, tmp_path / "c2", "test-bot", cache_dir=cache)
        second = list(srv.statuses)
    items = [json.loads(line) for line in feed.read_text().splitlines()]
    # X-Robots-Tag: noimageindex is honoured for images
    reasons = {d["url"].split("/", 3)[-1]: d["reason"] for i in items if i["kind"] == "product" for d in i["images"]}
    assert reasons[noindex.lstrip("/")] == "x_robots_tag_noimageindex"
    assert sum(r is None for r in reasons.values()) == len(reasons) - 1
    # the re-crawl revalidates pages with conditional requests and gets 304s
    assert all(s == 200 for p, s in first if p.endswith(".html"))
    assert sum(1 for p, s in second if p.startswith("/products/") and s == 304) == 12
    # the WARC alone reproduces the products
    from_warc = extract_from_warc([tmp_path / "c1/crawl.warc.gz"], SiteConfig.from_yaml(site))
    key = lambda i: (i["url"], i["page_position"], i.get("sku"), i.get("title"), i.get("price"),  # noqa: E731
                     tuple(i.get("image_urls") or []))
    crawled = sorted(key(i) for i in items if i["kind"] == "product")
    assert sorted(key(i) for i in from_warc if i["kind"] == "product") == crawled
    assert len([i for i in from_warc if i["kind"] == "look"]) == 3


def test_real_robots_files_are_obeyed(tmp_path, realdata):
    """For each real robots.txt, a sitemap lists pages it disallows and pages it allows; only the allowed are
    fetched."""
    from protego import Protego

    site = tmp_path / "site.yaml"
    site.write_text(yaml.safe_dump({"name": "robots", "kind": "web", "start_urls": [],
                                    "sitemap_urls": ["{{BASE}}/sitemap.xml"], "allow_private_addresses": True,
                                    "follow_links": False}))
    candidates = ["/checkout/", "/cart/", "/account/", "/search?q=dress", "/api/", "/wishlist/", "/my-account/",
                  "/login", "/basket", "/customer/", "/*.pdf", "/giftcard/",
                  "/women/dresses/p/123.html", "/product/red-dress", "/sale/", "/on/demandware.store/x"]
    checked = 0
    for rb in sorted((realdata / "pages/robots").glob("*.txt")):
        text = rb.read_text(encoding="utf-8", errors="replace")
        rp = Protego.parse(text)
        ua = "LookBenchBot"
        allowed = [c for c in candidates if rp.can_fetch("http://h" + c, ua)]
        disallowed = [c for c in candidates if not rp.can_fetch("http://h" + c, ua)]
        if not disallowed:
            continue
        urls = allowed + disallowed
        pages = {"/robots.txt": text, "/sitemap.xml": '<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.'
                 'org/schemas/sitemap/0.9">' + "".join(f"<url><loc>{{{{BASE}}}}{u.replace('&', '&amp;')}</loc></url>"
                                                      for u in urls) + "</urlset>"}
        root = tmp_path / rb.stem
        root.mkdir()
        with serve.serving(serve.static_resolver(root, pages)) as srv:
            run_spider(site, srv.base_url, tmp_path / f"out-{rb.stem}", f"{ua}/0.1 (+https://example.invalid)")
            hits = set(srv.hits)
        for d in disallowed:
            assert d.split("?")[0] not in hits, f"{rb.name}: fetched disallowed {d}"
        checked += 1
    assert checked >= 6


def test_killed_crawl_resumes_to_the_same_products(tmp_path):
    import os
    import random
    import signal
    import subprocess
    import time

    from lookbench_pipeline.crawl import CRAWLERS_DIR, read_feed, spider_command

    site = _site(tmp_path)
    root = tmp_path / "shop"
    truth = demo_shop.generate(root, 12, 3, 7)
    rng = random.Random(5)
    with serve.serving(serve.static_resolver(root)) as srv:
        out = tmp_path / "killed"
        out.mkdir()
        for attempt in range(4):
            cmd, env = spider_command(site, srv.base_url, out, "test-bot", resume=attempt > 0)
            cmd += ["-s", "DOWNLOAD_DELAY=0.05", "-s", "AUTOTHROTTLE_ENABLED=False", "-s", "CONCURRENT_REQUESTS=2"]
            proc = subprocess.Popen(cmd, cwd=CRAWLERS_DIR, env=env, start_new_session=True,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(rng.uniform(1.2, 2.5))
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        run_spider(site, srv.base_url, out, "test-bot", resume=True)
    items = read_feed(out / "items.jsonl")
    assert {i["sku"] for i in items if i["kind"] == "product"} == set(truth["products"])
    assert {i["url"].rsplit("/", 1)[-1] for i in items if i["kind"] == "look"} == {
        f"look-{n:03d}.html" for n in range(3)}


def test_disappeared_products_are_marked(tmp_path):
    site = _site(tmp_path)
    out1 = crawl_site(site, tmp_path / "run1", "test-bot", local_server=local_site)
    merge_catalog(out1, tmp_path / "state")
    # the shop drops a product: remove its page from the second crawl's feed as if it were gone
    out2 = crawl_site(site, tmp_path / "run2", "test-bot", local_server=local_site)
    gone_sku = "DEMO-0000"
    out2.items = [i for i in out2.items if i.get("sku") != gone_sku]
    cat2 = merge_catalog(out2, tmp_path / "state")
    assert cat2.counts["products_disappeared"] == 1 and cat2.products.num_rows == _items() - 1
    import pyarrow.parquet as pq

    state = pq.read_table(tmp_path / "state/demo/products.parquet").to_pylist()
    gone = [r for r in state if r["sku"] == gone_sku]
    assert gone and gone[0]["disappeared_at"] is not None
    assert all(r["disappeared_at"] is None for r in state if r["sku"] != gone_sku)


def test_shopify_json_endpoints(tmp_path, realdata):
    from lookbench_pipeline.extract import shopify_products

    many = {"products": json.loads((realdata / "pages/shopify/shopify_admin_api_fixture_products.json").read_text())}
    one = json.loads((realdata / "pages/shopify/shopify_admin_api_fixture_product.json").read_text())
    [p] = shopify_products(one, "https://shop.test/products/ipod-nano.json")
    assert p["title"] == "IPod Nano - 8GB" and p["price"] == 199.0 and p["url"] == "https://shop.test/products/ipod-nano"
    assert p["image_urls"] and p["extracted_from"] == "shopify-json"

    def resolve(path, base):
        if path.startswith("/products.json"):
            page = int(path.split("page=")[1].split("&")[0])
            body = many if page == 1 else {"products": []}
            return json.dumps(body).encode(), "application/json"
        if path == "/robots.txt":
            return b"User-agent: *\nAllow: /\n", "text/plain"
        return None, ""

    site = tmp_path / "shopify.yaml"
    site.write_text(yaml.safe_dump({"name": "shopify", "start_urls": [], "sitemap_urls": ["{{BASE}}/robots.txt"],
                                    "shopify": True, "allow_private_addresses": True, "follow_links": False}))
    with serve.serving(resolve) as srv:
        feed, _ = run_spider(site, srv.base_url, tmp_path / "out", "test-bot")
        hits = list(srv.hits)
    items = [json.loads(line) for line in feed.read_text().splitlines()]
    titles = {i["title"] for i in items if i["kind"] == "product"}
    assert titles == {p["title"] for p in many["products"]}
    assert hits.count("/products.json") == 2, "paginated until an empty page"


def _chromium() -> str | None:
    import shutil

    return shutil.which("chromium")


def test_javascript_pages_rendered_with_playwright(tmp_path):
    import pytest

    if not _chromium():
        pytest.skip("Debian's chromium is not installed (make test installs it when run as root)")
    root = tmp_path / "js"
    demo_shop.write_js_pages(root, 6)
    plain = tmp_path / "plain.yaml"
    conf = {"name": "jsshop", "start_urls": [], "sitemap_urls": ["{{BASE}}/sitemap.xml"],
            "allow_private_addresses": True, "follow_links": False}
    plain.write_text(yaml.safe_dump(conf))
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(yaml.safe_dump({**conf, "render_js": True, "chromium_path": _chromium()}))
    with serve.serving(serve.static_resolver(root)) as srv:
        feed_plain, _ = run_spider(plain, srv.base_url, tmp_path / "plain", "test-bot")
        feed_js, _ = run_spider(rendered, srv.base_url, tmp_path / "rendered", "test-bot")
    kinds = lambda f: [json.loads(x) for x in f.read_text().splitlines()]  # noqa: E731
    assert not [i for i in kinds(feed_plain) if i["kind"] == "product"]
    products = [i for i in kinds(feed_js) if i["kind"] == "product"]
    assert {p["sku"] for p in products} == {f"JS-{i:05d}" for i in range(6)}
    assert all(p["image_urls"][0].endswith(".jpg") for p in products)


def test_max_pages_counts_pages_not_images(tmp_path):
    site = _site(tmp_path)
    conf = yaml.safe_load(site.read_text())
    conf["max_pages"] = 5
    site.write_text(yaml.safe_dump(conf))
    root = tmp_path / "shop"
    demo_shop.generate(root, 12, 3, 7)
    with serve.serving(serve.static_resolver(root)) as srv:
        feed, _ = run_spider(site, srv.base_url, tmp_path / "c", "test-bot")
        html_hits = [h for h in srv.hits if h.endswith(".html") or h == "/"]
    items = [json.loads(line) for line in feed.read_text().splitlines()]
    assert len(html_hits) <= 5
    products = [i for i in items if i["kind"] == "product"]
    assert products and all(d["path"] for p in products for d in p["images"]), "images still downloaded"


def test_private_addresses_refused_unless_allowed(tmp_path):
    """A web site whose start URLs are on a private address fetches nothing without allow_private_addresses (a
    demo or replay site's own local server is allowed whatever the flag: test_egress)."""
    site = _site(tmp_path)
    conf = yaml.safe_load(site.read_text())
    conf["allow_private_addresses"] = False
    conf["kind"] = "web"
    site.write_text(yaml.safe_dump(conf))
    root = tmp_path / "shop"
    demo_shop.generate(root, 4, 1, 7)
    with serve.serving(serve.static_resolver(root)) as srv:
        feed, _ = run_spider(site, srv.base_url, tmp_path / "c", "test-bot")
        hits = list(srv.hits)
    items = [json.loads(line) for line in feed.read_text().splitlines()]
    assert hits == [], "nothing may be fetched from a private address"
    assert items and all(i["kind"] == "page" and i["reason"] == "address_not_global" for i in items)


def test_the_spider_on_its_own_crawls_as_in_the_pipeline(tmp_path):
    """README's `cd crawlers && ../.venv/bin/scrapy crawl shop -a site_config=… -a base_url=… -o items.jsonl`, with
    no -s: the spider applies its site's settings itself (the egress allowance of its own origin, the delay, the
    concurrency, the budget), so the demo site on 127.0.0.1 is crawled, not refused as `address_not_global`."""
    import os
    import subprocess
    import sys

    from lookbench_pipeline.crawl import CRAWLERS_DIR

    site = _site(tmp_path)
    root = tmp_path / "shop"
    truth = demo_shop.generate(root, 4, 1, 7)
    out = tmp_path / "items.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(CRAWLERS_DIR.parent), os.environ.get("PYTHONPATH", "")])}
    with serve.serving(serve.static_resolver(root)) as srv:
        proc = subprocess.run([sys.executable, "-m", "scrapy", "crawl", "shop", "-a", f"site_config={site}",
                               "-a", f"base_url={srv.base_url}", "-o", f"{out}:jsonlines", "-s", "LOG_LEVEL=INFO"],
                              cwd=CRAWLERS_DIR, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    items = [json.loads(line) for line in out.read_text().splitlines()]
    assert not [i for i in items if i.get("reason") == "address_not_global"]
    assert {i["sku"] for i in items if i["kind"] == "product"} == set(truth["products"])
    delay = yaml.safe_load(site.read_text()).get("download_delay_s")
    assert f"'DOWNLOAD_DELAY': {delay}" in proc.stderr or delay in (None, 0), "the site's delay is applied"


def test_image_urls_of_other_schemes_are_recorded_refused_never_fetched(tmp_path):
    """A product page's JSON-LD naming images by file:, data:, javascript:, ftp: and gopher: URLs, and a look page
    whose <img> names a file: URL: each is an image_downloads row and an image_refs row rejected unsupported_scheme (never fetched, never read: not
    /etc/passwd), a data: URI recorded without its payload, and the image counts reconcile, as every http(s) URL's
    do. The shipped demo site configuration, crawled and taken in as `lookbench build` does."""
    import re
    from contextlib import contextmanager

    from lookbench_pipeline import schemas
    from lookbench_pipeline.config import load_config
    from lookbench_pipeline.pipeline import stage_images
    from lookbench_pipeline.store import LocalStore

    site = _site(tmp_path)
    root = tmp_path / "shop"
    demo_shop.generate(root, 4, 1, 7, colour_models=0)
    payload = "iVBORw0KGgo" + "A" * 1_000_000
    hostile = ["file:///etc/passwd", f"data:image/png;base64,{payload}", "javascript:alert(1)",
               "ftp://files.example.invalid/a.jpg", "gopher://example.invalid/1", "FILE:///etc/hostname"]
    page = next(p for p in sorted(root.rglob("*.html")) if "ld+json" in p.read_text() and '"Product"' in p.read_text())
    html = page.read_text()
    m = re.search(r"<script type='application/ld\+json'>(.*?)</script>", html, re.S)
    ld = json.loads(m.group(1))
    ld["image"] = list(ld["image"] if isinstance(ld["image"], list) else [ld["image"]]) + hostile
    page.write_text(html[:m.start(1)] + json.dumps(ld) + html[m.end(1):])
    look_page = root / "looks" / "look-000.html"  # a look whose picture is named by a file: URL
    look_html = look_page.read_text()
    assert "src='/images/looks/look-000.jpg'" in look_html
    look_page.write_text(look_html.replace("src='/images/looks/look-000.jpg'", "src='file:///etc/shadow'"))
    hostile.append("file:///etc/shadow")

    @contextmanager
    def server(_site, _work):
        with serve.serving(serve.static_resolver(root)) as srv:
            yield srv.base_url
            server.hits = list(srv.hits)

    out = crawl_site(site, tmp_path / "run", "test-bot", local_server=server)
    cat = merge_catalog(out, tmp_path / "state")
    downloads = {d["url"]: d for d in cat.downloads.to_pylist()}
    refused = {u: d for u, d in downloads.items() if d["reason"] == "unsupported_scheme"}
    assert len(refused) == len(hostile), sorted(downloads)
    assert all(d["stored_path"] is None for d in refused.values())
    [data_url] = [u for u in refused if u.startswith("data:")]
    assert payload[:40] not in data_url and len(data_url) < 200 and data_url.startswith("data:image/png;base64,")
    assert {"file:///etc/passwd", "javascript:alert(1)", "ftp://files.example.invalid/a.jpg"} <= set(refused)
    assert all(h.startswith("/") for h in server.hits) and not any("passwd" in h for h in server.hits)
    assert "file:///etc/shadow" in cat.looks["image_url"].to_pylist(), "the look is kept, its picture refused"
    assert cat.counts["image_urls"] == len(downloads)

    cfg = load_config(None, data_dir=str(tmp_path / "data"), store={"url": str(tmp_path / "store")})
    refs, _, counts = stage_images(cfg, cat.products, cat.looks, schemas.empty(schemas.DROP_ITEMS), cat.downloads,
                                   LocalStore(tmp_path / "store"))
    rows = refs.to_pylist()
    assert counts["in"] == counts["accepted"] + counts["rejected"] == len(rows)
    assert counts["rejected.unsupported_scheme"] == len(hostile) == counts["rejected"]
    assert {r["source"] for r in rows if r["reason"] == "unsupported_scheme"} == set(refused)
    assert all(r["image_sha256"] is None for r in rows if r["reason"]), "never read"
    assert max(len(r["source"]) for r in rows) < 300
    # every http(s) URL is still recorded: accepted or with its reason
    assert all(r["status"] == "accepted" for r in rows if r["source"].startswith("http"))
