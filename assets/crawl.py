"""Stage 1, crawl: each site crawled weekly by the Scrapy ``shop`` spider (``week`` × ``site`` partitions), and the
release window's catalogue accumulated from the weekly crawls that overlap it."""


from dagster import (AssetDep, AssetExecutionContext, AssetOut, Config, Failure, MetadataValue, MultiPartitionKey,
                     Output, multi_asset)

from lookbench_pipeline.accumulate import window_catalog
from lookbench_pipeline.crawl_tables import CrawlTables, page_tally
from lookbench_pipeline.pipeline import CrawlWeekError, stage_crawl_week

from .common import observed, reasons, summary, table_metadata
from .io import read_stored_table
from .partitions import RELEASE_TIMEZONE, crawl_partitions, crawls_in_window, release_partitions, weeks_in_window
from .resources import LookbenchConfig
from .tables import WEEKLY


class CrawlConfig(Config):
    """``replay: true`` rebuilds the partition from the site's archived crawls of that week (WARC files in the
    object store) instead of the network: the backfill of a past week. Replay weeks in order, from an empty
    crawl state (``lookbench backfill`` does), so that ``first_seen_at`` comes out as it was."""

    replay: bool = False


def crawl_headline(c: dict) -> str:
    """A weekly crawl's counts on one line: pages (kept + redirected + rejected, by reason:
    ``crawl_tables.page_tally``), the URLs the site's ``max_pages`` cut (when it did: each a rejected page
    ``max_pages_reached``, or only counted beyond the rows the spider writes; "at least N" when the spider stopped
    remembering cut URLs), products, looks, image URLs (downloaded +
    refused, each refused one with its reason in ``image_downloads``); for a finished crawl of the week read back,
    that it was; for a crawl in which the site never answered (``unreachable``), that it was and why."""
    t = page_tally(c)
    urls, got = c.get("image_urls", 0), c.get("image_urls_downloaded", 0)
    cut = c.get("max_pages_cut")
    at_least = "at least " if c.get("max_pages_cut_at_least") else ""  # beyond the URLs the spider remembers
    limit = f", max_pages cut the crawl ({at_least}{cut} URLs not fetched)" if cut else ""
    redirected = f", redirected {t['redirected']}" if t["redirected"] else ""
    line = (f"pages {t['rows']} (kept {t['kept']}{redirected}, rejected {t['rejected']}"
            f"{reasons(c, 'pages.rejected.')}){limit}, "
            f"products {c.get('products', 0)} (new {c.get('products_new', 0)}, gone "
            f"{c.get('products_disappeared', 0)}), looks {c.get('looks', 0)}, image URLs {urls} "
            f"(downloaded {got}, refused {urls - got})")
    if c.get("again_unreachable"):
        why = ", ".join(f"{k} {v}" for k, v in c["again_unreachable"].items())
        line += (f"; SITE UNREACHABLE when crawled again ({why}): this week's finished crawl started "
                 f"{c.get('read_back_started_at') or 'earlier'} is kept and read back (lookbench build --force "
                 "again once the site answers)")
    elif c.get("read_back"):
        line += (f"; read back: this week's crawl started {c.get('read_back_started_at') or 'earlier'} had "
                 "finished, nothing fetched (lookbench build --force crawls the week again)")
    if c.get("unreachable"):
        why = ", ".join(f"{k} {v}" for k, v in c["unreachable"].items())
        line += (f"; SITE UNREACHABLE: every page failed without a response ({why}); the week's crawl is not "
                 "recorded as finished and its state is unchanged: the next build crawls the site again")
    return line


@multi_asset(
    outs={
        "weekly_products": AssetOut(description="Products one crawl of a site found in its week (schemas.PRODUCTS)."),
        "weekly_looks": AssetOut(description='"Shop the look" pages of the crawl: a look image and its products.'),
        "weekly_crawl_log": AssetOut(description="Every page the crawl handled, with its outcome and reason."),
        "weekly_image_downloads": AssetOut(description="Every image URL the crawl tried: stored file or failure."),
    },
    partitions_def=crawl_partitions,
    group_name="crawl",
    compute_kind="scrapy",
    op_tags={"lookbench/stage": "crawl"},
)
@observed
def crawl(context: AssetExecutionContext, lookbench: LookbenchConfig, config: CrawlConfig):
    cfg = lookbench.load()
    keys = context.partition_key.keys_by_dimension
    site, week = keys["site"], keys["week"]
    try:
        # reuse off (lookbench build --force, LOOKBENCH_REUSE_UNCHANGED=0): the week's finished crawl is done again
        res = stage_crawl_week(cfg, site, week, cfg.layout.run_dir(context.run.run_id),
                               context.run.run_id, lookbench.store(), replay=config.replay, tz=RELEASE_TIMEZONE,
                               recrawl=not lookbench.reuse_unchanged)
    except CrawlWeekError as exc:
        raise Failure(description=str(exc)) from None
    c = res.counts[site]
    # a redirected URL is no page, a URL max_pages cut was not fetched: not in the rejection rate (nor the check's)
    tally = page_tally(c)
    rejected_pages = tally["rejected"]
    context.log.info(summary(f"{site} {week}", crawl_headline(c), c))
    yield Output(res.products, "weekly_products", metadata={
        **table_metadata(res.products, {"products_new": c.get("products_new"),
                                        "products_disappeared": c.get("products_disappeared"),
                                        "archive": c.get("warc") or c.get("replayed_from")},
                         ["title", "brand", "price", "currency", "first_seen_at"]),
        "scrapy": MetadataValue.json(c.get("scrapy", {}))})
    yield Output(res.looks, "weekly_looks", metadata=table_metadata(res.looks, None, ["url", "image_url",
                                                                                       "first_seen_at"]))
    yield Output(res.crawl_log, "weekly_crawl_log", metadata=table_metadata(
        res.crawl_log, {"pages": c.get("pages", 0), "rejected_pages": rejected_pages,
                        "page_rejection_rate": round(tally["failed"] / max(1, tally["fetched"]), 4),
                        "outcomes": {k: v for k, v in c.items() if k.startswith("pages.")}},
        ["url", "status", "outcome", "reason"]))
    n_img = max(1, c.get("image_urls", 0))
    yield Output(res.downloads, "weekly_image_downloads", metadata=table_metadata(
        res.downloads, {"image_urls": c.get("image_urls", 0), "downloaded": c.get("image_urls_downloaded", 0),
                        "download_failure_rate": round(1 - c.get("image_urls_downloaded", 0) / n_img, 4)},
        ["url", "reason"]))


@multi_asset(
    outs={
        "products": AssetOut(description="The window's products: every weekly crawl of the window, one row per "
                                          "product from the latest crawl that saw it (schemas.PRODUCTS)."),
        "looks": AssetOut(description='The window\'s "shop the look" pages, accumulated like products.'),
        "crawl_log": AssetOut(description="Every page of every weekly crawl of the window, with its outcome."),
        "image_downloads": AssetOut(description="Every image URL of the window's crawls: the latest stored file, "
                                                "else the latest failure reason."),
    },
    deps=[AssetDep(name, partition_mapping=crawls_in_window) for name in WEEKLY.values()],
    partitions_def=release_partitions,
    group_name="crawl",
    compute_kind="pyarrow",
    op_tags={"lookbench/stage": "crawl_catalog"},
)
@observed
def crawl_catalog(context: AssetExecutionContext, lookbench: LookbenchConfig):
    """Reads the stored weekly crawl partitions of every configured site that overlap the window (the
    dependency's partition mapping) and accumulates them (``lookbench_pipeline.accumulate``). Weeks that were
    not crawled are skipped; a window without any crawl fails."""
    cfg = lookbench.load()
    window = context.partition_key
    sites = [s.name for s in cfg.site_configs()]

    def read(site: str, week: str) -> CrawlTables | None:
        key = str(MultiPartitionKey({"week": week, "site": site}))
        tables = {k: read_stored_table(cfg.data_dir, name, key) for k, name in WEEKLY.items()}
        return None if any(t is None for t in tables.values()) else CrawlTables(**tables)

    try:
        cat, missing = window_catalog(sites, weeks_in_window(window), read)
    except LookupError:
        raise Failure(description=f"no weekly crawl of window {window} for sites {sites}: materialise crawl_job "
                                  "partitions (week|site) first, or rebuild them from the archive") from None
    counts = cat.counts
    gaps = ", ".join(f"{s} {len(w)}" for s, w in sorted(missing.items()) if w) or "none"
    context.log.info(f"window {window}: weekly crawls {counts['crawls']} (weeks without: {gaps}) -> products "
                     f"{counts['products']}, looks {counts['looks']}, image URLs {counts['image_urls']} "
                     f"(downloaded {counts['image_urls_downloaded']})")
    yield Output(cat.products, "products", metadata=table_metadata(
        cat.products, counts, ["site", "title", "brand", "price", "first_seen_at", "last_seen_at"]))
    yield Output(cat.looks, "looks", metadata=table_metadata(cat.looks, None, ["url", "image_url", "first_seen_at"]))
    yield Output(cat.crawl_log, "crawl_log", metadata=table_metadata(cat.crawl_log, None,
                                                                     ["url", "status", "outcome", "reason"]))
    yield Output(cat.downloads, "image_downloads", metadata=table_metadata(
        cat.downloads, {"image_urls": cat.counts["image_urls"], "downloaded": cat.counts["image_urls_downloaded"]},
        ["url", "reason"]))
