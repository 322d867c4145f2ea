"""Bad configuration and bad input give clear errors, never a silent fallback or a raw traceback."""

import struct
import subprocess
import sys
import zlib
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from lookbench_pipeline.config import DEMO_SITE, ConfigError, load_config
from lookbench_pipeline.images import ImageRejected, Reject, decode
from lookbench_pipeline.windows import version_for, window_containing, window_starting

ROOT = Path(__file__).resolve().parents[1]


def _cfg(tmp_path, data) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return p


@pytest.mark.parametrize("data,match", [
    ({"images": {"bogus": 2}}, "bogus"),
    ({"sites": "configs/x.yaml"}, "must be a list"),
    ({"drops": [{"name": "d", "path": "."}]}, "subfolders"),
    ({"drops": [{"name": "d", "path": ".", "subfolders": {"x": "real_studio_flat"}}]}, "subset"),
    ({"drops": [{"name": "d", "subfolders": {"x": "real_studio_flat:gallery"}}]}, "no 'path'"),
    ({"drops": [{"name": "d", "path": "nowhere", "subfolders": {"x": "real_studio_flat:gallery"}}]}, "not a folder"),
    ({"store": "/tmp/x"}, "store"),
    ("- a list", "mapping"),
    ("{not: yaml", "YAML"),
    ("1: a\n", "top-level key 1 is not a setting name"),
    ("images:\n  max_bytes: !!int many\n", r"(?s)'many' cannot be read as int.*line 2, column 14"),
    ("evaluate:\n  cutoff: !!timestamp soon\n", r"(?s)'soon' cannot be read as timestamp.*line 2"),
])
def test_bad_configs_are_named(tmp_path, data, match):
    with pytest.raises(ConfigError, match=match):
        load_config(_cfg(tmp_path, data))


def test_an_impossible_unquoted_date_is_a_configuration_error_at_its_line(tmp_path):
    """YAML reads an unquoted 2026-02-30 as a date and fails inside the parser: the error names the file, the line
    and the column (exit 2 from the CLI), not a bare "day is out of range for month"; a real date still loads."""
    with pytest.raises(ConfigError, match=r"(?s)c\.yaml: not valid YAML: '2026-02-30' is not a date.*c\.yaml\", line 2, column 11"):
        load_config(_cfg(tmp_path, "evaluate:\n  cutoff: 2026-02-30\n"))
    (tmp_path / "s.yaml").write_text("name: s\nfirst_seen: 2026-13-01\n")
    with pytest.raises(ConfigError, match=r"(?s)s\.yaml: not valid YAML: '2026-13-01' is not a date.*line 2"):
        load_config(_cfg(tmp_path, {"sites": ["s.yaml"]}))
    cfg = load_config(_cfg(tmp_path, "evaluate:\n  cutoff: 2026-02-28\n  model_cutoffs: {m: 2025-06-01}\n"))
    assert (cfg.evaluate.cutoff, cfg.evaluate.model_cutoffs) == ("2026-02-28", {"m": "2025-06-01"})
    (tmp_path / "u.yaml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="u.yaml: not UTF-8"):
        load_config(tmp_path / "u.yaml")
    proc = subprocess.run([sys.executable, "-m", "lookbench_pipeline.cli", "evaluate", "--config",
                           str(_cfg(tmp_path, "evaluate:\n  cutoff: 2026-02-30\n")), "--release", "latest"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2 and "line 2, column 11" in proc.stderr and "Traceback" not in proc.stderr


def test_timezone_drop_sheet_and_drop_only_builds_are_checked_at_load(tmp_path):
    with pytest.raises(ConfigError, match="timezone 'Mars/Olympus' is not an IANA time zone"):
        load_config(_cfg(tmp_path, {"timezone": "Mars/Olympus"}))
    assert load_config(_cfg(tmp_path, {"timezone": "Europe/Berlin"})).timezone == "Europe/Berlin"
    (tmp_path / "d/studio").mkdir(parents=True)
    drop = {"name": "d", "path": "d", "subfolders": {"studio": "real_studio_flat:gallery"}, "items_csv": "x.csv"}
    with pytest.raises(ConfigError, match=r"drop 'd': items_csv .*x\.csv is not a file"):
        load_config(_cfg(tmp_path, {"drops": [drop]}))
    (tmp_path / "x.csv").write_text("path,item_id\n")  # relative to the config file, as the drop's path
    assert load_config(_cfg(tmp_path, {"drops": [drop]})).drops[0].items_csv == tmp_path / "x.csv"
    with pytest.raises(ConfigError, match="at least one site is needed"):
        load_config(_cfg(tmp_path, {"sites": [], "drops": [drop]}))


@pytest.mark.parametrize("var,value", [("LOOKBENCH_IMAGES__MIN_SIDE_PX", "abc"), ("LOOKBENCH_SITES", "notjson"),
                                       ("LOOKBENCH_TIMEZONE", "Mars/Olympus")])
def test_environment_override_errors_name_the_variable(tmp_path, monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError, match=f"environment variable {var}='{value}'"):
        load_config(_cfg(tmp_path, {"data_dir": "data"}))
    with pytest.raises(ConfigError, match=f"environment variable {var}="):
        load_config(None)


def test_bad_site_files_fail_at_load(tmp_path):
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"name": "s", "bogus": 1}))
    with pytest.raises(ConfigError, match="bogus"):
        load_config(_cfg(tmp_path, {"sites": ["s.yaml"]}))
    (tmp_path / "r.yaml").write_text(yaml.safe_dump({"name": "r", "kind": "replay", "pages_dir": "missing",
                                                     "sitemap_urls": ["{{BASE}}/sitemap.xml"]}))
    with pytest.raises(ConfigError, match=r"c\.yaml: replay site 'r': pages_dir .*missing is not a folder$"):
        load_config(_cfg(tmp_path, {"sites": ["r.yaml"]}))


def test_store_defaults_under_data_dir(tmp_path):
    cfg = load_config(_cfg(tmp_path, {"data_dir": "somewhere"}))
    assert Path(cfg.store_url) == tmp_path / "somewhere" / "store"


def test_item_sheet_is_validated(tmp_path):
    from lookbench_pipeline.drops import scan

    (tmp_path / "d/studio").mkdir(parents=True)
    (tmp_path / "d/studio/a.jpg").write_bytes(b"x")
    (tmp_path / "d/studio/notes.txt").write_text("not an image")
    base = {"name": "d", "path": "d", "subfolders": {"studio": "real_studio_flat:gallery"}}
    for rows, match in (("path,item_id,role\nstudio/a.jpg,i,probe\n", "role"),
                        ("path,item_id\nstudio/missing.jpg,i\n", "does not exist")):
        (tmp_path / "d/items.csv").write_text(rows)
        cfg = load_config(_cfg(tmp_path, {"drops": [base]}))
        with pytest.raises(ConfigError, match=match):
            scan(cfg.drops[0], tmp_path / "state", datetime.now(timezone.utc))
    (tmp_path / "d/items.csv").write_text("path,item_id\nstudio/a.jpg,i\n")
    t = scan(load_config(_cfg(tmp_path, {"drops": [base]})).drops[0], tmp_path / "state", datetime.now(timezone.utc))
    assert sorted(Path(p).name for p in t["path"].to_pylist()) == ["a.jpg", "notes.txt"], "no file is skipped"


def test_versions_of_adjacent_windows_never_collide():
    jan1 = datetime(2027, 1, 1, 0, 30, tzinfo=timezone.utc)
    closed = window_starting("2026-07-01")
    open_ = window_containing(jan1)
    assert version_for(closed, jan1) == "v20261231"
    assert version_for(open_, jan1) == "v20270101"
    with pytest.raises(ValueError, match="1 January or 1 July"):
        window_starting("2026-03-05")


def test_huge_png_header_is_a_decompression_bomb():
    ihdr = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0)
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))  # noqa: E731
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 10)) + chunk(b"IEND", b"")
    with pytest.raises(ImageRejected) as e:
        decode(png)
    assert e.value.reason == Reject.DECOMPRESSION_BOMB


def test_empty_release_is_not_published(tmp_path):
    from lookbench_pipeline import schemas
    from lookbench_pipeline.releases import ReleaseTables
    from lookbench_pipeline.releases.publish import EmptyReleaseError, publish
    from lookbench_pipeline.store import LocalStore
    from lookbench_pipeline.windows import Window

    w = Window(datetime(2026, 1, 1, tzinfo=timezone.utc), datetime(2026, 7, 1, tzinfo=timezone.utc))
    rel = ReleaseTables("v20260630", w, {("real_studio_flat", "gallery"): schemas.empty(schemas.RELEASE)},
                        counts={"rejected_by_reason": {"outside_window": 3}})
    store = LocalStore(tmp_path)
    with pytest.raises(EmptyReleaseError, match="outside_window"):
        publish(rel, store, {})
    assert not list(store.list("releases/"))


@pytest.mark.parametrize("args,match,code", [
    (["info", "v19990101"], "no store at", 1),  # the configured store was never made: a reader does not make it
    (["evaluate", "--release", "v20990101"], "no store at", 1),
    (["evaluate", "--release", "vNOPE"], "not a release version (vYYYYMMDD) or latest", 2),  # a bad option value
    (["build", "--partition", "2026-03-05"], "1 January or 1 July", 2),  # a bad option value: a usage error
    (["build", "--partition", "2026-13-01"], "'2026-13-01' is not a date YYYY-MM-DD", 2),
    (["backfill", "--partition", "2024-07-01"], "the first release window starts on 2025-01-01", 2),
    (["detector", "train", "--annotations", "pyproject.toml", "--images", "nowhere", "--out", "o"],
     "argument --images: nowhere: no such folder", 2),
    (["detector", "train", "--annotations", "a.json", "--images", ".", "--out", "o"],
     "argument --annotations: a.json: no such file or folder", 2),
    (["detector", "train", "--annotations", "pyproject.toml", "--images", ".", "--out", "o", "--classes", "nope.yaml"],
     "argument --classes: nope.yaml: no such file", 2),
    (["detector", "train", "--annotations", "pyproject.toml", "--images", ".", "--out", "o", "--epochs", "0"],
     "argument --epochs: must be an integer >= 1, got 0", 2),
    (["evaluate", "--release", "v1", "--cutoff", "notadate"], "YYYY-MM-DD", 2),  # a usage error: exit code 2
])
def test_cli_errors_are_one_line(tmp_path, args, match, code):
    cfg = _cfg(tmp_path, {"data_dir": str(tmp_path / "data")})
    proc = subprocess.run([sys.executable, "-m", "lookbench_pipeline.cli", *args, "--config", str(cfg)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == code
    assert match in proc.stderr and "Traceback" not in proc.stderr


def test_build_refuses_a_bad_item_sheet_or_no_site_before_any_run(tmp_path):
    (tmp_path / "d/studio").mkdir(parents=True)
    (tmp_path / "d/studio/a.jpg").write_bytes(b"x")
    (tmp_path / "d/items.csv").write_text("path,item_id\nstudio/a.jpg,i\nstudio/gone.jpg,j\n")
    drop = {"name": "d", "path": "d", "subfolders": {"studio": "real_studio_flat:gallery"}}
    (tmp_path / "d2/studio").mkdir(parents=True)
    fine = {"name": "d2", "path": "d2", "subfolders": {"studio": "real_studio_flat:gallery"}}
    for data, match in (({"drops": [drop], "sites": [str(DEMO_SITE)]}, "items.csv:3: studio/gone.jpg does not exist"),
                        ({"sites": []}, "at least one site is needed"),
                        # a file without `sites` never crawls the embedded demo shop, with or without drops
                        ({"drops": [fine]}, "sites: missing: name the site files to crawl"),
                        ({}, "sites: missing: name the site files to crawl")):
        cfg = _cfg(tmp_path, {"data_dir": str(tmp_path / "data"), **data})
        proc = subprocess.run([sys.executable, "-m", "lookbench_pipeline.cli", "build", "--config", str(cfg)],
                              capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert "configuration error:" in proc.stderr and match in proc.stderr and "Traceback" not in proc.stderr
        assert not (tmp_path / "data").exists(), "nothing ran"
