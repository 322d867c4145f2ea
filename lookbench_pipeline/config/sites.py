"""One shop to crawl: a site file (:class:`SiteConfig`) and its extraction rules (:class:`LookRules`,
:class:`ProductRules`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator

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
    start_urls: list[str] = Field(default_factory=list)
    sitemap_urls: list[str] = Field(default_factory=list)
    allowed_hosts: list[str] = Field(default_factory=list)
    image_hosts: list[str] = Field(default_factory=list)
    # The egress policy (lookbench_pipeline.egress): only globally routable addresses, on allowed_ports. With
    # allow_private_addresses, exactly the host:port pairs of the site's own start and sitemap URLs may be on a
    # loopback or private address (the demo and replay servers on 127.0.0.1:<port>), no other; allowed_addresses
    # names further exact pairs ("10.1.2.3:8080", or an address alone for every port) for a named test host.
    allow_private_addresses: bool = False
    allowed_ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(default_factory=lambda: [80, 443])
    allowed_addresses: list[str] = Field(default_factory=list)
    follow_links: bool = True
    shopify: bool = False  # also read the shop's public /products.json (paginated) and /products/<handle>.json
    render_js: bool = False  # render pages in headless Chromium (scrapy-playwright) before extraction
    # Further hosts a rendered page may load scripts, styles and data from (a CDN), besides the site's own hosts
    # and image_hosts; every request Chromium makes meets the egress policy
    # (crawlers/lookbench_crawlers/render_guard.py)
    render_hosts: list[str] = Field(default_factory=list)
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
    public_origin: str | None = None

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
        if data.get("pages_dir"):
            data["pages_dir"] = str((path.parent / data["pages_dir"]).resolve())
        try:
            return cls(**data)
        except Exception as exc:  # pydantic.ValidationError, TypeError
            raise ConfigError(f"{path}: {describe_error(exc, cls)}") from exc
