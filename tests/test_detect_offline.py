"""Detection and training open no outbound connection.

Both run in a fresh interpreter whose every socket connect and name lookup outside the loopback range is refused
and logged by tests/netguard/sitecustomize.py, loaded before anything else (so before ultralytics, torch and
huggingface_hub are imported). Nothing in the environment prepares them: the library sets YOLO_OFFLINE,
YOLO_CONFIG_DIR, the fonts and ultralytics' settings itself.
"""

import json
import subprocess
import sys

import yaml
from netguard_env import SELF_TEST, guarded_env, outbound_attempts

from lookbench_pipeline.demo import shop as demo_shop

DETECT = SELF_TEST + r"""
import json, sys
from pathlib import Path
from lookbench_pipeline.config import load_config
from lookbench_pipeline.pipeline import load_detector
from lookbench_pipeline.images import decode

cfg = load_config(sys.argv[1])
det = load_detector(cfg)
imgs = sorted(Path(sys.argv[2]).glob("*.jpg"))[:3]
out = [(k, len(d)) for k, _, d in det.predict((p.name, decode(p.read_bytes()).rgb) for p in imgs)]
print(json.dumps({"images": len(out), "boxes": sum(n for _, n in out), "info": det.info()}))
"""


def test_training_and_detection_open_no_outbound_connection(tmp_path):
    data = tmp_path / "looks"
    ann = demo_shop.write_training_looks(data, 24, 0, 7, 12, 99)  # 12 composited looks with COCO boxes
    env, log = guarded_env(tmp_path)
    home = tmp_path / "home"
    cfg = tmp_path / "p.yaml"
    cfg.write_text(yaml.safe_dump({"data_dir": "data", "store": {"url": "store"}}))
    out = tmp_path / "trained"
    train = subprocess.run(
        [sys.executable, "-m", "lookbench_pipeline.cli", "detector", "train", "--annotations", str(ann),
         "--images", str(data / "images"), "--out", str(out), "--epochs", "2", "--imgsz", "64", "--batch", "8",
         "--config", str(cfg)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert train.returncode == 0, train.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert (out / "detector.pt").is_file() and 0 <= report["map50"] <= 1

    cfg.write_text(yaml.safe_dump({"data_dir": "data", "store": {"url": "store"},
                                   "detect": {"weights": str(out / "detector.pt"), "conf": 0.01}}))
    run = subprocess.run([sys.executable, "-c", DETECT, str(cfg), str(data / "images")], capture_output=True,
                         text=True, cwd=tmp_path, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    res = json.loads(run.stdout.strip().splitlines()[-1])
    assert res["images"] == 3 and res["info"]["weights_sha256"] == report["weights_sha256"]

    assert outbound_attempts(log) == ["('192.0.2.1', 9)"]  # only the guard's own self-test
    # ultralytics kept its settings and fonts under the pipeline's data folder, not in the home directory
    assert not (home / ".config" / "Ultralytics").exists()
    settings = tmp_path / "data" / "detector" / "ultralytics" / "Ultralytics"
    assert (settings / "Arial.ttf").is_file() and (settings / "Arial.Unicode.ttf").is_file()
    assert json.loads((settings / "settings.json").read_text())["sync"] is False
