"""Every response the crawl fetches, archived as WARC records (warcio), one gzipped WARC file per crawl.

Two downloader middlewares write them: :class:`WarcArchiveMiddleware` (60) every response as the spider and the
image pipeline get it (decompressed), and :class:`WarcRedirectArchiveMiddleware` (650) every redirect (3xx with a
``Location``) as received, before ``RedirectScopeMiddleware`` and Scrapy's RedirectMiddleware replace it: a
``response`` record of its own with its status and headers, as web archives store redirects, so a replay answers
the URL with the same redirect and the crawl's rows follow (a page reached through it, ``redirect:<why>``). A
page left by a ``<meta http-equiv="refresh">`` is archived by ``middlewares.MetaRefreshScopeMiddleware`` (580) as
the spider would have had it, marked ``WARC-LookBench-Meta-Refresh`` (the target), and an attempt Scrapy's
RetryMiddleware retries by :class:`WarcRetryArchiveMiddleware` (550), marked ``WARC-LookBench-Retried``: every
exchange is a record, and a replay answers a URL with the attempt that was not retried (with its last
retried one when that crawl attempt got no other answer).

A request record and a response record per response, appended as independent gzip members, so a crawl killed
mid-way leaves a readable file up to the last whole record. Responses served from the HTTP cache after a
``304 Not Modified`` revalidation are archived with the cached payload and the header
``X-LookBench-Revalidated: 304``, so each crawl's WARC holds every page it used.

Each response's fetch time (UTC, microseconds) is put in ``request.meta["lookbench_fetched_at"]`` and written as
the record's ``WARC-Date`` (WARC/1.1): items from the page carry it as ``crawled_at``
(``lookbench_crawlers.replay.FetchTimeMiddleware``), so a replay of the archive reproduces them. A response
reached through redirects records the chain in ``WARC-LookBench-Redirect-From`` (``status|url`` hops, in order;
a meta refresh, which is no 3xx, is the hop ``meta-refresh|url``). A refused
redirect's or an HTTP error's row is stamped with its response's fetch time too (``ShopSpider.on_error``).
A replayed response keeps its archived time. With the setting ``LOOKBENCH_ATTEMPT`` (the attempt of a resumed
crawl, 1 first) every record carries it as ``WARC-LookBench-Attempt``, so a replay takes a page's latest fetch.
A page an earlier attempt finished, answered from this crawl's WARC on a resume (flag ``resumed``,
``replay.WarcReplayMiddleware``), is not archived again: that attempt's record is the one whose items were kept.
"""

from __future__ import annotations

import io
import threading
from datetime import datetime, timezone

from scrapy.downloadermiddlewares.retry import RetryMiddleware
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from lookbench_pipeline.warc import RETRIED_HEADER


ARCHIVED = "warc_archived"
"""Flag of a response archived already (a redirect, by :class:`WarcRedirectArchiveMiddleware`): not written twice."""

REDIRECT_STATUSES = (301, 302, 303, 307, 308)


def _hop(reason, url):
    """One hop of ``WARC-LookBench-Redirect-From``: ``code|url``, the code one token (Scrapy's meta refresh
    reason, "meta refresh", would split the header's space-separated list: written ``meta-refresh``)."""
    return f"{str(reason).replace(' ', '-')}|{url}"


class WarcArchiveMiddleware:
    def __init__(self, path: str | None, attempt: str | None = None):
        self.path = path
        self.attempt = attempt
        self.lock = threading.Lock()

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler.settings.get("LOOKBENCH_WARC_PATH"), crawler.settings.get("LOOKBENCH_ATTEMPT"))

    def process_response(self, request, response, spider=None):
        if ARCHIVED in response.flags:  # a redirect (or its copy) archived nearer the downloader
            return response
        return self.archive(request, response)

    def archive(self, request, response, extra=None):
        """Write ``response`` (and its request) to the crawl's WARC, ``extra`` record headers added to its response
        record; returns the response."""
        fetched_at = request.meta.get("lookbench_archived_at") or \
            datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        request.meta["lookbench_fetched_at"] = fetched_at
        if not self.path or "resumed" in response.flags:  # answered from this crawl's WARC: archived already
            return response
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, vs in response.headers.items() for v in vs]
        if "cached" in response.flags:
            headers.append(("X-LookBench-Revalidated", "304"))
        status = f"{response.status} {HTTP_REASONS.get(response.status, '')}".strip()
        req_headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, vs in request.headers.items() for v in vs]
        buf = io.BytesIO()
        writer = WARCWriter(buf, gzip=True, warc_version="1.1")
        rec_headers = {"WARC-Date": fetched_at}
        if self.attempt:
            rec_headers["WARC-LookBench-Attempt"] = str(self.attempt)
        reasons = request.meta.get("redirect_reasons") or []
        hops = [_hop(reasons[i] if i < len(reasons) else 302, u)
                for i, u in enumerate(request.meta.get("redirect_urls") or [])]
        req = writer.create_warc_record(
            request.url, "request", payload=io.BytesIO(request.body or b""), warc_headers_dict=dict(rec_headers),
            http_headers=StatusAndHeaders(f"{request.method} {request.url} HTTP/1.1", req_headers,
                                          is_http_request=True))
        if hops:
            rec_headers["WARC-LookBench-Redirect-From"] = " ".join(hops)
        rec_headers.update(extra or {})
        resp = writer.create_warc_record(
            response.url, "response", payload=io.BytesIO(response.body), warc_headers_dict=rec_headers,
            http_headers=StatusAndHeaders(status, headers, protocol="HTTP/1.1"))
        resp.rec_headers.add_header("WARC-Concurrent-To", req.rec_headers.get_header("WARC-Record-ID"))
        writer.write_record(req)
        writer.write_record(resp)
        with self.lock, open(self.path, "ab") as fh:
            fh.write(buf.getvalue())
        return response


HTTP_REASONS = {200: "OK", 301: "Moved Permanently", 302: "Found", 303: "See Other", 307: "Temporary Redirect",
                308: "Permanent Redirect"}


class WarcRedirectArchiveMiddleware(WarcArchiveMiddleware):
    """Archives every redirect (3xx with a ``Location``) as its own ``response`` record, its status and headers as
    received, the way web archives (Heritrix, wget, pywb) store them: it sits nearer the downloader than
    ``middlewares.RedirectScopeMiddleware`` (610) and Scrapy's RedirectMiddleware (600), which replace a redirect
    by the next request or by the row ``redirect:<why>``, so neither response would reach
    :class:`WarcArchiveMiddleware` (60). A replay answers the URL with the same redirect
    (``replay.WarcReplayMiddleware``). The response is flagged archived, so a redirect that is not followed
    (``dont_redirect``) is not written again."""

    def process_response(self, request, response, spider=None):
        if response.status not in REDIRECT_STATUSES or b"Location" not in response.headers \
                or ARCHIVED in response.flags:
            return response
        response.flags.append(ARCHIVED)
        return self.archive(request, response)


class WarcRetryArchiveMiddleware(RetryMiddleware):
    """Scrapy's RetryMiddleware (550, which it replaces), each attempt it retries archived: a 503 the next attempt
    replaces never reaches :class:`WarcArchiveMiddleware` (60), yet it is an exchange the crawl made. Its record
    carries ``WARC-LookBench-Retried`` (the attempt's number, 1 first), and neither a replay
    (``replay.read_archive``, unless its crawl attempt left no other answer) nor the WARC reader
    (``extract_from_warc``) takes it for the URL's answer, which is the last attempt's record, unmarked, as before:
    the replay answers the final response at once (the retries are not replayed, the rows and items are the same).
    An attempt that is not retried (a success, the last of the retries) is archived by
    :class:`WarcArchiveMiddleware` as every response is."""

    @classmethod
    def from_crawler(cls, crawler):
        o = super().from_crawler(crawler)
        o.archiver = WarcArchiveMiddleware.from_crawler(crawler)
        return o

    def process_response(self, request, response, spider=None):
        result = super().process_response(request, response)
        if result is not response and ARCHIVED not in response.flags:  # retried: the next attempt replaces it
            response.flags.append(ARCHIVED)
            self.archiver.archive(request, response, {RETRIED_HEADER: str(request.meta.get("retry_times", 0) + 1)})
        return result
