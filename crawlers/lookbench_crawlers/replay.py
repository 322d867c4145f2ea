"""Replaying an archived crawl from its WARC file, with the network disabled, and stamping items with the time
their page was fetched.

* :class:`FetchTimeMiddleware` (spider middleware): every product, look and page item a callback yields from a
  response gets ``crawled_at`` = the time that response was fetched (``request.meta["lookbench_fetched_at"]``,
  set by :class:`lookbench_crawlers.warc.WarcArchiveMiddleware`, which also writes it as the record's
  ``WARC-Date``). A replayed crawl therefore stamps the same times as the crawl it replays.
* :class:`WarcReplayMiddleware` (downloader middleware, on only when the setting ``LOOKBENCH_REPLAY_WARC`` names
  WARC files): answers every request from the archive: the recorded response for a URL the archive has (a
  redirect is one, its 3xx status and headers as received, its ``Location`` moved to the origin served now when it
  named an earlier one; a page left by a meta refresh is one too, its 200 page), a redirect for a URL the recorded
  crawl was redirected from without a record of its own (``WARC-LookBench-Redirect-From``: an archive of before
  redirects and meta refreshes were records), else ``404``
  with ``X-LookBench-Replay: not-archived``. It sits last before the download handler, so robots.txt, the host
  allow-list, redirects and decompression act on replayed responses as they did on the live ones. A URL archived
  more than once (a crawl resumed after a kill fetches again a page whose items the kill lost) is answered with
  its latest attempt's record (``WARC-LookBench-Attempt``; the first of that attempt), the one whose items the
  crawl kept. ``LOOKBENCH_ORIGINS`` (comma-separated, oldest first, the last the origin now served): the origins
  the archived crawl's attempts served ``{{BASE}}`` from; an archived URL of any of them answers the same URL of
  the last (an archive without attempt numbers: an earlier origin is an earlier attempt).
  With ``LOOKBENCH_RESUME_WARC`` instead (a resumed live crawl: the crawl's own WARC as earlier attempts left it), it
  answers only the requests for pages an earlier attempt finished (``meta["lookbench_finished"]`` or the spider's
  ``finished(url)``, or a URL an archived redirect leads from to such a page), flagged ``resumed`` so they are not
  archived twice, ignores a finished page that has no response record (``finished_earlier``: none should, a page
  without a response is not finished), and lets every other request go to the network. The archive is indexed, not
  loaded: a body is read from its file and offset when its URL is requested (:func:`read_archive`).
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

from lookbench_crawlers.middlewares import UNRECORDED_HOP
from lookbench_pipeline.crawl import rebase_url
from lookbench_pipeline.extract.images import join_url
from lookbench_pipeline.warc import is_retried, read_response_at, response_offsets

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
    """An index of the WARC files: ``{url: (path, offset, warc_date)}`` of every response (a redirect's too), the
    place of its record (:func:`lookbench_pipeline.warc.read_response_at` reads it when the URL is requested, so
    memory holds no body), and ``{url: (status, target)}`` of every redirect the recorded crawl met (its 3xx
    record, else a hop of ``WARC-LookBench-Redirect-From``), their URLs on the last of ``origins``
    (:func:`served_from`). Of the records of one URL the latest attempt's wins, the first within an
    attempt; a response Scrapy retried (``WARC-LookBench-Retried``) is none of them, unless its attempt left no other
    (a 500 whose retry timed out, so the live row read ``http_500``: the replay's reads it too, not a 404, nor an
    earlier attempt's 200 the live crawl no longer had): then the last retried one answers. ``want_url(url)``: only
    those URLs' responses (all when None). A torn last record ends a file without an error."""
    origins = [o.rstrip("/") for o in origins if o]
    responses, redirects, rank, retried = {}, {}, {}, {}
    for rec, path, offset in response_offsets(paths):
        raw = rec.rec_headers.get_header("WARC-Target-URI") or ""
        url, attempt = served_from(raw, origins), _attempt(rec, raw, origins)
        if is_retried(rec):  # an attempt Scrapy retried (a 503 before the 200): the answer only if its attempt has none
            if (want_url is None or want_url(url)) and attempt >= retried.get(url, (-1,))[0]:
                retried[url] = (attempt, (path, offset, rec.rec_headers.get_header("WARC-Date")))
            continue
        if (want_url is None or want_url(url)) and (url not in rank or attempt > rank[url]):
            rank[url] = attempt
            responses[url] = (path, offset, rec.rec_headers.get_header("WARC-Date"))
        # "code|url code|url …": the URLs this one was reached from by redirects, in order; a code that is no
        # number (a meta refresh) answers as a 302; a token without "|" is skipped (an archive of before the hop
        # was one token: "meta refresh|url" split in "meta" and "refresh|url")
        hops = [h.split("|", 1) for h in (rec.rec_headers.get_header(REDIRECT_HEADER) or "").split()]
        hops = [(code, served_from(src, origins)) for code, src in (h for h in hops if len(h) == 2) if src]
        for i, (code, src) in enumerate(hops):
            target = hops[i + 1][1] if i + 1 < len(hops) else url
            if src not in redirects or redirects[src][2] < attempt:
                redirects[src] = (int(code) if code.isdigit() else 302, target, attempt)
        # a redirect archived as its own record (3xx, Location): where it leads, for a resume's _final
        status, location = rec.http_headers.get_statuscode() or "", rec.http_headers.get_header("Location")
        if status.startswith("3") and location and (url not in redirects or redirects[url][2] < attempt):
            target = join_url(raw, location.strip())
            if target:
                redirects[url] = (int(status), served_from(target, origins), attempt)
    for url, (attempt, place) in retried.items():  # the latest attempt's answer wins, a retried one too
        if url not in rank or attempt > rank[url]:
            responses[url] = place
    return responses, {src: (code, target) for src, (code, target, _) in redirects.items()}


def _final(url, redirects, limit=20):
    """Where the archived redirects from ``url`` lead (``url`` itself when none; a loop ends where it closes)."""
    seen = {url}
    while url in redirects and len(seen) <= limit:
        url = redirects[url][1]
        if url in seen:
            break
        seen.add(url)
    return url


class WarcReplayMiddleware:
    def __init__(self, crawler, paths, origins=(), resume=False):
        self.crawler = crawler
        self.origins = [o.rstrip("/") for o in origins if o]
        self.resume = resume
        self.finished = None
        spider = getattr(crawler, "spider", None)
        if resume and spider is not None and hasattr(spider, "finished"):
            self.finished = spider.finished  # a resume keeps the finished pages' records only (not the images')
        self.responses, self.redirects = read_archive(paths, self.origins, self.finished)

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

    def _done(self, request, key):
        """On a resume: whether an earlier attempt finished the page ``request`` asks for, or the page an archived
        redirect from it leads to (a sitemap's URL that redirected to the page the feed names)."""
        if request.meta.get("lookbench_finished"):
            return True
        if self.finished is None:
            return False
        return self.finished(request.url) or (key in self.redirects and self.finished(_final(key, self.redirects)))

    def _location(self, url, location):
        """An archived redirect's ``Location``: as archived, unless it names an earlier origin of the crawl (then
        the same URL on the origin served now)."""
        target = join_url(url, location.strip())
        moved = served_from(target, self.origins) if target else None
        return moved if moved and moved != target else location

    def process_request(self, request, spider=None):
        url = request.url
        key = served_from(url, self.origins)
        if self.resume and not self._done(request, key):
            request.meta.pop("lookbench_archived_at", None)  # fetched now, not when a record it came from was
            return None  # a page no earlier attempt finished: fetched
        stats = self.crawler.stats
        flags = ["replayed", "resumed"] if self.resume else ["replayed"]
        rec = self.responses.get(key)
        if rec is not None:
            path, offset, date = rec
            status, headers, body = read_response_at(path, offset)
            request.meta["lookbench_archived_at"] = date
            if 300 <= status < 400:  # an archived redirect: to where it led, on the origin served now
                headers = [(k, self._location(url, v) if k.lower() == "location" else v) for k, v in headers]
                stats.inc_value("lookbench/resume/redirects" if self.resume else "lookbench/replay/redirects")
            stats.inc_value("lookbench/resume/served" if self.resume else "lookbench/replay/served")
            cls = responsetypes.from_args(headers={k: v for k, v in headers}, url=url, body=body)
            return cls(url=url, status=status, headers=headers, body=body, request=request, flags=flags)
        request.meta.pop("lookbench_archived_at", None)  # a redirect's copy of the record that led here
        if key in self.redirects:  # an archive of before redirects were records: the hop its page recorded
            code, location = self.redirects[key]
            stats.inc_value("lookbench/resume/redirects" if self.resume else "lookbench/replay/redirects")
            # no record of its own (an archive of before redirects and meta refreshes were records): the live crawl
            # wrote it no row, nor does this
            return Response(url=url, status=code, headers={"Location": location}, request=request,
                            flags=[*flags, UNRECORDED_HOP])
        if self.resume:
            # finished without a response record: none should be (a response is archived before the spider sees
            # it, and a page whose fetch got no response is not finished); fetching it now would archive a page
            # whose items the feed never had, and a replay would extract them
            stats.inc_value("lookbench/resume/finished_without_response")
            raise IgnoreRequest(f"finished_earlier: {url} failed in an earlier attempt of this crawl")
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
