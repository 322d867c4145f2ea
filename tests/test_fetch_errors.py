"""A fetch that got no response is a row with a stable, readable reason (``lookbench_crawlers.fetch_errors``, the one
reading for pages and images), never the class name of whichever exception Scrapy or Twisted raised: the classes
each version and download handler raise for the same failure read the same, a TLS error inside a
``ResponseNeverReceived`` is ``fetch_error:tls``, an unknown one ``fetch_error:other:<class>``; and a crawl's page
and image on a port that refuses, or on a server that drops the connection mid-body, are logged so with the
exception's class counted in the stats."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from lookbench_crawlers.fetch_errors import fetch_error_reason
from lookbench_crawlers.pipelines import _failure_reason
from lookbench_pipeline.crawl import crawl_site, merge_catalog


def _from(outer, inner):
    """``outer`` raised from ``inner``, as Scrapy's wrap_twisted_exceptions does."""
    try:
        try:
            raise inner
        except Exception as e:
            raise outer from e
    except Exception as e:
        return e


def _cases():
    from OpenSSL import SSL
    from scrapy.exceptions import (CannotResolveHostError, DownloadCancelledError, DownloadConnectionRefusedError,
                                   DownloadFailedError, DownloadTimeoutError, ResponseDataLossError)
    from twisted.internet import error as tx
    from twisted.internet.defer import CancelledError
    from twisted.python.failure import Failure
    from twisted.web._newclient import ResponseFailed, ResponseNeverReceived

    def failure(exc):
        try:
            raise exc
        except Exception:
            return Failure()

    return [
        (tx.ConnectionRefusedError(), "fetch_error:connection_refused"),
        (_from(DownloadConnectionRefusedError("x"), tx.ConnectionRefusedError()), "fetch_error:connection_refused"),
        (ConnectionRefusedError(111, "refused"), "fetch_error:connection_refused"),
        (tx.TCPTimedOutError(), "download_timeout"),
        (tx.TimeoutError(), "download_timeout"),
        (DownloadTimeoutError("took longer than 30 s"), "download_timeout"),
        (tx.DNSLookupError("x"), "name_not_resolved"),
        (_from(CannotResolveHostError("x"), tx.DNSLookupError("x")), "name_not_resolved"),
        (ResponseNeverReceived([failure(tx.ConnectionLost())]), "fetch_error:connection_lost"),
        (_from(DownloadFailedError("x"), ResponseFailed([failure(tx.ConnectionDone())])),
         "fetch_error:connection_lost"),
        (ResponseDataLossError(), "fetch_error:connection_lost"),
        (ConnectionResetError(104, "reset"), "fetch_error:connection_lost"),
        (ResponseNeverReceived([failure(SSL.Error([("SSL routines", "", "certificate verify failed")]))]),
         "fetch_error:tls"),
        (tx.NoRouteError(), "fetch_error:connect_failed"),
        (tx.ConnectError(), "fetch_error:connect_failed"),
        (CancelledError(), "download_cancelled"),
        (DownloadCancelledError("Cancelling download: expected response size (3) larger than download max size (2)"),
         "too_large_bytes"),
        (_from(RuntimeError("boom"), KeyError("k")), "fetch_error:other:KeyError"),
        (ValueError("odd"), "fetch_error:other:ValueError"),
    ]


@pytest.mark.parametrize("exc,reason", _cases(), ids=lambda v: type(v).__name__ if isinstance(v, Exception) else v)
def test_each_known_failure_has_its_stable_reason_for_pages_and_images(exc, reason):
    from scrapy.pipelines.media import FileException

    assert fetch_error_reason(exc) == reason, exc
    # an image download's failure comes wrapped in Scrapy's bare FileException: the same reason
    assert _failure_reason(_from(FileException(), exc)) == reason, exc


ROBOTS = b"User-agent: *\nAllow: /\n"


def _product(images: list[str]) -> bytes:
    ld = {"@type": "Product", "name": "Coat", "sku": "C1", "image": images,
          "offers": {"@type": "Offer", "price": "10.00", "priceCurrency": "EUR"}}
    return f"<html><head><script type='application/ld+json'>{json.dumps(ld)}</script></head></html>".encode()


def test_a_crawl_logs_refused_and_dropped_fetches_with_readable_reasons(tmp_path):
    class RobotsThenGone(BaseHTTPRequestHandler):
        """Answers robots.txt, having stopped listening first: the next connections are refused (a page refused
        before robots.txt was read would be robots_disallowed, RFC 9309)."""

        def log_message(self, *a):
            pass

        def do_GET(self):
            stop = threading.Thread(target=gone.shutdown)
            stop.start()
            stop.join()
            gone.server_close()
            self.send_response(200 if self.path == "/robots.txt" else 404)
            self.send_header("Content-Length", str(len(ROBOTS)))
            self.end_headers()
            self.wfile.write(ROBOTS)

    gone = ThreadingHTTPServer(("127.0.0.1", 0), RobotsThenGone)
    dead = gone.server_port
    threading.Thread(target=gone.serve_forever, daemon=True).start()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            base = f"http://127.0.0.1:{self.server.server_port}"
            if self.path in ("/lost", "/img/lost.jpg"):  # announces 1000 bytes, sends 10, hangs up
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", "1000")
                self.end_headers()
                self.wfile.write(b"0123456789")
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            urlset = ('<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                      f"<url><loc>{base}/p</loc></url><url><loc>{base}/lost</loc></url>"
                      f"<url><loc>http://127.0.0.1:{dead}/gone</loc></url></urlset>").encode()
            body, ctype = {"/robots.txt": (ROBOTS, "text/plain"), "/sitemap.xml": (urlset, "application/xml"),
                           "/p": (_product([f"http://127.0.0.1:{dead}/img/gone.jpg", "/img/lost.jpg"]),
                                  "text/html")}.get(self.path, (b"", "text/plain"))
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
        site.write_text(yaml.safe_dump({
            "name": "s", "kind": "web", "allow_private_addresses": True, "allowed_ports": [port, dead],
            "allowed_hosts": [f"127.0.0.1:{dead}"], "image_hosts": [f"127.0.0.1:{dead}"], "follow_links": False,
            "allowed_addresses": [f"127.0.0.1:{dead}"],
            "sitemap_urls": [f"http://127.0.0.1:{port}/sitemap.xml"]}))
        cat = merge_catalog(crawl_site(site, tmp_path / "run", "test-bot"), tmp_path / "state")
    finally:
        srv.shutdown()
        srv.server_close()
        gone.server_close()
    rows = {r["url"].rsplit("/", 1)[-1]: (r["status"], r["reason"]) for r in cat.crawl_log.to_pylist()}
    assert rows["gone"] == (0, "fetch_error:connection_refused") and rows["lost"] == (0, "fetch_error:connection_lost")
    downloads = {d["url"].rsplit("/", 1)[-1]: d["reason"] for d in cat.downloads.to_pylist()}
    assert downloads == {"gone.jpg": "fetch_error:connection_refused", "lost.jpg": "fetch_error:connection_lost"}
    stats = cat.counts["scrapy"]
    counted = {k: v for k, v in stats.items() if k.startswith("lookbench/fetch_errors/")}
    assert set(counted) == {"lookbench/fetch_errors/fetch_error:connection_refused/DownloadConnectionRefusedError",
                            "lookbench/fetch_errors/fetch_error:connection_lost/ResponseDataLossError"}, counted
    assert sum(counted.values()) == 2  # one per page row
