"""Structured logs carry the run id and stage; long stages report progress as log records (and tqdm bars in a
terminal); assets get their timing as metadata."""

import io
import json
import logging

import pytest

from lookbench_pipeline.logs import Progress, configure, stage_context


@pytest.fixture
def json_stream():
    stream = io.StringIO()
    lib = logging.getLogger("lookbench_pipeline")
    level = lib.level
    handler = configure("json", stream=stream)
    yield stream
    lib.removeHandler(handler)
    lib.setLevel(level)


def _records(stream):
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_carry_run_id_and_stage(json_stream):
    log = logging.getLogger("lookbench_pipeline.images")
    with stage_context("image_intake", "run-123"):
        log.warning("intake: %s failed to decode", "x.jpg")
        with stage_context("inner"):  # the enclosing run id is kept
            log.info("nested")
    log.info("outside")
    recs = _records(json_stream)
    assert recs[0]["run_id"] == "run-123" and recs[0]["stage"] == "image_intake"
    assert recs[0]["message"] == "intake: x.jpg failed to decode" and recs[0]["level"] == "WARNING"
    assert recs[0]["logger"] == "lookbench_pipeline.images" and recs[0]["ts"].endswith("+00:00")
    assert recs[1]["run_id"] == "run-123" and recs[1]["stage"] == "inner"
    assert recs[2]["run_id"] is None and recs[2]["stage"] is None


def test_progress_is_logged_at_intervals_and_at_the_end(json_stream):
    with stage_context("contamination_check", "run-9"):
        with Progress("hashing", 100, "files", bar=False, every_frac=0.25, every_s=3600) as p:
            for _ in range(100):
                p.update()
    recs = [r for r in _records(json_stream) if "progress" in r]
    done = [r["progress"]["done"] for r in recs]
    assert done == [25, 50, 75, 100] and recs[-1]["progress"]["final"]
    assert all(r["run_id"] == "run-9" and r["stage"] == "contamination_check" for r in recs)
    assert recs[0]["progress"]["total"] == 100 and recs[0]["progress"]["eta_s"] is not None
    assert "hashing: 25/100 files (25%" in recs[0]["message"]


def test_progress_with_unknown_total_reports_by_time(json_stream):
    p = Progress("index", 0, "files", bar=False, every_s=0.0)
    p.update(3)
    p.close()
    p.close()  # closing twice reports once
    recs = [r for r in _records(json_stream) if "progress" in r]
    assert [r["progress"]["done"] for r in recs] == [3, 3] and recs[-1]["progress"]["final"]
    assert recs[-1]["message"].startswith("index: 3 files (") and "/0" not in recs[-1]["message"]


def test_unknown_log_format_is_refused():
    with pytest.raises(ValueError, match="text or json"):
        configure("xml")


def test_observed_asset_logs_with_the_dagster_run_id_and_reports_its_duration(json_stream):
    from dagster import AssetExecutionContext, Output, asset, materialize

    from assets.common import observed

    @asset
    @observed
    def tiny(context: AssetExecutionContext) -> Output[int]:
        logging.getLogger("lookbench_pipeline.pipeline").info("working")
        return Output(1, metadata={"rows": 1})

    res = materialize([tiny])
    assert res.success
    [rec] = [r for r in _records(json_stream) if r["message"] == "working"]
    assert rec["run_id"] == res.run_id and rec["stage"] == "tiny"
    [mat] = res.get_asset_materialization_events()
    md = mat.materialization.metadata
    assert md["rows"].value == 1 and md["duration_s"].value >= 0


def test_cli_writes_json_logs(tmp_path, capsys):
    from lookbench_pipeline.cli import main

    lib = logging.getLogger("lookbench_pipeline")
    before = (list(lib.handlers), lib.propagate, lib.level)
    try:
        assert main(["--log-format", "json", "releases", "--config", str(_empty_config(tmp_path))]) == 0
        assert "no releases" in capsys.readouterr().out
        logging.getLogger("lookbench_pipeline.store").warning("from the library")
        [line] = [ln for ln in capsys.readouterr().err.splitlines() if "from the library" in ln]
        assert json.loads(line)["level"] == "WARNING"
    finally:
        lib.handlers[:], lib.propagate, lib.level = before


def _empty_config(tmp_path):
    import yaml

    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump({"data_dir": "d", "store": {"url": "s"}}))
    return p


def test_cli_prints_library_info_records_once(tmp_path):
    """Dagster's python_logs sets the library's loggers to INFO and prints their records on its console; the CLI's
    own fallback handler then prints warnings only, so a progress line is not printed twice."""
    import subprocess
    import sys

    code = ("import logging, sys; from lookbench_pipeline.cli import main; main(['releases', '--config', sys.argv[1]]);"
            "lg = logging.getLogger('lookbench_pipeline.progress'); lg.setLevel(logging.INFO);"
            "lg.info('an info record'); lg.warning('a warning record')")
    proc = subprocess.run([sys.executable, "-c", code, str(_empty_config(tmp_path))], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120, env={**__import__("os").environ, "LOOKBENCH_LOG_FORMAT": ""})
    assert proc.returncode == 0, proc.stderr
    assert "a warning record" in proc.stderr and "an info record" not in proc.stderr
