"""Scrapy settings of the LookBench crawlers. Per-site values (user agent, delays, concurrency) are set by the
spider from the site's YAML config; these are the polite defaults."""

BOT_NAME = "lookbench"
SPIDER_MODULES = ["lookbench_crawlers.spiders"]
NEWSPIDER_MODULE = "lookbench_crawlers.spiders"

ROBOTSTXT_OBEY = True
ROBOTSTXT_PARSER = "scrapy.robotstxt.ProtegoRobotParser"
USER_AGENT = "LookBenchBot/0.1 (+https://github.com/lookbench/lookbench-pipeline; research benchmark crawler)"

CONCURRENT_REQUESTS = 16
CONCURRENT_REQUESTS_PER_DOMAIN = 8
DOWNLOAD_DELAY = 0
AUTOTHROTTLE_ENABLED = True
AUTOTHROTTLE_START_DELAY = 0.5
AUTOTHROTTLE_MAX_DELAY = 30
AUTOTHROTTLE_TARGET_CONCURRENCY = 4.0
DOWNLOAD_TIMEOUT = 30  # seconds per attempt; LOOKBENCH_DOWNLOAD_BUDGET bounds all attempts of one URL together
LOOKBENCH_DOWNLOAD_BUDGET = 30  # seconds; the site's download_budget_s (middlewares.DownloadBudgetMiddleware)
DOWNLOAD_MAXSIZE = 20 * 1024 * 1024
DOWNLOAD_WARNSIZE = 5 * 1024 * 1024
RETRY_TIMES = 2
COOKIES_ENABLED = False
TELNETCONSOLE_ENABLED = False
REQUEST_FINGERPRINTER_IMPLEMENTATION = "2.7"
FEED_EXPORT_ENCODING = "utf-8"
LOG_LEVEL = "INFO"

# Every name's address is checked by the egress policy where it is resolved (lookbench_pipeline.egress):
# LOOKBENCH_EGRESS_PORTS, LOOKBENCH_EGRESS_ALLOW (exact ip:port pairs; set by the pipeline for the demo and replay
# servers it starts), LOOKBENCH_STATIC_HOSTS (JSON {name: ip}, answered before DNS).
DNS_RESOLVER = "lookbench_crawlers.resolver.GuardedResolver"
LOOKBENCH_EGRESS_PORTS = [80, 443]
LOOKBENCH_EGRESS_ALLOW = []

DOWNLOADER_MIDDLEWARES = {
    "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware": None,
    "lookbench_crawlers.middlewares.StrictRobotsTxtMiddleware": 100,
    "lookbench_crawlers.middlewares.AddressPolicyMiddleware": 50,
    "lookbench_crawlers.warc.WarcArchiveMiddleware": 60,
    # Scrapy's RetryMiddleware, each attempt it retries archived (marked retried: a replay answers it only when its
    # crawl attempt left no other answer)
    "scrapy.downloadermiddlewares.retry.RetryMiddleware": None,
    "lookbench_crawlers.warc.WarcRetryArchiveMiddleware": 550,
    # Scrapy's MetaRefreshMiddleware, a meta refresh archived and bounded as an HTTP redirect is (its row too)
    "scrapy.downloadermiddlewares.redirect.MetaRefreshMiddleware": None,
    "lookbench_crawlers.middlewares.MetaRefreshScopeMiddleware": 580,
    # after DownloadTimeoutMiddleware (350) sets an attempt's timeout, before RetryMiddleware (550) sees a timeout
    "lookbench_crawlers.middlewares.DownloadBudgetMiddleware": 560,
    # sees a redirect before RedirectMiddleware (600): one out of the site's scope is a row, not a silent drop
    "lookbench_crawlers.middlewares.RedirectScopeMiddleware": 610,
    # a redirect's own response is archived before RedirectScopeMiddleware (610) and RedirectMiddleware (600)
    # replace it (by its row or the next request); WarcArchiveMiddleware (60) archives every other response, as
    # the spider gets it (decompressed by HttpCompressionMiddleware, 590)
    "lookbench_crawlers.warc.WarcRedirectArchiveMiddleware": 650,
    # on only when LOOKBENCH_REPLAY_WARC names archived WARC files (a replay: no request leaves the machine)
    "lookbench_crawlers.replay.WarcReplayMiddleware": 950,
}
# Scrapy's duplicate filter, which a redirect's target can be checked against without recording it: a redirect to a
# page the crawl has already is not followed but logged, the row "redirected" a followed one gets
# (middlewares.RedirectScopeMiddleware, reason redirect:duplicate inside the crawler), not a silent drop
DUPEFILTER_CLASS = "lookbench_crawlers.middlewares.CrawlDupeFilter"
# crawled_at of an item = the fetch time of its page (also the WARC-Date of the archived response)
SPIDER_MIDDLEWARES = {"lookbench_crawlers.replay.FetchTimeMiddleware": 950}
# Incremental crawls: pages are cached per site (HTTPCACHE_DIR set by the pipeline) and revalidated with
# conditional requests on every crawl. Images are not cached here (they are content-addressed downstream).
HTTPCACHE_ENABLED = False
HTTPCACHE_POLICY = "lookbench_crawlers.httpcache.RevalidateAlwaysPolicy"
HTTPCACHE_STORAGE = "scrapy.extensions.httpcache.FilesystemCacheStorage"
HTTPCACHE_IGNORE_SCHEMES = ["file", "data"]
# LOOKBENCH_WARC_PATH: the crawl's WARC file (set by the pipeline); unset, nothing is archived.
EXTENSIONS = {"lookbench_crawlers.extensions.StatsToFile": 500, "lookbench_crawlers.extensions.DieWithParent": 0}
ITEM_PIPELINES = {
    "lookbench_crawlers.pipelines.StampAndValidatePipeline": 100,
    "lookbench_crawlers.pipelines.ImageDownloadPipeline": 200,
}
# FILES_STORE is set per crawl by the pipeline (lookbench_pipeline.crawl); this default serves `scrapy crawl` by hand.
FILES_STORE = "crawl-files"
FILES_EXPIRES = 90
MEDIA_ALLOW_REDIRECTS = True
