"""Release windows: semiannual, starting on 1 January and 1 July (UTC by default, or a configured time zone).

A release covers the items first seen in ``[start, end)`` of its window. Its version is ``v{YYYYMMDD}`` of the day
it is cut: the window's last day (31 December or 30 June) once the window is over, else the day of the build (a
preview of the open window; a build on another day is another version). The two never collide: the open
window starts the day after the closed window's last day.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from zoneinfo import ZoneInfo


@dataclass
class Window:
    """The release's time window ``[start, end)`` of ``first_seen_at`` (UTC)."""

    start: datetime
    end: datetime

    def __contains__(self, ts: datetime) -> bool:
        return self.start <= ts < self.end


def window_containing(ts: datetime, tz: str = "UTC") -> Window:
    """The semiannual window that contains ``ts`` (an aware datetime)."""
    z = ZoneInfo(tz)
    local = ts.astimezone(z)
    start_month = 1 if local.month < 7 else 7
    start = datetime(local.year, start_month, 1, tzinfo=z)
    end = datetime(local.year + (start_month == 7), 7 if start_month == 1 else 1, 1, tzinfo=z)
    return Window(start.astimezone(timezone.utc), end.astimezone(timezone.utc))


def window_starting(start_key: str, tz: str = "UTC") -> Window:
    """The window whose start date is ``start_key`` (``YYYY-MM-DD``, a Dagster partition key).

    Raises ValueError when the date is not 1 January or 1 July.
    """
    d = datetime.strptime(start_key, "%Y-%m-%d")
    if (d.month, d.day) not in ((1, 1), (7, 1)):
        raise ValueError(f"release windows start on 1 January or 1 July, not {start_key}")
    return window_containing(d.replace(tzinfo=ZoneInfo(tz)), tz)


def version_for(window: Window, now: datetime, tz: str = "UTC") -> str:
    """``v{YYYYMMDD}``: the window's last day once it is over, else ``now``'s day (both in ``tz``)."""
    from datetime import timedelta

    day = (window.end.astimezone(ZoneInfo(tz)) - timedelta(days=1)) if now >= window.end else now
    return "v" + day.astimezone(ZoneInfo(tz)).strftime("%Y%m%d")
