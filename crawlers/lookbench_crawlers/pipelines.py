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

from scrapy.pipelines.files import FilesPipeline  # noqa: E402


def _failure_reason(failure, url=""):
    from urllib.parse import urlsplit

    from lookbench_crawlers.middlewares import refusal_reason

    exc = getattr(failure, "value", failure)
    refused = refusal_reason(exc, urlsplit(url).hostname or "")
    if refused:
        return refused
    cause = exc
    while cause is not None:  # Scrapy may wrap our exception (FileException from ImageRefused)
        if getattr(cause, "reason", None):
            return cause.reason
        cause = cause.__cause__ or cause.__context__
    name = type(exc).__name__
    text = str(exc).lower()
    for known in ("host_not_allowed", "address_not_global", "port_not_allowed", "name_not_resolved"):
        if text.startswith(known):
            return known
    if "robots" in text:
        return "robots_disallowed"
    if "offsite" in text or "filtered" in text:
        return "host_not_allowed"
    if name == "FileException":
        return "http_error"
    if name == "IgnoreRequest":
        return "ignored"
    return "fetch_error"


UNSUPPORTED_SCHEME = "unsupported_scheme"


def fetchable(url: str) -> bool:
    """Only http(s) image URLs are requested; any other (``file:``, ``data:``, ``javascript:``, ``ftp:``…, which
    Scrapy's own download handlers would read: a ``file:`` URL is this machine's file) is recorded
    ``unsupported_scheme`` and never fetched."""
    return url.strip().lower().startswith(("http://", "https://"))


class ImageRefused(Exception):
    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


class ImageDownloadPipeline(FilesPipeline):
    """Downloads every product and look image during the crawl (through the same robots.txt, address policy and
    throttling as pages) into ``FILES_STORE/images/<sha1 of URL>``, and records per image URL either the stored
    path or the reason it failed, in the item's ``images`` field: ``[{url, path, reason}]``; an URL with another
    scheme than http(s) is not requested: its reason is ``unsupported_scheme``."""

    def get_media_requests(self, item, info):
        import scrapy

        if item.get("images_refused"):  # the page opted its images out: none is fetched
            return []
        urls = item.get("image_urls") or ([item["image_url"]] if item.get("image_url") else [])
        return [scrapy.Request(u, meta={"lookbench_media": True}) for u in urls if fetchable(u)]

    async def media_downloaded(self, response, request, info, *, item=None):
        if response.status != 200:
            raise ImageRefused(f"http_{response.status}")
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
        fetched = iter(results)  # one result per requested URL, in order (get_media_requests)
        for url in urls:
            if not fetchable(url):
                out.append({"url": url, "path": None, "reason": UNSUPPORTED_SCHEME})
                continue
            ok, res = next(fetched)
            if ok:
                out.append({"url": url, "path": res["path"], "reason": None})
            else:
                out.append({"url": url, "path": None, "reason": _failure_reason(res, url)})
        item["images"] = out
        return item
