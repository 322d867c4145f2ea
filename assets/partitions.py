"""Partitions: semiannual release windows (1 January, 1 July), weekly crawls per site, and how they map.

The calendar itself (when windows and weeks start, their keys, which weeks overlap a window) is
``lookbench_pipeline.windows``; this module only builds Dagster's partition definitions from it.

* ``release_partitions``: a window starts at local midnight of 1 January / 1 July in the configured time zone.
  ``end_offset=1`` makes the window that is still open materialisable (a preview of the coming release can be
  built at any time); the window that just closed is materialisable from its first minute after the boundary,
  which is when the ``semiannual_release`` schedule builds it (``assets/schedules.py``).
* ``crawl_partitions``: ``week`` × ``site``. A week starts at local midnight on Monday; ``end_offset=1`` makes
  the current week materialisable. Crawls run weekly (schedule ``weekly_crawl``) and accumulate: a release
  window reads every weekly crawl partition that overlaps it (``crawls_in_window``, a
  ``MultiToSingleDimensionPartitionMapping`` on the ``week`` dimension, which Dagster resolves with a
  ``TimeWindowPartitionMapping``), and the release keeps what was first seen inside the window.
* The time zone is ``$LOOKBENCH_TIMEZONE``, else the ``timezone`` of the YAML file named by ``$LOOKBENCH_CONFIG``,
  else UTC. Partitions are defined when the code is imported, so the zone must be set before Dagster starts;
  :func:`assets.definitions.build_defs` refuses a configuration whose ``timezone`` differs.
"""


import os
from datetime import datetime, timezone

import yaml
from dagster import (DynamicPartitionsDefinition, IdentityPartitionMapping, MultiPartitionKey,
                     MultiPartitionsDefinition, MultiToSingleDimensionPartitionMapping,
                     TimeWindowPartitionsDefinition)

from lookbench_pipeline.windows import (FIRST_WEEK, FIRST_WINDOW, KEY_FORMAT, WEEK_CRON, WINDOW_CRON, version_for,
                                        week_key, weeks_overlapping, window_starting)


def _configured_timezone() -> str:
    if os.environ.get("LOOKBENCH_TIMEZONE"):
        return os.environ["LOOKBENCH_TIMEZONE"]
    path = os.environ.get("LOOKBENCH_CONFIG")
    if path and os.path.isfile(path):
        try:
            data = yaml.safe_load(open(path, encoding="utf-8")) or {}
        except yaml.YAMLError:
            data = {}  # load_config reports the error with its file and line
        if isinstance(data, dict) and data.get("timezone"):
            return str(data["timezone"])
    return "UTC"


RELEASE_TIMEZONE = _configured_timezone()


def make_release_partitions(timezone: str = RELEASE_TIMEZONE) -> TimeWindowPartitionsDefinition:
    """Semiannual windows starting at local midnight of 1 January and 1 July in ``timezone`` (an IANA name)."""
    return TimeWindowPartitionsDefinition(
        cron_schedule=WINDOW_CRON,
        start=FIRST_WINDOW,
        fmt=KEY_FORMAT,
        timezone=timezone,
        end_offset=1,
    )


def make_week_partitions(timezone: str = RELEASE_TIMEZONE) -> TimeWindowPartitionsDefinition:
    """Weeks starting at local midnight on Monday in ``timezone``; the current week is materialisable."""
    return TimeWindowPartitionsDefinition(
        cron_schedule=WEEK_CRON,
        start=FIRST_WEEK,
        fmt=KEY_FORMAT,
        timezone=timezone,
        end_offset=1,
    )


release_partitions = make_release_partitions()
week_partitions = make_week_partitions()

# One dynamic partition per configured site: crawls fan out per site (and run in parallel on a cluster).
site_partitions = DynamicPartitionsDefinition(name="sites")

crawl_partitions = MultiPartitionsDefinition({"week": week_partitions, "site": site_partitions})

# A release window depends on every weekly crawl partition (of every site) that overlaps it.
crawls_in_window = MultiToSingleDimensionPartitionMapping(partition_dimension_name="week")

# The window's accumulated catalogue (``products``, ``looks``, ``crawl_log``, ``image_downloads``) is partitioned
# by window like every downstream asset; the name is kept for the assets that read it.
by_window = IdentityPartitionMapping()


def window_and_version(partition_key: str):
    """The release window of a partition and the version a build of it now gets."""
    window = window_starting(partition_key, RELEASE_TIMEZONE)
    return window, version_for(window, datetime.now(timezone.utc), RELEASE_TIMEZONE)


def week_of(ts: datetime, tz: str = RELEASE_TIMEZONE) -> str:
    """The weekly crawl partition key (a Monday, ``YYYY-MM-DD``) whose week contains ``ts`` (an aware datetime)."""
    return week_key(ts, tz)


def weeks_in_window(window_key: str, now: datetime | None = None) -> list[str]:
    """The weekly crawl partition keys that overlap release window ``window_key`` and exist at ``now``."""
    return weeks_overlapping(window_starting(window_key, RELEASE_TIMEZONE), now or datetime.now(timezone.utc),
                             RELEASE_TIMEZONE)


def crawl_key(window: str, site: str, week: str | None = None, now: datetime | None = None) -> MultiPartitionKey:
    """The crawl partition for ``site``: ``week`` if given, else the week of ``now`` (default: the current time),
    which must lie inside release window ``window``.

    Raises:
        ValueError: ``now`` is outside the window (a live crawl now cannot observe another window; replay its
            archived crawls instead, ``lookbench backfill``), or ``week`` does not overlap the window.
    """
    now = now or datetime.now(timezone.utc)
    w = window_starting(window, RELEASE_TIMEZONE)
    if week is None:
        if not (w.start <= now < w.end):
            raise ValueError(f"release window {window} is not open at {now.isoformat()}: a live crawl cannot "
                             "observe it; rebuild it from its archived crawls (lookbench backfill)")
        week = week_of(now)
    elif week not in weeks_in_window(window, max(now, w.start)):
        raise ValueError(f"week {week} does not overlap release window {window}")
    return MultiPartitionKey({"week": week, "site": site})


# The concurrency pool of steps that call the vLLM endpoint (``pool=VLLM_POOL`` on the asset); its limit lives in
# the Dagster instance (``dagster instance concurrency set vllm 4``; deploy/dagster.postgres.yaml, docs/DEPLOY.md).
VLLM_POOL = "vllm"
