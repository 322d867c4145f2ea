"""A researcher's mistakes and odd set-ups, as a hostile trial of the researcher path met them: what evaluate
writes is checked writable before anything is scored, a pull into a read-only folder that already holds the
release, the id arrays of ``.npz`` files, one rule for integer vectors, error messages that name the file and the
cause, model-name edge cases, ``info latest`` with a dangling ``latest``, and configuration errors."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from consumer_release import V, evaluate_args, folder, mine, store, _no_lookbench_env  # noqa: F401 (fixtures)

from lookbench_pipeline.cli import main


@pytest.fixture
def nothing_runs(monkeypatch):
    """Fails the test when evaluate gets as far as scoring."""
    import lookbench_pipeline.evaluate as evaluate

    def refuse(*a, **k):
        raise AssertionError("evaluate scored before refusing")

    monkeypatch.setattr(evaluate, "evaluate_configured", refuse)


def make_read_only(monkeypatch, ro: Path) -> Path:
    """``ro`` behaves as on a read-only file system (the tests run as root, whom permission bits do not stop):
    creating anything in it fails with EROFS."""
    ro.mkdir(exist_ok=True)
    real_open, real_mkdir = os.open, os.mkdir

    def inside(path) -> bool:
        return Path(os.fspath(path)).absolute().is_relative_to(ro)

    def fake_open(path, flags, *a, **k):
        if inside(path) and flags & (os.O_CREAT | os.O_WRONLY | os.O_RDWR):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))
        return real_open(path, flags, *a, **k)

    def refused(real, path, *a, **k):
        if inside(path):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))
        return real(path, *a, **k)

    real_unlink, real_symlink = os.unlink, os.symlink
    monkeypatch.setattr(os, "open", fake_open)
    monkeypatch.setattr(os, "mkdir", lambda path, *a, **k: refused(real_mkdir, path, *a, **k))
    monkeypatch.setattr(os, "unlink", lambda path, *a, **k: refused(real_unlink, path, *a, **k))
    # os.symlink(target, link): the link is what is made
    monkeypatch.setattr(os, "symlink", lambda target, link, *a, **k: refused(lambda p, *b, **c: real_symlink(
        target, p, *b, **c), link, *a, **k))
    return ro


@pytest.fixture
def read_only(monkeypatch, tmp_path):
    return make_read_only(monkeypatch, tmp_path / "ro")


# --- 1: what evaluate writes can be written, checked before scoring ----------------------------------------------

@pytest.mark.parametrize("flag,name", [("--report", "rep"), ("--output", "s.parquet"), ("--benchmark-json", "b.json"),
                                       ("--cache", "cache")])
def test_an_unwritable_output_is_a_usage_error_before_scoring(folder, mine, tmp_path, read_only, capsys,
                                                              nothing_runs, flag, name):
    args = evaluate_args(folder, mine, tmp_path, flag, str(read_only / name))
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{flag} {read_only / name}: cannot write in {read_only}: Read-only file system" in err


def test_an_unwritable_default_cache_falls_back_to_a_temporary_one(folder, mine, tmp_path, read_only, capsys,
                                                                   monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(read_only / "cache"))
    args = [a for a in evaluate_args(folder, mine, tmp_path) if a not in ("--cache", str(tmp_path / "c"))]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert (f"warning: the embedding cache {read_only / 'cache' / 'lookbench' / 'embeddings'} cannot be written "
            "(Read-only file system): embedding through a temporary cache") in err
    assert not list(read_only.iterdir())


# --- 2: a pull into a read-only folder that holds the release already --------------------------------------------

def test_a_pull_into_a_read_only_complete_copy_says_it_is_complete(store, tmp_path, capsys, monkeypatch):
    pull = ["pull", V, "--store", str(store.root), "--dest", str(tmp_path / "ro"), "--quiet"]
    assert main(pull) == 0
    capsys.readouterr()
    make_read_only(monkeypatch, tmp_path / "ro")
    assert main(pull) == 0
    out = capsys.readouterr().out
    assert f"{V} is already complete under {tmp_path / 'ro' / V}" in out and "nothing written" in out
    monkeypatch.undo()
    (tmp_path / "ro" / V / "real_streetlook" / "gallery.parquet").unlink()
    make_read_only(monkeypatch, tmp_path / "ro")
    assert main(pull) == 1
    err = capsys.readouterr().err
    assert "cannot write in" in err and "Read-only file system" in err
    assert "1 file(s) missing or different, such as real_streetlook/gallery.parquet" in err


def test_a_look_bench_pull_into_a_read_only_complete_copy_keeps_its_right_link(store, tmp_path, capsys,
                                                                               monkeypatch):
    """``pull --look-bench`` into a read-only folder that holds the complete release: its link already there and
    pointing at the release is kept (exit 0, as the plain pull); a link that must be made and cannot is one line
    naming it, exit 2, no traceback."""
    pull = ["pull", V, "--store", str(store.root), "--dest", str(tmp_path / "ro"), "--quiet", "--look-bench"]
    assert main(pull) == 0
    link = tmp_path / "ro" / "srpone" / "look-bench"
    assert link.is_symlink() and link.resolve() == (tmp_path / "ro" / V).resolve()
    capsys.readouterr()
    make_read_only(monkeypatch, tmp_path / "ro")
    assert main(pull) == 0
    out = capsys.readouterr().out
    assert f"{V} is already complete under {tmp_path / 'ro' / V}" in out
    assert f"{link} -> {tmp_path / 'ro' / V}" in out
    assert link.is_symlink() and link.resolve() == (tmp_path / "ro" / V).resolve()
    monkeypatch.undo()
    for broken in ("missing", "elsewhere"):
        link.unlink(missing_ok=True)
        if broken == "elsewhere":
            link.symlink_to(tmp_path, target_is_directory=True)
        make_read_only(monkeypatch, tmp_path / "ro")
        assert main(pull) == 2, broken
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err
        assert captured.err.strip().splitlines() == [
            f"error: cannot make the link {link} -> ../{V} (Read-only file system): make it yourself, or pull "
            "without --look-bench"], captured.err
        monkeypatch.undo()


@pytest.mark.parametrize("how", ["lock-file-writable", "no-fcntl"])
def test_a_read_only_complete_copy_is_verified_before_any_write(store, tmp_path, monkeypatch, how):
    """The folder is read-only but the lock file an earlier pull left can still be opened (only the folder made
    read-only), or the system has no ``fcntl``: the pull still writes nothing and says the copy is complete."""
    import sys

    from lookbench_pipeline.releases.reader import pull

    assert pull(store, V, tmp_path / "ro", progress=False).read_only is None
    real_open = os.open
    make_read_only(monkeypatch, tmp_path / "ro")
    if how == "no-fcntl":
        monkeypatch.setitem(sys.modules, "fcntl", None)
    else:
        read_only_open = os.open

        def lock_opens(path, flags, *a, **k):  # the lock file itself stays writable
            if Path(os.fspath(path)).name == ".pull.lock":
                return real_open(path, flags, *a, **k)
            return read_only_open(path, flags, *a, **k)

        monkeypatch.setattr(os, "open", lock_opens)
    files = pull(store, V, tmp_path / "ro", progress=False)
    assert files.read_only == "Read-only file system" and all(p.is_file() for p in files)


# --- 3 to 5: the embeddings files: id arrays, one rule for the vectors' type, messages naming the file ------------

def _ids_vecs(mine):
    import numpy as np
    import pyarrow.parquet as pq

    t = pq.read_table(mine)
    return t.column("sample_id").to_pylist(), np.stack(t.column("embedding").to_numpy(zero_copy_only=False))


@pytest.mark.parametrize("kind,says", [
    ("bytes", "array sample_id is bytes (|S16) of shape ("),
    ("int", "array sample_id is integers (int64) of shape ("),
    ("2d", "array sample_id is <U16 (<U16) of shape (")])
def test_npz_ids_of_the_wrong_type_or_shape_are_refused(folder, mine, tmp_path, capsys, kind, says):
    import numpy as np

    ids, vecs = _ids_vecs(mine)
    sid = {"bytes": np.array([s.encode() for s in ids]), "int": np.arange(len(ids), dtype=np.int64),
           "2d": np.array(ids).reshape(-1, 1)}[kind]
    path = tmp_path / f"{kind}.npz"
    np.savez(path, sample_id=sid, embedding=vecs)
    assert main(evaluate_args(folder, path, tmp_path)) == 1
    err = capsys.readouterr().err
    assert f"{path}: {says}" in err and "expected strings (numpy str) of shape (n,)" in err
    assert "have no embedding" not in err


def test_embeddings_of_another_release_say_so(folder, mine, tmp_path, capsys):
    import numpy as np

    ids, vecs = _ids_vecs(mine)
    path = tmp_path / "other.npz"
    np.savez(path, sample_id=np.array([f"{i:016x}" for i in range(len(ids))]), embedding=vecs)
    assert main(evaluate_args(folder, path, tmp_path)) == 1
    assert "matched a row so far: embeddings of another release?" in capsys.readouterr().err


def test_missing_noise_vectors_do_not_suggest_subset(store, tmp_path, capsys):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from release_factory import make_release, with_noise

    from lookbench_pipeline.releases.publish import publish
    from lookbench_pipeline.releases.reader import read_file

    v = "v20260801"
    publish(with_noise(make_release(v, range(0, 6))), store, {})
    ids = sorted({s for sub, role in (("real_studio_flat", "query"), ("real_studio_flat", "gallery"),
                                       ("real_streetlook", "query"), ("real_streetlook", "gallery"))
                  for s in read_file(store, v, sub, role).column("sample_id").to_pylist()})
    vecs = np.random.default_rng(0).standard_normal((len(ids), 8)).astype(np.float32)
    path = tmp_path / "nonoise.parquet"
    pq.write_table(pa.table({"sample_id": ids, "embedding": pa.FixedSizeListArray.from_arrays(vecs.ravel(), 8)}),
                   path)
    assert main(["evaluate", "--release", v, "--store", str(store.root), "--embeddings", str(path), "--quiet",
                 "--cache", str(tmp_path / "c")]) == 1
    err = capsys.readouterr().err
    assert "rows of noise/gallery.parquet have no embedding" in err
    assert "the noise gallery is in every subset's gallery, so it is always scored" in err and "--subset" not in err


@pytest.mark.parametrize(("dtype", "fmt"), [(d, f) for d in ("int32", "int64", "bool", "complex64")
                                             for f in ("npy", "npz", "parquet")
                                             if (d, f) != ("complex64", "parquet")])  # Arrow has no complex type
def test_one_rule_for_the_vectors_type_in_every_format(folder, mine, tmp_path, capsys, fmt, dtype):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids, vecs = _ids_vecs(mine)
    vecs = (vecs * 10).astype(dtype) + (1 if dtype != "bool" else True)
    path = tmp_path / f"v.{fmt}"
    more = []
    if fmt == "npy":
        np.save(path, vecs)
        (tmp_path / "ids.txt").write_text("\n".join(ids) + "\n")
        more = ["--ids", str(tmp_path / "ids.txt")]
    elif fmt == "npz":
        np.savez(path, sample_id=np.array(ids), embedding=vecs)
    else:
        pq.write_table(pa.table({"sample_id": ids, "embedding": [list(map(vecs.dtype.type, r)) for r in vecs]}), path)
    assert main([*evaluate_args(folder, path, tmp_path), *more]) == 1
    err = capsys.readouterr().err
    assert f"{path}: the vectors are " in err and "expected float (float32; float16 and float64 are converted)" in err


def test_a_null_parquet_embedding_names_its_row_and_a_width_0_array_says_so(folder, mine, tmp_path, capsys):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids, vecs = _ids_vecs(mine)
    rows = [list(map(float, r)) for r in vecs]
    rows[2] = None
    path = tmp_path / "null.parquet"
    pq.write_table(pa.table({"sample_id": ids, "embedding": rows}), path)
    assert main(evaluate_args(folder, path, tmp_path)) == 1
    assert f"{path}: row 2 (sample_id {ids[2]!r}) has no vector (a null embedding" in capsys.readouterr().err
    path = tmp_path / "w0.npz"
    np.savez(path, sample_id=np.array(ids), embedding=np.zeros((len(ids), 0), np.float32))
    assert main(evaluate_args(folder, path, tmp_path)) == 1
    assert f"{path}: the vectors have 0 dimensions" in capsys.readouterr().err


def test_the_api_names_the_model_for_a_bool_output(folder):
    import numpy as np

    import lookbench_pipeline
    from lookbench_pipeline.scoring import EmbeddingsError

    with pytest.raises(EmbeddingsError, match=r"^boolish: embed_fn output: the vectors are bool, expected float"):
        lookbench_pipeline.score(folder, lambda images: np.ones((len(images), 4), bool), name="boolish")


# --- 6 to 8: model names, info latest with a dangling latest, configuration errors --------------------------------

@pytest.mark.parametrize("more,says", [
    (["--name", ""], "--name is empty"),
    (["--name", "  "], "--name is empty"),
    (["--name", "baseline/hsv-hog-v1", "--model", "baseline/hsv-hog-v1"],
     "--model baseline/hsv-hog-v1 and the --embeddings (named 'baseline/hsv-hog-v1') would be two models of one name"),
    (["--model", "mine"], "--model mine and the --embeddings (named 'mine', after the file) would be two models")])
def test_an_empty_name_or_one_a_model_has_is_a_usage_error(folder, mine, tmp_path, capsys, nothing_runs, more, says):
    assert main(evaluate_args(folder, mine, tmp_path, *more)) == 2
    assert says in capsys.readouterr().err


def test_a_name_matplotlib_cannot_draw_leaks_no_warning(folder, mine, tmp_path, capsys):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("always")  # as a fresh interpreter: the first glyph warning is shown
        with warnings.catch_warnings(record=True) as seen:
            assert main(evaluate_args(folder, mine, tmp_path, "--name", "my model \U0001F642",
                                      "--report", str(tmp_path / "rep"))) == 0
    assert not [w for w in seen if "Glyph" in str(w.message)]
    assert "Glyph" not in capsys.readouterr().err
    assert (tmp_path / "rep").is_dir()


def test_info_latest_does_not_suggest_a_version_whose_manifest_cannot_be_read(store, capsys):
    from release_factory import make_release

    from lookbench_pipeline.releases.publish import publish

    publish(make_release("v20261201", range(0, 2)), store, {})
    (store.root / "releases" / "v20261201" / "manifest.json").write_text("{not json")
    (store.root / "releases" / "latest").write_text("v20261231\n")
    assert main(["releases", "--store", str(store.root)]) == 1
    assert "warning: v20261201 is left out" in capsys.readouterr().err
    assert main(["info", "latest", "--store", str(store.root)]) == 1
    err = capsys.readouterr().err
    assert "v20261231" in err and "did you mean v20261201" not in err  # listed (the store has it), not suggested
    assert "published: v20260701, v20261201)" in err


def test_a_version_not_published_reads_only_the_suggested_manifests(store, capsys, monkeypatch):
    """Wording the error lists the store and reads only the (at most three) close versions' manifests, not every
    one; and a listing that names a version whose manifest is gone does not loop back into the error."""
    from release_factory import make_release

    import lookbench_pipeline.releases.reader as reader
    from lookbench_pipeline.releases.publish import publish

    for v in ("v20250101", "v20240101", "v20230101", "v20220101", "v20210101"):
        publish(make_release(v, range(0, 2)), store, {})
    real, read = reader.read_manifest_bytes, []

    def counting(store_, version, *a, **k):
        read.append(version)
        return real(store_, version, *a, **k)

    monkeypatch.setattr(reader, "read_manifest_bytes", counting)
    monkeypatch.setattr(type(store), "exists", lambda self, key: False)  # listed, yet "not there"
    with pytest.raises(reader.StoreError, match="release v20260702 is not published") as exc:
        reader.read_manifest(store, "v20260702")
    assert "did you mean v20260701?" in str(exc.value)
    assert 1 < len(read) <= 4, read  # the version asked for, then at most three candidates


def test_configuration_date_errors_say_the_value_once_and_as_written(tmp_path, monkeypatch):
    from lookbench_pipeline.config import ConfigError, load_config

    monkeypatch.setenv("LOOKBENCH_EVALUATE__CUTOFF", "garbage")
    with pytest.raises(ConfigError) as exc:
        load_config(None)
    assert str(exc.value).endswith("expected a date YYYY-MM-DD, got 'garbage'")
    monkeypatch.delenv("LOOKBENCH_EVALUATE__CUTOFF")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("data_dir: data\nevaluate:\n  model_cutoffs: {mine: 2026-03-01 10:00:00+05:00}\n")
    with pytest.raises(ConfigError) as exc:
        load_config(cfg)
    assert "got a date and time 2026-03-01 10:00:00+05:00" in str(exc.value) and "datetime" not in str(exc.value)
