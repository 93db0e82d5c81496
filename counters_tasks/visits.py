"""Visits, everything they count: site PV/UV, the ``hits`` counters, the daily unique visitor, and
the site's visitors right now (``live``).

Every input is validated first (InvalidInput, nothing written), then all writes are queued on
one pipeline: one Lua call per slot (uniques day, site day, visitor shard, path, each counter),
in one round trip. Writes are grouped per slot, so a group of visits costs one call per
distinct slot, and each group is applied at most once per its message id. A batch's visits
applied, and those skipped as already applied, are then counted for the metrics
(``throughput``).

A batch (a ``record_visits`` message, ``apply_visits``) is cut into chunks of ``CHUNK`` visits, each chunk a group with its
own id derived from the batch id (``<batch id>#<n>``), so no single Lua call runs long and a
redelivered batch, cut the same way, is applied once.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from . import counters, live, refusals, sitestats, throughput, uniques
from .core.days import local_day
from .core.settings import get_settings
from .core.sites import check_site, zone_of
from .core.sources import DIRECT
from .core.validation import check_event_time, check_message_id
from .errors import InvalidInput, MalformedMessage
from .store import keys
from .store.client import RedisClient
from .store.keys import chunk_ids
from .store.scripts import execute_in_order

CHUNK = 500
"""Visits per group of a batch: one Lua call per slot per chunk, each under 5 ms (SLOWLOG)."""

UNIQUES_PER_CALL = 64
"""Session ids per Lua call: a new day's ids each create a shard, the costly case."""

MAX_BATCH = 20_000
"""The most visits one ``record_visits`` message may carry."""

VISIT_FIELDS = frozenset({"ip", "path", "session_id", "ts", "site", "referrer", "utm"})


@dataclass(frozen=True)
class Visit:
    """One validated visit: the page view (with its site), its time, and the session's (day, id)
    when given (the day of the view's site)."""

    view: sitestats.SiteView
    ts: float
    session: tuple[date, int] | None


def visit_entry(visit: Visit) -> list[Any]:
    """A prepared visit as JSON-able data (a worker batch's journal), ``visit_from_entry``'s input."""
    view = visit.view
    entry = [view.visitor, view.path, view.day.isoformat(), visit.ts,
             None if visit.session is None else [visit.session[0].isoformat(), visit.session[1]],
             view.site, view.referrer, [list(tag) for tag in view.campaign]]
    while len(entry) > 5 and entry[-1] in ("", DIRECT, []):  # what every view has by default, left out
        entry.pop()
    return entry


def visit_from_entry(entry: list[Any]) -> Visit:
    """The prepared visit ``visit_entry`` made ``entry`` of (the same visit: the same writes)."""
    visitor, path, day, ts, session, *rest = entry
    defaults: list[Any] = ["", DIRECT, []]  # what visit_entry leaves out
    site, referrer, campaign = [*rest, *defaults[len(rest):]]
    view = sitestats.SiteView(visitor, path, date.fromisoformat(day), site, referrer,
                              tuple((kind, tag) for kind, tag in campaign))
    return Visit(view, ts, None if session is None else (date.fromisoformat(session[0]), session[1]))


def check_visit(ip: Any, path: Any, session_id: Any = None, ts: Any = None, site: Any = None,
                referrer: Any = None, utm: Any = None) -> None:
    """Validate one visit as ``prepare_visit`` does, without making the visitor id (the HMAC under
    COUNTERS_SECRET, which only workers hold): what the app-side producer checks."""
    ts = check_event_time(ts)
    sitestats.check_view(ip, path, ts, site, referrer, utm)
    if session_id is not None:
        uniques.session_number(session_id)


def prepare_visit(ip: Any, path: Any, session_id: Any = None, ts: Any = None, site: Any = None,
                  referrer: Any = None, utm: Any = None) -> Visit:
    """Validate one visit, given as ``record_visit`` takes it (raises InvalidInput; writes nothing).
    ``site``: a site of ``COUNTERS_SITES`` (None: the default site), whose zone makes the day;
    ``referrer`` and ``utm``: its source (``core.sources``)."""
    ts = check_event_time(ts)
    scope = check_site(site)
    day = local_day(ts, zone_of(scope))  # the time checked and its day computed once, for every part of the visit
    view = sitestats.view_on(ip, path, day, scope, referrer, utm)
    session = (day, uniques.session_number(session_id)) if session_id is not None else None
    return Visit(view, ts, session)


def prepare_batch(visits: Any) -> tuple[list[tuple[int, Visit]], list[tuple[int, InvalidInput]]]:
    """Validate a ``record_visits`` payload (a list of dicts with keys ip, path[, session_id, ts])
    item by item: ``(accepted (index, visit) pairs, refused (index, error) pairs)``. A payload that
    is not a list, or holds more than MAX_BATCH items, is refused whole (MalformedMessage)."""
    if not isinstance(visits, list):
        raise MalformedMessage(f"visits must be a list, got {type(visits).__name__}")
    if len(visits) > MAX_BATCH:
        raise MalformedMessage(f"a batch holds at most {MAX_BATCH} visits, got {len(visits)}")
    accepted, refused = [], []
    for n, visit in enumerate(visits):
        try:
            accepted.append((n, prepare_visit_item(visit)))
        except InvalidInput as exc:
            refused.append((n, type(exc)(f"visit {n}: {exc}")))
    return accepted, refused


def prepare_visit_item(visit: Any) -> Visit:
    """Validate one item of a ``record_visits`` payload."""
    if not isinstance(visit, dict):
        raise MalformedMessage(f"must be a dict, got {type(visit).__name__}")
    unknown = set(visit) - VISIT_FIELDS
    if unknown:
        raise MalformedMessage(f"unknown keys: {', '.join(sorted(map(str, unknown)))[:200]}")
    if "ip" not in visit or "path" not in visit:
        raise MalformedMessage("needs ip and path")
    return prepare_visit(visit["ip"], visit["path"], visit.get("session_id"), visit.get("ts"), visit.get("site"),
                         visit.get("referrer"), visit.get("utm"))


def hits_names(path: str, site: str = "") -> tuple[str, str]:
    """The counters a view of ``path`` adds to (scoped names: ``store.keys.scoped``)."""
    return keys.scoped(site, "hits"), keys.scoped(site, f"hits:{path}")


def hits_precisions() -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The precisions of each of ``hits_names``: the site's ``hits`` keeps them all; a page's
    ``hits:<path>`` those of COUNTERS_PATH_HITS_PRECISIONS (all unless set: fewer cost fewer
    Redis commands a visit, one a precision, and less memory a page)."""
    return counters.PRECISIONS, get_settings().path_hits_precisions


@dataclass
class _Group:
    visits: Sequence[Visit]
    message_id: str | None
    sessions: list[tuple[str, date, list[int], str | None]]  # (site, day, ids, the call's message id)
    per_counter: dict[str, counters.Buckets]
    day_calls: list[tuple[date, int]] = field(default_factory=list)  # (day, views) of each site_day call
    session_replies: slice = field(default_factory=lambda: slice(0))
    day_replies: slice = field(default_factory=lambda: slice(0))


def _plan(visits: Sequence[Visit], message_id: str | None) -> _Group:
    sessions: dict[tuple[str, date], list[int]] = defaultdict(list)
    per_second: Counter[tuple[str, str, int]] = Counter()  # (site, path, whole second) -> views: visits come in bursts
    for visit in visits:
        if visit.session is not None:
            sessions[visit.view.site, visit.session[0]].append(visit.session[1])
        per_second[visit.view.site, visit.view.path, int(visit.ts)] += 1
    per_counter: dict[str, counters.Buckets] = {}
    precisions = hits_precisions()
    for (site, path, second), views in per_second.items():  # each (path, second) folded once, not each view
        for name, kept in zip(hits_names(path, site), precisions, strict=True):
            counters.add_to_buckets(per_counter.setdefault(name, {}), second, views, kept)
    calls = []
    for (site, day), numbers in sessions.items():  # a day's ids in calls of UNIQUES_PER_CALL (each deduped)
        parts = [numbers[first:first + UNIQUES_PER_CALL] for first in range(0, len(numbers), UNIQUES_PER_CALL)]
        ids = chunk_ids(message_id, len(parts), "/")
        calls += [(site, day, part, call_id) for part, call_id in zip(parts, ids, strict=True)]
    return _Group(visits, message_id, calls, per_counter)


def write_groups(conn: RedisClient, groups: Sequence[tuple[Sequence[Visit], str | None]],
                 tally: throughput.Tally | None = None) -> None:
    """Apply groups of validated visits, each at most once per its message id, in one round trip
    (a second only to re-send a day whose uniques layout moved). ``tally``, when given, gets the
    visits applied now and those skipped as applied before (from the ``site_day`` replies)."""
    used = keys.use(conn, write=True)
    plans = [_plan(visits, message_id) for visits, message_id in groups if visits]
    if not plans:
        return
    expected = {(site, day): uniques.expected_for(conn, day, site)
                for plan in plans for site, day, _ids, _id in plan.sessions}

    def data(pipe: Any) -> None:
        for plan in plans:
            start = len(pipe)
            for site, day, numbers, call_id in plan.sessions:
                uniques.queue_ids(conn, pipe, day, numbers, expected[site, day], call_id, site)
            plan.session_replies = slice(start, len(pipe))
            start = len(pipe)
            plan.day_calls = sitestats.queue_views(conn, pipe, [visit.view for visit in plan.visits], plan.message_id)
            plan.day_replies = slice(start, start + len(plan.day_calls))
            counters.queue_counter_writes(conn, pipe, plan.per_counter, plan.message_id)
        live.queue_sightings(pipe, ((v.view.site, v.ts, v.view.visitor) for plan in plans for v in plan.visits))

    [replies] = execute_in_order(conn, data)
    keys.confirm_written(conn, used)  # raises TagKeyChanged (made again) when written where no one reads
    for plan in plans:
        if tally is not None:
            tally.add(*sitestats.applied_views(plan.day_calls, replies[plan.day_replies]),
                      max(visit.ts for visit in plan.visits))
        closed = sitestats.closed_views(replies[plan.day_replies])
        for (site, day, numbers, call_id), reply in zip(plan.sessions, replies[plan.session_replies], strict=True):
            if uniques.apply_ids(conn, day, numbers, call_id, reply, site) == uniques.CLOSED:  # re-sends if the figure moved
                closed += len(numbers)
        refusals.record_partial(conn, "record_visits", plan.message_id, closed)


def apply_visit(conn: RedisClient, ip: str, path: str, session_id: str | None = None, now: float | None = None, *,
                 message_id: str | None = None, site: str | None = None, referrer: str | None = None,
                 utm: dict[str, str] | None = None) -> None:
    """One visit: site PV/UV, counters ``hits`` and ``hits:<path>``, and the session's daily unique,
    of ``site`` (a site of ``COUNTERS_SITES``; None: the default site), with its source: the
    ``referrer`` (a URL or a domain, reduced to its domain) and the ``utm`` campaign tags."""
    check_message_id(message_id)
    write_groups(conn, [([prepare_visit(ip, path, session_id, now, site, referrer, utm)], message_id)])


def apply_visits(conn: RedisClient, visits: list[dict[str, Any]], *, message_id: str | None = None) -> int:
    """Many visits (dicts with keys ip, path, session_id, ts, site, referrer, utm) as ``apply_visit`` each, in chunks,
    at most once per ``message_id`` (the batch id). Every item is validated before anything is
    written; a bad item is refused on its own (logged and counted, ``refusals``) and the others
    are applied. Returns the number of visits applied.

    Chunk ``n`` holds the accepted items among positions ``n*CHUNK .. (n+1)*CHUNK - 1`` and is
    deduplicated under ``<batch id>#<n>``, so a redelivered batch maps every id to the same
    items even if an item's refusal changed meanwhile (a day closed, the clock moved)."""
    check_message_id(message_id)
    accepted, refused = prepare_batch(visits)  # a payload refused whole raises (the task counts it)
    chunks: list[list[Visit]] = [[] for _ in range(-(-len(visits) // CHUNK))]
    for n, visit in accepted:
        chunks[n // CHUNK].append(visit)
    tally = throughput.Tally()
    write_groups(conn, list(zip(chunks, chunk_ids(message_id, len(chunks)), strict=True)), tally)
    refusals.record(conn, "record_visits", message_id, refused)
    throughput.count(conn, "visit", tally, batch=("record_visits", len(visits)))
    return len(accepted)
