"""The crawl's records lose nothing: the pages a site's max_pages cut, the reasons of image downloads (empty,
too large, beyond the per-item cap), readable sitemap rejections, a start URL listed as a sitemap too, the crawl
line's rejections by reason, and the standalone spider without the origin of a replay site. Each crawl runs as
the pipeline runs it (``crawl_site`` with a local server, ``merge_catalog``, the stage's headline)."""

import json
from contextlib import contextmanager
from pathlib import Path

import yaml

from assets.crawl import crawl_headline
from lookbench_pipeline.crawl import crawl_site, merge_catalog
from lookbench_pipeline.demo import serve
from tiny_inputs import solid_jpeg

ROBOTS = b"User-agent: *\nAllow: /\n"


def _product(i: int, images: list[str] | None = None) -> bytes:
    ld = {"@type": "Product", "name": f"Coat {i}", "sku": f"C{i}", "image": images or [f"/img/{i}.jpg"],
          "offers": {"@type": "Offer", "price": "10.00", "priceCurrency": "EUR"}}
    return (f"<html><head><script type='application/ld+json'>{json.dumps(ld)}</script></head>"
            f"<body><h1>Coat {i}</h1></body></html>").encode()


def _urlset(paths: list[str], base: str) -> bytes:
    return ('<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            + "".join(f"<url><loc>{base}{p}</loc></url>" for p in paths) + "</urlset>").encode()


def _site(tmp_path: Path, **conf) -> Path:
    p = tmp_path / "site.yaml"
    p.write_text(yaml.safe_dump({"name": "s", "kind": "demo", "allow_private_addresses": True, "start_urls": [],
                                 "follow_links": False, **conf}))
    return p


def _crawl(tmp_path: Path, site: Path, resolve, **kw):
    """``crawl_site`` + ``merge_catalog`` with ``resolve`` served on 127.0.0.1; the server's hits on ``.hits``."""
    hits: list[str] = []

    @contextmanager
    def server(_site, _work):
        with serve.serving(resolve) as srv:
            yield srv.base_url
            hits.extend(srv.hits)

    out = crawl_site(site, tmp_path / "run", "test-bot", local_server=server, **kw)
    cat = merge_catalog(out, tmp_path / "state")
    return cat, hits


def _shop(pages: dict[str, bytes], files: dict[str, bytes]):
    """A resolver for ``serve.serving``: robots.txt, a sitemap of ``pages`` (path -> HTML) in their order, and the
    image bytes of ``files`` by path (any other path: 404)."""
    def resolve(path, base):
        if path == "/robots.txt":
            return ROBOTS, "text/plain"
        if path == "/sitemap.xml":
            return _urlset(list(pages), base), "application/xml"
        if path in pages:
            return pages[path], "text/html"
        return (files[path], "image/jpeg") if path in files else (None, "")
    return resolve


def _one_product_shop(images: list[str], files: dict[str, bytes]):
    """:func:`_shop` of one product page, ``/p/1.html``, naming ``images``."""
    return _shop({"/p/1.html": _product(1, images)}, files)


def _reconciles(cat) -> None:
    """Every row is counted once: rows = kept + redirected + rejected, each as many as the log has."""
    from lookbench_pipeline.crawl_tables import page_tally

    c, t = cat.counts, page_tally(cat.counts)
    outcomes = cat.crawl_log.to_pandas().outcome
    assert c["pages"] == cat.crawl_log.num_rows == sum(v for k, v in c.items() if k.startswith("pages.")) \
        and t["rejected"] == outcomes.eq("rejected").sum() and t["redirected"] == outcomes.eq("redirected").sum()
    assert t["rows"] == t["kept"] + t["redirected"] + t["rejected"] and t["pages"] == t["rows"] - t["redirected"]


def test_the_pages_max_pages_cuts_are_recorded_and_the_crawl_line_says_so(tmp_path):
    """A sitemap of 7 product pages and a page of no structured data, max_pages 3: 3 pages are fetched, the other 5
    are each a rejected row max_pages_reached (never fetched), and the crawl line names the reasons and the cut."""
    listed = [f"/p/{i}.html" for i in range(7)] + ["/about.html"]

    def resolve(path, base):
        if path == "/robots.txt":
            return ROBOTS, "text/plain"
        if path == "/sitemap.xml":
            return _urlset(listed, base), "application/xml"
        if path.startswith("/p/"):
            return _product(int(path.split("/")[-1].split(".")[0])), "text/html"
        if path == "/about.html":
            return b"<html><body>about us</body></html>", "text/html"
        if path.startswith("/img/"):
            return solid_jpeg(), "image/jpeg"
        return None, ""

    cat, hits = _crawl(tmp_path, _site(tmp_path, sitemap_urls=["{{BASE}}/sitemap.xml"], max_pages=3), resolve)
    rows = cat.crawl_log.to_pylist()
    cut = [r for r in rows if r["reason"] == "max_pages_reached"]
    fetched = [h for h in hits if h.endswith(".html")]
    assert len(fetched) == 3 and len(cut) == 5
    assert all(r["outcome"] == "rejected" and r["status"] == 0 for r in cut)
    assert {r["url"].split("/", 3)[-1] for r in cut}.isdisjoint(h.lstrip("/") for h in fetched), "never fetched"
    assert {r["url"].split("/", 3)[-1] for r in rows} >= {p.lstrip("/") for p in listed}, "every listed URL has a row"
    _reconciles(cat)
    c = cat.counts
    assert c["max_pages_cut"] == 5 and c["pages.rejected.max_pages_reached"] == 5
    line = crawl_headline(c)
    assert "max_pages cut the crawl (5 URLs not fetched)" in line
    rejected = sum(v for k, v in c.items() if k.startswith("pages.rejected."))
    assert line.startswith(f"pages 9 (kept {9 - rejected}, rejected {rejected} (")
    assert "max_pages_reached 5" in line and ("no_structured_data 1" in line) == ("/about.html" in fetched)


def test_max_pages_rows_are_bounded_and_the_rest_counted(tmp_path, monkeypatch):
    """Beyond MAX_PAGES_CUT_ROWS the URLs the limit cuts get no row, only the spider's count, which the crawl's
    max_pages_cut adds: a site of millions of URLs does not fill the log."""
    from lookbench_crawlers.spiders import shop

    monkeypatch.setattr(shop, "MAX_PAGES_CUT_ROWS", 3)

    class Stats:
        def __init__(self):
            self.values = {}

        def set_value(self, k, v):
            self.values[k] = v

        def inc_value(self, k, n=1):
            self.values[k] = self.values.get(k, 0) + n

    class Crawler:
        stats = Stats()

    spider = shop.ShopSpider(site_config=str(_site(tmp_path, sitemap_urls=["{{BASE}}/s.xml"], max_pages=2)),
                             base_url="http://127.0.0.1:9")
    spider.crawler = Crawler()
    out = [spider._admit(f"http://127.0.0.1:9/p/{i}.html") for i in range(10)]
    assert [ok for ok, _ in out] == [True, True] + [False] * 8
    assert [row["reason"] for _, row in out[2:5]] == ["max_pages_reached"] * 3 and all(r is None for _, r in out[5:])
    assert spider._admit("http://127.0.0.1:9/p/3.html") == (False, None), "a URL with its row is not counted twice"
    assert spider._admit("http://127.0.0.1:9/p/8.html") == (False, None), "nor a URL counted already"
    assert Crawler.stats.values == {"lookbench/max_pages_reached": 1, "lookbench/max_pages_cut_unlisted": 5}
    # beyond MAX_PAGES_CUT_TRACKED remembered URLs each discovery of a new one is counted apart: "at least"
    monkeypatch.setattr(shop, "MAX_PAGES_CUT_TRACKED", 6)
    for u in ["/p/10.html", "/p/11.html", "/p/11.html", "/p/10.html"]:
        assert spider._admit("http://127.0.0.1:9" + u) == (False, None)
    assert Crawler.stats.values == {"lookbench/max_pages_reached": 1, "lookbench/max_pages_cut_unlisted": 6,
                                    "lookbench/max_pages_cut_untracked": 2}


def test_max_pages_counts_each_cut_url_once_however_often_it_is_listed(tmp_path):
    """A sitemap listing 1,010 URLs twice over (menus, sitemaps repeat links), max_pages 1: MAX_PAGES_CUT_ROWS rows,
    the other cut URLs counted once each, and the crawl line says how many URLs were not fetched, not discoveries."""
    from lookbench_crawlers.spiders.shop import MAX_PAGES_CUT_ROWS

    listed = [f"/p/{i}.html" for i in range(MAX_PAGES_CUT_ROWS + 10)]

    def resolve(path, base):
        if path == "/robots.txt":
            return ROBOTS, "text/plain"
        if path == "/sitemap.xml":
            return _urlset(listed + listed, base), "application/xml"
        if path.startswith("/p/"):
            return _product(int(path.split("/")[-1].split(".")[0])), "text/html"
        return (solid_jpeg(), "image/jpeg") if path.startswith("/img/") else (None, "")

    cat, hits = _crawl(tmp_path, _site(tmp_path, sitemap_urls=["{{BASE}}/sitemap.xml"], max_pages=1), resolve)
    c = cat.counts
    assert len([h for h in hits if h.startswith("/p/")]) == 1
    assert c["pages.rejected.max_pages_reached"] == MAX_PAGES_CUT_ROWS
    assert c["scrapy"]["lookbench/max_pages_cut_unlisted"] == 9
    assert c["max_pages_cut"] == len(listed) - 1 and "max_pages_cut_at_least" not in c
    assert f"max_pages cut the crawl ({len(listed) - 1} URLs not fetched)" in crawl_headline(c)
    _reconciles(cat)
    assert "(at least 7 URLs not fetched)" in crawl_headline({**c, "max_pages_cut": 7, "max_pages_cut_at_least": True})


def test_image_failures_have_their_own_reasons_and_the_per_item_cap(tmp_path):
    """A product naming an empty image (200, 0 bytes), one over DOWNLOAD_MAXSIZE, a 404, a good one and 120 more
    URLs that all answer 404: the first MAX_IMAGES_PER_ITEM are requested, the rest recorded too_many_images, never
    fetched; each reason is the intake's own name where it has one, and the image counts reconcile."""
    from lookbench_crawlers.pipelines import MAX_IMAGES_PER_ITEM

    from lookbench_pipeline import schemas
    from lookbench_pipeline.config import load_config
    from lookbench_pipeline.pipeline import stage_images
    from lookbench_pipeline.store import LocalStore

    extra = [f"/img/missing-{i}.jpg" for i in range(120)]
    images = ["/img/ok.jpg", "/img/empty.jpg", "/img/huge.jpg", "/img/gone.jpg"] + extra

    resolve = _one_product_shop(images, {"/img/ok.jpg": solid_jpeg(), "/img/empty.jpg": b"",
                                         # over DOWNLOAD_MAXSIZE (20 MiB)
                                         "/img/huge.jpg": b"\xff\xd8" + b"\0" * (20 * 1024 * 1024 + 10)})

    cat, hits = _crawl(tmp_path, _site(tmp_path, sitemap_urls=["{{BASE}}/sitemap.xml"]), resolve)
    reason = {d["url"].split("/", 3)[-1]: d["reason"] for d in cat.downloads.to_pylist()}
    assert len(reason) == len(images)
    assert reason["img/ok.jpg"] is None
    assert reason["img/empty.jpg"] == "empty_file"
    assert reason["img/huge.jpg"] == "too_large_bytes"
    assert reason["img/gone.jpg"] == "http_404"
    beyond = [u.lstrip("/") for u in images[MAX_IMAGES_PER_ITEM:]]
    assert {reason[u] for u in beyond} == {"too_many_images"} and len(beyond) == len(images) - MAX_IMAGES_PER_ITEM
    assert not {"/" + u for u in beyond} & set(hits), "never requested"
    assert {reason[u.lstrip("/")] for u in images[4:MAX_IMAGES_PER_ITEM]} == {"http_404"}
    assert cat.counts["image_urls"] == len(images) and cat.counts["image_urls_downloaded"] == 1

    cfg = load_config(None, data_dir=str(tmp_path / "data"), store={"url": str(tmp_path / "store")})
    refs, _, counts = stage_images(cfg, cat.products, cat.looks, schemas.empty(schemas.DROP_ITEMS), cat.downloads,
                                   LocalStore(tmp_path / "store"))
    assert counts["in"] == counts["accepted"] + counts["rejected"] == refs.num_rows == len(images)
    assert counts["rejected.too_many_images"] == len(beyond) and counts["rejected.empty_file"] == 1
    assert counts["rejected.too_large_bytes"] == 1 and counts["accepted"] == 1


def test_the_image_size_limit_is_the_intakes_not_the_pages(tmp_path):
    """The pipeline passes images.max_bytes to the crawl (stage_crawl: crawl_site(image_max_bytes=…)): an image
    over the pages' DOWNLOAD_MAXSIZE (20 MiB) but under the limit is downloaded, and one over a small limit is
    recorded too_large_bytes, the intake's reason for the same thing."""
    big = b"\xff\xd8" + b"\0" * (20 * 1024 * 1024 + 10)
    resolve = _one_product_shop(["/img/big.jpg", "/img/ok.jpg"], {"/img/big.jpg": big, "/img/ok.jpg": solid_jpeg()})

    site = _site(tmp_path, sitemap_urls=["{{BASE}}/sitemap.xml"])
    cat, _ = _crawl(tmp_path / "a", site, resolve, image_max_bytes=50_000_000)
    assert {d["url"].rsplit("/", 1)[-1]: d["reason"] for d in cat.downloads.to_pylist()} == {"big.jpg": None,
                                                                                             "ok.jpg": None}
    cat, _ = _crawl(tmp_path / "b", site, resolve, image_max_bytes=len(solid_jpeg()) - 1)
    assert {d["url"].rsplit("/", 1)[-1]: d["reason"] for d in cat.downloads.to_pylist()} == {
        "big.jpg": "too_large_bytes", "ok.jpg": "too_large_bytes"}


def test_image_failure_reasons_behind_scrapys_file_exception():
    """Scrapy raises a bare FileException while it handles the download's own exception: the cause names it."""
    from scrapy.exceptions import DownloadCancelledError, DownloadTimeoutError
    from scrapy.pipelines.media import FileException
    from twisted.internet.defer import CancelledError
    from twisted.internet.error import ConnectionRefusedError

    from lookbench_crawlers.pipelines import _failure_reason

    def wrapped(exc):
        try:
            try:
                raise exc
            except Exception:
                raise FileException  # noqa: B904 (as Scrapy's media_failed does)
        except FileException as outer:
            return outer

    assert _failure_reason(FileException("empty-content")) == "empty_file"
    assert _failure_reason(wrapped(DownloadCancelledError(
        "Expected to receive 30000000 bytes which is larger than download max size (20971520) in request x."))) \
        == "too_large_bytes"
    # a bare cancel is no evidence of the size limit (the crawl stopping cancels downloads too)
    assert _failure_reason(wrapped(CancelledError())) == "download_cancelled"
    assert _failure_reason(wrapped(DownloadTimeoutError("took longer than 30 s"))) == "download_timeout"
    assert _failure_reason(wrapped(ConnectionRefusedError())) == "fetch_error:connection_refused"
    assert _failure_reason(FileException("download-error")) == "http_error"


@contextmanager
def _unsized_server(files: dict[str, bytes], pages: dict[str, bytes]):
    """A local_server for crawl_site: HTTP/1.0 answers without Content-Length (the body ends when the connection
    closes), so Scrapy only learns a body is too large while receiving it, and cancels it bare."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            path = self.path.split("?")[0]
            base = f"http://127.0.0.1:{self.server.server_address[1]}"
            body, ctype = (ROBOTS, "text/plain") if path == "/robots.txt" else \
                (_urlset(list(pages), base), "application/xml") if path == "/sitemap.xml" else \
                (pages[path], "text/html") if path in pages else (files[path], "image/jpeg") if path in files \
                else (None, "")
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_body_cut_while_received_is_too_large_and_only_then(tmp_path):
    """An image served with no Content-Length grows over the limit while it is received: Scrapy cancels it bare
    (a CancelledError, the reason only logged); the pipeline counted its bytes, so it is too_large_bytes, while an
    image under the limit from the same server is stored."""
    big, ok = b"\xff\xd8" + b"\0" * 200_000, solid_jpeg()
    assert len(ok) < 100_000
    pages = {"/p/1.html": _product(1, ["/img/big.jpg", "/img/ok.jpg"])}

    @contextmanager
    def server(_site, _work):
        with _unsized_server({"/img/big.jpg": big, "/img/ok.jpg": ok}, pages) as base:
            yield base

    out = crawl_site(_site(tmp_path, sitemap_urls=["{{BASE}}/sitemap.xml"]), tmp_path / "run", "test-bot",
                     local_server=server, image_max_bytes=100_000)
    cat = merge_catalog(out, tmp_path / "state")
    assert {d["url"].rsplit("/", 1)[-1]: (d["reason"], bool(d["stored_path"])) for d in cat.downloads.to_pylist()} \
        == {"big.jpg": ("too_large_bytes", False), "ok.jpg": (None, True)}


def test_a_stored_image_wins_over_its_refusal_on_another_item(tmp_path):
    """Two products of one page name the same picture: the first beyond its MAX_IMAGES_PER_ITEM (too_many_images,
    never requested), the second first (downloaded). The URL's one row is the stored file, and the intake takes it
    for the second product."""
    from lookbench_crawlers.pipelines import MAX_IMAGES_PER_ITEM

    a = [f"/img/a-{i}.jpg" for i in range(MAX_IMAGES_PER_ITEM)] + ["/img/shared.jpg"]
    lds = [{"@type": "Product", "name": "Coat A", "sku": "A", "image": a,
            "offers": {"@type": "Offer", "price": "10.00", "priceCurrency": "EUR"}},
           {"@type": "Product", "name": "Coat B", "sku": "B", "image": ["/img/shared.jpg"],
            "offers": {"@type": "Offer", "price": "12.00", "priceCurrency": "EUR"}}]
    page = (f"<html><head><script type='application/ld+json'>{json.dumps(lds)}</script></head>"
            "<body>two coats</body></html>").encode()

    resolve = _shop({"/p/1.html": page}, {"/img/shared.jpg": solid_jpeg()})

    cat, hits = _crawl(tmp_path, _site(tmp_path, sitemap_urls=["{{BASE}}/sitemap.xml"]), resolve)
    assert sorted(cat.products["sku"].to_pylist()) == ["A", "B"]
    rows = [d for d in cat.downloads.to_pylist() if d["url"].endswith("/img/shared.jpg")]
    assert len(rows) == 1 and rows[0]["reason"] is None and Path(rows[0]["stored_path"]).is_file(), rows
    assert hits.count("/img/shared.jpg") == 1
    assert cat.counts["image_urls"] == len(a) and cat.counts["image_urls_downloaded"] == 1


def test_one_page_requests_at_most_max_images_per_page(tmp_path):
    """A page of 11 products naming 100 image URLs each (each within MAX_IMAGES_PER_ITEM) and one URL they all share:
    the page requests MAX_IMAGES_PER_PAGE distinct URLs (the shared one counted once), the rest are recorded
    too_many_images and never requested; another page has its own count, and the image counts reconcile."""
    from lookbench_crawlers.pipelines import MAX_IMAGES_PER_ITEM, MAX_IMAGES_PER_PAGE

    n = MAX_IMAGES_PER_PAGE // (MAX_IMAGES_PER_ITEM - 1) + 1
    own = {i: [f"/img/{i}-{j}.jpg" for j in range(MAX_IMAGES_PER_ITEM - 1)] for i in range(n)}
    lds = [{"@type": "Product", "name": f"Cape {i}", "sku": f"M{i}", "image": ["/img/shared.jpg"] + own[i],
            "offers": {"@type": "Offer", "price": "10.00", "priceCurrency": "EUR"}} for i in range(n)]
    page = (f"<html><head><script type='application/ld+json'>{json.dumps(lds)}</script></head>"
            "<body>coats</body></html>").encode()

    resolve = _shop({"/p/many.html": page, "/p/1.html": _product(1, ["/img/other.jpg"])},
                    {"/img/shared.jpg": solid_jpeg(), "/img/other.jpg": solid_jpeg()})

    cat, hits = _crawl(tmp_path, _site(tmp_path, sitemap_urls=["{{BASE}}/sitemap.xml"]), resolve)
    assert len(cat.products) == n + 1
    reason = {d["url"].split("/", 3)[-1]: d["reason"] for d in cat.downloads.to_pylist()}
    distinct = 1 + sum(len(v) for v in own.values())
    assert distinct > MAX_IMAGES_PER_PAGE and len(reason) == distinct + 1
    requested = {h for h in hits if h.startswith("/img/")}
    assert len(requested) == MAX_IMAGES_PER_PAGE + 1 and "/img/other.jpg" in requested
    refused = {u for u, r in reason.items() if r == "too_many_images"}
    assert len(refused) == distinct - MAX_IMAGES_PER_PAGE and not {"/" + u for u in refused} & requested
    assert reason["img/shared.jpg"] is None and reason["img/other.jpg"] is None
    assert cat.counts["image_urls"] == len(reason) and cat.counts["image_urls_downloaded"] == 2


def test_sitemap_rejections_name_what_is_wrong(tmp_path):
    """An HTML page, a text file, an RSS feed, an empty body and broken gzip served as sitemaps: each a rejected
    row with a readable reason under the stable prefix bad_sitemap:, never an exception's class name."""
    import gzip

    sitemaps = {"/html.xml": (b"<!DOCTYPE html><html><head><title>Shop</title></head><body><p>Hi</body></html>",
                              "text/html"),
                "/text.xml": (b"this is not xml at all", "application/xml"),
                "/rss.xml": (b'<?xml version="1.0"?><rss version="2.0"><channel><title>x</title></channel></rss>',
                             "application/xml"),
                "/empty.xml": (b"   ", "application/xml"),
                "/bad.xml.gz": (b"\x1f\x8b\x08 not deflate data at all", "application/x-gzip")}

    def resolve(path, base):
        if path == "/robots.txt":
            return ROBOTS, "text/plain"
        return sitemaps.get(path, (None, ""))

    site = _site(tmp_path, sitemap_urls=["{{BASE}}" + p for p in sitemaps])
    cat, _ = _crawl(tmp_path, site, resolve)
    reason = {r["url"].split("/", 3)[-1]: r["reason"] for r in cat.crawl_log.to_pylist()}
    assert reason == {"html.xml": "bad_sitemap:not_a_sitemap", "text.xml": "bad_sitemap:not_xml",
                      "rss.xml": "bad_sitemap:not_a_sitemap", "empty.xml": "bad_sitemap:empty",
                      "bad.xml.gz": "bad_sitemap:bad_gzip"}, reason
    _reconciles(cat)
    assert "rejected 5 (bad_sitemap:bad_gzip 1, bad_sitemap:empty 1, bad_sitemap:not_a_sitemap 2, " \
           "bad_sitemap:not_xml 1)" in crawl_headline(cat.counts)


def test_a_gzipped_sitemap_over_the_size_limit_is_too_large():
    import gzip

    from lookbench_crawlers.spiders.shop import sitemap_entries

    assert sitemap_entries(gzip.compress(b"<urlset>" + b" " * 10_000 + b"</urlset>"), max_size=1000) \
        == (None, "bad_sitemap:too_large")
    assert sitemap_entries(gzip.compress(b"<urlset><url><loc>https://a.example/p</loc></url></urlset>"), 1000) \
        == (["urlset", {"loc": "https://a.example/p"}], None)


def test_a_start_url_listed_as_a_sitemap_too_is_crawled_as_its_page_once(tmp_path):
    """The product page is both a start URL and a sitemap URL: fetched once, read as the page it is (its product
    kept, one crawl-log row), not rejected as a bad sitemap; a real sitemap listed both ways stays a sitemap."""

    def resolve(path, base):
        if path == "/robots.txt":
            return ROBOTS, "text/plain"
        if path == "/sitemap.xml":
            return _urlset(["/p/2.html"], base), "application/xml"
        if path.startswith("/p/"):
            return _product(int(path.split("/")[-1].split(".")[0])), "text/html"
        if path.startswith("/img/"):
            return solid_jpeg(), "image/jpeg"
        return None, ""

    both = ["{{BASE}}/p/1.html", "{{BASE}}/sitemap.xml"]
    cat, hits = _crawl(tmp_path, _site(tmp_path, sitemap_urls=both, start_urls=both), resolve)
    assert sorted(cat.products["sku"].to_pylist()) == ["C1", "C2"]
    outcome = {r["url"].split("/", 3)[-1]: (r["outcome"], r["reason"]) for r in cat.crawl_log.to_pylist()}
    assert outcome == {"p/1.html": ("product", None), "p/2.html": ("product", None), "sitemap.xml": ("sitemap", None)}
    assert hits.count("/p/1.html") == 1 and hits.count("/sitemap.xml") == 1
    _reconciles(cat)


def test_a_start_url_listed_as_a_sitemap_too_holds_its_max_pages_slot(tmp_path):
    """max_pages 1; the sitemap (listing 4 more pages) comes first, then two product pages listed both as start
    URLs and as sitemaps. The first of them is admitted before any request, so no page the sitemap lists takes its
    slot: it is kept, the sitemap's pages are cut (never fetched), and the second, fetched as a sitemap only, is the
    row max_pages_reached with the status it got: every URL one row, nothing claimed unfetched that was read."""
    def resolve(path, base):
        if path == "/robots.txt":
            return ROBOTS, "text/plain"
        if path == "/sitemap.xml":
            return _urlset([f"/p/{i}.html" for i in range(3, 7)], base), "application/xml"
        if path.startswith("/p/"):
            return _product(int(path.split("/")[-1].split(".")[0])), "text/html"
        return (solid_jpeg(), "image/jpeg") if path.startswith("/img/") else (None, "")

    both = ["{{BASE}}/p/1.html", "{{BASE}}/p/2.html"]
    site = _site(tmp_path, sitemap_urls=["{{BASE}}/sitemap.xml"] + both, start_urls=both, max_pages=1)
    cat, hits = _crawl(tmp_path, site, resolve)
    assert cat.products["sku"].to_pylist() == ["C1"]
    outcome = {r["url"].split("/", 3)[-1]: (r["outcome"], r["reason"], r["status"]) for r in cat.crawl_log.to_pylist()}
    assert outcome == {"sitemap.xml": ("sitemap", None, 200), "p/1.html": ("product", None, 200),
                       "p/2.html": ("rejected", "max_pages_reached", 200),
                       **{f"p/{i}.html": ("rejected", "max_pages_reached", 0) for i in range(3, 7)}}, outcome
    assert cat.crawl_log.num_rows == len(outcome) and hits.count("/p/1.html") == hits.count("/p/2.html") == 1
    assert not {f"/p/{i}.html" for i in range(3, 7)} & set(hits)
    assert cat.counts["max_pages_cut"] == 5
    _reconciles(cat)


def test_a_start_url_listed_as_a_sitemap_too_is_rendered_as_a_page_on_a_js_site(tmp_path):
    """On a site that renders JavaScript the URL is requested as a sitemap and, admitted against max_pages first,
    as a page rendered in Chromium, past Scrapy's duplicate filter; its sitemap response then writes no page row,
    and the page response no not_html row when it was a sitemap after all (the sitemap request's row says so)."""
    import asyncio

    from lookbench_crawlers.spiders.shop import ShopSpider

    both = ["{{BASE}}/p/1.html"]
    spider = ShopSpider(site_config=str(_site(tmp_path, sitemap_urls=["{{BASE}}/s.xml"] + both, start_urls=both,
                                              render_js=True, max_pages=5)), base_url="http://127.0.0.1:9")

    async def requests():
        return [r async for r in spider.start()]

    reqs = asyncio.run(requests())
    assert [(r.url, r.callback.__name__, r.dont_filter) for r in reqs] == [
        ("http://127.0.0.1:9/s.xml", "parse_sitemap", False), ("http://127.0.0.1:9/p/1.html", "parse_sitemap", False),
        ("http://127.0.0.1:9/p/1.html", "parse_page", True)]
    assert reqs[1].meta["lookbench_also_page"] == "elsewhere" and reqs[2].meta["playwright"] is True
    assert reqs[2].meta["lookbench_sitemap_too"] is True and spider.pages_requested == 1


def test_the_standalone_spider_refuses_a_replay_site_without_its_base_url(tmp_path):
    """`scrapy crawl shop -a site_config=…` of a site whose URLs start with {{BASE}}, without -a base_url: an error
    that says what to pass, and a non-zero exit (not a "Missing scheme" traceback and exit 0)."""
    import os
    import subprocess
    import sys

    from lookbench_pipeline.crawl import CRAWLERS_DIR

    site = tmp_path / "replay.yaml"
    site.write_text(yaml.safe_dump({"name": "r", "kind": "replay", "pages_dir": str(tmp_path),
                                    "allow_private_addresses": True, "sitemap_urls": ["{{BASE}}/sitemap.xml"]}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(CRAWLERS_DIR.parent), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "scrapy", "crawl", "shop", "-a", f"site_config={site}",
                           "-o", f"{tmp_path / 'items.jsonl'}:jsonlines"],
                          cwd=CRAWLERS_DIR, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0, proc.stderr[-2000:]
    assert "-a base_url=" in proc.stderr and "Missing scheme" not in proc.stderr


def test_the_standalone_spider_crawls_a_replay_site_served_as_readme_says(tmp_path):
    """README: `python -m lookbench_pipeline.demo.serve SITE.yaml` serves a replay site and prints its base URL on
    the first line; `scrapy crawl shop -a site_config=… -a base_url=<it>` then crawls its pages."""
    import json
    import os
    import subprocess
    import sys

    from lookbench_pipeline.crawl import CRAWLERS_DIR

    (tmp_path / "pages").mkdir()
    ld = {"@context": "https://schema.org", "@type": "Product", "name": "Wool coat", "sku": "WC-7",
          "offers": {"@type": "Offer", "price": "120.00", "priceCurrency": "EUR"}}
    (tmp_path / "pages" / "coat.html").write_text(
        f"<html><head><script type='application/ld+json'>{json.dumps(ld)}</script></head><body>x</body></html>")
    site = tmp_path / "replay.yaml"
    site.write_text(yaml.safe_dump({"name": "r", "kind": "replay", "pages_dir": "pages",
                                    "sitemap_urls": ["{{BASE}}/sitemap.xml"]}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(CRAWLERS_DIR.parent), os.environ.get("PYTHONPATH", "")])}
    server = subprocess.Popen([sys.executable, "-m", "lookbench_pipeline.demo.serve", str(site)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        base = server.stdout.readline().strip()
        assert base.startswith("http://127.0.0.1:"), server.stderr.read() if server.poll() is not None else base
        out = tmp_path / "items.jsonl"
        proc = subprocess.run([sys.executable, "-m", "scrapy", "crawl", "shop", "-a", f"site_config={site}",
                               "-a", f"base_url={base}", "-o", f"{out}:jsonlines"],
                              cwd=CRAWLERS_DIR, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        items = [json.loads(line) for line in out.read_text().splitlines()]
        assert [i["sku"] for i in items if i["kind"] == "product"] == ["WC-7"]
    finally:
        server.terminate()
        assert server.wait(timeout=30) == 0
    bad = subprocess.run([sys.executable, "-m", "lookbench_pipeline.demo.serve", str(tmp_path / "missing.yaml")],
                         env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "configuration error" in bad.stderr
    (tmp_path / "gone.yaml").write_text(site.read_text().replace("pages_dir: pages", "pages_dir: gone"))
    bad = subprocess.run([sys.executable, "-m", "lookbench_pipeline.demo.serve", str(tmp_path / "gone.yaml")],
                         env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "is not a folder" in bad.stderr and "Traceback" not in bad.stderr


def test_a_malformed_image_url_is_recorded_and_costs_only_itself(tmp_path):
    """A product naming `http://[::1/b.jpg` (an unclosed bracket: no URL) beside a good picture: the product is
    kept, the good picture stored, the malformed one a malformed_url row never requested, and the intake's counts
    reconcile with it."""
    from lookbench_pipeline import schemas
    from lookbench_pipeline.config import load_config
    from lookbench_pipeline.pipeline import stage_images
    from lookbench_pipeline.store import LocalStore

    resolve = _one_product_shop(["/img/ok.jpg", "http://[::1/b.jpg"], {"/img/ok.jpg": solid_jpeg()})
    cat, hits = _crawl(tmp_path, _site(tmp_path, sitemap_urls=["{{BASE}}/sitemap.xml"]), resolve)
    assert cat.products["sku"].to_pylist() == ["C1"]
    reason = {d["url"]: d["reason"] for d in cat.downloads.to_pylist()}
    assert reason.pop("http://[::1/b.jpg") == "malformed_url" and list(reason.values()) == [None]
    cfg = load_config(None, data_dir=str(tmp_path / "data"), store={"url": str(tmp_path / "store")})
    refs, _, counts = stage_images(cfg, cat.products, cat.looks, schemas.empty(schemas.DROP_ITEMS), cat.downloads,
                                   LocalStore(tmp_path / "store"))
    assert counts["in"] == counts["accepted"] + counts["rejected"] == refs.num_rows == 2
    assert counts["rejected.malformed_url"] == 1


def test_a_bad_sitemap_entry_or_link_costs_only_itself(tmp_path):
    """A sitemap whose <loc>s include javascript:, a relative path, a URL that does not parse and another host,
    before a good page: each bad one is a rejected row with its reason, the good page is still crawled (one bad
    entry used to end the sitemap's processing with a Scrapy error). A page whose <base href> is javascript: and
    whose links include a malformed one still has its good link followed."""
    def resolve(path, base):
        if path == "/robots.txt":
            return ROBOTS, "text/plain"
        if path == "/sitemap.xml":
            locs = ["javascript:alert(1)", "relative/p.html", "http://[::1/x", "https://elsewhere.example/p",
                    f"{base}/p/1.html", f"{base}/hub.html"]
            return ('<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                    + "".join(f"<url><loc>{u}</loc></url>" for u in locs) + "</urlset>").encode(), "application/xml"
        if path == "/p/1.html":
            return _product(1), "text/html"
        if path == "/hub.html":
            return (f"<html><head><base href='javascript:void(0)//'></head><body><a href='http://[::1/y'>x</a>"
                    f"<a href='whatsapp://send'>w</a><a href='{base}/p/2.html'>2</a></body></html>").encode(), \
                "text/html"
        if path == "/p/2.html":
            return _product(2), "text/html"
        return None, ""

    cat, _ = _crawl(tmp_path, _site(tmp_path, sitemap_urls=["{{BASE}}/sitemap.xml"], follow_links=True), resolve)
    rows = {r["url"]: r["reason"] for r in cat.crawl_log.to_pylist() if r["outcome"] == "rejected"}
    assert rows == {"javascript:alert(1)": "bad_url:not_http", "relative/p.html": "bad_url:not_http",
                    "http://[::1/x": "bad_url:malformed", "https://elsewhere.example/p": "host_not_allowed",
                    "https://s.demo.lookbench.invalid/hub.html": "no_structured_data"}, rows  # (a listed non-product)
    assert sorted(cat.products["sku"].to_pylist()) == ["C1", "C2"]
    _reconciles(cat)


def test_a_redirect_out_of_the_sites_scope_is_a_row(tmp_path):
    """Sitemap pages that redirect to another host, to a private address's host, to javascript: and to a URL that
    does not parse are each a rejected row redirect:<why> with the redirect's status (Scrapy's offsite filter
    dropped the redirected request at scheduling, without errback nor row); a redirect within the site is
    followed, its row ``redirected``."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    targets = {"/r1": "http://169.254.169.254/latest", "/r2": "https://elsewhere.example/p",
               "/r3": "javascript:alert(1)", "/r4": "http://[::1/x", "/r5": "/p/1.html"}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            base = f"http://127.0.0.1:{self.server.server_port}"
            if self.path in targets:
                self.send_response(302)
                self.send_header("Location", targets[self.path])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body, ctype = {"/robots.txt": (ROBOTS, "text/plain"), "/p/1.html": (_product(1), "text/html"),
                           "/sitemap.xml": (_urlset(list(targets), base), "application/xml")}.get(self.path,
                                                                                               (b"", "text/plain"))
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        port = srv.server_port
        site = tmp_path / "site.yaml"
        site.write_text(yaml.safe_dump({"name": "s", "kind": "web", "allow_private_addresses": True,
                                        "allowed_ports": [port], "follow_links": False,
                                        "sitemap_urls": [f"http://127.0.0.1:{port}/sitemap.xml"]}))
        cat = merge_catalog(crawl_site(site, tmp_path / "run", "test-bot"), tmp_path / "state")
    finally:
        srv.shutdown()
    rows = {r["url"].rsplit("/", 1)[-1]: (r["status"], r["reason"]) for r in cat.crawl_log.to_pylist()
            if r["outcome"] == "rejected"}
    assert rows == {"r1": (302, "redirect:host_not_allowed"), "r2": (302, "redirect:host_not_allowed"),
                    "r3": (302, "redirect:not_http"), "r4": (302, "redirect:malformed")}, rows
    redirected = [(r["url"].rsplit("/", 1)[-1], r["status"], r["reason"]) for r in cat.crawl_log.to_pylist()
                  if r["outcome"] == "redirected"]
    assert redirected == [("r5", 302, None)], "the redirect within the site is followed: its own row, no rejection"
    assert cat.products["sku"].to_pylist() == ["C1"]
    _reconciles(cat)


def test_a_missing_image_is_one_log_line_not_an_error(tmp_path):
    """Images that answer 404 (or come empty) are expected outcomes their rows record: the crawl's scrapy.log has
    no ERROR and no traceback for them, one line each at most, and the rows keep their reasons."""
    resolve = _one_product_shop(["/img/ok.jpg", "/img/gone.jpg", "/img/empty.jpg"],
                                {"/img/ok.jpg": solid_jpeg(), "/img/empty.jpg": b""})

    @contextmanager
    def server(_site, _work):
        with serve.serving(resolve) as srv:
            yield srv.base_url

    out = crawl_site(_site(tmp_path, sitemap_urls=["{{BASE}}/sitemap.xml"]), tmp_path / "run", "test-bot",
                     local_server=server)
    cat = merge_catalog(out, tmp_path / "state")
    reason = {d["url"].split("/", 3)[-1]: d["reason"] for d in cat.downloads.to_pylist()}
    assert reason == {"img/ok.jpg": None, "img/gone.jpg": "http_404", "img/empty.jpg": "empty_file"}
    log = out.log_file.read_text()
    assert " ERROR" not in log and "Traceback" not in log and "FileException" not in log, log
    assert "log_count/ERROR" not in json.dumps(cat.counts["scrapy"])
    for name in ("gone.jpg", "empty.jpg"):
        assert sum(name in line for line in log.splitlines() if "INFO" in line or "WARNING" in line) <= 1, log
