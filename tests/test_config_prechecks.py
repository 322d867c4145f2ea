"""Settings that would fail a run half-way, or lose data silently, are refused when the configuration loads (exit
2, naming the field): names that key rows (drops, legacy sources, annotation files), subfolder keys that are not a
folder inside the drop, a weights file or a legacy benchmark that does not exist. A drop entry that is no regular
file (a FIFO, a socket) is one ``drop_items`` row, rejected ``not_a_regular_file`` and never opened."""

import os
import socket
import subprocess
import sys
import threading
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from lookbench_pipeline.config import ConfigError, load_config
from tiny_inputs import solid_jpeg

ROOT = Path(__file__).resolve().parents[1]
NOW = datetime(2026, 8, 1, tzinfo=timezone.utc)


def _cfg(tmp_path, data) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


@pytest.fixture()
def folders(tmp_path):
    for sub in ("A/studio", "B/street", "A/studio/inner"):
        (tmp_path / sub).mkdir(parents=True, exist_ok=True)
    return tmp_path


def _drop(name, path, subfolders, **more):
    return {"name": name, "path": path, "subfolders": subfolders, **more}


def test_two_drops_with_one_name_are_refused_naming_the_field(folders):
    cfg = _cfg(folders, {"drops": [_drop("d", "A", {"studio": "real_studio_flat:gallery"}),
                                   _drop("d", "B", {"street": "real_streetlook:query"})]})
    with pytest.raises(ConfigError, match=r"c\.yaml: drops: drops\[0\] and drops\[1\] are both named "
                                          r"'d'"):
        load_config(cfg)
    proc = subprocess.run([sys.executable, "-m", "lookbench_pipeline.cli", "build", "--config", str(cfg)],
                          cwd=folders, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "crawlers")])})
    assert proc.returncode == 2 and "configuration error:" in proc.stderr, proc.stderr
    assert "drops: drops[0] and drops[1] are both named 'd'" in proc.stderr, proc.stderr
    assert not (folders / "data").exists(), "no run, no log file"


@pytest.mark.parametrize("key,match", [
    ("/work/shared/realdata/images/odd", "a subfolder key is a folder inside the drop folder, relative"),
    ("../outside_pics", "a subfolder key is a folder inside the drop folder, relative, without '..'"),
    ("studio/../../x", "without '..'"),
    (".", "a subfolder key is a folder inside the drop folder"),
    ("", "a subfolder key is a folder inside the drop folder"),
    ("studio/inner", "subfolders 'studio' and 'studio/inner' name the same folder or one inside the other"),
])
def test_a_subfolder_key_is_a_relative_folder_inside_the_drop(folders, key, match):
    (folders / "outside_pics").mkdir()
    cfg = _cfg(folders, {"drops": [_drop("d", "A", {"studio": "real_studio_flat:gallery",
                                                    key: "real_streetlook:query"})]})
    with pytest.raises(ConfigError, match=r"drops\[0\]\.subfolders: .*" + match.replace("(", r"\(")):
        load_config(cfg)


def test_annotation_files_and_legacy_sources_are_named_once(folders):
    (folders / "vt.txt").write_text("")
    ann = {"kind": "vitonhd", "path": "vt.txt", "image_name": "studio/{file_name}"}
    cfg = _cfg(folders, {"drops": [_drop("d", "A", {"studio": "real_studio_flat:gallery"},
                                         annotations=[ann, dict(ann)])]})
    with pytest.raises(ConfigError, match=r"drops\[0\]\.annotations: annotations\[1\] repeats "
                                          r"annotations\[0\] \(vitonhd "):
        load_config(cfg)
    load_config(_cfg(folders, {"drops": [_drop("d", "A", {"studio": "real_studio_flat:gallery"},
                                               annotations=[ann, dict(ann, view="image")])]}))  # two views: two
    load_config(_cfg(folders, {"drops": [_drop("d", "A", {"studio": "real_studio_flat:gallery"}, annotations=[
        ann, dict(ann, image_name="studio/x_{file_name}")])]}))  # other photos of one file
    (folders / "f200k").mkdir()
    src = {"name": "f", "kind": "fashion200k", "path": str(folders / "f200k")}
    for section, key in (("contamination", "sources"), ("negatives", "sources"), ("evaluate", "legacy")):
        with pytest.raises(ConfigError, match=rf"{section}\.{key}: two sources are named 'f'"):
            load_config(_cfg(folders, {section: {key: [src, dict(src)]}}))
        assert [s.name for s in getattr(load_config(_cfg(folders, {section: {key: [src]}})), section).__dict__[key]] \
            == ["f"]


def test_a_legacy_benchmark_that_is_not_there_is_refused_unless_it_is_a_demo_tree(folders):
    for section, key in (("contamination", "sources"), ("negatives", "sources"), ("evaluate", "legacy")):
        cfg = _cfg(folders, {section: {key: [{"name": "f", "kind": "fashion200k", "path": "/nonexistent"}]}})
        with pytest.raises(ConfigError, match=rf"{section}\.{key}\[0\] \('f'\): path /nonexistent does not exist"):
            load_config(cfg)
        # a demo tree is generated by its stage when missing
        cfg = _cfg(folders, {section: {key: [{"name": "f", "kind": "fashion200k", "path": "/nonexistent",
                                              "demo": True}]}})
        load_config(cfg)
    # a relative path is under the config file's folder, and is named in full
    cfg = _cfg(folders, {"contamination": {"sources": [{"name": "f", "kind": "folder", "path": "legacy/mine"}]}})
    with pytest.raises(ConfigError, match=rf"path {folders}/legacy/mine does not exist"):
        load_config(cfg)
    (folders / "legacy" / "mine").mkdir(parents=True)
    load_config(cfg)


def test_a_weights_file_that_does_not_exist_is_refused_an_id_or_built_in_is_kept(folders, monkeypatch):
    with pytest.raises(ConfigError, match=r"detect\.weights: '/nonexistent\.pt': no such file"):
        load_config(_cfg(folders, {"detect": {"weights": "/nonexistent.pt"}}))
    # relative to the config file, named in full
    with pytest.raises(ConfigError, match=rf"detect\.weights: '{folders}/models/best\.pt': no "
                                          r"such file"):
        load_config(_cfg(folders, {"detect": {"weights": "models/best.pt"}}))
    with pytest.raises(ConfigError, match=r"detect\.weights: .* is a folder, not a weights file"):
        load_config(_cfg(folders, {"detect": {"weights": str(folders / "A")}}))
    with pytest.raises(ConfigError, match=r"detect\.weights: '.*/no-owner': no such file"):
        load_config(_cfg(folders, {"detect": {"weights": "no-owner"}}))
    for ok in ("demo", "person-regions", "someone/deepfashion2-yolo"):
        assert load_config(_cfg(folders, {"detect": {"weights": ok}})).detect.weights == ok
    (folders / "models").mkdir()
    (folders / "models" / "best.pt").write_bytes(b"x")
    assert load_config(_cfg(folders, {"detect": {"weights": "models/best.pt"}})).detect.weights == \
        str(folders / "models" / "best.pt")
    load_config(_cfg(folders, {"detect": {"enabled": False, "weights": "/nonexistent.pt"}}))  # not used
    monkeypatch.setenv("LOOKBENCH_DETECT__WEIGHTS", "/nonexistent.pt")
    with pytest.raises(ConfigError, match=r"environment variable LOOKBENCH_DETECT__WEIGHTS='/nonexistent\.pt'"):
        load_config(_cfg(folders, {}))


def _not_blocking(fn, timeout=60):
    """Run ``fn`` in a thread: a FIFO opened for reading would block it forever."""
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("v", fn()), daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "blocked (a FIFO was opened)"
    return out["v"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_or_socket_in_a_drop_is_one_row_rejected_never_opened(tmp_path):
    from lookbench_pipeline import schemas
    from lookbench_pipeline.drops import scan
    from lookbench_pipeline.pipeline import stage_images
    from lookbench_pipeline.store import LocalStore

    (tmp_path / "d" / "studio").mkdir(parents=True)
    (tmp_path / "d/studio/a.jpg").write_bytes(solid_jpeg())
    os.mkfifo(tmp_path / "d/studio/fifo.jpg")
    os.symlink("fifo.jpg", tmp_path / "d/studio/to_fifo.jpg")
    sock = socket.socket(socket.AF_UNIX)
    short = Path(os.path.relpath(tmp_path / "d/studio/sock.jpg"))  # AF_UNIX paths are short
    try:
        sock.bind(str(short) if len(str(short)) < 100 else str(tmp_path / "d/studio/sock.jpg"))
        cfg = load_config(_cfg(tmp_path, {"data_dir": str(tmp_path / "data"), "drops": [
            _drop("d", "d", {"studio": "real_studio_flat:gallery"})]}))
        items = _not_blocking(lambda: scan(cfg.drops[0], tmp_path / "state", NOW))
        names = sorted(Path(p).name for p in items["path"].to_pylist())
        assert names == ["a.jpg", "fifo.jpg", "sock.jpg", "to_fifo.jpg"], "every entry is a row"
        refs, _, counts = _not_blocking(lambda: stage_images(
            cfg, schemas.empty(schemas.PRODUCTS), schemas.empty(schemas.LOOKS), items,
            schemas.empty(schemas.IMAGE_DOWNLOADS), LocalStore(tmp_path / "store")))
    finally:
        sock.close()
    reason = {Path(r["source"]).name: r["reason"] for r in refs.to_pylist()}
    assert reason == {"a.jpg": None, "fifo.jpg": "not_a_regular_file", "sock.jpg": "not_a_regular_file",
                      "to_fifo.jpg": "not_a_regular_file"}
    assert counts["in"] == 4 == counts["accepted"] + counts["rejected"]
    assert counts["rejected.not_a_regular_file"] == 3


def test_a_sheet_row_naming_a_folder_says_it_is_a_folder(tmp_path):
    from lookbench_pipeline.drops import item_sheet

    (tmp_path / "d" / "studio" / "sub").mkdir(parents=True)
    (tmp_path / "d/items.csv").write_text("path,item_id\nstudio/sub,it1\n")
    cfg = load_config(_cfg(tmp_path, {"drops": [_drop("d", "d", {"studio": "real_studio_flat:gallery"})]}))
    with pytest.raises(ConfigError, match=r"items\.csv:2: studio/sub is a folder under .*, not a file"):
        item_sheet(cfg.drops[0])


@pytest.mark.parametrize("name", ["../../outside", "a/b", "..", ".", "  ", "x\\y"])
def test_a_drop_or_site_name_is_one_file_name(folders, name):
    """A drop's name makes ``state/drops/<name>.parquet``, a site's ``state/<site>/``: a name with a path in it
    would write outside the data folder."""
    with pytest.raises(ConfigError, match=r"drops\[0\]\.name: .* is not a name"):
        load_config(_cfg(folders, {"drops": [_drop(name, "A", {"studio": "real_studio_flat:gallery"})]}))
    (folders / "pages").mkdir(exist_ok=True)
    (folders / "shop.yaml").write_text(yaml.safe_dump({"name": name, "kind": "replay", "pages_dir": "pages"}))
    with pytest.raises(ConfigError, match=r"shop\.yaml: name: .* is not a name"):
        load_config(_cfg(folders, {"sites": ["shop.yaml"]}))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_an_item_sheet_that_is_no_regular_file_is_refused_not_ignored(tmp_path):
    """``items.csv`` in a drop folder that is a FIFO (or a folder) was taken for no sheet: the build ran without
    the drop's items. It is a configuration error, and the FIFO is never opened."""
    from lookbench_pipeline.drops import item_sheet

    (tmp_path / "d" / "studio").mkdir(parents=True)
    os.mkfifo(tmp_path / "d/items.csv")
    cfg = load_config(_cfg(tmp_path, {"data_dir": str(tmp_path / "data"), "drops": [
        _drop("d", "d", {"studio": "real_studio_flat:gallery"})]}))

    def attempt():
        try:
            return item_sheet(cfg.drops[0])
        except ConfigError as exc:
            return exc

    refused = _not_blocking(attempt)
    assert isinstance(refused, ConfigError) and "items.csv is there but is not a regular file" in str(refused)
    os.unlink(tmp_path / "d/items.csv")
    (tmp_path / "d/items.csv").mkdir()
    with pytest.raises(ConfigError, match="not a regular file"):
        item_sheet(cfg.drops[0])
