"""JSON-ready answers for the operator views: the ``counters-tasks`` query commands (``--json``)
and the dashboard's endpoints return exactly these dicts, so the terminal, the browser and
scripts always agree. Arguments arrive as text (command line, query string) and are parsed
here; bad ones raise ``InvalidInput`` before Redis is asked anything.
"""

from __future__ import annotations

import time
from datetime import date, timedelta
from typing import Any

from .. import counters, ranking, sitestats, uniques
from ..core.days import today
from ..core.settings import get_settings
from ..core.validation import MAX_RANGE_DAYS, check_day_range, check_int, check_text
from ..counters import SAMPLE_COUNT, bucket_start
from ..errors import InvalidInput

MAX_LIMIT = 1000


def parse_day(text: Any, what: str = "day") -> date:
    """An ISO date (``YYYY-MM-DD``), or ``today`` / ``yesterday`` in ``COUNTERS_TIMEZONE``."""
    if isinstance(text, date):
        return text
    if not isinstance(text, str):
        raise InvalidInput(f"{what} must be a date YYYY-MM-DD")
    if text == "today":
        return today()
    if text == "yesterday":
        return today() - timedelta(days=1)
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise InvalidInput(f"{what} must be a date YYYY-MM-DD, got {text!r}") from None


def parse_int(text: Any, what: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """An int from text (query strings) or an int, within bounds."""
    if isinstance(text, str):
        try:
            text = int(text, 10)
        except ValueError:
            raise InvalidInput(f"{what} must be an integer, got {text!r}") from None
    return check_int(text, what, minimum, maximum)


def day_range(day: Any = None, start: Any = None, end: Any = None) -> tuple[date, date]:
    """``(first, last)`` days from ``day`` alone, or ``start``/``end`` (either may be missing:
    the other end, or today); at most MAX_RANGE_DAYS days, ``first <= last``."""
    if day is not None:
        if start is not None or end is not None:
            raise InvalidInput("give either a day or a from/to range, not both")
        first = last = parse_day(day)
    else:
        last = parse_day(end, "to") if end is not None else None
        first = parse_day(start, "from") if start is not None else None
        if first is None and last is None:
            first = last = today()
        first = first or last
        last = last or (today() if first <= today() else first)
    return check_day_range(first, last, names=("from", "to"))


def config_view(_conn: Any = None) -> dict[str, Any]:
    """What the dashboard needs to pick default dates: today in ``COUNTERS_TIMEZONE``, and the zone."""
    return {"today": today().isoformat(), "timezone": get_settings().timezone, "max_range_days": MAX_RANGE_DAYS}


def counters_list(conn: Any, cursor: Any = None, limit: Any = None) -> dict[str, Any]:
    """A page of the counters that hold samples (at most ``limit``, default 100, up to 1000),
    from ``cursor`` (the ``next`` of the page before; None at the end)."""
    limit = 100 if limit is None else parse_int(limit, "limit", 1, counters.MAX_PAGE)
    names, following = counters.counter_page(conn, "0" if cursor is None else str(cursor), limit)
    return {"counters": names, "next": following, "precisions": list(counters.PRECISIONS)}


def counter_view(conn: Any, name: Any, precision: Any = 60, last: Any = None, now: float | None = None) -> dict[str, Any]:
    """The last ``last`` buckets (default and at most SAMPLE_COUNT) of a counter, zero-filled."""
    check_text(name, "name")
    precision = counters.check_precision(parse_int(precision, "precision"))
    last = SAMPLE_COUNT if last is None else parse_int(last, "last", 1, SAMPLE_COUNT)
    now = time.time() if now is None else now
    end = bucket_start(now, precision)
    points = counters.get_series(conn, name, precision, end - (last - 1) * precision, now, now=now)
    return {"name": name, "precision": precision, "now": now, "points": [list(p) for p in points],
            "total": sum(t for _, t in points)}


def boards_list(conn: Any) -> dict[str, Any]:
    return {"boards": ranking.known_boards(conn)}


def board_view(conn: Any, board: Any, limit: Any = 10, now: float | None = None) -> dict[str, Any]:
    """A ranking's top members with their totals, with the board's own (stored) settings."""
    check_text(board, "board")
    limit = parse_int(limit, "limit", 1, MAX_LIMIT)
    stored = ranking.board_settings(conn, board)
    if stored is None:
        raise InvalidInput(f"no board named {board!r} (boards: {', '.join(ranking.known_boards(conn)) or 'none'})")
    period, interval = stored
    top = ranking.Ranking(conn, board, period, interval).top(0, limit, withscores=True, now=now)
    return {"board": board, "period_hours": period, "interval_hours": interval,
            "top": [[member, total] for member, total in top]}


def delete_board_view(conn: Any, board: Any) -> dict[str, Any]:
    """Delete a board (``ranking.delete_board``): whether there was one."""
    check_text(board, "board")
    return {"board": board, "deleted": ranking.delete_board(conn, board)}


def stats_view(conn: Any, day: Any = None, start: Any = None, end: Any = None, path: Any = None) -> dict[str, Any]:
    """Site (or one path's) PV/UV per day over a range, with the range's PV sum and true UV."""
    first, last = day_range(day, start, end)
    result = sitestats.site_visit_range(conn, first, last, path)
    return {"from": first.isoformat(), "to": last.isoformat(), "path": result.path, "pv": result.pv,
            "uv": result.uv, "uv_approximate": result.uv_approximate,
            "days": [{"day": d.day.isoformat(), "pv": d.pv, "uv": d.uv} for d in result.days]}


def top_pages_view(conn: Any, start: Any = None, end: Any = None, limit: Any = 10) -> dict[str, Any]:
    """Paths by page views summed over a range (ties by path)."""
    first, last = day_range(None, start, end)
    limit = parse_int(limit, "limit", 1, MAX_LIMIT)
    pages = sitestats.top_pages(conn, first, last, limit)
    return {"from": first.isoformat(), "to": last.isoformat(), "pages": [[p, n] for p, n in pages]}


def uniques_view(conn: Any, day: Any = None, start: Any = None, end: Any = None) -> dict[str, Any]:
    """Distinct session ids per day and over the whole range (an exact union of the days)."""
    first, last = day_range(day, start, end)
    result = uniques.unique_visitors_range(conn, first, last)
    return {"from": first.isoformat(), "to": last.isoformat(), "visitors": result.visitors,
            "days": [{"day": d.isoformat(), "visitors": n} for d, n in result.days],
            "missing_days": [d.isoformat() for d in result.missing_days]}
