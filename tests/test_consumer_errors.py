"""The consumer commands' errors and exit codes, each test building its hostile or mistaken input itself: a
manifest that lies, a destination that is a link or a file, a mistyped store, version, subset, model, field or
environment variable, a cutoff that leaves nothing to score, an interrupted pull."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import yaml
from release_factory import make_release

from lookbench_pipeline.demo import serve
from lookbench_pipeline.cli import main
from lookbench_pipeline.config import ConfigError, load_config
from lookbench_pipeline.releases import ReleaseIntegrityError, pull
from lookbench_pipeline.releases.publish import publish
from lookbench_pipeline.safepath import UnsafePathError
from lookbench_pipeline.store import LocalStore

V1, V2 = "v20260301", "v20260701"


def _edit_manifest(store: LocalStore, version: str, edit) -> None:
    key = f"releases/{version}/manifest.json"
    m = json.loads(store.get_bytes(key))
    edit(m)
    store.put_bytes(key, json.dumps(m).encode())


def _files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def test_a_destination_version_folder_that_is_a_link_is_refused(store, tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / V2).symlink_to(outside, target_is_directory=True)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        pull(store, V2, dest, progress=False)
    assert main(["pull", V2, "--store", str(store.root), "--dest", str(dest), "--quiet"]) == 1
    assert "symbolic link" in capsys.readouterr().err
    assert not _files(outside), "nothing was written through the link"


def test_a_link_inside_the_destination_is_blamed_on_the_folder_not_the_manifest(store, tmp_path, capsys):
    """A link a user left in --dest is the folder's problem: the message says the folder holds a link and how to
    mend it, not that the (sound) manifest names a file outside it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    sub = tmp_path / "dest" / V2 / "real_studio_flat"
    sub.mkdir(parents=True)
    (sub / "query.parquet").symlink_to(outside / "q.parquet")
    assert main(["pull", V2, "--store", str(store.root), "--dest", str(tmp_path / "dest"), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "holds a link" in err and "is a symbolic link" in err and "remove it" in err, err
    assert "the manifest names a file outside" not in err, err
    assert not _files(outside), "nothing was written through the link"


def test_a_destination_that_is_a_file_and_a_mistyped_store_are_errors(store, tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    assert main(["pull", V2, "--store", str(store.root), "--dest", str(tmp_path / "afile"), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "exists and is not a folder" in err and "Errno" not in err
    typo = tmp_path / "stroe"
    for args in (["releases"], ["info", "latest"], ["pull", V2, "--dest", str(tmp_path / "d")],
                 ["evaluate", "--release", V2], ["audit", "export", V2, "--out", str(tmp_path / "a")]):
        # a mistyped --store is a bad option value (exit 2), as a missing --images folder is
        assert main([*args, "--store", str(typo)]) == 2, args
        assert f"--store: no store at {typo}: no such folder" in capsys.readouterr().err
    assert not typo.exists(), "a reader never creates the folder it was given"


def test_releases_lists_only_versions_with_a_readable_manifest(store, capsys):
    store.put_bytes("releases/notaversion/manifest.json", store.get_bytes(f"releases/{V1}/manifest.json"))
    store.put_bytes("releases/v20260401/manifest.json", b"\x00garbage")
    assert main(["releases", "--store", str(store.root)]) == 1  # the readable ones listed, the exit status says
    out, err = capsys.readouterr()
    assert out.split() == [V1, V2]
    assert "v20260401 is left out" in err and "not JSON" in err and "notaversion" not in out + err


def test_info_counts_items_per_file_and_reads_a_pulled_folder(store, tmp_path, capsys):
    assert main(["info", V2, "--store", str(store.root)]) == 0
    text = capsys.readouterr().out
    changes = json.loads(store.get_bytes(f"releases/{V2}/manifest.json"))["changes"]
    for f, n in changes["items_added"].items():
        assert f"{f} +{n} -{changes['items_retired'].get(f, 0)}" in text
    assert main(["pull", V2, "--store", str(store.root), "--dest", str(tmp_path / "d"), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["info", str(tmp_path / "d" / V2)]) == 0
    assert text == capsys.readouterr().out, "a pulled folder reads as the store's version"


@pytest.mark.parametrize("edit,match", [
    (lambda m: m["files"]["real_studio_flat/query.parquet"].update(bytes="12"), "not a whole number of bytes"),
    (lambda m: m["files"]["real_studio_flat/query.parquet"].update(bytes=True), "not a whole number of bytes"),
    (lambda m: m["files"]["real_studio_flat/query.parquet"].update(bytes=2 ** 50), "not a whole number of bytes"),
    (lambda m: m["files"]["real_studio_flat/query.parquet"].update(sha256="XYZ"), "not 64 lowercase hex"),
    (lambda m: m["files"].update({"real_studio_flat/query.parquet": ["a"]}), "not an object"),
    (lambda m: m["files"]["real_studio_flat/query.parquet"].update(rows=-1), "rows -1"),
    (lambda m: m.update(version="v20990101"), "names version 'v20990101', not v20260701"),
    (lambda m: m.pop("version"), "names version None"),
    (lambda m: m["metadata_files"].update({"real_studio_flat/query.parquet": m["files"]["real_studio_flat/query.parquet"]}),
     "both as a data file and as a metadata file"),
])
def test_info_and_pull_refuse_a_hostile_manifest_entry_with_one_line(store, tmp_path, capsys, edit, match):
    _edit_manifest(store, V2, edit)
    for args in (["info", V2], ["pull", V2, "--dest", str(tmp_path / "d"), "--quiet"],
                 ["evaluate", "--release", V2, "--model", "baseline/hsv-hog-v1", "--quiet",
                  "--cache", str(tmp_path / "c")]):
        assert main([*args, "--store", str(store.root)]) == 1
        err = capsys.readouterr().err
        assert match in err and "Traceback" not in err and err.count("\n") == 1, err
    assert not _files(tmp_path / "d"), "nothing was downloaded"


def test_a_misspelled_version_over_http_is_not_found_with_the_mirror_latest(store, tmp_path):
    import subprocess
    import sys

    with serve.serving(serve.static_resolver(store.root)) as srv:
        proc = subprocess.run([sys.executable, "-m", "lookbench_pipeline.cli", "info", "v20260702", "--store",
                               srv.base_url], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 1
    assert "release v20260702 was not found" in proc.stderr and f"did you mean {V2}?" in proc.stderr
    assert f"its releases/latest is {V2}" in proc.stderr and "cannot be listed:" not in proc.stderr


def test_pull_resumes_a_partial_file_and_redownloads_a_corrupt_one(store, tmp_path):
    class Counting(LocalStore):
        fetched: list[tuple[str, int]] = []

        def read_range(self, key, start=0, chunk=1 << 20, size=None):  # every store's takes the expected size
            self.fetched.append((key.rsplit("/", 1)[-1], start))
            yield from super().read_range(key, start, chunk, size)

    src = Counting(store.root)
    key = "real_studio_flat/gallery.parquet"
    whole = store.get_bytes(f"releases/{V2}/{key}")
    part = tmp_path / "d" / V2 / (key + ".part")
    part.parent.mkdir(parents=True)
    part.write_bytes(whole[: len(whole) // 2])  # an interrupted pull
    pull(src, V2, tmp_path / "d", progress=False)
    assert (tmp_path / "d" / V2 / key).read_bytes() == whole and not part.exists()
    assert ("gallery.parquet", len(whole) // 2) in src.fetched, "continued from where it stopped"
    Counting.fetched = []
    (tmp_path / "d" / V2 / key).unlink()
    part.write_bytes(b"\xff" * (len(whole) // 2))  # a corrupt leftover: resumed, fails the sha256, fetched again
    pull(src, V2, tmp_path / "d", progress=False)
    assert (tmp_path / "d" / V2 / key).read_bytes() == whole
    assert [s for k, s in src.fetched if k == "gallery.parquet"] == [len(whole) // 2, 0]
    assert len([k for k, _ in src.fetched]) == 2, "files already in place are not fetched again"


def test_pull_stops_a_store_that_sends_more_than_the_manifest_says(store, tmp_path):
    key = "real_studio_flat/gallery.parquet"
    _edit_manifest(store, V2, lambda m: m["files"][key].update(bytes=m["files"][key]["bytes"] - 10))
    with pytest.raises(ReleaseIntegrityError, match="more than the manifest's"):
        pull(store, V2, tmp_path / "d", progress=False)
    assert not (tmp_path / "d" / V2 / key).exists() and not (tmp_path / "d" / V2 / (key + ".part")).exists()


def test_pull_refuses_a_planted_part_link(store, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    part = tmp_path / "d" / V2 / "real_studio_flat" / "gallery.parquet.part"
    part.parent.mkdir(parents=True)
    part.symlink_to(victim)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        pull(store, V2, tmp_path / "d", progress=False)
    assert victim.read_text() == "keep"


def test_evaluate_exit_codes(store, tmp_path, capsys):
    base = ["--store", str(store.root), "--quiet", "--cache", str(tmp_path / "c")]
    assert main(["evaluate", "--release", "latest", "--model", "baseline/hsv-hog-v1", *base]) == 0
    assert "baseline/hsv-hog-v1  overall" in capsys.readouterr().out
    # a cutoff after every query: nothing scored, non-zero, with the reason
    assert main(["evaluate", "--release", V2, "--model", "baseline/hsv-hog-v1", "--cutoff", "2030-01-01", *base]) == 1
    err = capsys.readouterr().err
    assert "nothing was scored" in err and "first seen on or after the cutoff 2030-01-01" in err
    # an unknown model id: not scored, with the closest registry id
    assert main(["evaluate", "--release", V2, "--model", "baseline/hsv-hog-v2", *base]) == 1
    assert "did you mean baseline/hsv-hog-v1?" in capsys.readouterr().err
    # one named model scored, another not: non-zero, the table still printed
    assert main(["evaluate", "--release", V2, "--model", "baseline/hsv-hog-v1", "--model", "nope/none", *base]) == 1
    out, err = capsys.readouterr()
    assert "baseline/hsv-hog-v1  overall" in out and "not scored: nope/none" in err
    # usage errors: 2
    assert main(["evaluate", "--release", V2, "--cutoff", "soon", *base]) == 2
    assert "--cutoff must be a date" in capsys.readouterr().err
    assert main(["evaluate", *base]) == 2
    assert main(["evaluate", "--release", V2, "--subset", "real_studio_flta", *base]) == 2  # as pull --subset
    assert "did you mean real_studio_flat?" in capsys.readouterr().err
    assert main(["evaluate", "--release", "v20260702", *base]) == 1
    assert f"did you mean {V2}?" in capsys.readouterr().err
    # a name that is not a version at all is a bad option value (2), with the closest published one
    for cmd in (["evaluate", "--release", "v2026070", *base], ["pull", "v2026070", "--store", base[1], "--quiet"],
                ["info", "v2026070", "--store", base[1]]):
        assert main(cmd) == 2, cmd
        err = capsys.readouterr().err
        assert "'v2026070' is not a release version (vYYYYMMDD) or latest" in err and f"did you mean {V2}?" in err


def test_unknown_environment_variables_and_fields_get_a_did_you_mean(tmp_path, monkeypatch, caplog):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"data_dir": "data", "imagess": {"min_side_px": 3}}))
    with pytest.raises(ConfigError, match="imagess: unknown field .*did you mean images\\?"):
        load_config(cfg)
    cfg.write_text(yaml.safe_dump({"data_dir": "data", "images": {"min_sid_px": 3}}))
    with pytest.raises(ConfigError, match="images.min_sid_px: unknown field .*did you mean min_side_px\\?"):
        load_config(cfg)
    cfg.write_text(yaml.safe_dump({"data_dir": "data"}))
    monkeypatch.setenv("LOOKBENCH_IMAGES_MIN_SIDE_PX", "40")  # one underscore: ignored by pydantic-settings
    monkeypatch.setenv("LOOKBENCH_STORE__URL", str(tmp_path / "s"))  # a real setting: no warning
    with caplog.at_level(logging.WARNING, logger="lookbench_pipeline.config"):
        assert load_config(cfg).images.min_side_px == 32
        load_config(cfg)
    warned = [r.getMessage() for r in caplog.records if "LOOKBENCH_IMAGES_MIN_SIDE_PX" in r.getMessage()]
    assert not [r for r in caplog.records if "LOOKBENCH_STORE__URL is not" in r.getMessage()]
    assert len(warned) == 1, "each variable is warned about once"
    assert "LOOKBENCH_IMAGES_MIN_SIDE_PX is not a LookBench setting" in warned[0]
    assert "did you mean LOOKBENCH_IMAGES__MIN_SIDE_PX?" in warned[0]
    monkeypatch.setenv("LOOKBENCH_IMAGES__MIN_SIDE_PX", "many")
    with pytest.raises(ConfigError, match="environment variable LOOKBENCH_IMAGES__MIN_SIDE_PX='many'"):
        load_config(cfg)


# --- a researcher's pulled subset, hostile manifests, exit codes (audit of 2026-12-05) ---------------------------

V3 = "v20261101"


def test_a_subset_pull_brings_the_distractor_gallery_and_scores_what_was_pulled(store, tmp_path, capsys, caplog):
    from release_factory import with_noise

    publish(with_noise(make_release(V3, range(0, 6))), store, {})
    dest = tmp_path / "pulled"
    assert main(["pull", V3, "--subset", "real_studio_flat", "--store", str(store.root), "--dest", str(dest),
                 "--quiet"]) == 0
    folder = dest / V3
    assert (folder / "noise" / "gallery.parquet").is_file(), "every subset's gallery includes the distractors"
    assert not (folder / "real_streetlook").exists()
    capsys.readouterr()
    assert main(["info", str(folder)]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line[:1].islower()}
    assert rows["real_streetlook"].endswith("not pulled") and not rows["real_studio_flat"].endswith("not pulled")

    base = ["--model", "baseline/hsv-hog-v1", "--quiet", "--cache", str(tmp_path / "c")]
    assert main(["evaluate", str(folder), *base]) == 0
    out, err = capsys.readouterr()
    assert "real_studio_flat" in out and "real_streetlook" not in out
    assert f"warning: {V3}: scoring the pulled subsets real_studio_flat; not pulled: real_streetlook\n" in err
    assert " WARNING " not in err, "one warning form: warning: …, not a log record"
    # a subset asked for that was not pulled: the command that brings it
    assert main(["evaluate", str(folder), "--subset", "real_streetlook", *base]) == 1
    assert f"lookbench pull {V3} --subset real_streetlook --store STORE --dest DIR" in capsys.readouterr().err
    # a folder without the distractor gallery (pulled by an older version): scoring it would be easier than the
    # release is, so it is refused with the fix
    (folder / "noise" / "gallery.parquet").unlink()
    assert main(["evaluate", str(folder), *base]) == 1
    assert "noise" in capsys.readouterr().err


V4 = "v20261201"


@pytest.fixture
def full_pull(store, tmp_path, capsys):
    """A release with a noise gallery, every file pulled."""
    from release_factory import with_noise

    publish(with_noise(make_release(V4, range(0, 6))), store, {})
    assert main(["pull", V4, "--store", str(store.root), "--dest", str(tmp_path / "full"), "--quiet"]) == 0
    capsys.readouterr()
    return tmp_path / "full" / V4


def test_info_names_the_metadata_files_a_pull_brought_and_that_are_gone(full_pull, capsys):
    (full_pull / "croissant.json").unlink()
    for f in (full_pull / "docs").iterdir():
        f.unlink()
    assert main(["info", str(full_pull)]) == 1
    err = capsys.readouterr().err
    assert f"error: {V4}/croissant.json: missing" in err and f"error: {V4}/docs/schema.json: missing" in err
    assert "files checked against the manifest" not in err


def test_a_folder_without_its_noise_gallery_is_damaged_not_partial(full_pull, tmp_path, capsys):
    (full_pull / "noise" / "gallery.parquet").unlink()
    assert main(["info", str(full_pull)]) == 1
    out, err = capsys.readouterr()
    assert f"error: {V4}/noise/gallery.parquet: missing" in err
    assert "not pulled" not in out and "files missing" in out
    assert main(["evaluate", str(full_pull), "--model", "baseline/hsv-hog-v1", "--quiet", "--cache",
                 str(tmp_path / "c")]) == 1
    err = capsys.readouterr().err
    assert "lacks noise/gallery.parquet" in err and "the folder is damaged" in err and "(and the" not in err


def test_a_file_deleted_from_a_full_pull_is_an_error_not_a_partial_pull(full_pull, tmp_path, capsys):
    """The published card names every subset: one whose files are gone was pulled, and is damaged."""
    for role in ("query", "gallery"):
        (full_pull / "real_streetlook" / f"{role}.parquet").unlink()
    assert main(["info", str(full_pull)]) == 1
    assert f"error: {V4}/real_streetlook/query.parquet: missing" in capsys.readouterr().err
    assert main(["evaluate", str(full_pull), "--model", "baseline/hsv-hog-v1", "--quiet", "--cache",
                 str(tmp_path / "c")]) == 1
    err = capsys.readouterr().err
    assert "lacks real_streetlook/gallery.parquet, real_streetlook/query.parquet" in err
    assert "damaged" in err and "not pulled" not in err


def test_a_partial_pull_missing_a_pulled_subsets_file_is_damaged(store, tmp_path, capsys):
    publish(make_release(V4, range(0, 6)), store, {})
    assert main(["pull", V4, "--subset", "real_studio_flat", "--store", str(store.root), "--dest",
                 str(tmp_path / "p"), "--quiet"]) == 0
    folder = tmp_path / "p" / V4
    assert main(["info", str(folder)]) == 0
    (folder / "real_studio_flat" / "gallery.parquet").unlink()
    capsys.readouterr()
    assert main(["info", str(folder)]) == 1
    assert f"error: {V4}/real_studio_flat/gallery.parquet: missing" in capsys.readouterr().err


def test_an_empty_noise_gallery_is_a_warning_that_the_distractor_scores_are_left_out(store, tmp_path, capsys):
    import lookbench_pipeline
    from release_factory import export_embeddings, with_noise

    publish(with_noise(make_release(V4, range(0, 6)), n=0), store, {})
    assert main(["pull", V4, "--store", str(store.root), "--dest", str(tmp_path / "e"), "--quiet"]) == 0
    folder = tmp_path / "e" / V4
    capsys.readouterr()
    assert main(["evaluate", str(folder), "--model", "baseline/hsv-hog-v1", "--quiet", "--cache",
                 str(tmp_path / "c"), "--report", str(tmp_path / "r")]) == 0
    out, err = capsys.readouterr()
    assert f"warning: {V4}: the noise gallery (noise/gallery.parquet) has no rows" in err and "distractor" not in out
    # the report says why its tables have no distractor@K
    warned = json.loads((tmp_path / "r" / "evaluation.json").read_text())["warnings"]
    assert any("the noise gallery (noise/gallery.parquet) has no rows" in w for w in warned), warned
    export_embeddings(folder, tmp_path / "mine.parquet")
    with pytest.warns(UserWarning, match="the noise gallery .* has no rows"):
        lookbench_pipeline.score(folder, embeddings=tmp_path / "mine.parquet")


@pytest.mark.parametrize("edit, match", [
    (lambda m: m["files"].update({"real_studio_flat/query.parquet/x.jpg": m["files"]["real_studio_flat/query.parquet"]}),
     "both as a file and as the folder"),
    (lambda m: m["files"].update({"a/" + "n" * 300: m["files"]["real_studio_flat/query.parquet"]}),
     "bytes long \\(at most 255\\)"),
    (lambda m: m["files"].update({"/".join(["d"] * 600): m["files"]["real_studio_flat/query.parquet"]}),
     "characters \\(at most 1024\\)"),
    (lambda m: m["metadata_files"].update({"manifest.json.part": m["files"]["real_studio_flat/query.parquet"]}),
     "'.part' names the files a pull is still downloading"),
    (lambda m: m["files"].pop("real_streetlook/gallery.parquet"),
     "real_streetlook/query.parquet without real_streetlook/gallery.parquet"),
    (lambda m: m["files"].update({"foo/query.parquet": m["files"]["real_studio_flat/query.parquet"]}),
     "foo/query.parquet without foo/gallery.parquet"),  # a subset name this version does not know, too
    (lambda m: m["files"].update({"Real_Studio_Flat/query.parquet": m["files"]["real_studio_flat/query.parquet"]}),
     "differ only in case"),
])
def test_a_manifest_a_pull_could_not_write_as_named_is_refused_before_anything_is_written(store, tmp_path, edit,
                                                                                          match):
    _edit_manifest(store, V2, edit)
    with pytest.raises(ReleaseIntegrityError, match=match):
        pull(store, V2, tmp_path / "d", progress=False)
    assert not _files(tmp_path / "d")


def test_a_manifest_nested_too_deeply_is_an_integrity_error(store, tmp_path, capsys):
    store.put_bytes(f"releases/{V2}/manifest.json", b"[" * 200_000)
    with pytest.raises(ReleaseIntegrityError, match="nests too deeply"):
        pull(store, V2, tmp_path / "d", progress=False)
    assert main(["info", V2, "--store", str(store.root)]) == 1
    assert "nests too deeply" in capsys.readouterr().err


def test_a_subset_this_version_does_not_know_is_named_not_lost(store, tmp_path, capsys, caplog):
    q, g = "real_studio_flat/query.parquet", "real_studio_flat/gallery.parquet"
    for role, key in (("query", q), ("gallery", g)):
        store.put_bytes(f"releases/{V2}/foo/{role}.parquet", store.get_bytes(f"releases/{V2}/{key}"))
    _edit_manifest(store, V2, lambda m: m["files"].update({"foo/query.parquet": m["files"][q],
                                                          "foo/gallery.parquet": m["files"][g]}))
    base = ["--store", str(store.root), "--quiet", "--release", V2, "--model", "baseline/hsv-hog-v1",
            "--cache", str(tmp_path / "c")]
    assert main(["evaluate", *base]) == 0
    assert f"warning: {V2}: not scored, subsets this version of lookbench_pipeline does not know: foo" in \
        capsys.readouterr().err
    assert main(["evaluate", *base, "--subset", "foo"]) == 1
    assert "does not know the subset foo" in capsys.readouterr().err


def test_the_look_bench_link_is_checked_before_the_download(store, tmp_path, capsys):
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "srpone").write_text("a file")
    assert main(["pull", V2, "--store", str(store.root), "--dest", str(dest), "--quiet", "--look-bench"]) == 2
    assert "is not a folder: move it away, or pull without --look-bench" in capsys.readouterr().err
    assert not (dest / V2).exists(), "nothing was downloaded"


def test_the_look_bench_link_is_not_made_through_a_planted_link(store, tmp_path, capsys):
    outside, dest = tmp_path / "outside", tmp_path / "dest"
    outside.mkdir()
    dest.mkdir()
    (dest / "srpone").symlink_to(outside, target_is_directory=True)
    assert main(["pull", V2, "--store", str(store.root), "--dest", str(dest), "--quiet", "--look-bench"]) == 1
    assert "symbolic link" in capsys.readouterr().err
    assert not list(outside.iterdir()), "no link was made outside the destination"
    assert not (dest / V2).exists(), "refused before the download"


def test_evaluate_usage_errors_exit_2(store, tmp_path, capsys):
    base = ["--store", str(store.root), "--quiet", "--release", V2]
    assert main(["evaluate", *base, "--cutoff", ""]) == 2
    assert "--cutoff must be a date" in capsys.readouterr().err
    assert main(["evaluate", *base, "--embeddings", str(tmp_path / "vecs.npy")]) == 2
    assert "--ids FILE gives their sample_ids" in capsys.readouterr().err
    assert main(["evaluate", *base, "--embeddings", str(tmp_path / "a.parquet"), "--ids", str(tmp_path / "i")]) == 2
    assert "--ids goes with exactly one .npy" in capsys.readouterr().err
    assert main(["evaluate", *base, "--embeddings", str(tmp_path / "v.npy"), "--ids", str(tmp_path / "i1"),
                 "--ids", str(tmp_path / "i2")]) == 2, "a second --ids is refused, not taken over the first"
    assert "--ids given 2 times" in capsys.readouterr().err
    assert main(["evaluate", *base, "--embeddings", str(tmp_path / "absent.parquet")]) == 2
    assert f"--embeddings {tmp_path / 'absent.parquet'}: no such file" in capsys.readouterr().err
    (tmp_path / "ids.txt").write_text("a\n")
    assert main(["evaluate", *base, "--embeddings", str(tmp_path / "ids.txt")]) == 2
    assert "ids.txt: unknown format (expected .parquet, .npz, or .npy with --ids)" in capsys.readouterr().err


def test_embeddings_of_samples_the_release_does_not_have_are_reported(store, tmp_path, capsys):
    """Vectors whose sample_id is in no file scored (another release's, a typo in the ids) are not used: the
    researcher is told how many and which, not left to believe they counted."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lookbench_pipeline.releases.reader import read_file, read_manifest

    files = [k.removesuffix(".parquet").split("/") for k in read_manifest(store, V2)["files"] if k.endswith(".parquet")]
    ids = sorted({sid for sub, role in files
                  for sid in read_file(store, V2, sub, role).column("sample_id").to_pylist()})
    ids += ["other-release-1", "other-release-2"]
    vecs = np.random.default_rng(0).standard_normal((len(ids), 8)).astype(np.float32)
    pq.write_table(pa.table({"sample_id": ids, "embedding": pa.FixedSizeListArray.from_arrays(vecs.ravel(), 8)}),
                   tmp_path / "mine.parquet")
    assert main(["evaluate", "--store", str(store.root), "--quiet", "--release", V2, "--embeddings",
                 str(tmp_path / "mine.parquet"), "--cache", str(tmp_path / "c")]) == 0
    err = capsys.readouterr().err
    assert f"2 of the {len(ids)} sample_ids in {tmp_path / 'mine.parquet'} are not in {V2}" in err, err
    assert "'other-release-1', 'other-release-2'" in err
    # a folder pulled with one subset: the other subsets' vectors are unused too, and the note says why
    assert main(["pull", V2, "--store", str(store.root), "--dest", str(tmp_path / "d"), "--subset",
                 "real_studio_flat", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "d" / V2), "--quiet", "--embeddings", str(tmp_path / "mine.parquet"),
                 "--cache", str(tmp_path / "c")]) == 0
    err = capsys.readouterr().err
    assert "are not in the subsets scored (real_studio_flat) and were not used" in err and "another" not in err, err


def test_pull_with_subsets_reads_the_manifest_once(store, tmp_path, monkeypatch, capsys):
    """`pull --subset` checks the subsets against the same manifest it then downloads by: the store is asked for
    it once (a mirror answering a second read differently cannot split the check from the pull)."""
    reads = []
    get_bytes = LocalStore.get_bytes

    def counting(self, key):
        reads.append(key)
        return get_bytes(self, key)

    monkeypatch.setattr(LocalStore, "get_bytes", counting)
    assert main(["pull", V2, "--store", str(store.root), "--dest", str(tmp_path / "d"), "--subset",
                 "real_studio_flat", "--quiet"]) == 0
    assert reads.count(f"releases/{V2}/manifest.json") == 1, reads
    assert (tmp_path / "d" / V2 / "real_studio_flat" / "query.parquet").is_file()


def test_info_says_a_first_release_has_nothing_to_compare(tmp_path, capsys):
    s = LocalStore(tmp_path / "store")
    publish(make_release(V1, range(0, 4)), s, {})
    assert main(["info", V1, "--store", str(s.root)]) == 0
    assert "the first release: no earlier version to compare with (CHANGES.md)" in capsys.readouterr().out


def test_a_damaged_latest_pointer_is_named(store, tmp_path, capsys):
    store.put_bytes("releases/latest", b"../../../etc")
    assert main(["pull", "latest", "--store", str(store.root), "--dest", str(tmp_path / "d"), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "releases/latest is damaged" in err and "'../../../etc' is not a release version" in err, err


def test_a_mistyped_model_without_torch_is_named_as_not_in_the_registry(monkeypatch):
    import importlib
    import importlib.util

    availability = importlib.import_module("lookbench_pipeline.evaluate.availability")
    real = importlib.util.find_spec
    monkeypatch.setattr(availability.importlib.util, "find_spec",
                        lambda name, *a: None if name in ("torch", "transformers") else real(name, *a))
    reason = availability.unavailable_reason(availability.ModelEntry.of("marqo-fashionsiglip"))
    assert reason.startswith("'marqo-fashionsiglip' is not in the model registry"), reason
    assert "needs torch" in reason


def test_info_shows_the_distractor_gallery_as_a_gallery_without_queries(store, capsys):
    from release_factory import with_noise

    publish(with_noise(make_release(V3, range(0, 4))), store, {})
    assert main(["info", V3, "--store", str(store.root)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("noise"))
    assert row.split()[:3] == ["noise", "-", "5"] and "in every subset's gallery" in row


def test_a_release_with_no_subset_to_score_says_so(store, tmp_path, capsys):
    import lookbench_pipeline.evaluate as evaluate
    from lookbench_pipeline.scoring import nothing_scored_reasons

    _edit_manifest(store, V2, lambda m: m.update(files={}))
    assert main(["evaluate", "--release", V2, "--store", str(store.root), "--model", "baseline/hsv-hog-v1",
                 "--quiet", "--cache", str(tmp_path / "c")]) == 1
    err = capsys.readouterr().err
    assert f"warning: {V2}: no subset to score: its manifest lists no subset's query and gallery files" in err
    assert err.index("no subset to score") < err.index("error: nothing was scored")
    ev = evaluate.run_evaluation(store, V2, ["baseline/hsv-hog-v1"], tmp_path / "c")
    assert nothing_scored_reasons(ev) == [f"{V2}: no subset to score: its manifest lists no subset's query and "
                                          "gallery files"]


@pytest.mark.parametrize("padding", [0, 4000], ids=["small page", "page over releases/latest's 1 KiB"])
def test_a_mirror_url_that_serves_a_web_page_is_named_with_what_it_served(tmp_path, padding):
    """A --store URL that does not name the mirror's release folder: the web server answers every path with its
    index page and status 200. The error says the URL did not serve a LookBench file, names what it served, and
    says to check the URL, not to run `lookbench releases` (a mirror cannot be listed)."""
    import subprocess
    import sys

    page = b"<!DOCTYPE html>\n<html><head><title>Index of /</title></head><body></body></html>\n" + b" " * padding
    with serve.serving(lambda path, base: (page, "text/html; charset=utf-8")) as srv:
        for args, wanted in ((["pull", "latest", "--dest", str(tmp_path / "d")], "a LookBench release pointer"),
                             (["info", "latest"], "a LookBench release pointer"),
                             (["pull", V2, "--dest", str(tmp_path / "d")], "a LookBench manifest"),
                             (["evaluate", "--release", V2, "--quiet", "--cache", str(tmp_path / "c")],
                              "a LookBench manifest")):
            # in a child process: the test server's own thread prints a traceback when a client hangs up early
            proc = subprocess.run([sys.executable, "-m", "lookbench_pipeline.cli", *args, "--store", srv.base_url],
                                  capture_output=True, text=True, timeout=120, cwd=tmp_path)
            err = proc.stderr
            assert proc.returncode == 1, (args, err)
            key = "releases/latest" if "latest" in args else f"releases/{V2}/manifest.json"
            assert f"{srv.base_url}/{key} did not serve {wanted}" in err, err
            assert "it served Content-Type text/html; charset=utf-8" in err and "check the --store URL" in err, err
            if "latest" not in args or not padding:
                assert f"{len(page)} bytes beginning '<!DOCTYPE html>" in err, err
            assert "lookbench releases" not in err and "Traceback" not in err, err
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("keep", [(), ("noise/gallery.parquet",)], ids=["no data file", "the noise gallery only"])
def test_pull_of_a_release_with_no_subset_is_an_error_and_writes_nothing(store, tmp_path, capsys, keep):
    """As `info` and `evaluate`: a manifest that lists no subset's query and gallery files is exit 1, not a pull
    that ends with exit 0 and a folder with nothing to score."""
    from release_factory import with_noise

    publish(with_noise(make_release(V3, range(0, 4))), store, {})
    _edit_manifest(store, V3, lambda m: m.update(files={k: v for k, v in m["files"].items() if k in keep}))
    assert main(["pull", V3, "--store", str(store.root), "--dest", str(tmp_path / "d"), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == (f"error: {V3}: no subset to score: its manifest lists no subset's query and gallery "
                           f"files ({len(keep)} data files); nothing pulled"), err
    assert not _files(tmp_path / "d")
    assert main(["info", V3, "--store", str(store.root)]) == 1
    assert "no subset to score" in capsys.readouterr().err


def test_the_library_pull_of_a_release_with_no_subset_raises_and_writes_nothing(store, tmp_path):
    """:func:`releases.reader.pull` itself refuses it (the Python API, not only the CLI), with info's wording."""
    from lookbench_pipeline.releases.reader import pull

    publish(make_release(V3, range(0, 4)), store, {})
    _edit_manifest(store, V3, lambda m: m.update(files={}))
    with pytest.raises(ValueError) as exc:
        pull(store, V3, tmp_path / "d", progress=False)
    assert str(exc.value) == (f"{V3}: no subset to score: its manifest lists no subset's query and gallery files "
                              "(0 data files); nothing pulled")
    assert not _files(tmp_path / "d")


def test_a_mirror_web_page_for_latest_asks_its_content_type_once(monkeypatch):
    """The page over releases/latest's 1 KiB: the error names its Content-Type from one HEAD request, not two."""
    from lookbench_pipeline.releases.reader import resolve_version
    from lookbench_pipeline.store import HttpStore, ObjectTooLarge

    page = b"<!DOCTYPE html>\n<html><body></body></html>\n" + b" " * 4000
    real, asked = HttpStore.content_type, []

    def counting(self, key):
        asked.append(key)
        return real(self, key)

    monkeypatch.setattr(HttpStore, "content_type", counting)
    with serve.serving(lambda path, base: (page, "text/html; charset=utf-8")) as srv:
        with pytest.raises(ObjectTooLarge, match="it served Content-Type text/html; charset=utf-8"):
            resolve_version(HttpStore(srv.base_url), "latest")
    assert asked == ["releases/latest"]
