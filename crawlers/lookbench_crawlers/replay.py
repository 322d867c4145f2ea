"""Replaying an archived crawl from its WARC file, with the network disabled, and stamping items with the time
their page was fetched.

* :class:`FetchTimeMiddleware` (spider middleware): every product, look and page item a callback yields from a
  response gets ``crawled_at`` = the time that response was fetched (``request.meta["lookbench_fetched_at"]``,
  set by :class:`lookbench_crawlers.warc.WarcArchiveMiddleware`, which also writes it as the record's
  ``WARC-Date``). A replayed crawl therefore stamps the same times as the crawl it replays.
* :class:`WarcReplayMiddleware` (downloader middleware, on only when the setting ``LOOKBENCH_REPLAY_WARC`` names
  WARC files): answers every request from the archive: the recorded response for a URL the archive has, a
  redirect for a URL the recorded crawl was redirected from (``WARC-LookBench-Redirect-From``), else ``404`` with
  ``X-LookBench-Replay: not-archived``. It sits last before the download handler, so robots.txt, the host
  allow-list, redirects and decompression act on replayed responses as they did on the live ones.
* :class:`NoNetworkDownloadHandler`: the download handler a replay uses for http and https; a request that
  reaches it (nothing should) fails with ``IgnoreRequest("network_disabled")`` and counts in the stats
  ``lookbench/replay/network_attempts``.
"""

from __future__ import annotations

from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import Response
from scrapy.responsetypes import responsetypes
from scrapy.spidermiddlewares.base import BaseSpiderMiddleware

from lookbench_pipeline.warc import response_records

REDIRECT_HEADER = "WARC-LookBench-Redirect-From"


class FetchTimeMiddleware(BaseSpiderMiddleware):
    """Spider middleware: ``crawled_at`` of an item is the fetch time of the response it came from."""

    def get_processed_item(self, item, response):
        try:
            fetched_at = response.meta.get("lookbench_fetched_at") if response is not None else None
        except AttributeError:  # a response without its request
            fetched_at = None
        try:
            kind = item.get("kind")
        except AttributeError:
            return item
        if kind in ("product", "look", "page") and fetched_at and not item.get("crawled_at"):
            item["crawled_at"] = fetched_at
        return item


def read_archive(paths):
    """``{url: record}`` of every response in the WARC files (the first record of a URL wins) and
    ``{url: (status, location)}`` of every redirect the recorded crawl followed. A record is
    ``(status, [(header, value)], body, warc_date)``. A torn last record ends a file without an error."""
    responses, redirects = {}, {}

    def first(rec) -> bool:  # the first record of a URL wins; a later one's body is never read
        return rec.rec_headers.get_header("WARC-Target-URI") not in responses

    for rec, body in response_records(paths, first):
        url = rec.rec_headers.get_header("WARC-Target-URI")
        status = int(rec.http_headers.get_statuscode() or 200)
        headers = [(k, v) for k, v in rec.http_headers.headers]
        responses[url] = (status, headers, body, rec.rec_headers.get_header("WARC-Date"))
        # "code|url code|url …": the URLs this one was reached from by redirects, in order
        hops = [h.split("|", 1) for h in (rec.rec_headers.get_header(REDIRECT_HEADER) or "").split()]
        for i, (code, src) in enumerate(hops):
            target = hops[i + 1][1] if i + 1 < len(hops) else url
            redirects.setdefault(src, (int(code) if code.isdigit() else 302, target))
    return responses, redirects


class WarcReplayMiddleware:
    def __init__(self, crawler, paths):
        self.crawler = crawler
        self.responses, self.redirects = read_archive(paths)

    @classmethod
    def from_crawler(cls, crawler):
        paths = crawler.settings.getlist("LOOKBENCH_REPLAY_WARC")
        if not paths:
            raise NotConfigured("not replaying")
        return cls(crawler, paths)

    def process_request(self, request, spider=None):
        stats = self.crawler.stats
        url = request.url
        rec = self.responses.get(url)
        if rec is not None:
            status, headers, body, date = rec
            request.meta["lookbench_archived_at"] = date
            stats.inc_value("lookbench/replay/served")
            cls = responsetypes.from_args(headers={k: v for k, v in headers}, url=url, body=body)
            return cls(url=url, status=status, headers=headers, body=body, request=request, flags=["replayed"])
        if url in self.redirects:
            code, location = self.redirects[url]
            stats.inc_value("lookbench/replay/redirects")
            return Response(url=url, status=code, headers={"Location": location}, request=request,
                            flags=["replayed"])
        stats.inc_value("lookbench/replay/not_archived")
        return Response(url=url, status=404, headers={"X-LookBench-Replay": "not-archived"}, request=request,
                        flags=["replayed"])


class NoNetworkDownloadHandler:
    """Download handler for http/https during a replay: nothing may leave the machine."""

    lazy = False

    def __init__(self, crawler=None):
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler)

    async def download_request(self, request):
        if self.crawler is not None:
            self.crawler.stats.inc_value("lookbench/replay/network_attempts")
        raise IgnoreRequest(f"network_disabled: {request.url} is not in the replayed archive")

    async def close(self):
        return None
