"""Release partitions around their boundaries, in UTC and in a zone with daylight saving time."""

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from assets.partitions import make_release_partitions
from lookbench_pipeline.windows import version_for, window_containing, window_starting


@pytest.mark.parametrize("tz", ["UTC", "Europe/Amsterdam", "Europe/Berlin", "America/New_York"])
@pytest.mark.parametrize("boundary", ["2026-07-01", "2027-01-01"])
def test_keys_one_minute_around_each_boundary(tz, boundary):
    parts = make_release_partitions(tz)
    z = ZoneInfo(tz)
    b = datetime.strptime(boundary, "%Y-%m-%d").replace(tzinfo=z)
    before, after = b - timedelta(minutes=1), b + timedelta(minutes=1)
    prev = "2026-01-01" if boundary == "2026-07-01" else "2026-07-01"
    # end_offset=1: the open window is materialisable, and the window that just closed is there on its due day
    assert parts.get_partition_keys(current_time=before)[-1] == prev
    assert parts.get_partition_keys(current_time=after)[-1] == boundary
    assert prev in parts.get_partition_keys(current_time=after)
    # the library's window arithmetic agrees with Dagster's, in the same zone
    assert window_containing(before, tz).start == window_starting(prev, tz).start
    assert window_containing(after, tz).start == window_starting(boundary, tz).start
    w = window_starting(prev, tz)
    assert w.end == b.astimezone(timezone.utc)
    assert version_for(w, after, tz) == "v" + (b - timedelta(days=1)).strftime("%Y%m%d")


def test_windows_span_a_dst_change():
    w = window_starting("2026-01-01", "Europe/Amsterdam")  # contains the March switch to summer time
    assert w.start == datetime(2025, 12, 31, 23, 0, tzinfo=timezone.utc)  # midnight CET = 23:00 UTC
    assert w.end == datetime(2026, 6, 30, 22, 0, tzinfo=timezone.utc)  # midnight CEST = 22:00 UTC
