"""The consumers' command line through main(): `lookbench releases`, `info`, `pull` (sha256-verified, with a
progress bar, `--subset`, `--look-bench`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from release_factory import make_release

from lookbench_pipeline.cli import main
from lookbench_pipeline.config import load_config
from lookbench_pipeline.pipeline import store_of
from lookbench_pipeline.releases import docs as release_docs
from lookbench_pipeline.releases.publish import publish

V1, V2 = "v20260301", "v20260701"
DOCS = {"README.md", "croissant.json", "CHANGES.md", "changes.parquet", *release_docs.PATHS}


@pytest.fixture
def cfg(tmp_path) -> str:
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump({"data_dir": "data", "store": {"url": "store"}}))
    return str(path)


def _files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_releases_info_and_pull(cfg, tmp_path, capsys):
    # a reader never creates the store: a configured store that does not exist yet is said to be missing (a
    # mistyped path is not "no releases")
    assert main(["releases", "--config", cfg]) == 1
    assert "no store at" in capsys.readouterr().err and not (tmp_path / "store").exists()
    store = store_of(load_config(cfg))
    assert main(["releases", "--config", cfg]) == 0
    assert "no releases" in capsys.readouterr().out
    publish(make_release(V1, range(0, 6)), store, {"code_version": "t"})
    publish(make_release(V2, range(3, 9)), store, {"code_version": "t"})

    assert main(["releases", "--config", cfg]) == 0
    assert capsys.readouterr().out.split() == [V1, V2]

    assert main(["info", V2, "--config", cfg]) == 0
    text = capsys.readouterr().out
    assert V2 in text and "real_studio_flat" in text and "sha256" in text and "{" not in text
    assert main(["info", "latest", "--json", "--config", cfg]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["version"] == V2 and info["changes"]["previous_version"] == V1
    assert set(info["metadata_files"]) == DOCS and "real_studio_flat/query.parquet" in info["files"]

    dest = tmp_path / "pulled"
    assert main(["pull", V2, "--subset", "real_studio_flat", "--dest", str(dest), "--config", cfg]) == 0
    out, err = capsys.readouterr()
    assert f"pull {V2}" in err and "100%" in err  # tqdm's bar on stderr
    assert "verified" in out
    folder = dest / V2
    # with pull's own lock file and its record of the subsets pulled (hidden, left out of the folder's listings)
    assert _files(folder) == {"real_studio_flat/query.parquet", "real_studio_flat/gallery.parquet",
                              "manifest.json", ".pull.lock", ".pulled.json"} | DOCS
    assert (folder / "manifest.json").read_bytes() == store.get_bytes(f"releases/{V2}/manifest.json")

    # the whole release, with the link look-bench's loader needs; files already in place are kept
    assert main(["pull", V2, "--dest", str(dest), "--quiet", "--look-bench", "--config", cfg]) == 0
    assert "real_streetlook/query.parquet" in _files(folder)
    link = dest / "srpone" / "look-bench"
    assert link.is_symlink() and (link / "README.md").read_bytes() == (folder / "README.md").read_bytes()


def test_pull_errors(cfg, tmp_path, capsys):
    store = store_of(load_config(cfg))
    publish(make_release(V1, range(0, 4)), store, {})
    assert main(["info", "v20990101", "--config", cfg]) == 1
    assert "not published" in capsys.readouterr().err
    # an unknown subset is a bad option value (exit 2, README's exit codes), told before anything is written
    assert main(["pull", V1, "--subset", "nope", "--dest", str(tmp_path / "a"), "--config", cfg]) == 2
    assert "no subset 'nope'; its subsets: real_streetlook, real_studio_flat" in capsys.readouterr().err
    assert not (tmp_path / "a").exists()
    assert main(["pull", V1, "--subset", "real_stdio_flat", "--dest", str(tmp_path / "a"), "--config", cfg]) == 2
    assert "did you mean real_studio_flat?" in capsys.readouterr().err
    store.put_bytes(f"releases/{V1}/real_studio_flat/gallery.parquet", b"corrupt")
    assert main(["pull", V1, "--dest", str(tmp_path / "b"), "--quiet", "--config", cfg]) == 1
    assert "do not match the manifest" in capsys.readouterr().err
    assert not (tmp_path / "b" / V1 / "real_studio_flat" / "gallery.parquet").exists()
    assert not (tmp_path / "b" / V1 / "manifest.json").exists()
