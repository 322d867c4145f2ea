"""Ctrl-C in a command is one line on stderr and exit 130, not a traceback (unless --debug)."""

from __future__ import annotations

import importlib

import pytest

cli_main = importlib.import_module("lookbench_pipeline.cli.main")  # the module (the package exports main())


def _interrupted(args):
    raise KeyboardInterrupt


@pytest.mark.parametrize("command,fn,line", [
    (["pull", "latest", "--store", "/nonexistent"], "cmd_pull",
     "interrupted; run the same command again to resume"),
    (["info", "latest", "--store", "/nonexistent"], "cmd_info", "interrupted"),
])
def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys, command, fn, line):
    monkeypatch.setattr(cli_main, fn, _interrupted)
    assert cli_main.main(command) == 130
    err = capsys.readouterr().err
    assert err.strip() == line and "Traceback" not in err


def test_ctrl_c_with_debug_keeps_the_traceback(monkeypatch):
    monkeypatch.setattr(cli_main, "cmd_pull", _interrupted)
    with pytest.raises(KeyboardInterrupt):
        cli_main.main(["--debug", "pull", "latest", "--store", "/nonexistent"])


def test_an_interrupted_evaluate_says_a_rerun_reuses_the_embeddings_computed(store, tmp_path, monkeypatch, capsys):
    """What the line says is what happens: the vectors of the files embedded before Ctrl-C are in the embedding
    cache, and the same command run again embeds only the rest."""
    from lookbench_pipeline.embed.baseline import HsvHogEmbedder

    real, embedded, stop_at = HsvHogEmbedder.embed, [], [2]

    def embed(self, images):
        if len(embedded) + 1 == stop_at[0]:
            raise KeyboardInterrupt
        embedded.append(len(images))
        return real(self, images)

    monkeypatch.setattr(HsvHogEmbedder, "embed", embed)

    def evaluate(cache: str) -> int:
        return cli_main.main(["evaluate", "--release", "v20260701", "--store", str(store.root), "--model",
                              "baseline/hsv-hog-v1", "--quiet", "--cache", str(tmp_path / cache)])

    assert evaluate("c") == 130  # the second batch (the second file) is cut short
    err = capsys.readouterr().err
    assert "interrupted; run the same command again: it reuses the embeddings computed so far" in err, err
    assert err.strip() == f"interrupted; {cli_main.RESUMABLE.get('evaluate')}" and "Traceback" not in err
    first = embedded[0]
    embedded.clear()
    stop_at[0] = 0
    assert evaluate("c") == 0  # the rerun
    rerun = sum(embedded)
    embedded.clear()
    assert evaluate("fresh") == 0  # the whole evaluation, from an empty cache
    assert rerun == sum(embedded) - first > 0, (first, rerun, embedded)


def test_an_interrupted_evaluate_through_a_temporary_cache_says_nothing_is_kept(store, monkeypatch, capsys):
    """The default cache could not be written, so the embeddings went through a temporary cache, removed at the end:
    the line does not promise a rerun reuses them."""
    from lookbench_pipeline.cli import consume
    from lookbench_pipeline.embed.baseline import HsvHogEmbedder

    def embed(self, images):
        raise KeyboardInterrupt

    monkeypatch.setattr(HsvHogEmbedder, "embed", embed)
    monkeypatch.setattr(consume, "_default_cache", lambda cache: None)
    assert cli_main.main(["evaluate", "--release", "v20260701", "--store", str(store.root), "--model",
                          "baseline/hsv-hog-v1", "--quiet"]) == 130
    err = capsys.readouterr().err
    assert err.strip() == f"interrupted; {cli_main.TEMPORARY_CACHE_LOST}", err
    assert "reuses" not in err and "now removed, so it embeds everything again" in err
