"""assets/reuse.py: an asset whose inputs, code, configuration and files read in place did not change is skipped
and its stored value reused; any change, a stored file changed after it was written, a missing side effect or
``reuse_unchanged: false`` makes it compute again. A toy graph with the project's IO manager and configuration
resource; the real assets are checked in test_pipeline_dagster (second run of the whole graph)."""

import argparse
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from dagster import AssetOut, DagsterInstance, Output, StaticPartitionsDefinition, asset, materialize, multi_asset

from assets.io import TableIOManager, stored_path
from assets.resources import LookbenchConfig
from assets.reuse import reuse_unchanged

PARTS = StaticPartitionsDefinition(["2026-07-01"])
STATE = {"upstream": [1, 2, 3], "calls": [], "verify": None}


@asset(partitions_def=PARTS)
def upstream(context, lookbench: LookbenchConfig) -> pa.Table:
    return pa.table({"x": STATE["upstream"]})


def _read_file(cfg):
    return [cfg.layout.root / "legacy" / "tree"]


@asset(partitions_def=PARTS)
@reuse_unchanged(reads=_read_file, verify=lambda cfg, store, values, md: STATE["verify"])
def doubled(context, lookbench: LookbenchConfig, upstream: pa.Table) -> Output[pa.Table]:
    STATE["calls"].append("doubled")
    context.log.info(f"doubled: {{'in': {upstream.num_rows}, 'kept': {upstream.num_rows}}}\nevery count")
    return Output(pa.table({"y": [v * 2 for v in upstream["x"].to_pylist()]}), metadata={"rows": upstream.num_rows})


@multi_asset(outs={"evens": AssetOut(), "summary": AssetOut()}, partitions_def=PARTS)
@reuse_unchanged(outputs=("evens", "summary"))
def split(context, lookbench: LookbenchConfig, doubled: pa.Table):
    STATE["calls"].append("split")
    yield Output(doubled.filter(pa.compute.equal(pa.compute.bit_wise_and(doubled["y"], 2), 0)), "evens")
    yield Output({"total": sum(doubled["y"].to_pylist())}, "summary", metadata={"kind": "json"})


@pytest.fixture
def setup(tmp_path, monkeypatch):
    site = yaml.safe_load((Path(__file__).parents[1] / "lookbench_pipeline/data/sites/demo.yaml").read_text())
    (tmp_path / "demo.yaml").write_text(yaml.safe_dump(site))
    cfg = {"data_dir": "data", "store": {"url": "store"}, "sites": ["demo.yaml"]}
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(cfg))
    tree = tmp_path / "data" / "legacy" / "tree"
    tree.mkdir(parents=True)
    (tree / "list.txt").write_text("a\n")
    STATE.update(upstream=[1, 2, 3], calls=[], verify=None)
    return tmp_path, DagsterInstance.ephemeral()


def _run(tmp_path, instance, reuse=True, config="pipeline.yaml"):
    path = str(tmp_path / config)
    res = materialize([upstream, doubled, split], partition_key="2026-07-01", instance=instance,
                      resources={"lookbench": LookbenchConfig(config_path=path, reuse_unchanged=reuse),
                                 "io_manager": TableIOManager(config_path=path)})
    assert res.success
    md = {e.asset_key.to_user_string(): e.materialization.metadata for e in res.get_asset_materialization_events()}
    return res, md


def _why(md, asset):
    v = md[asset].get("lookbench/recomputed_because")
    return None if v is None else v.value


def test_an_unchanged_asset_is_reused_with_its_metadata_and_a_chain_of_reruns_keeps_reusing(setup):
    tmp_path, instance = setup
    r1, md1 = _run(tmp_path, instance)
    assert STATE["calls"] == ["doubled", "split"]
    assert _why(md1, "doubled") == ["never recorded"]
    stored = stored_path(tmp_path / "data", "doubled", "2026-07-01").with_suffix(".parquet")
    before = (stored.read_bytes(), stored.stat().st_mtime_ns)
    for _ in range(2):  # each rerun rewrites the same values: the next one must still reuse them
        r, md = _run(tmp_path, instance)
        assert STATE["calls"] == ["doubled", "split"], "nothing recomputed"
        for a in ("doubled", "evens", "summary"):
            assert md[a]["lookbench/reused_from_run"].value == r1.run_id
            assert _why(md, a) is None
        assert md["doubled"]["rows"].value == 3 and md["summary"]["kind"].value == "json"
        assert r.output_for_node("doubled").equals(r1.output_for_node("doubled"))
        assert r.output_for_node("split", "summary") == {"total": 12}
        assert r.output_for_node("split", "evens").to_pylist() == [{"y": 4}]
        assert (stored.read_bytes(), stored.stat().st_mtime_ns) == before, "a reused value's file is not rewritten"
        assert json.loads(stored.with_suffix(".written.json").read_text())["run_id"] == r.run_id
        # the skipped stage's summary line still gives the counts of the run that computed it
        [said] = [e.user_message for e in instance.all_logs(r.run_id)
                  if e.step_key == "doubled" and e.user_message.startswith("skipped:")]
        assert said.splitlines()[0] == (f"skipped: unchanged since run {r1.run_id[:8]}, stored result reused; "
                                        "doubled: {'in': 3, 'kept': 3}"), said
        [said] = [e.user_message for e in instance.all_logs(r.run_id)
                  if e.step_key == "split" and e.user_message.startswith("skipped:")]
        assert said.splitlines()[0] == f"skipped: unchanged since run {r1.run_id[:8]}, stored result reused"


def test_a_changed_input_recomputes_the_asset_and_what_follows_from_it(setup):
    tmp_path, instance = setup
    _run(tmp_path, instance)
    STATE["upstream"] = [1, 2, 4]
    r, md = _run(tmp_path, instance)
    assert STATE["calls"] == ["doubled", "split"] * 2
    assert _why(md, "doubled") == ["input:upstream"] and _why(md, "evens") == ["input:doubled"]
    assert r.output_for_node("split", "summary") == {"total": 14}
    STATE["upstream"] = [1, 2, 3]  # back to the first input: computed again (only the last record is kept)
    _run(tmp_path, instance)
    assert STATE["calls"][-2:] == ["doubled", "split"] and len(STATE["calls"]) == 6


def test_a_file_read_in_place_a_config_change_and_force_recompute(setup):
    tmp_path, instance = setup
    _run(tmp_path, instance)
    (tmp_path / "data" / "legacy" / "tree" / "new.txt").write_text("b\n")
    _, md = _run(tmp_path, instance)
    assert _why(md, "doubled") == ["reads"] and _why(md, "evens") is None  # same values downstream: reused
    cfg = yaml.safe_load((tmp_path / "pipeline.yaml").read_text())
    (tmp_path / "other.yaml").write_text(yaml.safe_dump({**cfg, "dedup": {"hamming_threshold": 4}}))
    _, md = _run(tmp_path, instance, config="other.yaml")
    assert _why(md, "doubled") == ["config"]
    _, md = _run(tmp_path, instance, reuse=False, config="other.yaml")
    assert _why(md, "doubled") == ["reuse_unchanged is off (--force)"]
    assert STATE["calls"].count("doubled") == 4


def test_a_stored_value_changed_after_it_was_written_or_a_missing_side_effect_recomputes(setup):
    tmp_path, instance = setup
    r1, _ = _run(tmp_path, instance)
    stored = stored_path(tmp_path / "data", "doubled", "2026-07-01").with_suffix(".parquet")
    pq.write_table(pa.table({"y": [0, 0, 0]}), stored)  # edited by hand
    r, md = _run(tmp_path, instance)
    assert "changed after it was written" in _why(md, "doubled")[0]
    assert r.output_for_node("doubled")["y"].to_pylist() == [2, 4, 6], "recomputed, not the edited file"
    STATE["verify"] = "the report is gone"
    _, md = _run(tmp_path, instance)
    assert _why(md, "doubled") == ["the report is gone"]
    assert STATE["calls"].count("doubled") == 3


def test_a_direct_call_without_a_run_computes_and_records_nothing(setup):
    from dagster import build_asset_context

    tmp_path, _ = setup
    res = LookbenchConfig(config_path=str(tmp_path / "pipeline.yaml"))
    ctx = build_asset_context(partition_key="2026-07-01")
    out = doubled(ctx, lookbench=res, upstream=pa.table({"x": [5]}))
    assert out.value["y"].to_pylist() == [10]
    assert not (tmp_path / "data" / "memo" / "doubled").exists() or not any(
        (tmp_path / "data" / "memo" / "doubled").iterdir())


def test_build_and_demo_force_turn_reuse_off_and_the_environment_does_for_dagster(monkeypatch):
    from assets.definitions import build_defs
    from lookbench_pipeline.cli import build as cli_build
    from lookbench_pipeline.cli.main import main

    seen = []

    class Runner:
        def run_release(self, config, partition, on_event=None, **kw):
            seen.append(kw.get("reuse_unchanged", True))
            return {}

    cli_build._run_job(Runner(), None, None)
    cli_build._run_job(Runner(), None, None, force=True)
    assert seen == [True, False]
    import importlib

    cli_main = importlib.import_module("lookbench_pipeline.cli.main")
    called = []
    monkeypatch.setattr(cli_main, "cmd_build", lambda args: called.append(args.force) or 0)
    assert main(["build", "--force"]) == 0 and called[-1] is True
    assert main(["build"]) == 0 and called[-1] is False
    demo = []
    monkeypatch.setattr(cli_build, "cmd_build", lambda args: demo.append(args.force) or 0)
    monkeypatch.setattr(cli_build, "need_build_stack", lambda name: None)
    assert cli_build.cmd_demo(argparse.Namespace(verbose=False, force=True)) == 0 and demo == [True]

    monkeypatch.setenv("LOOKBENCH_REUSE_UNCHANGED", "0")
    assert build_defs().resources["lookbench"].reuse_unchanged is False
    monkeypatch.delenv("LOOKBENCH_REUSE_UNCHANGED")
    assert build_defs().resources["lookbench"].reuse_unchanged is True
    assert build_defs(reuse_unchanged=False).resources["lookbench"].reuse_unchanged is False


def test_the_real_assets_checks_see_a_swapped_generated_image_and_a_damaged_report(setup):
    """The side-effect checks of generated_images and evaluation, on files made here."""
    import hashlib

    from assets.aigen import results_in_place
    from assets.evaluate import evaluation_reads, report_in_place
    from assets.detect import detector_files
    from dagster import MetadataValue
    from lookbench_pipeline.config import load_config
    from lookbench_pipeline.evaluate import weight_caches
    from lookbench_pipeline.pipeline import store_of

    tmp_path, _ = setup
    cfg = load_config(tmp_path / "pipeline.yaml")
    store = store_of(cfg)
    # a generated image with its result record (aigen.ResultCache's format)
    img = cfg.layout.aigen_images / "r1.png"
    img.parent.mkdir(parents=True)
    img.write_bytes(b"picture one")
    cfg.layout.aigen_results.mkdir(parents=True)
    (cfg.layout.aigen_results / "r1.json").write_text(json.dumps({
        "request_id": "r1", "path": str(img), "sha256": hashlib.sha256(b"picture one").hexdigest(),
        "first_seen_at": "2026-12-01T00:00:00+00:00"}))
    values = {"generated_images": pa.table({"request_id": ["r1", "r2"], "path": [str(img), None]})}
    assert results_in_place(cfg, store, values, {}) is None
    img.write_bytes(b"another picture")  # swapped by hand
    assert "missing or changed" in results_in_place(cfg, store, values, {})
    (cfg.layout.aigen_results / "r1.json").unlink()
    assert "missing or changed" in results_in_place(cfg, store, values, {})
    # the evaluation's report: local folder read in place, every file in the store
    report = cfg.layout.report_dir("v20261202")
    report.mkdir(parents=True)
    (report / "index.html").write_text("<html>")
    (report / "leaderboard.parquet").write_bytes(b"x")
    md = {"evaluation": {"report": MetadataValue.path(str(report / "index.html")),
                         "report_store_prefix": MetadataValue.text("reports/v20261202")}}
    for name in ("index.html", "leaderboard.parquet"):
        store.put_bytes(f"reports/v20261202/{name}", (report / name).read_bytes())
    assert report_in_place(cfg, store, {}, md) is None
    store.delete("reports/v20261202/leaderboard.parquet")
    assert "leaderboard.parquet is no longer in the object store" in report_in_place(cfg, store, {}, md)
    assert report_in_place(cfg, store, {}, {}) == "the run that computed it recorded no report"
    assert cfg.layout.reports in evaluation_reads(cfg)
    # the local weight caches are part of what the detection and the evaluation read
    assert set(weight_caches()) <= set(detector_files(cfg)) and set(weight_caches()) <= set(evaluation_reads(cfg))


def test_the_terminal_line_of_a_skipped_stage_is_read_whole():
    """README promises a skipped stage's line says `skipped: unchanged since run …, stored result reused`: the
    build terminal shows a stage's first summary line cut to its width (110 columns when not a terminal), and the
    longest step name of the demo must not push the end of it off."""
    import io
    import logging

    from assets.reuse import reused_message
    from lookbench_pipeline.logs import BuildTerminal

    out, err = io.StringIO(), io.StringIO()
    term = BuildTerminal(out, err, width=100, notes={})
    for step in ("detect_garments", "aigen_detections", "generated_checks", "evaluation"):
        term.event("STEP_START", step, logging.DEBUG, "")
        term.event("LOG", step, logging.INFO, reused_message("eedb3f37-0c1d-4a55-9e0b-5f6a7b8c9d0e",
                                                             "2026-12-06T02:40:11.123456+00:00"))
        term.event("STEP_SUCCESS", step, logging.DEBUG, "")
    lines = out.getvalue().splitlines()
    assert len(lines) == 4
    for line in lines:
        assert "skipped: unchanged since run eedb3f37, stored result reused  (" in line, line
    # with the counts of the run that computed it, wrapped, never cut
    out = io.StringIO()
    term = BuildTerminal(out, err, width=100, notes={})
    term.event("STEP_START", "detect_garments", logging.DEBUG, "")
    term.event("LOG", "detect_garments", logging.INFO, reused_message(
        "eedb3f37-0c1d-4a55-9e0b-5f6a7b8c9d0e", "2026-12-06T02:40:11+00:00",
        "detections: {'images': 3, 'boxes': 7, 'kept': 7, 'dropped': 0, 'linked_items': 8, 'matched': 6}"))
    term.event("STEP_SUCCESS", "detect_garments", logging.DEBUG, "")
    flat = " ".join(out.getvalue().split())
    assert ("done detect_garments skipped: unchanged since run eedb3f37, stored result reused; detections: images 3, "
            "boxes 7, kept 7, dropped 0, linked_items 8, matched 6 (") in flat, flat
    assert "…" not in flat and all(len(line) <= 100 for line in out.getvalue().splitlines())
