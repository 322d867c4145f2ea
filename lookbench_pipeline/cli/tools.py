"""The maintainers' tools: ``audit export`` / ``audit score`` (a human review of a release's labels) and
``detector train`` (a YOLO garment detector from annotations, offline)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..config import load_config
from .common import UsageError, need_build_stack
from .consume import release_source


def cmd_audit_export(args: argparse.Namespace) -> int:
    """A stratified sample of a release's labels with a review form. The release is named as ``info`` and
    ``evaluate`` name it (a version or ``latest`` in ``--store`` or the configuration's store, or a pulled folder),
    and read in the consumer install: nothing of the build stack is imported."""
    from ..audit import export, sample_release

    store, version = release_source(args, args.version)
    rows, images = sample_release(store, version, args.per_stratum, args.seed)
    path = export(rows, images, args.out)
    strata = len({(r.category, r.attribute) for r in rows})
    print(f"{len(rows)} labels from {strata} strata (category x attribute) of {version}: {path}")
    print(f"open {Path(args.out) / 'index.html'} to review, or fill the verdict column of {path.name} "
          "(correct / incorrect / unsure); then: lookbench audit score <file.csv>")
    return 0


def cmd_audit_score(args: argparse.Namespace) -> int:
    from ..audit import format_score, score

    if not Path(args.csv).is_file():
        raise UsageError(f"{args.csv}: no such file (the audit.csv that `lookbench audit export` wrote, with its "
                         "verdict column filled)" if not Path(args.csv).exists() else f"{args.csv}: not a file")
    result = score(args.csv)
    print(json.dumps(result, indent=2) if args.json else format_score(result))
    return 0


def cmd_detector_train(args: argparse.Namespace) -> int:
    """Convert annotation files to a YOLO data set, train, score on the held-out split, write weights + report."""
    need_build_stack("detector train", ("ultralytics", "torch"))
    import yaml

    from ..config import DetectorTrainConfig
    from ..detect import AnnotationSource, DetectorError, check_train_class_map, train_detector

    for flag, value, ok, want in (("epochs", args.epochs, lambda v: v >= 1, ">= 1"),
                                  ("imgsz", args.imgsz, lambda v: v >= 32, ">= 32 (pixels)"),
                                  ("batch", args.batch, lambda v: v >= 1, ">= 1"),
                                  ("val-fraction", args.val_fraction, lambda v: 0 < v < 1,
                                   "between 0 and 1 (exclusive)")):
        if value is not None and not ok(value):
            raise ValueError(f"--{flag} must be {want}, got {value}")
    cfg = load_config(args.config)
    n = len(args.annotations)

    def per_source(values: list[str] | None, name: str, default: str | None) -> list[str]:
        values = values or ([default] if default is not None else [])
        if len(values) == 1:
            return values * n
        if len(values) != n:
            raise ValueError(f"--{name}: give one value, or one per --annotations ({n}); got {len(values)}")
        return values

    images = per_source(args.images, "images", None)
    sources = [AnnotationSource(Path(a), Path(i), t, f) for a, i, t, f in
               zip(args.annotations, images, per_source(args.image_name, "image-name", "{file_name}"),
                   per_source(args.format, "format", "auto"))]
    for i in dict.fromkeys(images):
        if not Path(i).is_dir():
            raise ValueError(f"--images {i}: no such folder")
    class_map = None
    if args.classes:
        try:
            class_map = yaml.safe_load(Path(args.classes).read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ValueError(f"--classes {args.classes}: not a YAML file ({exc})") from exc
        if not isinstance(class_map, dict):
            raise ValueError(f"--classes {args.classes}: a mapping 'source category: class' expected")
        try:
            class_map = check_train_class_map(class_map)
        except DetectorError as exc:
            raise ValueError(f"--classes {args.classes}: {exc}") from exc
    extra = {}
    for kv in args.arg or []:
        k, sep, v = kv.partition("=")
        if not sep:
            raise ValueError(f"--arg {kv!r}: expected key=value")
        extra[k] = yaml.safe_load(v)
    d = DetectorTrainConfig()
    try:
        report = train_detector(
            sources, Path(args.out), model=args.model or d.model,
            epochs=d.epochs if args.epochs is None else args.epochs,
            imgsz=d.imgsz if args.imgsz is None else args.imgsz,
            batch=d.batch if args.batch is None else args.batch,
            val_fraction=d.val_fraction if args.val_fraction is None else args.val_fraction,
            seed=d.seed if args.seed is None else args.seed, class_map=class_map, device=args.device,
            cache_dir=cfg.detector_cache_dir, offline=cfg.detect.offline, train_args=extra)
    except DetectorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    ds = report["dataset"]
    print(f"trained {report['model']} on {ds['train_images']} images, held out {ds['val_images']} "
          f"({ds['boxes']} boxes kept, {ds['boxes_dropped']} dropped {ds['rejected_by_reason']}) in "
          f"{report['seconds']:.0f} s")
    print(f"  classes:   {report['classes']}")
    print(f"  mAP50 {report['map50']:.3f}  mAP50-95 {report['map50_95']:.3f}  (held-out split)")
    print(f"  weights:   {report['weights']}  sha256 {report['weights_sha256']}")
    print(f"  report:    {Path(args.out) / 'report.json'}")
    if report.get("unmatched_class_map_keys"):
        print(f"warning: --classes categories that no annotation has: {report['unmatched_class_map_keys']}",
              file=sys.stderr)
    if report.get("classes_without_boxes"):
        print(f"warning: classes trained without a single box: {report['classes_without_boxes']}", file=sys.stderr)
    return 0
