"""Garment detection with a real, tiny YOLO model: the demo detector, trained once per session (conftest
``demo_detector``) on street looks the demo shop composites from its garments, then run on the looks it publishes."""

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lookbench_pipeline.demo import shop as demo_shop
from lookbench_pipeline.demo.detector import DEMO_CLASSES
from lookbench_pipeline.detect import Detector, DetectorError, LinkedItem, StreetImage, detect_street_images
from lookbench_pipeline.embed import HsvHogEmbedder
from lookbench_pipeline.images import decode
from lookbench_pipeline.store import LocalStore, derived_key, sha256_hex
from lookbench_pipeline.taxonomy import Taxonomy

CATEGORIES = Taxonomy.load().categories


def iou(a, b):
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    """The embedded demo shop's published looks (never seen in training) with their COCO ground truth."""
    root = tmp_path_factory.mktemp("shop")
    truth = demo_shop.generate(root, 48, 12, 7)
    coco = json.loads((root / "images/looks/boxes.coco.json").read_text())
    return root, truth, coco


def test_demo_detector_is_trained_and_scored_on_held_out_looks(demo_detector):
    weights, report = demo_detector
    assert weights.is_file()
    assert report["weights_file_sha256"] == __import__("hashlib").sha256(weights.read_bytes()).hexdigest()
    assert report["weights_sha256_of"] == "tensors" and report["weights_sha256"] != report["weights_file_sha256"]
    assert report["classes"] == sorted(DEMO_CLASSES, key=list(DEMO_CLASSES).index)
    assert report["eval_images"] >= 10 and report["dataset"]["train_images"] > report["eval_images"]
    assert 0.5 < report["map50"] <= 1.0 and 0.0 < report["map50_95"] <= report["map50"]
    assert report["train_args"]["pretrained"] is False and report["train_args"]["amp"] is False


def test_it_finds_the_garments_of_the_published_looks(demo_detector, shop):
    weights, report = demo_detector
    root, truth, coco = shop
    det = Detector(weights, DEMO_CLASSES, CATEGORIES, source="demo", report=report, device="auto")
    assert det.device == "cpu" or det.device.startswith("cuda")
    assert det.imgsz == report["train_args"]["imgsz"]
    images = {im["id"]: im for im in coco["images"]}
    cat = {c["id"]: c["name"] for c in coco["categories"]}
    pics = [(i, decode((root / "images/looks" / images[i]["file_name"]).read_bytes()).rgb) for i in sorted(images)]
    found = total = 0
    for key, im, dets in det.predict(pics):
        assert im.size == (640, 800)
        assert all(0 <= d.score <= 1 for d in dets) and dets == sorted(dets, key=lambda d: -d.score)
        for a in (a for a in coco["annotations"] if a["image_id"] == key):
            x, y, w, h = a["bbox"]
            total += 1
            found += any(iou(d.xyxy, [x, y, x + w, y + h]) >= 0.5 and cat[a["category_id"]] in
                         DEMO_CLASSES[d.model_class] for d in dets)
    assert total >= 30 and found / total >= 0.6, f"found {found} of {total} garments"
    info = det.info()
    assert info["weights_sha256"] == report["weights_sha256"] and info["map50"] == report["map50"]


def test_the_weights_are_identified_by_their_tensors_not_the_file(demo_detector, tmp_path):
    """Training the same weights twice writes two files (ultralytics puts the date into the checkpoint); the
    detector's identity, which the release's provenance records, is the same for both, and another tensor is
    another detector."""
    import torch

    weights, report = demo_detector
    ckpt = torch.load(weights, weights_only=False)
    ckpt["date"] = "2030-01-01T00:00:00+00:00"
    retrained = tmp_path / "retrained.pt"
    torch.save(ckpt, retrained)
    a = Detector(weights, DEMO_CLASSES, CATEGORIES, source="demo", device="cpu")
    b = Detector(retrained, DEMO_CLASSES, CATEGORIES, source="demo", device="cpu")
    assert a.file_sha256 != b.file_sha256
    assert a.sha256 == b.sha256 == report["weights_sha256"]
    assert a.info()["weights_sha256"] == a.sha256 and a.info()["weights_sha256_of"] == "tensors"
    # the identity is taken before prediction fuses the layers, so it holds after predicting too
    list(a.predict([("x", Image.new("RGB", (64, 80), "white"))]))
    assert a.sha256 == Detector(weights, DEMO_CLASSES, CATEGORIES, device="cpu").sha256
    with torch.no_grad():
        next(ckpt["model"].parameters()).add_(1e-3)
    changed = tmp_path / "changed.pt"
    torch.save(ckpt, changed)
    assert Detector(changed, DEMO_CLASSES, CATEGORIES, device="cpu").sha256 != a.sha256


def test_street_items_are_cropped_stored_and_matched(demo_detector, shop, tmp_path):
    """Each detected item is cropped into the store (content-addressed) and matched to the look's products: by
    category, and by how it looks where two linked products share a category (looks with two bags)."""
    weights, report = demo_detector
    root, truth, coco = shop
    det = Detector(weights, DEMO_CLASSES, CATEGORIES)
    store = LocalStore(tmp_path / "store")
    products = {sku: p for sku, p in ((p.sku, p) for p in demo_shop.plan(48, 12, 7)[0])}
    emb = HsvHogEmbedder()
    street, rgb = [], {}
    for lk in coco["images"]:
        rgb[str(lk["id"])] = decode((root / "images/looks" / lk["file_name"]).read_bytes()).rgb
        skus = truth["looks"][str(lk["id"])]["skus"]
        vecs = emb.embed([demo_shop.packshot(products[s]) for s in skus])
        street.append(StreetImage("look", f"L{lk['id']}", str(lk["id"]),
                                  [LinkedItem(s, products[s].category, v) for s, v in zip(skus, vecs)]))

    def put(data):
        sha = sha256_hex(data)
        store.put_bytes(derived_key(sha), data)
        return sha

    seen = []
    rows, counts = detect_street_images(det, street, rgb.__getitem__, put, emb.embed, min_box_side_px=16,
                                        progress=lambda done, total: seen.append((done, total)))
    assert seen == [(i, len(street)) for i in range(1, len(street) + 1)]  # one report per distinct image
    assert counts["boxes"] == counts["kept"] + counts["dropped"] == len(rows)
    assert counts["kept"] == counts["matched"] + counts["unlabelled"] and counts["matched"] >= 20
    assert counts["linked_items"] == sum(len(v["skus"]) for v in truth["looks"].values())
    right = wrong = 0
    for r in rows:
        if r["status"] == "dropped":
            assert r["reason"] in ("degenerate", "outside_image", "too_small", "class_ignored") and r["box"] is None
            continue
        x1, y1, x2, y2 = r["box"]
        assert 0 <= x1 < x2 <= 640 and 0 <= y1 < y2 <= 800 and min(x2 - x1, y2 - y1) >= 16
        crop = decode(store.get_bytes(derived_key(r["crop_sha256"]))).rgb
        assert crop.size == (r["crop_width"], r["crop_height"])
        assert abs(crop.width - (x2 - x1)) <= 2 and abs(crop.height - (y2 - y1)) <= 2
        if r["status"] == "matched":
            look = truth["looks"][r["image_sha256"]]
            gt = max(zip(look["skus"], look["boxes"]), key=lambda sb: iou(r["box"], sb[1]))
            if iou(r["box"], gt[1]) >= 0.5:
                right += r["item_id"] == gt[0]
                wrong += r["item_id"] != gt[0]
        else:
            assert r["item_id"] is None and r["reason"]
    assert right >= 20 and wrong <= right // 10, (right, wrong)
    # a look that links two bags: each well-placed bag detection went to the bag it shows
    two_bags = [k for k, v in truth["looks"].items()
                if sum(products[s].category == "bag" for s in v["skus"]) == 2]
    assert two_bags, "the demo shop has a look with two bags"
    bag_rows = [r for r in rows if r["image_sha256"] in two_bags and r["status"] == "matched"
                and products[r["item_id"]].category == "bag"]
    assert bag_rows
    for r in bag_rows:
        look = truth["looks"][r["image_sha256"]]
        best = max(zip(look["skus"], look["boxes"]), key=lambda sb: iou(r["box"], sb[1]))
        if iou(r["box"], best[1]) >= 0.5:
            assert r["item_id"] == best[0]


def test_class_mapping_must_fit_the_model(demo_detector):
    weights, _ = demo_detector
    with pytest.raises(DetectorError, match="not mapped"):
        Detector(weights, {"upper": ["top"]}, CATEGORIES)
    with pytest.raises(DetectorError, match="not taxonomy categories"):
        Detector(weights, {}, CATEGORIES)  # upper / lower are not categories
    with pytest.raises(DetectorError, match="do not load"):
        Detector(Path(__file__), DEMO_CLASSES, CATEGORIES)


def test_a_cached_demo_detector_is_reused(demo_detector):
    import os

    from lookbench_pipeline.config import DemoDetectorConfig
    from lookbench_pipeline.demo.detector import demo_detector as train_demo

    d = DemoDetectorConfig()
    weights, report, trained = train_demo(Path(os.environ["LOOKBENCH_DETECT__CACHE_DIR"]), d.scenes, d.seed,
                                          d.train.model_dump())
    assert not trained and weights == demo_detector[0] and report["weights_sha256"] == demo_detector[1]["weights_sha256"]


def test_loading_the_detector_leaves_pillow_alone(demo_detector):
    """ultralytics replaces PIL.Image.open on import (a lazy HEIF plugin install); the pipeline puts Pillow's back,
    so the image intake still names a non-image file ``not_an_image`` in the same process."""
    from PIL import Image

    from lookbench_pipeline.images import ImageRejected, Reject

    Detector(demo_detector[0], DEMO_CLASSES, CATEGORIES)
    assert Image.open.__module__ == "PIL.Image"
    with pytest.raises(ImageRejected) as err:
        decode(b"<html>not an image</html>" * 8)
    assert err.value.reason == Reject.NOT_AN_IMAGE
