"""Stage 1, crawl: every configured site crawled by the Scrapy ``shop`` spider."""


from pathlib import Path

from dagster import AssetExecutionContext, AssetOut, Failure, Output, multi_asset

from lookbench_pipeline.pipeline import stage_crawl

from .common import table_metadata
from .partitions import crawl_partitions
from .resources import LookbenchConfig


@multi_asset(
    outs={
        "products": AssetOut(description="Products found on the crawled shops (schemas.PRODUCTS)."),
        "looks": AssetOut(description='"Shop the look" pages: a look image and the products it links.'),
        "crawl_log": AssetOut(description="Every page the spider handled, with its outcome and reason."),
        "image_downloads": AssetOut(description="Every image URL the crawl tried: stored file or failure reason."),
    },
    partitions_def=crawl_partitions,
    group_name="crawl",
    compute_kind="scrapy",
)
def crawl(context: AssetExecutionContext, lookbench: LookbenchConfig):
    cfg = lookbench.load()
    site = context.partition_key.keys_by_dimension["site"]
    by_name = {s.name: p for s, p in zip(cfg.site_configs(), cfg.sites)}
    if site not in by_name:
        raise Failure(description=f"site partition {site!r} has no site config; configured: {sorted(by_name)}")
    run_dir = Path(cfg.data_dir) / "runs" / context.run.run_id
    res = stage_crawl(cfg.model_copy(update={"sites": [by_name[site]]}), run_dir, lookbench.store(),
                      context.run.run_id)
    for site, c in res.counts.items():
        context.log.info(f"crawl {site}: {c}")
    yield Output(res.products, "products",
                 metadata=table_metadata(res.products, {"per_site": res.counts}, ["title", "brand", "price", "currency", "first_seen_at"]))
    yield Output(res.looks, "looks", metadata=table_metadata(res.looks, None, ["url", "image_url", "first_seen_at"]))
    yield Output(res.crawl_log, "crawl_log", metadata=table_metadata(res.crawl_log, None, ["url", "status", "outcome", "reason"]))
    yield Output(res.downloads, "image_downloads", metadata=table_metadata(res.downloads, None, ["url", "reason"]))
