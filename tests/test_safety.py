"""Hostile input at the edges: a manifest that names paths outside the pull's folder, pages that opt out of
indexing. Each test builds its hostile input itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from release_factory import make_release

from lookbench_pipeline.demo import serve, shop as demo_shop
from lookbench_pipeline.cli import main
from lookbench_pipeline.config import load_config
from lookbench_pipeline.crawl import run_spider
from lookbench_pipeline.optout import directives, page_optout
from lookbench_pipeline.pipeline import store_of
from lookbench_pipeline.releases import pull
from lookbench_pipeline.releases.publish import publish
from lookbench_pipeline.safepath import UnsafePathError, check_key, resolve_inside

import local_http

V1 = "v20260301"


@pytest.fixture
def cfg(tmp_path) -> str:
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump({"data_dir": "data", "store": {"url": "store"}}))
    return str(path)


@pytest.mark.parametrize("key", ["/etc/passwd", "//server/share/x", "C:/x", "c:x", "a\\..\\..\\x", "a/../../x",
                                 "../x", "./x", "a//b", "", "a/\x00b", "a/\nb"])
def test_unsafe_keys_refused(key, tmp_path):
    with pytest.raises(UnsafePathError):
        check_key(key)
    with pytest.raises(UnsafePathError):
        resolve_inside(tmp_path, key)


def test_symlink_escape_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    root.mkdir()
    (root / "sub").symlink_to(outside, target_is_directory=True)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        resolve_inside(root, "sub/file.parquet")
    assert resolve_inside(root, "ok/file.parquet") == root / "ok" / "file.parquet"


@pytest.mark.parametrize("evil", ["/tmp/{victim}", "real_studio_flat/../../{victim_rel}", "//host/x", "C:/x"])
def test_pull_refuses_a_hostile_manifest_before_writing(evil, cfg, tmp_path, capsys):
    store = store_of(load_config(cfg))
    publish(make_release(V1, range(0, 4)), store, {})
    victim = tmp_path / "victim.txt"
    key = evil.format(victim=victim, victim_rel=victim.name)
    manifest = json.loads(store.get_bytes(f"releases/{V1}/manifest.json"))
    manifest["files"][key] = {"sha256": "0" * 64, "bytes": 3}
    store.put_bytes(f"releases/{V1}/manifest.json", json.dumps(manifest).encode())
    dest = tmp_path / "dest"
    assert main(["pull", V1, "--dest", str(dest), "--quiet", "--config", cfg]) == 1
    err = capsys.readouterr().err
    assert key in err and any(w in err for w in ("absolute", "drive", "'..'", "outside")), err
    assert not victim.exists()
    assert not (dest / V1).exists() or not any(p.is_file() for p in (dest / V1).rglob("*")), "nothing is written"


def test_pull_latest_and_a_hostile_latest(cfg, tmp_path, capsys):
    store = store_of(load_config(cfg))
    publish(make_release(V1, range(0, 4)), store, {})
    assert main(["pull", "latest", "--dest", str(tmp_path / "d"), "--quiet", "--config", cfg]) == 0
    assert f"of {V1} verified" in capsys.readouterr().out
    store.put_bytes("releases/latest", b"../../etc")
    with pytest.raises(UnsafePathError):
        pull(store, "latest", tmp_path / "e", progress=False)
    assert main(["pull", "latest", "--dest", str(tmp_path / "e"), "--quiet", "--config", cfg]) == 1
    assert "not a release version" in capsys.readouterr().err


def test_robots_directives():
    assert page_optout(["noindex"], [], "lookbenchbot") == "robots_noindex"
    assert page_optout(["googlebot: noindex, nofollow"], [], "lookbenchbot") == "robots_noindex"
    assert page_optout(["otherbot: noindex"], [], "lookbenchbot") is None
    assert page_optout(["lookbenchbot: noimageindex"], [], "lookbenchbot") == "robots_noimageindex"
    assert page_optout([], [("robots", "NOINDEX, follow")], "lookbenchbot") == "robots_noindex"
    assert page_optout([], [("LookBenchBot", "none")], "lookbenchbot") == "robots_noindex"
    assert page_optout([], [("robots", "noai")], "lookbenchbot") == "robots_noimageindex"
    assert page_optout(["unavailable_after: 25 Jun 2030 15:00:00 PST"], [], "lookbenchbot") is None
    assert directives(["otherbot: noindex, lookbenchbot: noimageindex"], [], "lookbenchbot") == {"noimageindex"}


def test_crawl_honours_page_noindex_and_noimageindex(tmp_path):
    site = yaml.safe_load(Path("lookbench_pipeline/data/sites/demo.yaml").read_text())
    site.update(demo_products=4, demo_looks=1)
    (tmp_path / "demo.yaml").write_text(yaml.safe_dump(site))
    root = tmp_path / "shop"
    demo_shop.generate(root, 4, 1, 7)
    p0 = root / "products/demo-0000.html"
    p0.write_text(p0.read_text().replace("<head>", "<head><meta name='robots' content='noindex, follow'>", 1))
    headers = lambda path: {"X-Robots-Tag": "test-bot: noimageindex"} if path.endswith("demo-0001.html") else {}  # noqa: E731
    with serve.serving(serve.static_resolver(root), headers) as srv:
        feed, _ = run_spider(tmp_path / "demo.yaml", srv.base_url, tmp_path / "crawl", "test-bot (+https://x.invalid)")
        hits = list(srv.hits)
    items = [json.loads(line) for line in feed.read_text().splitlines()]
    products = {i["sku"]: i for i in items if i["kind"] == "product"}
    assert "DEMO-0000" not in products
    pages = {i["url"].rsplit("/", 1)[-1]: i for i in items if i["kind"] == "page"}
    assert (pages["demo-0000.html"]["outcome"], pages["demo-0000.html"]["reason"]) == ("rejected", "robots_noindex")
    refused = products["DEMO-0001"]["images"]
    assert refused and all(d["reason"] == "robots_noimageindex" and d["path"] is None for d in refused)
    assert not any("demo-0001-" in h for h in hits), "an opted-out image was fetched"
    assert all(d["path"] for d in products["DEMO-0002"]["images"])


@pytest.mark.parametrize("body,match", [(b"not json", "is not JSON"), (b"[1, 2]", "not a release manifest"),
                                        (b'{"files": []}', "not a release manifest")])
def test_pull_refuses_a_manifest_that_is_not_one(body, match, cfg, tmp_path, capsys):
    store = store_of(load_config(cfg))
    publish(make_release(V1, range(0, 4)), store, {})
    store.put_bytes(f"releases/{V1}/manifest.json", body)
    assert main(["pull", V1, "--dest", str(tmp_path / "d"), "--quiet", "--config", cfg]) == 1
    err = capsys.readouterr().err
    assert match in err and "Traceback" not in err and err.count("\n") == 1
    assert not (tmp_path / "d").exists()


def _trickling_server(pages):
    """A 127.0.0.1 server that answers ``pages`` (path -> (body, content type)) at once and ``/slow*`` a byte every
    0.1 s out of a promised 100 kB (a slow loris), for at most 120 s (the loop is bounded) or until the client hangs
    up. ``.hits``: the paths requested."""
    import time
    from http.server import BaseHTTPRequestHandler

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_GET(self):
            self.server.hits.append(self.path)
            if self.path.startswith("/slow"):
                self.send_response(200)
                self.send_header("Content-Type", "image/jpeg" if self.path.endswith(".jpg") else "text/html")
                self.send_header("Content-Length", "100000")
                self.end_headers()
                for _ in range(1200):
                    try:
                        self.wfile.write(b"<")
                        self.wfile.flush()
                    except OSError:  # the crawler gave up and closed the connection
                        return
                    time.sleep(0.1)
                return
            body, ctype = pages.get(self.path, (None, ""))
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

    srv = local_http.serve(Handler)
    return srv


def test_a_slow_loris_costs_one_download_budget_and_is_logged(tmp_path):
    """A page and an image that trickle bytes are given up after the site's download budget (the shipped default),
    not retried, and recorded ``download_timeout``; the crawl finishes the other pages and images."""
    import io

    from PIL import Image

    from lookbench_pipeline.config import SiteConfig

    jpeg = io.BytesIO()
    Image.new("RGB", (300, 400), (180, 20, 30)).save(jpeg, "JPEG")

    def product(i, image):
        ld = json.dumps({"@type": "Product", "name": f"Red dress {i}", "sku": f"SKU-{i}", "image": image,
                         "offers": {"@type": "Offer", "price": "19.99", "priceCurrency": "EUR"}})
        return (f"<html><head><script type='application/ld+json'>{ld}</script></head><body><h1>Red dress {i}</h1>"
                "</body></html>").encode(), "text/html; charset=utf-8"

    pages = {}
    srv = _trickling_server(pages)
    try:
        base = srv.base_url
        locs = "".join(f"<url><loc>{base}/{p}</loc></url>" for p in ("p1.html", "p2.html", "slow.html"))
        sitemap = f"<?xml version='1.0'?><urlset xmlns='http://www.sitemaps.org/schemas/sitemap/0.9'>{locs}</urlset>"
        pages.update({"/sitemap.xml": (sitemap.encode(), "application/xml"),
                      "/p1.html": product(1, f"{base}/slow.jpg"), "/p2.html": product(2, f"{base}/img2.jpg"),
                      "/img2.jpg": (jpeg.getvalue(), "image/jpeg")})
        site = tmp_path / "site.yaml"
        site.write_text(yaml.safe_dump({"name": "loris", "sitemap_urls": ["{{BASE}}/sitemap.xml"],
                                        "allow_private_addresses": True, "follow_links": False}))
        assert SiteConfig.from_yaml(site).download_budget_s == 30, "the shipped default"
        feed, _ = run_spider(site, base, tmp_path / "crawl", "test-bot", timeout_s=300)
    finally:
        srv.shutdown()
        srv.server_close()
    items = [json.loads(line) for line in feed.read_text().splitlines()]
    pages_log = {i["url"].rsplit("/", 1)[-1]: i for i in items if i["kind"] == "page"}
    assert (pages_log["slow.html"]["outcome"], pages_log["slow.html"]["reason"]) == ("rejected", "download_timeout")
    products = {i["sku"]: i for i in items if i["kind"] == "product"}
    assert set(products) == {"SKU-1", "SKU-2"}, "the other pages were crawled"
    assert [(d["reason"], d["path"]) for d in products["SKU-1"]["images"]] == [("download_timeout", None)]
    assert products["SKU-2"]["images"][0]["path"], "the other image was downloaded"
    assert srv.hits.count("/slow.html") == 1 and srv.hits.count("/slow.jpg") == 1, "a spent budget is not retried"
