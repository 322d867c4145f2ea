"""A crawl interrupted and resumed on another port (the demo and replay sites get a free 127.0.0.1 port each
attempt) logs and counts each page once, as a clean crawl does, fetches no finished page again, and its archive
replays to the same tables: every attempt's responses are found, whatever origin served them. On the shipped demo
shop and on the shipped site of the saved real pages (``make real``'s, where the defects were found).

The interruption is simulated without timing: the first attempt's spider stops after a few pages (Scrapy's
``CLOSESPIDER_PAGECOUNT``), the product item of one page it finished is dropped from the feed (its images were
still downloading at the kill), and the attempt then fails as a killed one does (no ``finished.json``)."""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from lookbench_pipeline import crawl as crawl_mod
from lookbench_pipeline.config import load_config
from lookbench_pipeline.crawl import CrawlError, read_feed
from lookbench_pipeline.crawl_tables import CrawlTables
from lookbench_pipeline.demo import serve
from lookbench_pipeline.demo import shop as demo_shop
from lookbench_pipeline.pipeline import stage_crawl
from lookbench_pipeline.store import configured_store

WEEK = "2026-06-29"


ROOT = Path(__file__).resolve().parents[1]
SITES = {"demo": None, "realdata-pages": ROOT / "configs/sites/realdata-pages.yaml"}


def _config(tmp_path: Path, name: str, site: str) -> Path:
    """A pipeline config crawling one site: the shipped demo shop (12 products, as the other crawl tests) or the
    shipped site of the saved real pages."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    site_file = SITES[site]
    if site_file is None:
        demo = yaml.safe_load((ROOT / "lookbench_pipeline/data/sites/demo.yaml").read_text())
        demo.update(demo_products=12, demo_looks=3)
        site_file = tmp_path / "demo.yaml"
        site_file.write_text(yaml.safe_dump(demo))
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump({"data_dir": str(tmp_path / f"{name}-data"), "store": {"url": str(tmp_path / "store")},
                                 "sites": [str(site_file)]}))
    return p


class _Shop:
    """The site served on a free port per attempt (the demo shop generated, or the saved pages replayed), as
    ``demo.serve.local_site`` does, remembering each attempt's origin and the paths it was asked for."""

    def __init__(self):
        self.attempts: list[tuple[str, list[str]]] = []

    @contextmanager
    def __call__(self, site, work_dir):
        if site.kind == "demo":
            root = work_dir / "site"
            demo_shop.generate(root, site.demo_products, site.demo_looks, site.demo_seed, site.demo_colour_models)
            resolver = serve.static_resolver(root)
        else:
            resolver = serve.replay_resolver(site.pages_dir)
        with serve.serving(resolver) as srv:
            try:
                yield srv.base_url
            finally:
                self.attempts.append((srv.base_url, list(srv.hits)))


def _killed_after(pages: int):
    """``run_spider`` whose first call stops after ``pages`` responses, loses the last product item of a finished
    page and fails like a killed crawl; later calls run as they are."""
    real = crawl_mod.run_spider
    calls = []

    def run(site_config_path, base_url, out_dir, *a, extra_settings=None, **k):
        calls.append(base_url)
        if len(calls) > 1:
            return real(site_config_path, base_url, out_dir, *a, extra_settings=extra_settings, **k)
        real(site_config_path, base_url, out_dir, *a,
             extra_settings={**(extra_settings or {}), "CLOSESPIDER_PAGECOUNT": str(pages)}, **k)
        feed = out_dir / "items.jsonl"
        lines = feed.read_bytes().splitlines(keepends=True)
        last = max(i for i, ln in enumerate(lines) if json.loads(ln)["kind"] == "product")
        feed.write_bytes(b"".join(lines[:last] + lines[last + 1:]))
        raise CrawlError("killed")
    return run


def _stage(cfg_path: Path, shop: _Shop, mp: pytest.MonkeyPatch, store=True, replay=None):
    cfg = load_config(cfg_path)
    mp.setattr("lookbench_pipeline.demo.serve.local_site", shop)
    run_dir = cfg.data_dir / "runs" / "r"
    return stage_crawl(cfg, run_dir, configured_store(cfg) if store else None, run_id="r",
                       archive_info={"week": WEEK}, replay=replay, week=None if replay else WEEK)


@dataclass
class Crawled:
    site: str
    clean: CrawlTables  # an uninterrupted crawl
    resumed: CrawlTables  # a crawl stopped after a few pages, then resumed on another port
    finished: set[str]  # the paths of the pages the first attempt finished
    shop: _Shop  # the resumed crawl's server: each attempt's origin and requests
    config: Path  # the resumed crawl's pipeline config (its store holds the archive)


@pytest.fixture(scope="module", params=sorted(SITES))
def crawled(request, tmp_path_factory) -> Crawled:
    from lookbench_crawlers.spiders.shop import finished_pages

    site = request.param
    if SITES[site] is not None and not (ROOT.parent / "shared/realdata/pages").is_dir():
        pytest.skip("the saved real pages (../shared/realdata/pages) are not here")
    tmp = tmp_path_factory.mktemp(site)
    with pytest.MonkeyPatch.context() as mp:
        clean = _stage(_config(tmp / "clean", "clean", site), _Shop(), mp)
        cfg, shop = _config(tmp, "killed", site), _Shop()
        mp.setattr(crawl_mod, "run_spider", _killed_after(8 if site == "demo" else 20))
        with pytest.raises(CrawlError, match="killed"):
            _stage(cfg, shop, mp)
        feed = next((tmp / "killed-data").glob(f"crawls/*/{site}/crawl/items.jsonl"))
        finished = {urlsplit(k).path for k in finished_pages(feed)}
        mp.undo()
        resumed = _stage(cfg, shop, mp)
    assert len(shop.attempts) == 2 and shop.attempts[0][0] != shop.attempts[1][0], "each attempt its own port"
    return Crawled(site, clean, resumed, finished, shop, cfg)


COUNTED = ("pages", "product_items", "products", "looks", "looks_unresolved_products", "image_urls",
           "image_urls_downloaded")


def test_a_resumed_crawl_logs_and_counts_each_page_once(crawled):
    c, r = crawled.clean.counts[crawled.site], crawled.resumed.counts[crawled.site]
    assert {k: r.get(k) for k in COUNTED} == {k: c.get(k) for k in COUNTED}
    assert {k: v for k, v in r.items() if k.startswith(("pages.", "look_links."))} == \
        {k: v for k, v in c.items() if k.startswith(("pages.", "look_links."))}
    urls = crawled.resumed.crawl_log["url"].to_pylist()
    assert len(urls) == len(set(urls)) and sorted(urls) == sorted(crawled.clean.crawl_log["url"].to_pylist())
    assert crawled.resumed.products["product_id"].to_pylist() == crawled.clean.products["product_id"].to_pylist()


def test_a_resumed_crawl_fetches_no_finished_page_again(crawled):
    again = set(crawled.shop.attempts[1][1]) & crawled.finished
    assert len(crawled.finished) >= 3 and not again, f"finished before the kill and fetched again: {sorted(again)}"


def test_the_archive_of_a_resumed_crawl_replays_to_the_same_tables(crawled, tmp_path):
    from lookbench_pipeline.backfill import archived_crawls, fetch

    store = configured_store(load_config(crawled.config))
    [archived] = archived_crawls(store, crawled.site)
    warc = fetch(store, archived, tmp_path / "fetched")
    with pytest.MonkeyPatch.context() as mp:
        rebuilt = _stage(_config(tmp_path / "rebuild", "rebuild", crawled.site), _Shop(), mp, store=False,
                         replay={crawled.site: [warc]})
    resumed = crawled.resumed
    assert rebuilt.counts[crawled.site]["product_items"] == resumed.counts[crawled.site]["product_items"]
    for name in ("products", "looks"):
        assert getattr(rebuilt, name).equals(getattr(resumed, name)), name
    # a page refused before any response (robots.txt) is stamped when it was refused, in a replay as in any crawl
    fetched = lambda t: [r if r["status"] else {**r, "crawled_at": None} for r in t.to_pylist()]  # noqa: E731
    assert fetched(rebuilt.crawl_log) == fetched(resumed.crawl_log)
    assert rebuilt.downloads.drop_columns(["stored_path"]).equals(resumed.downloads.drop_columns(["stored_path"]))
    assert rebuilt.counts[crawled.site]["scrapy"].get("lookbench/replay/not_archived", 0) == 0
    info = json.loads(store.get_bytes(archived.key.removesuffix(".warc.gz") + ".json"))
    assert info["base-urls"].split() == [origin for origin, _ in crawled.shop.attempts]


def test_an_archive_described_with_one_origin_still_replays_every_attempt(crawled, tmp_path):
    """Archives written before descriptions named every origin: the earlier ports are read from the WARC."""
    from lookbench_pipeline.backfill import archived_crawls, fetch
    from lookbench_pipeline.warc import serving_origins

    store = configured_store(load_config(crawled.config))
    [archived] = archived_crawls(store, crawled.site)
    warc = fetch(store, archived, tmp_path / "fetched")
    assert serving_origins([warc], archived.base_url) == [origin for origin, _ in crawled.shop.attempts]


def test_prune_unfinished_keeps_whole_pages_only(tmp_path):
    from lookbench_pipeline.crawl import prune_unfinished

    feed = tmp_path / "items.jsonl"
    rows = [{"kind": "product", "url": "http://a/1"},
            {"kind": "page", "url": "http://a/1", "status": 200, "n_items": 1},
            {"kind": "product", "url": "http://a/2"},
            {"kind": "page", "url": "http://a/2", "status": 200, "n_items": 2},
            {"kind": "page", "url": "http://a/sitemap.xml", "status": 200, "n_items": 0},
            # no response: the kill may be why (the server died with the build): fetched again, logged once
            {"kind": "page", "url": "http://a/4", "status": 0, "outcome": "rejected",
             "reason": "fetch_error:connection_refused", "n_items": 0},
            {"kind": "page", "url": "http://a/x.js", "outcome": "subresource_refused"},  # written before from_page
            {"kind": "page", "url": "http://t/1.js", "outcome": "subresource_refused", "from_page": "http://a/1"},
            {"kind": "page", "url": "http://t/2.js", "outcome": "subresource_refused", "from_page": "http://a/2"},
            {"kind": "look", "url": "http://a/3"}]
    feed.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert prune_unfinished(feed) == 5  # page 2 (unfinished) goes with its refused script: fetched again, logged once
    assert [(r["kind"], r["url"]) for r in read_feed(feed)] == [
        ("product", "http://a/1"), ("page", "http://a/1"), ("page", "http://a/sitemap.xml"),
        ("page", "http://a/x.js"), ("page", "http://t/1.js")]
    assert prune_unfinished(feed) == 0


def test_a_shopify_json_page_is_finished_by_the_products_it_listed(tmp_path):
    """Shopify's products.json lists products under their own urls: its page item counts them by ``from_page``, so
    a resumed crawl knows it finished (no second fetch, no duplicate items) or prunes its half of the products."""
    from lookbench_pipeline.crawl import finished_urls, prune_unfinished

    js = "http://a/products.json?limit=250&page=1"
    whole = [{"kind": "product", "url": "http://a/products/x", "from_page": js},
             {"kind": "product", "url": "http://a/products/y", "from_page": js},
             {"kind": "page", "url": js, "status": 200, "n_items": 2}]
    assert js in finished_urls(whole)
    half = [whole[0], whole[2], {"kind": "page", "url": "http://a/products/y", "status": 200, "n_items": 1},
            {"kind": "product", "url": "http://a/products/y"}]  # the HTML page of y finished on its own
    assert finished_urls(half) == {"http://a/products/y"}
    feed = tmp_path / "items.jsonl"
    feed.write_text("".join(json.dumps(r) + "\n" for r in half))
    assert prune_unfinished(feed) == 2  # the JSON page and the one product it got out before the kill
    assert [(r["kind"], r["url"]) for r in read_feed(feed)] == [("page", "http://a/products/y"),
                                                                ("product", "http://a/products/y")]


def test_rebase_replaces_an_origin_only_at_a_path_boundary():
    from lookbench_pipeline.crawl import _rebase

    item = {"url": "http://127.0.0.1:4000/p/1", "images": ["http://127.0.0.1:40001/x.jpg"],
            "home": "http://127.0.0.1:4000", "path": "http://127.0.0.1:4000/kept"}
    assert _rebase(item, "http://127.0.0.1:4000", "https://shop.example") == {
        "url": "https://shop.example/p/1", "images": ["http://127.0.0.1:40001/x.jpg"], "home": "https://shop.example",
        "path": "http://127.0.0.1:4000/kept"}
