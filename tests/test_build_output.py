"""The demo build's terminal, as `make demo` runs it (DAGSTER_HOME holding the project's dagster.yaml, so the
library's records also reach Dagster's console): a line per stage, each warning once, the deliberate demo faults
labelled, the leaderboard once, no ANSI codes, one screen plus the leaderboard; everything else in the log file,
and the Dagster runs keep their structured event logs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SCREEN = 60  # lines: one terminal screen, the leaderboard apart


def test_the_demo_build_fits_one_screen_plus_the_leaderboard(tmp_path, monkeypatch):
    site = yaml.safe_load((ROOT / "lookbench_pipeline/data/sites/demo.yaml").read_text())
    site.update(demo_products=12, demo_looks=3)  # the demo, smaller
    (tmp_path / "demo.yaml").write_text(yaml.safe_dump(site))
    drop = tmp_path / "drop/studio"
    drop.mkdir(parents=True)
    (drop / "notes.txt").write_text("not an image")  # listed by drop_items, rejected not_an_image by the intake
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"data_dir": "data", "sites": ["demo.yaml"], "drops": [
        {"name": "shop-photos", "path": str(tmp_path / "drop"), "subfolders": {"studio": "real_studio_flat:query"}}]}))
    home = tmp_path / "dagster-home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    # recorded in the temporary DAGSTER_HOME, as make demo records in the checkout (not the tests' ephemeral instance)
    env = {k: v for k, v in os.environ.items()
           if k not in ("LOOKBENCH_LOG_FORMAT", "LOOKBENCH_CONFIG", "LOOKBENCH_DAGSTER_EPHEMERAL")}
    env.update(LOOKBENCH_CONFIG=str(tmp_path / "c.yaml"), DAGSTER_HOME=str(home),
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "crawlers"), env.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "lookbench_pipeline.cli", "demo"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out, err = proc.stdout, proc.stderr
    assert "\x1b" not in out + err, "no ANSI escape codes"

    warnings = [line for line in (out + err).splitlines() if line.lstrip().startswith("warning")]
    assert len(warnings) == len(set(warnings))
    assert sum("no image endpoint configured" in w for w in warnings) == 1, warnings  # library + asset: once
    assert all("BetaWarning" not in w and "PreviewWarning" not in w for w in warnings)
    assert "BetaWarning" not in out + err and "PreviewWarning" not in out + err

    head, sep, board = out.partition("\nEvaluation (the leaderboard")
    assert sep, out[-2000:]
    assert board.count("# LookBench leaderboard") == 1 and "Evaluation (percent)" not in out, "the leaderboard once"
    assert len(head.splitlines()) + len(err.splitlines()) <= SCREEN, head + err
    for stage in ("crawl", "image_intake", "detect_garments", "release", "evaluation"):
        assert f"  done {stage} " in head
    # README: a line per stage with its counts, wrapped onto indented lines rather than cut (110 columns here)
    stages: dict[str, str] = {}
    for line in head.splitlines():
        if line.startswith("  done "):
            step = line.split()[1]
            stages[step] = line
        elif line.startswith(" " * 28) and stages:
            assert line[28] != " ", line
            stages[step] += " " + line.strip()
    assert all(len(line) <= 110 for line in head.splitlines() if line.startswith(("  done ", " " * 28))), head
    for step, line in stages.items():
        text = " ".join(line.split()[2:])
        assert "…" not in text and re.search(r"[a-z] \d", text), f"no counts on the line of {step}: {line}"
    assert "drop items: files 1 in 1 drops (shop-photos 1)" in stages["drop_items"]
    n_in, accepted, rejected = map(int, re.search(r"image intake: in (\d+), accepted (\d+), rejected (\d+) "
                                                  r"\(not_an_image 1\)", stages["image_intake"]).groups())
    assert n_in == accepted + rejected and rejected == 1
    assert re.search(r"v\d{8}: candidates \d+ -> queries \d+, gallery \d+, rejected \d+", stages["release_candidate"])
    # a stage's line is its summary even when it logs other information (the endpoint used) as well
    assert re.search(r"generated images: requests \d+: generated \d+, failed \d+", stages["generated_images"]), \
        stages["generated_images"]
    assert re.search(r"subsets 4 \(\d+ queries\), legacy 2; best overall \S+: item/fine/coarse R@1 "
                     r"[\d.]+/[\d.]+/[\d.]+", stages["evaluation"]), stages["evaluation"]
    # the crawl's rows reconcile (kept + redirected + rejected; the demo shop has no redirect, so the line names
    # none), the rejections by reason, as the intake's line gives them
    n_pages, kept, redirected, n_rejected, by_reason = re.search(
        r"pages (\d+) \(kept (\d+)(?:, redirected (\d+))?, rejected (\d+) \(([^()]*)\)\)", stages["crawl"]).groups()
    other = int(kept) + int(redirected or 0)
    assert int(n_pages) == other + int(n_rejected) == other + sum(
        int(part.rsplit(" ", 1)[1]) for part in by_reason.split(", ")), stages["crawl"]
    # the stage lines label the demo endpoint's faults; the release's counts line does so only in a build without an
    # image drop (a drop's intake rejections are no faults: cli/build.py), and this one has a drop
    assert "[with deliberate demo faults]" in head
    assert "asset checks: " in head
    assert "Epoch" not in out + err and "Ultralytics" not in out + err

    [log] = (tmp_path / "data/logs").glob("demo-*.log")
    text = log.read_text(encoding="utf-8", errors="replace")
    assert "dagster - INFO - release_job" in text, "Dagster's console went to the log file"
    if "training the demo detector" in text:  # trained in this run (not found in the session's cache)
        assert "Epoch" in text

    # the Dagster runs keep their structured event logs
    from dagster import DagsterInstance
    from dagster._core.events import DagsterEventType

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    instance = DagsterInstance.get()
    runs = instance.get_runs()
    [release_run] = [r for r in runs if r.job_name == "release_job"]
    logs = instance.all_logs(release_run.run_id)
    steps = {e.step_key for e in logs
             if e.dagster_event and e.dagster_event.event_type == DagsterEventType.STEP_SUCCESS}
    assert {"image_intake", "release", "evaluation"} <= steps
    # the summary's first line is what the terminal shows; every count follows in Dagster's event log
    assert any(e.user_message.startswith(f"image intake: in {n_in}, accepted {accepted}, rejected 1")
               and f"\nimage intake: {{'in': {n_in}," in e.user_message for e in logs)
