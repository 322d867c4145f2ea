"""Every response the spider handles, archived as WARC records (warcio), one gzipped WARC file per crawl.

A request record and a response record per response, appended as independent gzip members, so a crawl killed
mid-way leaves a readable file up to the last whole record. Responses served from the HTTP cache after a
``304 Not Modified`` revalidation are archived with the cached payload and the header
``X-LookBench-Revalidated: 304``, so each crawl's WARC holds every page it used.
"""

from __future__ import annotations

import io
import threading

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter


class WarcArchiveMiddleware:
    def __init__(self, path: str | None):
        self.path = path
        self.lock = threading.Lock()

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler.settings.get("LOOKBENCH_WARC_PATH"))

    def process_response(self, request, response, spider=None):
        if not self.path:
            return response
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, vs in response.headers.items() for v in vs]
        if "cached" in response.flags:
            headers.append(("X-LookBench-Revalidated", "304"))
        status = f"{response.status} {'OK' if response.status == 200 else ''}".strip()
        req_headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, vs in request.headers.items() for v in vs]
        buf = io.BytesIO()
        writer = WARCWriter(buf, gzip=True)
        req = writer.create_warc_record(
            request.url, "request", payload=io.BytesIO(request.body or b""),
            http_headers=StatusAndHeaders(f"{request.method} {request.url} HTTP/1.1", req_headers, is_http_request=True))
        resp = writer.create_warc_record(
            response.url, "response", payload=io.BytesIO(response.body),
            http_headers=StatusAndHeaders(status, headers, protocol="HTTP/1.1"))
        resp.rec_headers.add_header("WARC-Concurrent-To", req.rec_headers.get_header("WARC-Record-ID"))
        writer.write_record(req)
        writer.write_record(resp)
        with self.lock, open(self.path, "ab") as fh:
            fh.write(buf.getvalue())
        return response
