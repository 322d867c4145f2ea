"""Acceptance: a whole release built from ../shared/realdata (replayed shop pages and the real photo drop)."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import yaml

ROOT = Path(__file__).resolve().parents[1]


# The real annotation files' categories -> the classes of the tiny detector the test trains from them.
CLASS_MAP = {"shirt, blouse": "upper", "top, t-shirt, sweatshirt": "upper", "sweater": "upper", "cardigan": "upper",
             "jacket": "upper", "coat": "upper", "top": "upper", "outer": "upper", "pants": "lower",
             "shorts": "lower", "skirt": "lower", "dress": "dress", "jumpsuit": "dress",
             "long_sleeved_dress": "dress", "shoe": "shoes", "footwear": "shoes", "boots": "shoes",
             "bag, wallet": "bag", "bag": "bag"}
DETECTOR_CLASSES = {"upper": ["top", "shirt", "sweater", "outerwear"], "lower": ["trousers", "shorts", "skirt"],
                    "dress": ["dress"], "shoes": ["shoes"], "bag": ["bag"]}


def test_detector_train_from_real_annotation_files(tmp_path, realdata):
    """`lookbench detector train` on the real annotation files: Fashionpedia (polygons, no bbox), DeepFashion2 as
    COCO (mmpose) and ModaNet snaps (whose photos are not here: recorded as missing). A tiny model on four photos:
    it proves the format path end to end, not garment detection (production uses garment-trained weights)."""
    ann, street = realdata / "annotations", realdata / "images/street"
    (tmp_path / "classes.yaml").write_text(yaml.safe_dump(CLASS_MAP, sort_keys=False))
    args = ["--annotations", str(ann / "fashionpedia_sample.json"), "--images", str(street),
            "--image-name", "street_fashionpedia_{file_name}",
            "--annotations", str(ann / "mmpose_deepfashion2_coco.json"), "--images", str(street),
            "--image-name", "street_mmpose_deepfasion2_{file_name}",
            "--annotations", str(ann / "modanet_tiny_snaps_test.json"), "--images", str(street),
            "--image-name", "{image_id}.jpg",
            "--classes", str(tmp_path / "classes.yaml"), "--out", str(tmp_path / "detector"),
            "--epochs", "10", "--imgsz", "128", "--batch", "4", "--arg", "nbs=4", "--arg", "mosaic=0",
            "--val-fraction", "0.3"]
    proc = subprocess.run([sys.executable, "-m", "lookbench_pipeline.cli", "detector", "train", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "mAP50" in proc.stdout
    report = json.loads((tmp_path / "detector/report.json").read_text())
    assert report["classes"] == list(DETECTOR_CLASSES)
    assert report["dataset"]["rejected_by_reason"]["image_missing"] == 10  # ModaNet's photos are not here
    assert report["dataset"]["train_images"] + report["dataset"]["val_images"] == 4
    assert report["dataset"]["boxes"] == 7  # 2 shoes, a dress, trousers, a shirt (Fashionpedia), 2 DeepFashion2 dresses
    assert 0 <= report["map50_95"] <= report["map50"] <= 1
    assert report["weights_sha256"] == hashlib.sha256((tmp_path / "detector/detector.pt").read_bytes()).hexdigest()
    # the weights are usable as detect.weights with the class mapping (checked against the model's names)
    cfg = {"detect": {"weights": str(tmp_path / "detector/detector.pt"), "classes": DETECTOR_CLASSES}}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(cfg))
    check = subprocess.run([sys.executable, "-c", "import sys; from lookbench_pipeline.config import load_config; "
                            "from lookbench_pipeline.pipeline import load_detector; "
                            "print(load_detector(load_config(sys.argv[1])).info()['classes'])", str(tmp_path / "p.yaml")],
                           capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert check.returncode == 0 and str(list(DETECTOR_CLASSES)) in check.stdout, check.stderr[-2000:]


def test_release_from_real_input(tmp_path, realdata):
    cfg = yaml.safe_load((ROOT / "configs/realdata.yaml").read_text())
    cfg["data_dir"] = str(tmp_path / "data")
    cfg["store"] = {"url": str(tmp_path / "store")}
    cfg["sites"] = [str(ROOT / "configs/sites/realdata-pages.yaml")]
    cfg["drops"][0]["path"] = str(realdata / "images")
    cfg["drops"][0]["items_csv"] = str(ROOT / "configs/realdata_items.csv")
    # the street photos go through the demo detector (the session's, see conftest), at a low threshold: trained on
    # drawn garments, it gives photos few confident boxes. Production configures garment-trained weights.
    assert cfg["detect"]["weights"] == "demo"
    cfg["detect"]["conf"] = 0.05
    (tmp_path / "real.yaml").write_text(yaml.safe_dump(cfg))
    proc = subprocess.run([sys.executable, "-m", "lookbench_pipeline.cli", "build", "--config",
                           str(tmp_path / "real.yaml")], capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assets = tmp_path / "data/assets"
    read = lambda name: pq.read_table(next((assets / name).glob("*.parquet")))  # noqa: E731

    # crawl: every saved page was visited and has an outcome
    log = read("crawl_log")
    pages = [u for u in log["url"].to_pylist() if "/pages/" in u]
    assert len(pages) == len(list((realdata / "pages").glob("*.html")))
    products = read("products")
    assert products.num_rows >= 25
    # images: in = accepted + rejected, every rejection has a reason; CDN images are refused, not fetched
    refs = read("image_refs").to_pylist()
    n_photos = len(list((realdata / "images/studio").iterdir())) + len(list((realdata / "images/street").iterdir()))
    assert sum(r["owner_type"] == "drop" for r in refs) == n_photos
    assert all((r["status"] == "accepted") == (r["reason"] is None) for r in refs)
    reasons = {r["reason"] for r in refs if r["owner_type"] == "product"}
    assert "host_not_allowed" in reasons
    assert all(r == "host_not_allowed" or r.startswith("http_4") for r in reasons), reasons
    # dedup: the byte-identical pair of street photos is one image
    by_source = {Path(r["source"]).name: r["image_sha256"] for r in refs if r["owner_type"] == "drop"}
    assert by_source["model-studio_catvton_049713_0.jpg"] == by_source["model-studio_ootd_049713_0.jpg"]
    store = tmp_path / "store/releases"
    [version] = [p.name for p in store.iterdir() if p.is_dir()]
    manifest = json.loads((store / version / "manifest.json").read_text())
    c = manifest["counts"]
    assert c["candidates"] == c["query_rows"] + c["gallery_rows_distinct"] + c["rejected"]
    # detection ran on every accepted street photo; boxes reconcile; kept boxes have their crop in the store
    street_refs = {r["owner_id"]: r for r in refs if r["owner_type"] == "drop" and "/street/" in r["source"]
                   and r["status"] == "accepted"}
    assert len(street_refs) >= 50
    det = read("detections").to_pylist()
    assert {r["owner_id"] for r in det} <= set(street_refs)
    kept = [r for r in det if r["status"] != "dropped"]
    assert kept, "the detector gave no box at all on 58 street photos"
    [model] = [m for m in manifest["models"] if m["role"] == "detector"]
    assert model["weights"] == "demo" and model["classes"] == ["upper", "lower", "dress", "shoes", "bag"]
    for r in det:
        assert r["detector_sha256"] == model["weights_sha256"]
        if r["status"] == "dropped":
            assert r["reason"] in ("degenerate", "outside_image", "too_small", "class_ignored")
        else:
            assert (tmp_path / "store/derived" / r["crop_sha256"][:2] / r["crop_sha256"]).is_file()
            assert r["status"] in ("matched", "unlabelled") and (r["item_id"] is None) == (r["status"] == "unlabelled")
    # the known garment-worn pairs: a query (the item's crop, look id, item index, box) when the detector matched
    # the garment, otherwise a recorded rejection -- never lost silently
    pairs = {"vitonhd-00055", "vitonhd-14627"}
    q = (pq.read_table(store / version / "real_streetlook/query.parquet").to_pylist()
         if (store / version / "real_streetlook/query.parquet").is_file() else [])
    assert q and {r["item_ID"] for r in q} <= pairs
    for r in q:
        assert r["look_id"] in street_refs and r["item_index"] is not None and r["box"] is not None
        assert r["image_sha256"] != street_refs[r["look_id"]]["image_sha256"]  # the item's crop, not the photo
    assert "RealStreetLook" in proc.stdout or "real_streetlook" in proc.stdout
    assert c["street_look_items"]["items_detected"] == len(kept)
    assert (len(q) + c["rejected_by_reason"].get("linked_product_not_detected", 0)
            + c["rejected_by_reason"].get("duplicate_query", 0)) >= len(pairs)
    assert "catalog-text/1" in manifest["annotators"]
    assert "Evaluation" in proc.stdout
