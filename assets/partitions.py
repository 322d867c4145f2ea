"""The semiannual release partitions (windows starting 1 January and 1 July) and the schedule that builds them.

``end_offset=1`` makes the window that is still open materialisable, so a preview of the coming release can be
built at any time; the schedule runs at the start of each window for the window that just closed.
"""


import os

from dagster import (DynamicPartitionsDefinition, MultiPartitionKey, MultiPartitionsDefinition,
                     MultiToSingleDimensionPartitionMapping, TimeWindowPartitionsDefinition)

RELEASE_TIMEZONE = os.environ.get("LOOKBENCH_TIMEZONE", "UTC")

def make_release_partitions(timezone: str = RELEASE_TIMEZONE) -> TimeWindowPartitionsDefinition:
    """Semiannual windows starting at local midnight of 1 January and 1 July in ``timezone``."""
    return TimeWindowPartitionsDefinition(
        cron_schedule="0 0 1 1,7 *",
        start="2025-01-01",
        fmt="%Y-%m-%d",
        timezone=timezone,
        end_offset=1,
    )


release_partitions = make_release_partitions()


def window_and_version(partition_key: str):
    """The release window of a partition and the version a build of it now gets."""
    from datetime import datetime, timezone

    from lookbench_pipeline.windows import version_for, window_starting

    window = window_starting(partition_key, RELEASE_TIMEZONE)
    return window, version_for(window, datetime.now(timezone.utc), RELEASE_TIMEZONE)


# One dynamic partition per configured site: crawls fan out per site (and run in parallel on a cluster); the
# release of a window takes every site's crawl of that window (MultiToSingleDimensionPartitionMapping).
site_partitions = DynamicPartitionsDefinition(name="sites")

crawl_partitions = MultiPartitionsDefinition({"window": release_partitions, "site": site_partitions})

by_window = MultiToSingleDimensionPartitionMapping(partition_dimension_name="window")


def crawl_key(window: str, site: str) -> MultiPartitionKey:
    return MultiPartitionKey({"window": window, "site": site})
