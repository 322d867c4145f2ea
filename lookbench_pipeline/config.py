"""Configuration: one pydantic model for a release build, loaded from a YAML file and the environment.

Precedence (highest first): environment variables ``LOOKBENCH_<FIELD>`` (nested with ``__``, e.g.
``LOOKBENCH_STORE__URL``), the YAML file named by ``LOOKBENCH_CONFIG`` (or passed explicitly), the defaults below.
The defaults are the embedded demo: a shop the project generates and serves on 127.0.0.1.

Relative paths in a YAML file are resolved against the folder of that file; relative paths from the environment or
defaults against the working directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

PACKAGE_DATA = Path(__file__).parent / "data"
DEFAULT_TAXONOMY = PACKAGE_DATA / "taxonomy_v1.yaml"
DEMO_SITE = PACKAGE_DATA / "sites" / "demo.yaml"


class ConfigError(ValueError):
    """A configuration file or value is invalid (the message names the file and field)."""


class LookRules(BaseModel):
    """CSS selectors that find a "shop the look" block on a page."""

    image: str = "img.look-image::attr(src)"
    products: str = "a.look-product::attr(href)"


class ProductRules(BaseModel):
    """Fallback CSS selectors for pages without schema.org data (each returns text or an attribute)."""

    title: str | None = None
    price: str | None = None
    brand: str | None = None
    sku: str | None = None
    images: str | None = None
    description: str | None = None


class SiteConfig(BaseModel):
    """One shop to crawl (a YAML file per site).

    ``kind`` says where the pages come from: ``web`` (a real site), ``demo`` (the embedded demo shop, generated and
    served on 127.0.0.1 for the crawl) or ``replay`` (saved HTML pages under ``pages_dir`` served on 127.0.0.1).
    """

    name: str
    kind: Literal["web", "demo", "replay"] = "web"
    start_urls: list[str] = Field(default_factory=list)
    sitemap_urls: list[str] = Field(default_factory=list)
    allowed_hosts: list[str] = Field(default_factory=list)
    image_hosts: list[str] = Field(default_factory=list)
    allow_private_addresses: bool = False
    follow_links: bool = True
    shopify: bool = False  # also read the shop's public /products.json (paginated) and /products/<handle>.json
    render_js: bool = False  # render pages in headless Chromium (scrapy-playwright) before extraction
    chromium_path: str = "/usr/bin/chromium"  # Debian's chromium; Playwright's own browser download is not used
    max_pages: int = 10_000
    download_delay_s: float = 0.0
    concurrency_per_domain: int = 8
    look_rules: LookRules = Field(default_factory=LookRules)
    product_rules: ProductRules = Field(default_factory=ProductRules)
    # demo / replay specifics
    demo_products: int = 48
    demo_looks: int = 12
    demo_seed: int = 7
    pages_dir: Path | None = None
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
            raise ConfigError(f"{path}: {exc}") from exc


class StoreConfig(BaseModel):
    """Where releases and original image bytes live: a local folder, or ``s3://bucket/prefix``."""

    url: str = "data/store"
    endpoint_url: str | None = None
    region: str = "us-east-1"
    # Stores that reject boto3's newer default checksum trailers need "when_required".
    checksum_mode: Literal["when_supported", "when_required"] = "when_required"


class DropConfig(BaseModel):
    """A folder of images that enters the pipeline without a crawl (real photos, AI-generated images).

    Each direct subfolder is mapped to a subset by ``subfolders`` (e.g. ``studio: real_studio_flat``). An optional
    ``items.csv`` in the folder (or at ``items_csv``) gives per image: ``path,item_id,role,title,description``.
    """

    name: str
    path: Path
    subfolders: dict[str, str] = Field(default_factory=dict)
    items_csv: Path | None = None


class ImageConfig(BaseModel):
    min_side_px: int = 32
    max_pixels: int = 64_000_000  # decompression-bomb guard, checked before decoding
    max_bytes: int = 50_000_000
    fetch_timeout_s: float = 20.0
    fetch_workers: int = 8


class DedupConfig(BaseModel):
    hamming_threshold: int = 6  # pHash bits; <= this is a near duplicate
    max_color_diff: float = 32.0  # 90th pct abs difference of 8x8 colour signatures (0..255) to confirm a near pair


class LegacySource(BaseModel):
    """A legacy benchmark on disk, read in its own format (see lookbench_pipeline.contamination).

    A relative ``path`` is under ``data_dir``. ``demo: true`` generates a small Fashion200K-format tree there
    (with two leaked demo-shop images) when it does not exist: the embedded default's legacy benchmark.
    """

    name: str
    kind: Literal["fashion200k", "deepfashion_inshop", "deepfashion2", "folder"]
    path: Path
    demo: bool = False


def _demo_legacy() -> list[LegacySource]:
    return [LegacySource(name="fashion200k-demo", kind="fashion200k", path=Path("legacy/fashion200k-demo"),
                         demo=True)]


class ContaminationConfig(BaseModel):
    sources: list[LegacySource] = Field(default_factory=_demo_legacy)
    include_published_releases: bool = True


class EvaluateConfig(BaseModel):
    models: list[str] = Field(default_factory=lambda: ["baseline/hsv-hog-v1"])
    ks: list[int] = Field(default_factory=lambda: [1, 5, 10])
    ndcg_k: int = 5
    cutoff: str | None = None


class PipelineConfig(BaseSettings):
    """Everything one release build needs."""

    model_config = SettingsConfigDict(env_prefix="LOOKBENCH_", env_nested_delimiter="__", extra="forbid")

    data_dir: Path = Path("data")
    store: StoreConfig = Field(default_factory=StoreConfig)
    sites: list[Path] = Field(default_factory=lambda: [DEMO_SITE])
    drops: list[DropConfig] = Field(default_factory=list)
    taxonomy: Path = DEFAULT_TAXONOMY
    images: ImageConfig = Field(default_factory=ImageConfig)
    dedup: DedupConfig = Field(default_factory=DedupConfig)
    contamination: ContaminationConfig = Field(default_factory=ContaminationConfig)
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig)
    user_agent: str = "LookBenchBot/0.1 (+https://github.com/lookbench/lookbench-pipeline; research benchmark crawler)"
    timezone: str = "UTC"

    @field_validator("sites")
    @classmethod
    def _sites_exist(cls, v: list[Path]) -> list[Path]:
        out = []
        for p in v:
            p = Path(p).resolve()
            if not p.is_file():
                raise ValueError(f"site config not found: {p}")
            out.append(p)
        return out

    @field_validator("data_dir", "taxonomy")
    @classmethod
    def _absolute(cls, v: Path) -> Path:
        return Path(v).expanduser().resolve()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (env_settings, init_settings)

    def site_configs(self) -> list[SiteConfig]:
        return [SiteConfig.from_yaml(p) for p in self.sites]

    @property
    def store_url(self) -> str:
        url = self.store.url
        if "://" in url:
            return url
        return str(Path(url) if Path(url).is_absolute() else (Path.cwd() / url))


_PATH_KEYS = ("data_dir", "taxonomy")


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data


def load_config(path: str | Path | None = None, **overrides: Any) -> PipelineConfig:
    """Load the pipeline configuration.

    Args:
        path: a YAML file; ``None`` uses ``$LOOKBENCH_CONFIG`` if set, else the embedded demo defaults.
        overrides: field values that win over the file (not over the environment).

    Raises:
        ConfigError: the file is missing or invalid.
    """
    path = path or os.environ.get("LOOKBENCH_CONFIG")
    data: dict[str, Any] = {}
    if path:
        path = Path(path)
        data = _read_yaml(path)
        base = path.parent.resolve()
        for key in _PATH_KEYS:
            if key in data:
                data[key] = str(_resolve(base, data[key]))
        if "sites" in data:
            data["sites"] = [str(_resolve(base, s)) for s in data["sites"]]
        for drop in data.get("drops", []):
            drop["path"] = str(_resolve(base, drop["path"]))
            if drop.get("items_csv"):
                drop["items_csv"] = str(_resolve(base, drop["items_csv"]))
        for src in (data.get("contamination") or {}).get("sources", []):
            src["path"] = str(_resolve(base, src["path"]))
        store = data.get("store") or {}
        if store.get("url") and "://" not in store["url"]:
            store["url"] = str(_resolve(base, store["url"]))
    data.update(overrides)
    try:
        return PipelineConfig(**data)
    except Exception as exc:  # pydantic.ValidationError
        raise ConfigError(f"{path or 'defaults'}: {exc}") from exc


def _resolve(base: Path, p: str | Path) -> Path:
    p = Path(os.path.expandvars(str(p))).expanduser()
    return p if p.is_absolute() else (base / p).resolve()
