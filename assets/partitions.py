"""The semiannual release partitions (windows starting 1 January and 1 July) and the schedule that builds them.

``end_offset=1`` makes the window that is still open materialisable, so a preview of the coming release can be
built at any time; the schedule runs at the start of each window for the window that just closed.
"""


import os

from dagster import TimeWindowPartitionsDefinition

RELEASE_TIMEZONE = os.environ.get("LOOKBENCH_TIMEZONE", "UTC")

release_partitions = TimeWindowPartitionsDefinition(
    cron_schedule="0 0 1 1,7 *",
    start="2025-01-01",
    fmt="%Y-%m-%d",
    timezone=RELEASE_TIMEZONE,
    end_offset=1,
)


def window_and_version(partition_key: str):
    """The release window of a partition and the version a build of it now gets."""
    from datetime import datetime, timezone

    from lookbench_pipeline.windows import version_for, window_starting

    window = window_starting(partition_key, RELEASE_TIMEZONE)
    return window, version_for(window, datetime.now(timezone.utc), RELEASE_TIMEZONE)
