"""The schema of every table asset, by asset name: the one owner of that binding.

The IO manager upgrades a stored value written before columns were added to its schema (``assets/io.py``), and
the blocking ``schema`` asset checks compare each materialised table with it (``assets/checks.py``). Window assets
are named after their table in ``schemas.TABLES``; a weekly crawl's four tables are ``weekly_<table>`` with the
window table's schema; the evaluation and the AI-generated subsets' tables have their own names."""

import pyarrow as pa

from lookbench_pipeline import crawl_tables, schemas

WEEKLY: dict[str, str] = {"products": "weekly_products", "looks": "weekly_looks", "crawl_log": "weekly_crawl_log",
                          "downloads": "weekly_image_downloads"}
"""A weekly crawl's tables (``CrawlTables`` attribute name, ``crawl_tables.TABLE_SCHEMAS``) -> their asset names."""

CRAWL_ASSETS: dict[str, pa.Schema] = {WEEKLY[t]: s for t, s in crawl_tables.TABLE_SCHEMAS.items()}
"""The weekly crawl's table assets (partitioned by site × week) -> schema."""

WINDOW_ASSETS: dict[str, pa.Schema] = {
    # every window asset named after its table in schemas.TABLES, except the tables that are files of a release
    # rather than asset values (the `release` asset's value is its manifest)
    **{name: schema for name, schema in schemas.TABLES.items() if name not in ("release", "release_changes", "scores")},
    "evaluation": schemas.SCORES,
    # the AI-generated subsets' tables under their own asset names
    "aigen_image_refs": schemas.IMAGE_REFS,
    "aigen_images": schemas.IMAGES,
    "aigen_detections": schemas.DETECTIONS,
}
"""The table assets partitioned by release window -> schema."""

ASSET_SCHEMAS: dict[str, pa.Schema] = {**CRAWL_ASSETS, **WINDOW_ASSETS}
"""Every table asset -> the schema its stored value is upgraded to and checked against."""
