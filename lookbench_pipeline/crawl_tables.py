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
has its own row, and the row's ``redirect_to`` names it. A redirect that is refused (``redirect:loop``,
``redirect:too_many``, ``redirect:host_not_allowed``…) is a rejection, its ``redirect_to`` where it led."""


MAX_PAGES_REACHED = "max_pages_reached"  # a page URL the site's max_pages cut: a rejected row, never fetched
NOT_FETCHED = (MAX_PAGES_REACHED,)
"""The reasons of ``rejected`` crawl-log rows that are no failure of the site: URLs our own limits kept from being
fetched. Only the site's configured page cap (``max_pages``) is one. A URL whose download budget ran out
(``download_timeout``) was fetched, and the site was too slow: a failure; so is a refusal of the egress policy or
of the site's robots.txt (the site's links or rules, not our cap). Such rows stay ``rejected`` in the log and on the
crawl's line (with their reason); the page rejection rate leaves them out of both its terms (:func:`page_tally`)."""


def page_tally(counts: dict[str, Any]) -> dict[str, int]:
    """A crawl's crawl-log rows by kind, from its counts (``crawl.merge_catalog``: ``pages`` and ``pages.<outcome>``
    / ``pages.rejected.<reason>``), named as the crawl's line names them: ``rows`` = ``kept`` + ``redirected`` +
    ``rejected`` (the line's ``pages N``); ``pages`` = the rows less the redirects (``kept`` + ``rejected``).
    ``kept`` is every other outcome (product, look, listing, sitemap, subresource_refused).

    The page rejection rate is ``failed`` / ``fetched``: ``not_fetched`` (the rejected rows of a reason in
    :data:`NOT_FETCHED`, URLs the site's ``max_pages`` cut) counts in neither, ``failed`` = ``rejected`` -
    ``not_fetched`` and ``fetched`` = ``kept`` + ``failed``."""
    rows = int(counts.get("pages", 0) or 0)
    rejected = sum(v for k, v in counts.items() if k.startswith(f"pages.{REJECTED}."))
    redirected = int(counts.get(f"pages.{REDIRECTED}", 0) or 0)
    not_fetched = sum(int(counts.get(f"pages.{REJECTED}.{r}", 0) or 0) for r in NOT_FETCHED)
    kept = rows - redirected - rejected
    return {"rows": rows, "pages": rows - redirected, "kept": kept, "redirected": redirected, "rejected": rejected,
            "not_fetched": not_fetched, "failed": rejected - not_fetched, "fetched": kept + rejected - not_fetched}


def log_counts(crawl_log: pa.Table) -> dict[str, int]:
    """A crawl log's (``schemas.CRAWL_LOG``) rows counted as a crawl's counts name them (``pages``,
    ``pages.<outcome>``, ``pages.rejected.<reason>``): what :func:`page_tally` takes."""
    from collections import Counter

    keys = Counter(f"pages.{o}" if o != REJECTED else f"pages.{REJECTED}.{r or ''}"
                   for o, r in zip(crawl_log.column("outcome").to_pylist(), crawl_log.column("reason").to_pylist()))
    return {"pages": crawl_log.num_rows, **dict(sorted(keys.items()))}


def page_rejection_rate(crawl_log: pa.Table) -> tuple[float, int, dict[str, int]]:
    """The page rejection rate of a crawl log (``schemas.CRAWL_LOG``): failed rows / fetched rows
    (:func:`page_tally`), the number of fetched rows and the failed ones by reason. A ``redirected`` row is no page
    and counts in neither: a site whose alias URLs redirect to its pages is no worse for it; nor does a URL the
    site's ``max_pages`` cut (:data:`NOT_FETCHED`): a capped crawl of a healthy site is no failing one."""
    t = page_tally(log_counts(crawl_log))
    pre = f"pages.{REJECTED}."
    failed = {k.removeprefix(pre): v for k, v in log_counts(crawl_log).items()
              if k.startswith(pre) and k.removeprefix(pre) not in NOT_FETCHED}
    return (t["failed"] / t["fetched"] if t["fetched"] else 0.0), t["fetched"], failed


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
