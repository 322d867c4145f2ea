"""`lookbench build --config F` with a configuration outside UTC: the CLI names the file to the Dagster layer before
importing it, so Dagster's partitions are defined in the file's time zone without LOOKBENCH_TIMEZONE exported."""

import argparse
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DEMO_SITE = ROOT / "lookbench_pipeline/data/sites/demo.yaml"


class _Stop(Exception):
    pass


def test_build_hands_its_configuration_to_dagster_before_importing_it(tmp_path, monkeypatch):
    import lookbench_pipeline.cli.build as build

    for var in ("LOOKBENCH_CONFIG", "LOOKBENCH_TIMEZONE"):
        monkeypatch.setenv(var, "unset below; restored after the test")
        monkeypatch.delenv(var)
    cfg = tmp_path / "paris.yaml"
    cfg.write_text(yaml.safe_dump({"data_dir": "data", "sites": [str(DEMO_SITE)], "timezone": "Europe/Paris"}))
    loaded = []

    def runner():  # what the real runner's import does: the Dagster definitions, in this environment
        code = ("import assets.definitions as d, assets.partitions as p; "
                "print(p.RELEASE_TIMEZONE, d.defs.resolve_job_def('crawl_job').tags['lookbench/config'])")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               "PYTHONWARNINGS": "ignore"}
        loaded.append(subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                                     text=True, timeout=300))

        def run_release(*a, **k):
            raise _Stop("the run itself is not this test's")
        return argparse.Namespace(RunFailed=_Stop, run_release=run_release)

    monkeypatch.setattr(build, "_build_runner", runner)
    args = argparse.Namespace(config=str(cfg), partition=None, verbose=True, demo=False, force=False)
    assert build.cmd_build(args) == 1
    [proc] = loaded
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[-2] == f"Europe/Paris {cfg.resolve()}"
