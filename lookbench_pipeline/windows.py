"""The calendar: semiannual release windows and the weekly crawl weeks (UTC by default, or a configured time zone).

This module is the one owner of both: the Dagster partitions (``assets/partitions.py``) are built from its
constants (``WINDOW_CRON``, ``WEEK_CRON``, ``FIRST_WINDOW``, ``FIRST_WEEK``) and its functions
(``window_starting``, ``week_key``, ``weeks_overlapping``); ``tests/test_partitions.py`` checks that the two agree
around every boundary, in zones with daylight saving time.

Release windows start on 1 January and 1 July, at local midnight.

A release covers the items first seen in ``[start, end)`` of its window. Its version is ``v{YYYYMMDD}`` of the day
it is cut: the window's last day (31 December or 30 June) once the window is over, else the day of the build (a
preview of the open window; a build on another day is another version). The two never collide: the open
window starts the day after the closed window's last day.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

# Release windows start at local midnight of 1 January and 1 July; crawl weeks at local midnight on Monday.
WINDOW_CRON = "0 0 1 1,7 *"
WEEK_CRON = "0 0 * * 1"
KEY_FORMAT = "%Y-%m-%d"  # a window's or a week's key: its first local day
FIRST_WINDOW = "2025-01-01"
FIRST_WEEK = "2024-12-30"  # the Monday of the week that contains the first window's start


@dataclass
class Window:
    """The release's time window ``[start, end)`` of ``first_seen_at`` (UTC)."""

    start: datetime
    end: datetime

    def __contains__(self, ts: datetime) -> bool:
        return self.start <= ts < self.end


def utc_bound(iso: str) -> str:
    """How a release window's bound (an ISO 8601 timestamp, as the manifest's ``window`` holds it) is written in
    the dataset card, the Croissant file and the build's terminal: its UTC day (``2026-07-01``) when it is UTC
    midnight, else its UTC day and time (``2026-06-30 22:00``: a window of another time zone, e.g. Europe/Paris's
    1 July), never a day cut from a timestamp that names another. Raises ValueError for a malformed timestamp."""
    ts = datetime.fromisoformat(iso)
    ts = (ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)
    return ts.strftime("%Y-%m-%d") if (ts.hour, ts.minute, ts.second, ts.microsecond) == (0, 0, 0, 0) \
        else ts.strftime("%Y-%m-%d %H:%M")


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
    try:
        d = datetime.strptime(start_key, KEY_FORMAT)
    except ValueError as exc:
        raise ValueError(f"{start_key!r} is not a date YYYY-MM-DD (a release window starts on 1 January or "
                         "1 July)") from exc
    if (d.month, d.day) not in ((1, 1), (7, 1)):
        raise ValueError(f"release windows start on 1 January or 1 July, not {start_key}")
    return window_containing(d.replace(tzinfo=ZoneInfo(tz)), tz)


def release_window_key(start_key: str) -> str:
    """``start_key`` if it names a release window: a window start (:func:`window_starting`) not before
    ``FIRST_WINDOW``; whether that window has begun depends on the time zone (:func:`buildable_window`).

    Raises ValueError naming what is wrong."""
    window_starting(start_key)
    if start_key < FIRST_WINDOW:
        raise ValueError(f"the first release window starts on {FIRST_WINDOW}, not {start_key}")
    return start_key


def buildable_window(start_key: str, now: datetime, tz: str = "UTC") -> Window:
    """The window ``start_key`` names, if a release of it can be built at ``now``: from ``FIRST_WINDOW``
    (:func:`release_window_key`) to the window still open at ``now`` (the release partitions' range,
    ``assets/partitions.py``). Raises ValueError naming the range otherwise (or for a key that is no window
    start)."""
    release_window_key(start_key)
    window = window_starting(start_key, tz)
    current = window_containing(now, tz).start.astimezone(ZoneInfo(tz)).strftime(KEY_FORMAT)
    if start_key > current:
        raise ValueError(f"the window {start_key} has not begun: release windows run from {FIRST_WINDOW} to the "
                         f"open window {current} ({tz})")
    return window


def version_for(window: Window, now: datetime, tz: str = "UTC") -> str:
    """``v{YYYYMMDD}``: the window's last day once it is over, else ``now``'s day (both in ``tz``)."""
    day = (window.end.astimezone(ZoneInfo(tz)) - timedelta(days=1)) if now >= window.end else now
    return "v" + day.astimezone(ZoneInfo(tz)).strftime("%Y%m%d")


def week_start(ts: datetime, tz: str = "UTC") -> datetime:
    """The start (UTC) of the crawl week that contains ``ts`` (an aware datetime): local midnight of its Monday
    in ``tz`` (an IANA name)."""
    z = ZoneInfo(tz)
    local = ts.astimezone(z).date()
    monday = local - timedelta(days=local.weekday())
    return datetime(monday.year, monday.month, monday.day, tzinfo=z).astimezone(timezone.utc)


def week_key(ts: datetime, tz: str = "UTC") -> str:
    """The key (``YYYY-MM-DD`` of the local Monday) of the crawl week that contains ``ts`` (an aware datetime):
    the ``week`` of a weekly crawl partition."""
    return week_start(ts, tz).astimezone(ZoneInfo(tz)).strftime(KEY_FORMAT)


def week_bounds(key: str, tz: str = "UTC") -> Window:
    """The week ``[Monday 00:00, next Monday 00:00)`` local, in UTC, of week key ``key``.

    Raises ValueError when ``key`` is not a date or not a Monday.
    """
    d = datetime.strptime(key, KEY_FORMAT).date()
    if d.weekday() != 0:
        raise ValueError(f"crawl weeks start on a Monday, not {key}")
    z = ZoneInfo(tz)
    nxt = d + timedelta(days=7)
    return Window(datetime(d.year, d.month, d.day, tzinfo=z).astimezone(timezone.utc),
                  datetime(nxt.year, nxt.month, nxt.day, tzinfo=z).astimezone(timezone.utc))


def weeks_overlapping(window: Window, until: datetime, tz: str = "UTC") -> list[str]:
    """The keys, oldest first, of the crawl weeks that overlap ``window`` and have begun by ``until`` (the week
    that contains ``until`` included: it can be crawled now), counting from ``FIRST_WEEK``."""
    first = datetime.strptime(FIRST_WEEK, KEY_FORMAT).date()
    last = datetime.strptime(week_key(until, tz), KEY_FORMAT).date()
    lo = datetime.strptime(week_key(window.start, tz), KEY_FORMAT).date()
    d: date = max(first, lo)
    keys = []
    while d <= last:
        w = week_bounds(d.strftime(KEY_FORMAT), tz)
        if w.start >= window.end:
            break
        if w.end > window.start:
            keys.append(d.strftime(KEY_FORMAT))
        d += timedelta(days=7)
    return keys
