"""The small published release the researcher-path tests share, as pytest fixtures (import them into a test
module): ``store`` (a folder store holding :data:`V`), ``folder`` (that release pulled), ``mine`` (embeddings of
every row, keyed by sample_id), and ``_no_lookbench_env`` (autouse: no ``LOOKBENCH_*`` variable of the caller's
leaks in); :func:`evaluate_args` is the evaluate command line of ``mine`` on ``folder``."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from release_factory import make_release

from lookbench_pipeline.cli import main
from lookbench_pipeline.releases.publish import publish
from lookbench_pipeline.releases.reader import read_file, read_manifest
from lookbench_pipeline.store import LocalStore

V = "v20260701"  # queries of item i first seen 2026-02-01 + i days


@pytest.fixture
def store(tmp_path) -> LocalStore:
    s = LocalStore(tmp_path / "store")
    publish(make_release(V, range(0, 6)), s, {})
    return s


@pytest.fixture
def folder(store, tmp_path, capsys) -> Path:
    assert main(["pull", V, "--store", str(store.root), "--dest", str(tmp_path / "rel"), "--quiet"]) == 0
    capsys.readouterr()
    return tmp_path / "rel" / V


@pytest.fixture
def mine(store, tmp_path) -> Path:
    """Embeddings of every row of the release, keyed by sample_id."""
    m = read_manifest(store, V)
    files = [k.removesuffix(".parquet").split("/") for k in m["files"] if k.endswith(".parquet")]
    ids = sorted({sid for sub, role in files for sid in read_file(store, V, sub, role).column("sample_id").to_pylist()})
    vecs = np.random.default_rng(0).standard_normal((len(ids), 8)).astype(np.float32)
    path = tmp_path / "mine.parquet"
    pq.write_table(pa.table({"sample_id": ids, "embedding": pa.FixedSizeListArray.from_arrays(vecs.ravel(), 8)}), path)
    return path


@pytest.fixture(autouse=True)
def _no_lookbench_env(monkeypatch):
    for k in list(os.environ):
        if k.upper().startswith("LOOKBENCH_"):
            monkeypatch.delenv(k)


def evaluate_args(folder: Path, mine: Path, tmp_path: Path, *more: str) -> list[str]:
    return ["evaluate", str(folder), "--embeddings", str(mine), "--quiet", "--cache", str(tmp_path / "c"), *more]
