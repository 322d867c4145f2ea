"""The YOLO detector (:class:`Detector`: load, class-to-category mapping checked at load, batched prediction) and
the check of a ``detect.classes`` mapping against the model and the taxonomy (:func:`validate_class_map`, which the
person-region fallback :mod:`.person_regions` uses too)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from ..embed.torch_backends import weights_checksum
from ..wheelmodels import file_sha256
from .core import DetectorError, RawDetection
from .offline import DEFAULT_CACHE, prepare_offline, resolve_device


def weights_identity(yolo: Any, file_checksum: str) -> tuple[str, str]:
    """What identifies a loaded detector's weights: ``(sha256 hex, "tensors" | "file")``.

    A PyTorch model (``yolo.model`` is a ``torch.nn.Module``, as for ``.pt`` weights) is identified by the checksum
    of its state dict as loaded (:func:`lookbench_pipeline.embed.weights_checksum`: every tensor's name, dtype, shape
    and bytes), not by the file's: ultralytics writes the training date (and optimizer state) into a checkpoint, so
    the same weights trained twice make two files, and a release whose provenance named the file's checksum would
    read as changed (a same-day rerun after the demo detector was retrained met ``ReleaseExistsError``). Call it
    before the first prediction: ultralytics fuses convolution and batch-norm layers then, which changes the
    tensors. Other formats (ONNX, TorchScript, ...) are identified by ``file_checksum``, the file's sha256.
    """
    try:
        import torch
    except ImportError:
        return file_checksum, "file"
    module = getattr(yolo, "model", None)
    if isinstance(module, torch.nn.Module):
        return weights_checksum(module.state_dict()), "tensors"
    return file_checksum, "file"


class Detector:
    """A YOLO detector with its class-to-category mapping, checked at load.

    Args:
        weights: a local weights file (see :func:`resolve_weights` for ids).
        classes: model class name -> taxonomy categories (``[]`` ignores the class); empty: each class name must
            itself be a taxonomy category.
        categories: the taxonomy's category names.
        imgsz: inference size in pixels; None: the size the model was trained at (else 640).
        source: how the weights were named (a path, an id, ``demo``), for the record.
        report: the training report, when the weights were trained here (mAP, data checksum).
        cache_dir: where ultralytics keeps its settings (see :func:`prepare_offline`, called here when ultralytics
            is not imported yet); default a folder in the temporary directory.

    ``sha256`` identifies the weights (see :func:`weights_identity`): for a PyTorch model, the checksum of its
    tensors as loaded; for other formats, of the file. ``file_sha256`` is always the file's.

    Raises:
        DetectorError: the weights do not load, or the mapping misses a model class, names a class the model does
            not have, or names a category that is not in the taxonomy.
    """

    def __init__(self, weights: Path, classes: dict[str, list[str]], categories: Iterable[str], *,
                 imgsz: int | None = None, conf: float = 0.25, iou: float = 0.7, max_det: int = 30,
                 batch: int = 8, device: str = "auto", source: str | None = None,
                 report: dict[str, Any] | None = None, cache_dir: Path | None = None, offline: bool = True):
        if cache_dir is not None or "ultralytics" not in sys.modules:
            prepare_offline(cache_dir or DEFAULT_CACHE, offline)
        from ultralytics import YOLO

        self.weights = Path(weights)
        try:
            self.model = YOLO(str(self.weights), task="detect")
            names = self.model.names  # other formats than .pt load here
        except Exception as exc:  # torch / pickle / ultralytics errors on a bad file
            raise DetectorError(f"detector weights {self.weights} do not load: {type(exc).__name__}: {exc}") from exc
        self.names: list[str] = [names[i] for i in sorted(names)]
        self.class_map = validate_class_map(self.names, classes, set(categories))
        self.imgsz = int(imgsz or self.model.overrides.get("imgsz") or 640)
        self.conf, self.iou, self.max_det, self.batch = conf, iou, max_det, batch
        self.device = resolve_device(device)
        self.source = source or str(weights)
        self.report = report or {}
        self.file_sha256 = file_sha256(self.weights)
        self.sha256, self.sha256_of = weights_identity(self.model, self.file_sha256)

    def info(self) -> dict[str, Any]:
        """What the release manifest records about the detector (``provenance.models``)."""
        out = {"role": "detector", "backend": "ultralytics", "weights": self.source, "weights_file": self.weights.name,
               "weights_sha256": self.sha256, "weights_sha256_of": self.sha256_of, "classes": self.names,
               "class_map": self.class_map,
               "imgsz": self.imgsz, "conf": self.conf, "iou": self.iou, "max_det": self.max_det}
        for k in ("map50", "map50_95", "data_sha256", "trained_by", "eval_split", "eval_images"):
            if k in self.report:
                out[k] = self.report[k]
        return out

    def predict(self, images: Iterable[tuple[Any, Image.Image]]) -> Iterator[tuple[Any, Image.Image, list[RawDetection]]]:
        """Detect garments; yields ``(key, image, detections)`` per input ``(key, image)``, in input order.

        ``images`` is consumed ``batch`` at a time (so a lazy iterator keeps at most one batch decoded), each batch
        run through ``YOLO.predict(stream=True)``. Boxes are pixels on the given image, sorted by score.
        """
        chunk: list[tuple[Any, Image.Image]] = []
        for item in images:
            chunk.append(item)
            if len(chunk) >= self.batch:
                yield from self._run(chunk)
                chunk = []
        if chunk:
            yield from self._run(chunk)

    def _run(self, chunk: list[tuple[Any, Image.Image]]):
        results = self.model.predict([im for _, im in chunk], stream=True, imgsz=self.imgsz, conf=self.conf,
                                     iou=self.iou, max_det=self.max_det, device=self.device, verbose=False,
                                     save=False)
        for (key, im), r in zip(chunk, results):
            b = r.boxes
            xyxy = b.xyxy.cpu().numpy().tolist() if len(b) else []
            conf = b.conf.cpu().numpy().tolist() if len(b) else []
            cls = b.cls.cpu().numpy().astype(int).tolist() if len(b) else []
            dets = [RawDetection(self.names[c], float(s), [float(v) for v in xy]) for xy, s, c in zip(xyxy, conf, cls)]
            dets.sort(key=lambda d: -d.score)
            yield key, im, dets


def validate_class_map(names: Sequence[str], classes: dict[str, list[str]], categories: set[str]) -> dict[str, list[str]]:
    """The mapping model class -> taxonomy categories, complete for ``names``. Raises DetectorError."""
    if not classes:
        missing = [n for n in names if n not in categories]
        if missing:
            raise DetectorError(f"the detector's classes {missing} are not taxonomy categories; map every class in "
                                f"detect.classes (class: [categories], or [] to ignore it)")
        return {n: [n] for n in names}
    unmapped = [n for n in names if n not in classes]
    unknown = [k for k in classes if k not in names]
    if unmapped or unknown:
        raise DetectorError(f"detect.classes does not fit the model: classes of the model not mapped {unmapped}, "
                            f"mapped classes the model does not have {unknown} (the model has {list(names)})")
    bad = {k: [c for c in v if c not in categories] for k, v in classes.items()}
    bad = {k: v for k, v in bad.items() if v}
    if bad:
        raise DetectorError(f"detect.classes names categories that are not in the taxonomy: {bad}")
    return {n: list(classes[n]) for n in names}
