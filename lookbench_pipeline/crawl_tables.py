"""The four tables a crawl yields, one owner for the contract: ``CrawlTables``.

A crawl of one site (:func:`lookbench_pipeline.crawl.merge_catalog`), a stage's crawl of every site
(:func:`lookbench_pipeline.pipeline.stage_crawl`), one weekly crawl partition (:class:`WeeklyCrawl`) and a release
window's accumulated catalogue (:func:`lookbench_pipeline.accumulate.accumulate`) all carry these four tables,
each conformed to its schema in :mod:`lookbench_pipeline.schemas`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from . import schemas

TABLE_SCHEMAS = {"products": schemas.PRODUCTS, "looks": schemas.LOOKS, "crawl_log": schemas.CRAWL_LOG,
                 "downloads": schemas.IMAGE_DOWNLOADS}
"""The four tables (attribute name -> schema). The Dagster assets call ``downloads`` ``image_downloads``."""


@dataclass(kw_only=True)
class CrawlTables:
    """``products`` (``schemas.PRODUCTS``), ``looks`` (``LOOKS``), ``crawl_log`` (``CRAWL_LOG``: every page and its
    outcome), ``downloads`` (``IMAGE_DOWNLOADS``: every image URL tried); ``counts``: what produced them (per
    site for a stage's crawl, per window for a catalogue; each producer documents its keys)."""

    products: pa.Table
    looks: pa.Table
    crawl_log: pa.Table
    downloads: pa.Table
    counts: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def concat(cls, parts: list[CrawlTables], counts: dict[str, Any]) -> CrawlTables:
        """The four tables of ``parts`` concatenated in order (empty tables of the right schema when there are
        none)."""
        tables = {k: pa.concat_tables([getattr(p, k) for p in parts]) if parts else schemas.empty(s)
                  for k, s in TABLE_SCHEMAS.items()}
        return cls(**tables, counts=counts)


@dataclass(kw_only=True)
class WeeklyCrawl(CrawlTables):
    """One weekly crawl partition's tables (``site``, ``week`` = the partition key, a Monday ``YYYY-MM-DD``)."""

    site: str
    week: str
