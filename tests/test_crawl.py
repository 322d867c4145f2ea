"""The Scrapy spider on the demo shop: discovery, robots.txt, first_seen_at across runs."""

import json
from pathlib import Path

import pyarrow.compute as pc
import yaml

from lookbench_pipeline import demo_shop, serve
from lookbench_pipeline.crawl import crawl_site, merge_catalog, run_spider


def _site(tmp_path: Path) -> Path:
    site = yaml.safe_load(Path("lookbench_pipeline/data/sites/demo.yaml").read_text())
    site.update(demo_products=12, demo_looks=3)
    p = tmp_path / "demo.yaml"
    p.write_text(yaml.safe_dump(site))
    return p


def test_demo_crawl_finds_everything_and_obeys_robots(tmp_path):
    site = _site(tmp_path)
    root = tmp_path / "shop"
    truth = demo_shop.generate(root, 12, 3, 7)
    with serve.serving(serve.static_resolver(root)) as srv:
        feed, _ = run_spider(site, srv.base_url, tmp_path / "crawl", "test-bot (+https://example.invalid)")
        hits = list(srv.hits)
    items = [json.loads(line) for line in feed.read_text().splitlines()]
    skus = {i["sku"] for i in items if i["kind"] == "product"}
    assert skus == set(truth["products"])
    looks = [i for i in items if i["kind"] == "look"]
    assert len(looks) == 3 and all(len(lk["product_urls"]) >= 2 for lk in looks)
    assert "/robots.txt" in hits
    assert not any(h.startswith("/private/") for h in hits), "a disallowed URL was fetched"
    pages = {i["url"].split("/", 3)[-1]: i for i in items if i["kind"] == "page"}
    assert pages["private/staff-sale.html"]["reason"] == "robots_disallowed"
    assert pages["about.html"]["reason"] == "no_structured_data"
    products = [i for i in items if i["kind"] == "product"]
    assert all(len(p["images"]) == 2 and all(d["path"] for d in p["images"]) for p in products)


def test_first_seen_kept_across_runs(tmp_path):
    site = _site(tmp_path)
    out1 = crawl_site(site, tmp_path / "run1", "test-bot")
    cat1 = merge_catalog(out1, tmp_path / "state")
    out2 = crawl_site(site, tmp_path / "run2", "test-bot")
    cat2 = merge_catalog(out2, tmp_path / "state")
    f1 = dict(zip(cat1.products["product_id"].to_pylist(), cat1.products["first_seen_at"].to_pylist()))
    f2 = dict(zip(cat2.products["product_id"].to_pylist(), cat2.products["first_seen_at"].to_pylist()))
    assert f1 == f2 and len(f1) == 12
    assert pc.all(pc.greater(cat2.products["last_seen_at"], cat1.products["last_seen_at"])).as_py()
    assert cat2.products["crawled_at"].to_pylist() == cat1.products["crawled_at"].to_pylist(), \
        "unchanged content keeps the crawl that fetched it"
    assert all(u.startswith("https://demo.demo.lookbench.invalid/") for u in cat2.products["url"].to_pylist())
    assert cat1.counts["products"] == 12 and cat1.counts["looks"] == 3
