"""The ``shop`` spider: discovers product and "shop the look" pages of one site from its sitemap(s) and links,
and yields what the library's extractors find. It only crawls: ids, first-seen times and tables are the library's.

Arguments (``-a``): ``site_config`` (path to the site's YAML file), ``base_url`` (replaces ``{{BASE}}`` in the
config's URLs: the demo and replay servers pick a free port), ``resume_feed`` (the JSON-lines feed of an
interrupted run of the same crawl: pages it finished are not fetched again), ``origin_aliases`` (comma-separated
origins an earlier attempt of the same crawl, or the archived crawl a replay answers from, served ``{{BASE}}``
from: a URL of one of them is requested from ``base_url``, so a page is one page whatever the port).

Resuming: Scrapy's JOBDIR only survives a graceful stop; a crawl killed with SIGKILL may lose requests that were
dequeued but not finished. Instead, every page item records how many products and looks the page yielded
(``n_items``), and a page counts as finished only when its page item and that many items are in the feed
(``lookbench_pipeline.crawl.finished_urls``; the library removes the items of unfinished pages before a restart).
A restart walks the site as a fresh crawl would, so every link is still discovered, but a finished page's
request is marked (``meta["lookbench_finished"]``): it is answered from the crawl's own WARC
(``replay.WarcReplayMiddleware`` with ``LOOKBENCH_RESUME_WARC``), not archived again, and yields no item, so no
page is logged or counted twice.
"""

from urllib.parse import urlsplit

import scrapy
from scrapy.utils.sitemap import Sitemap, sitemap_urls_from_robots

from lookbench_crawlers import render_guard
from lookbench_crawlers.fetch_errors import fetch_error_reason
from lookbench_crawlers.items import LookItem, PageItem, ProductItem
from lookbench_crawlers.pipelines import MALFORMED_URL, fetchable, unfetchable_reason, url_hash
from lookbench_crawlers.middlewares import REDIRECT_DUPLICATE, REDIRECT_HOPS, last_answer, refusal_reason
from lookbench_crawlers.render_guard import SUBRESOURCE_REFUSED
from lookbench_pipeline.config import SiteConfig
from lookbench_pipeline.crawl import MAX_PAGES_REACHED, finished_urls, read_feed, rebase_url
from lookbench_pipeline.crawl import resume_key as _resume_key
from lookbench_pipeline.crawl_tables import REDIRECTED
from lookbench_pipeline.extract import canonical, decode_html, extract_look, extract_products
from lookbench_pipeline.optout import NOIMAGEINDEX, NOINDEX, agent_token, html_optout

MAX_PAGES_CUT_ROWS = 1000
"""How many URLs the site's ``max_pages`` cut get a crawl-log row each (outcome ``rejected``, reason
``max_pages_reached``, status 0): the first distinct ones in discovery order. Beyond them a URL the limit cuts is
only counted, once per distinct URL (stat ``lookbench/max_pages_cut_unlisted``: navigation menus repeat every link,
a rediscovery is not counted again), so a site of millions of URLs does not fill the log; the crawl's counts give
the total (``max_pages_cut``)."""
MAX_PAGES_CUT_TRACKED = 1_000_000
"""How many cut URLs beyond the rows are remembered to count each once: a 64-bit hash of the canonical URL each
(a Python set of ints: 73 MB at the full million, BENCHMARKS.md "The crawl's bounded bookkeeping"; that any two of
them share a hash has odds of about 1 in 37 million at the full million). Beyond that a cut URL is counted per
discovery (stat ``lookbench/max_pages_cut_untracked``), so the crawl says "at least N" URLs were cut."""

SITEMAP_TYPES = ("urlset", "sitemapindex")


class ShopSpider(scrapy.Spider):
    name = "shop"

    def __init__(self, site_config=None, base_url="", resume_feed=None, origin_aliases="", *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.done = finished_pages(resume_feed) if resume_feed else set()
        self.origin_aliases = [a.rstrip("/") for a in (origin_aliases or "").split(",") if a.strip()]
        self.pages_requested = 0
        self.requested = set()
        self.limit_logged = False
        self.cut = set()  # canonical URLs the max_pages limit cut that have their row (MAX_PAGES_CUT_ROWS at most)
        self.cut_hashes = set()  # 64-bit hashes of the cut URLs beyond the rows (MAX_PAGES_CUT_TRACKED at most)
        self.redirects_logged = set()  # canonical URLs that have their row ``redirected``: one each
        if not site_config:
            raise ValueError("the shop spider needs -a site_config=<path to the site's YAML file>")
        self.site = SiteConfig.from_yaml(site_config)
        self.base_url = (base_url or "").rstrip("/")
        if not self.base_url and any("{{BASE}}" in u for u in self.site.start_urls + self.site.sitemap_urls):
            # without it the URLs would be "/sitemap.xml": Scrapy's "Missing scheme" traceback, and exit 0
            raise ValueError(
                f"site {self.site.name}'s URLs start with {{{{BASE}}}} (a {self.site.kind} site, served on 127.0.0.1): "
                "pass -a base_url=<the origin serving it, e.g. http://127.0.0.1:8000>; the pipeline starts that "
                "server itself (lookbench build / demo)")
        sub = lambda u: u.replace("{{BASE}}", self.base_url)  # noqa: E731
        self.start_list = [sub(u) for u in self.site.start_urls]
        self.sitemap_list = [sub(u) for u in self.site.sitemap_urls]
        hosts = {h.lower() for h in self.site.allowed_hosts}
        for u in self.start_list + self.sitemap_list:
            parts = urlsplit(u)
            hosts.add(parts.netloc.lower())
            hosts.add((parts.hostname or "").lower())
        self.image_hosts = {h.lower() for h in self.site.image_hosts}
        self.allowed_domains = sorted({h.split(":")[0] for h in hosts | self.image_hosts if h})
        self.address_policy = (hosts, self.site.allow_private_addresses)

    @classmethod
    def from_crawler(cls, crawler, *args, **kwargs):
        spider = super().from_crawler(crawler, *args, **kwargs)
        # the site YAML's own settings (delay, concurrency, budget, ports, egress allowances), as the pipeline gives
        # them on its command line: run on its own the spider crawls as in the pipeline; -s on the command line wins
        from lookbench_pipeline.crawl import site_settings

        for name, value in site_settings(spider.site, spider.base_url).items():
            crawler.settings.set(name, value, priority="spider")
        if spider.site.render_js:  # Chromium's own requests meet the egress policy too (render_guard)
            from lookbench_crawlers.resolver import policy_from_settings, static_hosts_from_settings

            static = static_hosts_from_settings(crawler.settings)
            hosts = spider.address_policy[0] | spider.image_hosts | {h.lower() for h in spider.site.render_hosts}
            render_guard.install(crawler, hosts, policy_from_settings(crawler.settings), static)
        return spider

    def finished(self, url):
        """Whether an earlier attempt of this crawl finished the page at ``url`` (its items are in the feed)."""
        return bool(self.done) and resume_key(url) in self.done

    def _here(self, url):
        """``url`` with an earlier attempt's origin (``origin_aliases``) replaced by this attempt's."""
        for alias in self.origin_aliases:
            moved = rebase_url(url, alias, self.base_url)
            if moved != url:
                return moved
        return url

    def _seen(self, response):
        """A response of a page an earlier attempt finished: its links are followed, no item is yielded again."""
        return response.meta.get("lookbench_finished") or self.finished(response.url)

    def _sitemap_request(self, url, also_page=None):
        url = self._here(url)
        meta = {"lookbench_finished": True} if self.finished(url) else {}
        if also_page:  # a start URL too: what its response is when it is no sitemap (start, parse_sitemap)
            meta["lookbench_also_page"] = also_page
        return scrapy.Request(url, callback=self.parse_sitemap, errback=self.on_error, meta=meta)

    async def start(self):
        # A URL listed both as a sitemap and as a start URL is admitted as a page here, before any request, so no
        # page another response discovers takes its max_pages slot first. It counts against max_pages whatever it
        # turns out to be (a sitemap too: the simple rule; max_pages bounds the pages requested, and it was one).
        # It is requested as a sitemap and read as the page it is when it is none ("page": one fetch, Scrapy's
        # duplicate filter would drop a second request). A site that renders JavaScript requests it as a page
        # too, rendered in Chromium (dont_filter: the duplicate filter would drop it), and its sitemap response
        # then says nothing of a page ("elsewhere"). One max_pages cut is still fetched as a sitemap: a page, it
        # is the row max_pages_reached with the status it got ("cut"; "counted": beyond MAX_PAGES_CUT_ROWS).
        both = set(self.sitemap_list) & set(self.start_list)
        as_page = {}
        for u in dict.fromkeys(u for u in self.sitemap_list if u in both):
            admitted, cut_row = self._admit(self._here(u))
            as_page[u] = ("elsewhere" if self.site.render_js else "page") if admitted else \
                "cut" if cut_row is not None else "counted"
        for u in self.sitemap_list:
            yield self._sitemap_request(u, also_page=as_page.get(u))
        rendered = {u for u, how in as_page.items() if how == "elsewhere"}
        for u in self.start_list:
            if u in both:
                if u in rendered:
                    rendered.discard(u)
                    yield self._build(self._here(u), self.parse_page, dont_filter=True,
                                      meta={"lookbench_sitemap_too": True})
                continue
            req = self._request(u, self.parse_page)
            if req is not None:
                yield req
        if self.site.shopify:
            for origin in sorted({"/".join(u.split("/")[:3]) for u in self.start_list + self.sitemap_list}):
                yield self._shopify_page(origin, 1)

    def _shopify_page(self, origin, page):
        url = f"{origin}/products.json?limit=250&page={page}"
        meta = {"lookbench_finished": True} if self.finished(url) else {}
        return scrapy.Request(url, callback=self.parse_shopify, errback=self.on_error, meta=meta,
                              cb_kwargs={"origin": origin, "page": page})

    def parse_shopify(self, response, origin=None, page=1):
        """Shopify's public JSON: a page of /products.json (paginated until empty) or one product's .json."""
        import json

        from lookbench_pipeline.extract import shopify_products

        yield from self._redirect_rows(response.meta, response.url)

        try:
            doc = json.loads(response.text)
        except (ValueError, AttributeError):
            if not self._seen(response):
                yield self._page(response.url, response.status, "rejected", "bad_shopify_json")
            return
        products = shopify_products(doc, response.url)
        if self._seen(response):  # finished by an earlier attempt: only the next page counts
            if origin and products and "products" in doc:
                yield self._shopify_page(origin, page + 1)
            return
        for i, p in enumerate(products):
            url = p.pop("url")
            yield ProductItem(kind="product", site=self.site.name, url=url, page_position=i, from_page=response.url,
                              **p)  # from_page: the JSON page's n_items counts it (crawl.finished_urls)
        yield self._page(response.url, response.status, "product" if products else "listing",
                         n_items=len(products))
        if origin and products and "products" in doc:
            yield self._shopify_page(origin, page + 1)

    def _request(self, url, callback, **kw):
        """A page request; rendered in headless Chromium when the site config asks (scrapy-playwright closes
        each page after the response, so memory stays flat). At most ``max_pages`` page requests are made per
        crawl (image downloads do not count); beyond that no request is made: the URL's row (outcome ``rejected``,
        reason ``max_pages_reached``) is returned instead, for the first ``MAX_PAGES_CUT_ROWS`` such URLs, else None
        (counted only). None as well for a page already requested. The limit is logged once."""
        url = self._here(url)
        if callback == self.parse_page:
            admitted, cut_row = self._admit(url)
            if not admitted:
                return cut_row
        return self._build(url, callback, **kw)

    def _build(self, url, callback, **kw):
        """The request of ``url`` (admitted against ``max_pages`` already, for a page)."""
        meta = kw.pop("meta", {})
        if callback == self.parse_page and self.finished(url):
            meta = {**meta, "lookbench_finished": True}
        if self.site.render_js and callback == self.parse_page:
            meta = {**meta, "playwright": True,
                    "playwright_page_init_callback": "lookbench_crawlers.render_guard.bind_page"}
        return scrapy.Request(url, callback=callback, errback=self.on_error, meta=meta, **kw)

    def _admit(self, url):
        """Count a page request against ``max_pages``: ``(True, None)`` when it may be made, else ``(False, row)``
        with the row of a URL the limit cuts (None: already requested, or cut beyond ``MAX_PAGES_CUT_ROWS``).
        Another host is not counted (Scrapy's offsite filter refuses it); in scope, each distinct page counts once:
        navigation menus repeat every link, which the duplicate filter would drop anyway."""
        parts = urlsplit(url)
        if not (parts.netloc.lower() in self.address_policy[0] or (parts.hostname or "") in self.allowed_domains):
            return True, None
        key = canonical(url)
        if key in self.requested or key in self.cut:
            return False, None
        if self.pages_requested >= self.site.max_pages:
            stats = self.crawler.stats
            if not self.limit_logged:
                self.logger.warning("max_pages=%d reached: not following further pages (each is recorded "
                                    "rejected %s)", self.site.max_pages, MAX_PAGES_REACHED)
                stats.set_value("lookbench/max_pages_reached", 1)
                self.limit_logged = True
            if len(self.cut) < MAX_PAGES_CUT_ROWS:
                self.cut.add(key)
                return False, self._page(url, 0, "rejected", MAX_PAGES_REACHED)
            digest = url_hash(key)
            if digest in self.cut_hashes:
                return False, None
            if len(self.cut_hashes) < MAX_PAGES_CUT_TRACKED:
                self.cut_hashes.add(digest)
                stats.inc_value("lookbench/max_pages_cut_unlisted")
            else:  # memory bounded: counted per discovery, the crawl line says "at least"
                stats.inc_value("lookbench/max_pages_cut_untracked")
            return False, None
        self.pages_requested += 1
        self.requested.add(key)
        return True, None

    def _page(self, url, status, outcome, reason=None, n_items=0):
        return PageItem(kind="page", site=self.site.name, url=url, status=status, outcome=outcome, reason=reason,
                        n_items=n_items)

    def _redirected(self, url, status, target, fetched_at):
        """The row of a URL that answered a redirect within the site (outcome ``redirected``, its 3xx status, or a
        meta refresh page's, no reason), naming the target in ``redirect_to``, stamped with the redirect's fetch
        time (its WARC record's date, so a replay stamps the same); None when the URL has its row already (fetched
        twice: one row)."""
        key = _key(url)
        if key in self.redirects_logged:
            return None
        self.redirects_logged.add(key)
        row = self._page(url, status, REDIRECTED)
        row["redirect_to"] = target
        if fetched_at:
            row["crawled_at"] = fetched_at
        return row

    def _redirect_rows(self, meta, url):
        """The rows of the redirects followed to reach a request (``middlewares.REDIRECT_HOPS``: written by the
        callback or errback of the request they led to, once), each a ``redirected`` row. A hop an earlier
        attempt of the crawl finished has its row in the feed already. A redirect not followed because its target
        was requested already (``redirect:duplicate``) gets the same row from :meth:`on_error`, so the log does not
        depend on whether the target was requested before or after the redirect arrived. A hop of ``url`` itself (a
        start URL that sets a cookie and redirects to itself) is not logged: that URL has its own row."""
        hops = meta.get(REDIRECT_HOPS)
        if not hops or meta.get("lookbench_redirects_logged"):
            return
        meta["lookbench_redirects_logged"] = True
        for hop in hops:
            if hop.get("finished") or self.finished(hop["url"]) or _key(hop["url"]) == _key(url):
                continue  # logged by an earlier attempt, or the URL the chain came back to: its own row
            row = self._redirected(hop["url"], hop["status"], hop["to"], hop.get("fetched_at"))
            if row is not None:
                yield row

    def parse_sitemap(self, response):
        yield from self._redirect_rows(response.meta, response.url)
        body = response.body
        if response.url.endswith("/robots.txt"):
            for u in sitemap_urls_from_robots(response.text, base_url=response.url):
                yield self._sitemap_request(u)
            return
        seen = self._seen(response)
        entries, problem = sitemap_entries(body, self.settings.getint("DOWNLOAD_MAXSIZE"))
        also_page = response.meta.get("lookbench_also_page")
        if problem in (BAD_SITEMAP_NOT_XML, BAD_SITEMAP_NOT_A_SITEMAP, BAD_SITEMAP_EMPTY) and also_page:
            # a start URL as well, which is a page, not a sitemap (admitted as a page in start): crawled as the page
            # (one fetch, one row); on a site rendering JavaScript its rendered request is the page ("elsewhere")
            if also_page == "page":
                yield from self.parse_page(response)
            elif also_page == "cut" and not seen:
                yield self._page(response.url, response.status, "rejected", MAX_PAGES_REACHED)
            return
        if entries is None:
            if not seen:
                self.logger.warning("%s is no sitemap: %s", response.url, problem)
                yield self._page(response.url, response.status, "rejected", problem)
            return
        if not seen:
            # a sitemap whose XML breaks after some entries: those are followed, and its row says it broke
            yield self._page(response.url, response.status, "sitemap", problem)
        sm_type = entries[0] if entries else None
        for entry in entries[1:]:
            loc = (entry.get("loc") or "").strip()
            if not loc:
                continue
            # a <loc> is a page (or sitemap) URL the site declares: one that cannot or may not be requested is a
            # rejected row with its reason, and the sitemap's other entries go on
            bad = self._bad_loc(loc)
            if bad:
                if not seen:
                    yield self._page(bad[0], 0, "rejected", bad[1])
                continue
            if sm_type == "sitemapindex":
                yield self._sitemap_request(loc)
            else:
                req = self._request(loc, self.parse_page, meta={"from_sitemap": True})
                if req is not None:
                    yield req

    def _bad_loc(self, loc):
        """``(url as recorded, reason)`` for a sitemap ``<loc>`` that is not requested, or None: not an absolute
        http(s) URL (``bad_url:not_http``: relative, ``javascript:``, ``file:``…), one that does not parse
        (``bad_url:malformed``: ``http://[::1/x``), or on a host the site does not allow (``host_not_allowed``:
        Scrapy's offsite filter would drop it without a row)."""
        from lookbench_pipeline.extract.images import refused_form

        why = self.scope_refusal(self._here(loc) if loc.lower().startswith(("http://", "https://")) else loc)
        return (refused_form(loc), why if why == "host_not_allowed" else f"bad_url:{why}") if why else None

    def scope_refusal(self, url):
        """Why the crawl may not request page ``url``, or None: ``not_http`` (relative, ``javascript:``, ``file:``…),
        ``malformed`` (does not parse, no host), ``host_not_allowed`` (a host the site does not allow, which
        Scrapy's offsite filter would drop without a row). Used for sitemap entries and redirects
        (``middlewares.RedirectScopeMiddleware``)."""
        if not fetchable(url):  # the image pipeline's rule for what may be requested at all
            return "malformed" if unfetchable_reason(url) == MALFORMED_URL else "not_http"
        parts = urlsplit(url)
        host = parts.hostname
        if not (parts.netloc.lower() in self.address_policy[0] or host in self.allowed_domains
                or any(host.endswith("." + d) for d in self.allowed_domains)):
            return "host_not_allowed"
        return None

    def _refused_subresources(self, meta, page_url):
        """One crawl-log row per URL the rendered page at ``page_url`` was refused (``render_guard``), with the
        reason and the page (``from_page``: a resumed crawl drops the rows of a page it fetches again)."""
        for url, reason in dict.fromkeys(meta.get("lookbench_render_refused") or []):
            row = self._page(url, 0, SUBRESOURCE_REFUSED, reason)
            row["from_page"] = page_url
            yield row

    def parse_page(self, response):
        yield from self._redirect_rows(response.meta, response.url)  # before the resume's check: it may be finished
        if self._seen(response):  # finished by an earlier attempt: its items are in the feed; only its links count
            yield from self._follow(response)
            return
        yield from self._refused_subresources(response.meta, response.url)
        ctype = response.headers.get(b"Content-Type", b"").decode("latin-1").lower()
        if not isinstance(response, scrapy.http.TextResponse) or ("html" not in ctype and ctype):
            if not response.meta.get("lookbench_sitemap_too"):  # else a sitemap: its sitemap request has the row
                yield self._page(response.url, response.status, "rejected", "not_html")
            return
        problems = []
        try:
            html = page_text(response)
            products = extract_products(html, response.url, self.site.product_rules, problems=problems)
            look = extract_look(html, response.url, self.site.look_rules)
        except Exception as exc:  # one hostile page never costs the crawl: it is a named rejection
            self.logger.warning("extraction failed on %s: %r", response.url, exc)
            yield self._page(response.url, response.status, "rejected", f"extraction_error:{type(exc).__name__}")
            return
        optout = self._optout(response, html)
        if optout == NOINDEX and (products or look):
            # the page asks not to be indexed: nothing of it is kept, and the log says why
            yield self._page(response.url, response.status, "rejected", NOINDEX)
            products, look = [], None
        refused = {"images_refused": NOIMAGEINDEX} if optout == NOIMAGEINDEX else {}
        for i, p in enumerate(products):
            yield ProductItem(kind="product", site=self.site.name, url=response.url, page_position=i, **p, **refused)
        if look:
            yield LookItem(kind="look", site=self.site.name, url=response.url, **look, **refused)
        if optout == NOINDEX:
            pass
        elif products or look:
            outcome = "product" if products else "look"
            yield self._page(response.url, response.status, outcome, n_items=len(products) + bool(look))
        else:
            # A page the sitemap lists is meant to be a product or look page: finding nothing there is a rejection.
            links = response.css("a::attr(href)").getall()
            listing = bool(links) and not response.meta.get("from_sitemap")
            # a page whose JSON-LD could not be read says so (jsonld_parse_error…), not "no structured data"
            yield self._page(response.url, response.status, "listing" if listing else "rejected",
                             None if listing else (problems[0] if problems else "no_structured_data"))
        yield from self._follow(response)

    def _follow(self, response):
        if self.site.follow_links and isinstance(response, scrapy.http.TextResponse):
            from lookbench_pipeline.extract.images import join_url, page_base

            base = page_base(response.text, response.url)  # a <base href> of another scheme is ignored
            for href in response.css("a::attr(href)").getall():
                href = href.strip()
                if href.startswith(("mailto:", "javascript:", "tel:", "#")):
                    continue
                # a link is no declared page: one that does not parse or is not http(s) (whatsapp:, ftp:…) is
                # skipped, and the page's other links are still followed
                url = join_url(base, href)
                if not url or not url.startswith(("http://", "https://")):
                    continue
                try:
                    req = self._request(url, self.parse_page)
                except ValueError:  # a URL urllib takes but Scrapy's Request does not
                    continue
                if req is not None:
                    yield req

    def _optout(self, response, html):
        """The page's own robots directives (``lookbench_pipeline.optout``): X-Robots-Tag headers and robots
        ``<meta>`` tags, generic, for our user agent, or for Googlebot."""
        settings = getattr(self, "settings", None)
        agent = agent_token((settings.get("USER_AGENT") if settings is not None else None) or "LookBenchBot")
        return html_optout([v.decode("latin-1") for v in response.headers.getlist("X-Robots-Tag")], html, agent)

    def on_error(self, failure):
        request = failure.request
        yield from self._redirect_rows(request.meta, request.url)  # the redirects that led here (it failed)
        if request.meta.get("lookbench_finished") or self.finished(request.url):
            return  # an earlier attempt logged this page already
        yield from self._refused_subresources(request.meta, request.url)
        exc = failure.value
        reason = getattr(exc, "reason", None)
        status = getattr(exc, "status", 0) if isinstance(getattr(exc, "status", 0), int) else 0
        if reason is None:
            from scrapy.exceptions import IgnoreRequest
            from scrapy.spidermiddlewares.httperror import HttpError

            if isinstance(exc, HttpError):
                status = exc.response.status
                reason = f"http_{status}"
            elif refusal_reason(exc, urlsplit(request.url).hostname or ""):
                reason = refusal_reason(exc, urlsplit(request.url).hostname or "")
            elif isinstance(exc, IgnoreRequest) and "robots" in str(exc).lower():
                reason = "robots_disallowed"
            elif isinstance(exc, IgnoreRequest):
                reason = "ignored"
            else:  # no response: a stable reason (fetch_errors), the exception's class counted in the stats
                reason = fetch_error_reason(exc)
                self.crawler.stats.inc_value(f"lookbench/fetch_errors/{reason}/{type(exc).__name__}")
                if last_answer(request):  # the retries ran out after an error answer: the row names that answer
                    status = last_answer(request)
                    reason = f"http_{status}"
        fetched_at = request.meta.get("lookbench_fetched_at") if status else None
        if reason == REDIRECT_DUPLICATE:
            # a redirect to a page the crawl requested already: the row a followed redirect gets (not a rejection;
            # the target has its own row, named in the row's redirect_to)
            row = self._redirected(request.url, status, exc.target, fetched_at)
            if row is not None:
                yield row
            return
        row = self._page(request.url, status, "rejected", reason)
        if isinstance(getattr(exc, "target", None), str):  # a refused redirect (RedirectRefused): where it led,
            from lookbench_pipeline.extract.images import refused_form  # bounded: a Location can be megabytes

            target = self._here(exc.target)
            if self.site.recorded_origin and self.base_url:
                # the serving origin replaced before the cut, as crawl._rebase would replace it after: the cut's
                # digest is of the URL it shows, the same in the live crawl and a replay served on another port
                target = rebase_url(target, self.base_url, self.site.recorded_origin)
            row["redirect_to"] = refused_form(target)
        if fetched_at:
            # a response came (a 404, a refused redirect): the row is stamped with its fetch time, as the items
            # of a page are (replay.FetchTimeMiddleware), so a replay of the archive stamps the same time
            row["crawled_at"] = fetched_at
        yield row


BAD_URL_NOT_HTTP = "bad_url:not_http"  # a sitemap <loc> that is no absolute http(s) URL (relative, javascript:…)
BAD_URL_MALFORMED = "bad_url:malformed"  # a sitemap <loc> that does not parse (http://[::1/x) or names no host
BAD_SITEMAP_NOT_XML = "bad_sitemap:not_xml"  # not XML at all (an HTML page with a doctype, text, binary)
BAD_SITEMAP_NOT_A_SITEMAP = "bad_sitemap:not_a_sitemap"  # XML whose root is neither <urlset> nor <sitemapindex>
BAD_SITEMAP_EMPTY = "bad_sitemap:empty"  # an empty body
BAD_SITEMAP_BAD_GZIP = "bad_sitemap:bad_gzip"  # gzip magic, but the data cannot be decompressed
BAD_SITEMAP_TOO_LARGE = "bad_sitemap:too_large"  # a gzipped sitemap larger than DOWNLOAD_MAXSIZE unpacked
BAD_SITEMAP_BROKEN_XML = "bad_sitemap:broken_xml"  # a sitemap whose XML breaks after some entries (those are kept)


def sitemap_entries(body, max_size=0):
    """A sitemap response's body read: ``([type, entry…], problem)``. ``type`` is ``urlset`` or ``sitemapindex``;
    ``problem`` is None, or the row's reason (``bad_sitemap:…``, a readable name, never an exception class). The
    entries are None when nothing could be read; a sitemap whose XML breaks after some entries gives those and
    ``bad_sitemap:broken_xml``."""
    if body[:2] == b"\x1f\x8b":  # a .xml.gz sitemap served without Content-Encoding
        from scrapy.utils.gz import gunzip

        try:
            body = gunzip(body, max_size=max_size)
        except Exception as exc:
            too_large = "max" in type(exc).__name__.lower() or "larger than" in str(exc)
            return None, BAD_SITEMAP_TOO_LARGE if too_large else BAD_SITEMAP_BAD_GZIP
    if not body.strip():
        return None, BAD_SITEMAP_EMPTY
    try:
        sm = Sitemap(body)
    except Exception:  # lxml's XMLSyntaxError, or StopIteration: not one element could be read
        return None, BAD_SITEMAP_NOT_XML
    if sm.type not in SITEMAP_TYPES:
        return None, BAD_SITEMAP_NOT_A_SITEMAP
    entries = [sm.type]
    try:
        entries.extend(sm)
    except Exception:
        return (entries, BAD_SITEMAP_BROKEN_XML) if len(entries) > 1 else (None, BAD_SITEMAP_NOT_XML)
    return entries, None


def page_text(response):
    """A page response as text. A page rendered in Chromium (scrapy-playwright) is the rendered DOM, which
    scrapy-playwright encodes itself and names in ``response.encoding``: the HTTP header's charset describes the
    original bytes, not these, so decoding by it garbles a non-UTF-8 page ("MÃ¼llers"). Other pages are decoded
    from their bytes by ``decode_html``, the library's one rule for page bytes."""
    if response.meta.get("playwright"):
        return response.body.decode(response.encoding or "utf-8", errors="replace")
    return decode_html(response.body, response.headers.get(b"Content-Type", b"").decode("latin-1") or None)[0]



def _key(url):
    """A URL's identity among the crawl's redirect rows: the duplicate filter's canonical form, else as written (a
    host IDNA refuses)."""
    try:
        return canonical(url)
    except ValueError:
        return url


def resume_key(url):
    """A page's identity across the attempts of one crawl (``lookbench_pipeline.crawl.resume_key``: the URL, less
    the port of a loopback host, which the demo and replay servers change each attempt)."""
    return _resume_key(url)


def finished_pages(feed_path):
    """``resume_key`` of the pages an earlier run finished (``lookbench_pipeline.crawl.finished_urls``: a page item
    in the feed and as many product / look items for that URL as its ``n_items``). A torn last line is ignored."""
    from pathlib import Path

    p = Path(feed_path)
    if not p.is_file():
        return set()
    return {resume_key(u) for u in finished_urls([it for it in read_feed(p) if isinstance(it, dict)])}
