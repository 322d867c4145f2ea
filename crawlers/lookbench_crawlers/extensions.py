"""Extensions of the crawl process.

* :class:`StatsToFile` writes the crawl's Scrapy stats (requests, responses by status, items, robots.txt refusals,
  errors, cache hits) as JSON when the spider closes, for the pipeline to report as asset metadata.
* :class:`DieWithParent`: a crawl the pipeline runs (``lookbench_pipeline.crawl.run_spider``, which sets
  ``LOOKBENCH_PARENT_PID``) ends when the process that started it dies.
"""

import json
import os

from scrapy import signals
from scrapy.exceptions import NotConfigured

from lookbench_pipeline.crawl import PARENT_PID_ENV as PARENT_ENV
from lookbench_pipeline.parent_death import die_with_parent



class DieWithParent:
    """The crawl is killed (SIGKILL) when the process that started it dies (Linux ``prctl(PR_SET_PDEATHSIG)``).

    A build killed with ``kill -9 <pid>`` otherwise left its crawl running as an orphan: the demo or replay server
    lived in the dead process, so every page still to fetch was logged ``fetch_error`` and the crawl ended
    "finished", and a resumed build published a release of half the pages. Dead with its parent, the crawl leaves
    only the pages it finished, and the resumed build fetches the rest. ``LOOKBENCH_PARENT_PID`` (set by the
    pipeline) names the parent: if it is already gone when the crawl starts, the crawl exits at once. Not
    configured outside Linux or when the variable is unset (a crawl started by hand).
    """

    @classmethod
    def from_crawler(cls, crawler):
        parent = os.environ.get(PARENT_ENV, "")
        if not parent.isdigit():
            raise NotConfigured(f"{PARENT_ENV} is not set: not started by the pipeline")
        try:
            die_with_parent()
        except OSError as exc:
            raise NotConfigured(f"cannot ask to die with the parent process: {exc}") from None
        if os.getppid() != int(parent):  # the parent died before the request took effect
            os._exit(1)
        return cls()


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
