"""A researcher's path outside the checkout (audit of 2026-12-06): a pulled folder scored with their own
embeddings, no configuration file. `--cutoff model` without a training cutoff, LOOKBENCH_* settings without a file,
K values (larger than the gallery, given twice, exactly those printed), symbolic links in a release folder or a
store, every subset's files checked before anything is embedded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from consumer_release import V, evaluate_args, folder, mine, store, _no_lookbench_env  # noqa: F401 (fixtures)

from lookbench_pipeline.cli import main
from lookbench_pipeline.config import ConfigError, load_config
from lookbench_pipeline.metrics import LabelCodes, evaluate_top
from lookbench_pipeline.safepath import UnsafePathError
from lookbench_pipeline.store import ReleaseFolder


# --- 3: --cutoff model needs a training cutoff for embeddings -----------------------------------------------------

def test_cutoff_model_without_a_training_cutoff_is_a_usage_error(folder, mine, tmp_path, capsys):
    assert main(evaluate_args(folder, mine, tmp_path, "--cutoff", "model")) == 2
    err = capsys.readouterr().err
    assert "--cutoff model" in err and "add --training-cutoff YYYY-MM-DD" in err and "'mine'" in err
    # a training cutoff given the wrong way round is not silently unused either
    assert main(evaluate_args(folder, mine, tmp_path, "--training-cutoff", "2026-01-01")) == 2
    assert "add --cutoff model" in capsys.readouterr().err
    assert main(evaluate_args(folder, mine, tmp_path, "--cutoff", "2026-01-01", "--training-cutoff", "2026-01-01")) == 2
    assert "--cutoff 2026-01-01 every model is scored from that date" in capsys.readouterr().err
    # with one: scored from it
    assert main(evaluate_args(folder, mine, tmp_path, "--cutoff", "model", "--training-cutoff", "2026-01-01")) == 0


def test_cutoff_model_takes_the_training_cutoff_from_a_configuration(folder, mine, tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"data_dir": "data", "evaluate": {"cutoff": "model",
                                                                   "model_cutoffs": {"mine": "2026-01-01"}}}))
    out = tmp_path / "o.parquet"
    assert main(evaluate_args(folder, mine, tmp_path, "--config", str(cfg), "--no-legacy", "--output", str(out))) == 0
    assert set(pq.read_table(out).column("cutoff").to_pylist()) == {"2026-01-01"}
    # evaluate.cutoff: model in the file, no cutoff for these embeddings: the same usage error, naming the setting
    cfg.write_text(yaml.safe_dump({"data_dir": "data", "evaluate": {"cutoff": "model"}}))
    capsys.readouterr()
    assert main(evaluate_args(folder, mine, tmp_path, "--config", str(cfg), "--no-legacy")) == 2
    assert "evaluate.cutoff (configuration) model" in capsys.readouterr().err


# --- 4: LOOKBENCH_* settings apply (and are checked) without a configuration file --------------------------------

def test_environment_settings_apply_without_a_configuration_file(folder, mine, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LOOKBENCH_EVALUATE__KS", "[0]")
    assert main(evaluate_args(folder, mine, tmp_path)) == 2
    err = capsys.readouterr().err
    assert "LOOKBENCH_EVALUATE__KS='[0]'" in err and "greater than or equal to 1" in err
    monkeypatch.setenv("LOOKBENCH_EVALUATE__KS", "[2, 3]")
    assert main(evaluate_args(folder, mine, tmp_path)) == 0
    head = capsys.readouterr().out.splitlines()[0].split()
    assert [h for h in head if "@" in h] == ["coarse_recall@2", "coarse_recall@3", "fine_recall@2", "fine_recall@3",
                                             "item_recall@2", "item_recall@3", "ndcg@2", "ndcg@3"]
    # the same for a version in a store named with --store
    monkeypatch.setenv("LOOKBENCH_EVALUATE__KS", "[0]")
    assert main(["evaluate", "--release", V, "--store", str(folder.parent.parent / "store"), "--embeddings",
                 str(mine), "--quiet"]) == 2
    # with no configuration file at all: the environment is the configuration
    with pytest.raises(ConfigError, match="LOOKBENCH_EVALUATE__KS"):
        load_config(None)


def test_the_store_variable_names_the_store_in_the_consumer_install(store, tmp_path, capsys, monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "scrapy" else find_spec(n, *a))
    assert main(["releases"]) == 2
    assert "name the store to read" in capsys.readouterr().err
    monkeypatch.setenv("LOOKBENCH_STORE__URL", str(store.root))
    assert main(["releases"]) == 0
    assert capsys.readouterr().out.split() == [V]


# --- 5: K values: exactly those asked for, K beyond the gallery said, twice refused --------------------------------

def test_the_table_and_the_files_hold_exactly_the_ks_asked_for(folder, mine, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LOOKBENCH_EVALUATE__KS", "[100000]")
    out, bench = tmp_path / "o.parquet", tmp_path / "b.json"
    assert main(evaluate_args(folder, mine, tmp_path, "--output", str(out), "--benchmark-json", str(bench))) == 0
    text, err = capsys.readouterr()
    head = text.splitlines()[0].split()
    assert [h for h in head if "@" in h] == ["coarse_recall@100000", "fine_recall@100000", "item_recall@100000",
                                             "ndcg@100000"]
    assert "@5" not in text and "@1 " not in text
    assert {m.split("@")[1] for m in pq.read_table(out).column("metric").to_pylist()} == {"100000"}
    site = json.loads(bench.read_text())
    assert {k for tab in site.values() for fams in tab.values() for ks in fams.values() for k in ks} == {"@100000"}
    # K beyond the gallery: scored, and said
    assert "note: real_studio_flat: K 100000 > its gallery of 6 images" in err
    assert "the same as @6 (Recall@K is 1 for every query with a positive in the gallery)" in err
    rows = pq.read_table(out).to_pylist()
    assert all(r["value"] == 1.0 for r in rows if r["metric"].startswith(("coarse", "item")))
    # the report's evaluation.json: the same K and the same notes
    assert main(evaluate_args(folder, mine, tmp_path, "--report", str(tmp_path / "rep"))) == 0
    capsys.readouterr()
    ev = json.loads((tmp_path / "rep" / "evaluation.json").read_text())
    assert ev["ks"] == [100000] and any("K 100000 > its gallery of 6 images" in n for n in ev["notes"])
    # a K given twice: a configuration error naming it
    monkeypatch.setenv("LOOKBENCH_EVALUATE__KS", "[10, 1, 10]")
    assert main(evaluate_args(folder, mine, tmp_path)) == 2
    assert "K 10 given more than once" in capsys.readouterr().err


def test_ndcg_k_adds_ndcg_only_and_the_default_view_is_unchanged(folder, mine, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LOOKBENCH_EVALUATE__KS", "[1]")
    monkeypatch.setenv("LOOKBENCH_EVALUATE__NDCG_K", "4")
    out = tmp_path / "o.parquet"
    assert main(evaluate_args(folder, mine, tmp_path, "--output", str(out))) == 0
    head = capsys.readouterr().out.splitlines()[0].split()
    assert [h for h in head if "@" in h] == ["coarse_recall@1", "fine_recall@1", "item_recall@1", "ndcg@1", "ndcg@4"]
    assert sorted(set(pq.read_table(out).column("metric").to_pylist())) == [
        "coarse_recall@1", "fine_recall@1", "item_recall@1", "ndcg@1", "ndcg@4"]
    monkeypatch.delenv("LOOKBENCH_EVALUATE__KS")
    monkeypatch.delenv("LOOKBENCH_EVALUATE__NDCG_K")
    assert main(evaluate_args(folder, mine, tmp_path, "--output", str(out))) == 0
    head = capsys.readouterr().out.splitlines()[0].split()
    assert [h for h in head if "@" in h] == ["coarse_recall@1", "coarse_recall@10", "fine_recall@1", "fine_recall@10",
                                             "item_recall@1", "item_recall@10", "ndcg@5"]
    assert {m.split("@")[1] for m in pq.read_table(out).column("metric").to_pylist()} == {"1", "5", "10", "20"}


def test_a_k_beyond_the_gallery_equals_the_whole_gallery_without_k_sized_arrays():
    rng = np.random.default_rng(1)
    n_q, n_g = 5, 7

    def labels(n: int) -> tuple[list[str], list[dict]]:
        return ([["top", "dress"][i] for i in rng.integers(0, 2, n)],
                [{"color": ["red", "blue", "green"][i]} if i < 3 else {} for i in rng.integers(0, 4, n)])

    codes = LabelCodes(*labels(n_q), *labels(n_g))
    top = np.argsort(rng.random((n_q, n_g)), axis=1)
    items_q, items_g = [f"i{i % 3}" for i in range(n_q)], [f"i{i % 4}" for i in range(n_g)]
    at_g = evaluate_top(top, codes, [n_g], [n_g], items_q, items_g)
    big = evaluate_top(top, codes, [10 ** 9], [10 ** 9], items_q, items_g)  # a (q, K) array would not fit
    for fam in ("coarse_recall", "fine_recall", "item_recall", "ndcg"):
        np.testing.assert_allclose(big[f"{fam}@{10 ** 9}"], at_g[f"{fam}@{n_g}"])


# --- 8: symbolic links in a release folder or a store are refused, by name -----------------------------------------

def _link_out(path: Path, tmp_path: Path) -> Path:
    """Move ``path`` out of its folder and put a symbolic link to it in its place."""
    target = tmp_path / ("outside-" + path.name)
    path.rename(target)
    path.symlink_to(target)
    return path


@pytest.mark.parametrize("rel", ["real_studio_flat/query.parquet", "manifest.json", "real_streetlook"])
def test_a_link_in_a_pulled_folder_is_refused_by_name(folder, mine, tmp_path, capsys, rel):
    link = _link_out(folder / rel, tmp_path)
    for cmd in (["info", str(folder)], evaluate_args(folder, mine, tmp_path)):
        assert main(cmd) == 1, cmd
        err = capsys.readouterr().err
        assert f"{str(link)!r} is a symbolic link" in err and "refused" in err, err


def test_a_link_in_a_store_is_refused_by_name(store, mine, tmp_path, capsys):
    link = _link_out(store.root / "releases" / V / "real_streetlook" / "gallery.parquet", tmp_path)
    with pytest.raises(UnsafePathError, match="is a symbolic link"):
        store.get_bytes(f"releases/{V}/real_streetlook/gallery.parquet")
    for cmd in (["pull", V, "--store", str(store.root), "--dest", str(tmp_path / "d"), "--quiet"],
                ["evaluate", "--release", V, "--store", str(store.root), "--embeddings", str(mine), "--quiet"]):
        assert main(cmd) == 1, cmd
        assert f"{str(link)!r} is a symbolic link" in capsys.readouterr().err
    assert not (tmp_path / "d" / V / "manifest.json").exists()


def test_a_release_folder_reached_through_a_link_is_read(folder, tmp_path):
    """The folder a researcher names may itself be a link (pull --look-bench makes one): only links inside it are
    refused."""
    link = tmp_path / "here"
    link.symlink_to(folder, target_is_directory=True)
    assert ReleaseFolder(link).version == V


# --- every subset's files are checked before anything is embedded --------------------------------------------------

def test_every_subset_is_checked_before_the_first_embedding(folder, mine, tmp_path, capsys, monkeypatch):
    import lookbench_pipeline.evaluate.run as run

    embedded = []
    vectors = run._vectors
    monkeypatch.setattr(run, "_vectors", lambda *a, **k: embedded.append(a[2].name) or vectors(*a, **k))
    g = folder / "real_streetlook" / "gallery.parquet"  # the last subset scored
    g.write_bytes(g.read_bytes()[:-10] + b"0123456789")
    assert main(evaluate_args(folder, mine, tmp_path)) == 1
    assert "real_streetlook/gallery.parquet" in capsys.readouterr().err
    assert embedded == []
