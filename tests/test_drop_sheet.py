"""An image drop's item sheet and files: nothing is lost silently. A sheet row that would describe no file of the
drop, or contradict another row, is refused before any run (exit 2, naming the sheet, line and path); a symbolic
link that leads out of the drop folder is a recorded rejection (``link_outside_drop``), never read."""

import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from lookbench_pipeline import schemas
from lookbench_pipeline.config import ConfigError, load_config
from lookbench_pipeline.drops import item_sheet, scan
from tiny_inputs import solid_jpeg

ROOT = Path(__file__).resolve().parents[1]
NOW = datetime(2026, 8, 1, tzinfo=timezone.utc)


@pytest.fixture()
def drop(tmp_path):
    """A drop ``d`` (``studio`` → real_studio_flat:gallery, ``street`` → real_streetlook:query, an unmapped
    ``other``) and a file beside it, ``items.orig``; returns ``write(sheet) -> DropConfig``."""
    for sub in ("studio", "street", "other"):
        (tmp_path / "d" / sub).mkdir(parents=True)
    (tmp_path / "d/studio/a.jpg").write_bytes(solid_jpeg())
    (tmp_path / "d/street/q.jpg").write_bytes(solid_jpeg("blue"))
    (tmp_path / "d/other/x.jpg").write_bytes(solid_jpeg("green"))
    (tmp_path / "d/items.orig").write_text("path,item_id\n")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"drops": [{
        "name": "d", "path": "d",
        "subfolders": {"studio": "real_studio_flat:gallery", "street": "real_streetlook:query"}}]}))

    def write(sheet: str):
        (tmp_path / "d/items.csv").write_text(sheet, encoding="utf-8", newline="")
        return load_config(tmp_path / "c.yaml").drops[0]
    return write


def test_rows_that_give_one_file_two_items_are_refused_naming_both_lines(drop):
    d = drop("path,item_id,role\nstudio/a.jpg,it1,gallery\nstreet/q.jpg,it1,query\nstudio/a.jpg,it2,gallery\n")
    with pytest.raises(ConfigError, match=r"items\.csv:4: studio/a\.jpg is already on line 2 with other item_id "
                                          r"\(item_id: 'it1' there, 'it2' here\)"):
        item_sheet(d)
    d = drop("path,item_id,category\nstudio/a.jpg,it1,dress\n./studio//a.jpg,it1,skirt\n")  # the same file
    with pytest.raises(ConfigError, match=r"items\.csv:3: studio/a\.jpg is already on line 2 with other category"):
        item_sheet(d)


def test_a_repeated_identical_row_is_one_row(drop):
    d = drop("path,item_id,role\nstudio/a.jpg,it1,gallery\nstreet/q.jpg,it1,query\nstudio/a.jpg, it1 ,gallery\n")
    assert sorted(item_sheet(d)) == ["street/q.jpg", "studio/a.jpg"]
    rows = {Path(r["path"]).name: r for r in scan(d, d.path.parent / "state", NOW).to_pylist()}
    assert rows["a.jpg"]["item_id"] == rows["q.jpg"]["item_id"] == "it1", "the query keeps its positive"


@pytest.mark.parametrize("path,match", [
    ("../items.orig", r"items\.csv:3: path '\.\./items\.orig' leaves the drop folder"),
    ("/etc/passwd", r"items\.csv:3: path '/etc/passwd' leaves the drop folder"),
    ("studio/../../items.orig", r"items\.csv:3: path 'studio/\.\./\.\./items\.orig' leaves the drop folder"),
    ("other/x.jpg", r"items\.csv:3: path 'other/x\.jpg' is in none of the drop's subfolders"),
    ("items.orig", r"items\.csv:3: path 'items\.orig' is in none of the drop's subfolders"),
])
def test_a_row_whose_path_leaves_the_drop_or_its_subfolders_is_refused(drop, path, match):
    d = drop(f"path,item_id\nstudio/a.jpg,it1\n{path},it2\n")
    with pytest.raises(ConfigError, match=match):
        item_sheet(d)


def test_a_row_naming_a_link_out_of_the_drop_is_refused(drop, tmp_path):
    (tmp_path / "elsewhere.jpg").write_bytes(solid_jpeg("white"))
    os.symlink(tmp_path / "elsewhere.jpg", tmp_path / "d/studio/linked.jpg")
    d = drop("path,item_id\nstudio/linked.jpg,it1\n")
    with pytest.raises(ConfigError, match=r"items\.csv:2: path 'studio/linked\.jpg' leads out of the drop folder "
                                          r".* through a symbolic link \(to .*elsewhere\.jpg\)"):
        item_sheet(d)


def test_build_refuses_a_conflicting_or_escaping_sheet_row_before_any_run(drop, tmp_path):
    cfg = tmp_path / "build.yaml"
    data = yaml.safe_load((tmp_path / "c.yaml").read_text())
    cfg.write_text(yaml.safe_dump({**data, "data_dir": str(tmp_path / "data"),  # a build names its sites
                                   "sites": [str(ROOT / "lookbench_pipeline/data/sites/demo.yaml")]}))
    for sheet, match in (("path,item_id\nstudio/a.jpg,it1\nstudio/a.jpg,it2\n",
                          "items.csv:3: studio/a.jpg is already on line 2"),
                         ("path,item_id\nstudio/a.jpg,it1\n../items.orig,it2\n",
                          "items.csv:3: path '../items.orig' leaves the drop folder")):
        drop(sheet)
        proc = subprocess.run([sys.executable, "-m", "lookbench_pipeline.cli", "build", "--config", str(cfg)],
                              capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert "configuration error:" in proc.stderr and match in proc.stderr and "Traceback" not in proc.stderr
        assert not (tmp_path / "data").exists(), "nothing ran"


def test_a_quoted_file_name_with_a_line_break_names_its_file(drop, tmp_path):
    (tmp_path / "d/studio/two\nlines.jpg").write_bytes(solid_jpeg("yellow"))
    d = drop('path,item_id,title\n"studio/two\nlines.jpg",it9,"a title\nover two lines"\nstudio/a.jpg,it1,\n'
             "studio/gone.jpg,it2,\n")
    with pytest.raises(ConfigError, match=r"items\.csv:6: studio/gone\.jpg does not exist"):  # lines, not rows
        item_sheet(d)
    d = drop('\ufeffpath,item_id,title\n"studio/two\nlines.jpg",it9,"a title\nover two lines"\nstudio/a.jpg,it1,\n')
    rows = {Path(r["path"]).name: r for r in scan(d, tmp_path / "state", NOW).to_pylist()}
    assert rows["two\nlines.jpg"]["item_id"] == "it9" and rows["two\nlines.jpg"]["title"] == "a title\nover two lines"
    assert rows["a.jpg"]["item_id"] == "it1"


def test_a_link_out_of_the_drop_is_rejected_at_intake_never_read(drop, tmp_path):
    """``passwd.jpg -> /etc/passwd`` and a link to a picture outside the drop: each one a ``drop_items`` row whose
    path is the link in the drop, rejected ``link_outside_drop``; a link inside the drop is read; a dangling link
    is ``file_not_found``. Counts reconcile: in = accepted + rejected."""
    from lookbench_pipeline.pipeline import stage_images
    from lookbench_pipeline.store import LocalStore

    (tmp_path / "outside.jpg").write_bytes(solid_jpeg("white"))
    os.symlink("/etc/passwd", tmp_path / "d/studio/passwd.jpg")
    os.symlink(tmp_path / "outside.jpg", tmp_path / "d/studio/outside.jpg")
    os.symlink("../other", tmp_path / "d/studio/folder")  # a folder link out of the studio, inside the drop
    os.symlink(tmp_path, tmp_path / "d/studio/up")  # a folder link out of the drop
    os.symlink("a.jpg", tmp_path / "d/studio/same.jpg")
    os.symlink("gone.jpg", tmp_path / "d/studio/dangling.jpg")
    d = drop("path,item_id\n")
    items = scan(d, tmp_path / "state", NOW)
    paths = {Path(p).name: p for p in items["path"].to_pylist()}
    assert sorted(paths) == ["a.jpg", "dangling.jpg", "outside.jpg", "passwd.jpg", "q.jpg", "same.jpg", "up"]
    assert paths["passwd.jpg"] == str(d.path.resolve() / "studio/passwd.jpg"), "the link, not its target"
    cfg = load_config(tmp_path / "c.yaml")
    refs, _, counts = stage_images(cfg, schemas.empty(schemas.PRODUCTS), schemas.empty(schemas.LOOKS), items,
                                   schemas.empty(schemas.IMAGE_DOWNLOADS), LocalStore(tmp_path / "store"))
    reason = {Path(r["source"]).name: r["reason"] for r in refs.to_pylist()}
    assert reason == {"a.jpg": None, "q.jpg": None, "same.jpg": None, "dangling.jpg": "file_not_found",
                      "outside.jpg": "link_outside_drop", "passwd.jpg": "link_outside_drop",
                      "up": "link_outside_drop"}
    assert counts["in"] == 7 == counts["accepted"] + counts["rejected"] and counts["rejected.link_outside_drop"] == 3
    assert all(r["image_sha256"] is None for r in refs.to_pylist() if r["reason"]), "never read"


def test_a_row_with_more_cells_than_the_header_is_refused_a_shorter_one_is_blank(drop):
    d = drop("path,item_id,title\nstudio/a.jpg,it1,Red, wide dress\n")
    with pytest.raises(ConfigError, match=r"items\.csv:2: 4 cells but the header names 3 columns"):
        item_sheet(d)
    d = drop("path,item_id,title\nstudio/a.jpg,it1,\nstudio/a.jpg,it1\nstreet/q.jpg,it1,,\n")
    assert item_sheet(d)["studio/a.jpg"]["title"] == "" and len(item_sheet(d)) == 2
