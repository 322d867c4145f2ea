"""A small static HTTP server on 127.0.0.1 for the demo shop and for replaying saved pages.

Text files may contain ``{{BASE}}``, replaced by the server's base URL at serve time, so a generated site needs no
fixed port. Responses carry ``ETag`` and ``Last-Modified`` and honour conditional requests (304), like a real shop.
"""

from __future__ import annotations

import hashlib
import mimetypes
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

_TEXT = {".html", ".htm", ".xml", ".txt", ".json"}


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: object) -> None:  # quiet
        pass

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def do_GET(self) -> None:
        self._serve(head=False)

    def _serve(self, head: bool) -> None:
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        self.server.hits.append(path)
        try:
            body, ctype = self.server.resolve(path + (f"?{parts.query}" if parts.query else ""))
        except Exception:  # a resolver that fails is a server error, as on a real site
            self.server.statuses.append((path, 500))
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if body is None:
            self.server.statuses.append((path, 404))
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        etag = '"' + hashlib.sha1(body).hexdigest()[:16] + '"'
        if self.headers.get("If-None-Match") == etag:
            self.server.statuses.append((path, 304))
            self.send_response(304)
            self.send_header("ETag", etag)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.server.statuses.append((path, 200))
        self.send_response(200)
        for k, v in self.server.extra_headers(path).items():
            self.send_header(k, v)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", etag)
        self.send_header("Last-Modified", formatdate(self.server.mtime, usegmt=True))
        self.end_headers()
        if not head:
            self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, resolver: Callable[[str, str], tuple[bytes | None, str]],
                 extra_headers: Callable[[str], dict[str, str]] | None = None):
        super().__init__(("127.0.0.1", 0), _Handler)
        self._resolver = resolver
        self.extra_headers = extra_headers or (lambda path: {})
        self.statuses: list[tuple[str, int]] = []
        self.base_url = f"http://127.0.0.1:{self.server_address[1]}"
        self.hits: list[str] = []
        self.mtime = 1_700_000_000.0

    def resolve(self, path: str) -> tuple[bytes | None, str]:
        return self._resolver(path, self.base_url)


def static_resolver(root: Path, extra: dict[str, str] | None = None) -> Callable[[str, str], tuple[bytes | None, str]]:
    """Serve files under ``root`` (``{{BASE}}`` substituted in text files) plus generated ``extra`` text routes."""
    root = root.resolve()
    extra = extra or {}

    def resolve(path: str, base: str) -> tuple[bytes | None, str]:
        path = path.split("?", 1)[0]
        if path in extra:
            ctype = mimetypes.guess_type(path)[0] or ("text/html" if path.endswith("/") else "text/plain")
            return extra[path].replace("{{BASE}}", base).encode("utf-8"), ctype + "; charset=utf-8"
        rel = path.lstrip("/") or "index.html"
        if rel.endswith("/"):
            rel += "index.html"
        f = (root / rel).resolve()
        if root not in f.parents or not f.is_file():
            return None, ""
        data = f.read_bytes()
        ctype = mimetypes.guess_type(f.name)[0] or "application/octet-stream"
        if f.suffix.lower() in _TEXT:
            data = data.replace(b"{{BASE}}", base.encode())
            if f.suffix.lower() in (".html", ".htm"):
                return data, ctype  # the page's own meta charset decides, as on a real site
        return data, ctype

    return resolve


@contextmanager
def serving(resolver: Callable[[str, str], tuple[bytes | None, str]],
            extra_headers: Callable[[str], dict[str, str]] | None = None) -> Iterator[_Server]:
    """Serve on 127.0.0.1 (a free port) for the duration of the ``with`` block; yields the server
    (``.base_url``, ``.hits`` paths requested, ``.statuses`` (path, status) answered). ``extra_headers(path)``
    adds response headers (e.g. ``X-Robots-Tag``)."""
    with running(_Server(resolver, extra_headers), "lookbench-http") as srv:
        yield srv


@contextmanager
def running(srv: Any, name: str) -> Iterator[Any]:
    """Run ``srv`` (a ``socketserver`` server) in a daemon thread called ``name`` for the duration of the
    ``with`` block; shut down and close its socket afterwards."""
    t = threading.Thread(target=srv.serve_forever, name=name, daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def replay_resolver(pages_dir: Path) -> Callable[[str, str], tuple[bytes | None, str]]:
    """Serve saved pages (``*.html`` in ``pages_dir``) under ``/pages/``, with a generated index, sitemap and an
    allow-all robots.txt. Nothing is copied: files are read from ``pages_dir`` on each request."""
    names = sorted(p.name for p in pages_dir.glob("*.html"))
    index = "<html><body>" + "".join(f'<a href="/pages/{n}">{n}</a>\n' for n in names) + "</body></html>"
    sitemap = ('<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
               + "".join(f"<url><loc>{{{{BASE}}}}/pages/{n}</loc></url>" for n in names) + "</urlset>")
    extra = {"/": index, "/index.html": index, "/sitemap.xml": sitemap,
             "/robots.txt": "User-agent: *\nAllow: /\nSitemap: {{BASE}}/sitemap.xml\n"}
    static = static_resolver(pages_dir)
    generated = static_resolver(pages_dir, extra)

    def resolve(path: str, base: str) -> tuple[bytes | None, str]:
        path = path.split("?", 1)[0]
        if path in extra:
            return generated(path, base)
        if path.startswith("/pages/"):
            return static(path[len("/pages"):], base)
        return None, ""

    return resolve


@contextmanager
def local_site(site: Any, work_dir: Path) -> Iterator[str]:
    """Serve a ``demo`` or ``replay`` site (a :class:`lookbench_pipeline.config.SiteConfig`) on 127.0.0.1 for a
    ``with`` block and give its base URL: the demo shop generated under ``work_dir/site``; a replay site's saved
    pages from its ``pages_dir``. What the stages pass to :func:`lookbench_pipeline.crawl.crawl_site`.

    Raises:
        lookbench_pipeline.crawl.CrawlError: a replay site's ``pages_dir`` is not a folder.
        ValueError: the site is neither ``demo`` nor ``replay``.
    """
    from ..crawl import CrawlError
    from . import shop as demo_shop

    if site.kind == "demo":
        root = work_dir / "site"
        demo_shop.generate(root, site.demo_products, site.demo_looks, site.demo_seed, site.demo_colour_models)
        resolver = static_resolver(root)
    elif site.kind == "replay":
        if not site.pages_dir or not site.pages_dir.is_dir():
            raise CrawlError(f"replay site {site.name}: pages_dir {site.pages_dir} is not a folder")
        resolver = replay_resolver(site.pages_dir)
    else:
        raise ValueError(f"site {site.name} of kind {site.kind} is not served locally")
    with serving(resolver) as srv:
        yield srv.base_url


def main(argv: list[str] | None = None) -> int:
    """``python -m lookbench_pipeline.demo.serve SITE.yaml [--work DIR]``: serve a demo or replay site on
    127.0.0.1 as the pipeline does for its crawl, print its base URL (the spider's ``-a base_url``) on the first
    line of stdout, and serve until interrupted (Ctrl-C, SIGTERM). Exit 2 for a site file that is not valid or not
    of kind demo / replay."""
    import argparse
    import signal
    import tempfile

    from ..config import ConfigError, SiteConfig

    p = argparse.ArgumentParser(prog="python -m lookbench_pipeline.demo.serve",
                                description="serve a demo or replay site on 127.0.0.1 and print its base URL")
    p.add_argument("site", help="the site's YAML file (kind: demo or replay)")
    p.add_argument("--work", help="folder the demo shop is generated in (default: a temporary folder)")
    args = p.parse_args(argv)
    try:
        site = SiteConfig.from_yaml(args.site)
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    if site.kind not in ("demo", "replay"):
        print(f"configuration error: {args.site}: site {site.name} is of kind {site.kind}: only demo and replay "
              "sites are served locally", file=sys.stderr)
        return 2
    from ..crawl import CrawlError

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with tempfile.TemporaryDirectory() as tmp:
        try:
            served = local_site(site, Path(args.work or tmp))
            base = served.__enter__()
        except (CrawlError, ValueError, OSError) as exc:  # a pages_dir that is no folder, a work folder not writable
            print(f"configuration error: {args.site}: {exc}", file=sys.stderr)
            return 2
        try:
            print(base, flush=True)
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
        finally:
            served.__exit__(None, None, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
