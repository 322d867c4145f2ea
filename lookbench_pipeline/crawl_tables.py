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

REJECTED = "rejected"  # a crawl-log row's outcome: the URL gave nothing, its reason says why
REDIRECTED = "redirected"
"""A crawl-log row's outcome: the URL answered a redirect (its 3xx ``status``) within the site that the crawl
followed, or did not need to (its target requested already). It is no page, neither kept nor rejected: its target
has its own row, and the feed's ``redirect_to`` names it. A redirect that is refused (``redirect:loop``,
``redirect:too_many``, ``redirect:host_not_allowed``…) is a rejection."""


def page_tally(counts: dict[str, Any]) -> dict[str, int]:
    """A crawl's crawl-log rows by kind, from its counts (``crawl.merge_catalog``: ``pages`` and ``pages.<outcome>``
    / ``pages.rejected.<reason>``): ``rows`` = ``kept`` + ``redirected`` + ``rejected``; ``pages`` = the rows less
    the redirects (``kept`` + ``rejected``), what a rejection rate is of. ``kept`` is every other outcome (product,
    look, listing, sitemap, subresource_refused)."""
    rows = int(counts.get("pages", 0) or 0)
    rejected = sum(v for k, v in counts.items() if k.startswith(f"pages.{REJECTED}."))
    redirected = int(counts.get(f"pages.{REDIRECTED}", 0) or 0)
    return {"rows": rows, "pages": rows - redirected, "kept": rows - redirected - rejected,
            "redirected": redirected, "rejected": rejected}


def page_rejection_rate(crawl_log: pa.Table) -> tuple[float, int, dict[str, int]]:
    """Rejected rows / page rows of a crawl log (``schemas.CRAWL_LOG``), the number of page rows and the rejected
    ones by reason. A ``redirected`` row is no page and counts in neither: a site whose alias URLs redirect to its
    pages is no worse for it."""
    from collections import Counter

    rows = [r for r in crawl_log.select(["outcome", "reason"]).to_pylist() if r["outcome"] != REDIRECTED]
    bad = [r for r in rows if r["outcome"] == REJECTED]
    rate = len(bad) / len(rows) if rows else 0.0
    return rate, len(rows), dict(sorted(Counter(r["reason"] or "" for r in bad).items()))


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
