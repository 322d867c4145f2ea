"""A meta refresh is archived and logged as an HTTP redirect is, and a retried 5xx is archived without changing
what a replay answers.

A page whose ``<meta http-equiv="refresh" content="0; url=…">`` the crawl follows (Scrapy's MetaRefreshMiddleware,
replaced by ``middlewares.MetaRefreshScopeMiddleware``) is a WARC ``response`` record of its own (its 200 page,
marked ``WARC-LookBench-Meta-Refresh``) and a crawl-log row ``redirected`` (its status, the target in the feed's
``redirect_to``); one to another host or back to itself is a rejection (``redirect:host_not_allowed``,
``redirect:loop``), one to a page the crawl has the row a followed one gets. A replay of the WARC answers the page
with the same page, so it gives the live crawl's rows, items and times.

A 503 that Scrapy's RetryMiddleware retries is archived too (``warc.WarcRetryArchiveMiddleware``: every exchange
is in the WARC), marked ``WARC-LookBench-Retried``: the replay answers the URL with the attempt that was not
retried, so the replay's row is the live crawl's, and the WARC reader takes no retried attempt for a page."""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from lookbench_pipeline.crawl import crawl_site, merge_catalog, replay_site

PAGES = ["/refresh", "/refresh-out", "/refresh-loop", "/refresh-dup", "/hop", "/p/1.html", "/flaky", "/down",
         "/refresh-late"]


def _product(i: int) -> bytes:
    ld = {"@type": "Product", "name": f"Coat {i}", "sku": f"C{i}",
          "offers": {"@type": "Offer", "price": "10.00", "priceCurrency": "EUR"}}
    return (f"<html><head><script type='application/ld+json'>{json.dumps(ld)}</script></head>"
            f"<body><h1>Coat {i}</h1></body></html>").encode()


def _refresh(url: str, delay: int = 0) -> bytes:
    return f"<html><head><meta http-equiv='refresh' content='{delay}; url={url}'></head><body>moved</body></html>" \
        .encode()


def _routes(base: str) -> dict[str, tuple[int, bytes | str, str]]:
    """path -> (status, body or Location, content type)."""
    urlset = ('<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
              + "".join(f"<url><loc>{base}{p}</loc></url>" for p in PAGES) + "</urlset>").encode()
    return {
        "/robots.txt": (200, b"User-agent: *\nAllow: /\n", "text/plain"),
        "/sitemap.xml": (200, urlset, "application/xml"),
        "/refresh": (200, _refresh("/p/2.html"), "text/html"),  # to a page nothing else names: followed
        "/p/2.html": (200, _product(2), "text/html"),
        "/refresh-out": (200, _refresh("https://elsewhere.example/p"), "text/html"),  # out of the site's scope
        "/refresh-loop": (200, _refresh("/refresh-loop"), "text/html"),  # to itself
        "/refresh-dup": (200, _refresh(f"{base}/p/1.html"), "text/html"),  # to a page the sitemap lists too
        "/p/1.html": (200, _product(1), "text/html"),
        "/hop": (302, "/refresh-2", ""),  # an HTTP redirect, then a meta refresh
        "/refresh-2": (200, _refresh("/p/3.html"), "text/html"),
        "/p/3.html": (200, _product(3), "text/html"),
        "/flaky": (200, _product(4), "text/html"),  # a 503 first (see _Server), then the page
        "/down": (503, b"<html>down</html>", "text/html"),  # a 503 every time: retried, then given up
        "/refresh-late": (200, _refresh("/p/9.html", delay=3600), "text/html"),  # too late to follow: a page
    }


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
                if self.path == "/flaky" and hits.count("/flaky") == 1:
                    status, body = 503, b"<html>busy</html>"
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("Location", body)
                    body, ctype = b"moved", "text/html"
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
    tmp = tmp_path_factory.mktemp("refresh")
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


def _path(url: str) -> str:
    return "/" + url.split("/", 3)[-1]


def _rows(cat) -> list[dict]:
    return sorted(cat.crawl_log.to_pylist(), key=lambda r: (r["url"], r["reason"] or ""))


def _feed_pages(feed) -> dict[str, dict]:
    items = [json.loads(line) for line in feed.read_text().splitlines()]
    return {_path(it["url"]): {"status": it["status"], "outcome": it["outcome"], "reason": it["reason"],
                               "to": it.get("redirect_to") and _path(it["redirect_to"]), "at": it["crawled_at"]}
            for it in items if it["kind"] == "page"}


def _responses(warc) -> list[tuple[str, str, dict]]:
    from warcio.archiveiterator import ArchiveIterator

    with open(warc, "rb") as fh:
        return [(_path(r.rec_headers.get_header("WARC-Target-URI")), r.http_headers.get_statuscode(),
                 dict(r.rec_headers.headers)) for r in ArchiveIterator(fh) if r.rec_type == "response"]


LIVE_ROWS = {
    "/sitemap.xml": (200, "sitemap", None),
    "/refresh": (200, "redirected", None),  # followed to a page nothing else names
    "/p/2.html": (200, "product", None),
    "/refresh-out": (200, "rejected", "redirect:host_not_allowed"),
    "/refresh-loop": (200, "rejected", "redirect:loop"),
    "/refresh-dup": (200, "redirected", None),  # to /p/1.html, which the sitemap lists too
    "/p/1.html": (200, "product", None),
    "/hop": (302, "redirected", None),
    "/refresh-2": (200, "redirected", None),  # reached by a 302, left by a meta refresh: a row each
    "/p/3.html": (200, "product", None),
    "/flaky": (200, "product", None),  # its 503 was retried: the row is the attempt that answered
    "/down": (503, "rejected", "http_503"),
    "/refresh-late": (200, "rejected", "no_structured_data"),  # refreshed in an hour: not followed, a page
}


def test_a_meta_refresh_is_a_redirect_row_live(crawled):
    _, live, _, _, feeds = crawled
    rows = {_path(r["url"]): (r["status"], r["outcome"], r["reason"]) for r in _rows(live)}
    assert {p: rows.get(p) for p in LIVE_ROWS} == LIVE_ROWS
    assert set(rows) == set(LIVE_ROWS)
    assert sorted(live.products["sku"].to_pylist()) == ["C1", "C2", "C3", "C4"]
    pages = _feed_pages(feeds["live"])
    assert {p: pages[p]["to"] for p in ("/refresh", "/refresh-dup", "/hop", "/refresh-2")} == {
        "/refresh": "/p/2.html", "/refresh-dup": "/p/1.html", "/hop": "/refresh-2", "/refresh-2": "/p/3.html"}


def test_every_exchange_is_archived_and_a_meta_refresh_page_as_received(crawled):
    """Each fetch is a response record (the meta refresh pages, followed or refused, and the retried 503s
    included); a meta refresh's record is its 200 page, naming the target; a retried attempt's is marked with its
    number; each redirected row is stamped with its record's date."""
    server, _, _, warc, feeds = crawled
    recs = _responses(warc)
    assert Counter(p for p, _, _ in recs) == Counter(server.hits)
    base = f"http://127.0.0.1:{server.port}"
    refreshes = {p: (s, h["WARC-LookBench-Meta-Refresh"]) for p, s, h in recs
                 if "WARC-LookBench-Meta-Refresh" in h}
    assert refreshes == {"/refresh": ("200", f"{base}/p/2.html"), "/refresh-2": ("200", f"{base}/p/3.html"),
                         "/refresh-out": ("200", "https://elsewhere.example/p"),
                         "/refresh-loop": ("200", f"{base}/refresh-loop"),
                         "/refresh-dup": ("200", f"{base}/p/1.html")}  # refused or not, each as received
    retried = sorted((p, s, h["WARC-LookBench-Retried"]) for p, s, h in recs if "WARC-LookBench-Retried" in h)
    assert retried == [("/down", "503", "1"), ("/down", "503", "2"), ("/flaky", "503", "1")]
    final = [(p, s) for p, s, h in recs if p in ("/flaky", "/down") and "WARC-LookBench-Retried" not in h]
    assert sorted(final) == [("/down", "503"), ("/flaky", "200")]
    hops = {p: h.get("WARC-LookBench-Redirect-From") for p, _, h in recs}
    assert hops["/p/3.html"] == f"302|{base}/hop meta-refresh|{base}/refresh-2"
    dates = {p: h["WARC-Date"] for p, _, h in recs if "WARC-LookBench-Retried" not in h}
    pages = _feed_pages(feeds["live"])
    assert {p: r["at"] for p, r in pages.items() if r["outcome"] == "redirected" or r["reason"]} == \
        {p: dates[p] for p, r in pages.items() if r["outcome"] == "redirected" or r["reason"]}


def test_the_replay_gives_the_live_crawls_rows_items_and_times(crawled):
    """The replay answers a meta refresh's URL with its archived page (none is "not archived"), and a retried
    URL with its last attempt at once: the same rows, items and fetch times as the live crawl."""
    _, live, replay, _, feeds = crawled
    assert _rows(replay) == _rows(live)
    assert replay.products.equals(live.products)
    assert _feed_pages(feeds["replay"]) == _feed_pages(feeds["live"])
    stats = replay.counts["scrapy"]
    assert stats.get("lookbench/replay/not_archived", 0) == 0 and not stats.get("lookbench/replay/network_attempts")


def test_the_counts_reconcile(crawled):
    from lookbench_pipeline.crawl_tables import page_rejection_rate, page_tally

    _, live, replay, _, _ = crawled
    for cat in (live, replay):
        outcomes = Counter(cat.crawl_log.column("outcome").to_pylist())
        t = page_tally(cat.counts)
        assert t == {"rows": 13, "pages": 9, "kept": 5, "redirected": 4, "rejected": 4, "not_fetched": 0, "failed": 4,
                     "fetched": 9}
        assert t["rows"] == cat.crawl_log.num_rows == t["kept"] + t["redirected"] + t["rejected"]
        assert (t["redirected"], t["rejected"]) == (outcomes["redirected"], outcomes["rejected"])
        rate, pages, reasons = page_rejection_rate(cat.crawl_log)
        assert (rate, pages) == (4 / 9, 9)  # the redirected rows are no pages
        assert reasons == {"http_503": 1, "no_structured_data": 1, "redirect:host_not_allowed": 1, "redirect:loop": 1}


def test_the_replay_index_skips_retried_attempts_and_answers_a_meta_refresh_page(crawled):
    from lookbench_crawlers.replay import read_archive
    from lookbench_pipeline.warc import read_response_at

    server, _, _, warc, _ = crawled
    base = f"http://127.0.0.1:{server.port}"
    responses, _ = read_archive([str(warc)])
    answer = {p: read_response_at(*responses[f"{base}{p}"][:2]) for p in ("/flaky", "/down", "/refresh")}
    assert answer["/flaky"][0] == 200 and b"Coat 4" in answer["/flaky"][2]
    assert answer["/down"][0] == 503
    assert answer["/refresh"][0] == 200 and b"http-equiv='refresh'" in answer["/refresh"][2]


def test_the_warc_reader_takes_no_hop_nor_retried_attempt_for_a_page(crawled, tmp_path):
    """``extract_from_warc``: a meta refresh's page is a hop (nothing, not even when refused: its row is the
    crawl log's), a retried 503 is no rejection (the URL's row is its last attempt's): the rejections it gives
    are the live crawl's ``http_<status>`` rows."""
    from lookbench_pipeline.config import SiteConfig
    from lookbench_pipeline.warc import extract_from_warc

    _, live, _, warc, _ = crawled
    site = tmp_path / "site.yaml"
    site.write_text("name: s\nstart_urls: [https://s.test/]\n")
    records = extract_from_warc([warc], SiteConfig.from_yaml(site))
    assert sorted(r["sku"] for r in records if r["kind"] == "product") == ["C1", "C2", "C3", "C4"]
    rejected = [(_path(r["url"]), r["status"], r["reason"]) for r in records if r["kind"] == "page"]
    assert rejected == [("/down", 503, "http_503")]
    assert [(_path(r["url"]), r["status"], r["reason"]) for r in _rows(live)
            if (r["reason"] or "").startswith("http_")] == rejected


def test_a_url_whose_last_attempt_left_no_record_is_answered_by_its_last_retried_attempt(tmp_path):
    """A 503, then a 500, both retried, then a timeout (no record): the live row read ``http_500`` (the download
    budget's last answer), and the replay answers the URL with that 500, not a 404. A URL that recovered is answered
    by its 200 whichever order the records lie in."""
    from scrapy import Request
    from scrapy.http import HtmlResponse

    from lookbench_crawlers.replay import read_archive
    from lookbench_crawlers.warc import WarcArchiveMiddleware
    from lookbench_pipeline.warc import RETRIED_HEADER, read_response_at

    warc = tmp_path / "crawl.warc.gz"
    mw = WarcArchiveMiddleware(str(warc))
    gone, back = "https://s.test/p/gone", "https://s.test/p/back"
    for url, status, retried in ((gone, 503, "1"), (back, 200, None), (gone, 500, "2"), (back, 503, "1")):
        req = Request(url)
        mw.archive(req, HtmlResponse(url, status=status, body=f"<p>{status}</p>".encode(), request=req),
                   {RETRIED_HEADER: retried} if retried else None)
    responses, _ = read_archive([str(warc)])
    assert read_response_at(*responses[gone][:2])[0] == 500
    assert read_response_at(*responses[back][:2])[0] == 200
    only_back, _ = read_archive([str(warc)], want_url=lambda u: u == back)
    assert set(only_back) == {back}

    # a resumed crawl (attempt 2) whose 503 was retried and whose retry timed out: its answer is the 503, not
    # the 200 of attempt 1 (whose items the killed crawl lost), as the latest attempt's record wins
    later = tmp_path / "resumed.warc.gz"
    first, second = WarcArchiveMiddleware(str(later), "1"), WarcArchiveMiddleware(str(later), "2")
    for mw, status, retried in ((first, 200, None), (second, 503, "1")):
        req = Request(back)
        mw.archive(req, HtmlResponse(back, status=status, body=b"<p></p>", request=req),
                   {RETRIED_HEADER: retried} if retried else None)
    responses, _ = read_archive([str(later)])
    assert read_response_at(*responses[back][:2])[0] == 503
