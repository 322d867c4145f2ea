"""The classical baseline ``baseline/hsv-hog-v1`` (the ``numpy`` backend), and :func:`l2_normalise`, which every
embedder's output goes through.

A training-free embedder that runs anywhere: a 3-D HSV colour histogram (8 x 4 x 4 bins) concatenated with a
4 x 4-cell histogram of oriented gradients (8 unsigned orientations, Dalal & Triggs 2005) of the 64 x 64 greyscale
image; each part square-rooted (Hellinger kernel, Arandjelovic & Zisserman 2012) and L2-normalised, then the
concatenation L2-normalised. 256 dimensions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from PIL import Image

from .registry import BASELINE_ID


def l2_normalise(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    """Rows divided by their L2 norm (rows of zeros stay zero); float32."""
    return (x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), eps)).astype(np.float32)


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
