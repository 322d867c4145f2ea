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
    from assets.definitions import build_defs

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
                          "tags": {k: v for k, v in sorted(job.tags.items())}}
    schedules = {s.name: {"cron": s.cron_schedule, "job": s.job_name} for s in defs.schedules}
    sensors = sorted(s.name for s in defs.sensors)
    resources = {k: {"type": type(r).__name__,
                     "config": {f: str(info.annotation) for f, info in type(r).model_fields.items()}}
                 for k, r in sorted(defs.resources.items())}
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
