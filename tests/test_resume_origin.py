"""A crawl interrupted and resumed on another port (the demo and replay sites get a free 127.0.0.1 port each
attempt) logs and counts each page once, as a clean crawl does, fetches no finished page again, and its archive
replays to the same tables: every attempt's responses are found, whatever origin served them.

The interruption is simulated without timing: the first attempt's spider stops after a few pages (Scrapy's
``CLOSESPIDER_PAGECOUNT``), the product item of one page it finished is dropped from the feed (its images were
still downloading at the kill), and the attempt then fails as a killed one does (no ``finished.json``)."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from lookbench_pipeline import crawl as crawl_mod
from lookbench_pipeline.config import load_config
from lookbench_pipeline.crawl import CrawlError, read_feed
from lookbench_pipeline.demo import serve
from lookbench_pipeline.demo import shop as demo_shop
from lookbench_pipeline.pipeline import stage_crawl
from lookbench_pipeline.store import configured_store

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "crawlers"))
WEEK = "2026-06-29"


def _config(tmp_path: Path, name: str) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    site = yaml.safe_load(Path("lookbench_pipeline/data/sites/demo.yaml").read_text())
    site.update(demo_products=12, demo_looks=3)
    (tmp_path / "demo.yaml").write_text(yaml.safe_dump(site))
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump({"data_dir": str(tmp_path / f"{name}-data"), "store": {"url": str(tmp_path / "store")},
                                 "sites": [str(tmp_path / "demo.yaml")]}))
    return p


class _Shop:
    """The demo shop served on a free port per attempt, remembering each attempt's origin and requested paths."""

    def __init__(self):
        self.attempts: list[tuple[str, list[str]]] = []

    @contextmanager
    def __call__(self, site, work_dir):
        root = work_dir / "site"
        demo_shop.generate(root, site.demo_products, site.demo_looks, site.demo_seed, site.demo_colour_models)
        with serve.serving(serve.static_resolver(root)) as srv:
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


def _stage(cfg_path: Path, shop: _Shop, monkeypatch, store=True, replay=None):
    cfg = load_config(cfg_path)
    monkeypatch.setattr("lookbench_pipeline.demo.serve.local_site", shop)
    run_dir = cfg.data_dir / "runs" / "r"
    return stage_crawl(cfg, run_dir, configured_store(cfg) if store else None, run_id="r",
                       archive_info={"week": WEEK}, replay=replay, week=None if replay else WEEK)


@pytest.fixture
def crawled(tmp_path, monkeypatch):
    """(clean crawl's tables, interrupted + resumed crawl's tables, the resumed crawl's shop, config path)."""
    clean = _stage(_config(tmp_path / "clean", "clean"), _Shop(), monkeypatch)
    cfg = _config(tmp_path, "killed")
    shop = _Shop()
    monkeypatch.setattr(crawl_mod, "run_spider", _killed_after(8))
    with pytest.raises(CrawlError, match="killed"):
        _stage(cfg, shop, monkeypatch)
    resumed = _stage(cfg, shop, monkeypatch)
    monkeypatch.undo()
    assert len(shop.attempts) == 2 and shop.attempts[0][0] != shop.attempts[1][0], "each attempt its own port"
    return clean, resumed, shop, cfg


COUNTED = ("pages", "product_items", "products", "looks", "looks_unresolved_products", "image_urls",
           "image_urls_downloaded")


def test_a_resumed_crawl_logs_and_counts_each_page_once(crawled):
    clean, resumed, shop, _ = crawled
    c, r = clean.counts["demo"], resumed.counts["demo"]
    assert {k: r.get(k) for k in COUNTED} == {k: c.get(k) for k in COUNTED}
    assert {k: v for k, v in r.items() if k.startswith(("pages.", "look_links."))} == \
        {k: v for k, v in c.items() if k.startswith(("pages.", "look_links."))}
    urls = resumed.crawl_log["url"].to_pylist()
    assert len(urls) == len(set(urls)) and sorted(urls) == sorted(clean.crawl_log["url"].to_pylist())
    assert resumed.products["product_id"].to_pylist() == clean.products["product_id"].to_pylist()


def test_a_resumed_crawl_fetches_no_finished_page_again(tmp_path, monkeypatch):
    cfg = _config(tmp_path, "killed")
    shop = _Shop()
    monkeypatch.setattr(crawl_mod, "run_spider", _killed_after(8))
    with pytest.raises(CrawlError):
        _stage(cfg, shop, monkeypatch)
    from lookbench_crawlers.spiders.shop import finished_pages

    feed = next((tmp_path / "killed-data").glob("crawls/*/demo/crawl/items.jsonl"))
    done = {k.split("?")[0].lstrip("/") for k in finished_pages(feed)}
    monkeypatch.undo()
    _stage(cfg, shop, monkeypatch)
    again = {h.lstrip("/") for h in shop.attempts[1][1]} & done
    assert len(done) >= 3 and not again, f"finished before the kill and fetched again: {sorted(again)}"


def test_the_archive_of_a_resumed_crawl_replays_to_the_same_tables(crawled, tmp_path, monkeypatch):
    _, resumed, shop, cfg = crawled
    from lookbench_pipeline.backfill import archived_crawls, fetch

    store = configured_store(load_config(cfg))
    [archived] = archived_crawls(store, "demo")
    warc = fetch(store, archived, tmp_path / "fetched")
    rebuilt = _stage(_config(tmp_path / "rebuild", "rebuild"), _Shop(), monkeypatch, store=False,
                     replay={"demo": [warc]})
    for name in ("products", "looks"):
        assert getattr(rebuilt, name).equals(getattr(resumed, name)), name
    # a page refused before any response (robots.txt) is stamped when it was refused, in a replay as in any crawl
    fetched = lambda t: [r if r["status"] else {**r, "crawled_at": None} for r in t.to_pylist()]  # noqa: E731
    assert fetched(rebuilt.crawl_log) == fetched(resumed.crawl_log)
    assert rebuilt.downloads.drop_columns(["stored_path"]).equals(resumed.downloads.drop_columns(["stored_path"]))
    assert rebuilt.counts["demo"]["scrapy"].get("lookbench/replay/not_archived", 0) == 0
    info = json.loads(store.get_bytes(archived.key.removesuffix(".warc.gz") + ".json"))
    assert info["base-urls"].split() == [origin for origin, _ in shop.attempts]


def test_an_archive_described_with_one_origin_still_replays_every_attempt(crawled, tmp_path):
    """Archives written before descriptions named every origin: the earlier ports are read from the WARC."""
    _, _, shop, cfg = crawled
    from lookbench_pipeline.backfill import archived_crawls, fetch
    from lookbench_pipeline.warc import serving_origins

    store = configured_store(load_config(cfg))
    [archived] = archived_crawls(store, "demo")
    warc = fetch(store, archived, tmp_path / "fetched")
    assert serving_origins([warc], archived.base_url) == [origin for origin, _ in shop.attempts]


def test_prune_unfinished_keeps_whole_pages_only(tmp_path):
    from lookbench_pipeline.crawl import prune_unfinished

    feed = tmp_path / "items.jsonl"
    rows = [{"kind": "product", "url": "http://a/1"}, {"kind": "page", "url": "http://a/1", "n_items": 1},
            {"kind": "product", "url": "http://a/2"}, {"kind": "page", "url": "http://a/2", "n_items": 2},
            {"kind": "page", "url": "http://a/sitemap.xml", "n_items": 0},
            {"kind": "page", "url": "http://a/x.js", "outcome": "subresource_refused"},
            {"kind": "look", "url": "http://a/3"}]
    feed.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert prune_unfinished(feed) == 3
    assert [(r["kind"], r["url"]) for r in read_feed(feed)] == [
        ("product", "http://a/1"), ("page", "http://a/1"), ("page", "http://a/sitemap.xml"),
        ("page", "http://a/x.js")]
    assert prune_unfinished(feed) == 0
