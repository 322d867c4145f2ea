"""Weekly crawl partitions and the schedules around their boundaries, in zones with daylight saving time; the
mapping from weekly crawls to a release window as Dagster's asset graph sees it."""

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from dagster import (AssetKey, DagsterInstance, MultiPartitionKey, build_schedule_context, build_sensor_context,
                     instance_for_test)

from assets.partitions import (crawl_key, crawl_partitions, crawls_in_window, make_release_partitions,
                               make_week_partitions, release_partitions, weeks_in_window)
from assets.definitions import defs
from assets.schedules import closed_window, semiannual_release, weekly_crawl

REPO = defs.get_repository_def()

ZONES = ["Europe/Berlin", "America/New_York"]
# Mondays right after a change of daylight saving time in each zone (2026)
DST_MONDAYS = {"Europe/Berlin": ["2026-03-30", "2026-10-26"], "America/New_York": ["2026-03-09", "2026-11-02"]}


@pytest.mark.parametrize("tz", ZONES)
def test_week_keys_one_minute_around_boundaries_across_dst(tz):
    weeks = make_week_partitions(tz)
    z = ZoneInfo(tz)
    for monday in DST_MONDAYS[tz]:
        b = datetime.strptime(monday, "%Y-%m-%d").replace(tzinfo=z)
        prev = (b - timedelta(days=7)).strftime("%Y-%m-%d")
        before, after = b - timedelta(minutes=1), b + timedelta(minutes=1)
        assert weeks.get_partition_keys(current_time=before)[-1] == prev
        assert weeks.get_partition_keys(current_time=after)[-1] == monday
        assert weeks.get_partition_key_for_timestamp(before.timestamp()) == prev
        assert weeks.get_partition_key_for_timestamp(after.timestamp()) == monday
        # the week that contains the switch is an hour shorter (spring) or longer (autumn) in UTC
        w = weeks.time_window_for_partition_key(prev)
        hours = (w.end.astimezone(timezone.utc) - w.start.astimezone(timezone.utc)).total_seconds() / 3600
        assert hours == (167 if b.month == 3 else 169)
        assert w.start.astimezone(z).hour == 0 and w.end.astimezone(z).hour == 0


@pytest.mark.parametrize("tz", ZONES)
@pytest.mark.parametrize("boundary", ["2026-07-01", "2027-01-01"])
def test_due_release_is_materialisable_the_minute_it_is_due(tz, boundary):
    parts = make_release_partitions(tz)
    b = datetime.strptime(boundary, "%Y-%m-%d").replace(tzinfo=ZoneInfo(tz))
    due = "2026-01-01" if boundary == "2026-07-01" else "2026-07-01"
    assert closed_window(b, parts) == due
    assert due in parts.get_partition_keys(current_time=b + timedelta(minutes=1))
    assert closed_window(b + timedelta(hours=5), parts) == boundary  # later ticks are for the next window


def test_release_schedule_builds_the_window_that_just_closed():
    assert semiannual_release.cron_schedule == "0 0 1 1,7 *"
    for tick, due in [("2027-01-01T00:00:00+00:00", "2026-07-01"), ("2026-07-01T00:00:00+00:00", "2026-01-01")]:
        ctx = build_schedule_context(scheduled_execution_time=datetime.fromisoformat(tick),
                                     instance=DagsterInstance.ephemeral(), repository_def=REPO)
        [req] = semiannual_release.evaluate_tick(ctx).run_requests
        assert req.partition_key == due and req.tags["lookbench/job"] == "release"


def test_weekly_crawl_fans_out_per_site_of_the_locations_configuration(tmp_path):
    """One crawl run per registered site of this code location's configuration; the sites another configuration
    registered in the same instance are not this location's to crawl (their runs would fail, no site config)."""
    import yaml

    from assets.definitions import build_defs

    demo = yaml.safe_load((Path(__file__).parents[1] / "lookbench_pipeline/data/sites/demo.yaml").read_text())
    for name in ("shop-a", "shop-b"):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump({**demo, "name": name}))
    cfg = tmp_path / "pipeline.yaml"
    cfg.write_text(yaml.safe_dump({"data_dir": "data", "sites": ["shop-a.yaml", "shop-b.yaml"]}))
    defs = build_defs(str(cfg))

    def tick(instance, when):  # the schedule with the location's resources, as the daemon evaluates it
        with build_schedule_context(scheduled_execution_time=when, instance=instance, resources=defs.resources,
                                    repository_def=defs.get_repository_def()) as ctx:
            return weekly_crawl.evaluate_tick(ctx)

    with instance_for_test() as instance:
        data = tick(instance, datetime(2026, 11, 30, tzinfo=timezone.utc))
        assert not data.run_requests and "none of this configuration's sites (shop-a, shop-b)" in data.skip_message
        instance.add_dynamic_partitions("sites", ["deadshop"])  # another configuration's
        assert not tick(instance, datetime(2026, 11, 30, tzinfo=timezone.utc)).run_requests
        instance.add_dynamic_partitions("sites", ["shop-a", "shop-b"])
        reqs = tick(instance, datetime(2026, 11, 30, tzinfo=timezone.utc)).run_requests
        assert [r.partition_key for r in reqs] == [MultiPartitionKey({"week": "2026-11-30", "site": s})
                                                   for s in ("shop-a", "shop-b")]
        assert {r.tags["lookbench/site"] for r in reqs} == {"shop-a", "shop-b"}
        # the Monday before 1 July: that week's crawls feed both windows (the mapping takes overlapping weeks)
        reqs = tick(instance, datetime(2026, 6, 29, tzinfo=timezone.utc)).run_requests
        assert reqs[0].partition_key.keys_by_dimension["week"] == "2026-06-29"


def test_crawl_key_refuses_a_closed_window():
    now = datetime(2026, 11, 30, 12, tzinfo=timezone.utc)
    assert crawl_key("2026-07-01", "demo", now=now) == MultiPartitionKey({"week": "2026-11-30", "site": "demo"})
    with pytest.raises(ValueError, match="not open"):
        crawl_key("2026-01-01", "demo", now=now)
    with pytest.raises(ValueError, match="does not overlap"):
        crawl_key("2026-07-01", "demo", week="2026-06-22", now=now)


def test_release_window_maps_to_the_weekly_crawls_that_overlap_it():
    """The lineage the UI shows: products (window) <- weekly_products (week x site) through crawls_in_window,
    which Dagster resolves to every week overlapping the window, for every site."""
    from dagster._core.definitions.partitions.context import partition_loading_context

    graph = defs.resolve_asset_graph()
    node = graph.get(AssetKey("products"))
    assert node.partitions_def == release_partitions
    assert node.partition_mappings[AssetKey("weekly_products")] == crawls_in_window
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("sites", ["shop-a", "shop-b"])
    now = datetime(2027, 2, 1, tzinfo=timezone.utc)
    with partition_loading_context(effective_dt=now, dynamic_partitions_store=instance):
        subset = release_partitions.empty_subset().with_partition_keys(["2026-01-01"])
        mapped = crawls_in_window.get_upstream_mapped_partitions_result_for_partitions(
            subset, release_partitions, crawl_partitions).partitions_subset
    keys = {(k.keys_by_dimension["week"], k.keys_by_dimension["site"])
            for k in (crawl_partitions.get_partition_key_from_str(str(x)) for x in mapped.get_partition_keys())}
    weeks = weeks_in_window("2026-01-01", now)
    assert weeks[0] == "2025-12-29" and weeks[-1] == "2026-06-29" and len(weeks) == 27
    assert keys == {(w, s) for w in weeks for s in ("shop-a", "shop-b")}


@pytest.mark.parametrize("tz", ZONES)
def test_schedules_tick_in_the_configured_zone(tz):
    """A fresh process with LOOKBENCH_TIMEZONE set: both schedules run at local midnight and pick the right
    partitions (the partitions and schedules are defined at import, from the configured zone)."""
    code = f"""
import json
from datetime import datetime
from zoneinfo import ZoneInfo
from dagster import build_schedule_context, instance_for_test
from assets.resources import LookbenchConfig
from assets.schedules import semiannual_release, weekly_crawl
z = ZoneInfo({tz!r})
cm = instance_for_test()
inst = cm.__enter__()
inst.add_dynamic_partitions("sites", ["demo"])
out = {{"tz": [semiannual_release.execution_timezone, weekly_crawl.execution_timezone]}}
r = semiannual_release(build_schedule_context(scheduled_execution_time=datetime(2027, 1, 1, tzinfo=z), instance=inst))
out["release"] = [r.partition_key]
with build_schedule_context(scheduled_execution_time=datetime(2026, 3, 30, tzinfo=z), instance=inst,
                            resources={{"lookbench": LookbenchConfig()}}) as ctx:
    w = weekly_crawl(ctx)
out["week"] = [str(q.partition_key) for q in w]
print(json.dumps(out))
"""
    env = {**os.environ, "LOOKBENCH_TIMEZONE": tz, "PYTHONWARNINGS": "ignore"}
    env.pop("LOOKBENCH_CONFIG", None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"tz": [tz, tz], "release": ["2026-07-01"], "week": ["demo|2026-03-30"]}


def test_register_sites_says_what_its_tick_did():
    """The sensor launches no run, so Dagster shows its ticks as skipped: the first one says which sites it
    registered (not "Sensor function returned an empty result"), and adds them; later ones say all are there."""
    with instance_for_test() as instance:
        def tick():
            with build_sensor_context(instance=instance, resources=defs.resources) as ctx:
                return defs.resolve_sensor_def("register_sites").evaluate_tick(ctx)

        first = tick()
        assert first.skip_message.startswith("registered site partition(s): demo ")
        [request] = first.dynamic_partitions_requests
        assert list(request.partition_keys) == ["demo"]
        instance.add_dynamic_partitions("sites", ["demo"])  # what the daemon does with the request
        later = tick()
        assert later.skip_message.startswith("every configured site is registered: demo ")
        assert not later.dynamic_partitions_requests
