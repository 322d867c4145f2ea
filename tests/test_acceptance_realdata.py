"""Acceptance: a whole release built from ../shared/realdata (replayed shop pages and the real photo drop)."""

import hashlib
import json
import os
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
    assert report["weights_file_sha256"] == hashlib.sha256((tmp_path / "detector/detector.pt").read_bytes()).hexdigest()
    # the weights are usable as detect.weights with the class mapping (checked against the model's names)
    cfg = {"detect": {"weights": str(tmp_path / "detector/detector.pt"), "classes": DETECTOR_CLASSES}}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(cfg))
    check = subprocess.run([sys.executable, "-c", "import sys; from lookbench_pipeline.config import load_config; "
                            "from lookbench_pipeline.pipeline import load_detector; "
                            "print(load_detector(load_config(sys.argv[1])).info()['classes'])", str(tmp_path / "p.yaml")],
                           capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert check.returncode == 0 and str(list(DETECTOR_CLASSES)) in check.stdout, check.stderr[-2000:]


def _make_real_command() -> list[str]:
    """The command `make real` runs, read from the Makefile (so this test cannot drift from it)."""
    import re

    m = re.search(r"^real:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    assert m, "the Makefile has a `real` target"
    # its recipe: a check that the real data is there, then the build
    [line] = [x for x in m.group(1).splitlines() if x.strip().startswith("$(VENV)/bin/lookbench")]
    argv = line.split()
    return [sys.executable, "-m", "lookbench_pipeline.cli", *argv[1:]]


def test_release_from_real_input(tmp_path, realdata):
    """`make real` as the README gives it: the shipped configs/realdata.yaml, unchanged (only where the data dir and
    the store are written is moved to tmp_path, through the documented LOOKBENCH_* variables). Every real photo
    ends as a query, a gallery item or a named rejection; the known studio/worn pairs are street-look queries with
    their positive in the gallery; the labelled studio photos make a real_studio_flat subset; the real embedder,
    its random floor and the baseline are scored, and the real embedder beats the floor."""
    cmd = _make_real_command()
    assert cmd[-2:] == ["--config", "configs/realdata.yaml"]
    env = {**os.environ, "LOOKBENCH_DATA_DIR": str(tmp_path / "data"), "LOOKBENCH_STORE__URL": str(tmp_path / "store")}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=2400, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    shipped = yaml.safe_load((ROOT / "configs/realdata.yaml").read_text())
    assets = tmp_path / "data/assets"
    read = lambda name: pq.read_table(next((assets / name).glob("*.parquet")))  # noqa: E731

    # crawl: every saved page was visited and has an outcome
    log = read("crawl_log")
    pages = [u for u in log["url"].to_pylist() if "/pages/" in u]
    assert len(pages) == len(list((realdata / "pages").glob("*.html")))
    assert read("products").num_rows >= 25
    # images: in = accepted + rejected, every rejection has a reason; CDN images are refused, not fetched
    refs = read("image_refs").to_pylist()
    photos = sorted(p for sub in ("studio", "street") for p in (realdata / "images" / sub).iterdir() if p.is_file())
    drop_refs = [r for r in refs if r["owner_type"] == "drop"]
    assert len(drop_refs) == len(photos)
    assert all((r["status"] == "accepted") == (r["reason"] is None) for r in refs)
    reasons = {r["reason"] for r in refs if r["owner_type"] == "product"}
    assert "host_not_allowed" in reasons
    # dedup: the byte-identical pair of street photos is one image
    by_source = {Path(r["source"]).name: r["image_sha256"] for r in drop_refs}
    assert by_source["model-studio_catvton_049713_0.jpg"] == by_source["model-studio_ootd_049713_0.jpg"]

    store = tmp_path / "store/releases"
    [version] = [p.name for p in store.iterdir() if p.is_dir() and not p.name.startswith(".")]
    manifest = json.loads((store / version / "manifest.json").read_text())
    c = manifest["counts"]
    assert c["candidates"] == c["query_rows"] + c["gallery_rows_distinct"] + c["rejected"]
    assert sum(c["rejected_by_reason"].values()) == c["rejected"]
    rows = {key: pq.read_table(store / version / key).to_pylist() for key in manifest["files"]}
    rejected = pq.read_table(tmp_path / "data/candidates" / version / "rejected.parquet").to_pylist()
    assert len(rejected) == c["rejected"] and all(r["reason"] for r in rejected)

    # every real photo is a query (its crop or itself), a gallery item, or a named rejection
    published = {r["source_url"] for rs in rows.values() for r in rs}
    named = {r["source"]: r["reason"] for r in rejected if r["source"]}
    accounted = {}
    for p in photos:
        path = str(p.resolve())
        accounted[p.name] = "published" if path in published else named.get(path)
    unaccounted = [n for n, why in accounted.items() if why is None]
    ref_of = {Path(r["source"]).name: r for r in drop_refs}
    # a photo refused at intake, or a duplicate of another photo, is accounted for by the intake and dedup stages
    unaccounted = [n for n in unaccounted if ref_of[n]["status"] != "accepted"
                   and not any(r["source"] == ref_of[n]["source"] for r in rejected)]
    assert not unaccounted, f"real photos neither published nor rejected with a reason: {unaccounted}"

    # the known studio/worn pairs: street-look queries (the garment's crop) with their positive in the gallery
    pairs = {"vitonhd-00055", "vitonhd-14627"}
    street_q = rows.get("real_streetlook/query.parquet", [])
    street_g = {r["item_ID"] for r in rows.get("real_streetlook/gallery.parquet", [])}
    assert pairs <= {r["item_ID"] for r in street_q}, [r["item_ID"] for r in street_q]
    assert pairs <= street_g
    for r in street_q:
        assert r["box"] is not None and r["item_index"] is not None
    # labelled studio photos make a real_studio_flat subset: the gallery of studio packshots, the worn photos of the
    # pairs (a model on a studio background) as whole-image queries
    studio_q = rows.get("real_studio_flat/query.parquet", [])
    studio_g = rows.get("real_studio_flat/gallery.parquet", [])
    assert pairs <= {r["item_ID"] for r in studio_q}
    studio_photos = [p for p in photos if p.parent.name == "studio"]
    in_gallery = {r["source_url"] for r in studio_g}
    assert len([p for p in studio_photos if str(p.resolve()) in in_gallery]) >= 20
    assert all(r["annotator"] for r in studio_g)
    assert any(a.startswith("import:vitonhd") for a in manifest["annotators"]), manifest["annotators"]

    # the detector is the real person-region fallback, recorded with its weights
    assert shipped["detect"]["weights"] == "person-regions"
    [model] = [m for m in manifest["models"] if m["role"] == "detector"]
    assert model["weights_sha256"]
    det = read("detections").to_pylist()
    for r in det:
        if r["status"] == "dropped":
            assert r["reason"] in ("degenerate", "outside_image", "too_small", "class_ignored")
        else:
            assert (tmp_path / "store/derived" / r["crop_sha256"][:2] / r["crop_sha256"]).is_file()

    # scored with the real embedder, its random floor and the baseline; the real embedder beats the floor
    scores = pq.read_table(next((tmp_path / "data/reports").glob("*/scores.parquet"))).to_pylist()
    overall = {(r["model"], r["metric"]): r["value"] for r in scores if r["subset"] == "overall"}
    for m in ("efficientnet-lite0/imagenet", "efficientnet-lite0/random-init", "baseline/hsv-hog-v1"):
        assert (m, "item_recall@1") in overall, sorted({k[0] for k in overall})
    assert overall[("efficientnet-lite0/imagenet", "ndcg@5")] > overall[("efficientnet-lite0/random-init", "ndcg@5")]
    assert "Evaluation" in proc.stdout
