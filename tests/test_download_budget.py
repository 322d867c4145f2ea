"""The download budget (``middlewares.DownloadBudgetMiddleware``) counts the time a URL's attempts spend
downloading, not the waits between them: a 500 whose retry waited in the queue behind slow pages is retried, and
when a URL's attempts do run out after an error answer its row names that answer (``http_500``), not the timeout."""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler

import pytest
import yaml
from scrapy import Request
from scrapy.http import Response

from lookbench_crawlers.middlewares import DownloadBudgetMiddleware, DownloadTimeout
from lookbench_pipeline.crawl import run_spider

import local_http


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _attempt(mw, clock, request, start, end, status=None, latency=0.05):
    """One attempt handed to the downloader at ``start`` whose transfer ends at ``end``: with a response of
    ``status`` (its headers ``latency`` after the transfer began at ``end - latency``), or none (a timeout)."""
    clock.now = start
    assert mw.process_request(request) is None
    clock.now = end
    if status is not None:
        request.meta["download_latency"] = latency
        mw.headers_received(request=request)
        mw.response_downloaded(response=Response(request.url, status=status), request=request)
    mw.request_left_downloader(request=request)


def test_a_retry_that_waited_in_the_queue_is_sent_with_what_downloading_left():
    """Budget 8: the first attempt is handed over at t=0 and answers 500 at 0.2; its retry copy reaches the
    middleware at 7.5 (it waited behind slow pages): only 0.2 s were spent downloading, so it is sent."""
    clock = Clock()
    mw = DownloadBudgetMiddleware(8, 30, clock=clock)
    first = Request("http://shop.example/h/flaky")
    _attempt(mw, clock, first, 0.0, 0.2, status=500)
    retry = first.copy()
    clock.now = 7.5
    assert mw.process_request(retry) is None, "sent, not refused"
    assert retry.meta["download_timeout"] == pytest.approx(8 - 0.05)


def test_a_wait_in_the_download_slot_does_not_count():
    """An attempt handed over at 0 that waited in its slot until 7.8 and answered at 8.0 spent 0.2 s (its
    transfer began download_latency before the headers came)."""
    clock = Clock()
    mw = DownloadBudgetMiddleware(8, 30, clock=clock)
    req = Request("http://shop.example/p")
    _attempt(mw, clock, req, 0.0, 8.0, status=503, latency=0.1)
    assert req.meta["lookbench_spent_s"] == pytest.approx(0.1)
    assert mw.process_request(req.copy()) is None


def test_a_budget_spent_downloading_names_the_last_answer():
    """A 500 (0.2 s), then a retry that times out after the 7.8 s left: the budget is spent by real download
    time, the request fails, and its reason is the server's last answer, http_500; without an earlier answer it
    is download_timeout."""
    from twisted.internet.error import TimeoutError as TxTimeout

    clock = Clock()
    mw = DownloadBudgetMiddleware(8, 30, clock=clock)
    first = Request("http://shop.example/h/flaky")
    _attempt(mw, clock, first, 0.0, 0.2, status=500)
    retry = first.copy()
    _attempt(mw, clock, retry, 3.0, 3.0 + 7.8)
    with pytest.raises(DownloadTimeout) as e:
        mw.process_exception(retry, TxTimeout())
    assert (e.value.reason, e.value.status) == ("http_500", 500)
    with pytest.raises(DownloadTimeout) as e:  # a third copy (another retry) is not sent either
        mw.process_request(retry.copy())
    assert e.value.reason == "http_500"

    slow = Request("http://shop.example/h/slow")
    _attempt(mw, clock, slow, 20.0, 28.0)
    with pytest.raises(DownloadTimeout) as e:
        mw.process_exception(slow, TxTimeout())
    assert (e.value.reason, e.value.status) == ("download_timeout", 0)


def test_a_headerless_attempt_is_charged_by_how_it_failed_not_by_its_wait_in_the_queue():
    """Budget 8, each attempt handed over at t and failing at t + 7.9 (most of it waiting in its slot's queue):
    a refused connection costs nothing, so its retries are sent and its row names the refusal, never the budget;
    a timeout costs its whole download_timeout (the handler's timer starts with the transfer), wherever it
    waited."""
    # what Scrapy 2.13+'s HTTP handler raises (it wraps Twisted's errors in its own)
    from scrapy.exceptions import DownloadConnectionRefusedError as TxRefused, DownloadTimeoutError as TxTimeout

    clock = Clock()
    mw = DownloadBudgetMiddleware(8, 30, clock=clock)
    req = Request("http://shop.example/refused")
    for start in (0.0, 10.0, 20.0):  # the first attempt and Scrapy's two retries
        req = req.copy()
        _attempt(mw, clock, req, start, start + 7.9)
        assert mw.process_exception(req, TxRefused()) is None, "left to RetryMiddleware"
        assert req.meta.get("lookbench_spent_s", 0.0) == 0.0
    assert mw.process_request(req.copy()) is None

    mw = DownloadBudgetMiddleware(8, 3, clock=clock)  # attempts of at most 3 s
    slow = Request("http://shop.example/slow")
    _attempt(mw, clock, slow, 0.0, 7.9)  # 4.9 s in the queue, then its 3 s timeout
    assert mw.process_exception(slow, TxTimeout()) is None, "5 s left: retried"
    assert slow.meta["lookbench_spent_s"] == pytest.approx(3.0)
    retry = slow.copy()
    assert mw.process_request(retry) is None and retry.meta["download_timeout"] == pytest.approx(3.0)
    clock.now = 30.0
    mw.request_left_downloader(request=retry)
    assert mw.process_exception(retry, TxTimeout()) is None
    last = retry.copy()
    _attempt(mw, clock, last, 40.0, 42.0)  # the 2 s left
    with pytest.raises(DownloadTimeout) as e:
        mw.process_exception(last, TxTimeout())
    assert e.value.reason == "download_timeout"


@pytest.mark.parametrize("timeout", ["twisted", "scrapy", "playwright"])
def test_every_kind_of_timeout_before_headers_is_charged(timeout):
    """Twisted's TimeoutError (older Scrapy), Scrapy's DownloadTimeoutError (2.13+, what its handler raises) and a
    Playwright navigation timeout are all timeouts; a navigation's timeout is the whole budget, so it is charged
    what was left of it."""
    from scrapy.exceptions import DownloadTimeoutError
    from twisted.internet.error import TimeoutError as TxTimeout

    class PlaywrightTimeout(Exception):
        pass

    PlaywrightTimeout.__name__ = "TimeoutError"
    PlaywrightTimeout.__module__ = "playwright._impl._errors"
    exc = {"twisted": TxTimeout(), "scrapy": DownloadTimeoutError("took longer than 3 s"),
           "playwright": PlaywrightTimeout("Timeout 8000ms exceeded")}[timeout]
    clock = Clock()
    mw = DownloadBudgetMiddleware(8, 3, clock=clock)
    req = Request("http://shop.example/p")
    _attempt(mw, clock, req, 0.0, 5.0)
    if timeout == "playwright":
        with pytest.raises(DownloadTimeout):
            mw.process_exception(req, exc)
        assert req.meta["lookbench_spent_s"] == pytest.approx(8.0)
    else:
        assert mw.process_exception(req, exc) is None
        assert req.meta["lookbench_spent_s"] == pytest.approx(3.0)


def test_a_page_that_never_answers_costs_one_attempt_of_the_budget(tmp_path):
    """Budget 2 s: the page's first attempt times out after 2 s (Scrapy's DownloadTimeoutError), which spends the
    budget, so it is not retried: one request, a download_timeout row (Scrapy's retries would have sent three)."""
    srv = _server()
    try:
        site = tmp_path / "site.yaml"
        site.write_text(yaml.safe_dump({"name": "mute", "start_urls": ["{{BASE}}/h/mute"],
                                        "allow_private_addresses": True, "follow_links": False,
                                        "download_budget_s": 2}))
        feed, _ = run_spider(site, srv.base_url, tmp_path / "crawl", "test-bot", timeout_s=300)
    finally:
        local_http.stop(srv)
    rows = [json.loads(line) for line in feed.read_text().splitlines()]
    rows = [r for r in rows if r["kind"] == "page"]
    assert srv.hits.count("/h/mute") == 1, srv.hits
    assert [(r["outcome"], r["reason"]) for r in rows] == [("rejected", "download_timeout")]


def test_a_redirect_clears_the_last_answer():
    """A 500, then a 301 on its retry: the redirect's target has had no answer of its own."""
    clock = Clock()
    mw = DownloadBudgetMiddleware(8, 30, clock=clock)
    req = Request("http://shop.example/a")
    _attempt(mw, clock, req, 0.0, 0.1, status=500)
    assert req.meta["lookbench_last_status"] == 500
    _attempt(mw, clock, req, 1.0, 1.1, status=301)
    assert "lookbench_last_status" not in req.meta


def _server():
    """``/h/flaky``: 500 on the first hit, a product page after; ``/h/slow*``: 200 headers, then a byte every 0.1 s
    for at most 120 s; ``/h/mute``: no answer for 20 s; a sitemap listing slow-1, flaky, slow-2 (so whichever
    order the scheduler takes them, flaky's first attempt waits behind a slow page in a slot of concurrency 1).
    ``.hits``: the paths requested."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def _send(self, status, body, ctype):
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            self.server.hits.append(self.path)
            base = self.server.base_url
            if self.path == "/robots.txt":
                return self._send(200, b"User-agent: *\nAllow: /\n", "text/plain")
            if self.path == "/sitemap.xml":
                locs = "".join(f"<url><loc>{base}/h/{p}</loc></url>" for p in ("slow-1", "flaky", "slow-2"))
                return self._send(200, ("<?xml version='1.0'?><urlset xmlns='http://www.sitemaps.org/schemas/"
                                        f"sitemap/0.9'>{locs}</urlset>").encode(), "application/xml")
            if self.path == "/h/flaky":
                if self.server.hits.count("/h/flaky") == 1:
                    return self._send(500, b"oops", "text/html")
                ld = json.dumps({"@type": "Product", "name": "Flaky coat", "sku": "FLAKY-1",
                                 "offers": {"@type": "Offer", "price": "10.00", "priceCurrency": "EUR"}})
                body = f"<html><head><script type='application/ld+json'>{ld}</script></head><body></body></html>"
                return self._send(200, body.encode(), "text/html; charset=utf-8")
            if self.path == "/h/mute":  # accepted, and held without a byte for 20 s
                time.sleep(20)
                return
            if self.path.startswith("/h/slow"):
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", "100000")
                self.end_headers()
                for _ in range(1200):
                    try:
                        self.wfile.write(b"<")
                        self.wfile.flush()
                    except OSError:
                        return
                    time.sleep(0.1)
                return
            return self._send(404, b"", "text/html")

    srv = local_http.serve(Handler)
    return srv


def test_a_500_that_recovers_is_retried_after_waiting_behind_slow_pages(tmp_path):
    """Budget 8 s, one download at a time: flaky's 500 comes after a slow page used its whole budget, and its
    retry is sent (the wait did not count) and gives the product; the slow pages are download_timeout rows."""
    srv = _server()
    try:
        site = tmp_path / "site.yaml"
        site.write_text(yaml.safe_dump({"name": "flaky", "sitemap_urls": ["{{BASE}}/sitemap.xml"],
                                        "allow_private_addresses": True, "follow_links": False,
                                        "download_budget_s": 8, "concurrency_per_domain": 1}))
        feed, _ = run_spider(site, srv.base_url, tmp_path / "crawl", "test-bot", timeout_s=300)
    finally:
        srv.shutdown()
        srv.server_close()
    items = [json.loads(line) for line in feed.read_text().splitlines()]
    rows = {i["url"].rsplit("/", 1)[-1]: i for i in items if i["kind"] == "page"}
    assert srv.hits.count("/h/flaky") == 2, "the retry was sent"
    assert rows["flaky"]["outcome"] != "rejected", rows["flaky"]
    assert {i["sku"] for i in items if i["kind"] == "product"} == {"FLAKY-1"}
    assert {(rows[p]["outcome"], rows[p]["reason"]) for p in ("slow-1", "slow-2")} == {("rejected",
                                                                                        "download_timeout")}


def test_an_image_whose_attempts_ran_out_after_a_500_is_http_500():
    """The image pipeline reads a failure as a page's row does: a timeout after an earlier 500 is http_500, an
    expected outcome (ImageNotStored: one INFO line, no traceback); without the 500 it is download_timeout."""
    from types import SimpleNamespace

    from twisted.internet.error import TimeoutError as TxTimeout
    from twisted.python.failure import Failure

    from lookbench_crawlers.pipelines import ImageDownloadPipeline, ImageNotStored, _failure_reason

    pipe = ImageDownloadPipeline.__new__(ImageDownloadPipeline)
    info = SimpleNamespace(spider=None)
    for meta, want in (({"lookbench_last_status": 500}, "http_500"), ({}, "download_timeout")):
        req = Request("http://shop.example/img/1.jpg", meta=meta)
        with pytest.raises(ImageNotStored) as e:
            pipe.media_failed(Failure(TxTimeout()), req, info)
        assert e.value.reason == want and _failure_reason(Failure(e.value), req.url) == want
