"""Funnels, exact and windowed, judged by the events' own times (issue 43; docs/events.md
"Funnels"): the table ``funnel``, fed by every write of page views (kind ``visit``) and events
(kind ``event``), and its read ``funnel_report``.

A page view (``visits.Visit``) or an event (``core.events.Event``) with a visitor, of a funnel's
site, at or after the funnel's ``since``, is a step event of every step whose ``Match`` hits it.
Each step event is kept in its visitor's state (one HASH a visitor and funnel), and the
visitor's attempts are recomputed from the whole state in Lua (``store/lua/funnel_step.lua``) on
each arrival, the day results corrected by the difference: the figures are a function of the
set of step events, whatever order they came in. All keys of a funnel share one hash tag (its
site, name and ``since``: a funnel defined again starts on keys of its own), so one call sees a
visitor's state and the day results.

The feeders cut their Lua calls to ``PER_CALL`` step events (each call at most once per its id,
a marker in the funnel's tag), so none takes 5 ms of the server's CPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from datetime import date, timedelta
from typing import Any

from ..core.conversions import Funnel
from ..core.days import day_end, days_between, local_day, today
from ..core.settings import Settings, get_settings
from ..core.sites import check_site, zone_of
from ..core.table import AGGREGATE, VISITOR_LEVEL, Erasure, Feeder, ForgetterSlot, Retention, StoredKey, Table, register
from ..core.validation import check_day_range
from ..errors import InvalidInput
from ..store import keys, sweeps
from ..store.client import RedisClient, as_str, read_pipeline
from ..store.scripts import WritePlan, run_script
from . import definitions
from .report import FunnelReport, FunnelStep

TIME_BUCKETS: tuple[tuple[str, float], ...] = (
    ("<=10s", 10),
    ("<=30s", 30),
    ("<=1m", 60),
    ("<=5m", 300),
    ("<=15m", 900),
    ("<=30m", 1800),
    ("<=1h", 3600),
    ("<=6h", 21600),
    ("<=1d", 86400),
    ("<=7d", 604800),
    (">7d", float("inf")),
)
"""The time-to-convert histogram's buckets: (label, the longest time from the step before, in
seconds, that falls in it); the last takes the rest."""

STATE_CAP = 64
"""Most step events (distinct time, steps and day) a visitor's state keeps for a funnel; a step
event past it is not judged and is counted as ``capped`` (a visitor with 64 step events inside one
window and lateness allowance is a robot)."""

PER_CALL = 64
"""Most step events one Lua call judges."""

VISITORS_PER_CALL = 8
"""Most visitors one Lua call judges: each is recomputed from its whole state, about 0.2 ms of the
server's CPU for a state at ``STATE_CAP`` (8 steps), a few tens of microseconds for a typical one,
so a call stays near 2 ms at the worst (``tests/events/test_funnels.py``'s budget test)."""


def funnel_tag(funnel: Funnel) -> str:
    """The hash tag of a funnel's keys: one per site, name and ``since``."""
    return keys.hash_tag("funnel", keys.scoped(funnel.site, f"{funnel.name}@{int(funnel.since)}"))


def funnel_base(funnel: Funnel) -> str:
    """The common start of a funnel's keys, ``ct:fun:{tag(S F)}:``."""
    return f"{keys.prefix()}fun:{{{funnel_tag(funnel)}}}:"


def step_mask(funnel: Funnel, *, path: str | None = None, name: str | None = None, props: Any = ()) -> int:
    """The steps a page view of ``path`` (or an event ``name`` with ``props``) is a step event of,
    as bits (bit k-1: step k; 0: none)."""
    mask = 0
    for k, step in enumerate(funnel.steps):
        hit = step.match.hits_view(path) if path is not None else step.match.hits_event(name or "", props)
        if hit:
            mask |= 1 << k
    return mask


StepEvent = tuple[str, float, int, date]
"""One step event of a funnel: (visitor, ts, step mask, local day of ts)."""


def _of_visit(funnel: Funnel, visit: Any) -> StepEvent | None:
    view = visit.view
    if not view.visitor or view.site != funnel.site or visit.ts < funnel.since:
        return None
    mask = step_mask(funnel, path=view.path)
    return (view.visitor, visit.ts, mask, view.day) if mask else None


def _of_event(funnel: Funnel, event: Any) -> StepEvent | None:
    if not event.visitor or event.site != funnel.site or event.ts < funnel.since:
        return None
    mask = step_mask(funnel, name=event.name, props=event.props)
    return (event.visitor, event.ts, mask, event.day) if mask else None


def _feeder(step_event: Callable[[Funnel, Any], StepEvent | None], site_of: Callable[[Any], str]) -> Feeder:
    """A feeder of the items of one kind: each item's step events of its site's funnels, each
    funnel's in calls (``_cut``) under ``<call id>/<n>``, queued on the kind's write plan."""

    def feed(plan: WritePlan, calls: list[tuple[list[Any], str | None]]) -> None:
        defined = definitions.current(plan.conn).funnels
        if not defined:
            return
        queued: list[tuple[Funnel, list[StepEvent], str | None]] = []
        for items, call_id in calls:
            by_funnel: dict[Funnel, list[StepEvent]] = {}
            for item in items:
                for funnel in defined.get(site_of(item), ()):
                    one = step_event(funnel, item)
                    if one is not None:
                        by_funnel.setdefault(funnel, []).append(one)
            for funnel, found in by_funnel.items():
                for n, part in enumerate(_cut(found)):
                    queued.append((funnel, part, None if call_id is None else f"{call_id}/{n}"))
        if queued:
            plan.add(lambda pipe: _queue(plan.conn, pipe, queued, time.time()))

    return feed


def _cut(found: list[StepEvent]) -> list[list[StepEvent]]:
    """Step events by visitor (each visitor's together, in the order they came), in parts of at
    most ``PER_CALL`` step events and ``VISITORS_PER_CALL`` visitors; the same items always cut the
    same way (a redelivery's ids match)."""
    by_visitor: dict[str, list[StepEvent]] = {}
    for one in found:
        by_visitor.setdefault(one[0], []).append(one)
    parts: list[list[StepEvent]] = [[]]
    visitors = 0
    for visitor_events in by_visitor.values():
        if visitors >= VISITORS_PER_CALL:
            parts.append([])
            visitors = 0
        visitors += 1
        for one in visitor_events:
            if len(parts[-1]) >= PER_CALL:
                parts.append([])
                visitors = 1
            parts[-1].append(one)
    return parts


def call_args(funnel: Funnel, part: list[StepEvent], call_id: str | None, now: float) -> tuple[list[str], list[Any]]:
    """KEYS and ARGV of one ``funnel_step`` call (the script's header says them)."""
    settings = get_settings()
    base = funnel_base(funnel)
    ttl = settings.dedupe_ttl if call_id is not None else 0
    marker = base + "seen:" + ("" if call_id is None else keys.escape(call_id))
    args: list[Any] = [ttl, micros(now), micros(funnel.window), micros(settings.funnel_lateness)]
    args += [micros(settings.future_tolerance), len(funnel.steps), STATE_CAP, _keep_seconds(settings), base]
    args += [micros(step.window or 0) for step in funnel.steps]
    args += [len(TIME_BUCKETS) - 1, *(micros(bound) for _label, bound in TIME_BUCKETS[:-1])]
    args.append(settings.visitor_days * 86400)  # (a state is visitor-level data: COUNTERS_VISITOR_DAYS at most)
    by_visitor: dict[str, list[StepEvent]] = {}
    for one in part:
        by_visitor.setdefault(one[0], []).append(one)
    for visitor, events in by_visitor.items():
        args += [visitor, len(events)]
        args += [f"{micros(ts):016d}|{mask:03d}|{day.isoformat()}" for _v, ts, mask, day in events]
    return [marker], args


def micros(seconds: float) -> int:
    """Seconds as the whole microseconds the judge works in (exact in Lua's numbers)."""
    return round(seconds * 1_000_000)


def _keep_seconds(settings: Settings) -> int:
    return (settings.day_totals_days + 2) * 86400


def _queue(conn: RedisClient, pipe: Any, queued: list[tuple[Funnel, list[StepEvent], str | None]], now: float) -> None:
    for funnel, part, call_id in queued:
        call_keys, args = call_args(funnel, part, call_id, now)
        run_script(conn, "funnel_step", call_keys, args, client=pipe)


feed_visits = _feeder(_of_visit, lambda visit: visit.view.site)
"""The funnel table's feeder of page views (kind ``visit``; ``core.table.Feeder``)."""

feed_events = _feeder(_of_event, lambda event: event.site)
"""The funnel table's feeder of events (kind ``event``; ``core.table.Feeder``)."""


def judge(
    conn: RedisClient,
    funnel: Funnel,
    found: Iterable[StepEvent],
    call_id: str | None = None,
    *,
    now: float | None = None,
) -> list[Any]:
    """Judge step events of ``funnel`` outside a kind's write (an import, a test), as of ``now``
    (default: now): the calls a feeder queues; each reply ``[visitors recomputed, late, capped]``
    or -1 (the call was applied before)."""
    now = time.time() if now is None else now
    replies: list[Any] = []
    with keys.bound(conn, write=True) as used:
        for n, part in enumerate(_cut(list(found))):
            if part:
                call_keys, args = call_args(funnel, part, None if call_id is None else f"{call_id}/{n}", now)
                replies.append(run_script(conn, "funnel_step", call_keys, args))
        keys.confirm_written(conn, used)
    return replies


def funnel_report(
    conn: RedisClient,
    name: str,
    site: str | None = None,
    start: date | None = None,
    end: date | None = None,
    *,
    now: float | None = None,
) -> FunnelReport:
    """The funnel ``name`` of ``site`` over ``start``..``end`` (local days of the site's zone;
    default: the 7 days to today, from the day of its ``since`` at the earliest): each step's
    visitors (a visitor once over the range: the union of the days' sets), their shares, the
    time-to-convert histograms (a visitor and day once), the days whose window is still open,
    and the step events not judged (``late``; past the state's cap: ``capped``). InvalidInput
    when no such funnel is defined."""
    scope = check_site(site)
    funnel = definitions.funnel(conn, name, scope)
    if funnel is None:
        raise InvalidInput(f"no funnel named {name!r} on site {site or 'default'!r}")
    zone = zone_of(scope)
    now = time.time() if now is None else now
    end = today(zone) if end is None else end
    if start is None:
        start = max(end - timedelta(days=6), min(end, local_day(funnel.since, zone)))
    start, end = check_day_range(start, end)
    days = days_between(start, end)
    n = len(funnel.steps)
    with keys.bound(conn):
        base = funnel_base(funnel)
        pipe = read_pipeline(conn)
        for day in days:
            for k in range(1, n + 1):
                pipe.smembers(f"{base}step:{day.isoformat()}:{k}")
            pipe.hgetall(f"{base}day:{day.isoformat()}")
        replies = pipe.execute()
    reached: list[set[str]] = [set() for _ in range(n)]
    counts: dict[str, int] = {}
    at = 0
    for _day in days:
        for k in range(n):
            reached[k].update(as_str(m) for m in replies[at + k])
        for field, value in replies[at + n].items():
            counts[as_str(field)] = counts.get(as_str(field), 0) + int(value)
        at += n + 1
    first = len(reached[0])
    steps = []
    for k in range(n):
        visitors = len(reached[k])
        previous = len(reached[k - 1]) if k else visitors
        histogram = (
            [(label, counts.get(f"h{k + 1}:{b + 1}", 0)) for b, (label, _bound) in enumerate(TIME_BUCKETS)] if k else []
        )
        steps.append(
            FunnelStep(
                k + 1,
                funnel.steps[k].match.label(),
                visitors,
                visitors / first if first else 0.0,
                visitors / previous if previous else 0.0,
                histogram,
            )
        )
    open_days = [day for day in days if now < day_end(day, zone) + funnel.window]
    return FunnelReport(
        funnel.name,
        scope,
        start,
        end,
        funnel.window,
        funnel.since,
        steps,
        open_days,
        counts.get("late", 0),
        counts.get("capped", 0),
    )


FORGET_FUNNEL = ForgetterSlot("funnel")
"""This table's ``Erasure.forget``: ``events.erase.forget_funnels`` (installed by it: it imports this module)."""


def _site_funnels(conn: RedisClient, scope: str) -> list[Funnel]:
    """The funnels defined on site ``scope`` now (a removed funnel's keys keep their TTL)."""
    return [funnel for funnel in definitions.funnels(conn) if funnel.site == scope]


def sweep_visitors(conn: RedisClient, scope: str, day: date, until: float | None) -> int:
    """The retention sweep of a site's day in each of its funnels (visitor-level): the day's
    outcomes by visitor (``res:<D>``) and the visitors of each step (``step:<D>:<k>``)."""
    with keys.bound(conn):
        removed = 0
        for funnel in _site_funnels(conn, scope):
            base = funnel_base(funnel)
            steps = [f"{base}step:{day.isoformat()}:{k}" for k in range(1, len(funnel.steps) + 1)]
            removed += sweeps.apply(conn, [f"{base}res:{day.isoformat()}", *steps], until)
        return removed


def sweep_figures(conn: RedisClient, scope: str, day: date, until: float | None) -> int:
    """The retention sweep of a site's day in each of its funnels (aggregate: the histograms,
    ``day:<D>``)."""
    with keys.bound(conn):
        return sum(
            sweeps.apply(conn, [f"{funnel_base(f)}day:{day.isoformat()}"], until) for f in _site_funnels(conn, scope)
        )


FUNNEL = register(
    Table(
        name="funnel",
        what="each funnel's visitors by step and day (entered that day, reached the step in order within the window), "
        "their time-to-convert histograms, and each visitor's step events while they may still count",
        module=__name__,
        keys=(
            StoredKey("ct:fun:{tag(S F)}:v:<visitor>", "HASH"),
            StoredKey("ct:fun:{tag(S F)}:res:<D>", "HASH"),
            StoredKey("ct:fun:{tag(S F)}:step:<D>:<k>", "SET"),
            StoredKey("ct:fun:{tag(S F)}:day:<D>", "HASH"),
            StoredKey("ct:fun:{tag(S F)}:seen:<call id>", "STRING"),
        ),
        tag="one per funnel (its site, name and since)",
        fed_by=("visit", "event"),
        writers=("store/lua/funnel_step.lua, with every write of page views and events",),
        readers=("events.funnel_report",),
        retention=Retention(
            "a visitor's state: its latest step event + 2 windows + COUNTERS_FUNNEL_LATENESS; a day's outcomes "
            "and step sets (visitor ids) never past COUNTERS_VISITOR_DAYS after the day, its histograms "
            "COUNTERS_AGGREGATE_DAYS (0: for ever), both removed by the hourly apply_retention for the funnels "
            "defined (a removed funnel's days keep their TTL, COUNTERS_DAY_TOTALS_DAYS + 2 days)",
            "COUNTERS_AGGREGATE_DAYS",
            lambda settings: settings.aggregate_days or None,
            {VISITOR_LEVEL: sweep_visitors, AGGREGATE: sweep_figures},
        ),
        erasure=Erasure(
            "visitor ids (its state, its outcome of each day, its membership of each step's set)",
            True,
            "DEL of the funnel's v:<visitor>; for each day, HGET then HDEL of its res:<D> fields, SREM from "
            "the step:<D>:<k> sets it reached, and HINCRBY -1 of the histogram buckets its outcome names, "
            "in one call a funnel and day (lua/funnel_forget.lua: events/erase.py)",
            forget=FORGET_FUNNEL,
        ),
        feeds={"visit": feed_visits, "event": feed_events},
    )
)
