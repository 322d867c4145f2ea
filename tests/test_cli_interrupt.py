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
