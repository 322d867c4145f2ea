"""A site whose robots.txt cannot be read is disallowed, as RFC 9309 says, but its rows say why
(``robots_unreachable:<fetch error>``, ``robots_unreachable:http_<5xx>``), for pages and images alike, never
``robots_disallowed``; and a week's crawl in which the site never answered is not recorded as finished: the next
attempt crawls the site again instead of reading the outage back as an empty week, and the site's state (first
seen, disappeared) is left as it was."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml

from lookbench_crawlers import fetch_errors
from lookbench_crawlers.middlewares import robots_unreachable_reason
from lookbench_pipeline.crawl import FINISHED, UNREACHABLE, crawl_site, merge_catalog, network_reason


def _free_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _product(name: str, images: list[str]) -> bytes:
    ld = {"@type": "Product", "name": name, "sku": name, "image": images,
          "offers": {"@type": "Offer", "price": "10.00", "priceCurrency": "EUR"}}
    return f"<html><head><script type='application/ld+json'>{json.dumps(ld)}</script></head></html>".encode()


def _serve(handler_cls, port: int = 0) -> ThreadingHTTPServer:
    srv = ThreadingHTTPServer(("127.0.0.1", port), handler_cls)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


class _Quiet(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def answer(self, status: int, body: bytes, ctype: str = "text/html"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_the_reason_names_why_robots_txt_could_not_be_read():
    from twisted.internet import error as tx

    assert robots_unreachable_reason(tx.ConnectionRefusedError()) == "robots_unreachable:connection_refused"
    assert robots_unreachable_reason(tx.TCPTimedOutError()) == "robots_unreachable:download_timeout"
    assert robots_unreachable_reason(ValueError()) == "robots_unreachable:other:ValueError"
    assert robots_unreachable_reason(status=503) == "robots_unreachable:http_503"
    # the library's reading of "no response for a network reason" knows the crawler's whole vocabulary
    for reason in (fetch_errors.DOWNLOAD_TIMEOUT, fetch_errors.NAME_NOT_RESOLVED, fetch_errors.TLS,
                   fetch_errors.CONNECTION_REFUSED, fetch_errors.CONNECT_FAILED, fetch_errors.CONNECTION_LOST,
                   f"{fetch_errors.OTHER}:KeyError", robots_unreachable_reason(status=500),
                   robots_unreachable_reason(tx.ConnectionRefusedError())):
        assert network_reason(reason), reason
    for reason in ("robots_disallowed", "http_404", "host_not_allowed", "address_not_global", "max_pages_reached",
                   fetch_errors.DOWNLOAD_CANCELLED, fetch_errors.TOO_LARGE, "", None):
        assert not network_reason(reason), reason


def test_pages_and_images_behind_an_unreadable_robots_txt_say_why(tmp_path):
    dead = _free_port()  # a host whose robots.txt (and everything else) is refused

    class Down(_Quiet):  # a server in trouble: robots.txt answers 503
        def do_GET(self):
            self.answer(503 if self.path == "/robots.txt" else 200, _product("X", []))

    down = _serve(Down)

    class Shop(_Quiet):
        def do_GET(self):
            base = f"http://127.0.0.1:{self.server.server_port}"
            urlset = ('<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                      f"<url><loc>{base}/p</loc></url><url><loc>http://127.0.0.1:{down.server_port}/x</loc></url>"
                      f"<url><loc>http://127.0.0.1:{dead}/gone</loc></url></urlset>").encode()
            pages = {"/robots.txt": (b"User-agent: *\nAllow: /\n", "text/plain"),
                     "/sitemap.xml": (urlset, "application/xml"),
                     "/p": (_product("Coat", [f"http://127.0.0.1:{dead}/img/a.jpg"]), "text/html")}
            body, ctype = pages.get(self.path, (b"", "text/plain"))
            self.answer(200 if body else 404, body, ctype)

    srv = _serve(Shop)
    try:
        port = srv.server_port
        others = [f"127.0.0.1:{down.server_port}", f"127.0.0.1:{dead}"]
        site = tmp_path / "site.yaml"
        site.write_text(yaml.safe_dump({
            "name": "s", "kind": "web", "allow_private_addresses": True,
            "allowed_ports": [port, down.server_port, dead], "allowed_hosts": others, "image_hosts": others,
            "allowed_addresses": others, "follow_links": False,
            "sitemap_urls": [f"http://127.0.0.1:{port}/sitemap.xml"]}))
        cat = merge_catalog(crawl_site(site, tmp_path / "run", "test-bot"), tmp_path / "state")
    finally:
        for s in (srv, down):
            s.shutdown()
            s.server_close()
    rows = {r["url"].rsplit("/", 1)[-1]: (r["status"], r["reason"]) for r in cat.crawl_log.to_pylist()}
    assert rows["x"] == (0, "robots_unreachable:http_503"), rows
    assert rows["gone"] == (0, "robots_unreachable:connection_refused"), rows
    assert rows["p"][0] == 200
    downloads = {d["url"].rsplit("/", 1)[-1]: d["reason"] for d in cat.downloads.to_pylist()}
    assert downloads == {"a.jpg": "robots_unreachable:connection_refused"}, downloads
    assert "unreachable" not in cat.counts  # the site answered: one page kept


def test_a_week_the_site_never_answered_is_crawled_again_not_read_back(tmp_path):
    port = _free_port()
    site = tmp_path / "site.yaml"
    site.write_text(yaml.safe_dump({
        "name": "s", "kind": "web", "allow_private_addresses": True, "allowed_ports": [port],
        "follow_links": False, "start_urls": [f"http://127.0.0.1:{port}/p"],
        "sitemap_urls": [f"http://127.0.0.1:{port}/sitemap.xml"]}))
    work, state = tmp_path / "week", tmp_path / "state"

    out = crawl_site(site, work, "test-bot", resume=True)  # nothing listens
    first_id = out.crawl_id
    assert out.unreachable == {"robots_unreachable:connection_refused": 2}, out.unreachable
    assert not (work / "crawl" / FINISHED).exists() and (work / "crawl" / UNREACHABLE).is_file()
    cat = merge_catalog(out, state)
    assert cat.counts["unreachable"] == {"robots_unreachable:connection_refused": 2}
    assert cat.products.num_rows == 0 and not (state / "s" / "products.parquet").exists()  # state untouched

    class Shop(_Quiet):  # the site is back
        def do_GET(self):
            urlset = ('<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                      f"<url><loc>http://127.0.0.1:{port}/p</loc></url></urlset>").encode()
            pages = {"/robots.txt": (b"User-agent: *\nAllow: /\n", "text/plain"),
                     "/sitemap.xml": (urlset, "application/xml"), "/p": (_product("Coat", []), "text/html")}
            body, ctype = pages.get(self.path, (b"", "text/plain"))
            self.answer(200 if body else 404, body, ctype)

    srv = _serve(Shop, port)
    try:
        again = crawl_site(site, work, "test-bot", resume=True)
    finally:
        srv.shutdown()
        srv.server_close()
    assert not again.reused and not again.unreachable
    assert again.crawl_id != first_id  # a new crawl: archived beside the unreachable one, not refused as written
    assert (work / "crawl" / FINISHED).is_file() and not (work / "crawl" / UNREACHABLE).exists()
    assert [p["title"] for p in merge_catalog(again, state).products.to_pylist()] == ["Coat"]
    assert crawl_site(site, work, "test-bot", resume=True).reused  # now finished: read back

    # down again, the week crawled again (--force): the outage does not replace the week's finished crawl, which is
    # kept and read back (its reasons said), and marks none of the site's products disappeared
    import pyarrow.parquet as pq

    before = pq.read_table(state / "s" / "products.parquet").to_pylist()
    down = crawl_site(site, work, "test-bot", resume=True, again=True)
    assert down.again_unreachable == {"robots_unreachable:connection_refused": 2}, down.again_unreachable
    assert down.reused and not down.unreachable and down.crawl_id == again.crawl_id
    assert (work / "crawl" / FINISHED).is_file() and not (work / "crawl" / UNREACHABLE).exists()
    assert not (work / "crawl.previous").exists()
    cat = merge_catalog(down, state)
    assert cat.counts["products_disappeared"] == 0 and [p["title"] for p in cat.products.to_pylist()] == ["Coat"]
    assert pq.read_table(state / "s" / "products.parquet").to_pylist()[0]["disappeared_at"] is None
    assert before[0]["disappeared_at"] is None
    from assets.crawl import crawl_headline

    line = crawl_headline({**cat.counts, "read_back": True, "read_back_started_at": down.started_at,
                           "again_unreachable": down.again_unreachable})  # as the crawl stage records them
    assert "SITE UNREACHABLE when crawled again (robots_unreachable:connection_refused 2)" in line, line
    assert "finished crawl started" in line and "is kept and read back" in line, line
