"""A day's top pages (``day_tops``): the most viewed paths of a day's pages HASH (``DayTop``),
stored beside it, so that a range read of ``top_pages`` reads tops, not every page; made by that
read (best effort) and by beat's ``make_day_tops`` for each site's last finished days.
"""

from __future__ import annotations

import heapq
import json
from collections import Counter
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from redis.exceptions import RedisError

from ..core import days
from ..core.days import local_day
from ..core.sites import check_site, site_names, zone_of
from ..core.table import Erasure, StoredKey, Table, register
from ..core.validation import check_day_range, check_int, check_now
from ..store import keys, sweeps
from ..store.client import RedisClient, read_pipeline
from . import page_day, site_day, slots
from .page_day import OTHER, rank, tables_views, views_of_value


def site_day_pages_top(day: date, *, tag: str | None = None, site: str = "") -> str:
    """STRING (JSON) of one day's most viewed paths (``sitestats.DayTop``): made by a range read
    of ``top_pages`` from the day's pages HASH, good while the day's totals pv is the one it
    names; expires with the pages HASH it was made from."""
    return f"{keys.prefix()}site:{{{tag or slots.site_day_tag(day, site)}}}:ptop:{keys.day_label(day, site)}"


def sweep(conn: RedisClient, scope: str, day: date, until: float | None) -> int:
    """The retention sweep of a site's day's top pages (aggregate)."""
    with keys.bound(conn):
        return sweeps.apply(conn, [site_day_pages_top(day, site=scope)], until)


DAY_TOPS = register(
    Table(
        name="day_tops",
        what="a day's 250 most viewed paths and their views (and the most views of a path left "
        "out), made from its pages table for range reads of the top pages",
        module=__name__,
        keys=(StoredKey("ct:site:{tag(D)}:ptop:<D>", "STRING"),),
        tag="per site and day",
        fed_by=(),
        writers=("sitestats.top_pages (a read, best effort)", "make_day_tops (beat, hourly)"),
        readers=("sitestats.top_pages", "counters-tasks top-pages", "/api/top-pages"),
        retention=slots.day_tables_kept(sweep),
        erasure=Erasure.none("paths and their views only"),
    )
)
"""A day's top pages (``core.table``)."""


DAY_TOP_KEPT = 250
"""Paths a day's ``DayTop`` lists: a range read of ``top_pages`` reads these, not every page."""


RESOLVE_LIMIT = 2000
"""Paths whose missing days ``top_pages`` reads one by one before it reads the days whole."""


@dataclass(frozen=True)
class DayTop:
    """The most viewed paths of one day's pages HASH, for range reads: ``pages`` the first
    DAY_TOP_KEPT ``(field, pv)`` by views (then field), ``floor`` the most views of a path left
    out (0: none is), ``pv`` the day's totals pv when it was made (the top is exact while the
    day's pv is still that: every view adds to both in one script call). ``slack``: the views the
    day got since (its pv now minus ``pv``; not stored): a listed path has at most that many more
    than listed, one left out at most ``floor`` plus that many."""

    pv: int
    floor: int
    pages: dict[str, int]
    slack: int = 0

    @classmethod
    def of(cls, pv: int, views: dict[str, int]) -> DayTop:
        ranked = heapq.nsmallest(DAY_TOP_KEPT + 1, views.items(), key=rank)
        left_out = ranked[DAY_TOP_KEPT:]
        return cls(pv, left_out[0][1] if left_out else 0, dict(ranked[:DAY_TOP_KEPT]))

    def dumps(self) -> str:
        return json.dumps(
            {"pv": self.pv, "floor": self.floor, "fields": list(self.pages), "views": list(self.pages.values())}
        )

    @classmethod
    def loads(cls, raw: Any) -> DayTop | None:
        try:
            data = json.loads(raw)
            pages = dict(zip(data["fields"], data["views"], strict=True))
            if not set(map(type, data["views"])) <= {int} or not set(map(type, pages)) <= {str}:  # (C loops)
                return None
            return cls(int(data["pv"]), int(data["floor"]), pages)
        except (ValueError, TypeError, KeyError):
            return None  # not one of ours: made again


def _day_tops(conn: RedisClient, span: list[date], scope: str) -> list[DayTop]:
    """Each day's ``DayTop``: the stored one, with the views the day got since it was made as its
    ``slack`` (today, under traffic: ``_certain_top`` reads the leading paths' views of that day
    one by one, not the day); a day with none, or whose pv is below the top's (its data was
    lost and counted again), made now (``_made_again``)."""
    tops, missing = _stored_tops(conn, span, scope)
    return _made_again(conn, span, tops, missing, scope)


def _stored_tops(conn: RedisClient, span: list[date], scope: str) -> tuple[list[DayTop], list[int]]:
    """Each day's stored ``DayTop`` (its slack set), and the days that have none worth using
    (missing, not ours, or made at a pv above the day's): an empty top in their place. A day
    with no view has an empty, exact one."""
    pipe = read_pipeline(conn)
    for day in span:
        tag = slots.site_day_tag(day, scope)
        pipe.hget(site_day.site_day_totals(day, tag=tag, site=scope), "pv")
        pipe.get(site_day_pages_top(day, tag=tag, site=scope))
    replies = pipe.execute()
    tops: list[DayTop] = []
    missing: list[int] = []
    for n in range(len(span)):
        pv, stored = int(replies[2 * n] or 0), replies[2 * n + 1]
        top = DayTop.loads(stored) if stored is not None else None
        if pv == 0:
            top = DayTop(0, 0, {})
        elif top is None or top.pv > pv:
            missing.append(n)
            top = DayTop(pv, 0, {})
        elif top.pv < pv:
            top = DayTop(top.pv, top.floor, top.pages, pv - top.pv)
        tops.append(top)
    return tops, missing


TOP_DAYS_BACK = 2
"""Finished days per site that beat's ``make_day_tops`` looks at: yesterday and the day before."""


def make_day_tops(conn: RedisClient, now: float | None = None) -> int:
    """Beat's ``make_day_tops`` (hourly): each site's last TOP_DAYS_BACK finished days, in its own
    zone, get an exact ``DayTop`` when theirs is missing or behind their views, so that the first
    range read of those days reads tops, not pages (a first 90-day read that made its 90 tops
    took 1.2 s at a million paths). A day's pages are read whole once, after it ends (and again
    only if it gets views later: a log imported late); when nothing is due, a run costs two reads
    a site and day. Returns the tops made."""
    now = check_now(now)
    made = 0
    with keys.bound(conn):
        for name in site_names():
            scope = check_site(name)
            today = local_day(now, zone_of(scope))
            span = [today - timedelta(days=back) for back in range(TOP_DAYS_BACK, 0, -1)]
            tops, missing = _stored_tops(conn, span, scope)
            due = sorted({*missing, *(n for n, top in enumerate(tops) if top.slack)})
            _made_again(conn, span, tops, due, scope)
            made += len(due)
    return made


def _made_again(conn: RedisClient, span: list[date], tops: list[DayTop], which: list[int], scope: str) -> list[DayTop]:
    """``tops`` with the days at ``which`` made again from their pages (every page read: each a
    complete top, floor 0 and no slack, for this read) and stored for the next reads with the
    pages HASH's time to live, at the day's pv as read before its pages (a view counted between
    the two reads is then slack for the next read, never a view the top claims and lacks). A
    store that fails (a full Redis) is left: the top is only a shortcut, the figures come from
    the pages."""
    if not which:
        return tops
    tops = list(tops)
    pages = [page_day.site_day_pages(span[n], site=scope) for n in which]
    lives = read_pipeline(conn)
    for n in which:
        lives.hget(site_day.site_day_totals(span[n], site=scope), "pv")
    for table in pages:
        lives.pttl(table)
    read = lives.execute()
    pvs, ttls = [int(pv or 0) for pv in read[: len(which)]], read[len(which) :]
    made = []
    for n, pv, ttl, views in zip(which, pvs, ttls, tables_views(conn, pages), strict=True):
        made.append((site_day_pages_top(span[n], site=scope), DayTop.of(pv, views), ttl))
        tops[n] = DayTop(pv, 0, views)  # this read has every page of the day
    try:
        store = read_pipeline(conn)
        for key, top, ttl in made:
            store.set(key, top.dumps(), px=ttl if ttl > 0 else days.DAY * 1000)
        store.execute()
    except RedisError:
        pass
    return tops


def top_pages(
    conn: RedisClient, start: date, end: date, limit: int = 10, *, site: str | None = None
) -> list[tuple[str, int]]:
    """``(path, page views)`` over the local days ``start``..``end``, most viewed first, ties by
    path. Exact, and bounded by the days, never by the paths ever seen: each day's most viewed
    paths (``DayTop``, made from its pages HASH once, its day's views since as slack) give the
    candidates and, with the most views of a path each day left out, a bound on every other
    path; the leading candidates' other days (and the days behind their tops) are read one by
    one until the first ``limit`` are certain; days whose slack leaves them uncertain are made
    again and tried once more. When they cannot be (ties at the bound, or more than RESOLVE_LIMIT paths to read),
    every page of the days is read and summed, as a day's HASH holds at most
    COUNTERS_MAX_DAY_PATHS paths plus ``OTHER``. ``site``: as in ``site_visit_info``."""
    scope = check_site(site)
    with keys.bound(conn):
        check_day_range(start, end)
        check_int(limit, "limit", 1, 10_000)
        span = days.days_between(start, end)
        tops = _day_tops(conn, span, scope)
        ranked = _certain_top(conn, span, tops, limit, scope)
        behind = [n for n, top in enumerate(tops) if top.slack]
        if ranked is None and behind:  # the days that got views since their tops: made again, tried again
            tops = _made_again(conn, span, tops, behind, scope)
            ranked = _certain_top(conn, span, tops, limit, scope)
        if ranked is None:  # every page: a day whose top lists them all (floor 0) is not read again
            totals: Counter[str] = Counter()
            for top in tops:
                if not top.floor:
                    totals.update(top.pages)
            partial = [
                page_day.site_day_pages(day, site=scope) for day, top in zip(span, tops, strict=True) if top.floor
            ]
            for views in tables_views(conn, partial):
                totals.update(views)
            ranked = sorted(totals.items(), key=rank)[:limit]
        return [(path or OTHER, n) for path, n in ranked]


def _certain_top(
    conn: RedisClient, span: list[date], tops: list[DayTop], limit: int, scope: str
) -> list[tuple[str, int]] | None:
    """The first ``limit`` ``(field, pv)`` over the days of ``tops``, or None when they are not
    certain within RESOLVE_LIMIT reads. A field's views over the range are at least those its
    days list, and at most that plus each other day's floor and each day's slack; a field no day
    lists has at most the sum of the floors and slacks. Candidates are made exact (the days that
    may hold more of them than listed read one by one) in the order of their bound, until the
    ``limit``-th exact total is over every bound left."""
    known: dict[str, int] = {}
    listed_floors: dict[str, int] = {}  # per field, the floors of the days that list it
    known_get, floors_get = known.get, listed_floors.get
    for top in tops:  # (one plain loop a day: the range's 250 x days entries are most of a read)
        floor = top.floor
        if floor:
            for field, n in top.pages.items():
                known[field] = known_get(field, 0) + n
                listed_floors[field] = floors_get(field, 0) + floor
        else:
            for field, n in top.pages.items():
                known[field] = known_get(field, 0) + n
    floors = sum(top.floor + top.slack for top in tops)  # the most views of a field no day lists
    if not floors:  # every day's top lists all its paths
        return heapq.nsmallest(limit, known.items(), key=rank)
    upper = {field: n + floors - floors_get(field, 0) for field, n in known.items()}
    order = [field for field, _bound in sorted(upper.items(), key=rank)]
    if len(order) < limit or upper[order[limit - 1]] <= floors:
        return None  # a path no day lists may be among the first ``limit``: no read can rule it out
    exact: dict[str, int] = {}
    next_at, reads, size = 0, 0, max(limit, 50)
    unsure = [(n, top.pages, top.slack) for n, top in enumerate(tops) if top.floor or top.slack]  # days to read

    def certain() -> bool:
        best = heapq.nsmallest(limit, exact.items(), key=rank)
        left = upper[order[next_at]] if next_at < len(order) else 0
        return len(best) == limit and best[-1][1] > max(floors, left)

    while not certain():
        if next_at >= len(order) or reads > RESOLVE_LIMIT:
            return None
        batch = order[next_at : next_at + size]
        next_at, size = next_at + len(batch), 2 * size
        asked = [(field, n) for field in batch for n, pages, slack in unsure if slack or field not in pages]
        values = []
        if asked:
            pipe = read_pipeline(conn)
            for field, n in asked:
                pipe.hget(page_day.site_day_pages(span[n], site=scope), field)
            values = pipe.execute()
        reads += len(asked)
        for field in batch:
            exact[field] = known[field]
        for (field, n), value in zip(asked, values, strict=True):  # a day read replaces what it lists
            exact[field] += views_of_value(value) - tops[n].pages.get(field, 0)
    return heapq.nsmallest(limit, exact.items(), key=rank)
