"""What "a day" is: a local date in the site's zone (``COUNTERS_TIMEZONE``, or the site's own in
``COUNTERS_SITES``: ``zone`` below, None for ``COUNTERS_TIMEZONE``), taken from the item's own time.

Site PV/UV, daily uniques and dashboards all use these helpers, so an item queued at 23:59
and processed after midnight still counts for the day it happened, and DST days (23 or 25
hours) end at the real local midnight.
"""

from __future__ import annotations

import functools
import time
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from ..errors import InvalidInput
from .settings import get_settings
from .validation import check_day

__all__ = [
    "DAY",
    "check_day",
    "day_end",
    "day_start",
    "days_between",
    "kept_from_now",
    "kept_until",
    "local_day",
    "today",
]

DAY = 86400


def local_day(ts: float, zone: str | None = None) -> date:
    """The local date in ``zone`` (default ``COUNTERS_TIMEZONE``) of epoch seconds ``ts``."""
    return _local_day(int(ts // 1), zone or get_settings().timezone)


@functools.lru_cache(maxsize=4096)
def _local_day(second: int, timezone: str) -> date:
    """Cached per whole second (zone offsets are whole seconds): items come in bursts."""
    try:
        day = datetime.fromtimestamp(second, ZoneInfo(timezone)).date()
    except (OverflowError, ValueError, OSError):
        raise InvalidInput(f"time {second!r} has no local day in {timezone}") from None
    if day == date.max:
        raise InvalidInput("the last day of year 9999 has no end to count to")
    return day


def today(zone: str | None = None) -> date:
    """The local date now."""
    return local_day(time.time(), zone)


def day_start(day: date, zone: str | None = None) -> int:
    """Epoch seconds of the local midnight that starts ``day``."""
    return _day_start(day, zone or get_settings().timezone)


@functools.lru_cache(maxsize=1024)
def _day_start(day: date, timezone: str) -> int:
    return int(datetime(day.year, day.month, day.day, tzinfo=ZoneInfo(timezone)).timestamp())


def day_end(day: date, zone: str | None = None) -> int:
    """Epoch seconds of the local midnight that ends ``day`` (23, 24 or 25 hours after its start)."""
    return day_start(day + timedelta(days=1), zone)


def days_between(start: date, end: date) -> list[date]:
    """Every day from ``start`` to ``end``, both included (empty when ``start > end``)."""
    return [start + timedelta(days=i) for i in range((end - start).days + 1)]


def kept_from_now(days_after: int) -> int:
    """Seconds data written now is kept: ``days_after`` days, at least one (a back-filled day
    opened today stays open for a day even when its grace is 0)."""
    return max(1, days_after) * DAY


def kept_until(day: date, days_after: int, zone: str | None = None) -> int:
    """Epoch seconds ``days_after`` days after the end of ``day``: when data of that day expires."""
    return day_end(day, zone) + days_after * DAY
