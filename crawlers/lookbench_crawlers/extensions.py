"""Writes the crawl's Scrapy stats (requests, responses by status, items, robots.txt refusals, errors, cache
hits) as JSON when the spider closes, for the pipeline to report as asset metadata."""

import json

from scrapy import signals


class StatsToFile:
    def __init__(self, crawler, path):
        self.crawler, self.path = crawler, path

    @classmethod
    def from_crawler(cls, crawler):
        ext = cls(crawler, crawler.settings.get("LOOKBENCH_STATS_PATH"))
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    def spider_closed(self, spider, reason):
        if not self.path:
            return
        stats = {k: v for k, v in self.crawler.stats.get_stats().items() if isinstance(v, (int, float, str))}
        stats["finish_reason"] = reason
        with open(self.path, "w", encoding="utf-8") as fh:
            json.dump(stats, fh, indent=1, sort_keys=True, default=str)
