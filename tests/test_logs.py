"""Structured logs carry the run id and stage; long stages report progress as log records (and tqdm bars in a
terminal); assets get their timing as metadata."""

import io
import json
import logging
import re

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
    (tmp_path / "s").mkdir(exist_ok=True)  # an empty store (readers never make one)
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


def test_output_to_file_takes_every_writer_and_keeps_the_terminal(tmp_path, capfd):
    """Python's prints, raw file-descriptor writes and a child process's ANSI-coloured output go to the log file;
    what the build writes to the yielded streams reaches the original stdout/stderr."""
    import os
    import subprocess
    import sys

    from lookbench_pipeline.logs import output_to_file

    log = tmp_path / "logs" / "build.log"
    with output_to_file(log) as (out, err):
        print("a python print")
        os.write(2, b"a raw stderr write\n")
        subprocess.run([sys.executable, "-c", "print('\\x1b[34mchild colour\\x1b[0m')"], check=True)
        out.write("for the terminal\n")
        err.write("a terminal warning\n")
    print("after")
    got = capfd.readouterr()
    assert got.out == "for the terminal\nafter\n" and got.err == "a terminal warning\n"
    text = log.read_text()
    assert "a python print" in text and "a raw stderr write" in text and "\x1b[34mchild colour" in text


def test_build_terminal_lines_checks_and_each_warning_once():
    from lookbench_pipeline.logs import BuildTerminal, stage_context

    out, err, log = io.StringIO(), io.StringIO(), io.StringIO()
    term = BuildTerminal(out, err, width=120, notes={"generated_images": "with deliberate demo faults"},
                         expected={"no image endpoint": "expected in the demo"}, log=log)  # one line a stage
    lib = logging.getLogger("lookbench_pipeline")
    level = lib.level
    lib.addHandler(term)
    lib.setLevel(logging.INFO)
    try:
        term.event("STEP_START", "image_intake", logging.DEBUG, "")
        with stage_context("image_intake"):
            logging.getLogger("lookbench_pipeline.progress").info("image intake: 2/27 images (7%)")
        term.event("LOG", "image_intake", logging.INFO, "image intake: 2/27 images (7%)")  # relayed by Dagster
        term.event("LOG", "image_intake", logging.INFO, "image intake: {'in': 27, 'accepted': 27, 'stats': {'x': 1}}")
        term.event("STEP_SUCCESS", "image_intake", logging.DEBUG, "")
        term.event("STEP_START", "images_schema", logging.DEBUG, "")
        term.event("ASSET_CHECK_EVALUATION", "images_schema", logging.DEBUG, "")
        term.event("STEP_SUCCESS", "images_schema", logging.DEBUG, "")
        term.event("STEP_START", "generated_images", logging.DEBUG, "")
        with stage_context("generated_images"):
            logging.getLogger("lookbench_pipeline.aigen.backends").warning(
                "aigen: no image endpoint configured (aigen.endpoint.base_url): the scripted endpoint draws them")
        term.event("LOG", "generated_images", logging.WARNING,  # the same warning, from the library and the asset
                   "aigen: no image endpoint configured (aigen.endpoint.base_url): the scripted endpoint draws them")
        term.event("LOG", "generated_images", logging.WARNING,
                   "generated images: no image endpoint configured (aigen.endpoint.base_url): the scripted endpoint")
        term.event("LOG", "generated_images", logging.INFO, "generated images: {'requests': 16, 'failed': 2}")
        term.event("STEP_SUCCESS", "generated_images", logging.DEBUG, "")
        term.event("CHECK_FAILED", "release_checks", logging.ERROR, "check release/counts failed (ERROR)")
        term.event("RUN_SUCCESS", None, logging.DEBUG, "")
    finally:
        lib.removeHandler(term)
        lib.setLevel(level)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("  done image_intake") and "image intake: in 27, accepted 27  (" in lines[0]
    assert not any("images_schema" in line for line in lines), "an asset check's step is counted, not listed"
    assert "generated images: requests 16, failed 2" in lines[1] and lines[1].endswith("[with deliberate demo faults]")
    assert lines[2] == "  asset checks: 1 passed, 1 failed (above)"
    warned = err.getvalue().splitlines()
    assert warned == ["  warning (expected in the demo): aigen: no image endpoint configured (aigen.endpoint.base_url): "
                      "the scripted endpoint draws them", "  warning: check release/counts failed (ERROR)"]
    assert "\x1b" not in out.getvalue() + err.getvalue()
    # the log file gets every line shown, in order, timestamped: a failed check is in the log, not only on screen
    logged = [line.split(" lookbench: ", 1)[1] for line in log.getvalue().splitlines()]
    assert logged == [line.strip() for line in [lines[0], warned[0], lines[1], warned[1], lines[2]]]
    assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \+0000 lookbench: ", line)
               for line in log.getvalue().splitlines())


def test_a_step_that_materialized_an_asset_is_listed_even_without_its_summary():
    """A step that ran asset checks beside its asset is an asset's step, not a check's: it gets its line (and note)
    even when no summary message of its own reached the terminal."""
    from lookbench_pipeline.logs import BuildTerminal

    out, err = io.StringIO(), io.StringIO()
    term = BuildTerminal(out, err, width=100, notes={"generated_checks": "with deliberate demo faults"})
    for kind in ("STEP_START", "ASSET_MATERIALIZATION", "ASSET_CHECK_EVALUATION", "STEP_SUCCESS"):
        term.event(kind, "generated_checks", logging.DEBUG, "")
    for kind in ("STEP_START", "ASSET_CHECK_EVALUATION", "STEP_SUCCESS"):
        term.event(kind, "images_schema", logging.DEBUG, "")
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("  done generated_checks")
    assert lines[0].endswith("[with deliberate demo faults]")


def test_a_failed_build_leaves_its_lines_and_its_reason_in_the_log(tmp_path, capfd):
    """The log file alone says what ran, what was warned and why the build failed: the terminal's lines and the
    failure (failed asset checks included) are written there too, not only on the screen."""
    from types import SimpleNamespace

    from lookbench_pipeline.cli.build import _build_terminal
    from lookbench_pipeline.layout import DataLayout

    cfg = SimpleNamespace(layout=DataLayout(tmp_path / "data"))

    def run(runner, on_event):
        on_event("STEP_START", "image_intake", logging.DEBUG, "")
        on_event("LOG", "image_intake", logging.INFO, "image intake: {'in': 3, 'accepted': 3}")
        on_event("STEP_SUCCESS", "image_intake", logging.DEBUG, "")
        on_event("CHECK_FAILED", "release_checks", logging.ERROR, "check release/counts failed (ERROR): in=3")
        raise runner.RunFailed("check release/counts failed (ERROR): in=3")

    assert _build_terminal(cfg, "build", False, run) == 1
    shown = capfd.readouterr()
    [log] = (tmp_path / "data" / "logs").glob("build-*.log")
    text = log.read_text()
    assert "done image_intake" in shown.out and "done image_intake" in text
    assert "warning: check release/counts failed (ERROR): in=3" in shown.err
    assert "lookbench: warning: check release/counts failed (ERROR): in=3" in text
    assert "lookbench: build failed:\ncheck release/counts failed (ERROR): in=3" in text


def test_a_stage_line_wider_than_the_terminal_is_wrapped_never_cut():
    """README: a line per stage with its counts. A summary wider than the terminal (80 to 120 columns) goes on
    indented continuation lines; no count is cut off with an ellipsis, and no line is wider than the terminal."""
    from lookbench_pipeline.logs import BuildTerminal

    counts = {f"count_{i}": 1000 + i for i in range(30)}
    for width in (80, 100, 120):
        out, err, log = io.StringIO(), io.StringIO(), io.StringIO()
        term = BuildTerminal(out, err, width=width, notes={"crawl": "with deliberate demo faults"}, log=log)
        term.event("STEP_START", "crawl", logging.DEBUG, "")
        term.event("LOG", "crawl", logging.INFO, f"crawl demo week 2026-11-30: {counts}\nsecond line")
        term.event("STEP_SUCCESS", "crawl", logging.DEBUG, "")
        lines = out.getvalue().splitlines()
        assert len(lines) > 1 and lines[0].startswith("  done crawl ")
        assert all(len(line) <= width for line in lines), lines
        assert all(line.startswith(" " * 28) and line[28] != " " for line in lines[1:]), lines
        assert "…" not in out.getvalue() and lines[-1].endswith("s)  [with deliberate demo faults]")
        flat = " ".join(out.getvalue().split())
        assert all(f"count_{i} {1000 + i}{',' if i < 29 else ' (0 s)'}" in flat for i in range(30)), flat
        assert "second line" not in flat  # the first line of the summary only
        assert len(log.getvalue().splitlines()) == len(lines)


def test_steps_dagster_did_not_run_after_a_failure_are_one_line_and_a_long_warning_says_where_it_is_whole():
    """A failed stage abandons every stage after it, and Dagster logs an error for each ("Dependencies for step …
    Not executing."): the terminal gathers them into one wrapped line at the end of the run, not a warning each,
    and cuts nothing. The events are those of a real Dagster run (``assets.runner.plain_event``)."""
    from dagster import DagsterInstance, asset, materialize

    from assets.runner import plain_event
    from lookbench_pipeline.logs import BuildTerminal

    @asset
    def upstream():
        raise RuntimeError("upstream broke")

    def downstream(i):
        @asset(name=f"image_clusters_stage_{i:02d}", deps=[upstream])
        def _a():
            return i
        return _a

    with DagsterInstance.ephemeral() as instance:
        result = materialize([upstream, *(downstream(i) for i in range(30))], instance=instance,
                             raise_on_error=False)
        assert not result.success
        out, err, log = io.StringIO(), io.StringIO(), io.StringIO()
        term = BuildTerminal(out, err, width=100, log=log)
        for entry in instance.all_logs(result.run_id):
            term.event(*plain_event(entry))
    shown = err.getvalue()
    assert "Not executing" not in shown and "Dependencies for step" not in shown, shown
    assert shown.count("  not run ") == 1, shown
    assert "…" not in shown and all(len(line) <= 100 for line in shown.splitlines())
    flat = " ".join(shown.split())
    assert all(f"image_clusters_stage_{i:02d}" in flat for i in range(30)), flat
    assert "FAILED upstream" in shown

    # a warning longer than three terminal lines: its start on the terminal, the whole of it in the log file
    out, err, log = io.StringIO(), io.StringIO(), io.StringIO()
    term = BuildTerminal(out, err, width=80, log=log)
    long = " ".join(f"word{i}" for i in range(200))
    term.warning(long, "crawl")
    [line] = err.getvalue().splitlines()
    assert len(line) <= 3 * 80 + 40 and line.endswith("(whole in the log file)")
    assert long in log.getvalue()


def test_a_failed_asset_check_is_shown_whole_its_name_on_its_step_line():
    """A failed check's line says which check failed and why, whole: wrapped onto indented lines rather than cut with
    "…", never taken for a repeat of another warning (two checks' lines look alike); its step's FAILED line names
    the check rather than Dagster's 'Execution of step "…" failed.' cut at the terminal's width. The events are
    those of a real Dagster run (``assets.runner.plain_event``)."""
    from dagster import (AssetCheckResult, AssetCheckSeverity, DagsterInstance, Definitions, asset, asset_check)

    from assets.runner import plain_event
    from lookbench_pipeline.logs import BuildTerminal

    why = ("connection refused: nothing answered at http://127.0.0.1:9/v1 (nothing listens on 127.0.0.1:9): is "
           "the server running, on that port? Not a timeout: a longer timeout will not help")

    @asset
    def generated_images():
        return 1

    @asset_check(asset=generated_images, name="generation_failure_rate", blocking=True)
    def rate(generated_images):
        return AssetCheckResult(passed=False, severity=AssetCheckSeverity.ERROR, metadata={
            "rate": 1.0, "asked": 16, "failed_by_reason": {"connection_error": 16}, "detail": why})

    @asset_check(asset=generated_images, name="generation_failure_count", blocking=True)
    def count(generated_images):
        return AssetCheckResult(passed=False, severity=AssetCheckSeverity.ERROR, metadata={"rate": 1.0, "asked": 16})

    @asset(deps=[generated_images])
    def release():
        return 2

    job = Definitions(assets=[generated_images, release],
                      asset_checks=[rate, count]).get_implicit_global_asset_job_def()
    with DagsterInstance.ephemeral() as instance:
        result = job.execute_in_process(instance=instance, raise_on_error=False)
        assert not result.success
        events = [plain_event(e) for e in instance.all_logs(result.run_id)]
    for width in (80, 110):
        out, err, log = io.StringIO(), io.StringIO(), io.StringIO()
        term = BuildTerminal(out, err, width=width, log=log)
        # a warning like the checks' lines, in the same step, does not swallow them
        term.event("LOG", "generated_images_generation_failure_rate", logging.WARNING,
                   "check generated_images/generation_failure_rate is slow")
        for ev in events:
            term.event(*ev)
        shown = err.getvalue()
        assert "…" not in shown, shown
        assert all(len(line) <= width for line in shown.splitlines()), shown
        flat = " ".join(shown.split())
        assert ("warning: check generated_images/generation_failure_rate failed (ERROR): asked=16, "
                f"detail={why}, failed_by_reason={{'connection_error': 16}}, rate=1.0") in flat, shown
        assert "warning: check generated_images/generation_failure_count failed (ERROR): asked=16, rate=1.0" in flat
        for check in ("generation_failure_rate", "generation_failure_count"):
            assert (f"FAILED generated_images_{check}: check generated_images/{check} failed (above)") in flat, shown
        assert "asset checks: 0 passed, 2 failed (above)" in out.getvalue()
        assert " ".join(why.split()) in " ".join(log.getvalue().split())
        for check in ("generation_failure_rate", "generation_failure_count"):  # one line each in the log file
            assert any(line.endswith(f"FAILED generated_images_{check}: check generated_images/{check} failed "
                                     "(above)") for line in log.getvalue().splitlines()), log.getvalue()
