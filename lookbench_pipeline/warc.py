"""Re-running extraction from a crawl's WARC archive alone, without the network: the audit trail of a release.

``extract_from_warc`` reads every HTML ``response`` record (warcio) and applies the same extractors the spider
applies, so a past crawl's products can be rebuilt and checked byte for byte against what it recorded.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from warcio.archiveiterator import ArchiveIterator

from .config import SiteConfig
from .extract import decode_html, extract_look, extract_products

log = logging.getLogger(__name__)

META_REFRESH_HEADER = "WARC-LookBench-Meta-Refresh"
"""Record header of a page the crawl left by a ``<meta http-equiv="refresh">`` it followed (its value: the target):
a hop like a 3xx's record, not a page (``lookbench_crawlers.middlewares.MetaRefreshScopeMiddleware``)."""
RETRIED_HEADER = "WARC-LookBench-Retried"
"""Record header of a response Scrapy's RetryMiddleware retried (a 503 before the 200; its value: the attempt's
number, 1 first): a record of the exchange; the WARC reader never takes it for the URL's answer, a replay only when
its crawl attempt left no other (``lookbench_crawlers.replay.read_archive``)."""


def is_retried(rec: Any) -> bool:
    """Whether a response record is an attempt that was retried (:data:`RETRIED_HEADER`): a replay answers
    it only when its URL has no other record, and the WARC reader never takes it."""
    return bool(rec.rec_headers.get_header(RETRIED_HEADER))


def response_records(paths: Iterable[str | Path],
                     want: Callable[[Any], bool] | None = None) -> Iterator[tuple[Any, bytes]]:
    """``(record, body)`` of every ``response`` record of the WARC files that ``want(record)`` accepts (all when
    None; the body of a refused record is never read), in file order. A torn last record (a crawl killed
    mid-write: warcio's ``ArchiveLoadFailed`` or a zlib error) ends that file's iteration without an error."""
    for path in paths:
        with open(path, "rb") as fh:
            try:
                for rec in ArchiveIterator(fh):
                    if rec.rec_type != "response" or (want is not None and not want(rec)):
                        continue
                    yield rec, rec.content_stream().read()
            except Exception as exc:  # noqa: BLE001 - a torn tail, see above
                log.info("%s: WARC ends in a torn record (%s: %s); the records before it are read", path,
                         type(exc).__name__, exc)


def response_offsets(paths: Iterable[str | Path]) -> Iterator[tuple[Any, str, int]]:
    """``(record, path, offset)`` of every ``response`` record of the WARC files, in file order, without reading
    any body: ``offset`` (bytes) is where the record's gzip member starts in ``path``, for
    :func:`read_response_at`. The record's headers are valid until the next record is yielded. A torn last record
    ends that file's iteration without an error, as in :func:`response_records`. An index built from this holds
    a few hundred bytes a record, whatever the bodies weigh (a resumed or replayed crawl of 10,000 pages of
    400 KB would otherwise hold 4 GB)."""
    for path in paths:
        with open(path, "rb") as fh:
            it = ArchiveIterator(fh)
            try:
                for rec in it:
                    if rec.rec_type == "response":
                        yield rec, str(path), it.get_record_offset()
            except Exception as exc:  # noqa: BLE001 - a torn tail
                log.info("%s: WARC ends in a torn record (%s: %s); the records before it are read", path,
                         type(exc).__name__, exc)


def read_response_at(path: str | Path, offset: int) -> tuple[int, list[tuple[str, str]], bytes]:
    """``(HTTP status, [(header, value)], body)`` of the response record whose gzip member starts at ``offset``
    bytes into the WARC file ``path`` (an offset :func:`response_offsets` gave). The body is decoded (warcio's
    ``content_stream``: chunks joined, a ``Content-Encoding`` it knows undone; a redirect is archived as received,
    its body maybe gzipped), and the headers say so: without the ``Content-Encoding`` undone. Raises
    ``ValueError`` when no response record starts there (the file changed since it was indexed)."""
    from warcio.bufferedreaders import BufferedReader

    with open(path, "rb") as fh:
        fh.seek(offset)
        for rec in ArchiveIterator(fh):
            if rec.rec_type != "response":
                break
            status = int(rec.http_headers.get_statuscode() or 200)
            decoded = BufferedReader.get_supported_decompressors()
            headers = [(k, v) for k, v in rec.http_headers.headers
                       if not (k.lower() == "content-encoding" and v.strip().lower() in decoded)]
            return status, headers, rec.content_stream().read()
    raise ValueError(f"{path}: no WARC response record at offset {offset}")


def _content_type(rec: Any) -> str:
    return rec.http_headers.get_header("Content-Type") or ""


def _status(rec: Any) -> int:
    """A response record's HTTP status (200 when it names none, as :func:`read_response_at` reads it)."""
    try:
        return int(rec.http_headers.get_statuscode() or 200)
    except ValueError:
        return 0


def _is_redirect(rec: Any) -> bool:
    return (rec.http_headers.get_statuscode() or "").startswith("3")


def truncate_torn_tail(path: Path) -> int:
    """Cut a WARC file back to its last whole gzip member (each record is one: a crawl killed mid-write leaves a
    torn member, and records appended after it would be unreadable); returns the number of bytes removed (0 when
    whole). A member is whole when zlib reaches its end with a valid trailer; the file is streamed, 1 MiB a read."""
    import zlib

    path = Path(path)
    if not path.is_file():
        return 0
    size = path.stat().st_size
    good = 0
    with open(path, "rb") as fh:
        while good < size:
            fh.seek(good)
            d = zlib.decompressobj(wbits=31)
            consumed = 0
            try:
                while not d.eof:
                    chunk = fh.read(1 << 20)
                    if not chunk:
                        break
                    consumed += len(chunk)
                    d.decompress(chunk)
            except zlib.error:
                break
            if not d.eof:
                break
            good += consumed - len(d.unused_data)
    if good < size:
        log.info("%s: torn record after byte %d of %d: cut", path, good, size)
        with open(path, "r+b") as fh:
            fh.truncate(good)
    return size - good


def extract_from_warc(paths: Iterable[Path], site: SiteConfig, agent: str = "lookbenchbot") -> list[dict]:
    """Products and looks found in the archived pages: dicts with ``kind`` (product | look), ``url`` and the
    extracted fields, as the spider yields them (without ``crawled_at``). A page that opted out of indexing
    (``optout``: ``noindex`` for ``agent``) gives nothing; one that opted its images out gives its items with
    ``images_refused``; one whose extraction raised gives the spider's rejection record (``kind`` page,
    ``outcome`` rejected, ``reason`` ``extraction_error:<exception type>``) and the other pages are still read.

    Only a 2xx response is a page: the spider never parses another (Scrapy's HttpErrorMiddleware hands it to the
    errback, whose row is ``http_<status>``), so an archived error page (a 404 "product not found" that still
    carries a product's JSON-LD, a 500) gives no item, only that rejection record (``kind`` page, ``status`` the
    record's, ``outcome`` rejected, ``reason`` ``http_<status>``, ``n_items`` 0), the live crawl's and the replay's
    row for the page. A redirect's own record (3xx, archived by ``WarcRedirectArchiveMiddleware``, or a page left by
    a meta refresh, :data:`META_REFRESH_HEADER`) is a hop, not a page, and gives nothing, whatever its Content-Type:
    no item, and no rejection (the live crawl's row for a followed redirect is ``redirected``, neither kept nor
    rejected, and its target has its own row; a refused one is ``redirect:<why>`` in the crawl log, which this
    reader does not rebuild); nor does an attempt that was retried (:data:`RETRIED_HEADER`: the URL's row is its
    last attempt's). So the counts are: the 2xx HTML records are the pages read (each gives its items, nothing
    when opted out, or its ``extraction_error`` rejection), every other HTML record that is no hop nor retried is
    one ``http_<status>`` rejection, and a hop or a retried attempt is neither."""
    from .optout import NOIMAGEINDEX, NOINDEX, html_optout

    out = []
    # a redirect's own record (3xx, a meta refresh) is a hop, not a page: the spider never parses one (its row, if
    # any, is no item); a retried attempt is not the URL's answer
    html = lambda r: ("html" in _content_type(r).lower() and not _is_redirect(r)  # noqa: E731
                      and not r.rec_headers.get_header(META_REFRESH_HEADER) and not is_retried(r))
    for rec, body in response_records(paths, html):
        url, ctype = rec.rec_headers.get_header("WARC-Target-URI"), _content_type(rec)
        status = _status(rec)
        if not 200 <= status < 300:  # an error page: never parsed, as in the spider; its row is the errback's
            out.append({"kind": "page", "site": site.name, "url": url, "status": status, "outcome": "rejected",
                        "reason": f"http_{status}", "n_items": 0})
            continue
        text, _ = decode_html(body, ctype)
        headers = [v for k, v in rec.http_headers.headers if k.lower() == "x-robots-tag"]
        optout = html_optout(headers, text, agent)
        if optout == NOINDEX:
            continue
        refused = {"images_refused": NOIMAGEINDEX} if optout == NOIMAGEINDEX else {}
        try:
            products = extract_products(text, url, site.product_rules)
            look = extract_look(text, url, site.look_rules)
        except Exception as exc:  # as in the spider: one hostile page is a named rejection, not a lost archive
            log.warning("extraction failed on %s: %r", url, exc)
            out.append({"kind": "page", "site": site.name, "url": url, "status": status,
                        "outcome": "rejected", "reason": f"extraction_error:{type(exc).__name__}", "n_items": 0})
            continue
        for i, p in enumerate(products):
            out.append({"kind": "product", "site": site.name, "url": url, "page_position": i, **p, **refused})
        if look:
            out.append({"kind": "look", "site": site.name, "url": url, **look, **refused})
    return out


def warcinfo_record(fields: dict[str, str]) -> bytes:
    """A gzipped WARC/1.1 ``warcinfo`` record whose payload is ``fields`` as ``name: value`` lines (WARC 1.1,
    section 6.4): put first in an archived crawl's WARC file, it says what the crawl was (site, the base URL it was
    served from, the crawl partition, when it started) so the archive can be replayed without anything else."""
    import io

    from warcio.warcwriter import WARCWriter

    buf = io.BytesIO()
    writer = WARCWriter(buf, gzip=True, warc_version="1.1")
    writer.write_record(writer.create_warcinfo_record("crawl.warc.gz", dict(fields)))
    return buf.getvalue()


def read_warcinfo(path: Path) -> dict[str, str]:
    """The fields of the first ``warcinfo`` record of a WARC file ({} when the file starts with another record).
    When the file has no warcinfo, ``started-at`` is the first record's ``WARC-Date``."""
    with open(path, "rb") as fh:
        for rec in ArchiveIterator(fh):
            if rec.rec_type == "warcinfo":
                text = rec.content_stream().read().decode("utf-8", "replace")
                return {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in text.splitlines()) if k}
            return {"started-at": rec.rec_headers.get_header("WARC-Date") or ""}
    return {}


def serving_origins(paths: Iterable[Path], base_url: str) -> list[str]:
    """The origins an archived crawl served ``{{BASE}}`` from, oldest first, ``base_url`` last, for an archive
    whose description names only ``base_url`` (archived before ``base-urls``): a crawl resumed after a kill was
    served from another port of the same host each attempt, so the archive's response records on the same scheme
    and host as ``base_url`` and another port are earlier attempts', in the order they first appear."""
    from urllib.parse import urlsplit

    base = base_url.rstrip("/")
    if not base:
        return []
    want = urlsplit(base)
    seen: dict[str, None] = {}
    for path in paths:
        with open(path, "rb") as fh:
            try:
                for rec in ArchiveIterator(fh):
                    if rec.rec_type != "response":
                        continue
                    parts = urlsplit(rec.rec_headers.get_header("WARC-Target-URI") or "")
                    if (parts.scheme, parts.hostname) == (want.scheme, want.hostname):
                        seen.setdefault(f"{parts.scheme}://{parts.netloc}", None)
            except Exception as exc:  # noqa: BLE001 - a torn tail: the records before it are read
                log.info("%s: WARC ends in a torn record (%s)", path, exc)
    return [o for o in seen if o != base] + [base]
