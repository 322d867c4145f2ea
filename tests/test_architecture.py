"""The import rules (docs/ARCHITECTURE.md, "Import rules"): the import-linter contracts in pyproject.toml, the
command line's consumer half free of the Dagster layer, and the deprecated old module paths of the demo code."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "crawlers")])}


def test_import_contracts_hold():
    """pyproject.toml's [tool.importlinter] contracts: the library imports neither `assets`, `dagster`, `scrapy`
    nor `lookbench_crawlers`; `lookbench_pipeline.demo` is imported only by the stages (and the marked places
    listed there); no import cycle between the library's modules, function-level imports included."""
    pytest.importorskip("importlinter")
    code = ("import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "3 kept, 0 broken" in proc.stdout, proc.stdout[-2000:]


def test_a_consumer_command_loads_nothing_of_the_dagster_layer(tmp_path):
    """A consumer command (`lookbench releases`) imports nothing of Dagster, Scrapy, `assets` or the crawler
    project: the build commands find their runner through the `lookbench.build_runner` entry point when they run."""
    code = ("import sys; from lookbench_pipeline.cli import main; code = main(['releases', '--store', sys.argv[1]]); "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('assets', 'dagster', 'scrapy', "
            "'lookbench_crawlers')); print(code, bad); sys.exit(1 if bad or code else 0)")
    (tmp_path / "store").mkdir()
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "store")], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("old, new", [("lookbench_pipeline.demo_shop", "lookbench_pipeline.demo.shop"),
                                      ("lookbench_pipeline.serve", "lookbench_pipeline.demo.serve"),
                                      ("lookbench_pipeline.aigen_server", "lookbench_pipeline.demo.aigen_server"),
                                      ("lookbench_pipeline.testing.scripted_openai",
                                       "lookbench_pipeline.demo.scripted_openai")])
def test_old_demo_paths_still_import_with_a_deprecation_warning(old, new):
    """For one release the old paths hand back the moved module itself, with a DeprecationWarning."""
    import importlib

    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mod = importlib.import_module(old)
    assert mod is importlib.import_module(new)
    assert any(issubclass(w.category, DeprecationWarning) and new in str(w.message) for w in caught)
