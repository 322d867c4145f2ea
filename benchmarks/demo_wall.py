"""Wall time of the README's first command, ``make demo`` (``.venv/bin/lookbench demo``), as a fresh install
runs it, and of an unchanged rerun right after.

    .venv/bin/python benchmarks/demo_wall.py [--reruns 1] [--force-rerun] [--keep DIR]

"After install" means cold caches: a new working folder (so a new ``data/``: no crawl state, no trained demo
detector, no embedding cache, no stored release), a new Dagster instance (``DAGSTER_HOME``) and a new numba cache
(``NUMBA_CACHE_DIR``: the compiled near-duplicate kernels are built again, as on a fresh checkout). The installed
packages are what ``make`` installed (the venv's import caches, ``.pyc`` files, are warm: a fresh ``pip install``
compiles them, which is install time, not the demo's). The rerun uses the same folder, instance and caches, as a
second ``make demo`` in a checkout does.

Each run is the command as the README gives it, in a child process at normal priority; the figure is its wall
clock, with the child's CPU time (user + system) and the 1-minute load average before and after (other work on the
machine shows there). The command's own per-stage lines are kept in ``<folder>/run-<n>.out``; the stages a run
skipped (its lines saying ``skipped:``, assets/reuse.py) are listed, and its output — every published file and
every stored asset value — is compared with the first run's, byte for byte (the files that differ are named). ``--force-rerun`` adds the peer: the
same unchanged rerun with ``lookbench demo --force``, which computes every stage as a rerun did before stages
were reused.
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


def output_files(folder: Path) -> dict[str, str]:
    """sha256 of every published file (``data/store/releases/``) and every stored asset value
    (``data/assets/**.parquet|json``), by path relative to ``data/``."""
    import hashlib

    data = folder / "data"
    files = sorted([*(data / "store" / "releases").rglob("*"), *(data / "assets").rglob("*.parquet"),
                    *(p for p in (data / "assets").rglob("*.json") if not p.name.endswith(".written.json"))])
    return {str(p.relative_to(data)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files if p.is_file()}


def differences(a: dict[str, str], b: dict[str, str]) -> list[str]:
    """The paths whose content differs, or that only one of ``a`` and ``b`` has."""
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def run_once(folder: Path, env: dict[str, str], n: int, force: bool = False) -> dict:
    """One ``lookbench demo`` in ``folder``: wall seconds, CPU seconds of the child, load averages, exit code, the
    :func:`output_digest` after it, and the stages it skipped (lines saying ``skipped:``)."""
    exe = Path(sys.executable).parent / "lookbench"
    cmd = [str(exe), "demo"] if exe.is_file() else [sys.executable, "-m", "lookbench_pipeline.cli", "demo"]
    cmd += ["--force"] if force else []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    with open(folder / f"run-{n}.out", "wb") as out:
        rc = subprocess.run(cmd, cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = (folder / f"run-{n}.out").read_text(errors="replace").splitlines()
    skipped = [ln.split()[1] for ln in lines if ln.strip().startswith("done ") and " skipped: " in ln]
    return {"run": n, "wall_s": wall, "cpu_s": cpu, "load_before": load0, "load_after": os.getloadavg()[0], "rc": rc,
            "output": output_files(folder), "skipped": skipped, "force": force}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reruns", type=int, default=1, help="unchanged reruns after the first run")
    ap.add_argument("--keep", type=Path, help="run in this (new) folder and keep it, instead of a temporary one")
    ap.add_argument("--force-rerun", action="store_true",
                    help="then the peer: one more unchanged rerun with `lookbench demo --force` (every stage computed)")
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
    if args.force_rerun:
        rows.append(run_once(folder, env, args.reruns + 1, force=True))
    print("| run | wall s | child CPU s | load avg before → after | exit | release files as the first run's | "
          "asset values that differ from the first run's | stages skipped |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        name = ("first (cold caches)" if r["run"] == 0 else
                "unchanged rerun, `--force` (every stage computed)" if r["force"] else f"unchanged rerun {r['run']}")
        diff = differences(rows[0]["output"], r["output"])
        released = [d for d in diff if d.startswith("store/")]
        same = "-" if r["run"] == 0 else ("byte-identical" if not released else "DIFFER: " + ", ".join(released))
        other = "-" if r["run"] == 0 else (", ".join(d for d in diff if not d.startswith("store/")) or "none")
        print(f"| {name} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['load_before']:.2f} → {r['load_after']:.2f} "
              f"| {r['rc']} | {same} | {other} | {', '.join(r['skipped']) or '-'} |")
    for r in rows[1:]:
        print(f"rerun {r['run']}{' (--force)' if r['force'] else ''}: {r['wall_s'] / rows[0]['wall_s']:.0%} of the "
              "first run's wall time")
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    return 0 if all(r["rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
