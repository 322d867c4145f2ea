"""The schedules: a weekly crawl of every site of the code location's configuration, and the semiannual release of
the window that just closed. Both tick in the configured time zone (``partitions.RELEASE_TIMEZONE``), so "Monday
00:00" and "1 January 00:00" are local times, daylight saving time included."""

from datetime import datetime, timedelta

from dagster import (RunRequest, ScheduleEvaluationContext, SkipReason, schedule)

from .partitions import RELEASE_TIMEZONE, crawl_key, release_partitions, site_partitions, week_of
from .resources import LookbenchConfig

RELEASE_TAGS = {"lookbench/job": "release"}  # dagster.yaml limits runs with this tag to one at a time
CRAWL_TAGS = {"lookbench/job": "crawl"}


def closed_window(scheduled_time: datetime, partitions=release_partitions) -> str:
    """The release partition key of the window that ends at (or last ended before) ``scheduled_time``: at the
    1 January / 1 July tick, the window that closed at that instant."""
    return partitions.get_partition_key_for_timestamp((scheduled_time - timedelta(minutes=1)).timestamp())


@schedule(name="semiannual_release", job_name="release_job", cron_schedule="0 0 1 1,7 *",
          execution_timezone=RELEASE_TIMEZONE,
          description="At local midnight on 1 January and 1 July: build, check, publish and evaluate the release "
                      "of the window that just closed (its last weekly crawls included).")
def semiannual_release(context: ScheduleEvaluationContext):
    # end_offset=1 makes the just-opened window the last partition at this tick; the release that is due is the
    # window before it, which ended one minute ago.
    key = closed_window(context.scheduled_execution_time)
    return RunRequest(run_key=f"release:{key}", partition_key=key, tags={**RELEASE_TAGS, "lookbench/window": key})


@schedule(name="weekly_crawl", job_name="crawl_job", cron_schedule="0 0 * * 1",
          execution_timezone=RELEASE_TIMEZONE,
          description="At local midnight every Monday: one crawl run per site of this code location's "
                      "configuration (registered by the register_sites sensor) for the week that starts (runs fan "
                      "out per site; on Kubernetes each is its own pod).")
def weekly_crawl(context: ScheduleEvaluationContext, lookbench: LookbenchConfig):
    t = context.scheduled_execution_time
    # the instance's site partitions include other configurations' sites (one instance, a code location per
    # configuration): their crawl would fail here, "no site config"
    configured = {s.name for s in lookbench.load().site_configs()}
    sites = [s for s in context.instance.get_dynamic_partitions(site_partitions.name) if s in configured]
    if not sites:
        return SkipReason(f"none of this configuration's sites ({', '.join(sorted(configured)) or 'none'}) is "
                          "registered yet (the register_sites sensor adds them from the config)")
    week = week_of(t + timedelta(minutes=1))
    window = release_partitions.get_partition_key_for_timestamp((t + timedelta(minutes=1)).timestamp())
    return [RunRequest(run_key=f"crawl:{week}:{site}", partition_key=crawl_key(window, site, week=week, now=t),
                       tags={**CRAWL_TAGS, "lookbench/site": site, "lookbench/week": week})
            for site in sorted(sites)]
