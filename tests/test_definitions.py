"""A snapshot of the Dagster definitions: every asset (group, partitions, upstream assets and their partition
mappings, kinds, pool, code version, checks), the jobs and what they select, the schedules, the sensors and the
resources with their typed config fields. A change to the wiring shows up here as a reviewable diff of
``tests/snapshots/definitions.json``; after a deliberate change, rewrite it with
``LOOKBENCH_UPDATE_SNAPSHOTS=1 make test`` (or this file alone) and commit the diff with the change."""

import json
import os
from pathlib import Path

SNAPSHOT = Path(__file__).parent / "snapshots" / "definitions.json"


def _partitions(pdef) -> str | None:
    if pdef is None:
        return None
    from assets.partitions import RELEASE_TIMEZONE

    name = type(pdef).__name__
    if hasattr(pdef, "cron_schedule"):
        tz = "RELEASE_TIMEZONE" if pdef.timezone == RELEASE_TIMEZONE else pdef.timezone  # as configured
        return f"{name}({pdef.cron_schedule}, start={pdef.start.strftime('%Y-%m-%d')}, tz={tz}, " \
               f"end_offset={pdef.end_offset})"
    if hasattr(pdef, "partitions_defs"):
        return f"{name}(" + ", ".join(f"{d.name}={_partitions(d.partitions_def)}" for d in pdef.partitions_defs) + ")"
    return f"{name}({getattr(pdef, 'name', '')})"


def snapshot() -> dict:
    from assets.definitions import ORIGIN_TAGS, build_defs

    defs = build_defs()
    graph = defs.resolve_asset_graph()
    assets = {}
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        mappings = node.partition_mappings or {}
        assets[key.to_user_string()] = {
            "group": node.group_name,
            "partitions": _partitions(node.partitions_def),
            "upstream": {p.to_user_string(): type(mappings[p]).__name__ if p in mappings else None
                         for p in sorted(node.parent_keys, key=lambda k: k.to_user_string())},
            "kinds": sorted(node.kinds),
            "pools": sorted(node.pools or []),
            "code_version": node.code_version,
            "checks": sorted(c.name for c in node.check_keys),
            "op": node.assets_def.op.name,
        }
    jobs = {}
    for job in defs.resolve_all_job_defs():
        if job.name.startswith("__"):
            continue
        jobs[job.name] = {"partitions": _partitions(job.partitions_def),
                          "assets": sorted(k.to_user_string() for k in job.asset_layer.selected_asset_keys),
                          "tags": {k: "<origin_tags>" if k in ORIGIN_TAGS else v for k, v in sorted(job.tags.items())}}
    schedules = {s.name: {"cron": s.cron_schedule, "job": s.job_name} for s in defs.schedules}
    sensors = sorted(s.name for s in defs.sensors)
    # a resource configured at launch (PartialResource) by the class it builds
    classes = {k: getattr(r, "resource_cls", type(r)) for k, r in defs.resources.items()}

    def field(r, name: str, info) -> str:  # a nested resource: the class it is bound to
        value = getattr(r, name, None) if hasattr(r, "model_fields") else None
        nested = getattr(value, "resource_cls", None)
        return f"resource {nested.__name__}" if nested else str(info.annotation)

    resources = {k: {"type": cls.__name__,
                     "config": {f: field(defs.resources[k], f, info) for f, info in cls.model_fields.items()}}
                 for k, cls in sorted(classes.items())}
    return {"assets": assets, "jobs": jobs, "schedules": schedules, "sensors": sensors, "resources": resources}


def test_definitions_match_the_snapshot():
    got = snapshot()
    if os.environ.get("LOOKBENCH_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(SNAPSHOT.read_text())
    for section in want:
        assert got[section] == want[section], (
            f"the Dagster definitions' {section} changed: if deliberate, rewrite {SNAPSHOT} with "
            "LOOKBENCH_UPDATE_SNAPSHOTS=1 and commit its diff")
    assert set(got) == set(want)


def test_every_run_is_tagged_with_the_configuration_it_builds_from(tmp_path, monkeypatch):
    """The demo, ``make real`` and another configuration materialise the same asset keys and partitions in one
    instance: the jobs' runs carry the configuration file, the data folder and the store (README.md, ``make dev``),
    a store URL's credentials left out."""
    import yaml

    from assets.definitions import build_defs, origin_tags

    monkeypatch.delenv("LOOKBENCH_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    cfg = tmp_path / "shop.yaml"
    cfg.write_text(yaml.safe_dump({"data_dir": "shop-data",
                                   "store": {"url": "https://reader:s3cret@mirror.example/lb"}}))
    tags = origin_tags(str(cfg))
    assert tags == {"lookbench/config": str(cfg.resolve()),
                    "lookbench/data_dir": str((tmp_path / "shop-data").resolve()),
                    "lookbench/store": "https://mirror.example/lb"}
    for job in ("crawl_job", "release_job"):
        got = build_defs(str(cfg)).resolve_job_def(job).tags
        assert {k: got.get(k) for k in tags} == tags and "s3cret" not in str(got)
    demo = build_defs().resolve_job_def("release_job").tags
    assert demo["lookbench/config"] == "built-in demo" and demo["lookbench/job"] == "release"
    assert demo["lookbench/data_dir"] != tags["lookbench/data_dir"]


def test_the_dagster_cli_loads_and_lists_the_definitions_without_a_server():
    """README's `dagster definitions validate -w workspace.yaml` and `dagster job list -w workspace.yaml`, as
    written, from the checkout: the definitions load (exit 0) and the two jobs are listed with their steps."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    dagster = Path(sys.executable).parent / "dagster"
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    ok = subprocess.run([str(dagster), "definitions", "validate", "-w", "workspace.yaml"], cwd=root, env=env,
                        capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and "All code locations passed validation" in ok.stdout + ok.stderr, ok.stderr[-2000:]
    jobs = subprocess.run([str(dagster), "job", "list", "-w", "workspace.yaml"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)
    assert jobs.returncode == 0, jobs.stderr[-2000:]
    assert {"Job: crawl_job", "Job: release_job"} <= {line.strip() for line in jobs.stdout.splitlines()}
    assert "crawl" in jobs.stdout and "evaluation" in jobs.stdout


def test_the_schedules_start_stopped_and_the_documented_command_starts_one(tmp_path):
    """``make dev`` on the demo never crawls nor publishes by itself: both schedules are stopped by default, README
    and docs/DEPLOY.md say so and how to turn them on, and that command, as written, starts one."""
    import subprocess
    import sys

    from dagster import DefaultScheduleStatus

    from assets.definitions import build_defs

    defs = build_defs()
    names = ("semiannual_release", "weekly_crawl")
    assert {n: defs.resolve_schedule_def(n).default_status for n in names} == {
        n: DefaultScheduleStatus.STOPPED for n in names}
    root = Path(__file__).resolve().parents[1]
    command = "dagster schedule start semiannual_release -w workspace.yaml"
    for doc in ("README.md", "docs/DEPLOY.md"):
        text = " ".join((root / doc).read_text().split())
        assert command in text and "stopped" in text.lower(), doc
    (tmp_path / "dagster.yaml").write_text("")  # an instance under tmp_path (the checkout's names .dagster/)
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    dagster = str(Path(sys.executable).parent / "dagster")
    start = subprocess.run([dagster, *command.split()[1:]], cwd=root, env=env, capture_output=True, text=True,
                           timeout=300)
    assert start.returncode == 0 and "Started schedule semiannual_release" in start.stdout, start.stderr[-2000:]
    listed = subprocess.run([dagster, "schedule", "list", "-w", "workspace.yaml"], cwd=root, env=env,
                            capture_output=True, text=True, timeout=300)
    assert "Schedule: semiannual_release [RUNNING]" in listed.stdout, listed.stdout + listed.stderr[-2000:]
    assert "Schedule: weekly_crawl [STOPPED]" in listed.stdout
