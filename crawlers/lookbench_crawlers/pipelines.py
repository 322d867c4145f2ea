"""Item pipelines: stamp ``crawled_at`` (UTC, ISO 8601 with microseconds) and drop malformed items with a reason."""

from datetime import datetime, timezone

from scrapy.exceptions import DropItem

REQUIRED = {"product": ("url", "site"), "look": ("url", "site", "image_url"), "page": ("url", "site", "outcome")}


class StampAndValidatePipeline:
    def process_item(self, item, spider=None):
        kind = item.get("kind")
        if kind not in REQUIRED:
            raise DropItem(f"unknown item kind {kind!r}")
        missing = [f for f in REQUIRED[kind] if not item.get(f)]
        if missing:
            raise DropItem(f"{kind} item missing {missing}: {item.get('url')}")
        if not item.get("crawled_at"):
            item["crawled_at"] = datetime.now(timezone.utc).isoformat(timespec="microseconds")
        return item


import hashlib  # noqa: E402
import logging  # noqa: E402
from urllib.parse import urlsplit  # noqa: E402

from scrapy.pipelines.files import FilesPipeline  # noqa: E402


# The reasons an image URL is not stored (``image_downloads.reason``). Where the image intake has a reason of the
# same meaning (lookbench_pipeline.images.Reject), the name is the same: the intake passes the crawl's reason on.
# A download that got no response has the reason pages have (fetch_errors.fetch_error_reason, its one owner):
# download_timeout, too_large_bytes / download_cancelled, fetch_error:<tls|connection_refused|connect_failed|
# connection_lost|other:<class>>.
from lookbench_crawlers.fetch_errors import (  # noqa: E402,F401
    DOWNLOAD_CANCELLED, DOWNLOAD_TIMEOUT, FETCH_ERROR, TOO_LARGE)
from lookbench_crawlers.fetch_errors import causes as _chain  # noqa: E402
from lookbench_crawlers.fetch_errors import fetch_error_reason  # noqa: E402

EMPTY_FILE = "empty_file"  # HTTP 200 with no bytes (Reject.EMPTY)
TOO_MANY_IMAGES = "too_many_images"  # beyond MAX_IMAGES_PER_ITEM or MAX_IMAGES_PER_PAGE: never requested
HTTP_ERROR = "http_error"  # Scrapy's own "download-error" (a non-200 response is http_<status>, ImageRefused)
# TOO_LARGE (Reject.TOO_LARGE): over the size limit, Scrapy cancels the download; DOWNLOAD_CANCELLED: cancelled with
# no evidence of the size limit (the crawl stopping); DOWNLOAD_TIMEOUT: as middlewares.DownloadTimeout, the URL's
# download budget or a timeout; FETCH_ERROR alone: a bare FileException, no cause known


def _failure_reason(failure, url=""):
    """The reason an image download failed. Scrapy wraps every failure in a bare ``FileException`` (its
    ``media_failed`` raises it while handling the download's exception) or ``FileException("empty-content")``; the
    cause behind it names the reason: our own ``reason`` (``ImageRefused``: ``http_404``…; ``AddressRefused``;
    ``DownloadTimeout``), an empty body (``empty_file``), a body announced over ``DOWNLOAD_MAXSIZE``
    (``too_large_bytes``: Scrapy's get_maxsize_msg), and any other exception without a response as a page's
    (:func:`lookbench_crawlers.fetch_errors.fetch_error_reason`: ``download_timeout``, ``download_cancelled``,
    ``fetch_error:connection_refused``…)."""
    from lookbench_crawlers.middlewares import refusal_reason

    exc = getattr(failure, "value", failure)
    refused = refusal_reason(exc, urlsplit(url).hostname or "")
    if refused:
        return refused
    chain = _chain(exc)
    for cause in chain:  # Scrapy may wrap our exception (FileException from ImageRefused)
        if getattr(cause, "reason", None) and isinstance(cause.reason, str):
            return cause.reason
    for cause in chain:
        name, text = type(cause).__name__, str(cause).lower()
        if name == "FileException" and text == "empty-content":
            return EMPTY_FILE
        if "download max size" in text:  # Scrapy's get_maxsize_msg: the announced size is over DOWNLOAD_MAXSIZE
            return TOO_LARGE
        # a body that grew over the limit is cancelled bare (http11's _ResponseReader), but so is a download the
        # crawl's shutdown cancels: too_large_bytes only with the evidence (ImageDownloadPipeline.media_failed turns
        # a cancel after more bytes than the limit into ImageRefused(too_large_bytes), caught above); a bare cancel
        # is download_cancelled (fetch_error_reason, below)
    text = str(exc).lower()
    for known in ("host_not_allowed", "address_not_global", "port_not_allowed", "name_not_resolved"):
        if text.startswith(known):
            return known
    if "robots" in text:
        return "robots_disallowed"
    if "offsite" in text or "filtered" in text:
        return "host_not_allowed"
    root = chain[-1]
    if type(root).__name__ == "FileException":
        return HTTP_ERROR if str(root) == "download-error" else FETCH_ERROR
    if type(root).__name__ == "IgnoreRequest":
        return "ignored"
    return fetch_error_reason(exc)


UNSUPPORTED_SCHEME = "unsupported_scheme"
MALFORMED_URL = "malformed_url"  # an http(s) URL that does not parse (http://[::1/x) or names no host


def unfetchable_reason(url: str) -> str:
    """Why an image URL :func:`fetchable` refuses is not requested: ``unsupported_scheme`` (``file:``, ``data:``,
    ``javascript:``…) or ``malformed_url`` (http(s), but no URL: an unclosed IPv6 bracket, no host)."""
    return MALFORMED_URL if url.strip().lower().startswith(("http://", "https://")) else UNSUPPORTED_SCHEME


def fetchable(url: str) -> bool:
    """Only http(s) image URLs are requested; any other (``file:``, ``data:``, ``javascript:``, ``ftp:``…, which
    Scrapy's own download handlers would read: a ``file:`` URL is this machine's file) is recorded
    ``unsupported_scheme`` and never fetched."""
    u = url.strip()
    if not u.lower().startswith(("http://", "https://")):
        return False
    try:  # a malformed URL (http://[::1/x: an unclosed bracket) would raise in scrapy.Request: never requested
        return bool(urlsplit(u).hostname)
    except ValueError:
        return False


MAX_IMAGES_PER_ITEM = 100
"""How many image URLs of one product or look are requested: the first ones in page order. Real product pages name
far fewer (the most among the saved real pages in the test data is 13); a hostile page naming thousands would hold
the crawl for minutes. The URLs beyond are recorded ``too_many_images`` and never requested (a URL of another
scheme than http(s) stays ``unsupported_scheme`` and is not counted)."""


MAX_IMAGES_PER_PAGE = 1000
"""How many distinct image URLs the items of one page (``from_page``, else the item's ``url``) request together,
in the order the items come: the per-item cap alone lets a hostile page of 1,000 products × 100 URLs make 100,000
requests. A URL another item of the page requested already is not counted again; one beyond the bound is recorded
``too_many_images`` and never requested. Memory: a set of 64-bit URL hashes per page (at most this many), dropped
when the page's own item passes (it follows its products and look), and at most ``PAGES_TRACKED`` pages held."""
PAGES_TRACKED = 256
"""At most this many pages' sets are held (the least recently used dropped first): a page's items come together,
so only pages whose items are still passing need one; a dropped page starts a new count (18 MB when all are full:
BENCHMARKS.md, "The crawl's bounded bookkeeping")."""


def capped(urls):
    """The fetchable URLs of ``urls`` that are requested: the first ``MAX_IMAGES_PER_ITEM``, in order."""
    return [u for u in urls if fetchable(u)][:MAX_IMAGES_PER_ITEM]


def url_hash(url):
    """A URL as a 64-bit int (BLAKE2b): what the crawl's bounded sets remember of a URL (the per-page image bound
    here, the spider's max_pages cut beyond its rows)."""
    return int.from_bytes(hashlib.blake2b(url.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")


def _page_of(item):
    return item.get("from_page") or item.get("url") or ""


logger = logging.getLogger(__name__)


class ImageRefused(Exception):
    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


try:  # a media failure of this class is expected: Scrapy logs it without a traceback (its filtered requests')
    from scrapy.pipelines.media import _MediaRequestFiltered as _ExpectedMediaFailure
except ImportError:  # pragma: no cover - a Scrapy without it logs the failure at ERROR, as any other
    from scrapy.pipelines.media import FileException as _ExpectedMediaFailure


class ImageNotStored(_ExpectedMediaFailure):
    """An image download that ended in a known reason (``http_404``, an egress refusal, ``download_timeout``…):
    an expected outcome, recorded as the image's row; logged as one INFO line, no traceback."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


class ImageDownloadPipeline(FilesPipeline):
    """Downloads every product and look image during the crawl (through the same robots.txt, address policy and
    throttling as pages) into ``FILES_STORE/images/<sha1 of URL>``, and records per image URL either the stored
    path or the reason it failed, in the item's ``images`` field: ``[{url, path, reason}]``; an URL with another
    scheme than http(s) is not requested: its reason is ``unsupported_scheme``; nor are the fetchable URLs of one
    item beyond ``MAX_IMAGES_PER_ITEM``, nor those of one page beyond ``MAX_IMAGES_PER_PAGE``: ``too_many_images``."""

    def open_spider(self, spider=None):
        from scrapy import signals

        super().open_spider(spider)
        self.crawler.signals.connect(self._bytes_received, signal=signals.bytes_received)

    def _bytes_received(self, data, request, spider=None):
        """Count an image download's body bytes (``meta["lookbench_size"]``, shared with a redirect's request):
        Scrapy cancels a body that grows over the request's ``download_maxsize`` with a bare CancelledError and
        only logs why, so this count is the evidence that a cancel was the size limit (``media_failed``)."""
        box = request.meta.get("lookbench_size")
        if box is None:
            return
        if box.get("request") != id(request):  # a redirect's request: its body alone counts
            box.update(request=id(request), received=0)
        box["received"] += len(data)
        limit = request.meta.get("download_maxsize", self.crawler.settings.getint("DOWNLOAD_MAXSIZE"))
        if limit and box["received"] > limit:
            box["over"] = True

    def media_failed(self, failure, request, info):
        """A failed image download whose reason is known (a refused answer, an egress refusal, a fetch error of
        the stable vocabulary) is an expected outcome the image's row records: one INFO line, no traceback
        (:class:`ImageNotStored`). Anything else (``fetch_error:other:…``, a failure storing the file) goes to
        Scrapy's handling, logged at ERROR with its traceback. A fetch that got no response after an earlier
        attempt's error answer (a 500, then a timeout) is that answer, ``http_<status>``, as a page's row."""
        from twisted.internet.defer import CancelledError

        from scrapy.utils.request import referer_str

        from lookbench_crawlers.middlewares import last_answer

        exc = failure.value
        if (request.meta.get("lookbench_size") or {}).get("over") and any(
                isinstance(e, CancelledError) for e in _chain(exc)):
            reason = TOO_LARGE
        else:
            reason = _failure_reason(failure, request.url)
            if last_answer(request) and (reason == DOWNLOAD_TIMEOUT or reason.startswith(f"{FETCH_ERROR}:")):
                reason = f"http_{last_answer(request)}"  # no response this time; the server's last answer
        if reason.startswith(f"{FETCH_ERROR}:other") or reason == FETCH_ERROR:
            return super().media_failed(failure, request, info)
        logger.info("Image not stored (%s): %s referred in <%s>", reason, request, referer_str(request),
                    extra={"spider": info.spider})
        raise ImageNotStored(reason) from exc

    def get_media_requests(self, item, info):
        import scrapy

        if item.get("kind") == "page":  # a page's own item follows its products and look: its count is done
            self._page_images().pop(item.get("url") or "", None)
            return []
        if item.get("images_refused"):  # the page opted its images out: none is fetched
            return []
        urls = item.get("image_urls") or ([item["image_url"]] if item.get("image_url") else [])
        # an image may be as large as the image intake takes (images.max_bytes, passed by the pipeline as
        # LOOKBENCH_IMAGE_MAX_BYTES), not the pages' DOWNLOAD_MAXSIZE; over it: too_large_bytes, as the intake says
        meta = {"lookbench_media": True}
        limit = self.crawler.settings.getint("LOOKBENCH_IMAGE_MAX_BYTES", 0)
        if limit > 0:
            meta["download_maxsize"] = limit
        wanted = capped(urls)
        over = self._over_page_bound(_page_of(item), wanted)
        if over:
            self._beyond_page()[id(item)] = over
        return [scrapy.Request(u, meta={**meta, "lookbench_size": {"received": 0}}) for u in wanted if u not in over]

    def _page_images(self):
        from collections import OrderedDict

        if not hasattr(self, "_pages"):
            self._pages = OrderedDict()  # page URL -> hashes of the image URLs its items requested (LRU)
        return self._pages

    def _beyond_page(self):
        if not hasattr(self, "_beyond"):
            self._beyond = {}  # id(item) -> its URLs beyond MAX_IMAGES_PER_PAGE, until item_completed
        return self._beyond

    def _over_page_bound(self, page, urls):
        """The URLs of ``urls`` (one item's, capped) that the page's bound refuses; the others are counted."""
        pages = self._page_images()
        seen = pages.pop(page, None)
        seen = set() if seen is None else seen
        pages[page] = seen  # the most recently used last
        while len(pages) > PAGES_TRACKED:
            pages.popitem(last=False)
        over = set()
        for u in urls:
            h = url_hash(u)
            if h in seen:
                continue
            if len(seen) < MAX_IMAGES_PER_PAGE:
                seen.add(h)
            else:
                over.add(u)
        return over

    async def media_downloaded(self, response, request, info, *, item=None):
        if response.status != 200:
            raise ImageRefused(f"http_{response.status}")
        if not response.body:  # Scrapy's own check would log a warning too: the row says it (empty_file)
            raise ImageRefused(EMPTY_FILE)
        # X-Robots-Tag: noimageindex / noai / none forbid using the image (Google's and the AI-opt-out meanings);
        # a value may be scoped to a user agent ("googlebot: noimageindex"), which we honour as well.
        tags = ",".join(v.decode("latin-1") for v in response.headers.getlist("X-Robots-Tag")).lower()
        words = {t.strip().split(":")[-1].strip() for t in tags.split(",") if t.strip()}
        for word in ("noimageindex", "noai", "none"):
            if word in words:
                raise ImageRefused(f"x_robots_tag_{word}")
        return await super().media_downloaded(response, request, info, item=item)

    def file_path(self, request, response=None, info=None, *, item=None):
        return "images/" + hashlib.sha1(request.url.encode()).hexdigest()

    def item_completed(self, results, item, info):
        if item.get("kind") not in ("product", "look"):
            return item
        urls = item.get("image_urls") or ([item["image_url"]] if item.get("image_url") else [])
        if item.get("images_refused"):
            item["images"] = [{"url": u, "path": None, "reason": item["images_refused"]} for u in urls]
            return item
        out = []
        beyond_page = self._beyond_page().pop(id(item), set())
        fetched = iter(results)  # one result per requested URL, in order (get_media_requests)
        n_fetchable = 0
        for url in urls:
            if not fetchable(url):
                out.append({"url": url, "path": None, "reason": unfetchable_reason(url)})
                continue
            n_fetchable += 1
            if n_fetchable > MAX_IMAGES_PER_ITEM or url in beyond_page:
                out.append({"url": url, "path": None, "reason": TOO_MANY_IMAGES})
                continue
            ok, res = next(fetched)
            if ok:
                out.append({"url": url, "path": res["path"], "reason": None})
            else:
                out.append({"url": url, "path": None, "reason": _failure_reason(res, url)})
        item["images"] = out
        return item
