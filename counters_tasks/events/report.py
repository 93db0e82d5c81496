"""What the reads of events, goals and funnels return (issue 43): the Python API's types, which the
CLI tables (``counters-tasks events``, ``goals``, ``funnel NAME``), the JSON API and the dashboard
render. Each UV carries its ``uv_error`` as every other figure does (0.0: exact; else the relative
standard error of an estimate: ``store.page_sketch``)."""

from __future__ import annotations

from datetime import date
from typing import NamedTuple


class ValueCount(NamedTuple):
    """One value of an event's property over the range: its events (``total``) and unique visitors
    (``core.events.NONE`` for events without the property, ``core.events.OTHER`` for the values
    past a day's cap, its figures shown)."""

    value: str
    total: int
    uv: int
    uv_error: float


class EventRow(NamedTuple):
    """One event over the range: its count (``total``) and unique visitors, the events that had no visitor
    (no IP: counted, in no UV), the properties dropped past ``core.events.MAX_PROPS``, and each
    property's values (key -> values by count, descending)."""

    name: str
    total: int
    uv: int
    uv_error: float
    no_visitor: int
    dropped_props: int
    props: dict[str, list[ValueCount]]


class EventReport(NamedTuple):
    """A site's events over ``start``..``end`` (local days), by count descending
    (``core.events.OTHER``: the names past a day's cap)."""

    site: str
    start: date
    end: date
    events: list[EventRow]


class GoalRow(NamedTuple):
    """One goal over the range: conversions (each view or event), unique converters (a visitor
    once), the conversion rate (converters / the range's unique visitors), revenue (the sum of its
    revenue property; None when it has none), the time it counts from, and the conversions of a
    goal with revenue whose property was missing or not a number (counted, without revenue)."""

    name: str
    label: str
    conversions: int
    converters: int
    converters_error: float
    rate: float
    revenue: float | None
    since: float
    no_revenue: int = 0


class GoalReport(NamedTuple):
    """A site's goals over ``start``..``end``, with the range's unique visitors the rates are of."""

    site: str
    start: date
    end: date
    visitors: int
    visitors_error: float
    goals: list[GoalRow]


class FunnelStep(NamedTuple):
    """One step of a funnel over the range: the visitors who reached it in order within the
    window (credited to the day they entered), their share of the first step's and of the step
    before's, and the time from the step before as a histogram (``(bucket label, visitors)``,
    ``events.funnels.TIME_BUCKETS``; empty for the first step)."""

    step: int
    label: str
    visitors: int
    of_first: float
    of_previous: float
    time_to_convert: list[tuple[str, int]]


class FunnelReport(NamedTuple):
    """A funnel over ``start``..``end``: its steps, its window (seconds), the time it counts from,
    the days whose window is still open (their figures may still grow), and the step events that
    were not judged, counted on their own days: ``late`` (older than the funnel's window plus
    COUNTERS_FUNNEL_LATENESS when they came) and ``capped`` (past the cap of their visitor's
    state, ``events.funnels.STATE_CAP``)."""

    name: str
    site: str
    start: date
    end: date
    window: int
    since: float
    steps: list[FunnelStep]
    open_days: list[date]
    late: int
    capped: int
