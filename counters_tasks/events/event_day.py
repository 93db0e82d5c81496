"""The table ``event_day``: what a site's events count on a local day (docs/events.md "What an
event counts"), written by ``store/lua/event_day.lua`` in one call per site, day and call of
events (``queue_events``, the event kind's write: ``events.kind``), read over any range of days by
``event_report``.

Per site and day, one HASH (one hash tag, ``day_tag``) holds each event name's count, its exact
unique visitors (a pairs SET of "<visitor><name digest>", as ``sitestats.pairs`` keeps a page's),
its events without a visitor, its properties dropped past ``core.events.MAX_PROPS`` (or past the
day's ``KEYS_PER_EVENT`` keys) and a sketch of its visitors (``store.page_sketch``: a range's UV is
the union of the days' sketches); each property value's count and sketch, at most
COUNTERS_EVENT_VALUES_PER_DAY values per (event, property) a day (the rest as ``(other)``, with
its count and sketch), and the events without the property (``(none)``); at most
COUNTERS_EVENT_NAMES_PER_DAY names a day (the rest as ``(other)``, counted without properties).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from datetime import date
from typing import Any, NamedTuple

from .. import counters
from ..core.days import days_between, kept_from_now, kept_until, today
from ..core.events import NONE, OTHER, Event, check_event_name
from ..core.settings import get_settings
from ..core.sites import check_site, zone_of
from ..core.table import AGGREGATE, VISITOR_LEVEL, Erasure, ForgetterSlot, Retention, StoredKey, Table, register
from ..core.validation import check_day_range
from ..core.visitors import pair_visitor
from ..store import day_registry, keys, page_sketch, sweeps
from ..store.client import RedisClient, as_str, read_pipeline
from ..store.scripts import WritePlan, run_script
from .report import EventReport, EventRow, ValueCount

KEYS_PER_EVENT = 30
"""Property keys a site's day tracks of each event name; the properties of other keys are
counted as dropped (``EventRow.dropped_props``), as those past ``core.events.MAX_PROPS`` are."""

EVENTS_PER_CALL = 100
"""Events a call of the event kind holds (``Kind.per_call``); a site's day of them is written in
calls of ``event_day.lua`` of at most ``PROPS_PER_CALL`` properties, so one stays under 5 ms of the
server's CPU (``tests/events/test_event_flood.py``)."""

PROPS_PER_CALL = 120
"""Properties a call of ``event_day.lua`` writes at most (its events' together): each is three
arguments and a few lookups and sketch updates. 100 events of 30 properties took 8 to 14 ms of the
server's CPU a call (Redis reads their 12,500 arguments in ~3 ms before the script runs); at 120,
the costliest kind measured is 2.8 reference calls (~1.5 ms) at the median
(``tests/events/test_event_flood.py``)."""

SEP = "\x1f"
"""Between a name, a key and a value in a field of the day's HASH (no such text holds a control
character: ``core.validation.check_text``)."""


def day_tag(day: date, site: str = "") -> str:
    """The hash tag of a site's local day of events (every key of the day's calls in one slot)."""
    return keys.hash_tag("event-day", keys.scoped(site, day.isoformat()))


def day_key(day: date, site: str = "") -> str:
    """HASH of the day's events: the fields ``store/lua/event_day.lua`` describes."""
    return f"{keys.prefix()}event:{{{day_tag(day, site)}}}:day:{keys.day_label(day, site)}"


def pairs_key(day: date, site: str = "") -> str:
    """SET of "<visitor><name digest>" (11 + 8 characters): each event's exact UV of the day."""
    return f"{keys.prefix()}event:{{{day_tag(day, site)}}}:pairs:{keys.day_label(day, site)}"


def seen_key(call_id: str, day: date, site: str = "") -> str:
    """STRING marker: this call was applied to this site's day (dedupe, COUNTERS_DEDUPE_TTL)."""
    return f"{keys.prefix()}event:{{{day_tag(day, site)}}}:seen:{keys.escape(call_id)}"


def name_digest(name: str) -> str:
    """8 characters naming an event in the day's pairs SET and its sketch's HLL key."""
    return keys.path_digest(name)


def key_digest(name: str, key: str) -> str:
    """8 characters naming an event's property key: its ``(other)`` and ``(none)`` HLL keys."""
    return keys.path_digest(name + SEP + key)


def hll_key(table_key: str, letter: str, digest: str) -> str:
    """Where a sketch past ``page_sketch.EXACT_IDS`` visitors keeps them (``lua/event_day.lua``):
    ``e`` and a name's digest (``~``: the names' ``(other)``), ``v`` and its key's digest, ``.``
    and the value's number (its place among the key's tracked values that day), ``o`` and a key's
    digest (its ``(other)``), ``z`` and a key's digest (its ``(none)``)."""
    return f"{table_key}:{letter}{digest}"


class DayCall(NamedTuple):
    """One ``event_day.lua`` call of a kind's call: the events of one site and day in it (their
    positions in the call), and its dedupe id."""

    site: str
    day: date
    positions: list[int]
    call_id: str | None


class CallOutcome(NamedTuple):
    """What a call of events did: events written now, skipped as written before, of a closed day
    (counted in no UV), and for each event whether its name is tracked (else ``(other)``)."""

    applied: int
    duplicates: int
    closed: int
    tracked: list[bool]


def split_call(events: Sequence[Event], call_id: str | None) -> list[DayCall]:
    """A call's events by site and day, in the order each first comes, each day's in parts of at
    most ``PROPS_PER_CALL`` properties (an event with more is a part of its own), each part under
    its own id (``<call id>/e<n>``: the same on every delivery of the same events)."""
    groups: dict[tuple[str, date], list[int]] = {}
    for n, event in enumerate(events):
        groups.setdefault((event.site, event.day), []).append(n)
    parts: list[tuple[str, date, list[int]]] = []
    for (site, day), positions in groups.items():
        part: list[int] = []
        props = 0
        for n in positions:
            size = len(events[n].props)
            if part and props + size > PROPS_PER_CALL:
                parts.append((site, day, part))
                part, props = [], 0
            part.append(n)
            props += size
        parts.append((site, day, part))
    ids = keys.chunk_ids(call_id, len(parts), "/e")
    return [DayCall(site, day, positions, id_) for (site, day, positions), id_ in zip(parts, ids, strict=True)]


def script_args(events: Sequence[Event], positions: list[int], site: str, day: date, ttl: int) -> list[Any]:
    """``event_day.lua``'s ARGV for the events at ``positions`` of one site's day."""
    settings = get_settings()
    zone = zone_of(site)
    grace = settings.day_grace_days
    kept = max(settings.day_totals_days, grace)
    args: list[Any] = [
        ttl,
        kept_until(day, grace, zone),
        kept_from_now(grace),
        kept_until(day, kept, zone),
        kept_from_now(kept),
        settings.max_day_events,
        KEYS_PER_EVENT,
        settings.max_day_event_values,
        len(positions),
    ]
    for n in positions:
        event = events[n]
        name = event.name
        args += [
            name,
            name_digest(name),
            "" if event.visitor is None else pair_visitor(event.visitor),
            event.dropped,
            len(event.props),
        ]
        for key, value in event.props:
            args += [key, key_digest(name, key), value]
    return args


def queue_events(
    plan: WritePlan, calls: Sequence[tuple[Sequence[Event], str | None]]
) -> Callable[[], list[CallOutcome]]:
    """Queue each call's events on ``plan`` (one ``event_day.lua`` call per site and day of a call,
    at most once per its id); once the plan is sent, the outcome of each call."""
    conn = plan.conn
    ttl_setting = get_settings().dedupe_ttl
    planned = [(events, split_call(events, call_id)) for events, call_id in calls]
    replies: list[Any] = []

    def queue(pipe: Any) -> None:
        for events, day_calls in planned:
            for site, day, positions, call_id in day_calls:
                ttl = ttl_setting if call_id is not None else 0
                table = day_key(day, site)
                marker = seen_key(call_id, day, site) if call_id is not None else table + ":seen"
                args = script_args(events, positions, site, day, ttl)
                run_script(conn, "event_day", [table, pairs_key(day, site), marker], args, client=pipe)
        day_registry.queue_note(
            pipe, [(site, day) for _events, day_calls in planned for site, day, *_rest in day_calls]
        )

    def outcome() -> list[CallOutcome]:
        results = []
        at = 0
        for events, day_calls in planned:
            applied = duplicates = closed = 0
            tracked = [True] * len(events)
            for _site, _day, positions, _call_id in day_calls:
                status, closed_now, flags = replies[at]
                at += 1
                flags = flags.decode() if isinstance(flags, bytes) else flags
                if int(status) < 0:
                    duplicates += len(positions)
                else:
                    applied += len(positions)
                    closed += int(closed_now)
                for n, flag in zip(positions, flags, strict=True):
                    tracked[n] = flag == "1"
            results.append(CallOutcome(applied, duplicates, closed, tracked))
        return results

    plan.add(queue, replies.extend)
    return outcome


FORGET_EVENT_DAY = ForgetterSlot("event_day")
"""This table's ``Erasure.forget``: ``events.erase.forget_event_days`` (installed by it: it imports this module)."""


def sweep_pairs(conn: RedisClient, scope: str, day: date, until: float | None) -> int:
    """The retention sweep of a site's day's event pairs (visitor-level)."""
    with keys.bound(conn):
        return sweeps.apply(conn, [pairs_key(day, scope)], until)


def sweep_day(conn: RedisClient, scope: str, day: date, until: float | None) -> int:
    """The retention sweep of a site's day's event figures (aggregate): the HASH and the
    HyperLogLog of each sketch of it that reads ``#`` (HSCAN of the HASH, ``sketch_hll``)."""
    with keys.bound(conn):
        table_key = day_key(day, scope)
        hlls = sweeps.sketched_keys(conn, table_key, functools.partial(sketch_hll, table_key))
        return sweeps.apply(conn, [*hlls, table_key], until)


def sketch_hll(table_key: str, field: str, value: str) -> str | None:
    """The HyperLogLog of one field of a day's HASH whose sketch reads ``#`` (as ``_parse_day``
    names them: a name's, a value's, a key's ``(other)`` and ``(none)``), else None."""
    kind, _sep, rest = field.partition(SEP)
    if kind == "e":
        parts = value.split(" ", 5)
        sketch, hll = (parts[5] if len(parts) > 5 else ""), hll_key(table_key, "e", name_digest(rest) if rest else "~")
    elif kind == "n":
        name, _sep, key = rest.partition(SEP)
        sketch, hll = value.partition(" ")[2], hll_key(table_key, "z", key_digest(name, key))
    elif kind == "v":
        name, key, given = rest.split(SEP, 2)
        parts = value.split(" ", 2)
        sketch = parts[2] if len(parts) > 2 else ""
        if given:
            hll = hll_key(table_key, "v", f"{key_digest(name, key)}.{parts[1]}")
        else:
            hll = hll_key(table_key, "o", key_digest(name, key))
    else:
        return None
    return hll if sweeps.is_hll_sketch(sketch) else None


EVENT_DAY = register(
    Table(
        name="event_day",
        what="what a site's events count on a local day: each event name's count, exact unique "
        "visitors, events without a visitor and properties dropped, each property value's count and "
        "visitors (capped per event and property, the rest as (other); (none) for events without "
        "it), and who had which event (a pairs SET) for the exact UV",
        module=__name__,
        keys=(
            StoredKey("ct:event:{tag(D)}:day:<D>", "HASH"),
            StoredKey("ct:event:{tag(D)}:day:<D>:<letter><digest>", "HLL"),
            StoredKey("ct:event:{tag(D)}:pairs:<D>", "SET"),
            StoredKey("ct:event:{tag(D)}:seen:<call id>", "STRING"),
        ),
        tag="per site and day",
        fed_by=("event",),
        writers=("store/lua/event_day.lua",),
        readers=("events.event_report",),
        retention=Retention(
            "the HASH and its HLLs: the later of the end of D and the latest write, plus "
            "COUNTERS_DAY_TOTALS_DAYS, and never past COUNTERS_AGGREGATE_DAYS (0: for ever) after the end of D; "
            "the pairs: until the day's open_until (the later of the end of D and its first write, plus "
            "COUNTERS_DAY_GRACE_DAYS), never past COUNTERS_VISITOR_DAYS after it (the hourly apply_retention); "
            "a marker COUNTERS_DEDUPE_TTL",
            "COUNTERS_AGGREGATE_DAYS",
            lambda settings: settings.aggregate_days or None,
            {VISITOR_LEVEL: sweep_pairs, AGGREGATE: sweep_day},
        ),
        erasure=Erasure(
            "visitor ids (the pairs SET) and sketches of them (6-character ids, or HLLs)",
            True,
            "SREM of every pairs member that starts with the visitor's 11-character pair id (SSCAN MATCH) "
            "and that event's uv of the day minus one; the visitor's 6-character id out of every list "
            "sketch of the day's HASH (HSCAN, then lua/forget_sketches.lua a batch of fields: events/erase.py); "
            "a sketch past 256 visitors a day is a Redis HyperLogLog (0.81% standard error) that cannot "
            "forget one visitor: named as an estimate",
            forget=FORGET_EVENT_DAY,
        ),
    )
)
"""The event_day table (``core.table``)."""


# --- reads ------------------------------------------------------------------------------------


class _Figures:
    """One row's figures over a range, as the days are read: its count, and each day's sketch."""

    __slots__ = ("total", "sketches")

    def __init__(self) -> None:
        self.total = 0
        self.sketches: list[page_sketch.Sketch] = []

    def add(self, count: int, sketch: str, hll: str) -> None:
        self.total += count
        if sketch:
            self.sketches.append((sketch, hll))


class _EventFigures(_Figures):
    __slots__ = ("uv", "no_visitor", "dropped", "days", "keys", "values")

    def __init__(self) -> None:
        super().__init__()
        self.uv = 0  # one day's exact figure (the pairs SET's)
        self.no_visitor = 0
        self.dropped = 0
        self.days: dict[date, tuple[int, str, str]] = {}  # a day's count and sketch: a key's (none) on days without it
        self.keys: dict[str, set[date]] = {}  # a key and the days that tracked it
        self.values: dict[tuple[str, str], _Figures] = {}


def _parse_day(table: str, fields: dict[Any, Any], found: dict[str, _EventFigures], day: date) -> None:
    """A day's HASH added to the range's rows (``found``: name -> its figures)."""
    tracked: list[tuple[str, str, str | None, str]] = []  # (name, key, value (None: the (none) row), its figures)
    for raw_field, raw_value in fields.items():
        field, text = as_str(raw_field), as_str(raw_value)
        kind, _sep, rest = field.partition(SEP)
        if kind == "e":
            count, uv, no_visitor, dropped, _closed, *sketch = text.split(" ", 5)
            row = found.setdefault(rest or OTHER, _EventFigures())
            hll = hll_key(table, "e", name_digest(rest) if rest else "~")
            row.add(int(count), sketch[0] if sketch else "", hll)
            row.uv += int(uv)
            row.no_visitor += int(no_visitor)
            row.dropped += int(dropped)
            row.days[day] = (int(count), sketch[0] if sketch else "", hll)
        elif kind == "v":
            name, key, given = rest.split(SEP, 2)
            tracked.append((name, key, given, text))
        elif kind == "n":
            name, key = rest.split(SEP, 1)
            tracked.append((name, key, None, text))
    for name, key, held, text in tracked:
        row = found[name]
        row.keys.setdefault(key, set()).add(day)
        if held is None:
            count, _sep, kept = text.partition(" ")
            hll, value = hll_key(table, "z", key_digest(name, key)), NONE
        else:
            count, number, *sketch = text.split(" ", 2)
            kept = sketch[0] if sketch else ""
            if held:
                hll, value = hll_key(table, "v", f"{key_digest(name, key)}.{number}"), held
            else:
                hll, value = hll_key(table, "o", key_digest(name, key)), OTHER
        row.values.setdefault((key, value), _Figures()).add(int(count), kept, hll)


def event_report(
    conn: RedisClient, site: str | None = None, start: date | None = None, end: date | None = None
) -> EventReport:
    """A site's events over its local days ``start``..``end`` (at most 400; ``end`` None: today in
    the site's zone, ``start`` None: ``end``), by count descending: each event's count, unique
    visitors (one day: exact, the day's pairs; more: the union of the days' sketches,
    ``store.page_sketch.union``, exact while each day had at most 256 of the event's visitors, else
    ``uv_error``), events without a visitor, properties dropped, and each property's values by
    count (``(other)``: the values past a day's COUNTERS_EVENT_VALUES_PER_DAY; ``(none)``: the
    events without the property, on the days it was seen and on the days it was not; the names
    past COUNTERS_EVENT_NAMES_PER_DAY as the event ``(other)``, without properties)."""
    scope = check_site(site)
    end = today(zone_of(scope)) if end is None else end
    start = end if start is None else start
    check_day_range(start, end)
    span = days_between(start, end)
    with keys.bound(conn):
        pipe = read_pipeline(conn)
        for day in span:
            pipe.hgetall(day_key(day, scope))
        found: dict[str, _EventFigures] = {}
        for day, fields in zip(span, pipe.execute(), strict=True):
            if fields:
                _parse_day(day_key(day, scope), fields, found, day)
        rows = [_event_row(conn, name, figures, len(span) == 1) for name, figures in found.items()]
    rows.sort(key=lambda row: (-row.total, row.name))
    return EventReport(scope, start, end, rows)


def _uv(conn: RedisClient, figures: _Figures) -> tuple[int, float]:
    return page_sketch.union(conn, figures.sketches) if figures.sketches else (0, 0.0)


def _event_row(conn: RedisClient, name: str, figures: _EventFigures, one_day: bool) -> EventRow:
    uv, error = (figures.uv, 0.0) if one_day else _uv(conn, figures)
    props: dict[str, list[ValueCount]] = {}
    for key, tracked_days in figures.keys.items():
        none = figures.values.setdefault((key, NONE), _Figures())
        for day, (count, sketch, hll) in figures.days.items():
            if day not in tracked_days:  # none of the day's events had the key
                none.add(count, sketch, hll)
    for (key, value), counted in figures.values.items():
        if counted.total:
            props.setdefault(key, []).append(ValueCount(value, counted.total, *_uv(conn, counted)))
    for values in props.values():
        values.sort(key=lambda row: (-row.total, row.value))
    return EventRow(name, figures.total, uv, error, figures.no_visitor, figures.dropped, dict(sorted(props.items())))


def event_counter(
    conn: RedisClient, name: str, precision: int, site: str | None = None, now: float | None = None
) -> list[tuple[int, int]]:
    """The live counter of event ``name`` (``counters.get_counter`` of ``event:<name>``, scoped by
    ``site``): ``(bucket start, events)`` pairs within the retention window, oldest first. The
    names past a day's COUNTERS_EVENT_NAMES_PER_DAY count in the counter of ``(other)`` (a name no
    event may have, read here)."""
    if name != OTHER:
        check_event_name(name)
    return counters.get_counter(conn, COUNTER_PREFIX + name, precision, now, site=site)


COUNTER_PREFIX = "event:"
"""An event's counter is ``event:<name>`` (scoped by its site: ``store.keys.scoped``)."""


def counter_name(name: str, site: str = "") -> str:
    """The counter an event of ``name`` adds to (``counters.get_counter``'s name, scoped)."""
    return keys.scoped(site, COUNTER_PREFIX + name)
