"""The goals table (``goal_day``, issue 43; docs/events.md "Goals"): per site, local day and goal,
its conversions (each page view or event that matches it at or after the goal's ``since``), its
unique converters of the day (a visitor once a goal a day: exact through a pairs SET of
``<visitor><goal digest>`` members, as ``sitestats.pairs``), a sketch of them
(``store.page_sketch``: a range's converters are the union of its days' sketches) and its revenue
(the goal's numeric event property, summed; the conversions whose property was missing or not a
number counted beside it). Conversions of no visitor (an event sent without an IP) count as
conversions only.

Fed by the ``visit`` and ``event`` kinds (``Table(feeds=...)``): each call's items are judged
against the goals of their site (``definitions.current``, the one rule ``Match.hits_view`` /
``Match.hits_event``), grouped by site and day, cut by position into parts of ``ITEMS_PER_PART``
(a part's id ``<call id>/g<n>``: a function of the call's items alone) and written by
``store/lua/goal_day.lua``, one call per ``CONVERSIONS_PER_CALL`` conversions at most, each goal
of a part at most once (its name in the part's marker HASH). Read by ``goal_report``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from .. import refusals
from ..core import days
from ..core.conversions import Goal
from ..core.events import number_of
from ..core.settings import get_settings
from ..core.sites import check_site, zone_of
from ..core.table import AGGREGATE, VISITOR_LEVEL, Erasure, ForgetterSlot, Retention, StoredKey, Table, register
from ..core.validation import check_day_range
from ..core.visitors import pair_visitor
from ..sitestats.reads import site_visit_range
from ..store import keys, page_sketch, sweeps
from ..store.client import RedisClient, as_str, read_pipeline
from ..store.scripts import WritePlan, run_script
from . import definitions
from .report import GoalReport, GoalRow

ITEMS_PER_PART = 100
"""Items (views or events) of one site and day of a call that make one part, deduplicated under
``<call id>/g<n>``: a goal's conversions in one part are at most this many."""

CONVERSIONS_PER_CALL = 400
"""Conversions one ``goal_day`` call takes at most (its goals' together; a goal's conversions of a
part never split), and ``GOAL_COST`` more for each goal: a converter costs the server a SADD and a
sketch id, a goal a marker field and a few HINCRBYs. (Measured: docs/events.md "Goals".)"""

GOAL_COST = 4
"""What one goal of a call counts for against ``CONVERSIONS_PER_CALL`` beside its conversions."""

FIELDS = ("c", "u", "s", "r", "x")
"""A goal's fields in its day's HASH, ``<letter>:<goal id>`` (``goal_id``): conversions,
converters, their sketch, revenue, conversions without a revenue number."""


def goal_id(goal: Goal) -> str:
    """How a goal's figures are named in its days' keys: its name and ``since`` (``<name>@<since>``),
    so a goal defined again under its name (``definitions.define_goal``: it starts again from its
    new ``since``) counts in fields of its own, not on top of the figures of the goal it replaced."""
    return f"{goal.name}@{int(goal.since)}"


def goal_day_tag(day: date, site: str = "") -> str:
    """The hash tag of a site's goals of one local day."""
    return keys.hash_tag("goal-day", keys.scoped(site, day.isoformat()))


def goal_day_key(day: date, *, tag: str | None = None, site: str = "") -> str:
    """HASH of a site's goals on one local day: ``open_until`` and per goal ``c:``, ``u:``, ``s:``,
    ``r:``, ``x:`` and its name (``FIELDS``)."""
    return f"{keys.prefix()}goal:{{{tag or goal_day_tag(day, site)}}}:day:{keys.day_label(day, site)}"


def goal_day_pairs(day: date, *, tag: str | None = None, site: str = "") -> str:
    """SET of "<visitor><goal digest>" (11 + 8 characters): who converted to which goal that day
    (each goal's exact converters of the day, until the day's open_until)."""
    return f"{keys.prefix()}goal:{{{tag or goal_day_tag(day, site)}}}:pairs:{keys.day_label(day, site)}"


def goal_seen(part_id: str, *, tag: str) -> str:
    """HASH goal id (``goal_id``) -> 1: the goals of this part of a message already written (dedupe, with a TTL)."""
    return f"{keys.prefix()}goal:{{{tag}}}:seen:{keys.escape(part_id)}"


@dataclass
class _Converted:
    """One goal's conversions in one part: how many, their visitors (pairs form), revenue."""

    goal: Goal
    conversions: int = 0
    visitors: list[str] = field(default_factory=list)
    revenue: float = 0.0
    no_revenue: int = 0


Judged = tuple[str, date, float, str | None, list[tuple[Goal, float | None]]]
"""An item judged: its site, day, time, visitor id, and each goal it converts with its revenue."""


class _Judge:
    """The goals of each site judged once a distinct page (or event name and properties) of a
    write, not once an item: a write's views share a few paths (judged one by one, 100 goals'
    matching was half of the feeder's time in a profile). An item then takes the goals whose
    ``since`` it reaches."""

    def __init__(self, defined: dict[str, tuple[Goal, ...]]) -> None:
        self.defined = defined
        self.pages: dict[tuple[str, str], list[Goal]] = {}
        self.events: dict[tuple[str, str, Any], list[tuple[Goal, float | None]]] = {}

    def view(self, visit: Any) -> list[tuple[Goal, float | None]]:
        """The goals a page view (``visits.Visit``) converts."""
        view = visit.view
        hits = self.pages.get((view.site, view.path))
        if hits is None:
            goals = self.defined.get(view.site, ())
            hits = self.pages[view.site, view.path] = [goal for goal in goals if goal.match.hits_view(view.path)]
        return [(goal, None) for goal in hits if visit.ts >= goal.since]

    def event(self, event: Any) -> list[tuple[Goal, float | None]]:
        """The goals an event (``core.events.Event``) converts, with its revenue for each (None:
        the goal has none, or the property is missing or not a number)."""
        key = (event.site, event.name, event.props)
        hits = self.events.get(key)
        if hits is None:
            goals = [g for g in self.defined.get(event.site, ()) if g.match.hits_event(event.name, event.props)]
            props = dict(event.props) if goals else {}
            hits = self.events[key] = [
                (goal, None if goal.revenue is None else number_of(props.get(goal.revenue))) for goal in goals
            ]
        return [(goal, revenue) for goal, revenue in hits if event.ts >= goal.since]


def feed_visits(plan: WritePlan, calls: list[tuple[list[Any], str | None]]) -> None:
    """The goals' conversions of calls of visits (``visits.Visit``), queued on the visit kind's
    write plan (``core.table.Feeder``): nothing at all when no site has a goal."""
    defined = definitions.current(plan.conn).goals
    if not defined:
        return
    judge = _Judge(defined)
    _feed(
        plan,
        [
            ([(v.view.site, v.view.day, v.ts, v.view.visitor, judge.view(v)) for v in items], call_id)
            for items, call_id in calls
        ],
    )


def feed_events(plan: WritePlan, calls: list[tuple[list[Any], str | None]]) -> None:
    """The goals' conversions of calls of events (``core.events.Event``), queued on the event
    kind's write plan (``core.table.Feeder``): nothing at all when no site has a goal."""
    defined = definitions.current(plan.conn).goals
    if not defined:
        return
    judge = _Judge(defined)
    _feed(
        plan,
        [([(e.site, e.day, e.ts, e.visitor, judge.event(e)) for e in items], call_id) for items, call_id in calls],
    )


def _feed(plan: WritePlan, calls: list[tuple[list[Judged], str | None]]) -> None:
    """Each call's judged items grouped by site and day in order, cut into parts of
    ``ITEMS_PER_PART`` positions (every item, converting or not: the cut and the parts' ids are
    the call's alone, whatever the goals), the parts' conversions sent in ``goal_day`` calls."""
    conn = plan.conn
    settings = get_settings()
    sent: list[tuple[str | None, int]] = []  # (call id, its calls' replies) in order
    with keys.bound(conn, write=True):
        script_calls: list[tuple[list[str], list[Any]]] = []
        for items, call_id in calls:
            by_day: dict[tuple[str, date], list[Judged]] = defaultdict(list)
            for item in items:
                by_day[item[0], item[1]].append(item)
            ttl = settings.dedupe_ttl if call_id is not None else 0
            made = 0
            for (site, day), day_items in by_day.items():
                parts = [day_items[n : n + ITEMS_PER_PART] for n in range(0, len(day_items), ITEMS_PER_PART)]
                for part, part_id in zip(parts, keys.chunk_ids(call_id, len(parts), "/g"), strict=True):
                    converted = _converted(part)
                    if converted:
                        for batch in _batches(converted):
                            script_calls.append(_call(site, day, batch, part_id, ttl, settings))
                            made += 1
            sent.append((call_id, made))

    def queue(pipe: Any) -> None:
        for script_keys, args in script_calls:
            run_script(conn, "goal_day", script_keys, args, client=pipe)

    def read(replies: list[Any]) -> None:
        at = 0
        for call_id, made in sent:
            closed = sum(int(reply[2]) for reply in replies[at : at + made])
            at += made
            refusals.count_partial(conn, "goal_day", None if call_id is None else f"{call_id}/goals", closed)

    if script_calls:
        plan.add(queue, read)


def _converted(part: Iterable[Judged]) -> list[_Converted]:
    """A part's conversions by goal, in the order goals first convert."""
    by_goal: dict[str, _Converted] = {}
    for _site, _day, _ts, visitor, hits in part:
        member = None if visitor is None or not hits else pair_visitor(visitor)  # (once an item)
        for goal, revenue in hits:
            converted = by_goal.get(goal.name)
            if converted is None:
                converted = by_goal[goal.name] = _Converted(goal)
            converted.conversions += 1
            if member is not None:
                converted.visitors.append(member)
            if goal.revenue is not None:
                if revenue is None or not math.isfinite(converted.revenue + revenue):
                    converted.no_revenue += 1
                else:
                    converted.revenue += revenue
    return list(by_goal.values())


def _batches(converted: list[_Converted]) -> list[list[_Converted]]:
    """A part's goals in calls of at most ``CONVERSIONS_PER_CALL`` (each goal's cost its
    conversions and ``GOAL_COST``), a goal never split."""
    batches: list[list[_Converted]] = []
    cost = CONVERSIONS_PER_CALL
    for one in converted:
        weight = one.conversions + GOAL_COST
        if cost + weight > CONVERSIONS_PER_CALL:
            batches.append([])
            cost = 0
        batches[-1].append(one)
        cost += weight
    return batches


def _call(
    site: str, day: date, batch: list[_Converted], part_id: str | None, ttl: int, settings: Any
) -> tuple[list[str], list[Any]]:
    """One ``goal_day`` call's keys and arguments (the script's header says what each is)."""
    tag = goal_day_tag(day, site)
    day_key = goal_day_key(day, tag=tag, site=site)
    marker = goal_seen(part_id, tag=tag) if ttl and part_id is not None else day_key  # (no dedupe: no marker)
    zone = zone_of(site)
    args: list[Any] = [
        ttl if part_id is not None else 0,
        days.kept_until(day, settings.day_grace_days, zone),
        days.kept_from_now(settings.day_grace_days),
        days.kept_until(day, max(settings.day_totals_days, settings.day_grace_days), zone),
        days.kept_from_now(max(settings.day_totals_days, settings.day_grace_days)),
        len(batch),
    ]
    for one in batch:
        args += [
            goal_id(one.goal),
            keys.path_digest(goal_id(one.goal)),
            one.conversions,
            "" if one.goal.revenue is None else repr(one.revenue),
            one.no_revenue,
            "".join(one.visitors),
        ]
    return [day_key, goal_day_pairs(day, tag=tag, site=site), marker], args


def goal_report(
    conn: RedisClient, site: str | None = None, start: date | None = None, end: date | None = None
) -> GoalReport:
    """The goals of ``site`` (None: the default site) over the local days ``start``..``end``
    (``end`` None: today in the site's zone; ``start`` None: ``end``), each defined goal with its
    conversions, converters (a visitor once over the range: exact while each day kept its
    converters' ids, ``store.page_sketch.union``; one day: that day's exact figure), the rate of
    converters to the range's unique visitors (``sitestats.site_visit_range``: an estimate over
    several days, so then is the rate), revenue (None for a goal without) and since."""
    scope = check_site(site)
    if end is None:
        end = days.today(zone_of(scope))
    if start is None:
        start = end
    check_day_range(start, end)
    visits = site_visit_range(conn, start, end, site=scope)
    visitors = visits.uv or 0
    defined = definitions.goals(conn, scope)
    span = days.days_between(start, end)
    rows: list[GoalRow] = []
    with keys.bound(conn):
        day_keys = [goal_day_key(day, site=scope) for day in span]
        pipe = read_pipeline(conn)
        for day_key in day_keys:
            pipe.hmget(day_key, [f"{letter}:{goal_id(goal)}" for goal in defined for letter in FIELDS])
        replies = pipe.execute() if defined else []
        for number, goal in enumerate(defined):
            conversions, one_day_uv, revenue, no_revenue = 0, 0, 0.0, 0
            sketches: list[page_sketch.Sketch] = []
            for day_key, values in zip(day_keys, replies, strict=True):
                c, u, s, r, x = values[number * len(FIELDS) : (number + 1) * len(FIELDS)]
                conversions += int(c or 0)
                one_day_uv = int(u or 0)  # (read when the range is one day)
                revenue += float(r or 0)
                no_revenue += int(x or 0)
                sketches.append((as_str(s or ""), page_sketch.hll_key(day_key, goal_id(goal))))
            if len(span) == 1:
                converters, error = one_day_uv, 0.0
            else:
                converters, error = page_sketch.union(conn, sketches)
            rate = converters / visitors if visitors else 0.0
            rows.append(
                GoalRow(
                    goal.name,
                    goal.match.label(),
                    conversions,
                    converters,
                    error,
                    rate,
                    None if goal.revenue is None else revenue,
                    goal.since,
                    no_revenue,
                )
            )
    return GoalReport(scope, start, end, visitors, visits.uv_error, rows)


FORGET_GOAL_DAY = ForgetterSlot("goal_day")
"""This table's ``Erasure.forget``: ``events.erase.forget_goal_days`` (installed by it: it imports this module)."""


def sweep_pairs(conn: RedisClient, scope: str, day: date, until: float | None) -> int:
    """The retention sweep of a site's day's goal pairs (visitor-level)."""
    with keys.bound(conn):
        return sweeps.apply(conn, [goal_day_pairs(day, site=scope)], until)


def sweep_day(conn: RedisClient, scope: str, day: date, until: float | None) -> int:
    """The retention sweep of a site's day's goal figures (aggregate): the HASH and the HyperLogLog
    of each goal whose sketch (``s:<goal>``) reads ``#`` (HSCAN of the HASH)."""
    with keys.bound(conn):
        table_key = goal_day_key(day, site=scope)

        def hll_of(field: str, value: str) -> str | None:
            letter, _sep, goal = field.partition(":")
            return page_sketch.hll_key(table_key, goal) if letter == "s" and sweeps.is_hll_sketch(value) else None

        return sweeps.apply(conn, [*sweeps.sketched_keys(conn, table_key, hll_of), table_key], until)


GOAL_DAY = register(
    Table(
        name="goal_day",
        what="each goal's conversions, unique converters (exact, and a sketch of them for a range) "
        "and revenue of a local day, and who converted to which goal that day",
        module=__name__,
        keys=(
            StoredKey("ct:goal:{tag(D)}:day:<D>", "HASH"),
            StoredKey("ct:goal:{tag(D)}:day:<D>:<digest(goal)>", "HLL"),
            StoredKey("ct:goal:{tag(D)}:pairs:<D>", "SET"),
            StoredKey("ct:goal:{tag(D)}:seen:<msg>", "HASH"),
        ),
        tag="per site and day",
        fed_by=("visit", "event"),
        writers=("store/lua/goal_day.lua",),
        readers=("events.goal_report", "counters-tasks goals"),
        retention=Retention(
            "the HASH and its HLLs: the later of the end of D and the latest write, plus "
            "COUNTERS_DAY_TOTALS_DAYS, and never past COUNTERS_AGGREGATE_DAYS (0: for ever) after the end of D; "
            "the pairs: until the day's open_until (the later of the end of D and its first write, plus "
            "COUNTERS_DAY_GRACE_DAYS), never past COUNTERS_VISITOR_DAYS after it (the hourly apply_retention); "
            "a marker: COUNTERS_DEDUPE_TTL",
            "COUNTERS_AGGREGATE_DAYS",
            lambda settings: settings.aggregate_days or None,
            {VISITOR_LEVEL: sweep_pairs, AGGREGATE: sweep_day},
        ),
        erasure=Erasure(
            "visitor ids (the pairs) and a sketch of each goal's converters",
            True,
            "SREM of the visitor's pairs member of each goal (SSCAN MATCH <pair id>*), the goal's converters "
            "of the day (u:) minus one and the visitor's 6-character id out of its sketch (s:), in one call "
            "(lua/forget_sketches.lua: events/erase.py); a sketch past 256 converters a day is a Redis "
            "HyperLogLog (0.81% standard error) that cannot forget one visitor: named as an estimate",
            forget=FORGET_GOAL_DAY,
        ),
        feeds={"visit": feed_visits, "event": feed_events},
    )
)
"""The goals table (``core.table``)."""
