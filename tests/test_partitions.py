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


@pytest.mark.parametrize("tz", ["UTC", "Europe/Amsterdam", "America/New_York", "Asia/Kolkata", "Pacific/Auckland"])
def test_the_calendar_and_dagsters_partitions_agree(tz):
    """windows.py is the one calendar; the Dagster partitions are built from it and must agree with it: the week
    of every instant (hours around DST changes and boundaries included) and the weeks that overlap each window."""
    import random

    from assets.partitions import make_week_partitions
    from lookbench_pipeline.windows import FIRST_WEEK, week_bounds, week_key, weeks_overlapping

    weeks, windows_ = make_week_partitions(tz), make_release_partitions(tz)
    rng = random.Random(7)
    t0 = datetime(2025, 1, 1, tzinfo=timezone.utc).timestamp()
    instants = [t0 + rng.uniform(0, 3 * 365 * 86400) for _ in range(400)]
    z = ZoneInfo(tz)
    for day in ("2025-03-30", "2025-10-26", "2026-03-08", "2026-11-01", "2026-04-05", "2026-09-27",
                "2026-01-01", "2026-07-01", "2025-12-29"):
        d = datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=z)
        instants += [(d + timedelta(minutes=m)).timestamp() for m in range(-90, 26 * 60, 37)]
    for t in instants:
        ts = datetime.fromtimestamp(t, timezone.utc)
        key = week_key(ts, tz)
        assert key == weeks.get_partition_key_for_timestamp(t), ts
        b, dw = week_bounds(key, tz), weeks.time_window_for_partition_key(key)
        assert (b.start, b.end) == (dw.start, dw.end)
    for now in (datetime(2025, 5, 3, 12, tzinfo=timezone.utc), datetime(2026, 12, 2, 13, tzinfo=timezone.utc),
                datetime(2027, 8, 1, tzinfo=timezone.utc)):
        for wk in windows_.get_partition_keys(current_time=now):
            w = windows_.time_window_for_partition_key(wk)
            expected = [k for k in weeks.get_partition_keys(current_time=now)
                        if weeks.time_window_for_partition_key(k).start < w.end
                        and weeks.time_window_for_partition_key(k).end > w.start]
            assert weeks_overlapping(window_starting(wk, tz), now, tz) == expected, (wk, now)
    assert weeks.get_partition_keys(current_time=datetime(2025, 1, 1, tzinfo=timezone.utc))[0] == FIRST_WEEK


def test_a_window_of_another_time_zone_is_written_with_its_utc_time_not_cut_to_a_wrong_day():
    """A Europe/Paris window starts 2026-06-30 22:00 UTC: the card, the Croissant file and the build's line used to
    cut the timestamp to ``2026-06-30`` and call it UTC, a day too early; a UTC window keeps its plain days."""
    from lookbench_pipeline.releases.card import CardInfo, croissant, dataset_card
    from lookbench_pipeline.windows import utc_bound

    paris = window_starting("2026-07-01", "Europe/Paris")
    w = {"start": paris.start.isoformat(), "end": paris.end.isoformat()}
    assert (utc_bound(w["start"]), utc_bound(w["end"])) == ("2026-06-30 22:00", "2026-12-31 23:00")
    utc = window_starting("2026-07-01", "UTC")
    assert (utc_bound(utc.start.isoformat()), utc_bound(utc.end.isoformat())) == ("2026-07-01", "2027-01-01")
    card = dataset_card("v20261231", w, {}, {}, {}, CardInfo())
    assert "items first seen in **[2026-06-30 22:00, 2026-12-31 23:00)** (UTC)" in card, card[:2000]
    doc = croissant("v20261231", w, {}, {}, CardInfo())
    assert "first seen in [2026-06-30 22:00, 2026-12-31 23:00) UTC" in doc["description"], doc["description"]
