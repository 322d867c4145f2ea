"""A crawl's redirects are archived and replayed as they happened: every 3xx response is a WARC ``response``
record of its own (its status, its ``Location``), as web archives store redirects, and a replay of the archive
answers the same URL with the same redirect. So a replayed crawl gives the crawl log, items and image downloads
of the live one for a redirect within the site, one out of the site's scope (row ``redirect:host_not_allowed``
with the 3xx status), a sitemap that redirects, a redirect loop and a chain longer than Scrapy follows (each a
row, ``redirect:loop`` / ``redirect:too_many``, never a page that vanishes from the log), an image that redirects in
a loop or too long a chain (its download row ``redirect:loop`` / ``redirect:too_many``, not ``ignored``), and an
error page that still carries a product (``http_404``, no product, in the WARC reader too).

Every redirect within the site that the crawl follows is a row of its own, outcome ``redirected`` (no page: neither
kept nor rejected, not in the rejection rate), its 3xx status, the target named in the feed's ``redirect_to``; so is
a redirect to a page the crawl requested already (which Scrapy's duplicate filter would drop without a row): the
same row whichever came first, so the live crawl and its replay, or two crawls of the site, log it alike."""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from lookbench_pipeline.crawl import crawl_site, merge_catalog, replay_site
from tiny_inputs import solid_jpeg

ROBOTS = b"User-agent: *\nAllow: /\n"
CHAIN = 25  # hops of /chain/0 -> /chain/1 -> …: more than Scrapy's REDIRECT_MAX_TIMES (20)


def _product(i: int, images: list[str]) -> bytes:
    ld = {"@type": "Product", "name": f"Coat {i}", "sku": f"C{i}", "image": images,
          "offers": {"@type": "Offer", "price": "10.00", "priceCurrency": "EUR"}}
    return (f"<html><head><script type='application/ld+json'>{json.dumps(ld)}</script></head>"
            f"<body><h1>Coat {i}</h1></body></html>").encode()


PAGES = ["/a", "/b", "/out", "/loop1", "/self", "/chain/0", "/p/1.html", "/refresh", "/gone", "/old"]


def _routes(base: str) -> dict[str, tuple[int, bytes | str, str]]:
    """path -> (status, body or Location, content type)."""
    urlset = ('<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
              + "".join(f"<url><loc>{base}{p}</loc></url>" for p in PAGES) + "</urlset>").encode()
    routes = {
        "/robots.txt": (200, ROBOTS, "text/plain"),
        "/sitemap.xml": (301, "/sitemap-new.xml", ""),  # the sitemap moved
        "/sitemap-new.xml": (200, urlset, "application/xml"),
        "/a": (302, f"{base}/b", ""),  # within the site, to a page the sitemap lists too
        "/old": (301, "/p/new.html", ""),  # within the site, to a page nothing else names: followed
        "/p/new.html": (200, _product(5, []), "text/html"),
        "/b": (200, _product(2, ["/img/old.jpg"]), "text/html"),
        "/img/old.jpg": (301, "/img/new.jpg", ""),  # an image that moved
        "/img/new.jpg": (200, solid_jpeg(), "image/jpeg"),
        "/out": (307, "https://elsewhere.example/p", ""),  # out of the site's scope
        "/loop1": (302, "/loop2", ""),
        "/loop2": (302, "/loop1", ""),
        "/self": (308, "/self", ""),
        "/p/1.html": (200, _product(1, ["/img/new.jpg", "/img/loop1", "/img/chain/0"]), "text/html"),
        "/img/loop1": (302, "/img/loop2", ""),  # an image that redirects in a loop
        "/img/loop2": (302, "/img/loop1", ""),
        "/gone": (404, _product(4, []), "text/html"),  # "product not found", its JSON-LD still there
        "/p/3.html": (200, _product(3, []), "text/html"),
        "/refresh": (200, b"<html><head><meta http-equiv='refresh' content='0; url=/p/3.html'></head></html>",
                     "text/html"),
    }
    for i in range(CHAIN):
        routes[f"/chain/{i}"] = (302, f"/chain/{i + 1}", "")
    routes[f"/chain/{CHAIN}"] = (200, _product(9, []), "text/html")
    for i in range(CHAIN):  # an image at the end of too long a chain
        routes[f"/img/chain/{i}"] = (302, f"/img/chain/{i + 1}", "")
    routes[f"/img/chain/{CHAIN}"] = (200, solid_jpeg(), "image/jpeg")
    return routes


class _Server:
    def __init__(self):
        hits = self.hits = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                hits.append(self.path)
                status, body, ctype = _routes(f"http://127.0.0.1:{self.server.server_port}").get(
                    self.path, (404, b"", "text/plain"))
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("Location", body)
                    body = b"moved"
                    ctype = "text/html"
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.srv.server_port
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture(scope="module")
def crawled(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("redirects")
    server = _Server()
    try:
        site = tmp / "site.yaml"
        site.write_text(yaml.safe_dump({"name": "s", "kind": "web", "allow_private_addresses": True,
                                        "allowed_ports": [server.port], "follow_links": False,
                                        "sitemap_urls": [f"http://127.0.0.1:{server.port}/sitemap.xml"]}))
        live_out = crawl_site(site, tmp / "live", "test-bot")
    finally:
        server.close()  # the replay has no server to reach
    live = merge_catalog(live_out, tmp / "live-state")
    warc = tmp / "live" / "crawl" / "crawl.warc.gz"
    replay_out = replay_site(site, [warc], "", tmp / "replay", "test-bot")
    replay = merge_catalog(replay_out, tmp / "replay-state")
    return server, live, replay, warc, {"live": live_out.feed, "replay": replay_out.feed}


def _rows(cat) -> list[dict]:
    return sorted(cat.crawl_log.to_pylist(), key=lambda r: (r["url"], r["reason"] or ""))


def _path(url: str) -> str:
    return "/" + url.split("/", 3)[-1]


def _redirected_rows(feed: Path) -> dict[str, dict]:
    """The feed's ``redirected`` rows by path: their status, target (as a path) and fetch time."""
    items = [json.loads(line) for line in feed.read_text().splitlines()]
    return {_path(it["url"]): {"status": it["status"], "to": _path(it["redirect_to"]), "at": it["crawled_at"],
                               "reason": it["reason"]}
            for it in items if it["kind"] == "page" and it["outcome"] == "redirected"}


def test_the_live_crawl_logs_each_redirect(crawled):
    _, live, _, _, _ = crawled
    rows = {_path(r["url"]): (r["status"], r["outcome"], r["reason"]) for r in _rows(live)}
    assert rows == {
        "/sitemap.xml": (301, "redirected", None),  # followed: its own row, and its target's
        "/sitemap-new.xml": (200, "sitemap", None),
        "/a": (302, "redirected", None),  # to /b, listed too, requested already: the same kind of row
        "/b": (200, "product", None),
        "/old": (301, "redirected", None),  # followed to a page nothing else names
        "/p/new.html": (200, "product", None),
        "/gone": (404, "rejected", "http_404"),
        "/out": (307, "rejected", "redirect:host_not_allowed"),
        "/loop1": (302, "redirected", None),  # followed, to the hop that closes the loop
        "/loop2": (302, "rejected", "redirect:loop"),
        "/self": (308, "rejected", "redirect:loop"),
        **{f"/chain/{i}": (302, "redirected", None) for i in range(20)},
        "/chain/20": (302, "rejected", "redirect:too_many"),
        "/p/1.html": (200, "product", None),
        "/refresh": (200, "redirected", None),  # a meta refresh (a 200 page) is a redirect too, followed
        "/p/3.html": (200, "product", None),
    }, rows
    assert sorted(live.products["sku"].to_pylist()) == ["C1", "C2", "C3", "C5"]
    downloads = {_path(d["url"]): d["reason"] for d in live.downloads.to_pylist()}
    assert downloads == {"/img/old.jpg": None, "/img/new.jpg": None, "/img/loop1": "redirect:loop",
                         "/img/chain/0": "redirect:too_many"}


def test_the_crawl_log_names_where_each_redirect_led(crawled):
    """The crawl log's ``redirect_to``: a followed redirect's target (the feed's, which has its own row) and a
    refused redirect's Location (out of scope, a loop, one hop too many); null on every other row; the replay's
    log the same."""
    _, live, replay, _, feeds = crawled
    to = {_path(r["url"]): r["redirect_to"] for r in _rows(live)}
    assert {p: _path(t) for p, t in to.items() if t and p in _redirected_rows(feeds["live"])} == {
        p: r["to"] for p, r in _redirected_rows(feeds["live"]).items()}
    refused = {_path(r["url"]): r["redirect_to"] for r in _rows(live) if (r["reason"] or "").startswith("redirect:")}
    base = f"http://127.0.0.1:{crawled[0].port}"
    assert refused == {"/out": "https://elsewhere.example/p", "/loop2": f"{base}/loop1", "/self": f"{base}/self",
                       "/chain/20": f"{base}/chain/21"}
    others = [r for r in _rows(live)
              if r["outcome"] != "redirected" and not (r["reason"] or "").startswith("redirect:")]
    assert others and all(r["redirect_to"] is None for r in others)
    assert [r["redirect_to"] for r in _rows(replay)] == [r["redirect_to"] for r in _rows(live)]


def test_a_redirect_to_a_page_the_crawl_has_is_a_row_naming_it_and_the_page_is_fetched_once(crawled):
    server, _, _, warc, _ = crawled
    base = f"http://127.0.0.1:{server.port}"
    feed = [json.loads(line) for line in (warc.parent / "items.jsonl").read_text().splitlines()]
    [row] = [it for it in feed if it["kind"] == "page" and it["url"] == f"{base}/a"]
    assert (row["outcome"], row["reason"], row["redirect_to"]) == ("redirected", None, f"{base}/b")
    assert server.hits.count("/b") == 1 and server.hits.count("/a") == 1


def test_every_followed_redirect_is_a_row_naming_its_target_which_has_its_own_row(crawled):
    """A followed redirect (to a new page, a moved sitemap, the hops of a chain or a loop) and one to a page the
    crawl requested already are the same kind of row: ``redirected``, its 3xx status, no reason, its target in
    ``redirect_to``, stamped with the redirect's own fetch time (its WARC record's date). Each target has its own
    row; a page reached through a redirect is fetched once."""
    from warcio.archiveiterator import ArchiveIterator

    server, live, _, warc, feeds = crawled
    redirected = _redirected_rows(feeds["live"])
    assert redirected["/old"] | {"at": None} == {"status": 301, "to": "/p/new.html", "at": None, "reason": None}
    assert redirected["/a"]["to"] == "/b" and redirected["/sitemap.xml"]["to"] == "/sitemap-new.xml"
    assert redirected["/loop1"]["to"] == "/loop2" and redirected["/chain/19"]["to"] == "/chain/20"
    logged = {_path(r["url"]) for r in _rows(live)}
    assert {r["to"] for r in redirected.values()} <= logged, "every target has its own row"
    assert {p for p, r in redirected.items() if r["reason"]} == set()
    with open(warc, "rb") as fh:
        dates = {_path(r.rec_headers.get_header("WARC-Target-URI")): r.rec_headers.get_header("WARC-Date")
                 for r in ArchiveIterator(fh) if r.rec_type == "response"}
    assert {p: r["at"] for p, r in redirected.items()} == {p: dates[p] for p in redirected}
    assert server.hits.count("/p/new.html") == 1 and server.hits.count("/old") == 1


def test_the_replay_gives_the_live_crawls_redirect_rows(crawled):
    """The replay of the live crawl's WARC writes the same ``redirected`` rows, targets and times."""
    feeds = crawled[-1]
    assert _redirected_rows(feeds["replay"]) == _redirected_rows(feeds["live"])
    assert len(_redirected_rows(feeds["live"])) == 25


def test_redirect_rows_are_no_rejections_and_the_counts_reconcile(crawled):
    """``redirected`` rows are neither kept nor rejected: rows = kept + redirected + rejected (the crawl's counts
    and its log agree), and the page rejection rate (the asset check's measure) is of the other rows only."""
    from assets.crawl import crawl_headline
    from lookbench_pipeline.crawl_tables import page_rejection_rate, page_tally

    _, live, _, _, _ = crawled
    outcomes = Counter(live.crawl_log.column("outcome").to_pylist())
    t = page_tally(live.counts)
    assert t == {"rows": live.crawl_log.num_rows, "pages": 10, "kept": 5, "redirected": 25,
                 "rejected": 5, "not_fetched": 0, "failed": 5, "fetched": 10}
    assert t["rows"] == t["kept"] + t["redirected"] + t["rejected"]
    assert (t["redirected"], t["rejected"]) == (outcomes["redirected"], outcomes["rejected"])
    assert live.counts["pages.redirected"] == 25
    rate, pages, reasons = page_rejection_rate(live.crawl_log)
    assert (rate, pages) == (5 / 10, 10)  # counted as pages, the 25 redirects would dilute it to 5 / 35
    assert "redirect:duplicate" not in reasons and sum(reasons.values()) == 5
    assert "pages 35 (kept 5, redirected 25, rejected 5 (" in crawl_headline(live.counts)


def test_every_redirect_is_a_response_record_with_its_status_and_location(crawled):
    from warcio.archiveiterator import ArchiveIterator

    server, _, _, warc, _ = crawled
    with open(warc, "rb") as fh:
        recs = [(_path(r.rec_headers.get_header("WARC-Target-URI")), r.http_headers.get_statuscode(),
                 r.http_headers.get_header("Location")) for r in ArchiveIterator(fh) if r.rec_type == "response"]
    redirects = {p: (int(s), loc) for p, s, loc in recs if s.startswith("3")}
    base = f"http://127.0.0.1:{server.port}"
    assert redirects["/sitemap.xml"] == (301, "/sitemap-new.xml")
    assert redirects["/a"] == (302, f"{base}/b")
    assert redirects["/out"] == (307, "https://elsewhere.example/p")
    assert redirects["/img/old.jpg"] == (301, "/img/new.jpg")
    assert redirects["/self"] == (308, "/self")
    assert {f"/chain/{i}" for i in range(21)} <= set(redirects)
    # each fetch archived once (an image fetched twice, directly and through a redirect, twice), a meta refresh's
    # page (200) too, as it was received (its record names the target); its target's record names it as a hop,
    # one token ("meta-refresh|url")
    assert Counter(p for p, _, _ in recs) == Counter(server.hits)
    with open(warc, "rb") as fh:
        refreshes = {_path(r.rec_headers.get_header("WARC-Target-URI")): (r.http_headers.get_statuscode(),
                     r.rec_headers.get_header("WARC-LookBench-Meta-Refresh")) for r in ArchiveIterator(fh)
                     if r.rec_type == "response" and r.rec_headers.get_header("WARC-LookBench-Meta-Refresh")}
    assert refreshes == {"/refresh": ("200", f"{base}/p/3.html")}
    with open(warc, "rb") as fh:
        hops = {_path(r.rec_headers.get_header("WARC-Target-URI")): r.rec_headers.get_header(
            "WARC-LookBench-Redirect-From") for r in ArchiveIterator(fh) if r.rec_type == "response"}
    assert hops["/p/3.html"] == f"meta-refresh|{base}/refresh"
    assert all(s.startswith("3") == (loc is not None) for _, s, loc in recs)


def test_the_replay_gives_the_live_crawls_rows_items_and_downloads(crawled):
    _, live, replay, _, _ = crawled
    assert _rows(replay) == _rows(live)
    assert replay.products.equals(live.products)
    assert replay.looks.equals(live.looks)
    assert replay.downloads.drop_columns(["stored_path"]).equals(live.downloads.drop_columns(["stored_path"]))
    stats = replay.counts["scrapy"]
    assert stats.get("lookbench/replay/not_archived", 0) == 0 and not stats.get("lookbench/replay/network_attempts")


def test_the_warc_reader_keeps_no_item_of_an_error_page_and_agrees_with_the_crawl_log(crawled, tmp_path):
    """A 404 page that still carries a product's JSON-LD gives no product in the live crawl, and the WARC reader
    (``extract_from_warc``) gives none either: its record is the rejection ``http_404``, the live row; every
    non-2xx non-3xx HTML response record is one rejection, and a redirect's own record (a hop, not a page: the
    live crawl's row for it is ``redirected``, no rejection) gives nothing."""
    from warcio.archiveiterator import ArchiveIterator

    from lookbench_pipeline.config import SiteConfig
    from lookbench_pipeline.warc import extract_from_warc

    _, live, _, warc, _ = crawled
    site = tmp_path / "site.yaml"
    site.write_text("name: s\nstart_urls: [https://s.test/]\n")
    records = extract_from_warc([warc], SiteConfig.from_yaml(site))
    assert sorted(r["sku"] for r in records if r["kind"] == "product") == ["C1", "C2", "C3", "C5"]
    assert sorted(live.products["sku"].to_pylist()) == ["C1", "C2", "C3", "C5"]
    rejected = {_path(r["url"]): (r["status"], r["reason"]) for r in records if r["kind"] == "page"}
    logged = {_path(r["url"]): (r["status"], r["reason"]) for r in _rows(live)}
    assert rejected["/gone"] == logged["/gone"] == (404, "http_404")
    assert "/a" not in rejected and "/chain/0" not in rejected and "/out" not in rejected
    assert not any(str(r["status"]).startswith("3") for r in records if r["kind"] == "page")
    with open(warc, "rb") as fh:
        errors = [r for r in ArchiveIterator(fh) if r.rec_type == "response"
                  and "html" in (r.http_headers.get_header("Content-Type") or "")
                  and r.http_headers.get_statuscode()[:1] not in ("2", "3")]
    assert len(errors) == sum(r["kind"] == "page" for r in records), "every non-2xx non-3xx HTML record: a rejection"


def _archive(warc: Path, attempt: str, fetches: list[tuple[str, int, str | bytes]]) -> None:
    """Archive ``(url, status, Location or body)`` as the crawl does: a 3xx by the redirect archiver (650), any
    other response by the archive middleware (60)."""
    from scrapy.http import HtmlResponse, Request

    from lookbench_crawlers.warc import WarcArchiveMiddleware, WarcRedirectArchiveMiddleware

    pages, redirects = WarcArchiveMiddleware(str(warc), attempt), WarcRedirectArchiveMiddleware(str(warc), attempt)
    for url, status, what in fetches:
        req = Request(url)
        if 300 <= status < 400:
            resp = HtmlResponse(url, status=status, headers={"Location": what}, body=b"moved", request=req)
            assert pages.process_response(req, redirects.process_response(req, resp)) is resp
        else:
            pages.process_response(req, HtmlResponse(url, status=status, body=what, request=req,
                                                     headers={"Content-Type": "text/html"}))


class _Stats:
    def __init__(self):
        self.values: Counter = Counter()

    def inc_value(self, key, n=1):
        self.values[key] += n


def _replaying(warc: Path, origins: list[str], done: set[str] | None = None):
    from types import SimpleNamespace

    from lookbench_crawlers.replay import WarcReplayMiddleware

    spider = SimpleNamespace(finished=lambda url: url in done) if done is not None else None
    crawler = SimpleNamespace(spider=spider, stats=_Stats())
    return WarcReplayMiddleware(crawler, [str(warc)], origins, resume=done is not None)


def test_a_url_fetched_twice_is_answered_with_its_latest_attempts_record(tmp_path):
    """A redirect in the first attempt, a page in the second (and the other way round): the latest attempt's
    record answers; within one attempt, the first. A redirect's absolute Location on an earlier origin is answered
    on the origin served now; a relative one as archived."""
    from scrapy.http import Request

    warc = tmp_path / "crawl.warc.gz"
    one, two, now = "http://127.0.0.1:40001", "http://127.0.0.1:40002", "http://127.0.0.1:40003"
    _archive(warc, "1", [(f"{one}/a", 302, f"{one}/b"), (f"{one}/c", 200, b"<html>c1</html>"),
                         (f"{one}/r", 301, "/b")])
    _archive(warc, "2", [(f"{two}/a", 200, b"<html>a2</html>"), (f"{two}/c", 307, f"{two}/d"),
                         (f"{two}/c", 200, b"<html>c2, later in the attempt</html>")])
    mw = _replaying(warc, [one, two, now])
    assert mw.process_request(Request(f"{now}/a")).body == b"<html>a2</html>"
    c = mw.process_request(Request(f"{now}/c"))
    assert (c.status, c.headers[b"Location"].decode()) == (307, f"{now}/d")
    r = mw.process_request(Request(f"{now}/r"))
    assert (r.status, r.headers[b"Location"].decode()) == (301, "/b")
    assert mw.crawler.stats.values["lookbench/replay/redirects"] == 2


def test_an_archive_of_before_redirect_records_still_replays_its_redirects(tmp_path):
    """Archives written before redirects were records of their own name them on the page they led to
    (``WARC-LookBench-Redirect-From``), a meta refresh as "meta refresh|url", which the list's spaces split (the
    replay raised on the lone "meta"): each is answered as a redirect, a meta refresh's as a 302."""
    import io

    from scrapy.http import Request
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    warc = tmp_path / "old.warc.gz"
    base = "http://shop.example"
    with open(warc, "wb") as fh:
        writer = WARCWriter(fh, gzip=True, warc_version="1.1")
        for url, hops in ((f"{base}/new", f"301|{base}/old"), (f"{base}/p/3", f"meta refresh|{base}/refresh")):
            writer.write_record(writer.create_warc_record(
                url, "response", payload=io.BytesIO(b"<html></html>"),
                warc_headers_dict={"WARC-Date": "2026-01-01T00:00:00.000000Z", "WARC-LookBench-Redirect-From": hops},
                http_headers=StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.1")))
    mw = _replaying(warc, [])
    old = mw.process_request(Request(f"{base}/old"))
    assert (old.status, old.headers[b"Location"].decode()) == (301, f"{base}/new")
    refresh = mw.process_request(Request(f"{base}/refresh"))
    assert (refresh.status, refresh.headers[b"Location"].decode()) == (302, f"{base}/p/3")


def test_a_resume_answers_a_finished_redirect_from_its_record(tmp_path):
    """A page whose redirect left the site's scope is finished (its row ``redirect:host_not_allowed`` is in the
    feed): a resume answers it with the archived redirect, so it is refused again without a second row, not
    counted a finished page without a response (``finished_without_response``)."""
    from scrapy.http import Request

    warc = tmp_path / "crawl.warc.gz"
    one, two = "http://127.0.0.1:40001", "http://127.0.0.1:40002"
    _archive(warc, "1", [(f"{one}/out", 302, "https://elsewhere.example/x")])
    mw = _replaying(warc, [one, two], done={f"{two}/out"})
    out = mw.process_request(Request(f"{two}/out", meta={"lookbench_finished": True}))
    assert (out.status, out.headers[b"Location"].decode()) == (302, "https://elsewhere.example/x")
    assert "resumed" in out.flags
    assert not mw.crawler.stats.values["lookbench/resume/finished_without_response"]


def test_the_scope_middleware_bounds_a_redirect_chain():
    """A redirect to a URL of its own chain (the duplicate filter's canonical form: the query's order aside) is
    ``redirect:loop`` (not for a ``dont_filter`` request, a start URL: Scrapy follows it); the hop after
    ``REDIRECT_MAX_TIMES`` is ``redirect:too_many``; a target whose port does not
    parse is compared as written, without raising."""
    from types import SimpleNamespace

    from scrapy.http import Request, Response
    from scrapy.settings import Settings

    from lookbench_crawlers.middlewares import RedirectRefused, RedirectScopeMiddleware

    mw = RedirectScopeMiddleware(SimpleNamespace(settings=Settings({"REDIRECT_MAX_TIMES": 3}),
                                                 spider=SimpleNamespace(scope_refusal=lambda url: None)))

    def refused(url, location, dont_filter=False, **meta):
        req = Request(url, meta=meta, dont_filter=dont_filter)
        try:
            mw.process_response(req, Response(url, status=302, headers={"Location": location}, request=req))
        except RedirectRefused as e:
            return e.reason, e.status
        return None

    assert refused("http://s.example/b?y=2&x=1", "/a?x=1&y=2", redirect_urls=["http://s.example/a?y=2&x=1"],
                   redirect_times=1) == ("redirect:loop", 302)
    assert refused("http://s.example/a", "/a#top") == ("redirect:loop", 302)
    # a start URL (dont_filter) that sets a cookie and redirects to itself is followed, as Scrapy does; the hop
    # limit still ends a real loop
    assert refused("http://s.example/a", "/a", dont_filter=True) is None
    assert refused("http://s.example/a", "/a", dont_filter=True, redirect_times=3) == ("redirect:too_many", 302)
    assert refused("http://s.example/c", "/d", redirect_times=2) is None
    assert refused("http://s.example/d", "/e", redirect_times=3) == ("redirect:too_many", 302)
    assert refused("http://s.example/a", "http://s.example:abc/") is None


def _scope_mw(settings, engine=None, scope=None):
    from types import SimpleNamespace

    from scrapy.settings import Settings

    from lookbench_crawlers.middlewares import RedirectScopeMiddleware

    return RedirectScopeMiddleware(SimpleNamespace(settings=Settings(settings), engine=engine,
                                                   spider=SimpleNamespace(scope_refusal=scope or (lambda url: None))))


def _refused(mw, url, location, dont_filter=False, **meta):
    """``(reason, status, target)`` of the redirect ``mw`` refuses, None when it lets it through."""
    from scrapy.http import Request, Response

    from lookbench_crawlers.middlewares import RedirectRefused

    req = Request(url, meta=meta, dont_filter=dont_filter)
    try:
        mw.process_response(req, Response(url, status=302, headers={"Location": location}, request=req))
    except RedirectRefused as e:
        return e.reason, e.status, e.target
    return None


def test_the_scope_middleware_bounds_an_images_redirect_chain():
    """An image download is not scope-checked here (its hosts are the address policy's: ``image_hosts``), but its
    loop is ``redirect:loop`` and its hop beyond ``REDIRECT_MAX_TIMES`` ``redirect:too_many``, not Scrapy's
    ``ignored`` after 20 hops."""
    mw = _scope_mw({"REDIRECT_MAX_TIMES": 3}, scope=lambda url: "host_not_allowed")
    img = {"lookbench_media": True}
    assert _refused(mw, "http://s.example/i1", "https://cdn.example/i2", **img) is None
    assert _refused(mw, "http://s.example/i2", "/i1", redirect_urls=["http://s.example/i1"], redirect_times=1,
                    **img)[:2] == ("redirect:loop", 302)
    assert _refused(mw, "http://s.example/i4", "/i5", redirect_times=2, **img) is None
    assert _refused(mw, "http://s.example/i4", "/i5", redirect_times=3, **img)[:2] == ("redirect:too_many", 302)


def test_the_scope_middleware_names_a_redirect_to_a_page_already_requested():
    """A redirect to a page the scheduler's duplicate filter has seen is not followed, ``redirect:duplicate`` (the
    spider logs it ``redirected``, as a followed one), naming it (asked without recording: a target not seen stays
    requestable once); not for a ``dont_filter`` request (Scrapy does not drop its redirect), nor for an image
    download (which never passes the scheduler)."""
    from types import SimpleNamespace

    from scrapy.http import Request
    from scrapy.utils.test import get_crawler

    from lookbench_crawlers.middlewares import CrawlDupeFilter

    df = CrawlDupeFilter.from_crawler(get_crawler())
    assert not df.request_seen(Request("http://s.example/b"))
    assert df.seen(Request("http://s.example/b#x")) and not df.seen(Request("http://s.example/c"))
    assert not df.request_seen(Request("http://s.example/c")), "seen() records nothing"
    engine = SimpleNamespace(_slot=SimpleNamespace(scheduler=SimpleNamespace(df=df)))
    mw = _scope_mw({"REDIRECT_MAX_TIMES": 3}, engine=engine)
    assert _refused(mw, "http://s.example/a", "/b") == ("redirect:duplicate", 302, "http://s.example/b")
    assert _refused(mw, "http://s.example/a", "/d") is None
    assert _refused(mw, "http://s.example/a", "/b", dont_filter=True) is None
    assert _refused(mw, "http://s.example/i1", "/b", lookbench_media=True) is None
    # a loop is a loop, though its URLs are in the duplicate filter too
    assert _refused(mw, "http://s.example/c", "/b", redirect_urls=["http://s.example/b"],
                    redirect_times=1)[0] == "redirect:loop"
    # without a filter that can be asked (another DUPEFILTER_CLASS), the redirect is left to Scrapy
    assert _refused(_scope_mw({}), "http://s.example/a", "/b") is None


def test_a_followed_redirect_does_not_hand_a_finished_mark_to_its_target():
    """On a resume, a finished page's request is marked ``lookbench_finished`` (answered from the crawl's own WARC,
    no item). Scrapy's RedirectMiddleware copies a request's meta into its redirect's: the mark must not reach the
    target, which the earlier attempt may never have finished (it would be skipped, with no row)."""
    from scrapy.downloadermiddlewares.redirect import RedirectMiddleware
    from scrapy.http import Request, Response
    from scrapy.utils.test import get_crawler

    mw = _scope_mw({})
    src = Request("http://s.example/a", meta={"lookbench_finished": True})
    resp = Response(src.url, status=301, headers={"Location": "/b"}, request=src)
    assert mw.process_response(src, resp) is resp
    followed = RedirectMiddleware.from_crawler(get_crawler()).process_response(src, resp)
    assert followed.url == "http://s.example/b" and "lookbench_finished" not in followed.meta


def _shop_spider(tmp_path: Path, done: set[str] | None = None):
    from lookbench_crawlers.spiders.shop import ShopSpider

    site = tmp_path / "site.yaml"
    site.write_text(yaml.safe_dump({"name": "s", "kind": "web", "start_urls": ["http://s.example/"]}))
    spider = ShopSpider(site_config=str(site))
    if done is not None:
        spider.done = done
    return spider


def _redirect_then_target(engine, spider, fetched_at="2026-01-05T10:00:00.000000Z", location="/b",
                          dont_filter=False, scope=None):
    """``/a`` answers 302 to ``/b`` (fetched at ``fetched_at``); the scope middleware follows it or refuses it
    (``engine``'s duplicate filter says whether ``/b`` was requested already), Scrapy's RedirectMiddleware builds
    the request of ``/b``, and ``/b`` answers a product page: the spider's items, in order."""
    from scrapy.downloadermiddlewares.redirect import RedirectMiddleware
    from scrapy.http import HtmlResponse, Request, Response
    from scrapy.utils.test import get_crawler
    from twisted.python.failure import Failure

    from lookbench_crawlers.middlewares import RedirectRefused

    mw = _scope_mw({}, engine=engine, scope=scope)
    src = Request("http://s.example/a", callback=spider.parse_page, errback=spider.on_error,
                  meta={"lookbench_fetched_at": fetched_at}, dont_filter=dont_filter)
    resp = Response(src.url, status=302, headers={"Location": location}, request=src)
    try:
        mw.process_response(src, resp)
    except RedirectRefused as exc:
        failure = Failure(exc)
        failure.request = src  # as Scrapy's errback gets it
        return list(spider.on_error(failure))
    target = RedirectMiddleware.from_crawler(get_crawler()).process_response(src, resp)
    page = HtmlResponse(target.url, status=200, body=_product(2, []), request=target,
                        headers={"Content-Type": "text/html"})
    return list(spider.parse_page(page))


def test_a_redirect_is_the_same_row_whether_its_target_was_requested_before_or_after_it(tmp_path):
    """The timing the crawl log used to depend on: a redirect whose target the crawl had requested already was
    refused (``redirect:duplicate``), one that came first was followed and had no row. Now both write the same row
    for the redirect (``redirected``, its status, target and fetch time), and the target's own row comes from
    whichever request fetched it."""
    from types import SimpleNamespace

    from scrapy.http import Request
    from scrapy.utils.test import get_crawler

    from lookbench_crawlers.middlewares import CrawlDupeFilter

    def engine(seen: bool):
        df = CrawlDupeFilter.from_crawler(get_crawler())
        if seen:
            df.request_seen(Request("http://s.example/b"))
        return SimpleNamespace(_slot=SimpleNamespace(scheduler=SimpleNamespace(df=df)))

    def pages(items):
        return [dict(it) for it in items if it["kind"] == "page"]

    followed = pages(_redirect_then_target(engine(False), _shop_spider(tmp_path)))
    duplicate = pages(_redirect_then_target(engine(True), _shop_spider(tmp_path)))
    row = {"kind": "page", "site": "s", "url": "http://s.example/a", "status": 302, "outcome": "redirected",
           "reason": None, "n_items": 0, "redirect_to": "http://s.example/b",
           "crawled_at": "2026-01-05T10:00:00.000000Z"}
    assert duplicate == [row]
    assert followed[0] == row and [(r["url"], r["outcome"]) for r in followed[1:]] == [
        ("http://s.example/b", "product")]


def test_a_resumed_crawl_does_not_log_a_finished_redirect_again(tmp_path):
    """On a resume, a redirect an earlier attempt logged (its row is in the feed: the URL is finished) and that is
    followed again, from the crawl's own WARC, to a target that attempt did not finish, gets no second row; the
    target does get its own."""
    from lookbench_crawlers.spiders.shop import resume_key

    spider = _shop_spider(tmp_path, done={resume_key("http://s.example/a")})
    items = _redirect_then_target(None, spider)
    assert [(it["url"], it["outcome"]) for it in items if it["kind"] == "page"] == [("http://s.example/b", "product")]


def test_a_refused_redirects_target_is_recorded_bounded(tmp_path):
    """A redirect out of the site's scope is a ``redirect:host_not_allowed`` row naming its target in
    ``redirect_to``; a hostile Location of any length is kept as its first characters, sha256 and length
    (``extract.images.refused_form``), not megabytes in the crawl log."""
    from lookbench_pipeline.extract.images import REFUSED_URL_CHARS

    spider = _shop_spider(tmp_path)
    short = "http://elsewhere.example/p"
    rows = _redirect_then_target(None, spider, location=short, scope=spider.scope_refusal)
    [row] = [it for it in rows if it["kind"] == "page"]
    assert (row["outcome"], row["reason"], row["status"], row["redirect_to"]) == (
        "rejected", "redirect:host_not_allowed", 302, short)
    long = "http://elsewhere.example/" + "x" * 3_000_000
    spider = _shop_spider(tmp_path)
    rows = _redirect_then_target(None, spider, location=long, scope=spider.scope_refusal)
    [row] = [it for it in rows if it["kind"] == "page"]
    assert row["reason"] == "redirect:host_not_allowed" and len(row["redirect_to"]) <= REFUSED_URL_CHARS
    assert row["redirect_to"].startswith("http://elsewhere.example/xxx") and "3000025 chars" in row["redirect_to"]


def test_a_long_refused_target_is_cut_after_its_serving_origin_is_replaced(tmp_path):
    """A local site's URLs are recorded under its public origin (``crawl._rebase`` replaces the serving origin in
    the feed). A long refused target is cut with a digest, which that replacement could not update: it is replaced
    first, so the digest is of the URL shown and a replay served on another port records the same value."""
    from lookbench_crawlers.spiders.shop import ShopSpider
    from lookbench_pipeline.extract.images import refused_form

    site = tmp_path / "site.yaml"
    (tmp_path / "pages").mkdir()
    site.write_text(yaml.safe_dump({"name": "s", "kind": "replay", "public_origin": "https://shop.example",
                                    "pages_dir": "pages", "start_urls": ["{{BASE}}/"]}))
    spider = ShopSpider(site_config=str(site), base_url="http://s.example")
    path = "/p?" + "x" * 300
    rows = _redirect_then_target(None, spider, location=path, scope=lambda url: "host_not_allowed")
    [row] = [it for it in rows if it["kind"] == "page"]
    assert row["reason"] == "redirect:host_not_allowed"
    assert row["redirect_to"] == refused_form("https://shop.example" + path) != refused_form("http://s.example" + path)


def test_a_start_url_that_redirects_to_itself_is_one_row(tmp_path):
    """A start URL (``dont_filter``) that sets a cookie and redirects to itself is followed back: the URL has its
    page's row only, not a ``redirected`` row besides."""
    items = _redirect_then_target(None, _shop_spider(tmp_path), location="/a", dont_filter=True)
    assert [(it["url"], it["outcome"]) for it in items if it["kind"] == "page"] == [("http://s.example/a", "product")]


def test_the_scope_middleware_records_the_hops_it_lets_through():
    """A followed page redirect is recorded in the request's meta (``REDIRECT_HOPS``: the spider writes its row),
    each hop appended to a new list (Scrapy's copy of the meta is shallow); not an image download's, nor a replayed
    hop that has no record of its own (``UNRECORDED_HOP``: a meta refresh, which the live crawl wrote no row)."""
    from scrapy.http import Request, Response

    from lookbench_crawlers.middlewares import REDIRECT_HOPS, UNRECORDED_HOP

    mw = _scope_mw({})
    first = [{"url": "http://s.example/z", "status": 301, "to": "http://s.example/a", "fetched_at": None,
              "finished": False}]
    req = Request("http://s.example/a", meta={REDIRECT_HOPS: first, "lookbench_fetched_at": "T1",
                                              "lookbench_finished": True})
    mw.process_response(req, Response(req.url, status=307, headers={"Location": "/b?x=1"}, request=req))
    assert req.meta[REDIRECT_HOPS] == [*first, {"url": "http://s.example/a", "status": 307,
                                                "to": "http://s.example/b?x=1", "fetched_at": "T1",
                                                "finished": True}]
    assert len(first) == 1
    img = Request("http://s.example/i", meta={"lookbench_media": True})
    mw.process_response(img, Response(img.url, status=302, headers={"Location": "/j"}, request=img))
    hop = Request("http://s.example/refresh")
    mw.process_response(hop, Response(hop.url, status=302, headers={"Location": "/p"}, request=hop,
                                      flags=["replayed", UNRECORDED_HOP]))
    assert REDIRECT_HOPS not in img.meta and REDIRECT_HOPS not in hop.meta
