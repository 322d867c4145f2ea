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
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import math
import os
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from .wheelmodels import file_sha256

log = logging.getLogger(__name__)

DEMO_CLASSES: dict[str, list[str]] = {
    "upper": ["top", "shirt", "sweater", "outerwear"],
    "lower": ["trousers", "skirt", "shorts"],
    "dress": ["dress"],
    "shoes": ["shoes"],
    "bag": ["bag"],
}
"""The demo detector's classes and the taxonomy categories each stands for (coarse, like DeepFashion2's classes:
"short sleeve top" is a t-shirt, a shirt or a sweater)."""

DEMO_RECIPE = 1
"""Bumped when the demo detector's training data or procedure changes in a way its cache key would not see."""

HF_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
"""A Hugging Face model id: ``owner/repo``."""

INTEGRATIONS_OFF = {"sync": False, "clearml": False, "comet": False, "dvc": False, "mlflow": False,
                    "raytune": False, "tensorboard": False, "wandb": False}
"""Ultralytics settings that would send data out (analytics, experiment trackers): all off."""

FONT_NAMES = ("Arial.ttf", "Arial.Unicode.ttf")

DEFAULT_CACHE = Path(tempfile.gettempdir()) / f"lookbench-ultralytics-{os.getuid()}"
"""Ultralytics' settings folder when no cache folder is named (the pipeline uses ``<data_dir>/detector``)."""


class DetectorError(RuntimeError):
    """The detector cannot be set up: weights not found, a class mapping that does not fit the model or the
    taxonomy, an annotation file that cannot be read (the message says which and what to do)."""


class Drop:
    """Reasons a detector box is dropped."""

    DEGENERATE = "degenerate"  # not finite, or x2 <= x1 or y2 <= y1 as the detector gave it
    OUTSIDE = "outside_image"  # nothing left after clipping to the image
    TOO_SMALL = "too_small"  # a side below min_box_side_px after clipping
    CLASS_IGNORED = "class_ignored"  # the configuration maps the class to no category


class Unlabelled:
    """Reasons a kept detection is not matched to a linked product."""

    NO_LINKED_ITEM = "no_labelled_linked_item"  # the look links no labelled product at all
    NO_CATEGORY = "no_linked_item_of_category"  # no linked product has a category the class maps to
    TAKEN = "linked_item_taken"  # every compatible product went to a more similar detection
    DISSIMILAR = "below_min_similarity"  # compatible products exist but none is similar enough


# ------------------------------------------------------------------------------------------- offline environment


def find_font() -> Path:
    """A TrueType font on this machine to stand in for Arial: matplotlib's DejaVu Sans, else Debian's, else any
    ``.ttf`` under ``/usr/share/fonts``. Raises DetectorError when there is none."""
    candidates: list[Path] = []
    try:
        import matplotlib

        candidates.append(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf")
    except ImportError:
        pass
    candidates.append(Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"))
    for p in candidates:
        if p.is_file():
            return p
    for p in sorted(Path("/usr/share/fonts").rglob("*.ttf")) if Path("/usr/share/fonts").is_dir() else []:
        return p
    raise DetectorError("no TrueType font found (matplotlib's DejaVuSans.ttf or /usr/share/fonts/**/*.ttf); "
                        "ultralytics would try to download Arial.ttf")


def prepare_offline(cache_dir: Path, offline: bool = True) -> Path:
    """Set up the environment ultralytics reads at import time, place the fonts it looks for, import it, and turn
    off its settings that send data out. Returns ultralytics' user config folder (``USER_CONFIG_DIR``).

    ``offline`` also sets ``HF_HUB_OFFLINE=1``. Environment variables the user set already are kept (a
    ``YOLO_CONFIG_DIR`` of their own wins). When ultralytics was imported before this call, its constants were
    fixed then: the fonts go to its own config folder, and a warning says that its online probe may have run.
    """
    cache_dir = Path(cache_dir)
    os.environ.setdefault("YOLO_CONFIG_DIR", str(cache_dir / "ultralytics"))
    os.environ.setdefault("MPLCONFIGDIR", str(cache_dir / "matplotlib"))  # ultralytics' font check imports it
    os.environ["YOLO_AUTOINSTALL"] = "false"
    if offline:
        os.environ["YOLO_OFFLINE"] = "1"
        os.environ["HF_HUB_OFFLINE"] = "1"
    already = "ultralytics" in sys.modules
    font = find_font()
    cfg_dir = Path(os.environ["YOLO_CONFIG_DIR"]) / "Ultralytics"
    _place_fonts(cfg_dir, font)
    from ultralytics import utils as ul

    _undo_pil_patch()
    if already and Path(ul.USER_CONFIG_DIR) != cfg_dir:
        _place_fonts(Path(ul.USER_CONFIG_DIR), font)
    if offline and ul.ONLINE:
        log.warning("ultralytics was imported before lookbench_pipeline.detect.prepare_offline and thinks it is "
                    "online; import lookbench_pipeline.detect first (or set YOLO_OFFLINE=1)")
    want = {**INTEGRATIONS_OFF, "runs_dir": str(cache_dir / "runs"), "datasets_dir": str(cache_dir / "datasets"),
            "weights_dir": str(cache_dir / "weights")}
    if any(ul.SETTINGS.get(k) != v for k, v in want.items()):
        ul.SETTINGS.update(want)
    return Path(ul.USER_CONFIG_DIR)


def _undo_pil_patch() -> None:
    """Importing ultralytics replaces ``PIL.Image.open`` for the whole process with a wrapper that, on a file
    Pillow cannot identify, tries to install and register ``pi-heif`` (``ultralytics.utils.patches``): intake would
    then reject a non-image as ``decode_error`` (an ImportError) instead of ``not_an_image``. Detection gets decoded
    images and needs no HEIF, so Pillow's own ``open`` is put back."""
    from ultralytics.utils import patches

    original = getattr(patches, "_image_open", None)
    if original is not None and Image.open is not original and getattr(Image.open, "__module__", "") == patches.__name__:
        Image.open = original


def _place_fonts(folder: Path, font: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in FONT_NAMES:
        target = folder / name
        if not target.is_file():
            tmp = folder / f".{name}.tmp"
            shutil.copyfile(font, tmp)
            tmp.replace(target)


def resolve_device(device: str = "auto") -> str:
    """``auto``: ``cuda:0`` when torch sees a CUDA device, else ``cpu``; anything else is passed through."""
    if device != "auto":
        return device
    import torch

    return "cuda:0" if torch.cuda.is_available() else "cpu"


def resolve_weights(weights: str, *, weights_file: str | None = None, revision: str | None = None,
                    offline: bool = True) -> Path:
    """The local file of ``weights``: a path, or a Hugging Face model id ``owner/repo`` (the file ``weights_file``,
    default the repo's only ``*.pt``), fetched with ``huggingface_hub`` -- only from the local cache while
    ``offline``.

    Raises:
        DetectorError: no such file, not an id, or not in the local Hugging Face cache while offline.
    """
    p = Path(os.path.expandvars(weights)).expanduser()
    if p.is_file():
        return p.resolve()
    if p.is_absolute() or weights.startswith((".", "~")) or not HF_ID.fullmatch(weights):
        raise DetectorError(f"detector weights {weights!r}: no such file, and not a Hugging Face model id "
                            "(owner/repo)")
    try:
        from huggingface_hub import hf_hub_download, snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
    except ImportError as exc:
        raise DetectorError(f"detector weights {weights!r} name a Hugging Face model, but huggingface_hub is not "
                            f"installed: {exc}") from exc
    try:
        if weights_file:
            return Path(hf_hub_download(weights, weights_file, revision=revision, local_files_only=offline))
        folder = Path(snapshot_download(weights, revision=revision, allow_patterns=["*.pt"],
                                        local_files_only=offline))
    except (LocalEntryNotFoundError, FileNotFoundError) as exc:
        raise DetectorError(
            f"detector weights {weights!r} (file {weights_file or '*.pt'}) are not in the local Hugging Face cache "
            "and detect.offline is true: download them where there is network (`hf download "
            f"{weights}`), copy the cache here, or name a local .pt file") from exc
    except (HfHubHTTPError, OSError, ValueError) as exc:
        raise DetectorError(f"detector weights {weights!r}: {exc}") from exc
    pts = sorted(folder.rglob("*.pt"))
    if len(pts) != 1:
        raise DetectorError(f"Hugging Face repo {weights!r} has {len(pts)} .pt files ({[x.name for x in pts]}); "
                            "name one with detect.weights_file")
    return pts[0]


# ------------------------------------------------------------------------------------------------- boxes


def clip_box(xyxy: Sequence[float], width: int, height: int, min_side: float) -> tuple[list[float] | None, str | None]:
    """Clip a box (pixels ``x1, y1, x2, y2``) to a ``width`` x ``height`` image.

    Returns ``(box, None)``, or ``(None, reason)`` with a :class:`Drop` reason: ``degenerate`` (not finite, or
    empty as given), ``outside_image`` (empty after clipping), ``too_small`` (a side < ``min_side`` pixels).
    """
    x1, y1, x2, y2 = (float(v) for v in xyxy)
    if not all(math.isfinite(v) for v in (x1, y1, x2, y2)) or x2 <= x1 or y2 <= y1:
        return None, Drop.DEGENERATE
    cx1, cy1 = min(max(x1, 0.0), float(width)), min(max(y1, 0.0), float(height))
    cx2, cy2 = min(max(x2, 0.0), float(width)), min(max(y2, 0.0), float(height))
    if cx2 <= cx1 or cy2 <= cy1:
        return None, Drop.OUTSIDE
    if min(cx2 - cx1, cy2 - cy1) < min_side:
        return None, Drop.TOO_SMALL
    return [cx1, cy1, cx2, cy2], None


BOX_DECIMALS = 0
"""Box corners are kept in whole pixels and scores to :data:`SCORE_DECIMALS` decimals. Detector inference on a CPU is
not bit-reproducible from run to run (oneDNN and OpenCV choose kernels by thread count and memory alignment), so
the last bits of a coordinate are noise; a backfill must rebuild byte-identical release files, and a crop is whole
pixels anyway (:func:`crop_box`)."""
SCORE_DECIMALS = 4


def reproducible(dets: Sequence[RawDetection]) -> list[RawDetection]:
    """``dets`` with corners rounded to :data:`BOX_DECIMALS` and scores to :data:`SCORE_DECIMALS` decimals, sorted by
    score (highest first), ties broken by box then class, so the order does not depend on float noise either."""
    out = [RawDetection(d.model_class, round(float(d.score), SCORE_DECIMALS),
                        [round(float(v), BOX_DECIMALS) + 0.0 for v in d.xyxy]) for d in dets]
    return sorted(out, key=lambda d: (-d.score, d.xyxy, d.model_class))


def crop_box(rgb: Image.Image, box: Sequence[float]) -> Image.Image:
    """The pixels of ``box`` (outward-rounded to whole pixels, inside the image)."""
    x1, y1, x2, y2 = box
    return rgb.crop((max(0, math.floor(x1)), max(0, math.floor(y1)), min(rgb.width, math.ceil(x2)),
                     min(rgb.height, math.ceil(y2))))


# ------------------------------------------------------------------------------------------------ the detector


@dataclass
class RawDetection:
    """One box as the detector gave it: ``xyxy`` in pixels on the image it was given."""

    model_class: str
    score: float
    xyxy: list[float]


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
        self.sha256 = file_sha256(self.weights)

    def info(self) -> dict[str, Any]:
        """What the release manifest records about the detector (``provenance.models``)."""
        out = {"role": "detector", "backend": "ultralytics", "weights": self.source, "weights_file": self.weights.name,
               "weights_sha256": self.sha256, "classes": self.names, "class_map": self.class_map,
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


# ------------------------------------------------------------------------------------------- street-look items


@dataclass
class LinkedItem:
    """A product a look links (or the item a street photo of an image drop shows), with its category and the
    embedding of its gallery image (None when it has no gallery image)."""

    item_id: str
    category: str
    embedding: np.ndarray | None = None


@dataclass
class Kept:
    """A kept detection of one image, for matching: its index, class categories, score and crop embedding."""

    index: int
    categories: list[str]
    score: float
    embedding: np.ndarray | None


def match_items(dets: Sequence[Kept], linked: Sequence[LinkedItem], min_similarity: float = 0.0
                ) -> dict[int, tuple[str | None, float | None, str | None]]:
    """Match a look's kept detections to its linked items, one to one.

    A pair is allowed when the item's category is one its detection's class maps to. Allowed pairs are taken
    greedily in descending order of similarity (cosine of the two embeddings; 0 where one is missing), ties by
    detection score, then detection index and item id, so the result is deterministic. Pairs below
    ``min_similarity`` are never taken.

    Returns ``{detection index: (item_id, similarity, None)}`` for matched detections and
    ``{index: (None, best similarity or None, reason)}`` (an :class:`Unlabelled` reason) for the others.
    """
    pairs = []
    for d in dets:
        for it in linked:
            if it.category in d.categories:
                sim = (float(np.dot(d.embedding, it.embedding))
                       if d.embedding is not None and it.embedding is not None else 0.0)
                pairs.append((-sim, -d.score, d.index, it.item_id, sim))
    pairs.sort()
    taken_d: dict[int, tuple[str, float]] = {}
    taken_i: set[str] = set()
    for _, _, idx, item_id, sim in pairs:
        if idx in taken_d or item_id in taken_i or sim < min_similarity:
            continue
        taken_d[idx] = (item_id, sim)
        taken_i.add(item_id)
    out: dict[int, tuple[str | None, float | None, str | None]] = {}
    for d in dets:
        if d.index in taken_d:
            out[d.index] = (taken_d[d.index][0], taken_d[d.index][1], None)
            continue
        sims = [p[4] for p in pairs if p[2] == d.index]
        if not linked:
            reason = Unlabelled.NO_LINKED_ITEM
        elif not sims:
            reason = Unlabelled.NO_CATEGORY
        elif all(s < min_similarity for s in sims):
            reason = Unlabelled.DISSIMILAR
        else:
            reason = Unlabelled.TAKEN
        out[d.index] = (None, max(sims) if sims else None, reason)
    return out


@dataclass
class StreetImage:
    """An image to detect items in: a crawled look (``owner_type="look"``) or a street photo of an image drop
    (``"drop"``), with the items it links."""

    owner_type: str
    owner_id: str
    image_sha256: str
    linked: list[LinkedItem] = field(default_factory=list)


def detect_street_images(detector: Detector, street: Sequence[StreetImage], load: Callable[[str], Image.Image],
                         put_crop: Callable[[bytes], str], embed: Callable[[list[Image.Image]], np.ndarray],
                         min_box_side_px: float = 16, min_similarity: float = 0.0,
                         progress: Callable[[int, int], None] | None = None) -> tuple[list[dict], dict[str, Any]]:
    """Detect, clip, crop and match the items of every street image.

    Args:
        load: image sha256 -> the normalised (EXIF-transposed, RGB) image; called once per distinct image.
        progress: called ``(done, total)`` in distinct images after each image is detected and cropped.
        put_crop: JPEG bytes of a crop -> its sha256 (stored content-addressed by the caller).
        embed: images -> unit-norm embeddings ``(n, d)`` (the baseline embedder) for matching.

    Returns ``(rows, counts)``: one ``DETECTIONS`` row per box the detector gave (kept or dropped), and counts that
    reconcile: ``boxes = kept + dropped`` and ``kept = matched + unlabelled``. An image that appears under several
    owners is detected and cropped once.
    """
    from .images import encode_normalised

    # 1. per distinct image: detect, clip, crop, embed
    per_sha: dict[str, list[dict]] = {}
    shas = sorted({s.image_sha256 for s in street})
    for n_done, (sha, im, dets) in enumerate(detector.predict((sha, load(sha)) for sha in shas), 1):
        dets = reproducible(dets)
        boxes = []
        for d in dets:
            box, reason = clip_box(d.xyxy, im.width, im.height, min_box_side_px)
            if reason is None and not detector.class_map[d.model_class]:
                reason = Drop.CLASS_IGNORED
            boxes.append({"det": d, "box": box, "reason": reason})
        kept = [b for b in boxes if b["reason"] is None]
        pics = [crop_box(im, b["box"]) for b in kept]
        for b, pic, v in zip(kept, pics, embed(pics) if pics else []):
            b.update(crop_sha256=put_crop(encode_normalised(pic)), crop_width=pic.width, crop_height=pic.height,
                     embedding=v)
        per_sha[sha] = boxes
        if progress:
            progress(n_done, len(shas))
    # 2. per owner: rows, item numbers and matching
    rows: list[dict] = []
    counts: Counter = Counter(images=len(street), distinct_images=len(shas))
    for s in sorted(street, key=lambda s: (s.owner_type, s.owner_id)):
        boxes = per_sha[s.image_sha256]
        kept = [b for b in boxes if b["reason"] is None]
        matches = match_items([Kept(i, detector.class_map[b["det"].model_class], b["det"].score, b["embedding"])
                               for i, b in enumerate(kept)], s.linked, min_similarity)
        for raw_i, b in enumerate(boxes):
            d = b["det"]
            row = {"owner_type": s.owner_type, "owner_id": s.owner_id, "image_sha256": s.image_sha256,
                   "model_class": d.model_class, "categories": detector.class_map[d.model_class], "score": d.score,
                   "raw_box": d.xyxy, "box": b["box"], "detector_sha256": detector.sha256,
                   "detection_id": hashlib.sha1(f"{s.owner_type}\x00{s.owner_id}\x00{s.image_sha256}\x00"
                                                f"{detector.sha256}\x00{raw_i}".encode()).hexdigest()}
            counts["boxes"] += 1
            if b["reason"]:
                counts["dropped"] += 1
                counts[f"dropped.{b['reason']}"] += 1
                row.update(status="dropped", reason=b["reason"])
            else:
                i = next(k for k, kb in enumerate(kept) if kb is b)
                item_id, sim, why = matches[i]
                row.update(item_index=i, crop_sha256=b["crop_sha256"], crop_width=b["crop_width"],
                           crop_height=b["crop_height"], item_id=item_id, similarity=sim,
                           status="matched" if item_id else "unlabelled", reason=why)
                counts["kept"] += 1
                counts["matched" if item_id else "unlabelled"] += 1
                if why:
                    counts[f"unlabelled.{why}"] += 1
            rows.append(row)
        matched_items = {m[0] for m in matches.values() if m[0]}
        counts["linked_items"] += len(s.linked)
        counts["linked_items_not_detected"] += sum(1 for it in s.linked if it.item_id not in matched_items)
    out: dict[str, Any] = {k: counts[k] for k in sorted(counts)}
    for k in ("boxes", "kept", "dropped", "matched", "unlabelled", "linked_items", "linked_items_not_detected"):
        out.setdefault(k, 0)
    assert out["boxes"] == out["kept"] + out["dropped"] and out["kept"] == out["matched"] + out["unlabelled"]
    return rows, out


# --------------------------------------------------------------------------------------- annotations (training)


@dataclass
class AnnotationSource:
    """One annotation file and the folder of its images.

    ``image_name`` turns an image record into a file name under ``images``: a ``str.format`` template with
    ``{file_name}``, ``{stem}`` (file name without extension) and ``{image_id}`` (e.g.
    ``"street_fashionpedia_{file_name}"``, or ``"{image_id}.jpg"`` for ModaNet, whose records have no file name).
    ``format``: ``coco`` (Fashionpedia, ModaNet's COCO release, DeepFashion2 converted to COCO), ``modanet-snaps``
    (ModaNet's per-photo ``[{image_id, items: [...]}]``), ``deepfashion2`` (a folder of DeepFashion2's per-image
    JSON files, ``item1``, ``item2``… with ``bounding_box`` = ``[x1, y1, x2, y2]``), or ``auto``.
    """

    annotations: Path
    images: Path
    image_name: str = "{file_name}"
    format: str = "auto"


MODANET_CATEGORIES = {1: "bag", 2: "belt", 3: "boots", 4: "footwear", 5: "outer", 6: "dress", 7: "sunglasses",
                      8: "pants", 9: "top", 10: "shorts", 11: "skirt", 12: "headwear", 13: "scarf & tie"}
"""ModaNet's 13 categories by the ids its annotation files use (eBay/modanet README; its raw
``categories.tsv`` numbers the same list from 0)."""

DEEPFASHION2_CATEGORIES = {1: "short sleeve top", 2: "long sleeve top", 3: "short sleeve outwear",
                           4: "long sleeve outwear", 5: "vest", 6: "sling", 7: "shorts", 8: "trousers", 9: "skirt",
                           10: "short sleeve dress", 11: "long sleeve dress", 12: "vest dress", 13: "sling dress"}
"""DeepFashion2's 13 categories (``category_id`` / ``category_name`` of its per-image files)."""


@dataclass
class AnnotatedImage:
    """One image of an annotation file: ``boxes`` are ``(category name, [x1, y1, x2, y2])`` in the pixels of the
    file as annotated; ``size`` is the annotated ``(width, height)`` when the file gives one."""

    key: str
    path: Path
    size: tuple[int, int] | None
    boxes: list[tuple[str, list[float]]]


def _num(v: Any) -> Any:
    """Numbers that some conversions store as strings (``"[103, 80, 601, 669]"``) back to numbers."""
    if isinstance(v, str):
        try:
            return json.loads(v)
        except ValueError:
            return v
    return v


def rle_counts(s: str) -> list[int]:
    """Decode a COCO compressed RLE string (pycocotools ``rleFrString``: 5 bits per character, offset 48,
    continuation bit 0x20, sign bit 0x10, counts after the second stored as differences)."""
    counts: list[int] = []
    p = 0
    while p < len(s):
        x, k, more = 0, 0, True
        while more:
            c = ord(s[p]) - 48
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            p += 1
            k += 1
            if not more and (c & 0x10):
                x |= -1 << (5 * k)
        if len(counts) > 2:
            x += counts[-2]
        counts.append(x)
    return counts


def segmentation_box(seg: Any) -> list[float] | None:
    """``[x1, y1, x2, y2]`` of a COCO segmentation: polygons (lists of x, y), or RLE (``{"size": [h, w],
    "counts": [...] or "..."}``, column-major runs starting with background, as pycocotools ``toBbox``)."""
    seg = _num(seg)
    if isinstance(seg, list) and seg:
        xs = [float(v) for poly in seg for v in _num(poly)[0::2]]
        ys = [float(v) for poly in seg for v in _num(poly)[1::2]]
        return [min(xs), min(ys), max(xs), max(ys)] if xs and ys else None
    if isinstance(seg, dict) and "counts" in seg and "size" in seg:
        h = int(seg["size"][0])
        counts = rle_counts(seg["counts"]) if isinstance(seg["counts"], str) else [int(c) for c in seg["counts"]]
        pos, x1, y1, x2, y2 = 0, math.inf, math.inf, -1, -1
        for j, n in enumerate(counts):
            if j % 2 == 1 and n > 0:  # a run of foreground pixels, indices pos .. pos + n - 1
                first, last = pos, pos + n - 1
                x1, x2 = min(x1, first // h), max(x2, last // h)
                if first // h == last // h:
                    y1, y2 = min(y1, first % h), max(y2, last % h)
                else:  # the run wraps from one column's bottom to a later column's top: every row is covered
                    y1, y2 = 0, h - 1
            pos += n
        return [float(x1), float(y1), float(x2 + 1), float(y2 + 1)] if x2 >= 0 else None
    return None


def _image_file(src: AnnotationSource, file_name: str | None, image_id: Any) -> Path:
    fname = file_name or ""
    name = src.image_name.format(file_name=fname, stem=Path(fname).stem, image_id=image_id)
    return Path(src.images) / name


def read_annotations(src: AnnotationSource) -> tuple[list[AnnotatedImage], list[dict], list[str]]:
    """Read one annotation source. Returns ``(images, rejected, category_order)``: the images with their boxes,
    the annotations that could not be used (``{"source", "id", "reason"}``: ``crowd``, ``no_box``,
    ``unknown_category``, ``unknown_image``), and the category names in the file's id order.

    Raises:
        DetectorError: the file cannot be read or its format is not recognised.
    """
    path = Path(src.annotations)
    fmt = src.format
    if path.is_dir():
        fmt = "deepfashion2" if fmt == "auto" else fmt
        data: Any = None
    else:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise DetectorError(f"{path}: not a readable JSON annotation file: {exc}") from exc
        if fmt == "auto":
            if isinstance(data, dict) and "annotations" in data and "images" in data:
                fmt = "coco"
            elif isinstance(data, list) and data and isinstance(data[0], dict) and "items" in data[0]:
                fmt = "modanet-snaps"
            else:
                raise DetectorError(f"{path}: not a COCO-style file (images, annotations, categories), ModaNet snaps "
                                    "or a DeepFashion2 folder")
    if fmt == "coco":
        return _read_coco(src, data)
    if fmt == "modanet-snaps":
        return _read_modanet_snaps(src, data)
    if fmt == "deepfashion2":
        return _read_deepfashion2(src)
    raise DetectorError(f"{path}: unknown annotation format {fmt!r} (coco, modanet-snaps, deepfashion2, auto)")


def _xywh(b: Any) -> list[float] | None:
    b = _num(b)
    if isinstance(b, list) and len(b) == 4:
        x, y, w, h = (float(v) for v in b)
        return [x, y, x + w, y + h]
    return None


def _read_coco(src: AnnotationSource, data: dict) -> tuple[list[AnnotatedImage], list[dict], list[str]]:
    name = str(src.annotations)
    cats = {c["id"]: str(c["name"]) for c in data.get("categories") or []}
    order = [cats[k] for k in sorted(cats)]
    imgs = {im["id"]: im for im in data["images"]}
    boxes: dict[Any, list] = {k: [] for k in imgs}
    rejected = []
    for a in data["annotations"]:
        aid = a.get("id")
        if a.get("image_id") not in imgs:
            rejected.append({"source": name, "id": aid, "reason": "unknown_image"})
        elif _num(a.get("iscrowd", 0)):
            rejected.append({"source": name, "id": aid, "reason": "crowd"})
        elif a.get("category_id") not in cats:
            rejected.append({"source": name, "id": aid, "reason": "unknown_category"})
        else:
            box = _xywh(a.get("bbox")) or segmentation_box(a.get("segmentation"))
            if box is None:
                rejected.append({"source": name, "id": aid, "reason": "no_box"})
            else:
                boxes[a["image_id"]].append((cats[a["category_id"]], box))
    out = []
    for iid, im in imgs.items():
        size = (int(im["width"]), int(im["height"])) if im.get("width") and im.get("height") else None
        out.append(AnnotatedImage(f"{name}#{iid}", _image_file(src, im.get("file_name"), iid), size, boxes[iid]))
    return out, rejected, order


def _read_modanet_snaps(src: AnnotationSource, data: list) -> tuple[list[AnnotatedImage], list[dict], list[str]]:
    name = str(src.annotations)
    out, rejected = [], []
    for snap in data:
        iid = snap["image_id"]
        bs = []
        for j, it in enumerate(snap.get("items") or []):
            cid = it.get("category_id")
            box = _xywh(it.get("bbox")) or segmentation_box(it.get("segmentation"))
            if _num(it.get("iscrowd", 0)):
                rejected.append({"source": name, "id": f"{iid}#{j}", "reason": "crowd"})
            elif cid not in MODANET_CATEGORIES:
                rejected.append({"source": name, "id": f"{iid}#{j}", "reason": "unknown_category"})
            elif box is None:
                rejected.append({"source": name, "id": f"{iid}#{j}", "reason": "no_box"})
            else:
                bs.append((MODANET_CATEGORIES[cid], box))
        fname = Path(snap["snap_url"]).name if snap.get("snap_url") else None
        out.append(AnnotatedImage(f"{name}#{iid}", _image_file(src, fname, iid), None, bs))
    return out, rejected, [MODANET_CATEGORIES[k] for k in sorted(MODANET_CATEGORIES)]


def _read_deepfashion2(src: AnnotationSource) -> tuple[list[AnnotatedImage], list[dict], list[str]]:
    folder = Path(src.annotations)
    out, rejected = [], []
    for f in sorted(folder.glob("*.json")):
        try:
            d = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise DetectorError(f"{f}: not a readable DeepFashion2 annotation file: {exc}") from exc
        bs = []
        for k in sorted((k for k in d if re.fullmatch(r"item\d+", k)), key=lambda k: int(k[4:])):
            it = d[k]
            cid = it.get("category_id")
            box = _num(it.get("bounding_box"))
            if cid not in DEEPFASHION2_CATEGORIES:
                rejected.append({"source": str(f), "id": k, "reason": "unknown_category"})
            elif not (isinstance(box, list) and len(box) == 4):
                rejected.append({"source": str(f), "id": k, "reason": "no_box"})
            else:
                bs.append((DEEPFASHION2_CATEGORIES[cid], [float(v) for v in box]))
        out.append(AnnotatedImage(f"{folder}#{f.stem}", _image_file(src, f"{f.stem}.jpg", f.stem), None, bs))
    return out, rejected, [DEEPFASHION2_CATEGORIES[k] for k in sorted(DEEPFASHION2_CATEGORIES)]


_ORIENT = {  # EXIF orientation -> point map from the stored pixels (w, h) to the displayed image (PIL exif_transpose)
    2: lambda x, y, w, h: (w - x, y), 3: lambda x, y, w, h: (w - x, h - y), 4: lambda x, y, w, h: (x, h - y),
    5: lambda x, y, w, h: (y, x), 6: lambda x, y, w, h: (h - y, x), 7: lambda x, y, w, h: (h - y, w - x),
    8: lambda x, y, w, h: (y, w - x),
}


def transpose_box(box: Sequence[float], orientation: int, raw_size: tuple[int, int]) -> list[float]:
    """A box on the stored pixels of an image with EXIF ``orientation`` mapped onto the displayed
    (EXIF-transposed) image; ``raw_size`` = stored ``(width, height)``."""
    f = _ORIENT.get(orientation)
    if f is None:
        return [float(v) for v in box]
    w, h = raw_size
    (ax, ay), (bx, by) = f(box[0], box[1], w, h), f(box[2], box[3], w, h)
    return [min(ax, bx), min(ay, by), max(ax, bx), max(ay, by)]


# ------------------------------------------------------------------------------------------ YOLO data set


@dataclass
class YoloDataset:
    """A YOLO data set written by :func:`build_yolo_dataset`."""

    root: Path
    data_yaml: Path
    classes: list[str]
    counts: dict[str, Any]
    rejected: list[dict]
    sha256: str
    # categories of the class map that no annotation box has, and classes that kept no box (both also logged)
    unmatched_class_map_keys: list[str] = field(default_factory=list)
    classes_without_boxes: list[str] = field(default_factory=list)


def check_train_class_map(class_map: Any) -> dict[str, str | None]:
    """Validate a training class map: annotation category name -> ONE detector class name (a string), or ``None``
    to drop the category. (Not ``detect.classes`` of the pipeline configuration, which maps a detector class to a
    list of taxonomy categories.) Returns the map with string keys.

    Raises:
        DetectorError: not a mapping, or a value is not a single class name (the message names the key).
    """
    if not isinstance(class_map, dict):
        raise DetectorError(f"the class map must be a mapping 'annotation category: detector class', got "
                            f"{type(class_map).__name__}")
    out: dict[str, str | None] = {}
    for k, v in class_map.items():
        if v is not None and not isinstance(v, str):
            raise DetectorError(
                f"category {str(k)!r} maps to {v!r} ({type(v).__name__}); each annotation category maps to ONE "
                "detector class name (or null to drop it) -- unlike detect.classes in the pipeline config, which "
                "maps a detector class to a list of taxonomy categories")
        out[str(k)] = v
    return out


def _split_of(key: str, seed: int, val_fraction: float) -> str:
    h = int(hashlib.sha256(f"{seed}\x00{key}".encode()).hexdigest()[:15], 16) / float(1 << 60)
    return "val" if h < val_fraction else "train"


def build_yolo_dataset(sources: Sequence[AnnotationSource], out: Path, class_map: dict[str, str | None] | None = None,
                       val_fraction: float = 0.2, seed: int = 0, min_side_px: float = 2.0) -> YoloDataset:
    """Convert annotation sources into a YOLO data set under ``out`` (``images/{train,val}``,
    ``labels/{train,val}``, ``data.yaml``).

    Each image is decoded as the pipeline decodes (EXIF orientation applied) and written as a JPEG without
    metadata, so the trainer sees exactly what detection later sees; boxes given on the stored pixels of an
    EXIF-rotated image are mapped onto the displayed image, clipped, and dropped with a reason when empty or
    below ``min_side_px``. ``class_map``: source category name -> class name (``None`` drops the category;
    categories missing from a non-empty map are dropped too), classes numbered in the order the map first names
    them; by default every category that keeps a box is its own class, in the files' id order. An image whose boxes were all dropped is kept as a background (negative) image. The held-out
    split: an image is in ``val`` when the hash of (``seed``, its key) falls below ``val_fraction`` -- the same
    image is always on the same side, whatever else is in the set; at least one image is held out and one trained
    on. ``sha256`` is the checksum of the written data set (every file's path and bytes).

    Raises:
        DetectorError: an images folder does not exist, the class map is not 'category: one class' or none of
            its categories occurs in the annotations (the message lists both), no image could be read, or no box
            is left. Class map categories without annotations and classes left without a box are only warned
            about (logged, and in ``unmatched_class_map_keys`` / ``classes_without_boxes``).
    """
    from .images import ImageRejected, decode

    for src in sources:
        if not Path(src.images).is_dir():
            raise DetectorError(f"images folder {src.images} (for annotations {src.annotations}) is not a folder")
    if class_map:
        class_map = check_train_class_map(class_map)
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    for split in ("train", "val"):
        (out / "images" / split).mkdir(parents=True)
        (out / "labels" / split).mkdir(parents=True)
    images: list[AnnotatedImage] = []
    rejected: list[dict] = []
    order: list[str] = []
    for src in sources:
        ims, rej, cats = read_annotations(src)
        images += ims
        rejected += rej
        order += [c for c in cats if c not in order]
    unmatched: list[str] = []
    if class_map:  # the classes in the order the map first names them
        classes = list(dict.fromkeys(t for t in class_map.values() if t))
        annotated = {cat for im in images for cat, _ in im.boxes}
        wanted = [k for k, t in class_map.items() if t]
        unmatched = [k for k in wanted if k not in annotated]
        if wanted and len(unmatched) == len(wanted):
            raise DetectorError(f"no category of the class map occurs in the annotation files: the map's categories "
                                f"{wanted}, the files' categories {sorted(annotated)}")
        if unmatched:
            log.warning("class map categories that no annotation has (their classes get no box from them): %s",
                        unmatched)
        cls_of = {c: class_map.get(c) for c in set(order) | set(class_map)}
    else:  # every category is its own class; the list is cut to the categories that keep a box, below
        classes = list(order)
        cls_of = {c: c for c in order}
    counts: Counter = Counter()
    written: dict[str, tuple[str, AnnotatedImage]] = {}  # file stem -> (split, image)
    labels: dict[str, list[tuple]] = {}  # file stem -> [(class, cx, cy, w, h)] normalised to [0, 1]
    for im in sorted(images, key=lambda i: i.key):
        counts["images_in"] += 1
        counts["boxes_in"] += len(im.boxes)
        try:
            data = im.path.read_bytes()
            dec = decode(data)
        except FileNotFoundError:
            rejected.append({"source": im.key, "id": str(im.path), "reason": "image_missing"})
            counts["boxes_dropped"] += len(im.boxes)
            continue
        except (OSError, ImageRejected) as exc:
            rejected.append({"source": im.key, "id": str(im.path), "reason": f"image_unreadable:{exc}"})
            counts["boxes_dropped"] += len(im.boxes)
            continue
        with Image.open(io.BytesIO(data)) as raw:
            raw_size = raw.size
            orientation = int(raw.getexif().get(0x0112, 1) or 1)
        w, h = dec.width, dec.height
        lines = []
        for j, (cat, box) in enumerate(im.boxes):
            cls = cls_of.get(cat)
            if not cls:
                rejected.append({"source": im.key, "id": f"box{j}", "reason": f"class_not_kept:{cat}"})
                counts["boxes_dropped"] += 1
                continue
            # boxes are on the stored pixels unless the file's size says it annotated the displayed image
            if orientation in _ORIENT and not (im.size == (w, h) and raw_size != (w, h)):
                box = transpose_box(box, orientation, raw_size)
            clipped, why = clip_box(box, w, h, min_side_px)
            if why:
                rejected.append({"source": im.key, "id": f"box{j}", "reason": f"box_{why}"})
                counts["boxes_dropped"] += 1
                continue
            x1, y1, x2, y2 = clipped
            lines.append((cls, (x1 + x2) / 2 / w, (y1 + y2) / 2 / h, (x2 - x1) / w, (y2 - y1) / h))
        counts["boxes"] += len(lines)
        if not lines:
            counts["background_images"] += 1
        stem = f"{hashlib.sha1(im.key.encode()).hexdigest()[:12]}-{re.sub(r'[^A-Za-z0-9_.-]', '_', im.path.stem)[:60]}"
        split = _split_of(im.key, seed, val_fraction)
        dec.rgb.save(out / "images" / split / f"{stem}.jpg", format="JPEG", quality=95)
        labels[stem] = lines
        written[stem] = (split, im)
    if not written:
        why = dict(sorted(Counter(r["reason"].split(":")[0] for r in rejected).items()))
        raise DetectorError(f"no annotated image could be read (rejections by reason: {why})")
    if counts["boxes"] == 0:
        raise DetectorError("no box is left to train on (every category was dropped by the class map?)")
    if len(written) >= 2:  # at least one image on each side
        ranked = sorted(written, key=lambda st: hashlib.sha256(f"{seed}\x00{written[st][1].key}".encode()).hexdigest())
        for side, stem in (("val", ranked[0]), ("train", ranked[-1])):
            if all(sp != side for sp, _ in written.values()):
                old_side, im = written[stem]
                (out / "images" / old_side / f"{stem}.jpg").replace(out / "images" / side / f"{stem}.jpg")
                written[stem] = (side, im)
    used = {ln[0] for lines in labels.values() for ln in lines}
    without_boxes: list[str] = []
    if not class_map:
        classes = [c for c in classes if c in used]
    else:
        without_boxes = [c for c in classes if c not in used]
        if without_boxes:
            log.warning("classes without any box to train on: %s (class map categories without annotations: %s)",
                        without_boxes, unmatched)
    for stem, (split, _) in written.items():
        text = "".join(f"{classes.index(c)} {cx:.6f} {cy:.6f} {bw:.6f} {bh:.6f}\n" for c, cx, cy, bw, bh in labels[stem])
        (out / "labels" / split / f"{stem}.txt").write_text(text)
    digest = hashlib.sha256()
    for f in sorted(p for p in out.rglob("*") if p.is_file()):
        digest.update(f.relative_to(out).as_posix().encode() + b"\x00" + hashlib.sha256(f.read_bytes()).digest())
    for split, _ in written.values():
        counts[f"{split}_images"] += 1
    names = "".join(f"  {i}: {json.dumps(c)}\n" for i, c in enumerate(classes))
    yaml_text = f"path: {json.dumps(str(out.resolve()))}\ntrain: images/train\nval: images/val\nnames:\n{names}"
    (out / "data.yaml").write_text(yaml_text)
    digest.update(b"names\x00" + json.dumps(classes).encode())  # data.yaml itself holds the absolute path
    c = {k: counts[k] for k in sorted(counts)}
    c["rejected_by_reason"] = dict(sorted(Counter(r["reason"].split(":")[0] for r in rejected).items()))
    for k in ("train_images", "val_images", "boxes_dropped", "background_images"):
        c.setdefault(k, 0)
    assert c["boxes_in"] == c["boxes"] + c["boxes_dropped"]
    return YoloDataset(out, out / "data.yaml", classes, c, rejected, digest.hexdigest(), unmatched, without_boxes)


# ------------------------------------------------------------------------------------------------ training


def train_detector(sources: Sequence[AnnotationSource], out: Path, *, model: str = "yolov8n.yaml",
                   epochs: int = 60, imgsz: int = 96, batch: int = 16, val_fraction: float = 0.2, seed: int = 0,
                   class_map: dict[str, str | None] | None = None, device: str = "auto", cache_dir: Path | None = None,
                   offline: bool = True, train_args: dict[str, Any] | None = None,
                   trained_by: str = "lookbench detector train") -> dict[str, Any]:
    """Train a YOLO detector on annotation sources and score it on the held-out split.

    Writes under ``out``: ``dataset/`` (the YOLO data set), ``train/`` (ultralytics' run folder),
    ``detector.pt`` (the best weights) and ``report.json``, which is returned: ``weights``, ``weights_sha256``,
    ``map50`` and ``map50_95`` (on the held-out split, ultralytics' COCO-style AP), ``per_class_map50_95``,
    ``classes``, ``data_sha256``, the data set counts and rejections, ``unmatched_class_map_keys`` and
    ``classes_without_boxes`` (see :func:`build_yolo_dataset`), the training arguments, library versions and
    ``seconds`` (wall clock).

    ``model``: an ultralytics model YAML (built from scratch, ``pretrained=False``) or a local ``.pt`` to fine-tune;
    nothing is downloaded. Training runs with ``workers=0``, ``amp=False``, ``plots=False``, ``deterministic=True``
    and ``seed``; ``train_args`` adds or overrides ultralytics training arguments (e.g. ``mosaic``).

    Raises:
        DetectorError: the data cannot be converted, or the model is a ``.pt`` that is not a local file.
    """
    t0 = time.time()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cache_dir = Path(cache_dir or out / "ultralytics-home")
    prepare_offline(cache_dir, offline)
    is_yaml = model.endswith((".yaml", ".yml"))
    if not is_yaml and not Path(model).is_file():
        raise DetectorError(f"model {model!r}: not a model YAML and no such weights file (nothing is downloaded)")
    ds = build_yolo_dataset(sources, out / "dataset", class_map, val_fraction, seed)
    from ultralytics import YOLO
    import torch
    import ultralytics

    dev = resolve_device(device)
    yolo = YOLO(model, task="detect")
    args = dict(data=str(ds.data_yaml), epochs=epochs, imgsz=imgsz, batch=batch, workers=0, device=dev,
                pretrained=not is_yaml, amp=False, plots=False, project=str(out), name="train", exist_ok=True,
                seed=seed, deterministic=True, verbose=False, val=False)
    args.update(train_args or {})
    yolo.train(**args)
    best = Path(yolo.trainer.best if Path(yolo.trainer.best).is_file() else yolo.trainer.last)
    weights = out / "detector.pt"
    shutil.copyfile(best, weights)
    metrics = YOLO(str(weights), task="detect").val(data=str(ds.data_yaml), split="val", imgsz=imgsz, batch=batch,
                                                    device=dev, workers=0, plots=False, verbose=False,
                                                    project=str(out), name="val", exist_ok=True)
    per_class = {ds.classes[int(i)]: float(m) for i, m in zip(metrics.box.ap_class_index, metrics.box.maps[metrics.box.ap_class_index])} \
        if len(getattr(metrics.box, "ap_class_index", [])) else {}
    report = {
        "weights": str(weights), "weights_sha256": file_sha256(weights), "trained_by": trained_by,
        "map50": float(metrics.box.map50), "map50_95": float(metrics.box.map), "eval_split": "val",
        "eval_images": ds.counts["val_images"], "per_class_map50_95": per_class, "classes": ds.classes,
        "data_sha256": ds.sha256, "dataset": ds.counts, "rejected": ds.rejected[:1000],
        "unmatched_class_map_keys": ds.unmatched_class_map_keys, "classes_without_boxes": ds.classes_without_boxes,
        "train_args": {k: v for k, v in args.items() if k not in ("project", "name", "data")},
        "sources": [{"annotations": str(s.annotations), "images": str(s.images), "image_name": s.image_name,
                     "format": s.format} for s in sources],
        "model": model, "ultralytics_version": ultralytics.__version__, "torch_version": torch.__version__,
        "seconds": round(time.time() - t0, 1),
    }
    (out / "report.json").write_text(json.dumps(report, indent=1, sort_keys=True))
    return report


# ------------------------------------------------------------------------------------------------ demo detector


def demo_detector(cache_dir: Path, scenes: int = 120, scene_seed: int = 1234, train: dict[str, Any] | None = None,
                  device: str = "auto", offline: bool = True) -> tuple[Path, dict[str, Any], bool]:
    """The demo detector: trained once with :func:`train_detector` on street looks that the embedded demo shop
    draws (its own garments composited on scenes, boxes known, never the looks it publishes), and cached under
    ``cache_dir/demo-<checksum>`` keyed by the training data's checksum and the training arguments.

    ``train``: :class:`~lookbench_pipeline.config.DetectorTrainConfig` fields (``model``, ``epochs``, ``imgsz``,
    ``batch``, ``val_fraction``, ``seed``, ``args``). Returns ``(weights, report, trained_now)``.
    """
    from .demo import shop as demo_shop  # the demo detector trains on looks the demo shop draws
    from .config import DEMO_SITE, SiteConfig

    site = SiteConfig.from_yaml(DEMO_SITE)
    train = dict(train or {})
    cache_dir = Path(cache_dir)
    looks_dir = cache_dir / f"demo-looks-{site.demo_products}-{site.demo_looks}-{site.demo_seed}-{scenes}-{scene_seed}"
    ann = looks_dir / "annotations.json"
    if not ann.is_file():
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".demo-looks-", dir=cache_dir))
        demo_shop.write_training_looks(tmp, site.demo_products, site.demo_looks, site.demo_seed, scenes, scene_seed)
        _publish_dir(tmp, looks_dir)
    digest = hashlib.sha256(ann.read_bytes())
    for f in sorted((looks_dir / "images").iterdir()):
        digest.update(f.name.encode() + b"\x00" + hashlib.sha256(f.read_bytes()).digest())
    class_map = {c: k for k, cats in DEMO_CLASSES.items() for c in cats}
    from importlib.metadata import version

    digest.update(json.dumps({"train": train, "class_map": list(class_map.items()), "recipe": DEMO_RECIPE,
                              "ultralytics": version("ultralytics")}, sort_keys=True).encode())
    target = cache_dir / f"demo-{digest.hexdigest()[:16]}"
    report_file = target / "report.json"
    if report_file.is_file() and (target / "detector.pt").is_file():
        report = json.loads(report_file.read_text())
        report["weights"] = str(target / "detector.pt")
        return target / "detector.pt", report, False
    log.warning("No garment-trained detector weights configured (detect.weights: demo): training the demo detector "
                "once on %d street looks drawn by the demo shop; it is cached in %s", scenes, target)
    tmp = Path(tempfile.mkdtemp(prefix=".demo-train-", dir=cache_dir))
    fields = {k: train[k] for k in ("model", "epochs", "imgsz", "batch", "val_fraction", "seed") if k in train}
    report = train_detector([AnnotationSource(ann, looks_dir / "images")], tmp, class_map=class_map, device=device,
                            cache_dir=cache_dir, offline=offline, train_args=train.get("args") or {},
                            trained_by="lookbench detector train (demo detector, demo shop looks)", **fields)
    report["training_looks"] = scenes
    (tmp / "report.json").write_text(json.dumps(report, indent=1, sort_keys=True))
    for sub in ("dataset", "train", "val"):
        shutil.rmtree(tmp / sub, ignore_errors=True)  # the cache keeps the weights and the report
    _publish_dir(tmp, target)
    report = json.loads(report_file.read_text())
    report["weights"] = str(target / "detector.pt")
    return target / "detector.pt", report, True


def _publish_dir(tmp: Path, target: Path) -> None:
    """Move a finished folder into place; when another process got there first, keep theirs."""
    try:
        tmp.rename(target)
    except OSError:
        if not target.exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)
