"""The data folder's layout (lookbench_pipeline.layout.DataLayout): every place lies under ``data_dir``, at the
relative path docs/ARCHITECTURE.md names, and ``cfg.layout`` is rooted at the configured ``data_dir``."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest

from lookbench_pipeline.layout import DataLayout, drop_state_file, site_state_dir

ROOT = Path(__file__).resolve().parents[1]

# docs/ARCHITECTURE.md's path (under ``data/``, the default data_dir) -> the member that gives it
DOCUMENTED = {
    "data/runs/<run>/": lambda d: d.run_dir("<run>"),
    "data/crawls/<week>/<site>/": lambda d: d.crawl_dir("<week>", "<site>"),
    "data/state/<site>/": lambda d: d.site_state("<site>"),
    "data/state/<site>/httpcache": lambda d: d.http_cache("<site>"),
    "data/state/drops/": lambda d: d.drop_state("x").parent,
    "data/assets/<asset>/": lambda d: d.asset_dir("<asset>"),
    "data/contamination/index.parquet": lambda d: d.contamination_index,
    "data/legacy/": lambda d: d.legacy,
    "<data_dir>/annotate/vlm_cache.sqlite": lambda d: d.vlm_cache,
    "data/embeddings/": lambda d: d.embeddings,
    "data/aigen/images/": lambda d: d.aigen_images,
    "data/aigen/results/": lambda d: d.aigen_results,
    "data/aigen/jobs/": lambda d: d.aigen_jobs,
    "data/detector/": lambda d: d.detector,
    "data/memo/": lambda d: d.memo,
    "data/candidates/<version>/": lambda d: d.candidate_dir("<version>"),
    "data/reports/<version>/": lambda d: d.report_dir("<version>"),
    "<data_dir>/logs/": lambda d: d.logs,
}

# every member's exact path relative to data_dir (release bytes and stored paths depend on these strings)
EXACT = {
    "store": "store", "logs": "logs", "runs": "runs", "crawls": "crawls", "state": "state", "assets": "assets",
    "candidates": "candidates", "embeddings": "embeddings", "reports": "reports",
    "contamination_index": "contamination/index.parquet", "legacy": "legacy", "aigen": "aigen",
    "aigen_results": "aigen/results", "aigen_images": "aigen/images", "aigen_jobs": "aigen/jobs",
    "aigen_drop": "aigen/drop", "vlm_cache": "annotate/vlm_cache.sqlite", "detector": "detector", "memo": "memo",
    "run_dir": "runs/R", "crawl_dir": "crawls/2026-W27/S", "site_state": "state/S", "http_cache": "state/S/httpcache",
    "drop_state": "state/drops/D.parquet", "asset_dir": "assets/a/b", "candidate_dir": "candidates/v20260701",
    "report_dir": "reports/v20260701", "resolve": "legacy/x",
}
ARGS = {"run_dir": ("R",), "crawl_dir": ("2026-W27", "S"), "site_state": ("S",), "http_cache": ("S",),
        "drop_state": ("D",), "asset_dir": ("a/b",), "candidate_dir": ("v20260701",), "report_dir": ("v20260701",),
        "resolve": ("legacy/x",)}


def _members() -> list[str]:
    return [n for n, v in vars(DataLayout).items() if not n.startswith("_") and (isinstance(v, property)
                                                                                  or inspect.isfunction(v))]


def test_every_member_is_a_documented_path_under_root(tmp_path):
    layout = DataLayout(tmp_path / "data")
    assert sorted(_members()) == sorted(EXACT), "a new member needs its exact path here (and in the docs)"
    for name in _members():
        member = getattr(layout, name)
        path = member(*ARGS[name]) if callable(member) else member
        assert isinstance(path, Path)
        assert path.is_relative_to(layout.root), name
        assert path.relative_to(layout.root).as_posix() == EXACT[name], name
        assert (getattr(DataLayout, name).__doc__ or "").strip(), f"{name} says what lives there"
    assert not (tmp_path / "data").exists(), "the layout only names paths, it creates nothing"


def test_paths_are_plain_joins_of_the_root_as_given():
    rel = DataLayout("data")  # neither resolved nor normalised: the same strings as data_dir / "..."
    assert rel.root == Path("data") and str(rel.embeddings) == "data/embeddings"
    assert str(DataLayout(Path("/x/d")).asset_dir("a/b") / "p") == str(Path("/x/d") / "assets" / "a" / "b" / "p")
    assert DataLayout(Path("/x/d")).resolve(Path("/abs/tree")) == Path("/abs/tree")
    assert site_state_dir(Path("/s"), "demo") == Path("/s/demo")
    assert drop_state_file(Path("/s"), "d") == Path("/s/drops/d.parquet")
    with pytest.raises(dataclasses.FrozenInstanceError):
        rel.root = Path("other")  # type: ignore[misc]


def test_the_architecture_table_names_the_layout_paths():
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    layout = DataLayout(Path("data"))
    for documented, member in DOCUMENTED.items():
        where = documented.replace("<data_dir>", "data")
        assert documented.rstrip("/") in doc, f"docs/ARCHITECTURE.md no longer names {documented}"
        assert member(layout).as_posix() == where.rstrip("/"), documented


def test_the_configuration_exposes_its_layout(tmp_path, monkeypatch):
    from lookbench_pipeline.config import load_config

    monkeypatch.delenv("LOOKBENCH_DETECT__CACHE_DIR", raising=False)  # the tests' shared detector cache
    cfg = load_config(data_dir=str(tmp_path / "d"))
    assert cfg.layout == DataLayout(cfg.data_dir)
    assert cfg.store_url == str(cfg.layout.store)
    assert cfg.detector_cache_dir == cfg.layout.detector.resolve()
