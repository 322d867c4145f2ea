"""Loading an embedder: :func:`load_embedder` takes a registry id, a :class:`ModelSpec`, a dict of spec fields or an
ad-hoc id (:func:`lookbench_pipeline.embed.registry.resolve_spec`) and returns the backend's embedder."""

from __future__ import annotations

from .baseline import HsvHogEmbedder
from .registry import BASELINE_ID, Embedder, ModelSpec, ModelSpecError, resolve_spec
from .torch_backends import EfficientNetLiteEmbedder, OpenClipEmbedder, TimmEmbedder, TransformersEmbedder


def load_embedder(model: str | ModelSpec | dict, *, device: str | None = None, dtype: str | None = None,
                  batch_size: int = 32, registry: dict[str, ModelSpec] | None = None) -> Embedder:
    """Load an embedder (see :mod:`lookbench_pipeline.embed` for what ``model`` may be).

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
