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
  allow-list, redirects and decompression act on replayed responses as they did on the live ones. A URL archived
  more than once (a crawl resumed after a kill fetches again a page whose items the kill lost) is answered with
  its latest attempt's record (``WARC-LookBench-Attempt``; the first of that attempt), the one whose items the
  crawl kept. ``LOOKBENCH_ORIGINS`` (comma-separated, oldest first, the last the origin now served): the origins
  the archived crawl's attempts served ``{{BASE}}`` from; an archived URL of any of them answers the same URL of
  the last (an archive without attempt numbers: an earlier origin is an earlier attempt).
  With ``LOOKBENCH_RESUME_WARC`` instead (a resumed live crawl: the crawl's own WARC as earlier attempts left it),
  it answers only the requests for pages an earlier attempt finished (``meta["lookbench_finished"]``), flagged
  ``resumed`` so they are not archived twice, and lets every other request go to the network.
* :class:`NoNetworkDownloadHandler`: the download handler a replay uses for http and https; a request that
  reaches it (nothing should) fails with ``IgnoreRequest("network_disabled")`` and counts in the stats
  ``lookbench/replay/network_attempts``.
"""

from __future__ import annotations

from pathlib import Path

from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import Response
from scrapy.responsetypes import responsetypes
from scrapy.spidermiddlewares.base import BaseSpiderMiddleware

from lookbench_pipeline.crawl import rebase_url
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


ATTEMPT_HEADER = "WARC-LookBench-Attempt"


def _under(url, origin):
    """Whether ``url`` is the origin ``origin`` or under it (what ``rebase_url`` would rewrite)."""
    return rebase_url(url, origin, "") != url


def served_from(url, origins):
    """``url`` with any of ``origins`` (the crawl's serving origins, oldest first) replaced by the last."""
    for origin in origins[:-1]:
        moved = rebase_url(url, origin, origins[-1])
        if moved != url:
            return moved
    return url


def _attempt(rec, url, origins):
    """Which attempt of the crawl fetched a record: its ``WARC-LookBench-Attempt``, else (archived before records
    were numbered) the place of its origin among the crawl's origins, else 0."""
    value = (rec.rec_headers.get_header(ATTEMPT_HEADER) or "").strip()
    if value.isdigit():
        return int(value)
    return next((i for i, o in enumerate(origins) if _under(url, o)), 0)


def read_archive(paths, origins=(), want_url=None):
    """``{url: record}`` of every response in the WARC files and ``{url: (status, location)}`` of every redirect
    the recorded crawl followed, their URLs on the last of ``origins`` (:func:`served_from`). Of the records of
    one URL the latest attempt's wins, the first within an attempt (a later one's body is never read). A record is
    ``(status, [(header, value)], body, warc_date)``. ``want_url(url)``: only those URLs (all when None). A torn
    last record ends a file without an error."""
    origins = [o.rstrip("/") for o in origins if o]
    responses, redirects, rank = {}, {}, {}

    def wanted(rec) -> bool:
        raw = rec.rec_headers.get_header("WARC-Target-URI") or ""
        url = served_from(raw, origins)
        if want_url is not None and not want_url(url):
            return False
        return url not in rank or _attempt(rec, raw, origins) > rank[url]

    for rec, body in response_records(paths, wanted):
        raw = rec.rec_headers.get_header("WARC-Target-URI")
        url, attempt = served_from(raw, origins), _attempt(rec, raw, origins)
        rank[url] = attempt
        status = int(rec.http_headers.get_statuscode() or 200)
        headers = [(k, v) for k, v in rec.http_headers.headers]
        responses[url] = (status, headers, body, rec.rec_headers.get_header("WARC-Date"))
        # "code|url code|url …": the URLs this one was reached from by redirects, in order
        hops = [h.split("|", 1) for h in (rec.rec_headers.get_header(REDIRECT_HEADER) or "").split()]
        hops = [(code, served_from(src, origins)) for code, src in hops]
        for i, (code, src) in enumerate(hops):
            target = hops[i + 1][1] if i + 1 < len(hops) else url
            if src not in redirects or redirects[src][2] < attempt:
                redirects[src] = (int(code) if code.isdigit() else 302, target, attempt)
    return responses, {src: (code, target) for src, (code, target, _) in redirects.items()}


class WarcReplayMiddleware:
    def __init__(self, crawler, paths, origins=(), resume=False):
        self.crawler = crawler
        self.origins = [o.rstrip("/") for o in origins if o]
        self.resume = resume
        want = None
        spider = getattr(crawler, "spider", None)
        if resume and spider is not None and hasattr(spider, "finished"):
            want = spider.finished  # a resume keeps the finished pages' records only (not the images')
        self.responses, self.redirects = read_archive(paths, self.origins, want)

    @classmethod
    def from_crawler(cls, crawler):
        origins = crawler.settings.getlist("LOOKBENCH_ORIGINS")
        paths = crawler.settings.getlist("LOOKBENCH_REPLAY_WARC")
        if paths:
            return cls(crawler, paths, origins)
        own = crawler.settings.get("LOOKBENCH_RESUME_WARC")
        if own and Path(own).is_file():
            return cls(crawler, [own], origins, resume=True)
        raise NotConfigured("not replaying")

    def process_request(self, request, spider=None):
        if self.resume and not request.meta.get("lookbench_finished"):
            return None  # a page no earlier attempt finished: fetched
        stats = self.crawler.stats
        url = request.url
        key = served_from(url, self.origins)
        flags = ["replayed", "resumed"] if self.resume else ["replayed"]
        rec = self.responses.get(key)
        if rec is not None:
            status, headers, body, date = rec
            request.meta["lookbench_archived_at"] = date
            stats.inc_value("lookbench/resume/served" if self.resume else "lookbench/replay/served")
            cls = responsetypes.from_args(headers={k: v for k, v in headers}, url=url, body=body)
            return cls(url=url, status=status, headers=headers, body=body, request=request, flags=flags)
        if key in self.redirects:
            code, location = self.redirects[key]
            stats.inc_value("lookbench/resume/redirects" if self.resume else "lookbench/replay/redirects")
            return Response(url=url, status=code, headers={"Location": location}, request=request, flags=flags)
        if self.resume:
            return None  # not in the WARC (cut with a torn tail): fetched again
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
