"""Image embedders for retrieval: one interface, several backends.

``load_embedder(model_id)`` takes:

* ``baseline/hsv-hog-v1``: a classical, training-free embedder that runs anywhere (no weights to download):
  a 3-D HSV colour histogram (8 x 4 x 4 bins) concatenated with a 4 x 4-cell histogram of oriented gradients
  (8 unsigned orientations, Dalal & Triggs 2005) of the 64 x 64 greyscale image; each part square-rooted
  (Hellinger kernel, Arandjelovic & Zisserman 2012) and L2-normalised, then the concatenation L2-normalised.
  256 dimensions.
* ``open_clip:<architecture>/<pretrained tag>`` or ``hf-hub:<repo id>`` (open_clip, e.g.
  ``open_clip:ViT-B-32/laion2b_s34b_b79k`` or ``hf-hub:Marqo/marqo-fashionSigLIP``): needs ``open-clip-torch``.
* any other id or a local folder: a Hugging Face ``transformers`` vision model (SigLIP2, DINOv2/v3,
  ``srpone/gr-lite``), embedding = the pooled output (or the CLS token), L2-normalised; needs ``transformers``.

Every embedder returns ``float32`` arrays of shape ``(n, dim)`` with unit L2 norm, and describes itself with
:meth:`Embedder.info` (id, revision, input size, dim, weights checksum), which is recorded with every score.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
from PIL import Image

BASELINE_ID = "baseline/hsv-hog-v1"


class EmbedderUnavailable(RuntimeError):
    """The backend or the weights of a model are not available on this machine (the message says which)."""


class Embedder(Protocol):
    model_id: str
    dim: int

    def embed(self, images: Sequence[Image.Image]) -> np.ndarray: ...
    def info(self) -> dict[str, Any]: ...


def l2_normalise(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    return (x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), eps)).astype(np.float32)


class HsvHogEmbedder:
    """The classical baseline (see the module docstring). Deterministic; 256-d."""

    model_id = BASELINE_ID
    dim = 256
    input_size = 64

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
        return {"model_id": self.model_id, "revision": "1", "backend": "numpy", "input_size": self.input_size,
                "dim": self.dim, "weights_sha256": None}


def _weights_checksum(state_dict: dict) -> str:
    h = hashlib.sha256()
    for k in sorted(state_dict):
        t = state_dict[k]
        h.update(k.encode())
        h.update(t.detach().cpu().contiguous().view(-1).to(dtype=__import__("torch").float32).numpy().tobytes())
    return h.hexdigest()


class OpenClipEmbedder:
    """An open_clip image tower (with the model's own preprocessing), CPU or CUDA (bf16 autocast on GPU)."""

    def __init__(self, model_id: str, device: str | None = None, batch_size: int = 32):
        try:
            import open_clip
            import torch
        except ImportError as exc:
            raise EmbedderUnavailable(f"{model_id}: needs open-clip-torch and torch ({exc})") from exc
        self.model_id, self.batch_size = model_id, batch_size
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        spec = model_id.removeprefix("open_clip:")
        if spec.startswith("hf-hub:"):
            model, _, preprocess = open_clip.create_model_and_transforms(spec)
        else:
            arch, _, pretrained = spec.partition("/")
            model, _, preprocess = open_clip.create_model_and_transforms(arch, pretrained=pretrained or None)
        self.model = model.eval().to(self.device)
        self.preprocess = preprocess
        self.dim = int(getattr(model.visual, "output_dim", 0) or model.text_projection.shape[1])
        self._sha = _weights_checksum(self.model.state_dict())

    def embed(self, images: Sequence[Image.Image]) -> np.ndarray:
        import torch

        out = []
        for s in range(0, len(images), self.batch_size):
            x = torch.stack([self.preprocess(im.convert("RGB")) for im in images[s : s + self.batch_size]])
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.device == "cuda"):
                f = self.model.encode_image(x.to(self.device))
            out.append(f.float().cpu().numpy())
        return l2_normalise(np.concatenate(out)) if out else np.zeros((0, self.dim), np.float32)

    def info(self) -> dict[str, Any]:
        return {"model_id": self.model_id, "revision": None, "backend": "open_clip", "dim": self.dim,
                "input_size": None, "weights_sha256": self._sha}


class TransformersEmbedder:
    """A Hugging Face vision model: pooled output (or CLS token), L2-normalised; the model's own processor."""

    def __init__(self, model_id: str, revision: str | None = None, device: str | None = None, batch_size: int = 32):
        try:
            import torch
            from transformers import AutoImageProcessor, AutoModel
        except ImportError as exc:
            raise EmbedderUnavailable(f"{model_id}: not a known baseline or open_clip id, and the transformers "
                                      f"backend is not installed (pip install -e '.[models]'): {exc}") from exc
        self.model_id, self.revision, self.batch_size = model_id, revision, batch_size
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        try:
            self.processor = AutoImageProcessor.from_pretrained(model_id, revision=revision)
            model = AutoModel.from_pretrained(model_id, revision=revision)
        except OSError as exc:
            raise EmbedderUnavailable(f"{model_id}: weights not available here ({exc})") from exc
        self.model = (model.vision_model if hasattr(model, "vision_model") else model).eval().to(self.device)
        cfg = getattr(self.model, "config", None)
        self.dim = int(getattr(cfg, "hidden_size", 0))
        self.input_size = getattr(cfg, "image_size", None)
        self._sha = _weights_checksum(self.model.state_dict())

    def embed(self, images: Sequence[Image.Image]) -> np.ndarray:
        import torch

        out = []
        for s in range(0, len(images), self.batch_size):
            batch = self.processor(images=[im.convert("RGB") for im in images[s : s + self.batch_size]],
                                   return_tensors="pt")
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.device == "cuda"):
                o = self.model(pixel_values=batch["pixel_values"].to(self.device))
            f = o.pooler_output if getattr(o, "pooler_output", None) is not None else o.last_hidden_state[:, 0]
            out.append(f.float().cpu().numpy())
        return l2_normalise(np.concatenate(out)) if out else np.zeros((0, self.dim), np.float32)

    def info(self) -> dict[str, Any]:
        return {"model_id": self.model_id, "revision": self.revision, "backend": "transformers", "dim": self.dim,
                "input_size": self.input_size, "weights_sha256": self._sha}


def load_embedder(model_id: str, **kwargs: Any) -> Embedder:
    """Load an embedder by id (see the module docstring).

    Raises:
        EmbedderUnavailable: the backend is not installed or the weights cannot be loaded here.
    """
    if model_id == BASELINE_ID:
        return HsvHogEmbedder()
    if model_id.startswith(("open_clip:", "hf-hub:")):
        return OpenClipEmbedder(model_id, **kwargs)
    return TransformersEmbedder(model_id, **kwargs)
