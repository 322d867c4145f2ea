"""The pipeline file's model: :class:`PipelineConfig`, everything one release build needs, its cross-field
checks (site files, drop folders, the taxonomy's categories) and the paths derived from it."""

from __future__ import annotations

from contextvars import ContextVar
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from ..layout import DataLayout
from ..package_data import DEFAULT_TAXONOMY, DEMO_SITE
from .base import PathValue
from .inference import AigenConfig, AnnotateConfig, DetectConfig
from .sections import (CardConfig, ChecksConfig, ContaminationConfig, DedupConfig, DropConfig, EvaluateConfig,
                       ImageConfig, NegativesConfig, StoreConfig)
from .sites import BASE, SiteConfig


FROM_FILE: ContextVar[bool] = ContextVar("lookbench_config_from_file", default=False)
"""True while :func:`lookbench_pipeline.config.load_config` builds the configuration of a file: ``sites`` then
defaults to no site, not to the embedded demo shop (:func:`_default_sites`)."""


def _default_sites() -> list[Path]:
    """The embedded demo shop for the built-in configuration (no file); none for a configuration file, which means
    what it says: without ``sites`` it has no site, so it is not the demo and gets none of the demo's defaults
    (:meth:`PipelineConfig._no_demo_sources`). ``sites`` stays unset, so that a build refuses such a file with
    :func:`lookbench_pipeline.config.require_named_sites`'s message."""
    return [] if FROM_FILE.get() else [DEMO_SITE]


class PipelineConfig(BaseSettings):
    """Everything one release build needs."""

    model_config = SettingsConfigDict(env_prefix="LOOKBENCH_", env_nested_delimiter="__", extra="forbid")

    data_dir: PathValue = Path("data")
    store: StoreConfig = Field(default_factory=StoreConfig)
    # The embedded demo shop when unset and no configuration file is given; a file without it has no site (and a
    # build from a file must name its sites: lookbench_pipeline.cli.build, README.md "Configuration").
    sites: list[PathValue] = Field(default_factory=_default_sites)
    drops: list[DropConfig] = Field(default_factory=list)
    taxonomy: PathValue = DEFAULT_TAXONOMY
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

    @field_validator("drops")
    @classmethod
    def _drop_names(cls, v: list[DropConfig]) -> list[DropConfig]:
        seen: dict[str, int] = {}
        for i, d in enumerate(v):
            if d.name in seen:
                raise ValueError(f"drops[{seen[d.name]}] and drops[{i}] are both named {d.name!r}: a drop's name "
                                 "must be unique (it makes its items' ids and keys its first-seen records)")
            seen[d.name] = i
        return v

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
        sites = self.site_configs()  # raises ConfigError on an invalid site file
        if not any(s.kind == "demo" for s in sites):
            self._no_demo_sources()
        for site in sites:
            if site.name in names:
                raise ValueError(f"two site files are named {site.name!r}")
            names.add(site.name)
            if site.kind == "replay" and not Path(site.pages_dir).is_dir():  # set: SiteConfig requires it
                raise ValueError(f"replay site {site.name!r}: pages_dir {site.pages_dir} is not a folder")
            based = [u for u in site.start_urls + site.sitemap_urls if u.startswith(BASE)]
            if site.kind == "web" and based:  # a build serves no web site locally: {{BASE}} would be ''
                raise ValueError(f"web site {site.name!r}: {based[0]!r} begins with {BASE}, the local server of a "
                                 "demo or replay site; a web site's start and sitemap URLs are absolute http(s) "
                                 "URLs (https://shop.example/sitemap.xml)")
        if self.drops and not self.sites and "sites" in self.model_fields_set:  # unset: require_named_sites says
            raise ValueError("sites is empty but drops are configured: at least one site is needed, because the "
                             "release job reads the window's weekly crawls (drop-only builds are not supported; "
                             "see README.md, Configuration)")
        for d in self.drops:
            if not Path(d.path).is_dir():
                raise ValueError(f"drop {d.name!r}: {d.path} is not a folder")
            if d.items_csv is not None and not Path(d.items_csv).is_file():
                raise ValueError(f"drop {d.name!r}: items_csv {d.items_csv} is not a file")
            for sub in d.subfolders:  # a subfolder that is a link out of the drop: its files link_outside_drop
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
            from ..taxonomy import Taxonomy

            unknown = sorted(set(self.aigen.categories) - set(Taxonomy.load(self.taxonomy).categories))
            if unknown:
                raise ValueError(f"aigen.categories: {unknown} are not categories of the taxonomy {self.taxonomy}")
        self._check_detect()
        self._check_legacy_paths()
        return self

    def _check_legacy_paths(self) -> None:
        """Every legacy benchmark the configuration names exists (a relative path is under ``data_dir``), except a
        demo tree (``demo: true``), which the stage generates when it is missing."""
        for section, key in (("contamination", "sources"), ("negatives", "sources"), ("evaluate", "legacy")):
            for i, src in enumerate(getattr(getattr(self, section), key)):
                if src.demo:
                    continue
                path = self.layout.resolve(Path(src.path))
                if not path.exists():
                    raise ValueError(f"{section}.{key}[{i}] ({src.name!r}): path {path} does not exist (a legacy "
                                     f"benchmark of kind {src.kind}; only a demo tree is generated when missing)")

    def _no_demo_sources(self) -> None:
        """A configuration without a demo site gets none of the demo's legacy benchmarks by default: the defaults of
        ``contamination.sources``, ``negatives.sources`` and ``evaluate.legacy`` are trees the demo shop draws, so
        for a real shop they are empty (no legacy benchmark, no noise gallery, no legacy scores) unless the file
        names its own. A section's value that the file or the environment sets is kept as it is."""
        for section, key in (("contamination", "sources"), ("negatives", "sources"), ("evaluate", "legacy")):
            sub = getattr(self, section)
            if key not in sub.model_fields_set:
                object.__setattr__(sub, key, [s for s in getattr(sub, key) if not s.demo])

    def _check_detect(self) -> None:
        """The detector's class mapping names taxonomy categories only (checked against the model at load)."""
        if not self.detect.enabled or not self.detect.classes:
            return
        from ..taxonomy import Taxonomy

        known = set(Taxonomy.load(self.taxonomy).categories)
        for cls_name, cats in self.detect.classes.items():
            unknown = [c for c in cats if c not in known]
            if unknown:
                raise ValueError(f"detect.classes[{cls_name!r}]: {unknown} not in the taxonomy {self.taxonomy} "
                                 f"(categories: {sorted(known)})")

    @property
    def layout(self) -> DataLayout:
        """Where each kind of file lives under ``data_dir`` (:class:`lookbench_pipeline.layout.DataLayout`)."""
        return DataLayout(Path(self.data_dir))

    @property
    def detector_cache_dir(self) -> Path:
        """Where trained detectors and ultralytics' settings live (``detect.cache_dir`` or
        ``<data_dir>/detector``)."""
        return Path(self.detect.cache_dir or self.layout.detector).resolve()

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
            return str(self.layout.store)
        if "://" in url:
            return url
        return str(Path(url) if Path(url).is_absolute() else (Path.cwd() / url))
