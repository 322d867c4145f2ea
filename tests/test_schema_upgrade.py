"""Partitions stored by an earlier version stay readable after columns are added to a table's schema: weekly crawl
partitions written before ``products.variant_id``, ``images.fg_signature`` or ``crawl_log.redirect_to`` existed are
read with those columns as nulls, in the schema's order, and concatenate with partitions of the new shape (a
window's catalogue over weeks stored before and after the change)."""

import pyarrow as pa
import pyarrow.parquet as pq

from assets.io import read_stored_table, stored_path
from lookbench_pipeline import schemas


def test_an_old_partition_gets_the_new_columns_as_nulls(tmp_path):
    for asset, schema, added in [("products", schemas.PRODUCTS, ["variant_id"]),
                                 ("weekly_products", schemas.PRODUCTS, ["variant_id"]),
                                 ("images", schemas.IMAGES, ["fg_signature", "block_codes"]),
                                 ("image_refs", schemas.IMAGE_REFS, ["detail"]),
                                 ("weekly_crawl_log", schemas.CRAWL_LOG, ["redirect_to"]),
                                 # tables under their own asset names (assets/tables.py)
                                 ("evaluation", schemas.SCORES, ["ci_high"]),
                                 ("aigen_images", schemas.IMAGES, ["fg_signature"]),
                                 ("aigen_image_refs", schemas.IMAGE_REFS, ["detail"]),
                                 ("aigen_detections", schemas.DETECTIONS, ["score"])]:
        rows = schemas.from_rows([{}], schema).drop_columns(added)  # one row of an earlier version
        p = stored_path(tmp_path, asset, "demo|2026-W27").with_suffix(".parquet")
        p.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(rows, p)
        t = read_stored_table(tmp_path, asset, "demo|2026-W27")
        assert t.column_names == schema.names, asset
        assert all(t[c].null_count == 1 for c in added)
        new = schemas.from_rows([{}], schema)
        both = pa.concat_tables([t, new])
        assert both.num_rows == 2 and schemas.conform(both, schema).schema == schema


def test_every_table_asset_has_one_schema_and_every_named_asset_exists():
    """assets/tables.py names each table asset once; the IO manager and the schema checks read it, and every name in
    it is an asset of the code location (a renamed asset would otherwise silently lose its upgrade and its check)."""
    from dagster import AssetsDefinition

    from assets.checks import TABLE_SCHEMAS
    from assets.definitions import ALL_ASSETS
    from assets.tables import ASSET_SCHEMAS, WEEKLY
    from lookbench_pipeline import crawl_tables

    keys = {k.path[-1] for a in ALL_ASSETS if isinstance(a, AssetsDefinition) for k in a.keys}
    assert set(ASSET_SCHEMAS) <= keys, set(ASSET_SCHEMAS) - keys
    # and every other asset's value is a dict stored as JSON: a new table asset must be named in assets/tables.py
    assert keys - set(ASSET_SCHEMAS) == {"release", "release_candidate", "detector"}
    assert {n: s for n, (s, _) in TABLE_SCHEMAS.items()} == ASSET_SCHEMAS
    assert set(WEEKLY) == set(crawl_tables.TABLE_SCHEMAS)


def test_a_current_table_is_unchanged():
    t = schemas.from_rows([{}], schemas.IMAGES)
    assert schemas.upgrade(t, schemas.IMAGES) is t


def test_a_window_over_weeks_stored_before_and_after_a_new_crawl_log_column(tmp_path):
    """``crawl_catalog``'s read of the stored weekly partitions, then the window's catalogue: a week stored before
    ``crawl_log.redirect_to`` existed and one stored after give one crawl log, the old week's rows null there."""
    from datetime import datetime, timezone

    from lookbench_pipeline.accumulate import window_catalog
    from lookbench_pipeline.crawl_tables import CrawlTables

    weekly = {"products": "weekly_products", "looks": "weekly_looks", "crawl_log": "weekly_crawl_log",
              "downloads": "weekly_image_downloads"}
    empty = {"weekly_products": schemas.PRODUCTS, "weekly_looks": schemas.LOOKS,
             "weekly_image_downloads": schemas.IMAGE_DOWNLOADS}
    at = datetime(2026, 7, 1, tzinfo=timezone.utc)
    for week, to in (("2026-W27", None), ("2026-W28", "https://d.example/new")):
        log = schemas.from_rows([{"site": "demo", "url": f"https://d.example/{week}", "status": 301,
                                  "outcome": "redirected", "redirect_to": to, "crawled_at": at}], schemas.CRAWL_LOG)
        tables = {**{n: schemas.empty(s) for n, s in empty.items()},
                  "weekly_crawl_log": log.drop_columns(["redirect_to"]) if to is None else log}
        for name, table in tables.items():
            p = stored_path(tmp_path, name, f"demo|{week}").with_suffix(".parquet")
            p.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, p)

    def read(site, week):
        return CrawlTables(**{k: read_stored_table(tmp_path, n, f"{site}|{week}") for k, n in weekly.items()})

    cat, _ = window_catalog(["demo"], ["2026-W27", "2026-W28"], read)
    assert cat.crawl_log.schema == schemas.CRAWL_LOG
    assert cat.crawl_log.column("redirect_to").to_pylist() == [None, "https://d.example/new"]
    # a table of the old shape handed over in memory (not read through the IO manager) is upgraded too
    old = read("demo", "2026-W27")
    old.crawl_log = old.crawl_log.drop_columns(["redirect_to"])
    cat, _ = window_catalog(["demo"], ["2026-W27", "2026-W28"],
                            lambda s, w: old if w == "2026-W27" else read(s, w))
    assert cat.crawl_log.column("redirect_to").to_pylist() == [None, "https://d.example/new"]
