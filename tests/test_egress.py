"""The egress policy: only globally routable addresses on allowed ports, checked where names resolve (so the
checked address is the connected one), exact allowances for the demo and replay servers. Hostile names go through
a stub resolver (static host answers and a failing lookup): nothing is sent off the machine."""

from __future__ import annotations

import json

import pytest
import yaml
from twisted.internet import defer
from twisted.internet.error import DNSLookupError

from lookbench_pipeline.demo import serve
from lookbench_pipeline.config import SiteConfig
from lookbench_pipeline.crawl import egress_allowances, run_spider
from lookbench_pipeline.egress import EgressPolicy


@pytest.mark.parametrize("ip,port,reason", [
    ("100.64.0.1", 443, "address_not_global"),       # shared address space (RFC 6598)
    ("100.100.100.200", 80, "address_not_global"),   # a cloud metadata service
    ("169.254.169.254", 80, "address_not_global"),   # link-local, the other metadata address
    ("10.0.0.7", 443, "address_not_global"), ("192.168.1.1", 80, "address_not_global"),
    ("127.0.0.1", 80, "address_not_global"), ("::1", 443, "address_not_global"),
    ("::ffff:127.0.0.1", 443, "address_not_global"), ("fd00::1", 443, "address_not_global"),
    ("0.0.0.0", 80, "address_not_global"), ("224.0.0.1", 80, "address_not_global"),
    ("198.18.0.1", 80, "address_not_global"),        # benchmarking range
    ("8.8.8.8", 6379, "port_not_allowed"), ("8.8.8.8", 443, None), ("2001:4860:4860::8888", 80, None),
    ("127.0.0.1", 8123, None), ("127.0.0.1", 8124, "address_not_global"),
    # IPv6 forms that reach an IPv4 address through a gateway are judged by it; deprecated and local-use ranges
    ("64:ff9b::a9fe:a9fe", 80, "address_not_global"),   # NAT64 (RFC 6052) to 169.254.169.254
    ("64:ff9b::7f00:1", 80, "address_not_global"), ("64:ff9b::808:808", 443, None),  # ... and to 8.8.8.8
    ("64:ff9b:1::808:808", 443, "address_not_global"),  # local-use NAT64 (RFC 8215)
    ("2002:a9fe:a9fe::1", 80, "address_not_global"), ("2002:808:808::1", 443, None),  # 6to4 (RFC 3056)
    ("::a9fe:a9fe", 80, "address_not_global"), ("::808:808", 80, "address_not_global"),  # IPv4-compatible, ::/8
    ("fec0::1", 443, "address_not_global"),            # site-local (RFC 3879)
    ("64:ff9b::7f00:1", 8123, None),                   # the allowed pair, reached through NAT64
])
def test_policy(ip, port, reason):
    policy = EgressPolicy.from_strings([80, 443], ["127.0.0.1:8123"])
    assert policy.refusal(ip, port) == reason


def test_demo_and_replay_allowance_is_exactly_their_origin():
    site = SiteConfig(name="demo", kind="demo", start_urls=["{{BASE}}/"], sitemap_urls=["{{BASE}}/sitemap.xml"],
                      allow_private_addresses=True, image_hosts=["cdn.example"])
    assert egress_allowances(site, "http://127.0.0.1:41234") == ["127.0.0.1:41234"]
    assert egress_allowances(SiteConfig(name="w", start_urls=["https://shop.example/"]), "") == []
    # a replay site is served on 127.0.0.1 by the pipeline itself: its own server is reachable without
    # allow_private_addresses (else its crawl fetched nothing: every page address_not_global), and nothing else is
    replay = SiteConfig(name="r", kind="replay", pages_dir=".", sitemap_urls=["{{BASE}}/sitemap.xml",
                                                                         "http://10.0.0.5/sitemap.xml"])
    assert egress_allowances(replay, "http://127.0.0.1:41234") == ["127.0.0.1:41234"]


def test_a_replay_site_is_crawled_without_allow_private_addresses(tmp_path):
    """A site file of kind replay with no allow_private_addresses (the flag is for start URLs of one's own): its
    pages, served by the pipeline on 127.0.0.1, are crawled and extracted, not refused address_not_global."""
    from lookbench_pipeline.crawl import crawl_site, merge_catalog
    from lookbench_pipeline.demo.serve import local_site

    (tmp_path / "pages").mkdir()
    ld = {"@context": "https://schema.org", "@type": "Product", "name": "Linen shirt", "sku": "LS-1",
          "image": "https://cdn.shop.example/ls1.jpg", "offers": {"@type": "Offer", "price": "49.00",
                                                                  "priceCurrency": "EUR"}}
    (tmp_path / "pages" / "shirt.html").write_text(
        f"<html><head><script type='application/ld+json'>{json.dumps(ld)}</script></head><body>x</body></html>")
    (tmp_path / "r.yaml").write_text(yaml.safe_dump({"name": "r", "kind": "replay", "pages_dir": "pages",
                                                     "sitemap_urls": ["{{BASE}}/sitemap.xml"]}))
    cat = merge_catalog(crawl_site(tmp_path / "r.yaml", tmp_path / "work", "test-bot", local_server=local_site),
                        tmp_path / "state")
    assert "pages.rejected.address_not_global" not in cat.counts, cat.counts
    assert cat.products["sku"].to_pylist() == ["LS-1"]


def _resolver(static, lookup_fails=True):
    from lookbench_crawlers.resolver import GuardedResolver

    r = GuardedResolver.__new__(GuardedResolver)
    r.policy = EgressPolicy.from_strings([80, 443], ["127.0.0.1:8123"])
    r.static_hosts = static
    r.replay = False
    r.timeout = 1

    def stub(name, timeout=()):  # the stub's DNS: nothing resolves, no query leaves the machine
        return defer.fail(DNSLookupError(name)) if lookup_fails else defer.succeed("8.8.8.8")
    r._parent_lookup = stub
    return r


@pytest.mark.parametrize("name,ip,reason", [("metadata.test", "100.100.100.200", "address_not_global"),
                                            ("cgnat.test", "100.64.12.1", "address_not_global"),
                                            ("linklocal.test", "169.254.10.1", "address_not_global"),
                                            ("nowhere.test", None, "name_not_resolved"),
                                            ("shop.test", "127.0.0.1", None)])
def test_resolver_checks_the_address_it_returns(name, ip, reason, monkeypatch):
    from scrapy.resolver import CachingThreadedResolver

    from lookbench_crawlers.resolver import AddressRefusedError

    r = _resolver({name: ip} if ip else {})
    monkeypatch.setattr(CachingThreadedResolver, "getHostByName", lambda self, n, t=(): self._parent_lookup(n, t))
    results = []
    r.getHostByName(name).addBoth(results.append)
    [res] = results
    if reason is None:
        assert res == ip
    else:
        assert res.check(AddressRefusedError) and res.value.reason == reason


def test_crawl_refuses_hostile_hosts_and_ports_with_a_log_row(tmp_path):
    """A page links to a name resolving to a metadata address, to the allowed host on another port, to an IP
    literal on a private range and to a name that does not resolve: each is refused with its reason in the crawl
    log, and the allowed host:port is crawled."""
    with serve.serving(lambda path, base: (None, "")) as other:
        other_port = other.base_url.rsplit(":", 1)[-1]
    pages = {"/": None}

    def resolver(path, base):
        if path == "/robots.txt":
            return b"User-agent: *\nAllow: /\n", "text/plain"
        if path == "/":
            links = "".join(f"<a href='{u}'>x</a>" for u in pages["links"])
            return f"<html><body><h1>Home</h1>{links}</body></html>".encode(), "text/html"
        return None, ""
    with serve.serving(resolver) as srv:
        port = srv.base_url.rsplit(":", 1)[-1]
        pages["links"] = [f"http://metadata.test:{port}/a", f"http://shop.test:{other_port}/b",
                          f"http://10.1.2.3:{port}/c", f"http://nowhere.test:{port}/d", f"http://shop.test:6379/e"]
        site = tmp_path / "site.yaml"
        site.write_text(yaml.safe_dump({
            "name": "egress", "start_urls": [f"http://shop.test:{port}/"], "follow_links": True,
            "allowed_hosts": ["shop.test", "metadata.test", "nowhere.test", "10.1.2.3"],
            "allowed_addresses": [f"127.0.0.1:{port}"], "max_pages": 20}))
        # the stub resolver: answers for three names, "nowhere.test" answered as not existing (no DNS query)
        static = {"shop.test": "127.0.0.1", "metadata.test": "100.100.100.200", "nowhere.test": ""}
        feed, _ = run_spider(site, "", tmp_path / "crawl", "test-bot",
                             extra_settings={"LOOKBENCH_STATIC_HOSTS": json.dumps(static), "RETRY_ENABLED": "False",
                                             "DNS_TIMEOUT": "2"})
    rows = {i["url"]: i for i in (json.loads(line) for line in feed.read_text().splitlines()) if i["kind"] == "page"}
    assert rows[f"http://shop.test:{port}/"]["status"] == 200
    assert rows[f"http://metadata.test:{port}/a"]["reason"] == "address_not_global"
    assert rows[f"http://shop.test:{other_port}/b"]["reason"] == "port_not_allowed"
    assert rows[f"http://10.1.2.3:{port}/c"]["reason"] == "address_not_global"
    assert rows[f"http://nowhere.test:{port}/d"]["reason"] == "name_not_resolved"
    assert rows["http://shop.test:6379/e"]["reason"] == "port_not_allowed"


def test_render_guard_decisions():
    """What a page rendered in Chromium may fetch: the site's hosts on the allowed address and port, names pinned
    to their checked address; nothing else (a unit view of render_guard, no browser)."""
    from lookbench_crawlers.render_guard import RenderGuard, check_names

    policy = EgressPolicy.from_strings([80, 443], ["127.0.0.1:8123"])
    static = {"shop.test": "127.0.0.1", "cdn.test": "93.184.216.34", "meta.test": "100.100.100.200",
              "gone.test": ""}
    names = check_names(["shop.test", "cdn.test", "meta.test", "gone.test", "127.0.0.1"], policy, static,
                        lookup=lambda n: pytest.fail(f"a DNS query for {n}"))
    assert names == {"shop.test": ("127.0.0.1", None), "cdn.test": ("93.184.216.34", None),
                     "meta.test": (None, "address_not_global"), "gone.test": (None, "name_not_resolved")}
    g = RenderGuard({"shop.test", "cdn.test", "meta.test", "gone.test", "127.0.0.1", "127.0.0.1:8123"}, policy, names)
    assert g.refusal("http://127.0.0.1:8123/app.js") is None
    assert g.refusal("http://shop.test:8123/app.js") is None
    assert g.refusal("https://cdn.test/lib.js") is None
    assert g.refusal("data:image/png;base64,AAAA") is None
    assert g.refusal("http://127.0.0.1:6379/") == "address_not_global"
    assert g.refusal("http://shop.test:6379/") == "address_not_global"
    assert g.refusal("https://cdn.test:8443/x") == "port_not_allowed"
    assert g.refusal("http://meta.test/latest/meta-data/") == "address_not_global"
    assert g.refusal("http://gone.test/x") == "name_not_resolved"
    assert g.refusal("http://169.254.169.254/latest/meta-data/") == "host_not_allowed"
    assert g.refusal("https://tracker.example/p.gif") == "host_not_allowed"
    assert g.refusal("ftp://shop.test/x") == "scheme_not_allowed"
    assert g.resolver_rules() == ("MAP cdn.test 93.184.216.34, MAP shop.test 127.0.0.1, EXCLUDE 127.0.0.1, "
                                  "MAP * ~NOTFOUND")


def test_rendered_page_subresources_meet_the_egress_guard(tmp_path):
    """A page rendered in Chromium on 127.0.0.1 pulls a script from a host outside the site, an image from the
    site's address on another port, an image from an allowed name that resolves to the shared address space and an
    XHR to another port: none is fetched, each has a crawl-log row with its reason, and the page's own product is
    kept."""
    import shutil

    chromium = shutil.which("chromium")
    if not chromium:
        pytest.skip("Debian's chromium is not installed (make chromium installs it when run as root)")
    from lookbench_pipeline.demo import shop as demo_shop

    root = tmp_path / "js"
    demo_shop.write_js_pages(root, 2)
    with serve.serving(lambda path, base: (b"<html>secret</html>", "text/html")) as other:
        other_port = other.base_url.rsplit(":", 1)[-1]
        page = root / "js" / "p-00000.html"
        hostile = (f"<script src='http://evil.test:{{PORT}}/steal.js'></script>"
                   f"<img src='http://127.0.0.1:{other_port}/pixel.png'>"
                   f"<img src='http://cgnat.test/x.png'>"
                   f"<script>fetch('http://127.0.0.1:{other_port}/xhr').catch(() => 0)</script>")
        text = page.read_text().replace("<body>", "<body>" + hostile, 1)
        with serve.serving(serve.static_resolver(root)) as srv:
            port = srv.base_url.rsplit(":", 1)[-1]
            page.write_text(text.replace("{PORT}", port))
            site = tmp_path / "site.yaml"
            site.write_text(yaml.safe_dump({"name": "jsshop", "sitemap_urls": ["{{BASE}}/sitemap.xml"],
                                            "allow_private_addresses": True, "follow_links": False,
                                            "render_js": True, "chromium_path": chromium,
                                            "render_hosts": ["cgnat.test"]}))
            # the stub resolver: evil.test would reach this very server, cgnat.test is in the shared address space
            static = {"evil.test": "127.0.0.1", "cgnat.test": "100.64.0.9"}
            feed, _ = run_spider(site, srv.base_url, tmp_path / "crawl", "test-bot",
                                 extra_settings={"LOOKBENCH_STATIC_HOSTS": json.dumps(static)})
            hits = list(srv.hits)
        other_hits = list(other.hits)
    items = [json.loads(line) for line in feed.read_text().splitlines()]
    assert {p["sku"] for p in items if p["kind"] == "product"} == {"JS-00000", "JS-00001"}
    refused = {i["url"]: i["reason"] for i in items if i["kind"] == "page" and i["outcome"] == "subresource_refused"}
    assert refused == {f"http://evil.test:{port}/steal.js": "host_not_allowed",
                       f"http://127.0.0.1:{other_port}/pixel.png": "address_not_global",
                       "http://cgnat.test/x.png": "address_not_global",
                       f"http://127.0.0.1:{other_port}/xhr": "address_not_global"}
    assert other_hits == [], "nothing was fetched from the other port"
    assert "/steal.js" not in hits, "nothing was fetched through a name outside the site"
    stats = json.loads((tmp_path / "crawl" / "stats.json").read_text())
    assert stats["lookbench/render_refused/address_not_global"] == 3


def test_an_allowed_pair_is_reached_only_through_the_names_the_configuration_gives_it(monkeypatch):
    """DNS rebinding against an allow-listed loopback pair: a site's name that resolves to 127.0.0.1 is refused
    (its port could be any allowed one, 80 included); localhost and a static host name reach the pair's port only."""
    from types import SimpleNamespace

    from scrapy import Request
    from scrapy.resolver import CachingThreadedResolver
    from scrapy.settings import Settings

    from lookbench_crawlers.middlewares import AddressPolicyMiddleware, AddressRefused

    r = _resolver({"demo.test": "127.0.0.1"})
    r._parent_lookup = lambda n, t=(): defer.succeed("127.0.0.1")  # every other name rebinds to loopback
    monkeypatch.setattr(CachingThreadedResolver, "getHostByName", lambda self, n, t=(): self._parent_lookup(n, t))
    answers = {}
    for name in ("demo.test", "localhost", "shop.example"):
        d = r.getHostByName(name)
        d.addBoth(lambda v, n=name: answers.__setitem__(n, getattr(v.value, "reason", None)
                                                           if hasattr(v, "value") else v))
    assert answers == {"demo.test": "127.0.0.1", "localhost": "127.0.0.1", "shop.example": "address_not_global"}

    settings = Settings({"LOOKBENCH_EGRESS_ALLOW": ["127.0.0.1:8123"],
                         "LOOKBENCH_STATIC_HOSTS": json.dumps({"demo.test": "127.0.0.1"})})
    mw = AddressPolicyMiddleware(SimpleNamespace(settings=settings, spider=None))
    spider = SimpleNamespace(address_policy=(set(), None), image_hosts=set())
    for url, reason in (("http://demo.test:8123/p", None), ("http://localhost:8123/p", None),
                        ("http://demo.test/p", "address_not_global"), ("http://localhost:80/", "address_not_global")):
        if reason is None:
            assert mw.process_request(Request(url), spider) is None
        else:
            with pytest.raises(AddressRefused) as exc:
                mw.process_request(Request(url), spider)
            assert exc.value.reason == reason, url
