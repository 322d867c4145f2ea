"""Garment detection in street looks with ultralytics YOLO, run with no network at all, and training such detectors
from COCO-style garment annotations (DeepFashion2, Fashionpedia, ModaNet).

Offline operation (:func:`prepare_offline`, called before ``ultralytics`` is first imported):

* ``YOLO_OFFLINE=1`` (ultralytics skips its DNS "online" probe, update checks and analytics),
  ``YOLO_AUTOINSTALL=false`` (no ``pip install`` of a missing requirement at run time),
  ``YOLO_CONFIG_DIR=<cache_dir>/ultralytics`` (its settings file, not ``~/.config``), and ultralytics' settings
  ``sync`` and every logging integration turned off;
* a TrueType font copied to ``<YOLO_CONFIG_DIR>/Ultralytics/Arial.ttf`` and ``Arial.Unicode.ttf``, where
  ``ultralytics.utils.checks.check_font`` looks before it downloads one (it is called for every training data set
  and for plots): matplotlib's ``DejaVuSans.ttf`` (matplotlib is an ultralytics dependency), else Debian's;
* weights are a local file, or a Hugging Face model id looked up only in the local Hugging Face cache
  (``local_files_only``) while offline; model YAMLs (``yolov8n.yaml``) are built from scratch, never downloaded.

Detection (:class:`Detector`): images are decoded by :func:`lookbench_pipeline.images.decode` (EXIF orientation
applied, sRGB), fed to ``YOLO.predict(stream=True)`` in batches of ``detect.batch`` (each batch decoded only when
it is needed), on CUDA when torch sees a GPU. Boxes are pixels ``[x1, y1, x2, y2]`` on the EXIF-transposed image,
clipped to it; a box is dropped with a reason (:class:`Drop`) when it is not finite or empty, lies outside the
image, is smaller than ``min_box_side_px`` on a side, or has a class that the configuration ignores. A kept box's
crop is stored as a derived image (JPEG, content-addressed ``derived/<sha[:2]>/<sha256>``).

Street-look items (:func:`match_items`): each kept detection of a look is matched to the look's linked products
whose category its class maps to; when several linked products (or several detections) compete, the pairs are
taken greedily by visual similarity (cosine of the baseline embedder :mod:`lookbench_pipeline.embed`, crop
against the product's gallery image). A detection left without a product is ``unlabelled`` with a reason, never a
query.

Training (:func:`train_detector`, ``lookbench detector train``): annotations are read (:func:`read_annotations`),
converted to a YOLO data set (normalised images, ``labels/*.txt``, ``data.yaml``, a held-out split chosen by a hash
of each image's key), trained with ultralytics and scored on the held-out split (mAP50 and mAP50-95, COCO-style
101-point interpolated AP as ultralytics computes it).

Modules (each imports only those listed before it):

* :mod:`.core`: :class:`DetectorError`, the :class:`Drop` and :class:`Unlabelled` reasons, :class:`RawDetection` and
  the box helpers (clipping, rounding, cropping, EXIF orientation);
* :mod:`.offline`: :func:`prepare_offline`, the fonts, :func:`resolve_device`, :func:`resolve_weights`;
* :mod:`.model`: :class:`Detector` and :func:`validate_class_map`;
* :mod:`.matching`: :func:`detect_street_images` and :func:`match_items`;
* :mod:`.datasets`: the annotation readers (:func:`read_annotations`);
* :mod:`.train`: :func:`build_yolo_dataset` and :func:`train_detector`;
* :mod:`.person_regions`: the person-region fallback (``detect.weights: person-regions``), imported on its own.

The demo detector (``detect.weights: demo``, trained on looks the demo shop draws) is demo code:
:mod:`lookbench_pipeline.demo.detector`. This package imports nothing of :mod:`lookbench_pipeline.demo`.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from .core import (BOX_DECIMALS, SCORE_DECIMALS, DetectorError, Drop, RawDetection, Unlabelled, clip_box, crop_box,
                   reproducible, transpose_box)
from .datasets import (DEEPFASHION2_CATEGORIES, MODANET_CATEGORIES, AnnotatedImage, AnnotationSource,
                       read_annotations, rle_counts, segmentation_box)
from .matching import Kept, LinkedItem, StreetImage, detect_street_images, match_items
from .model import Detector, validate_class_map
from .offline import (DEFAULT_CACHE, FONT_NAMES, HF_ID, INTEGRATIONS_OFF, find_font, prepare_offline, resolve_device,
                      resolve_weights)
from .train import YoloDataset, build_yolo_dataset, check_train_class_map, train_detector

__all__ = [
    "BOX_DECIMALS", "DEEPFASHION2_CATEGORIES", "DEFAULT_CACHE", "FONT_NAMES", "HF_ID", "INTEGRATIONS_OFF",
    "MODANET_CATEGORIES", "SCORE_DECIMALS", "AnnotatedImage", "AnnotationSource", "Detector", "DetectorError", "Drop",
    "Kept", "LinkedItem", "RawDetection", "StreetImage", "Unlabelled", "YoloDataset", "build_yolo_dataset",
    "check_train_class_map", "clip_box", "crop_box", "detect_street_images", "find_font", "match_items",
    "prepare_offline", "read_annotations", "reproducible", "resolve_device", "resolve_weights", "rle_counts",
    "segmentation_box", "train_detector", "transpose_box", "validate_class_map",
]

_MOVED_TO_DEMO = ("demo_detector", "DEMO_CLASSES", "DEMO_RECIPE")
"""Names that moved to :mod:`lookbench_pipeline.demo.detector`; ``lookbench_pipeline.detect.<name>`` still works
for one release (a DeprecationWarning)."""


def __getattr__(name: str) -> Any:
    """The deprecated names of the demo detector (one release): warn, then hand back the moved object. The module
    is imported by name here, when such a name is asked for, so that this package does not import the demo package
    (the import-linter contracts in pyproject.toml see no such import, and there is no cycle: the demo detector
    imports this package to train)."""
    if name in _MOVED_TO_DEMO:
        new = "lookbench_pipeline.demo.detector"
        warnings.warn(f"lookbench_pipeline.detect.{name} moved to {new}; import it from there", DeprecationWarning,
                      stacklevel=2)
        return getattr(importlib.import_module(new), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
