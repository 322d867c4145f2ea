"""Downloader middleware that refuses hosts outside the site's allow-list and private / loopback / link-local
addresses (unless the site config allows them), before any connection is opened."""

import ipaddress
import socket
from urllib.parse import urlsplit

from scrapy.exceptions import IgnoreRequest


class AddressRefused(IgnoreRequest):
    def __init__(self, reason, url):
        super().__init__(f"{reason}: {url}")
        self.reason = reason


def is_private_host(host):
    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror:
        return False
    for info in infos:
        ip = ipaddress.ip_address(info[4][0])
        if ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_reserved or ip.is_multicast:
            return True
    return False


class AddressPolicyMiddleware:
    def __init__(self, crawler=None):
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler)

    def process_request(self, request, spider=None):
        spider = spider or getattr(self.crawler, "spider", None)
        policy = getattr(spider, "address_policy", None)
        if policy is None:
            return None
        allowed_hosts, allow_private = policy
        if request.meta.get("lookbench_media"):
            allowed_hosts = allowed_hosts | getattr(spider, "image_hosts", set())
        parts = urlsplit(request.url)
        host = (parts.hostname or "").lower()
        if allowed_hosts and host not in allowed_hosts and parts.netloc.lower() not in allowed_hosts:
            raise AddressRefused("host_not_allowed", request.url)
        # a replay (LOOKBENCH_REPLAY_WARC) resolves no names: it answers from the archive, and DNS is network
        replaying = self.crawler is not None and self.crawler.settings.getlist("LOOKBENCH_REPLAY_WARC")
        if not allow_private and not replaying and is_private_host(host):
            raise AddressRefused("private_address", request.url)
        return None


from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware  # noqa: E402


class StrictRobotsTxtMiddleware(RobotsTxtMiddleware):
    """robots.txt as RFC 9309 (section 2.3.1) says: a 4xx robots.txt means no rules (allow all), but a server
    error (5xx) or an unreachable server means the crawler must assume complete disallow. Scrapy's middleware
    treats both as allow-all."""

    _DISALLOW_ALL = b"User-agent: *\nDisallow: /\n"

    async def _parse_robots(self, response, netloc, request):
        if response.status >= 500:
            self.crawler.stats.inc_value("lookbench/robotstxt_disallow_all")
            response = response.replace(status=200, body=self._DISALLOW_ALL)
        return await super()._parse_robots(response, netloc, request)

    def _robots_error(self, exc, netloc):
        from scrapy.utils.misc import build_from_crawler

        super()._robots_error(exc, netloc)
        self.crawler.stats.inc_value("lookbench/robotstxt_disallow_all")
        self._parsers[netloc] = build_from_crawler(self._parserimpl, self.crawler, self._DISALLOW_ALL)
