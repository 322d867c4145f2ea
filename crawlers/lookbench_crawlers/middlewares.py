"""Downloader middleware of the egress policy (``lookbench_pipeline.egress``) and the robots.txt rules."""

from urllib.parse import urlsplit

from scrapy.exceptions import IgnoreRequest

from lookbench_crawlers.resolver import policy_from_settings, static_hosts_from_settings
from lookbench_pipeline.egress import UNRESOLVABLE, EgressPolicy, configured_addresses, is_ip


REFUSALS = {"host_not_allowed", "address_not_global", "port_not_allowed", "name_not_resolved"}


def refusal_reason(exc, host_or_netloc):
    """The egress refusal behind a failed request: our own exception's ``reason``, or, for the DNS error Scrapy
    and Twisted raise in place of the resolver's (they drop its exception), the reason the resolver recorded for
    the host (``resolver.REFUSED``); None when the failure is something else."""
    from lookbench_crawlers.resolver import REFUSED

    cause = exc
    while cause is not None:
        if getattr(cause, "reason", None) in REFUSALS:
            return cause.reason
        cause = cause.__cause__ or cause.__context__
    if "DNS" in type(exc).__name__ or "Resolve" in type(exc).__name__ or "dns lookup" in str(exc).lower():
        host = str(host_or_netloc).split(":")[0].lower()
        return REFUSED.get(host, "name_not_resolved")
    return None


class AddressRefused(IgnoreRequest):
    def __init__(self, reason, url):
        super().__init__(f"{reason}: {url}")
        self.reason = reason


class AddressPolicyMiddleware:
    """Refuses, before any connection: a host outside the site's allow-list (``host_not_allowed``), a port the
    egress policy does not allow (``port_not_allowed``: 80 and 443 unless the site names others), and an IP-literal
    host that is not globally routable (``address_not_global``). A name's address is checked where it is resolved
    (``resolver.GuardedResolver``), so the checked address is the one connected to. A replay connects nowhere."""

    def __init__(self, crawler=None):
        self.crawler = crawler
        self.policy = policy_from_settings(crawler.settings) if crawler is not None else EgressPolicy()
        self.static_hosts = static_hosts_from_settings(crawler.settings) if crawler is not None else {}

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler)

    def process_request(self, request, spider=None):
        spider = spider or getattr(self.crawler, "spider", None)
        policy = getattr(spider, "address_policy", None)
        if policy is None:
            return None
        allowed_hosts, _ = policy
        if request.meta.get("lookbench_media"):
            allowed_hosts = allowed_hosts | getattr(spider, "image_hosts", set())
        parts = urlsplit(request.url)
        host = (parts.hostname or "").lower()
        if allowed_hosts and host not in allowed_hosts and parts.netloc.lower() not in allowed_hosts:
            raise AddressRefused("host_not_allowed", request.url)
        if self.crawler is not None and self.crawler.settings.getlist("LOOKBENCH_REPLAY_WARC"):
            return None  # a replay answers from the archive and connects nowhere
        try:
            port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
        except ValueError:
            raise AddressRefused("port_not_allowed", request.url) from None
        ips = None if is_ip(host) else configured_addresses(host, self.static_hosts)
        if is_ip(host):
            reason = self.policy.refusal(host, port)
        elif ips is not None:
            # a name the configuration gives an address: that address with this port (the resolver lets an
            # allowed pair's address through for these names only, so the pair's port is checked here)
            reasons = [self.policy.refusal(ip, port) for ip in ips]
            reason = self.policy.port_refusal(port) or (
                None if None in reasons else (reasons[0] if reasons else UNRESOLVABLE))
        else:
            reason = self.policy.port_refusal(port) if port is not None else None
        if reason:
            raise AddressRefused(reason, request.url)
        return None


class DownloadTimeout(IgnoreRequest):
    """One URL used up its download budget: reason ``download_timeout``, or ``http_<status>`` when an earlier
    attempt got an answer (a 500 whose retry the budget refused: the row names what the server said)."""

    def __init__(self, url, budget_s, status=0):
        super().__init__(f"download_timeout: {url} took {budget_s:g} s over all its attempts")
        self.status = status or 0
        self.reason = f"http_{status}" if status else "download_timeout"


def _is_timeout(exc):
    """Whether a failed attempt timed out, as the crawl log reads it (:mod:`lookbench_crawlers.fetch_errors`, the
    one reading: Scrapy 2.13+'s ``DownloadTimeoutError``, Twisted's ``TimeoutError`` and ``TCPTimedOutError``,
    Playwright's navigation ``TimeoutError``)."""
    from lookbench_crawlers.fetch_errors import DOWNLOAD_TIMEOUT, fetch_error_reason

    return fetch_error_reason(exc) == DOWNLOAD_TIMEOUT


def _rendered(exc):
    """Whether a failure came from a Playwright navigation (its timeout is the whole budget, not the attempt's)."""
    from lookbench_crawlers.fetch_errors import causes

    return any((type(e).__module__ or "").startswith("playwright") for e in causes(exc))


def last_answer(request):
    """The status of the last error answer (4xx/5xx) an earlier attempt of ``request`` got (a 500 before the retry
    that timed out), else 0: the row of a URL whose attempts ran out names it (``http_500``), not the timeout."""
    status = request.meta.get("lookbench_last_status") if request is not None else None
    return status if isinstance(status, int) else 0


class DownloadBudgetMiddleware:
    """Bounds the time one URL may hold a download slot over all its attempts and redirects to
    ``LOOKBENCH_DOWNLOAD_BUDGET`` seconds (the site's ``download_budget_s``). Only the time attempts spend
    downloading counts (``request.meta["lookbench_spent_s"]``, carried by Scrapy's retry and redirect copies): an
    attempt is charged from the start of its transfer (its response's headers less its ``download_latency``)
    until its response or exception; an answer whose handler sends no headers signal (a rendered page), from when
    it was handed to the downloader, at most its own timeout; an attempt that timed out before any headers, its
    whole ``download_timeout`` (Scrapy's HTTP handler times the attempt from its transfer's start), a rendered
    page's navigation timeout the whole budget (``PLAYWRIGHT_DEFAULT_NAVIGATION_TIMEOUT`` is the budget); one that
    failed otherwise before any headers (refused, reset, DNS, TLS), nothing: Scrapy has no signal for a transfer's
    start, so its time in the slot's queue cannot be told from its time connecting; such attempts are bounded by
    the retry count (``RETRY_TIMES``: a server that holds each connection until just before the timeout and then
    resets it costs ``RETRY_TIMES + 1`` attempts), and the row names that error, never ``download_timeout``. The
    waits in the scheduler and in the download slot's queue (AutoThrottle's delay) do not count, so a 500's or a
    refused connection's retry is sent however long it waited. Each attempt's ``download_timeout`` is
    what is left of the budget (at most ``DOWNLOAD_TIMEOUT``); once it is spent the request fails with
    :class:`DownloadTimeout` instead of being retried. So a server that trickles bytes (slow loris) costs a slot
    ``download_budget_s`` at most, and the page or image gets a ``download_timeout`` row, or ``http_<status>``
    when an earlier attempt got an error answer (:func:`last_answer`)."""

    MIN_ATTEMPT_S = 1.0  # a retry with less time than this left is not started

    def __init__(self, budget_s, attempt_s, clock=None):
        import time

        self.budget_s, self.attempt_s, self.clock = float(budget_s), float(attempt_s), clock or time.monotonic

    @classmethod
    def from_crawler(cls, crawler):
        from scrapy import signals

        s = crawler.settings
        mw = cls(s.getfloat("LOOKBENCH_DOWNLOAD_BUDGET", 30.0), s.getfloat("DOWNLOAD_TIMEOUT", 180.0))
        crawler.signals.connect(mw.headers_received, signal=signals.headers_received)
        crawler.signals.connect(mw.response_downloaded, signal=signals.response_downloaded)
        crawler.signals.connect(mw.request_left_downloader, signal=signals.request_left_downloader)
        return mw

    def left(self, request):
        return self.budget_s - request.meta.get("lookbench_spent_s", 0.0)

    def process_request(self, request, spider=None):
        left = self.left(request)
        if left < self.MIN_ATTEMPT_S and request.meta.get("lookbench_attempted"):
            raise DownloadTimeout(request.url, self.budget_s, last_answer(request))
        request.meta["lookbench_attempted"] = True
        request.meta["download_timeout"] = max(0.001, min(self.attempt_s, left))
        request.meta["lookbench_handed_at"] = self.clock()
        for key in ("lookbench_transfer_at", "lookbench_answered", "lookbench_unheaded"):
            request.meta.pop(key, None)
        return None

    def headers_received(self, request=None, **kwargs):
        """The attempt's transfer began ``download_latency`` before its headers came (Scrapy's HTTP handler)."""
        latency = request.meta.get("download_latency") if request is not None else None
        if "lookbench_handed_at" in getattr(request, "meta", {}) and isinstance(latency, (int, float)):
            request.meta["lookbench_transfer_at"] = self.clock() - latency

    def response_downloaded(self, response=None, request=None, **kwargs):
        if request is None or response is None:
            return
        request.meta["lookbench_answered"] = True
        if response.status >= 400:
            request.meta["lookbench_last_status"] = response.status
        else:  # a redirect leads to another URL, whose own answers count
            request.meta.pop("lookbench_last_status", None)

    def request_left_downloader(self, request=None, **kwargs):
        """Charge the attempt that just ended (before any middleware sees its response or exception)."""
        meta = getattr(request, "meta", None)
        handed = meta.pop("lookbench_handed_at", None) if meta is not None else None
        if handed is None:
            return
        now, transfer = self.clock(), meta.pop("lookbench_transfer_at", None)
        if transfer is not None:
            self._charge(meta, now - max(transfer, handed))
        elif meta.pop("lookbench_answered", False):
            self._charge(meta, min(now - handed, meta.get("download_timeout") or self.attempt_s))
        else:  # no headers and no answer: charged by process_exception once the error is known
            meta["lookbench_unheaded"] = True

    @staticmethod
    def _charge(meta, seconds):
        meta["lookbench_spent_s"] = meta.get("lookbench_spent_s", 0.0) + max(0.0, seconds)

    def process_exception(self, request, exception, spider=None):
        if "lookbench_attempted" not in request.meta:
            return None
        timeout = _is_timeout(exception)
        if request.meta.pop("lookbench_unheaded", False) and timeout:
            if _rendered(exception):
                self._charge(request.meta, self.left(request))
            else:
                self._charge(request.meta, request.meta.get("download_timeout") or self.attempt_s)
        if timeout and self.left(request) < self.MIN_ATTEMPT_S:
            raise DownloadTimeout(request.url, self.budget_s, last_answer(request)) from exception
        return None


from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware  # noqa: E402


class RobotsUnreachable(IgnoreRequest):
    """A request not made because its host's robots.txt could not be read (``reason``, module
    :class:`StrictRobotsTxtMiddleware`): disallowed as RFC 9309 says, but not ``robots_disallowed``."""

    def __init__(self, reason, url):
        super().__init__(f"{reason}: {url}")
        self.reason = reason


ROBOTS_UNREACHABLE = "robots_unreachable"


def robots_unreachable_reason(exc=None, status=0):
    """The reason of a request its host's unreachable robots.txt disallows: ``robots_unreachable:http_<status>``
    for a robots.txt answering 5xx, else ``robots_unreachable:`` and the fetch error behind it, the vocabulary of
    :func:`lookbench_crawlers.fetch_errors.fetch_error_reason` without its ``fetch_error:`` prefix
    (``connection_refused``, ``tls``, ``connect_failed``, ``connection_lost``, ``other:<class>``,
    ``download_timeout``…)."""
    from lookbench_crawlers.fetch_errors import FETCH_ERROR, fetch_error_reason

    if status:
        return f"{ROBOTS_UNREACHABLE}:http_{status}"
    return f"{ROBOTS_UNREACHABLE}:{fetch_error_reason(exc).removeprefix(FETCH_ERROR + ':')}"


class StrictRobotsTxtMiddleware(RobotsTxtMiddleware):
    """robots.txt as RFC 9309 (section 2.3.1) says: a 4xx robots.txt means no rules (allow all), but a server
    error (5xx) or an unreachable server means the crawler must assume complete disallow. Scrapy's middleware
    treats both as allow-all. A request so disallowed fails with :class:`RobotsUnreachable`, whose reason says why
    (``robots_unreachable:http_503``, ``robots_unreachable:connection_refused``…: :func:`robots_unreachable_reason`),
    so the crawl log and the image downloads do not read ``robots_disallowed`` for a site that was down."""

    _DISALLOW_ALL = b"User-agent: *\nDisallow: /\n"

    def __init__(self, crawler):
        super().__init__(crawler)
        self._unreachable = {}  # netloc -> the reason its robots.txt could not be read

    async def _parse_robots(self, response, netloc, request):
        if response.status >= 500:
            self.crawler.stats.inc_value("lookbench/robotstxt_disallow_all")
            self._unreachable[netloc] = robots_unreachable_reason(status=response.status)
            response = response.replace(status=200, body=self._DISALLOW_ALL)
        return await super()._parse_robots(response, netloc, request)

    def _robots_error(self, exc, netloc):
        from scrapy.utils.misc import build_from_crawler
        from twisted.internet.defer import Deferred

        if refusal_reason(exc, netloc) in REFUSALS:
            # robots.txt was refused by the egress policy, not unreachable: the page's own request meets the same
            # policy and is refused with its reason (address_not_global…), which the crawl log should say
            super()._robots_error(exc, netloc)
            return
        if not isinstance(exc, IgnoreRequest):
            self.crawler.stats.inc_value(f"robotstxt/exception_count/{type(exc)}")
        self.crawler.stats.inc_value("lookbench/robotstxt_disallow_all")
        self._unreachable[netloc] = robots_unreachable_reason(exc)
        # the requests that waited for this robots.txt get the disallow-all parser too (Scrapy's own error path
        # hands them None, which allows them)
        waiting, parser = self._parsers[netloc], build_from_crawler(self._parserimpl, self.crawler,
                                                                    self._DISALLOW_ALL)
        self._parsers[netloc] = parser
        if isinstance(waiting, Deferred):
            waiting.callback(parser)

    def process_request_2(self, rp, request):
        try:
            super().process_request_2(rp, request)
        except IgnoreRequest:
            from scrapy.utils.httpobj import urlparse_cached

            reason = self._unreachable.get(urlparse_cached(request).netloc)
            if reason is None:
                raise
            self.crawler.stats.inc_value(f"lookbench/{reason}")
            raise RobotsUnreachable(reason, request.url) from None


class RedirectRefused(IgnoreRequest):
    """A page's or sitemap's redirect that is not followed; ``reason`` is its crawl-log reason."""

    def __init__(self, reason, url, target, status=0):
        super().__init__(f"{reason}: {url} -> {target}")
        self.reason = reason
        self.target = target  # where it led
        self.status = status  # the redirect's own HTTP status, for the page's row


REDIRECT_STATUSES = (301, 302, 303, 307, 308)
REDIRECT_LOOP = "redirect:loop"  # back to a URL of its own chain
REDIRECT_TOO_MANY = "redirect:too_many"  # beyond REDIRECT_MAX_TIMES hops
REDIRECT_DUPLICATE = "redirect:duplicate"  # to a page the crawl requested already: not followed, not a rejection
# (the spider's row is outcome "redirected", as a followed redirect's, naming the page in redirect_to)
REDIRECT_HOPS = "lookbench_redirects"
"""``request.meta`` key: the redirects followed to reach the request, in order, one ``{url, status, to, fetched_at,
finished}`` each (``RedirectScopeMiddleware``); the spider writes each its row (outcome ``redirected``)."""
UNRECORDED_HOP = "unrecorded_hop"
"""Flag of a replayed redirect that has no record of its own (``replay.WarcReplayMiddleware`` answering a hop of
``WARC-LookBench-Redirect-From``: an archive of before redirects and meta refreshes were records, whose meta
refresh is answered as a 302): the live crawl wrote it no row, so it is followed without one. A crawl archives
every redirect and meta refresh now (``warc.WarcRedirectArchiveMiddleware``, :class:`MetaRefreshScopeMiddleware`),
so only such an old archive's replay meets it."""


class RedirectScopeMiddleware:
    """A page's or sitemap's redirect to where the crawl may not go — another scheme (``file:``, ``javascript:``),
    a URL that does not parse, a host the site does not allow — is refused here, before Scrapy's RedirectMiddleware
    (600; this one is nearer the downloader, so it sees the response first): the request's errback gets
    ``RedirectRefused`` and the page is a rejected row ``redirect:<not_http|malformed|host_not_allowed>``. Scrapy
    would build the redirected request and its offsite filter drop it at scheduling, without errback nor row.
    So is a redirect back to a URL of its own chain (``redirect:loop``: Scrapy's duplicate filter would drop the
    request silently; a request with ``dont_filter``, a start URL, is followed back, as Scrapy does: a page that
    sets a cookie and redirects to itself) and one beyond ``REDIRECT_MAX_TIMES`` hops (``redirect:too_many``:
    Scrapy's IgnoreRequest would read ``ignored``); the row is the last URL of the chain, with its 3xx status.
    A page's redirect that is followed is recorded in the request's meta (``REDIRECT_HOPS``, which Scrapy's
    RedirectMiddleware copies into the target's request): the spider writes the source URL its own row, outcome
    ``redirected`` (neither kept nor rejected), naming the target in its ``redirect_to``. One to a page the
    crawl requested already is not followed (``redirect:duplicate``: the duplicate filter, asked without recording,
    :class:`CrawlDupeFilter`, would drop the redirected request silently), and the spider writes it the same row:
    whether a redirect's target was requested before or after it arrived does not change the log.
    An image download (``lookbench_media``) is bounded the same way, its scope left to the address policy (images
    may live on the site's ``image_hosts``): its download row reads ``redirect:loop`` / ``redirect:too_many``, not
    Scrapy's ``ignored`` after 20 hops. Requests with ``dont_redirect`` are left to Scrapy."""

    def __init__(self, crawler=None):
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler)

    def process_response(self, request, response, spider=None):
        spider = spider or getattr(self.crawler, "spider", None)
        if (response.status not in REDIRECT_STATUSES or request.meta.get("dont_redirect")
                or b"Location" not in response.headers):
            return response
        from lookbench_pipeline.extract.images import join_url

        location = response.headers[b"Location"].decode("latin-1").strip()
        target = join_url(response.url, location)
        if target is None and request.meta.get("lookbench_media"):
            return response  # an image's unreadable Location: Scrapy's to handle, as before
        self.follow(request, response, target, location, spider)
        return response

    def follow(self, request, response, target, location, spider=None):
        """Refuses (``RedirectRefused``) or records (``REDIRECT_HOPS``) the redirect ``response`` to ``request``
        makes to ``target`` (None: unreadable ``location``); also :class:`MetaRefreshScopeMiddleware`'s check."""
        media = request.meta.get("lookbench_media")
        check = None if media else getattr(spider or getattr(self.crawler, "spider", None), "scope_refusal", None)
        reason = "malformed" if target is None else (check(target) if check else None)
        if not reason:
            reason = self._chain_refusal(request, target)
        if reason:
            raise RedirectRefused(f"redirect:{reason}", request.url, target or location, response.status)
        # followed: Scrapy's RedirectMiddleware copies this request's meta into the target's request, the hop with
        # it (a new list: the copy is shallow). A resumed crawl's mark of a finished page (``lookbench_finished``:
        # answered from the crawl's own WARC, no item) is the source's, not the target's: a target the earlier
        # attempt never finished must be crawled, not skipped; the hop keeps it (its row is in the feed already).
        finished = bool(request.meta.pop("lookbench_finished", None))
        if not media and UNRECORDED_HOP not in response.flags:
            hop = {"url": request.url, "status": response.status, "to": target,
                   "fetched_at": request.meta.get("lookbench_fetched_at"), "finished": finished}
            request.meta[REDIRECT_HOPS] = [*(request.meta.get(REDIRECT_HOPS) or []), hop]

    def _chain_refusal(self, request, target):
        """``loop`` when ``target`` is a URL the chain already requested (the duplicate filter's canonical form),
        ``duplicate`` when the crawl requested it already otherwise (a page; the scheduler's duplicate filter says),
        ``too_many`` when the chain has made ``REDIRECT_MAX_TIMES`` hops already; else None."""
        from w3lib.url import canonicalize_url

        chain = [*(request.meta.get("redirect_urls") or []), request.url]
        if request.dont_filter:  # Scrapy follows these back to a URL of the chain (a page that sets a cookie and
            looped = False       # redirects to itself): only the hop limit bounds them, as it does in Scrapy
        else:
            try:
                looped = canonicalize_url(target) in {canonicalize_url(u) for u in chain}
            except ValueError:  # a host IDNA refuses (UnicodeError): compared as written
                looped = target in chain
        if looped:
            return "loop"
        if not request.dont_filter and not request.meta.get("lookbench_media") and self._requested(request, target):
            return "duplicate"
        limit = self.crawler.settings.getint("REDIRECT_MAX_TIMES", 20) if self.crawler is not None else 20
        if request.meta.get("redirect_times", 0) >= limit:
            return "too_many"
        return None

    def _requested(self, request, target):
        """Whether the crawl requested ``target`` already, so that Scrapy's duplicate filter would drop the request
        a redirect to it makes (without errback, without row): asked of the scheduler's duplicate filter without
        recording (:meth:`CrawlDupeFilter.seen`); False when the filter cannot say so (another ``DUPEFILTER_CLASS``).
        An image download never passes the scheduler, nor does a ``dont_filter`` request's redirect get dropped."""
        engine = getattr(self.crawler, "engine", None)
        slot = getattr(engine, "_slot", None) or getattr(engine, "slot", None)
        seen = getattr(getattr(getattr(slot, "scheduler", None), "df", None), "seen", None)
        if seen is None:
            return False
        try:
            return bool(seen(request.replace(url=target)))
        except ValueError:  # a target Scrapy's Request refuses: Scrapy's redirect would fail on it too
            return False


from scrapy.downloadermiddlewares.redirect import MetaRefreshMiddleware  # noqa: E402


class MetaRefreshScopeMiddleware(MetaRefreshMiddleware):
    """Scrapy's MetaRefreshMiddleware (580, which it replaces): a ``<meta http-equiv="refresh">`` that it follows
    (an HTML page, a delay under ``METAREFRESH_MAXDELAY``, an http(s) target) is a redirect as a 3xx is. The page's
    response, which the next request replaces before :class:`lookbench_crawlers.warc.WarcArchiveMiddleware` (60)
    would see it, is archived here (decompressed, as the spider would have had it), its record marked
    ``WARC-LookBench-Meta-Refresh`` (the target), so a replay answers the URL with the same page and this
    middleware does the same again. Then :meth:`RedirectScopeMiddleware.follow` refuses it (another host, a loop,
    beyond ``REDIRECT_MAX_TIMES``, a page the crawl requested already: the row ``redirect:<why>``, the page's
    status) or records the hop, whose row is ``redirected`` (the page's status, the target in ``redirect_to``)."""

    @classmethod
    def from_crawler(cls, crawler):
        from lookbench_crawlers.warc import WarcArchiveMiddleware

        o = super().from_crawler(crawler)
        o.scope = RedirectScopeMiddleware(crawler)
        o.archiver = WarcArchiveMiddleware.from_crawler(crawler)
        o._response = None
        return o

    def process_response(self, request, response, spider=None):
        self._response = response  # for _redirect, which Scrapy calls only for a refresh it follows (synchronously)
        try:
            return super().process_response(request, response)
        finally:
            self._response = None

    def _redirect(self, redirected, request, reason):
        from lookbench_crawlers.warc import ARCHIVED
        from lookbench_pipeline.warc import META_REFRESH_HEADER

        response = self._response
        if response is not None:
            if ARCHIVED not in response.flags:
                response.flags.append(ARCHIVED)
                self.archiver.archive(request, response, {META_REFRESH_HEADER: redirected.url})
            self.scope.follow(request, response, redirected.url, redirected.url)
            # the target's request was built from this one's meta before the hop was recorded: the hop is handed on,
            # a resume's finished mark is not (RedirectScopeMiddleware.follow)
            redirected.meta.pop("lookbench_finished", None)
            if request.meta.get(REDIRECT_HOPS):
                redirected.meta[REDIRECT_HOPS] = request.meta[REDIRECT_HOPS]
        return super()._redirect(redirected, request, reason)


from scrapy.dupefilters import RFPDupeFilter  # noqa: E402


class CrawlDupeFilter(RFPDupeFilter):
    """Scrapy's duplicate filter (``DUPEFILTER_CLASS``), which can also be asked whether it would drop a request
    without recording it (:meth:`seen`): ``RedirectScopeMiddleware`` asks it about a redirect's target, so that a
    redirect to a page the crawl has already is a row (``redirected``, as a followed one), not a request dropped
    silently."""

    def seen(self, request):
        fps = getattr(self, "_fingerprints", None)
        if fps is not None:  # Scrapy 2.14+: a set of bytes, _fingerprint as request_seen computes it
            return self._fingerprint(request) in fps
        return self.request_fingerprint(request) in self.fingerprints
