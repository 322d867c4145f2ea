"""The sections of the pipeline file for the data side of a build: where things are stored, drop folders and
their annotation files, image intake, dedup, legacy benchmarks and contamination, soft negatives, evaluation, the
dataset card and the asset checks' thresholds."""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path, PurePosixPath
from collections.abc import Iterable
from typing import Annotated, Any, Literal

from pydantic import Field, StrictInt, field_validator, model_validator

from ..foreground import MAX_FOREGROUND_DELTA_E
from .base import SUBSET_NAMES, Name, PathValue, _Strict, template_fields


class StoreConfig(_Strict):
    """Where releases and original image bytes live: a local folder, or ``s3://bucket/prefix``."""

    url: str | None = Field(default=None, min_length=1)  # default: <data_dir>/store
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
    path: PathValue
    image_name: list[str] = Field(min_length=1)
    categories: PathValue | None = None
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

    ``name`` is unique among the drops and one file name (:data:`~.base.Name`). ``subfolders`` maps a subfolder to
    ``"<subset>:<role>"`` (e.g. ``studio: "real_studio_flat:gallery"``); a key is a folder inside the drop folder:
    relative, without ``..``, not the folder itself, none inside another (a file is in one subfolder).
    An ``items.csv`` in the folder (or at ``items_csv``) gives per image ``path,item_id,role,subset,title,
    description`` and optionally ``category`` and ``attributes`` (``name: value; …``, the item's own facets);
    one row per file, its path inside a mapped subfolder (README.md, "Image drops").
    ``annotations`` lists data sets' own annotation files that describe the drop's photos
    (:class:`AnnotationFileConfig`); their labels come first (docs/ANNOTATION.md, "Imported labels"). An image
    that neither an annotation, nor facets, nor its title or description labels is rejected ``not_labelled`` at
    the release (a VLM annotator labels from pixels).
    """

    name: Name = Field(min_length=1)
    path: PathValue
    subfolders: dict[str, str] = Field(min_length=1)
    items_csv: PathValue | None = None
    annotations: list[AnnotationFileConfig] = Field(default_factory=list)
    # What a release says of this drop (docs/SOURCES.md inside the release): the licence of its pictures and where
    # they come from. Unset: "not declared".
    license: str | None = None
    source: str | None = None

    @field_validator("subfolders")
    @classmethod
    def _targets(cls, v: dict[str, str]) -> dict[str, str]:
        seen: dict[PurePosixPath, str] = {}
        for sub, target in v.items():
            rel = PurePosixPath(sub)
            if not sub.strip() or rel.is_absolute() or ".." in rel.parts or rel == PurePosixPath(".") or \
                    "\\" in sub or "\x00" in sub:
                raise ValueError(f"subfolder {sub!r}: a subfolder key is a folder inside the drop folder, relative, "
                                 "without '..' (e.g. studio or photos/studio)")
            for other, name in seen.items():
                if rel == other or rel.is_relative_to(other) or other.is_relative_to(rel):
                    raise ValueError(f"subfolders {name!r} and {sub!r} name the same folder or one inside the "
                                     "other: each file must lie in one mapped subfolder")
            seen[rel] = sub
            subset, _, role = target.partition(":")
            if subset not in SUBSET_NAMES or role not in ("query", "gallery"):
                raise ValueError(f"subfolder {sub!r} maps to {target!r}; expected '<subset>:<query|gallery>' with "
                                 f"a subset in {list(SUBSET_NAMES)}")
        return v

    @field_validator("annotations")
    @classmethod
    def _distinct_annotations(cls, v: list[AnnotationFileConfig]) -> list[AnnotationFileConfig]:
        seen: dict[tuple, int] = {}
        for i, a in enumerate(v):
            key = (a.kind, Path(a.path), a.view, tuple(a.image_name), a.categories)
            if key in seen:
                raise ValueError(f"annotations[{i}] repeats annotations[{seen[key]}] ({a.kind} {a.path}, the same "
                                 "photo names): one file read twice would give its photos every label twice")
            seen[key] = i
        return v


def unique_names(sources: list[LegacySource]) -> list[LegacySource]:
    """``sources`` when no two share a ``name`` (the name keys their index rows, pool images and scores);
    ValueError otherwise (pydantic's location names the field)."""
    seen: set[str] = set()
    for s in sources:
        if s.name in seen:
            raise ValueError(f"two sources are named {s.name!r}; a source's name must be unique (it keys the "
                             "rows read from it)")
        seen.add(s.name)
    return sources


class ImageConfig(_Strict):
    min_side_px: int = Field(default=32, ge=1)  # intake: below this an image is not a picture at all (too_small)
    # A gallery image's short side must be at least this (pixels; rejected gallery_too_small): retrieval models read
    # 224 x 224 inputs (CLIP ViT-B/16 and EfficientNet-Lite0 at 224, the registry's smallest), so a shorter side is
    # a thumbnail the model would enlarge (a shop's 78-156 px swatches and strip images), not the item's photo.
    # At least min_side_px: a gallery picture is a picture first.
    gallery_min_side_px: int = Field(default=200, ge=1)
    max_pixels: int = Field(default=64_000_000, ge=1)  # decompression-bomb guard, checked before decoding
    max_bytes: int = Field(default=50_000_000, ge=1)
    fetch_workers: int = Field(default=8, ge=1, le=256)

    @model_validator(mode="after")
    def _gallery_above_intake(self) -> "ImageConfig":
        if self.gallery_min_side_px < self.min_side_px:
            raise ValueError(f"gallery_min_side_px ({self.gallery_min_side_px}) must be >= min_side_px "
                             f"({self.min_side_px}): a gallery picture must first pass intake")
        if self.max_pixels < self.min_side_px * self.min_side_px:
            raise ValueError(f"max_pixels ({self.max_pixels}) is below min_side_px squared ({self.min_side_px}^2): "
                             "no picture could pass")
        return self


class DedupConfig(_Strict):
    hamming_threshold: int = Field(default=6, ge=0, le=64)  # pHash bits (of 64); <= this is a near duplicate
    # 90th pct abs difference of 8x8 colour signatures (0..255) to confirm a near pair
    max_color_diff: float = Field(default=32.0, ge=0, le=255)
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

    name: str = Field(min_length=1)
    kind: Literal["fashion200k", "fashion200k_parquet", "deepfashion_inshop", "deepfashion2", "folder"]
    path: PathValue
    demo: bool = False


def _demo_legacy() -> list[LegacySource]:
    return [LegacySource(name="fashion200k-demo", kind="fashion200k", path=Path("legacy/fashion200k-demo"),
                         demo=True)]


class ContaminationConfig(_Strict):
    sources: list[LegacySource] = Field(default_factory=_demo_legacy)
    include_published_releases: bool = True

    @field_validator("sources")
    @classmethod
    def _names(cls, v: list[LegacySource]) -> list[LegacySource]:
        return unique_names(v)


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
        return unique_names(v)

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
    # Recall@K and nDCG@K at each of these K (every K >= 1, each once); a K larger than a subset's gallery is
    # scored (Recall@K is then 1 for a query with any positive in the gallery) and `lookbench evaluate` says so
    # (integers: `true` is no K)
    ks: list[Annotated[StrictInt, Field(ge=1)]] = Field(default_factory=lambda: [1, 5, 10, 20], min_length=1)
    # nDCG also at this K (unset: nDCG at the K of ks only)
    ndcg_k: StrictInt | None = Field(default=None, ge=1)
    # score only queries first seen on or after this date (YYYY-MM-DD), or "model": each model's declared
    # training cutoff (model_cutoffs, else the registry)
    cutoff: str | None = None
    model_cutoffs: dict[str, str] = Field(default_factory=dict)  # model id -> YYYY-MM-DD
    exclude_contaminated: bool = True  # re-check queries against the current contamination index
    report_examples: int = Field(default=6, ge=0)  # queries per subset shown with each model's top-5 in the HTML report

    @field_validator("legacy")
    @classmethod
    def _legacy_names(cls, v: list[LegacySource]) -> list[LegacySource]:
        return unique_names(v)

    @field_validator("ks")
    @classmethod
    def _distinct_ks(cls, v: list[int]) -> list[int]:
        return check_ks(v)

    @field_validator("cutoff", mode="before")
    @classmethod
    def _cutoff(cls, v: Any) -> Any:
        return v if v is None or v == "model" else _iso_day(v)

    @field_validator("model_cutoffs", mode="before")
    @classmethod
    def _model_cutoffs(cls, v: Any) -> Any:
        return {k: _iso_day(d) for k, d in v.items()} if isinstance(v, dict) else v


def check_ks(ks: Any) -> list[int]:
    """The K of Recall@K and nDCG@K, as ``evaluate.ks`` and :func:`lookbench_pipeline.score` take them: one or more
    integers (a bool is no K), each >= 1 and each once. Returns them as a list of ``int``; raises ValueError naming
    the problem."""
    import numbers

    if isinstance(ks, (str, bytes)) or not isinstance(ks, Iterable):
        raise ValueError(f"K must be a list of integers, got {ks!r}")
    ks = list(ks)
    bad = [k for k in ks if isinstance(k, bool) or not isinstance(k, numbers.Integral)]
    if bad:
        raise ValueError(f"K must be integers, got {bad[0]!r}")
    ks = [int(k) for k in ks]
    if not ks or min(ks) < 1:
        raise ValueError(f"K must be one or more integers >= 1, got {ks}")
    twice = sorted({k for k in ks if ks.count(k) > 1})
    if twice:
        raise ValueError(f"K {', '.join(map(str, twice))} given more than once: name each K once")
    return ks


def parse_day(v: Any) -> date:
    """A day given as ``YYYY-MM-DD`` (a string in exactly that form, or a ``date``: YAML reads an unquoted
    ``2030-10-01`` as one): the one rule for every cutoff date (``evaluate.cutoff``, ``evaluate.model_cutoffs``,
    ``--cutoff``, ``--training-cutoff``, :func:`lookbench_pipeline.score`). ``date.fromisoformat`` alone would also
    take ``20301001`` and ``2030-W40-1``. Raises ValueError for anything else (a time of day included)."""
    from datetime import datetime

    if isinstance(v, date) and not isinstance(v, datetime):
        return v
    if isinstance(v, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", v):
        return date.fromisoformat(v)  # ValueError: no such day
    if isinstance(v, datetime):  # YAML reads `2026-03-01 10:00:00+05:00` as one: said as written, not as a repr
        raise ValueError(f"expected a date YYYY-MM-DD, got a date and time {v.isoformat(sep=' ')}")
    raise ValueError(f"expected a date YYYY-MM-DD, got {v!r}")


def _iso_day(v: Any) -> str:
    """A day as the ``YYYY-MM-DD`` string the configuration keeps (:func:`parse_day`). Raises ValueError."""
    return parse_day(v).isoformat()


class CardConfig(_Strict):
    """What a release's dataset card (README.md) and croissant.json say about terms and citation
    (``lookbench_pipeline.releases.card.CardInfo``; unset fields keep its defaults). ``license`` is a Hugging Face
    licence id, or ``other`` with ``license_name`` / ``license_link``."""

    license: str | None = None
    license_name: str | None = None
    license_link: str | None = None
    license_text: str | None = None
    homepage: str | None = None
    citation: str | None = None
    publisher: str | None = None


class Bounds(_Strict):
    """An expected range; ``None`` leaves that side open."""

    min: float | None = None
    max: float | None = None

    @model_validator(mode="after")
    def _ordered(self) -> "Bounds":
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) must be <= max ({self.max})")
        return self

    def holds(self, value: float) -> bool:
        return (self.min is None or value >= self.min) and (self.max is None or value <= self.max)


class ChecksConfig(_Strict):
    """Thresholds of the asset checks (``assets/checks.py``). Rates are fractions in [0, 1]; counts are rows.

    ``severity`` overrides a check's default severity by check name (``error`` fails the check and, for a
    blocking check, stops the assets downstream of it in the same run, the publish step included; ``warn``
    records the failure and lets the run go on).
    """

    products_per_crawl: Bounds = Field(default_factory=lambda: Bounds(min=1))  # one site's weekly crawl
    max_page_rejection_rate: float = Field(default=0.5, ge=0, le=1)  # rejected pages / pages handled, one weekly crawl
    # image URLs not downloaded / image URLs, one weekly crawl
    max_download_failure_rate: float = Field(default=0.5, ge=0, le=1)
    products_per_window: Bounds = Field(default_factory=lambda: Bounds(min=1))  # the window's catalogue
    max_image_rejection_rate: float = Field(default=0.5, ge=0, le=1)  # rejected image references / references
    max_near_duplicate_rate: float = Field(default=0.5, ge=0, le=1)  # near-duplicate images / distinct images
    # images matching a legacy benchmark or earlier release / images
    max_contamination_rate: float = Field(default=0.2, ge=0, le=1)
    # labelled / items the annotator could judge (the annotator's or judge's acceptance); items rejected for a
    # reason in annotation_not_attempted had nothing to judge from (no_text) or are not garments of the taxonomy
    # at all (no_category_match: a shop's perfume, a general store's electronics), so they say nothing about label
    # quality; they are counted apart in the check's metadata
    min_annotation_acceptance_rate: float = Field(default=0.5, ge=0, le=1)
    annotation_not_attempted: list[str] = Field(default_factory=lambda: ["no_text", "no_category_match"])
    queries_per_subset: Bounds = Field(default_factory=lambda: Bounds(min=1))  # subsets that have queries
    gallery_per_subset: Bounds = Field(default_factory=lambda: Bounds(min=1))
    # rejected candidates / candidates of the release
    max_candidate_rejection_rate: float = Field(default=0.95, ge=0, le=1)
    # failed / requests a generator was asked to answer (generated + failed; pending and skipped not counted), one
    # window: above it the generator is down or broken (a connection_error outage is 1.0) and the release, which
    # would go out without its AI-generated subsets and could never be completed (versions are immutable), is
    # stopped. Refusals of single prompts (a content filter, a malformed answer now and then) stay below it.
    max_generation_failure_rate: float = Field(default=0.5, ge=0, le=1)
    query_gallery_overlap_allowed: list[str] = Field(default_factory=list)  # subsets where it is intended
    severity: dict[str, Literal["error", "warn"]] = Field(default_factory=dict)
