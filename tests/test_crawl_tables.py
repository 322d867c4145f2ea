"""CrawlTables: the one owner of the four crawl tables."""

from datetime import datetime, timezone

from lookbench_pipeline import schemas
from lookbench_pipeline.crawl_tables import TABLE_SCHEMAS, CrawlTables, WeeklyCrawl


def _tables(n: int) -> dict:
    t = datetime(2026, 7, 6, tzinfo=timezone.utc)
    products = [{"product_id": f"p{i}", "site": "s", "url": f"https://s/p{i}", "first_seen_at": t,
                 "last_seen_at": t, "crawled_at": t} for i in range(n)]
    return {"products": schemas.from_rows(products, schemas.PRODUCTS), "looks": schemas.empty(schemas.LOOKS),
            "crawl_log": schemas.empty(schemas.CRAWL_LOG), "downloads": schemas.empty(schemas.IMAGE_DOWNLOADS)}


def test_concat_keeps_the_order_and_the_schemas_and_an_empty_list_gives_empty_tables():
    a, b = CrawlTables(**_tables(2)), CrawlTables(**_tables(3))
    both = CrawlTables.concat([a, b], {"s": {"pages": 5}})
    assert both.products.num_rows == 5 and both.counts == {"s": {"pages": 5}}
    assert both.products["product_id"].to_pylist() == ["p0", "p1", "p0", "p1", "p2"]
    none = CrawlTables.concat([], {})
    for name, schema in TABLE_SCHEMAS.items():
        assert getattr(none, name).num_rows == 0 and getattr(none, name).schema == schema


def test_a_weekly_crawl_is_crawl_tables_with_its_partition():
    w = WeeklyCrawl(site="demo", week="2026-07-06", **_tables(1))
    assert isinstance(w, CrawlTables) and (w.site, w.week, w.counts) == ("demo", "2026-07-06", {})
