"""The site's and a page's figures read: PV and UV of a day or all time (``site_visit_info``),
and over a range of days (``site_visit_range``), from the tables ``site_day``, ``page_day``,
``site_all`` and ``page_all``.
"""

from __future__ import annotations

from datetime import date
from typing import Any, NamedTuple

from ..core import days
from ..core.settings import get_settings
from ..core.sites import check_site
from ..core.validation import check_day, check_day_range
from ..core.visitors import VISITOR_DAYS, VISITORS, uv_counts
from ..store import hll, keys, page_sketch
from ..store.client import RedisClient, read_pipeline
from . import page_all, page_day, site_all, site_day
from .page_day import page_figures, page_value
from .views import normalize_path


class SiteCount(NamedTuple):
    """PV and UV of a ``day`` (None: all time). ``uv_counts``: what ``uv`` counts (``visitors``;
    all time with COUNTERS_VISITOR_KEY=daily, ``visitor-days``)."""

    day: date | None
    pv: int
    uv: int

    @property
    def uv_counts(self) -> str:
        """``core.visitors.uv_counts`` of the figure: a day's are visitors; all time, in the
        daily mode, visitor-days (the all-time sets hold one id per visitor and day)."""
        return uv_counts(None if self.day is None else 1)


def site_visit_info(
    conn: RedisClient, day: date | None = None, path: str | None = None, *, site: str | None = None
) -> SiteCount:
    """PV and UV of the site (``path`` None) or a path, on a local ``day`` or all time (None).
    ``site``: which site (None: the default one; its days are in its own zone).

    A path's figures of a day are 0 when the path was not among the day's first
    COUNTERS_MAX_DAY_PATHS paths (its views count under ``OTHER``, see ``top_pages``)."""
    scope = check_site(site)
    with keys.bound(conn):
        if day is not None:
            check_day(day)
        if path is not None:
            path = normalize_path(path)
        if path is not None and day is not None:
            return SiteCount(day, *page_figures(conn.hget(page_day.site_day_pages(day, site=scope), path)))
        if path is not None:
            pairs = [conn.hmget(page_all.path_totals(keys.scoped(scope, path)), "pv", "uv")]
        elif day is not None:
            pairs = [conn.hmget(site_day.site_day_totals(day, site=scope), "pv", "uv")]
        else:
            pipe = read_pipeline(conn)
            for shard in range(site_all.SITE_SHARDS):
                pipe.hmget(site_all.site_all_totals(shard, scope), "pv", "uv")
            pairs = pipe.execute()
        pv = sum(int(p or 0) for p, _ in pairs)
        uv = sum(int(u or 0) for _, u in pairs)
        return SiteCount(day, pv, uv)


def day_uv_error(path: str | None = None) -> float:
    """The relative standard error of one day's UV (``site_visit_info``, each of
    ``SiteRange.days``): the site's day in ``COUNTERS_UV_MODE=hll`` is its HyperLogLog's estimate
    (0.81%); a path's day (its pairs) and the site's in the default mode are exact (0.0)."""
    return hll.STANDARD_ERROR if get_settings().uv_mode == "hll" and path is None else 0.0


class SiteRange(NamedTuple):
    """PV/UV over the days ``start``..``end``: ``pv`` summed, ``uv`` the distinct visitors of the
    whole range (a union of the days: a visitor of several days counts once; ``uv_approximate``
    when it is an estimate), with the per-day figures in ``days``."""

    start: date
    end: date
    path: str | None
    pv: int
    uv: int | None
    uv_approximate: bool
    days: list[SiteCount]
    uv_error: float = 0.0
    """The relative standard error of ``uv``: 0.0 when it is exact."""
    uv_counts: str = VISITORS
    """What ``uv`` counts (``core.visitors.uv_counts``): ``visitors``, or ``visitor-days`` over
    several days with COUNTERS_VISITOR_KEY=daily (then the sum of the days' UV)."""


def site_visit_range(
    conn: RedisClient, start: date, end: date, path: str | None = None, *, site: str | None = None
) -> SiteRange:
    """PV and UV of the site (or ``path``) over the local days ``start``..``end`` (at most 400).

    PV is the sum of the days. UV of one day is that day's figure (exact in the default mode);
    the site's UV over several days is the union of per-day HyperLogLogs (``uv_approximate``,
    ~0.81% error): a visitor seen on several days counts once. A path's UV over several days is
    the union of its days' sketches (``store.page_sketch``, kept in the day's pages HASH): exact
    while each day of the range had at most 256 visitors of the path, else estimated
    (``uv_approximate``; ``uv_error``: 0.81%, Redis's HyperLogLog). A day counted before sketches were kept (before
    0.5) adds its own UV as a floor, and the figure is marked approximate. ``site``: as in
    ``site_visit_info``.

    With COUNTERS_VISITOR_KEY=daily, UV over several days counts visitor-days (``uv_counts``):
    no id of one day matches another day's, so the union of the days is the sum of their UV,
    read as that (exact when each day's is; no sketch is read).
    """
    scope = check_site(site)
    with keys.bound(conn):
        check_day_range(start, end)
        if path is not None:
            path = normalize_path(path)
        span = days.days_between(start, end)
        pipe = read_pipeline(conn)
        for day in span:
            if path is not None:
                pipe.hget(page_day.site_day_pages(day, site=scope), path)
            else:
                pipe.hmget(site_day.site_day_totals(day, site=scope), "pv", "uv")
        replies = pipe.execute()
        if path is not None:
            per_day = [SiteCount(day, *page_figures(value)) for day, value in zip(span, replies, strict=True)]
        else:
            per_day = [SiteCount(day, int(pv or 0), int(uv or 0)) for day, (pv, uv) in zip(span, replies, strict=True)]
        pv = sum(d.pv for d in per_day)
        if len(span) == 1:
            error = day_uv_error(path)
            return SiteRange(start, end, path, pv, per_day[0].uv, error > 0, per_day, error)
        if uv_counts(len(span)) == VISITOR_DAYS:  # the days' ids are disjoint: their union is their sum
            error = day_uv_error(path)
            uv = sum(d.uv for d in per_day)
            return SiteRange(start, end, path, pv, uv, error > 0, per_day, error, VISITOR_DAYS)
        if path is not None:
            tables = [page_day.site_day_pages(day, site=scope) for day in span]
            uv, error = _path_range_uv(conn, path, tables, per_day, replies)
            return SiteRange(start, end, path, pv, uv, error > 0, per_day, error)
        uv = page_sketch.hll_union(conn, [site_day.site_day_range_hll(day, site=scope) for day in span])
        return SiteRange(start, end, path, pv, uv, True, per_day, hll.STANDARD_ERROR)


def _path_range_uv(
    conn: RedisClient, path: str, tables: list[str], per_day: list[SiteCount], values: list[Any]
) -> tuple[int, float]:
    """A path's distinct visitors over its days (``site_visit_range``): the union of the days'
    sketches (``page_sketch.union``), and its relative standard error (0.0: exact). A day
    counted before sketches were kept (before 0.5) gives its own UV as a floor, an estimate."""
    sketches = [page_value(value)[2] for value in values]
    uv, error = page_sketch.union(
        conn, ((sketch, page_sketch.hll_key(table, path)) for sketch, table in zip(sketches, tables, strict=True))
    )
    unsketched = [
        d.uv
        for d, sketch in zip(per_day, sketches, strict=True)
        if d.uv and not sketch.startswith(("!", page_sketch.HLL)) and len(sketch) // page_sketch.ID_CHARS < d.uv
    ]
    if unsketched:
        return max(uv, *unsketched), error or page_sketch.STANDARD_ERROR
    return uv, error
