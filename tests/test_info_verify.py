"""What ``info`` says of a release's files, and what a refused read leaves behind (second audit of 2026-12-06):
``info`` on a pulled folder compares each file's size with the manifest and ``--verify`` each sha256 (a tampered
copy passed while the line under it said every file was checked); ``pull`` refuses a link in a folder store before
it writes anything; a reader never creates a store folder; ``lates`` is answered with ``latest``; ``audit export``
names a file that is not Parquet and refuses ``--per-stratum`` below 1."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
from consumer_release import V, folder, store  # noqa: F401 (fixtures)

from lookbench_pipeline.cli import main
from lookbench_pipeline.store import LocalStore

QUERY = "real_studio_flat/query.parquet"


def test_info_checks_a_pulled_folders_files_and_verify_checks_each_sha256(folder, store, tmp_path, capsys):
    assert main(["info", str(folder)]) == 0
    out, err = capsys.readouterr()
    assert "files checked against the manifest (size; --verify" in err and "manifest sha256:" in out
    assert main(["info", str(folder), "--verify"]) == 0
    assert "files checked against the manifest (sha256 and size)" in capsys.readouterr().err
    assert main(["info", V, "--store", str(store.root), "--verify"]) == 0  # a store's files, streamed
    capsys.readouterr()

    grown, same_size = tmp_path / "grown", tmp_path / "same"
    shutil.copytree(folder, grown)
    shutil.copytree(folder, same_size)
    with open(grown / QUERY, "ab") as fh:
        fh.write(b"x")
    data = bytearray((same_size / "docs" / "schema.json").read_bytes())
    data[10] ^= 1
    (same_size / "docs" / "schema.json").write_bytes(bytes(data))

    assert main(["info", str(grown)]) == 1
    err = capsys.readouterr().err
    assert f"{V}/{QUERY}:" in err and "the manifest says" in err and "pull it again" in err
    assert main(["info", str(same_size)]) == 0, "the same size: only --verify can tell"
    capsys.readouterr()
    assert main(["info", str(same_size), "--verify"]) == 1
    assert f"{V}/docs/schema.json: sha256" in capsys.readouterr().err
    assert main(["info", str(grown), "--json"]) == 1  # the JSON on stdout stays JSON
    out, err = capsys.readouterr()
    assert json.loads(out)["version"] == V and QUERY in err


def test_pull_refuses_a_link_in_a_folder_store_before_writing_anything(store, tmp_path, capsys):
    victim = tmp_path / "elsewhere.parquet"
    target = store.root / "releases" / V / "real_streetlook" / "gallery.parquet"
    shutil.copy(target, victim)
    target.unlink()
    target.symlink_to(victim)
    dest = tmp_path / "d"
    assert main(["pull", V, "--store", str(store.root), "--dest", str(dest), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "is a symbolic link" in err and "nothing written" in err
    assert not dest.exists() or not any(p.is_file() for p in dest.rglob("*")), list(dest.rglob("*"))
    assert main(["info", V, "--store", str(store.root), "--verify"]) == 1
    assert "is a symbolic link" in capsys.readouterr().err


def test_a_reader_never_creates_a_store_and_a_near_latest_is_answered(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOOKBENCH_CONFIG", raising=False)
    assert main(["info", "latest"]) == 1  # no such store: an error, like a release that is not published
    assert "no store at" in capsys.readouterr().err
    assert not (tmp_path / "data").exists(), "info created ./data/store"
    LocalStore(tmp_path / "s")
    assert main(["info", "lates", "--store", str(tmp_path / "s")]) == 2  # a usage error, with the near name
    assert "did you mean latest?" in capsys.readouterr().err


def test_audit_export_names_a_file_that_is_not_parquet_and_refuses_a_per_stratum_below_one(store, tmp_path, capsys):
    path = store.path(f"releases/{V}/{QUERY}")
    path.write_bytes(b"not parquet")
    mkey = f"releases/{V}/manifest.json"
    m = json.loads(store.get_bytes(mkey))
    m["files"][QUERY].update(sha256=hashlib.sha256(path.read_bytes()).hexdigest(), bytes=path.stat().st_size)
    store.put_bytes(mkey, json.dumps(m).encode())
    assert main(["audit", "export", V, "--store", str(store.root), "--out", str(tmp_path / "a")]) == 1
    assert f"{V}/{QUERY}: not a readable Parquet file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["audit", "export", V, "--store", str(store.root), "--out", str(tmp_path / "a"), "--per-stratum", "-1"])
    assert exc.value.code == 2 and "must be an integer >= 1" in capsys.readouterr().err
