"""JSON-ready answers for events, goals and funnels (issue 43), as ``views`` gives the other
figures: the CLI's ``events``, ``goals`` and ``funnel NAME`` (``--json``), the dashboard's
``/api/events``, ``/api/goals``, ``/api/funnel`` and ``/api/funnels`` return exactly these dicts.

Each read is the package's Python API (``events.event_report``, ``events.goal_report``,
``events.funnel_report``, returning ``events.report``'s types); a ``*_json`` function turns its
answer into the dict every reader shows, each UV with ``uv_exact`` and ``uv_error``
(``views.uv_view``). Below them, the definitions' commands (``define-goal``, ``define-funnel``,
``remove-goal``, ``remove-funnel``): their text arguments parsed here (a funnel step written
``page:/a``, ``event:signup[plan=pro]``, ``page:/done@10m``), InvalidInput before anything is
written.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import date, datetime
from typing import Any
from zoneinfo import ZoneInfo

from .. import events
from ..core.conversions import Funnel, Goal, parse_window
from ..core.days import day_start
from ..core.sites import check_site, site_name, zone_of
from ..core.table import VISITOR_LEVEL
from ..core.validation import check_text
from ..core.visitors import FOLLOWED_NOTE, VISITORS, daily_key
from ..errors import InvalidInput
from ..events import definitions
from ..events.report import EventReport, EventRow, FunnelReport, GoalReport, ValueCount
from ..store.client import RedisClient
from .views import counts_view, day_range, retention_view, uv_view


def figure(value: int, error: float, name: str = "uv", counts: str = VISITORS) -> dict[str, Any]:
    """A unique count as every answer gives it (``views.uv_view``), under ``name``: ``uv`` (with
    ``uv_approximate``, ``uv_exact``, ``uv_error``, ``uv_counts``), or ``converters`` /
    ``visitors`` (their own ``_exact``, ``_error`` and ``_counts``, so one dict can hold two).
    ``counts``: what it counts (``views.counts_view``: visitor-days over several days with
    COUNTERS_VISITOR_KEY=daily)."""
    if name == "uv":
        return uv_view(value, error > 0, error, counts)
    return {name: value, f"{name}_exact": error == 0.0, f"{name}_error": error, f"{name}_counts": counts}


def followed_view() -> dict[str, Any]:
    """What a goal's or a funnel's answer says of how far a visitor is followed
    (``visitor_note``): with COUNTERS_VISITOR_KEY=daily, not past the local midnight (None
    otherwise)."""
    return {"visitor_note": FOLLOWED_NOTE if daily_key() else None}


def when_iso(ts: float, scope: str) -> str:
    """An epoch time as ISO 8601 in the zone of the site ``scope``."""
    return datetime.fromtimestamp(ts, ZoneInfo(zone_of(scope))).isoformat(timespec="seconds")


def window_text(seconds: int) -> str:
    """A window as its definition writes it (``core.conversions.parse_window``'s inverse): the
    largest unit it is a whole number of, ``30m``, ``2h``, ``7d``, ``90s``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _range(start: Any, end: Any, site: Any) -> tuple[str, date, date]:
    scope = check_site(site)
    first, last = day_range(None, start, end, scope)
    return scope, first, last


def _since(since: float, scope: str, first: date) -> dict[str, Any]:
    """When a definition counts from, and whether that is after the range's first day began (its
    figures then cover part of the range only: a goal or funnel defined after the events happened)."""
    return {"since": since, "since_iso": when_iso(since, scope), "partial": since > day_start(first, zone_of(scope))}


# --- events ---------------------------------------------------------------------------------


def value_json(value: ValueCount, counts: str = VISITORS) -> dict[str, Any]:
    return {"value": value.value, "total": value.total, **figure(value.uv, value.uv_error, counts=counts)}


def event_json(row: EventRow, counts: str = VISITORS) -> dict[str, Any]:
    return {
        "name": row.name,
        "total": row.total,
        **figure(row.uv, row.uv_error, counts=counts),
        "no_visitor": row.no_visitor,
        "dropped_props": row.dropped_props,
        "props": {key: [value_json(v, counts) for v in values] for key, values in row.props.items()},
    }


def events_json(report: EventReport) -> dict[str, Any]:
    """An ``EventReport`` as the CLI's ``--json`` and ``/api/events`` give it."""
    counts = counts_view(report.start, report.end)
    return {
        "site": site_name(check_site(report.site)),
        "from": report.start.isoformat(),
        "to": report.end.isoformat(),
        "events": [event_json(row, counts["uv_counts"]) for row in report.events],
        **counts,
        **retention_view(report.start, report.site),
    }


def events_view(conn: RedisClient, start: Any = None, end: Any = None, site: Any = None) -> dict[str, Any]:
    """A site's events over a range of days (default today): each event's count and unique
    visitors, the events without a visitor, the properties dropped past the cap, and each
    property's values (``(none)``: events without it; ``(other)``: the values past a day's cap)."""
    scope, first, last = _range(start, end, site)
    return events_json(events.event_report(conn, site=scope, start=first, end=last))


# --- goals ----------------------------------------------------------------------------------


def goals_json(report: GoalReport) -> dict[str, Any]:
    """A ``GoalReport`` as the CLI's ``--json`` and ``/api/goals`` give it: each goal's
    conversions, unique converters (``converters_exact``, ``converters_error``), its conversion
    rate of the range's unique visitors (``rate_exact`` false when either figure is an estimate),
    revenue (None for a goal without a revenue property; ``no_revenue``: its conversions whose
    property was missing or not a number, counted without revenue) and when it counts from (``partial``:
    defined after the range began)."""
    scope = check_site(report.site)  # (a report names its site by scope or by name)
    counts = counts_view(report.start, report.end)
    return {
        "site": site_name(scope),
        "from": report.start.isoformat(),
        "to": report.end.isoformat(),
        **figure(report.visitors, report.visitors_error, "visitors", counts["uv_counts"]),
        **counts,
        **followed_view(),
        **retention_view(report.start, scope),
        "goals": [
            {
                "name": goal.name,
                "label": goal.label,
                "conversions": goal.conversions,
                **figure(goal.converters, goal.converters_error, "converters", counts["uv_counts"]),
                "rate": goal.rate,
                "rate_exact": goal.converters_error == 0.0 and report.visitors_error == 0.0,
                "revenue": goal.revenue,
                "no_revenue": goal.no_revenue,
                **_since(goal.since, scope, report.start),
            }
            for goal in report.goals
        ],
    }


def goals_view(conn: RedisClient, start: Any = None, end: Any = None, site: Any = None) -> dict[str, Any]:
    """A site's goals over a range of days (default today) with the range's unique visitors."""
    scope, first, last = _range(start, end, site)
    return goals_json(events.goal_report(conn, site=scope, start=first, end=last))


# --- funnels --------------------------------------------------------------------------------


def funnel_json(report: FunnelReport, made: Funnel | None = None) -> dict[str, Any]:
    """A ``FunnelReport`` as the CLI's ``--json`` and ``/api/funnel`` give it: each step's
    visitors, their share of the first step's and of the step before's, and the time from the
    step before (``time_to_convert``: ``{"bucket", "visitors"}`` in the buckets' order); the
    window, when it counts from, the days still open, and the step events not judged: ``late``
    (older than the window plus COUNTERS_FUNNEL_LATENESS when they came) and ``capped`` (past
    their visitor's state cap). With the funnel's definition ``made``, each step's own window
    (``step_window``, seconds from the step before; None: the funnel's only)."""
    scope = check_site(report.site)
    own = [step.window for step in made.steps] if made is not None else []
    own += [None] * (len(report.steps) - len(own))  # (a definition replaced since: no window of its own)
    return {
        "name": report.name,
        "site": site_name(scope),
        "from": report.start.isoformat(),
        "to": report.end.isoformat(),
        "window": report.window,
        "window_text": window_text(report.window),
        **_since(report.since, scope, report.start),
        "steps": [
            {
                "step": step.step,
                "label": step.label,
                "visitors": step.visitors,
                "of_first": step.of_first,
                "of_previous": step.of_previous,
                "time_to_convert": [{"bucket": bucket, "visitors": n} for bucket, n in step.time_to_convert],
                "step_window": window,
                "step_window_text": window and window_text(window),
            }
            for step, window in zip(report.steps, own, strict=False)
        ],
        "open_days": [day.isoformat() for day in report.open_days],
        "late": report.late,
        "capped": report.capped,
        **followed_view(),
        **retention_view(report.start, scope, VISITOR_LEVEL),  # (a funnel's results name its visitors)
    }


def funnel_view(conn: RedisClient, name: Any, start: Any = None, end: Any = None, site: Any = None) -> dict[str, Any]:
    """Funnel ``name`` of a site over a range of days (default today): InvalidInput naming the
    funnels there are when it is not defined."""
    check_text(name, "funnel")
    scope, first, last = _range(start, end, site)
    made = definitions.funnel(conn, name, scope)
    if made is None:
        known = ", ".join(f.name for f in definitions.funnels(conn, scope)) or "none"
        raise InvalidInput(f"no funnel named {name!r} (funnels: {known})")
    return funnel_json(events.funnel_report(conn, name, site=scope, start=first, end=last), made)


def funnels_list(conn: RedisClient, site: Any = None) -> dict[str, Any]:
    """The funnels defined for a site (``events.definitions``), by name: each with its steps, its
    window and when it counts from (the dashboard's funnel choice; ``define-funnel`` answers one of
    the same shape)."""
    scope = check_site(site)
    return {"site": site_name(scope), "funnels": [funnel_definition_json(f) for f in definitions.funnels(conn, scope)]}


def funnel_definition_json(made: Funnel) -> dict[str, Any]:
    return {
        "name": made.name,
        "site": site_name(made.site),
        "steps": [
            {
                "label": step.match.label(),
                "window": step.window,
                "window_text": step.window and window_text(step.window),
            }
            for step in made.steps
        ],
        "window": made.window,
        "window_text": window_text(made.window),
        "since": made.since,
        "since_iso": when_iso(made.since, made.site),
    }


def goal_definition_json(goal: Goal) -> dict[str, Any]:
    return {
        "name": goal.name,
        "site": site_name(goal.site),
        "label": goal.match.label(),
        "revenue": goal.revenue,
        "since": goal.since,
        "since_iso": when_iso(goal.since, goal.site),
    }


# --- definitions: define-goal, define-funnel, remove-goal, remove-funnel -------------------

STEP_KINDS = ("page", "prefix", "pattern", "event")
"""How a funnel step is written on the command line: ``page:/a`` (exact), ``prefix:/blog/``,
``pattern:/blog/*``, ``event:NAME`` or ``event:NAME[KEY=VALUE]``; each may end ``@WINDOW`` (its
own window from the step before: ``@10m``)."""

_STEP_WINDOW = re.compile(r"^(?P<body>.*)@(?P<window>\d+[smhd]?)$", re.S)
_EVENT_FILTER = re.compile(r"^(?P<event>[^\[]+)\[(?P<prop>[^=\]]+)=(?P<value>.*)\]$", re.S)


def parse_step(text: Any) -> dict[str, Any]:
    """A step as ``definitions.define_funnel`` takes it, from its command-line form (``STEP_KINDS``);
    InvalidInput saying the forms when it is none of them."""
    if not isinstance(text, str) or ":" not in text:
        raise InvalidInput(f"a step is page:PATH, prefix:PATH, pattern:PATH or event:NAME[KEY=VALUE], got {text!r}")
    step: dict[str, Any] = {}
    timed = _STEP_WINDOW.match(text)
    if timed:
        text, step["window"] = timed["body"], parse_window(timed["window"])
    kind, _, body = text.partition(":")
    if kind not in STEP_KINDS or not body:
        raise InvalidInput(f"a step is page:PATH, prefix:PATH, pattern:PATH or event:NAME[KEY=VALUE], got {text!r}")
    if kind == "event":
        filtered = _EVENT_FILTER.match(body)
        if filtered:
            step.update(event=filtered["event"], prop=filtered["prop"], value=filtered["value"])
        else:
            step["event"] = body
    else:
        step.update(page=body, match="exact" if kind == "page" else kind)
    return step


def define_goal_view(
    conn: RedisClient,
    name: Any,
    page: Any = None,
    match: Any = None,
    event: Any = None,
    prop: Any = None,
    value: Any = None,
    revenue: Any = None,
    site: Any = None,
) -> dict[str, Any]:
    """Define (or replace) a goal (``events.define_goal``): its definition, with when it counts from."""
    if match is not None and page is None:
        raise InvalidInput("--match is how a page goal compares paths: give --page with it")
    goal = definitions.define_goal(
        conn,
        name,
        page=page,
        match=match or "exact",
        event=event,
        prop=prop,
        value=value,
        revenue=revenue,
        site=check_site(site),
    )
    return goal_definition_json(goal)


def define_funnel_view(
    conn: RedisClient, name: Any, window: Any, steps: Sequence[Any], site: Any = None
) -> dict[str, Any]:
    """Define (or replace) a funnel (``events.define_funnel``) from its command-line steps and
    window (``30m``, ``2h``, ``7d``): its definition, with when it counts from."""
    made = definitions.define_funnel(
        conn, name, [parse_step(step) for step in steps], parse_window(window), site=check_site(site)
    )
    return funnel_definition_json(made)


def remove_view(conn: RedisClient, what: str, name: Any, site: Any = None) -> dict[str, Any]:
    """Remove goal or funnel (``what``) ``name``'s definition: whether there was one (its figures
    stay until their days leave retention)."""
    check_text(name, what)
    remove = definitions.remove_goal if what == "goal" else definitions.remove_funnel
    scope = check_site(site)
    return {"what": what, "name": name, "site": site_name(scope), "removed": remove(conn, name, site=scope)}
