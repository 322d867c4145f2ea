"""A generator outage does not publish a release without its AI-generated subsets: the blocking
``generated_images/generation_failure_rate`` check fails (a connection_error outage is a rate of 1.0, over the
shipped ``checks.max_generation_failure_rate``) and nothing is published; and a subset a generator was asked for
that ends with no query in the candidate fails ``release_candidate/requested_subsets_have_queries`` with why."""

import socket

import pyarrow as pa
import yaml
from dagster import AssetSelection, DagsterInstance, materialize

from assets.definitions import ALL_ASSETS, ALL_CHECKS, CRAWL_SELECTION
from assets.io import TableIOManager
from assets.partitions import crawl_key, release_partitions
from assets.resources import LookbenchConfig
from lookbench_pipeline import quality
from lookbench_pipeline.config import ChecksConfig, load_config
from lookbench_pipeline.pipeline import store_of
from lookbench_pipeline.releases import list_releases


def test_generation_failure_rate_counts_the_requests_a_generator_was_asked():
    t = pa.table({"status": ["generated", "failed", "failed", "pending", "skipped"],
                  "reason": [None, "connection_error", "http_500", "awaiting_external_generator", "window_closed"]})
    assert quality.generation_failure_rate(t) == (2 / 3, 3, {"connection_error": 1, "http_500": 1})
    outage = pa.table({"status": ["failed"] * 16, "reason": ["connection_error"] * 16})
    rate, asked, _ = quality.generation_failure_rate(outage)
    assert (rate, asked) == (1.0, 16) and rate > ChecksConfig().max_generation_failure_rate
    waiting = pa.table({"status": ["pending"] * 4, "reason": ["awaiting_external_generator"] * 4})
    assert quality.generation_failure_rate(waiting) == (0.0, 0, {})  # a job file nobody answered yet: not a failure
    t = t.append_column("detail", pa.array([None, "connection refused: nothing answered at u", "boom", "x", "y"]))
    assert quality.generation_failure_details(t) == {"connection_error": "connection refused: nothing answered at u",
                                                     "http_500": "boom"}


def test_a_subset_asked_for_and_left_without_queries_is_named_with_why():
    checks = pa.table({"subset": ["aigen_studio", "aigen_studio", "aigen_streetlook", "aigen_streetlook"],
                       "status": ["rejected", "rejected", "accepted", "rejected"],
                       "reason": ["generation_failed:connection_error", "similarity_below_threshold", None,
                                  "generation_pending"]})
    assert quality.requested_subsets_without_queries(checks, {"real_studio_flat": 40, "aigen_streetlook": 1}) == {
        "aigen_studio": {"generation_failed:connection_error": 1, "similarity_below_threshold": 1}}
    assert quality.requested_subsets_without_queries(checks, {"aigen_studio": 2, "aigen_streetlook": 1}) == {}
    waiting = pa.table({"subset": ["aigen_studio"], "status": ["rejected"], "reason": ["generation_pending"]})
    assert quality.requested_subsets_without_queries(waiting, {}) == {}  # nobody was asked yet


def _check_results(result):
    return {(e.asset_check_evaluation_data.asset_key.to_user_string(), e.asset_check_evaluation_data.check_name):
            e.asset_check_evaluation_data for e in result.all_events
            if e.event_type_value == "ASSET_CHECK_EVALUATION"}


def test_a_generator_outage_stops_the_release(tmp_path):
    """The demo with its generator endpoint on a port nothing listens on: every request fails connection_error,
    the shipped failure-rate bound fails the blocking check and no release is published."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    site = yaml.safe_load(open("lookbench_pipeline/data/sites/demo.yaml"))
    site.update(demo_products=12, demo_looks=3)
    (tmp_path / "demo.yaml").write_text(yaml.safe_dump(site))
    cfg = tmp_path / "outage.yaml"
    cfg.write_text(yaml.safe_dump({
        "data_dir": "data", "store": {"url": "store"}, "sites": ["demo.yaml"],
        # one attempt, no backoff: the outage is the same, only quicker to see
        "aigen": {"endpoint": {"base_url": f"http://127.0.0.1:{dead}/v1", "model_version": "x1",
                               "max_attempts": 1, "backoff_s": 0.0, "backoff_max_s": 0.0}}}))
    resources = {"lookbench": LookbenchConfig(config_path=str(cfg)), "io_manager": TableIOManager(config_path=str(cfg))}
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("sites", ["demo"])
    window = release_partitions.get_last_partition_key()
    assets = [*ALL_ASSETS, *ALL_CHECKS]
    assert materialize(assets, selection=CRAWL_SELECTION, partition_key=crawl_key(window, "demo"),
                       instance=instance, resources=resources).success
    r = materialize(assets, selection=AssetSelection.all() - CRAWL_SELECTION, partition_key=window,
                    instance=instance, resources=resources, raise_on_error=False)
    assert not r.success
    ev = _check_results(r)[("generated_images", "generation_failure_rate")]
    assert not ev.passed and ev.severity.value == "ERROR", ev
    assert ev.metadata["rate"].value == 1.0 and set(ev.metadata["failed_by_reason"].value) == {"connection_error"}
    # why, in words: nothing listens there (not a timeout to raise)
    detail = ev.metadata["detail_by_reason"].value["connection_error"]
    assert detail.startswith(f"connection refused: nothing answered at http://127.0.0.1:{dead}/v1"), detail
    done = {e.asset_key.to_user_string() for e in r.get_asset_materialization_events()}
    assert "generated_images" in done and not {"release_candidate", "release"} & done
    assert list_releases(store_of(load_config(cfg))) == []


def test_generated_images_with_failed_requests_are_not_reused(tmp_path):
    """After an outage the same configuration builds again: the stage is computed again (its failed requests sent
    again) rather than its stored table of failures reused, which would fail the check until --force."""
    from assets.aigen import results_in_place
    from lookbench_pipeline.pipeline import store_of

    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"data_dir": str(tmp_path / "data"),
                                                     "store": {"url": str(tmp_path / "store")}}))
    cfg = load_config(tmp_path / "c.yaml")
    outage = pa.table({"request_id": ["r1", "r2"], "status": ["failed", "failed"], "reason": ["connection_error"] * 2,
                       "path": [None, None]})
    assert "2 of 2 requests failed" in results_in_place(cfg, store_of(cfg), {"generated_images": outage}, {})
    waiting = pa.table({"request_id": ["r1"], "status": ["pending"], "reason": ["awaiting_external_generator"],
                        "path": [None]})
    assert results_in_place(cfg, store_of(cfg), {"generated_images": waiting}, {}) is None
    # one failure in four, under the bound (the demo's scripted endpoint fails some on purpose): reused
    some = pa.table({"request_id": ["r1", "r2", "r3", "r4"], "status": ["failed"] + ["generated"] * 3,
                     "reason": ["http_500", None, None, None], "path": [None] * 4})
    assert results_in_place(cfg, store_of(cfg), {"generated_images": some}, {}) is None
