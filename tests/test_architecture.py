"""The import rules (docs/ARCHITECTURE.md, "Import rules"): the import-linter contracts in pyproject.toml, the
command line's consumer half free of the Dagster layer, and the deprecated old module paths (kept for one release)."""

from __future__ import annotations

import os
import re
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
                                       "lookbench_pipeline.demo.scripted_openai"),
                                      ("lookbench_pipeline.aigen_check", "lookbench_pipeline.aigen.reference_check"),
                                      ("lookbench_pipeline.embcache", "lookbench_pipeline.embed.packs"),
                                      ("lookbench_pipeline.person_regions",
                                       "lookbench_pipeline.detect.person_regions"),
                                      ("lookbench_pipeline.release_reader", "lookbench_pipeline.releases.reader"),
                                      ("lookbench_pipeline.changes", "lookbench_pipeline.releases.changes"),
                                      ("lookbench_pipeline.publishing", "lookbench_pipeline.releases.publishing"),
                                      ("lookbench_pipeline.card", "lookbench_pipeline.releases.card"),
                                      ("lookbench_pipeline.release_docs", "lookbench_pipeline.releases.docs")])
def test_old_module_paths_still_import_with_a_deprecation_warning(old, new):
    """For one release the old paths hand back the moved module itself, with a DeprecationWarning
    (``lookbench_pipeline.release``, split in three, is tested in test_store_release)."""
    import importlib

    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mod = importlib.import_module(old)
    assert mod is importlib.import_module(new)
    assert any(issubclass(w.category, DeprecationWarning) and new in str(w.message) for w in caught)


TESTED_IN = {
    # library modules whose tests are not in a file named after them (tests/test_<module>[_*].py): where they are
    "annotate": ["test_taxonomy_annotate.py"],
    "coco": ["test_detect_units.py", "test_label_import.py"],
    "drops": ["test_backfill.py", "test_config_and_errors.py", "test_label_import.py"],
    "early_interrupt": ["test_console.py"],
    "foreground": ["test_dedup_foreground.py"],
    "optout": ["test_safety.py"],
    "package_data": ["test_taxonomy_annotate.py"],
    "pagetext": ["test_extract_items.py"],
    "quality": ["test_checks.py"],
    "records": ["test_backfill.py", "test_aigen.py"],
    "releases": ["test_store_release.py", "test_release_changes.py", "test_release_docs.py",
                 "test_publish_consumers.py", "test_publish_faults.py"],
    "renditions": ["test_extract_items.py"],
    "report": ["test_evaluate_report.py"],
    "safepath": ["test_safety.py", "test_consumer_errors.py"],
    "schemas": ["test_schema_upgrade.py", "test_timestamps.py", "test_checks.py"],
    "warc": ["test_crawl.py", "test_resume.py", "test_backfill.py"],
    "wheelmodels": ["test_real_models.py"],
    "windows": ["test_partitions.py"],
    "testing": ["test_hamming.py"],
    "deprecation": ["test_architecture.py"],
}


def _is_old_path(text: str) -> bool:
    """A deprecated old module path: it warns and hands back the module it became (one release)."""
    return bool(re.search(r'moved\("lookbench_pipeline\.|warn\(\s*"lookbench_pipeline\.\w+ moved to', text))


def _library_modules() -> list[str]:
    """The library's top-level modules and packages, less the deprecated old paths (thin modules that warn)."""
    lib = ROOT / "lookbench_pipeline"
    out = []
    for p in sorted(lib.iterdir()):
        init = p / "__init__.py" if p.is_dir() else p
        if p.name.startswith("__") or not init.is_file() or (p.is_file() and p.suffix != ".py"):
            continue
        text = init.read_text()
        if _is_old_path(text):
            continue
        out.append(p.stem)
    return out


def test_every_library_module_has_tests_findable_from_its_name():
    """A module's tests are in ``tests/test_<module>.py`` / ``tests/test_<module>_*.py``, else listed in
    :data:`TESTED_IN` (and those files exist and name the module)."""
    tests = {p.name for p in (ROOT / "tests").glob("test_*.py")}
    missing = []
    for name in _library_modules():
        if any(t == f"test_{name}.py" or t.startswith(f"test_{name}_") for t in tests):
            continue
        files = TESTED_IN.get(name)
        if not files or not all(f in tests and name in (ROOT / "tests" / f).read_text() for f in files):
            missing.append(name)
    assert not missing, f"no test file named after, or listed in TESTED_IN for: {missing}"


def test_the_documented_layers_are_the_real_imports():
    """docs/ARCHITECTURE.md's "The library, bottom up" lists every library module once, on a line below every
    module it imports (grimp, the graph import-linter builds; imports inside functions count)."""
    import grimp

    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    block = doc.split("<!-- layers -->", 1)[1].split("<!-- /layers -->", 1)[0]
    level, lines = {}, block.strip().strip("`").strip().splitlines()
    current = None
    for line in lines:
        m = re.match(r"L(\d+)\s+(.*)", line)
        current = int(m.group(1)) if m else current
        for name in (m.group(2) if m else line).split():
            assert name not in level, f"{name} is listed twice"
            level[name] = current
    modules = set(_library_modules())
    assert modules == set(level), (f"not listed: {sorted(modules - set(level))}; "
                                   f"listed but no module: {sorted(set(level) - modules)}")
    graph = grimp.build_graph("lookbench_pipeline")
    wrong = []
    for m in graph.modules:
        parts = m.split(".")
        if len(parts) < 2 or parts[1] not in level:
            continue
        path = ROOT.joinpath(*parts)
        source = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        if _is_old_path(source.read_text()):
            continue
        for imported in graph.find_modules_directly_imported_by(m):
            q = imported.split(".")
            if len(q) > 1 and q[1] in level and q[1] != parts[1] and level[q[1]] >= level[parts[1]]:
                wrong.append(f"{m} -> {imported}")
    assert not wrong, f"imports against the documented layers: {wrong}"
