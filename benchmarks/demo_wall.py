"""Wall time of the README's first command, ``make demo`` (``.venv/bin/lookbench demo``), as a fresh install
runs it, and of an unchanged rerun right after.

    .venv/bin/python benchmarks/demo_wall.py [--reruns 1] [--keep DIR]

"After install" means cold caches: a new working folder (so a new ``data/``: no crawl state, no trained demo
detector, no embedding cache, no stored release), a new Dagster instance (``DAGSTER_HOME``) and a new numba cache
(``NUMBA_CACHE_DIR``: the compiled near-duplicate kernels are built again, as on a fresh checkout). The installed
packages are what ``make`` installed (the venv's import caches, ``.pyc`` files, are warm: a fresh ``pip install``
compiles them, which is install time, not the demo's). The rerun uses the same folder, instance and caches, as a
second ``make demo`` in a checkout does.

Each run is the command as the README gives it, in a child process at normal priority; the figure is its wall
clock, with the child's CPU time (user + system) and the 1-minute load average before and after (other work on the
machine shows there). The command's own per-stage lines are kept in ``<folder>/run-<n>.out``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_once(folder: Path, env: dict[str, str], n: int) -> dict:
    """One ``lookbench demo`` in ``folder``: wall seconds, CPU seconds of the child, load averages, exit code."""
    exe = Path(sys.executable).parent / "lookbench"
    cmd = [str(exe), "demo"] if exe.is_file() else [sys.executable, "-m", "lookbench_pipeline.cli", "demo"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    with open(folder / f"run-{n}.out", "wb") as out:
        rc = subprocess.run(cmd, cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"run": n, "wall_s": wall, "cpu_s": cpu, "load_before": load0, "load_after": os.getloadavg()[0], "rc": rc}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reruns", type=int, default=1, help="unchanged reruns after the first run")
    ap.add_argument("--keep", type=Path, help="run in this (new) folder and keep it, instead of a temporary one")
    args = ap.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="demo-wall-"))
    folder.mkdir(parents=True, exist_ok=True)
    if any(folder.iterdir()):
        raise SystemExit(f"{folder} is not empty: the first run must start from nothing")
    (folder / "dagster_home").mkdir()
    (folder / "dagster_home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {**os.environ, "DAGSTER_HOME": str(folder / "dagster_home"), "NUMBA_CACHE_DIR": str(folder / "numba"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "crawlers"), os.environ.get("PYTHONPATH", "")])}
    env.pop("LOOKBENCH_CONFIG", None)
    print(f"{os.cpu_count()} CPUs; load average at start {os.getloadavg()}; folder {folder}")
    rows = [run_once(folder, env, 0)]
    for n in range(1, args.reruns + 1):
        rows.append(run_once(folder, env, n))
    print("| run | wall s | child CPU s | load avg before → after | exit |\n|---|---|---|---|---|")
    for r in rows:
        name = "first (cold caches)" if r["run"] == 0 else f"unchanged rerun {r['run']}"
        print(f"| {name} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['load_before']:.2f} → {r['load_after']:.2f} "
              f"| {r['rc']} |")
    for r in rows[1:]:
        print(f"rerun {r['run']}: {r['wall_s'] / rows[0]['wall_s']:.0%} of the first run's wall time")
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    return 0 if all(r["rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
