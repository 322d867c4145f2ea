"""Every value of the pipeline file is bounded by what it means, a real shop's configuration gets none of the
demo's legacy data, and bad command-line values are usage errors (exit code 2) before anything runs."""

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from lookbench_pipeline.config import DEMO_SITE, ConfigError, PipelineConfig, load_config, require_named_sites
from lookbench_pipeline.windows import KEY_FORMAT, window_containing

ROOT = Path(__file__).resolve().parents[1]


def _cfg(tmp_path, data) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


@pytest.mark.parametrize("data,match", [
    ({"images": {"min_side_px": -5}}, "images.min_side_px: Input should be greater than or equal to 1"),
    ({"images": {"max_bytes": -1}}, "images.max_bytes: Input should be greater than or equal to 1"),
    ({"images": {"max_pixels": 0}}, "images.max_pixels: Input should be greater than or equal to 1"),
    ({"images": {"fetch_workers": 0}}, "images.fetch_workers: Input should be greater than or equal to 1"),
    ({"images": {"min_side_px": 500, "gallery_min_side_px": 10}},
     r"images: gallery_min_side_px \(10\) must be >= min_side_px \(500\)"),
    ({"checks": {"max_candidate_rejection_rate": 7}},
     "checks.max_candidate_rejection_rate: Input should be less than or equal to 1"),
    ({"checks": {"max_contamination_rate": -0.1}},
     "checks.max_contamination_rate: Input should be greater than or equal to 0"),
    ({"checks": {"min_annotation_acceptance_rate": 1.5}}, "checks.min_annotation_acceptance_rate"),
    ({"checks": {"products_per_crawl": {"min": 10, "max": 2}}},
     r"checks.products_per_crawl: min \(10.0\) must be <= max \(2.0\)"),
    ({"evaluate": {"ks": [0, -3]}}, r"evaluate.ks\[0\]: Input should be greater than or equal to 1"),
    ({"evaluate": {"ks": []}}, "evaluate.ks: List should have at least 1 item"),
    ({"evaluate": {"ndcg_k": 0}}, "evaluate.ndcg_k: Input should be greater than or equal to 1"),
    ({"evaluate": {"report_examples": -1}}, "evaluate.report_examples"),
    ({"dedup": {"hamming_threshold": 65}}, "dedup.hamming_threshold: Input should be less than or equal to 64"),
    ({"dedup": {"max_color_diff": -1}}, "dedup.max_color_diff"),
    ({"annotate": {"backoff_s": 10, "max_backoff_s": 1}}, r"max_backoff_s \(1.0\) must be >= backoff_s \(10.0\)"),
    ({"annotate": {"max_model_len": 1024, "max_image_tokens": 1024}}, "leave no room for the prompt"),
    ({"aigen": {"endpoint": {"size": "0x1024"}}}, "aigen.endpoint.size"),
    ({"aigen": {"endpoint": {"backoff_s": 5, "backoff_max_s": 1}}}, "backoff_max_s"),
    ({"data_dir": ""}, "data_dir: must not be empty"),
    ({"data_dir": "  "}, "data_dir: must not be empty"),
    ({"taxonomy": ""}, "taxonomy: must not be empty"),
    ({"store": {"url": ""}}, "store.url: String should have at least 1 character"),
    ({"detect": {"cache_dir": ""}}, "detect.cache_dir: must not be empty"),
    ({"contamination": {"sources": [{"name": "x", "kind": "folder", "path": ""}]}},
     r"contamination.sources\[0\].path: must not be empty"),
])
def test_out_of_range_values_are_refused_naming_the_field(tmp_path, monkeypatch, data, match):
    monkeypatch.delenv("LOOKBENCH_DETECT__CACHE_DIR", raising=False)  # set by conftest; it would win over the file
    with pytest.raises(ConfigError, match=match) as err:
        load_config(_cfg(tmp_path, data))
    assert str(err.value).startswith(str(tmp_path / "c.yaml")), "the message names the file"


def test_environment_values_are_bounded_too(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOKBENCH_IMAGES__MAX_BYTES", "-1")
    with pytest.raises(ConfigError, match="environment variable LOOKBENCH_IMAGES__MAX_BYTES='-1'"):
        load_config(_cfg(tmp_path, {"data_dir": "data"}))


def test_site_file_values_are_bounded(tmp_path):
    for field, value in (("max_pages", 0), ("concurrency_per_domain", 0), ("download_delay_s", -1),
                         ("allowed_ports", [0]), ("demo_products", 0)):
        (tmp_path / "s.yaml").write_text(yaml.safe_dump({"name": "s", field: value}))
        with pytest.raises(ConfigError, match=f"s.yaml: {field}"):
            load_config(_cfg(tmp_path, {"sites": ["s.yaml"]}))


def test_shipped_defaults_and_configs_are_valid():
    d = PipelineConfig()
    assert (d.images.min_side_px, d.images.gallery_min_side_px, d.images.max_bytes) == (32, 200, 50_000_000)
    assert d.checks.max_candidate_rejection_rate == 0.95 and d.evaluate.ks == [1, 5, 10, 20]
    real = load_config(ROOT / "configs/realdata.yaml")
    assert real.sites and real.checks.max_candidate_rejection_rate == 0.99


def test_demo_legacy_data_is_a_default_of_the_demo_only(tmp_path):
    """A configuration with a real site and no contamination / negatives / evaluate section gets none of the demo
    shop's legacy trees (they failed mid-run: LegacyFormatError, no labels/*_detect_all.txt); the demo keeps
    them, and what a file names is kept."""
    demo = load_config(None)
    assert [s.name for s in demo.contamination.sources] == ["fashion200k-demo"]
    assert demo.negatives.sources and len(demo.evaluate.legacy) == 2
    named_demo = load_config(_cfg(tmp_path, {"sites": [str(DEMO_SITE)]}))
    assert named_demo.contamination.sources == demo.contamination.sources

    (tmp_path / "pages").mkdir()
    (tmp_path / "shop.yaml").write_text(yaml.safe_dump({"name": "shop", "kind": "replay", "pages_dir": "pages",
                                                        "sitemap_urls": ["{{BASE}}/sitemap.xml"]}))
    real = load_config(_cfg(tmp_path, {"sites": ["shop.yaml"], "contamination": {"include_published_releases": True}}))
    assert real.contamination.sources == [] and real.negatives.sources == [] and real.evaluate.legacy == []
    assert real.contamination.include_published_releases, "earlier releases are still checked"
    (tmp_path / "legacy").mkdir()
    own = {"name": "mine", "kind": "folder", "path": str(tmp_path / "legacy")}
    real = load_config(_cfg(tmp_path, {"sites": ["shop.yaml"], "contamination": {"sources": [own]}}))
    assert [s.name for s in real.contamination.sources] == ["mine"] and real.evaluate.legacy == []


def test_a_file_without_sites_is_not_the_demo(tmp_path, monkeypatch):
    """The embedded demo shop is the default of the built-in configuration only (no file, no $LOOKBENCH_CONFIG): a
    file without ``sites`` (only a store, say) has no site, so none of the demo's legacy benchmarks, noise gallery
    or contamination sources by default; ``sites`` stays unset, for the build's refusal (require_named_sites)."""
    monkeypatch.delenv("LOOKBENCH_CONFIG", raising=False)
    store_only = _cfg(tmp_path, {"data_dir": str(tmp_path / "data"), "store": {"url": str(tmp_path / "store")}})
    for cfg in (load_config(store_only), _with_env(monkeypatch, "LOOKBENCH_CONFIG", store_only, load_config)):
        assert cfg.sites == [] and cfg.site_configs() == [] and cfg.demo_site() is None
        assert cfg.evaluate.legacy == [] and cfg.contamination.sources == [] and cfg.negatives.sources == []
        assert "sites" not in cfg.model_fields_set
        with pytest.raises(ConfigError, match=f"{store_only}: sites: missing"):
            require_named_sites(cfg, store_only)
    assert load_config(None).demo_site() is not None, "no file at all is the demo"
    assert len(load_config(None).evaluate.legacy) == 2
    # what the file names is kept: its own legacy benchmark, a demo tree it asks for by name
    own = {"name": "deepfashion-inshop-demo", "kind": "deepfashion_inshop", "path": "legacy/x", "demo": True}
    named = load_config(_cfg(tmp_path, {"store": {"url": str(tmp_path / "store")}, "evaluate": {"legacy": [own]}}))
    assert [s.name for s in named.evaluate.legacy] == ["deepfashion-inshop-demo"]
    # drops without sites still load (the build refuses the file, with the same message as without drops)
    (tmp_path / "photos/studio").mkdir(parents=True)
    drop = {"name": "photos", "path": "photos", "subfolders": {"studio": "real_studio_flat:gallery"}}
    with_drops = load_config(_cfg(tmp_path, {"drops": [drop]}))
    with pytest.raises(ConfigError, match="sites: missing"):
        require_named_sites(with_drops, tmp_path / "c.yaml")
    # LOOKBENCH_SITES names the sites of a file without them
    monkeypatch.setenv("LOOKBENCH_SITES", json.dumps([str(DEMO_SITE)]))
    assert load_config(store_only).demo_site() is not None


def _with_env(monkeypatch, name, value, fn):
    monkeypatch.setenv(name, str(value))
    try:
        return fn()
    finally:
        monkeypatch.delenv(name)


def _lookbench(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "lookbench_pipeline.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def test_build_of_a_file_without_sites_is_refused_before_any_run(tmp_path):
    (tmp_path / "photos/studio").mkdir(parents=True)
    drop = {"name": "photos", "path": "photos", "subfolders": {"studio": "real_studio_flat:gallery"}}
    cfg = _cfg(tmp_path, {"data_dir": str(tmp_path / "data"), "store": {"url": str(tmp_path / "store")},
                          "drops": [drop]})
    for command in (["build"], ["backfill", "--partition", "2026-01-01"]):
        proc = _lookbench(tmp_path, *command, "--config", str(cfg))
        assert proc.returncode == 2, proc.stderr
        assert f"configuration error: {cfg}: sites: missing" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "data").exists() and not (tmp_path / "store").exists(), "nothing ran"


def test_build_of_a_window_not_open_yet_is_a_usage_error_before_the_log(tmp_path):
    now = datetime.now(timezone.utc)
    current = window_containing(now)
    ahead = window_containing(current.end).start.strftime(KEY_FORMAT)  # the window after the open one
    cfg = _cfg(tmp_path, {"data_dir": str(tmp_path / "data"), "sites": [str(DEMO_SITE)]})
    proc = _lookbench(tmp_path, "build", "--partition", ahead, "--config", str(cfg))
    assert proc.returncode == 2, proc.stderr
    assert f"--partition: the window {ahead} has not begun" in proc.stderr and "Traceback" not in proc.stderr
    assert "DagsterUnknownPartitionError" not in proc.stderr
    assert not (tmp_path / "data").exists(), "no log file, no run"


def test_dagster_runs_refuse_a_file_without_sites_too(tmp_path, monkeypatch):
    """The release and crawl jobs in Dagster (make dev, a deployment) read the configuration through the
    ``lookbench`` resource: a file that omits ``sites`` is refused there as by ``lookbench build``."""
    from assets.resources import LookbenchConfig

    monkeypatch.delenv("LOOKBENCH_CONFIG", raising=False)
    cfg = _cfg(tmp_path, {"data_dir": str(tmp_path / "data")})
    with pytest.raises(ConfigError, match="sites: missing"):
        LookbenchConfig(config_path=str(cfg)).load()
    monkeypatch.setenv("LOOKBENCH_CONFIG", str(cfg))
    with pytest.raises(ConfigError, match="sites: missing"):
        LookbenchConfig().load()
    monkeypatch.delenv("LOOKBENCH_CONFIG")
    assert LookbenchConfig().load().demo_site() is not None, "no file at all is the demo"
    cfg = _cfg(tmp_path, {"data_dir": str(tmp_path / "data"), "sites": [str(DEMO_SITE)]})
    assert LookbenchConfig(config_path=str(cfg)).load().sites == [DEMO_SITE.resolve()]


def test_build_of_a_real_shop_without_an_image_endpoint_is_refused_before_any_run(tmp_path):
    """aigen's default endpoint is the demo's scripted one: a real shop's build of the open window without
    aigen.endpoint.base_url failed after its crawl; it is refused at the start. A closed window's build and a
    backfill request no new picture (aigen.generate), so they are not refused for it."""
    (tmp_path / "pages").mkdir()
    (tmp_path / "shop.yaml").write_text(yaml.safe_dump({"name": "shop", "kind": "replay", "pages_dir": "pages",
                                                        "sitemap_urls": ["{{BASE}}/sitemap.xml"]}))
    cfg = _cfg(tmp_path, {"data_dir": str(tmp_path / "data"), "sites": ["shop.yaml"]})
    proc = _lookbench(tmp_path, "build", "--config", str(cfg))
    assert proc.returncode == 2, proc.stderr
    assert f"configuration error: {cfg}: aigen: no image endpoint configured" in proc.stderr, proc.stderr
    assert not (tmp_path / "data").exists(), "nothing ran"
    from lookbench_pipeline.cli.build import _check_build_inputs
    from lookbench_pipeline.config import load_config

    loaded = load_config(cfg)
    _check_build_inputs(loaded, str(cfg), "2025-01-01")  # a closed window: nothing to generate
    _check_build_inputs(loaded, str(cfg), "2026-07-01", backfill=True)
    with pytest.raises(ConfigError, match="no image endpoint"):
        _check_build_inputs(loaded, str(cfg))


def test_a_build_whose_version_is_published_says_so_before_it_runs(tmp_path):
    """Versions are immutable: a second build of the day can only confirm the release, and a changed input is
    refused at the publish step, at the end of the run. The build says so before it starts."""
    from lookbench_pipeline.cli.build import published_note

    store = tmp_path / "store"
    (store / "releases" / "v20261206").mkdir(parents=True)
    (store / "releases" / "v20261206" / "manifest.json").write_text("{}")
    cfg = load_config(_cfg(tmp_path, {"data_dir": str(tmp_path / "data"), "store": {"url": str(store)},
                                      "sites": [str(DEMO_SITE)]}))
    now = datetime(2026, 12, 6, 9, 0, tzinfo=timezone.utc)
    note = published_note(cfg, None, now)
    assert note and "v20261206 is already published" in note and "refused" in note
    assert published_note(cfg, "2026-01-01", now) is None  # the closed window's version, v20260630, is new
    assert published_note(cfg, None, datetime(2026, 12, 7, 9, 0, tzinfo=timezone.utc)) is None  # the next day
    missing = load_config(_cfg(tmp_path, {"data_dir": str(tmp_path / "data"), "store": {"url": str(tmp_path / "no")},
                                          "sites": [str(DEMO_SITE)]}))
    assert published_note(missing, None, now) is None and not (tmp_path / "no").exists()
