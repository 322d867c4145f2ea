"""A hostile trial of the researcher path (r3, 2026-12-07): what evaluate writes is checked writable before
anything is scored, a pull into a read-only folder that already holds the release, the id arrays of ``.npz``
files, one rule for integer vectors, error messages that name the file and the cause, model-name edge cases,
``info latest`` with a dangling ``latest``, and configuration errors."""

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

    def fake_mkdir(path, *a, **k):
        if inside(path):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))
        return real_mkdir(path, *a, **k)

    monkeypatch.setattr(os, "open", fake_open)
    monkeypatch.setattr(os, "mkdir", fake_mkdir)
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
