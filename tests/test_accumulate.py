"""A window's catalogue accumulated from its weekly crawls."""

from datetime import datetime, timedelta, timezone

from lookbench_pipeline import schemas
from lookbench_pipeline.accumulate import WeeklyCrawl, accumulate

T0 = datetime(2026, 7, 6, 10, tzinfo=timezone.utc)


def _crawl(site, week, products, downloads=(), pages=()):
    return WeeklyCrawl(
        site=site, week=week,
        products=schemas.from_rows([{"product_id": pid, "site": site, "title": title, "crawled_at": t,
                                     "first_seen_at": first, "last_seen_at": t, "image_urls": []}
                                    for pid, title, first, t in products], schemas.PRODUCTS),
        looks=schemas.empty(schemas.LOOKS),
        crawl_log=schemas.from_rows([{"site": site, "url": u, "status": 200, "outcome": "product",
                                      "crawled_at": T0} for u in pages], schemas.CRAWL_LOG),
        downloads=schemas.from_rows([{"site": site, "url": u, "stored_path": p, "reason": r}
                                     for u, p, r in downloads], schemas.IMAGE_DOWNLOADS))


def test_items_accumulate_over_the_weeks_of_a_window():
    w1, w2 = T0, T0 + timedelta(days=7)
    c1 = _crawl("shop", "2026-07-06", [("a", "Shirt", w1, w1), ("gone", "Hat", w1, w1)],
                downloads=[("u1", "/x/1", None), ("u2", None, "http_error")], pages=["p1", "p2"])
    c2 = _crawl("shop", "2026-07-13", [("a", "Shirt (new title)", w1, w2), ("b", "Dress", w2, w2)],
                downloads=[("u1", None, "fetch_error"), ("u2", "/y/2", None)], pages=["p1"])
    other = _crawl("another", "2026-07-13", [("z", "Coat", w2, w2)])
    cat = accumulate([c2, other, c1])  # any order: sorted by site, then week
    rows = {r["product_id"]: r for r in cat.products.to_pylist()}
    assert list(rows) == ["z", "a", "b", "gone"]  # by site, then id
    assert rows["a"]["title"] == "Shirt (new title)"  # the latest crawl's row
    assert rows["a"]["first_seen_at"] == w1 and rows["a"]["last_seen_at"] == w2
    assert rows["gone"]["last_seen_at"] == w1  # seen in week 1 only: still part of the window
    d = {r["url"]: r for r in cat.downloads.to_pylist()}
    assert d["u1"]["stored_path"] == "/x/1"  # a later failure does not lose an earlier download
    assert d["u2"]["stored_path"] == "/y/2"
    assert cat.crawl_log.num_rows == 3
    assert cat.counts["crawls"] == 3 and cat.counts["weeks_per_site"] == {"another": ["2026-07-13"],
                                                                         "shop": ["2026-07-06", "2026-07-13"]}
    assert cat.counts["product_rows_in"] == 5 and cat.counts["products"] == 4


def test_no_crawl_gives_empty_tables_of_the_right_schema():
    cat = accumulate([])
    assert cat.products.schema.equals(schemas.PRODUCTS) and cat.products.num_rows == 0
    assert cat.crawl_log.schema.equals(schemas.CRAWL_LOG)
