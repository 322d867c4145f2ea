"""A tester's trial of `lookbench evaluate` and `lookbench_pipeline.score` (2026-12-06): a command-line training
cutoff wins over evaluate.model_cutoffs, the Python API keeps the command's rules (one rule for both), a second
--name or --training-cutoff is refused, the files evaluate writes are checked before anything is scored, dates
and K in the configuration, a hostile manifest is a data error whatever the options."""

from __future__ import annotations

import gc
import json
import warnings

import pyarrow.parquet as pq
import pytest
from consumer_release import V, evaluate_args, folder, mine, store, _no_lookbench_env  # noqa: F401 (fixtures)

import lookbench_pipeline
from lookbench_pipeline.cli import main
from lookbench_pipeline.config import ConfigError, EvaluateConfig, load_config


@pytest.fixture
def nothing_runs(monkeypatch):
    """Fails the test when evaluate gets as far as scoring."""
    import lookbench_pipeline.evaluate as evaluate

    def refuse(*a, **k):
        raise AssertionError("evaluate scored before refusing")

    monkeypatch.setattr(evaluate, "evaluate_configured", refuse)


# --- 1: --training-cutoff wins over evaluate.model_cutoffs, and says so ------------------------------------------

def test_the_command_line_training_cutoff_wins_over_the_configured_one(folder, mine, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LOOKBENCH_EVALUATE__MODEL_CUTOFFS", '{"mine": "2026-01-01"}')
    out = tmp_path / "o.parquet"
    assert main(evaluate_args(folder, mine, tmp_path, "--cutoff", "model", "--training-cutoff", "2026-02-04",
                          "--output", str(out))) == 0
    err = capsys.readouterr().err
    rows = pq.read_table(out).to_pylist()
    assert {r["cutoff"] for r in rows} == {"2026-02-04"}
    assert {r["n_queries"] for r in rows if r["subset"] == "real_studio_flat"} == {3}  # items 3, 4 and 5 of 0..5
    assert "note: mine: scored from its own training cutoff 2026-02-04, not from evaluate.model_cutoffs' " \
           "2026-01-01" in err
    # without --training-cutoff the configured one applies, with no note
    assert main(evaluate_args(folder, mine, tmp_path, "--cutoff", "model", "--output", str(out))) == 0
    assert "not from evaluate.model_cutoffs" not in capsys.readouterr().err
    assert {r["cutoff"] for r in pq.read_table(out).to_pylist()} == {"2026-01-01"}


# --- 2: the Python API keeps the command's rules -----------------------------------------------------------------

def test_score_refuses_a_cutoff_model_without_a_training_cutoff_and_the_reverse(folder, mine):
    with pytest.raises(ValueError, match=r"cutoff='model' scores each model from its training cutoff, and 'mine'"):
        lookbench_pipeline.score(folder, embeddings=mine, cutoff="model")
    with pytest.raises(ValueError, match=r"training_cutoff is used by cutoff='model'.*no cutoff every query"):
        lookbench_pipeline.score(folder, embeddings=mine, training_cutoff="2026-02-04")
    with pytest.raises(ValueError, match=r"with cutoff='2026-01-01' every model is scored from that date"):
        lookbench_pipeline.score(folder, embeddings=mine, cutoff="2026-01-01", training_cutoff="2026-02-04")
    with pytest.raises(ValueError, match=r"'my_fn' has none"):
        lookbench_pipeline.score(folder, lambda images: None, name="my_fn", cutoff="model")
    ev = lookbench_pipeline.score(folder, embeddings=mine, cutoff="model", training_cutoff="2026-02-04")
    assert {r["cutoff"] for r in ev.scores.to_pylist()} == {"2026-02-04"}


@pytest.mark.parametrize("ks, match", [([1, 1], "K 1 given more than once"), ([True], "K must be integers"),
                                       ([0], ">= 1"), ([], "one or more")])
def test_score_checks_k_as_the_configuration_does(folder, mine, ks, match):
    with pytest.raises(ValueError, match=match):
        lookbench_pipeline.score(folder, embeddings=mine, ks=ks)
    with pytest.raises(ValueError):  # the same rule (its words are pydantic's for the types)
        EvaluateConfig(ks=ks)


def test_score_warns_the_notes_and_leaves_no_temporary_folder(folder, mine, tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ev = lookbench_pipeline.score(folder, embeddings=mine, ks=[100000])
        gc.collect()
    texts = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert any("K 100000 > its gallery of 6 images" in t for t in texts) and ev.notes
    assert all(t in texts for t in ev.notes)
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert list((tmp_path / "tmp").iterdir()) == []  # the temporary embedding cache is removed


# --- 3: one --name, one --training-cutoff ------------------------------------------------------------------------

@pytest.mark.parametrize("more, flag", [
    (["--name", "a", "--embeddings", "{mine}", "--name", "b"], "--name"),
    (["--name", "a", "--name", "b"], "--name"),
    (["--cutoff", "model", "--training-cutoff", "2026-01-01", "--training-cutoff", "2026-02-01"],
     "--training-cutoff")])
def test_a_second_name_or_training_cutoff_is_refused(folder, mine, tmp_path, capsys, nothing_runs, more, flag):
    more = [m.format(mine=mine) for m in more]
    assert main(evaluate_args(folder, mine, tmp_path, *more)) == 2
    assert f"{flag} given 2 times" in capsys.readouterr().err


# --- 4: the files evaluate writes are checked first --------------------------------------------------------------

def test_output_report_cache_and_benchmark_json_are_checked_before_scoring(folder, mine, tmp_path, capsys,
                                                                            nothing_runs):
    a_file = tmp_path / "a.txt"
    a_file.write_text("x")
    for more, says in ((["--report", str(a_file)], "is a file: name a folder"),
                       (["--report", str(a_file / "sub" / "rep")], f"{a_file} is a file: name a folder"),
                       (["--cache", str(a_file)], f"--cache {a_file}: {a_file} is a file: name a folder"),
                       (["--output", str(tmp_path)], "is a folder: name a file"),
                       (["--benchmark-json", str(tmp_path)], "is a folder: name a file"),
                       (["--output", str(tmp_path / "out.csv")], "written as Parquet: name a .parquet file")):
        assert main(evaluate_args(folder, mine, tmp_path, *more)) == 2, more
        assert says in capsys.readouterr().err
    assert not (tmp_path / "out.csv").exists()


# --- 5: dates and K in the configuration -------------------------------------------------------------------------

def test_an_unquoted_yaml_date_is_a_date_and_k_is_an_integer(tmp_path, monkeypatch):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("data_dir: data\nevaluate:\n  cutoff: 2030-10-01\n  model_cutoffs: {mine: 2030-10-01}\n")
    ev = load_config(cfg).evaluate
    assert ev.model_cutoffs == {"mine": "2030-10-01"} and ev.cutoff == "2030-10-01"
    for bad in ("mine: 2030-10-01 12:00:00", "mine: 20301001", "mine: '2030-02-30'"):
        cfg.write_text(f"data_dir: data\nevaluate:\n  model_cutoffs: {{{bad}}}\n")
        with pytest.raises(ConfigError, match="model_cutoffs"):
            load_config(cfg)
    monkeypatch.setenv("LOOKBENCH_EVALUATE__KS", "[true]")
    with pytest.raises(ConfigError, match="LOOKBENCH_EVALUATE__KS"):
        load_config(None)
    monkeypatch.setenv("LOOKBENCH_EVALUATE__KS", "[1, 7]")
    assert load_config(None).evaluate.ks == [1, 7]


def test_an_unquoted_date_in_model_cutoffs_scores_from_it(folder, mine, tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("data_dir: data\nevaluate:\n  cutoff: model\n  model_cutoffs: {mine: 2026-02-04}\n")
    out = tmp_path / "o.parquet"
    assert main(evaluate_args(folder, mine, tmp_path, "--config", str(cfg), "--no-legacy", "--output", str(out))) == 0
    assert {r["cutoff"] for r in pq.read_table(out).to_pylist()} == {"2026-02-04"}


# --- 6: a hostile manifest is a data error (1), with --subset too ------------------------------------------------

def test_a_hostile_manifest_is_exit_1_with_or_without_subset(folder, mine, tmp_path, capsys):
    path = folder / "manifest.json"
    m = json.loads(path.read_text())
    m["files"]["../victim.txt"] = next(iter(m["files"].values()))
    path.write_text(json.dumps(m))
    assert main(["info", str(folder)]) == 1
    assert main(evaluate_args(folder, mine, tmp_path)) == 1
    assert main(evaluate_args(folder, mine, tmp_path, "--subset", "real_studio_flat")) == 1
    assert "'../victim.txt'" in capsys.readouterr().err


@pytest.mark.parametrize("day", ["20261001", "2026-W40-1", "2026-10-01T00:00"])
def test_one_date_rule_for_every_cutoff(folder, mine, tmp_path, capsys, nothing_runs, day):
    """``date.fromisoformat`` alone takes ``20261001`` and ``2026-W40-1``; the configuration refuses them, and so do
    --cutoff, --training-cutoff and score() (config.sections.parse_day, one rule)."""
    for more in (["--cutoff", day], ["--cutoff", "model", "--training-cutoff", day]):
        assert main(evaluate_args(folder, mine, tmp_path, *more)) == 2, more
        assert "must be a date YYYY-MM-DD" in capsys.readouterr().err
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        lookbench_pipeline.score(folder, embeddings=mine, cutoff="model", training_cutoff=day)
    with pytest.raises(ValueError, match="YYYY-MM-DD"):  # pydantic's ValidationError
        EvaluateConfig(cutoff=day)


def test_k_given_as_one_number_or_a_bool_ndcg_k_is_refused(folder, mine):
    with pytest.raises(ValueError, match="a list of integers"):
        lookbench_pipeline.score(folder, embeddings=mine, ks=5)
    with pytest.raises(ValueError, match="ndcg_k"):
        EvaluateConfig(ndcg_k=True)
