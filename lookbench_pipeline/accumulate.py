"""A release window's catalogue, accumulated from the weekly crawls that overlap it.

Crawls run more often than releases (weekly); each crawl's tables hold what that crawl saw. The window's
catalogue is their union, so an item seen in week 3 and gone by week 20 still belongs to the window:

* ``products`` / ``looks``: one row per id, from the latest crawl that saw it (latest by crawl order, which is
  the week order of the inputs); ``first_seen_at`` is the earliest and ``last_seen_at`` the latest over the
  crawls (the crawl state already carries both forward, the union keeps them for items that disappeared);
* ``crawl_log``: every page of every crawl, in crawl order;
* ``image_downloads``: one row per image URL: the latest successful download, else the latest failure.

The release then keeps what was first seen inside its window (``releases.build.build`` rejects the rest as
``outside_window``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from . import schemas
from .crawl_tables import CrawlTables, WeeklyCrawl

__all__ = ["CrawlTables", "WeeklyCrawl", "WindowCatalog", "accumulate", "window_catalog"]


WindowCatalog = CrawlTables  # the name this module used before CrawlTables had one owner


def _latest_by(rows_per_crawl: list[list[dict]], key: str) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for rows in rows_per_crawl:
        for r in rows:
            prev = out.get(r[key])
            if prev is not None:
                firsts = [t for t in (prev["first_seen_at"], r["first_seen_at"]) if t is not None]
                lasts = [t for t in (prev["last_seen_at"], r["last_seen_at"]) if t is not None]
                r = {**r, "first_seen_at": min(firsts) if firsts else None,
                     "last_seen_at": max(lasts) if lasts else None}
            out[r[key]] = r
    return out


def accumulate(crawls: list[WeeklyCrawl]) -> CrawlTables:
    """The window catalogue of ``crawls`` (any order: they are sorted by site, then week).

    Counts: ``crawls`` (number of weekly partitions read), ``weeks_per_site``, ``products``, ``looks``, ``pages``,
    ``image_urls``, ``product_rows_in`` (rows over all crawls; ``product_rows_in - products`` were seen again).
    """
    crawls = sorted(crawls, key=lambda c: (c.site, c.week))
    sites = sorted({c.site for c in crawls})
    products: list[dict] = []
    looks: list[dict] = []
    downloads: list[dict] = []
    for site in sites:
        mine = [c for c in crawls if c.site == site]
        p = _latest_by([c.products.to_pylist() for c in mine], "product_id")
        lk = _latest_by([c.looks.to_pylist() for c in mine], "look_id")
        products += [p[k] for k in sorted(p)]
        looks += [lk[k] for k in sorted(lk)]
        best: dict[str, dict] = {}
        for c in mine:
            for d in c.downloads.to_pylist():
                prev = best.get(d["url"])
                if prev is None or d["stored_path"] or not prev["stored_path"]:
                    best[d["url"]] = d
        downloads += [best[u] for u in sorted(best)]
    # each week's log in the current shape (a partition stored before a column was added lacks it), so their
    # concatenation is the window's log as it is
    log = (pa.concat_tables([schemas.conform(schemas.upgrade(c.crawl_log, schemas.CRAWL_LOG), schemas.CRAWL_LOG)
                             for c in crawls]) if crawls else schemas.empty(schemas.CRAWL_LOG))
    counts: dict[str, Any] = {
        "crawls": len(crawls),
        "weeks_per_site": {s: [c.week for c in crawls if c.site == s] for s in sites},
        "product_rows_in": sum(c.products.num_rows for c in crawls),
        "products": len(products), "looks": len(looks), "pages": log.num_rows, "image_urls": len(downloads),
        "image_urls_downloaded": sum(1 for d in downloads if d["stored_path"]),
    }
    return CrawlTables(products=schemas.from_rows(products, schemas.PRODUCTS),
                         looks=schemas.from_rows(looks, schemas.LOOKS),
                         crawl_log=log,
                         downloads=schemas.from_rows(downloads, schemas.IMAGE_DOWNLOADS), counts=counts)


def window_catalog(sites: list[str], weeks: list[str],
                   read: Callable[[str, str], CrawlTables | None]) -> tuple[CrawlTables, dict[str, list[str]]]:
    """The catalogue of a window from its weekly crawl partitions: ``read(site, week)`` gives one partition's
    tables, or None when that week was not crawled (skipped). Returns the catalogue (:func:`accumulate`'s counts
    plus ``sites_without_crawl``) and the weeks without a crawl per site.

    Raises:
        LookupError: no site has any crawl in ``weeks``.
    """
    crawls, missing = [], {}
    for site in sites:
        for week in weeks:
            tables = read(site, week)
            if tables is None:
                missing.setdefault(site, []).append(week)
                continue
            crawls.append(WeeklyCrawl(site=site, week=week, products=tables.products, looks=tables.looks,
                                      crawl_log=tables.crawl_log, downloads=tables.downloads))
    if not crawls:
        raise LookupError(f"no weekly crawl for sites {sites} in weeks {weeks[:1]}..{weeks[-1:]}")
    cat = accumulate(crawls)
    cat.counts["sites_without_crawl"] = [s for s in sites if s not in cat.counts["weeks_per_site"]]
    return cat, missing
