"""The Dagster resources: the configuration parsed once per run, and the external systems' typed settings
(object store, vLLM endpoint, image endpoint) applied over the YAML."""

import json

import pytest
from dagster import build_init_resource_context

import assets.resources as resources
from assets.resources import (ImageEndpointResource, LookbenchConfig, ObjectStoreResource,
                              VllmEndpointResource)
from lookbench_pipeline.config import ConfigError


def test_the_configuration_is_parsed_once_per_run(monkeypatch):
    calls = []
    real = resources.load_config
    monkeypatch.setattr(resources, "load_config", lambda *a, **k: calls.append(1) or real(*a, **k))
    res = LookbenchConfig()
    ctx = build_init_resource_context()
    res.setup_for_execution(ctx)
    first = res.load()
    assert res.load() is first and res.store() is res.store()
    assert len(calls) == 1
    res.teardown_after_execution(ctx)
    res.load()
    assert len(calls) == 2  # outside a run: parsed on each call, as before


def test_resource_settings_win_over_the_yaml_and_unset_ones_keep_it(tmp_path):
    plain = LookbenchConfig().load()
    cfg = LookbenchConfig(object_store=ObjectStoreResource(url="s3://bucket/prefix", endpoint_url="http://minio:9000"),
                          vllm=VllmEndpointResource(base_url="http://gpu:8000/v1", judge_model="judge-7b"),
                          image_endpoint=ImageEndpointResource(base_url="http://gpu:9000/v1", model_version="r1")
                          ).load()
    assert (cfg.store.url, cfg.store.endpoint_url, cfg.store.region) == ("s3://bucket/prefix", "http://minio:9000",
                                                                        plain.store.region)
    assert cfg.annotate.endpoint == "http://gpu:8000/v1" and cfg.annotate.model == plain.annotate.model
    assert cfg.annotate.judge.model == "judge-7b" and cfg.annotate.judge.endpoint is None
    assert (cfg.aigen.endpoint.base_url, cfg.aigen.endpoint.model_version) == ("http://gpu:9000/v1", "r1")
    assert cfg.aigen.endpoint.model == plain.aigen.endpoint.model
    # no settings: the YAML as it is
    assert LookbenchConfig(object_store=ObjectStoreResource(), vllm=VllmEndpointResource()).load() == plain


def test_an_invalid_resource_setting_is_a_config_error_naming_it():
    with pytest.raises(ConfigError, match=r"aigen\.endpoint .*model_version is required"):
        LookbenchConfig(image_endpoint=ImageEndpointResource(base_url="http://gpu:9000/v1")).load()


def test_the_definitions_bind_one_resource_per_external_system():
    from assets.definitions import build_defs

    defs = build_defs()
    assert {"lookbench", "object_store", "vllm", "image_endpoint", "io_manager"} <= set(defs.resources)
    lb = defs.resources["lookbench"]
    assert lb.object_store is defs.resources["object_store"] and lb.vllm is defs.resources["vllm"]


def test_a_resource_setting_wins_over_the_environment_and_an_unset_one_keeps_it(monkeypatch, tmp_path):
    monkeypatch.setenv("LOOKBENCH_STORE__URL", str(tmp_path / "from-env"))
    assert LookbenchConfig().load().store.url == str(tmp_path / "from-env")
    assert LookbenchConfig(object_store=ObjectStoreResource()).load().store.url == str(tmp_path / "from-env")
    run = LookbenchConfig(object_store=ObjectStoreResource(url="s3://run-bucket/prefix")).load()
    assert run.store.url == "s3://run-bucket/prefix"


def test_a_runs_settings_of_the_external_systems_reach_its_stages(demo_config, monkeypatch):
    """The Launchpad's run config of ``object_store``, ``vllm`` and ``image_endpoint`` (docs/DEPLOY.md, "Pointing
    one run at another store or model server"): the crawl archives into the run's store, not the YAML's, and the
    stage's configuration carries the run's model servers; a run without settings keeps the YAML's."""
    from dagster import DagsterInstance

    import assets.crawl as crawl
    from assets.definitions import build_defs
    from assets.partitions import crawl_key

    seen = []
    real = crawl.stage_crawl_week
    monkeypatch.setattr(crawl, "stage_crawl_week", lambda cfg, *a, **k: seen.append(cfg) or real(cfg, *a, **k))
    alt = demo_config.parent / "alt-store"
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("sites", ["demo"])
    job = build_defs(str(demo_config)).resolve_job_def("crawl_job")
    key = crawl_key("2026-07-01", "demo")
    run = job.execute_in_process(partition_key=key, instance=instance, run_config={"resources": {
        "object_store": {"config": {"url": str(alt)}},
        "vllm": {"config": {"base_url": "http://run-gpu:8000/v1"}},
        "image_endpoint": {"config": {"base_url": "http://run-gpu:9000/v1", "model_version": "r7"}}}})
    assert run.success
    assert list((alt / "warc" / "demo").rglob("*.warc.gz")), sorted(str(p) for p in alt.rglob("*"))
    # the run's lookbench/store tag names the store it used, so the Runs page filtered by the store finds it
    assert instance.get_run_by_id(run.run_id).tags["lookbench/store"] == str(alt)
    assert not (demo_config.parent / "store" / "warc").exists()  # the YAML's store.url
    assert seen[-1].store.url == str(alt) and seen[-1].annotate.endpoint == "http://run-gpu:8000/v1"
    assert (seen[-1].aigen.endpoint.base_url, seen[-1].aigen.endpoint.model_version) == ("http://run-gpu:9000/v1",
                                                                                         "r7")
    plain = job.execute_in_process(partition_key=key, instance=instance)  # no settings: the YAML's
    assert plain.success
    assert instance.get_run_by_id(plain.run_id).tags["lookbench/store"] == str(demo_config.parent / "store")
    assert seen[-1].store.url == str(demo_config.parent / "store") and seen[-1].annotate.endpoint is None


def test_a_run_refuses_a_configuration_other_than_its_code_locations(demo_config):
    """``lookbench.config_path`` (or ``io_manager.config_path``) set in the Launchpad to another file: the run
    would crawl with that configuration but store its tables in the location's data folder and carry the
    location's tags. It stops before any stage, saying to build from that configuration in its own location."""
    import yaml
    from dagster import DagsterInstance

    from assets.definitions import build_defs
    from assets.partitions import crawl_key

    other = demo_config.parent / "other.yaml"
    other.write_text(yaml.safe_dump({**yaml.safe_load(demo_config.read_text()), "data_dir": "other-data"}))
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("sites", ["demo"])
    job = build_defs(str(demo_config)).resolve_job_def("crawl_job")
    key = crawl_key("2026-07-01", "demo")
    for resource in ("lookbench", "io_manager"):
        run = job.execute_in_process(partition_key=key, instance=instance, raise_on_error=False, run_config={
            "resources": {resource: {"config": {"config_path": str(other)}}}})
        assert not run.success
        errors = " ".join(str(e.event_specific_data) for e in run.all_events if e.is_failure)
        assert f"{resource}.config_path '{other}' is not this code location's configuration " \
               f"({demo_config.resolve()})" in errors and f"LOOKBENCH_CONFIG={other} dagster dev" in errors, errors
        assert not any(run.get_asset_materialization_events())
    assert not (demo_config.parent / "other-data").exists() and not (demo_config.parent / "data" / "assets").exists()
    # the location's own file, however it is spelled, is its configuration
    same = f"{demo_config.parent}/./{demo_config.name}"
    assert job.execute_in_process(partition_key=key, instance=instance, run_config={
        "resources": {"lookbench": {"config": {"config_path": same}}}}).success


def test_a_run_launched_from_the_code_location_uses_its_run_config(demo_config, tmp_path):
    """As a run launched from the UI executes: the job reconstructed from the code location (``assets.definitions``
    with ``LOOKBENCH_CONFIG``), each step in its own process, the run config from a file: the WARC lands in the
    run's ``object_store.url``."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import yaml
    from dagster import DagsterInstance

    from assets.partitions import crawl_key

    home, alt = tmp_path / "dagster_home", tmp_path / "run-store"
    home.mkdir()
    (home / "dagster.yaml").write_text("")
    env = {**os.environ, "DAGSTER_HOME": str(home), "LOOKBENCH_CONFIG": str(demo_config), "PYTHONWARNINGS": "ignore"}
    env.pop("LOOKBENCH_TIMEZONE", None)
    with DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions("sites", ["demo"])
    run_config = tmp_path / "run.yaml"
    run_config.write_text(yaml.safe_dump({"resources": {"object_store": {"config": {"url": str(alt)}}}}))
    key = crawl_key("2026-07-01", "demo")
    tags = {"dagster/partition": str(key), **{f"dagster/partition/{d}": k for d, k in key.keys_by_dimension.items()}}
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([str(Path(sys.executable).parent / "dagster"), "job", "execute", "-m", "assets.definitions",
                           "-a", "defs", "-j", "crawl_job", "-c", str(run_config), "--tags", json.dumps(tags)],
                          cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert list((alt / "warc" / "demo").glob("*.warc.gz"))
    assert not (demo_config.parent / "store" / "warc").exists()
