"""One shop to crawl: a site file (:class:`SiteConfig`) and its extraction rules (:class:`LookRules`,
:class:`ProductRules`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, field_validator, model_validator

from .base import ConfigError, Name, PathValue, _read_yaml, _Strict, describe_error


class LookRules(_Strict):
    """CSS (or XPath) rules that find a "shop the look" block on a page."""

    image: str = "img.look-image::attr(src)"
    products: str = "a.look-product::attr(href)"

    @field_validator("image", "products")
    @classmethod
    def _valid(cls, v: str) -> str:
        return _check_rule(v)


class ProductRules(_Strict):
    """Fallback CSS selectors for pages without schema.org data (each returns text or an attribute)."""

    title: str | None = None
    price: str | None = None
    brand: str | None = None
    sku: str | None = None
    images: str | None = None
    description: str | None = None

    @field_validator("title", "price", "brand", "sku", "images", "description")
    @classmethod
    def _valid(cls, v: str | None) -> str | None:
        return _check_rule(v)


def _check_rule(rule: str | None) -> str | None:
    """A CSS or XPath rule that compiles (XPath when it starts with / or (); raises ValueError."""
    if rule:
        try:
            from parsel import Selector
        except ImportError as exc:  # the consumer install has no crawler
            raise ValueError(f"rule {rule!r} cannot be checked: the crawler is not installed "
                             "(pip install 'lookbench-pipeline[build]')") from exc

        try:
            sel = Selector(text="<html></html>")
            sel.xpath(rule) if rule.lstrip().startswith(("/", "(")) else sel.css(rule)
        except Exception as exc:
            raise ValueError(f"rule {rule!r} is not valid CSS/XPath: {exc}") from exc
    return rule


BASE = "{{BASE}}"
"""What a site's start and sitemap URLs may begin with: the origin of the server that serves the site for its crawl
(``http://127.0.0.1:<port>`` of the demo or replay server; the spider's ``base_url`` argument)."""

_HTTP = ("http", "https")


def _http_url_problem(url: str) -> str | None:
    """Why ``url`` is not an absolute http(s) URL with an ASCII host name or IPv4 address (and a port in 1–65535, if
    any), without user name or white space, or None. A non-ASCII host is asked for in its IDNA form and an IPv6
    literal is refused: the crawler's offsite filter compares host names and would drop either without a row."""
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        return "it holds white space or a control character"
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError for a port that is no number or out of range
    except ValueError as exc:
        return f"not a valid URL ({exc})"
    if parts.scheme.lower() not in _HTTP:
        return (f"scheme {parts.scheme + ':'!r} is not http or https" if parts.scheme else
                "not an absolute URL (no http:// or https://)")
    host = parts.hostname
    if not host:
        return "no host"
    if parts.username is not None or parts.password is not None:
        return "it has a user name"
    if port == 0 or parts.netloc.endswith(":"):
        return "its port is empty or 0"
    if ":" in host:
        return "an IPv6 literal host is not supported (the crawler's offsite filter drops it): use a host name"
    if not host.isascii():
        try:
            idna = host.encode("idna").decode("ascii")
        except UnicodeError:
            idna = "xn--…"
        return f"host {host!r} is not ASCII: write it in its IDNA form ({idna})"
    return None


def _crawl_url(url: str) -> str:
    """A start or sitemap URL: an absolute http(s) URL with a host, or ``{{BASE}}`` followed by a path (the local
    server's origin, for a demo or replay site). Anything else is refused: a ``file:`` URL would make the crawler
    read local files into the crawl's archive, a relative path or ``javascript:`` would crawl nothing."""
    rest = url[len(BASE):] if url.startswith(BASE) else None
    if rest is not None and BASE not in rest and (not rest or rest[0] in "/?#"):
        problem = _http_url_problem("http://127.0.0.1" + rest)
    elif BASE in url:
        problem = f"{BASE} may only begin a URL, followed by a path ({BASE}/sitemap.xml)"
    else:
        problem = _http_url_problem(url)
    if problem:
        raise ValueError(f"{problem}: a start or sitemap URL is an absolute http(s) URL (https://shop.example/), "
                         f"or for a demo or replay site a path on its local server after {BASE} ({BASE}/sitemap.xml)")
    return url


CrawlUrl = Annotated[str, AfterValidator(_crawl_url)]


def _host_entry(v: str) -> str:
    """An ``allowed_hosts`` / ``image_hosts`` / ``render_hosts`` entry: a host name or IPv4 address with an optional
    port (``shop.example``, ``cdn.shop.example:8443``), as the crawler compares it with a URL's host; no scheme,
    path, wildcard or empty entry (``*`` or ``https://shop.example/x`` would match nothing, silently)."""
    problem = _http_url_problem(f"http://{v}/") if v and "/" not in v and "@" not in v else "not a host"
    if problem is None and any(c in v for c in "*?#"):
        problem = "a wildcard is not a host (list each host)"
    if problem:
        raise ValueError(f"{v!r}: {problem}; a host entry is a host name or IPv4 address with an optional port "
                         "(shop.example, cdn.shop.example:8443)")
    return v.lower()


HostEntry = Annotated[str, AfterValidator(_host_entry)]


def _allowed_address(entry: str) -> str:
    """An ``allowed_addresses`` entry, parsed as the egress policy parses it
    (:meth:`lookbench_pipeline.egress.EgressPolicy.from_strings`): one IP address, with an optional port. No network
    and no wildcard: the unspecified address (``0.0.0.0``, ``::``) is refused, since a connection to it reaches
    this machine itself."""
    import ipaddress

    from ..egress import EgressPolicy, reached_address

    try:
        ((host, port),) = EgressPolicy.from_strings(allowed=[entry]).allowed
    except ValueError as exc:
        raise ValueError(f"{entry!r} is not an IP address with an optional port ({exc}); write an exact address "
                         "such as 10.1.2.3:8080, [fd00::5]:8080 or 10.1.2.3 (every port): networks and host names "
                         "are not allowed") from None
    if port is not None and not 1 <= port <= 65535:
        raise ValueError(f"{entry!r}: port {port} is not between 1 and 65535")
    if reached_address(ipaddress.ip_address(host)).is_unspecified:  # ::ffff:0.0.0.0 too
        raise ValueError(f"{entry!r} is the unspecified address, which a connection takes for this machine itself; "
                         "allowed_addresses names exact addresses of test hosts (10.1.2.3:8080), there is no "
                         "wildcard")
    return entry


def _public_origin(v: str | None) -> str | None:
    """An origin the recorded URLs of a demo or replay site begin with: ``http(s)://host[:port]``, with at most a
    trailing ``/`` (:attr:`SiteConfig.recorded_origin` strips it)."""
    if v is None:
        return v
    problem = _http_url_problem(v)
    if problem is None:
        parts = urlsplit(v)
        if parts.path not in ("", "/") or parts.query or parts.fragment or v.endswith(("?", "#")):
            problem = "it has a path, query or fragment"
    if problem:
        raise ValueError(f"{problem}: public_origin is an http(s) origin, scheme and host with an optional port "
                         "(https://shop.example or https://shop.example:8443), which recorded URLs begin with")
    return v


class SiteConfig(_Strict):
    """One shop to crawl (a YAML file per site).

    ``kind`` says where the pages come from: ``web`` (a real site), ``demo`` (the embedded demo shop, generated and
    served on 127.0.0.1 for the crawl) or ``replay`` (saved HTML pages under ``pages_dir`` served on 127.0.0.1).
    """

    name: Name
    kind: Literal["web", "demo", "replay"] = "web"
    # What a release says of this source (docs/SOURCES.md inside the release): the terms its pictures are used
    # under, and where they come from. Unset: the card's licence text.
    license: str | None = None
    source: str | None = None
    start_urls: list[CrawlUrl] = Field(default_factory=list)
    sitemap_urls: list[CrawlUrl] = Field(default_factory=list)
    allowed_hosts: list[HostEntry] = Field(default_factory=list)
    image_hosts: list[HostEntry] = Field(default_factory=list)
    # The egress policy (lookbench_pipeline.egress): only globally routable addresses, on allowed_ports. With
    # allow_private_addresses, exactly the host:port pairs of the site's own start and sitemap URLs may be on a
    # loopback or private address (the demo and replay servers on 127.0.0.1:<port>), no other; allowed_addresses
    # names further exact pairs ("10.1.2.3:8080", or an address alone for every port) for a named test host.
    allow_private_addresses: bool = False
    allowed_ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(default_factory=lambda: [80, 443])
    allowed_addresses: list[Annotated[str, AfterValidator(_allowed_address)]] = Field(default_factory=list)
    follow_links: bool = True
    shopify: bool = False  # also read the shop's public /products.json (paginated) and /products/<handle>.json
    render_js: bool = False  # render pages in headless Chromium (scrapy-playwright) before extraction
    # Further hosts a rendered page may load scripts, styles and data from (a CDN), besides the site's own hosts
    # and image_hosts; every request Chromium makes meets the egress policy
    # (crawlers/lookbench_crawlers/render_guard.py)
    render_hosts: list[HostEntry] = Field(default_factory=list)
    chromium_path: str = "/usr/bin/chromium"  # Debian's chromium; Playwright's own browser download is not used
    max_pages: int = Field(default=10_000, ge=1)
    download_delay_s: float = Field(default=0.0, ge=0)
    # The most seconds one URL (a page, sitemap, robots.txt or image) may hold a download slot, over all its attempts
    # and redirects: each attempt's timeout is what is left of it, and no retry starts once it is spent (reason
    # download_timeout in the crawl log or the image's download row). A server that trickles bytes (slow loris)
    # holds a slot at most this long, not DOWNLOAD_TIMEOUT x (RETRY_TIMES + 1) = 90 s. The default equals Scrapy's
    # per-attempt DOWNLOAD_TIMEOUT (30 s, crawlers/lookbench_crawlers/settings.py): an attempt that timed out is not
    # tried again, while quick failures (a reset connection, a 503) still are.
    download_budget_s: float = Field(default=30.0, gt=0, le=3600)
    concurrency_per_domain: int = Field(default=8, ge=1)
    look_rules: LookRules = Field(default_factory=LookRules)
    product_rules: ProductRules = Field(default_factory=ProductRules)
    # demo / replay specifics
    demo_products: int = Field(default=48, ge=1)
    demo_looks: int = Field(default=12, ge=0)
    demo_seed: int = 7
    # how many of the demo products are sold in two or three colours (each colour its own item, sku and photos;
    # demo_shop.colour_variants); 0 draws every product in one colour
    demo_colour_models: int = Field(3, ge=0)
    pages_dir: PathValue | None = None
    # demo / replay sites are served on a free 127.0.0.1 port; recorded URLs use this origin instead, so ids,
    # URLs and releases do not depend on the port of one run.
    public_origin: Annotated[str | None, AfterValidator(_public_origin)] = None

    @model_validator(mode="after")
    def _served_locally(self) -> "SiteConfig":
        """A replay site names its pages; a demo or replay site names what to crawl on its local server."""
        if self.kind == "replay" and self.pages_dir is None:
            raise ValueError(f"replay site {self.name!r} needs pages_dir: the folder of its saved *.html pages "
                             "(relative to the site file)")
        if self.kind in ("demo", "replay") and not self.start_urls and not self.sitemap_urls:
            raise ValueError(f"{self.kind} site {self.name!r} names no start_urls or sitemap_urls, so its crawl "
                             f"would fetch nothing: add sitemap_urls: ['{BASE}/sitemap.xml'] (its local server's "
                             f"sitemap of every page) and/or start_urls: ['{BASE}/']")
        return self

    @model_validator(mode="after")
    def _ports_reachable(self) -> "SiteConfig":
        """Each start and sitemap URL is on a port the egress policy lets the crawl reach: its written port, else
        80 or 443 by its scheme, is in ``allowed_ports``, or is an ``allowed_addresses`` pair's, or the URL's host
        is an IP literal named there without a port, or (with ``allow_private_addresses``) an IP literal or
        ``localhost``, whose own pair the crawl allows (``crawl.egress_allowances``). Else the crawl could only
        refuse it (``port_not_allowed``): a configuration error. A ``{{BASE}}`` URL's port is the local server's,
        known when it is served, and always allowed. Another host than the others' is no error: the spider adds
        every start and sitemap host to the allowed hosts."""
        import ipaddress
        from urllib.parse import urlsplit

        from ..egress import EgressPolicy, is_ip, reached_address

        pairs = EgressPolicy.from_strings(allowed=self.allowed_addresses).allowed
        for field in ("start_urls", "sitemap_urls"):
            for i, url in enumerate(getattr(self, field)):
                if url.startswith(BASE):
                    continue
                parts = urlsplit(url)
                host = (parts.hostname or "").lower()
                port = parts.port or {"http": 80, "https": 443}[parts.scheme.lower()]
                if port in self.allowed_ports or any(p == port for _, p in pairs):
                    continue
                if is_ip(host):
                    key = str(reached_address(ipaddress.ip_address(host)))
                    if (key, None) in pairs or self.allow_private_addresses:
                        continue
                elif host == "localhost" and self.allow_private_addresses:
                    continue
                raise ValueError(f"{field}[{i}] {url!r}: port {port} is not in allowed_ports "
                                 f"{list(self.allowed_ports)}, so the crawl would refuse it (port_not_allowed): add "
                                 f"{port} to allowed_ports, or fix the URL")
        return self

    @property
    def recorded_origin(self) -> str | None:
        if self.public_origin:
            return self.public_origin.rstrip("/")
        return {"demo": f"https://{self.name}.demo.lookbench.invalid",
                "replay": f"https://{self.name}.replay.lookbench.invalid"}.get(self.kind)

    @classmethod
    def from_yaml(cls, path: str | Path) -> "SiteConfig":
        """Load a site file. Raises ConfigError on a missing file or an invalid field."""
        path = Path(path)
        data = _read_yaml(path)
        if data.get("pages_dir") and isinstance(data["pages_dir"], str):  # another type: pydantic names it
            data["pages_dir"] = str((path.parent / data["pages_dir"]).resolve())
        try:
            return cls(**data)
        except Exception as exc:  # pydantic.ValidationError, TypeError
            raise ConfigError(f"{path}: {describe_error(exc, cls)}") from exc
