"""Visits, everything they count: site PV/UV, the ``hits`` counters, the daily unique visitor, and
the site's visitors right now (``live``).

Every input is validated first (InvalidInput, nothing written), then all writes are queued on
one pipeline: one Lua call per slot (uniques day, site day, visitor shard, path, each counter),
in one round trip. Writes are grouped per slot, so a call of visits costs one Lua call per
distinct slot, and each call is applied at most once per its id. A batch's visits
applied, and those skipped as already applied, are then counted for the metrics
(``throughput``).

The kind's declaration is ``VISIT`` (``core.kind``). A batch (a ``record_visits`` message,
``apply_visits``, the one path of every kind's payloads: ``payloads``) is cut into chunks of ``CHUNK`` visits, each chunk a call with its
own id derived from the batch id (``<batch id>#<n>``), so no single Lua call runs long and a
redelivered batch, cut the same way, is applied once.
"""

from __future__ import annotations

import functools
import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any, NamedTuple

from . import counters, live, refusals, sitestats, throughput, uniques
from .core.clients import UNKNOWN, check_user_agent, client_of, language_of
from .core.days import local_day
from .core.kind import Kind, register
from .core.settings import DEFAULT_SITE
from .core.sites import check_site, zone_of
from .core.sources import DIRECT, check_campaign, referrer_domain
from .core.validation import check_ip, check_item_time, check_message_id, check_path
from .payloads import apply_payload
from .store import keys, tombstones
from .store.client import RedisClient
from .store.keys import chunk_ids
from .store.scripts import WritePlan, write_through

CHUNK = 500
"""Visits per call of a payload: one Lua call per slot per chunk, each under 5 ms (SLOWLOG)."""

UNIQUES_PER_CALL = 64
"""Session ids per Lua call: a new day's ids each create a shard, the costly case."""

MAX_BATCH = 20_000
"""The most visits one ``record_visits`` message may carry."""


class Visit(NamedTuple):
    """One validated visit: the page view (with its site), its time, and the session's (day, id)
    when given (the day of the view's site). (A NamedTuple: one is made per visit a worker applies.)"""

    view: sitestats.SiteView
    ts: float
    session: tuple[date, int] | None


def visit_entry(visit: Visit) -> list[Any]:
    """A prepared visit as JSON-able data (a worker batch's journal), ``visit_from_entry``'s input."""
    view = visit.view
    entry = [
        view.visitor,
        view.path,
        view.day.isoformat(),
        visit.ts,
        None if visit.session is None else [visit.session[0].isoformat(), visit.session[1]],
        view.site,
        view.referrer,
        [list(tag) for tag in view.campaign],
        None if view.who is None else list(view.who),
    ]
    while len(entry) > 5 and entry[-1] in ("", DIRECT, [], None):  # what every view has by default, left out
        entry.pop()
    return entry


def visit_from_entry(entry: list[Any]) -> Visit:
    """The prepared visit ``visit_entry`` made ``entry`` of (the same visit: the same writes)."""
    visitor, path, day, ts, session, *rest = entry
    defaults: list[Any] = ["", DIRECT, [], None]  # what visit_entry leaves out
    site, referrer, campaign, who = [*rest, *defaults[len(rest) :]]
    view = sitestats.SiteView(
        visitor,
        path,
        date.fromisoformat(day),
        site,
        referrer,
        tuple((kind, tag) for kind, tag in campaign),
        None if who is None else tuple(who),
    )
    return Visit(view, ts, None if session is None else (date.fromisoformat(session[0]), session[1]))


def check_visit(fields: Mapping[str, Any]) -> tuple[float, str | None, dict[str, str], str | None]:
    """Validate one visit (its fields as ``VISIT.bind`` returns them) as ``prepare_visit`` does,
    without making the visitor id (the HMAC under COUNTERS_SECRET, which only workers hold) or its
    day: what the app-side producer checks. Returns its time (``ts``; None: now), its referrer
    reduced to its domain (None when not given), its campaign (``core.sources``) and its language
    reduced (``core.clients``; None when not given), each worked out once. The user agent is only
    checked: the worker parses it."""
    get = fields.get
    ts = get("ts")
    ts = time.time() if ts is None else check_item_time(ts)
    check_path(fields["path"])
    check_ip(fields["ip"])
    check_site(get("site"))
    referrer, session_id, language = get("referrer"), get("session_id"), get("language")
    domain = None if referrer is None else referrer_domain(referrer)
    campaign = check_campaign(get("utm"))
    if session_id is not None:
        uniques.session_number(session_id)
    check_user_agent(get("user_agent"))
    preferred = None if language is None else language_of(language)
    return ts, domain, campaign, preferred


def app_visit(fields: Mapping[str, Any]) -> dict[str, Any]:
    """One visit (its fields as ``VISIT.bind`` returns them) checked in the app's process
    (``check_visit``; ``ts`` None: now) and written as an item of a ``record_visits`` message:
    the referrer reduced to its domain (a full URL never reaches the broker), the language to its
    preferred tag, what every visit has by default left out."""
    ts, domain, campaign, preferred = check_visit(fields)
    get = fields.get
    visit: dict[str, Any] = {"ip": fields["ip"], "path": fields["path"], "ts": ts}
    session_id, site, user_agent = get("session_id"), get("site"), get("user_agent")
    if session_id is not None:
        visit["session_id"] = session_id
    if site is not None and site != DEFAULT_SITE:
        visit["site"] = site
    if domain is not None:
        visit["referrer"] = domain
    if campaign:
        visit["utm"] = campaign
    # sent whatever this process's COUNTERS_CLIENT_TABLES says: the workers' setting decides
    # whether the tables are kept (an app and its workers set apart must not read "(unknown)")
    if user_agent is not None:
        visit["user_agent"] = user_agent
    if preferred is not None and preferred != UNKNOWN:
        visit["language"] = preferred
    return visit


def pack_visits(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A batch's visits as ``VisitRecorder`` sends them (``Kind.merge``, in its sending thread,
    never in a request): each user agent reduced to its ``client`` (``core.clients.client_of``:
    [browser, system, device], parsed once per distinct user agent and process), a tenth of its
    bytes on the broker and no parse in the worker; each session id to the 15 hex digits that
    name its session (``uniques.short_session_id``: a UUID's other 21 characters change no
    figure). Packing packed items changes nothing."""
    clients: dict[str, list[str]] = {}  # a batch's few distinct user agents, each reduced once
    for item in items:
        session_id = item.get("session_id")
        if session_id is not None:
            item["session_id"] = uniques.short_session_id(session_id)
        agent = item.get("user_agent")
        if type(agent) is str:  # (anything else is the worker's to refuse)
            client = clients.get(agent)
            if client is None:
                client = clients[agent] = list(client_of(agent))
            item["client"] = client
            del item["user_agent"]
    return items


def prepare_visit(fields: Mapping[str, Any]) -> Visit:
    """Validate one visit, its fields (``VISIT.fields``) as ``VISIT.bind`` returns them (raises
    InvalidInput; writes nothing). ``site``: a site of ``COUNTERS_SITES`` (None: the default
    site), whose zone makes the day; ``referrer`` and ``utm``: its source (``core.sources``);
    ``user_agent`` and ``language`` (the User-Agent and Accept-Language headers), or ``client``
    (the user agent as ``pack_visits`` reduced it): who visits (``core.clients``)."""
    ts = check_item_time(fields.get("ts"))
    scope = check_site(fields.get("site"))
    day = local_day(ts, zone_of(scope))  # the time checked and its day computed once, for every part of the visit
    view = sitestats.view_on(fields, day, scope)
    tombstones.check_not_forgotten(view.visitor, ts)
    session_id = fields.get("session_id")
    session = (day, uniques.session_number(session_id, day)) if session_id is not None else None
    return Visit(view, ts, session)


def recheck_visit(visit: Visit) -> None:
    """A journaled visit applied late (``Kind.recheck``): refused when its visitor was forgotten
    after it was made."""
    tombstones.check_not_forgotten(visit.view.visitor, visit.ts)


def hits_names(path: str, site: str = "") -> tuple[str, str]:
    """The counters a view of ``path`` adds to (scoped names: ``store.keys.scoped``)."""
    return keys.scoped(site, "hits"), keys.scoped(site, counters.PAGE_HITS + path)


def hits_precisions() -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The precisions of each of ``hits_names`` (``counters.kept_precisions``): the site's
    ``hits`` keeps them all; a page's ``hits:<path>`` those of COUNTERS_PATH_HITS_PRECISIONS."""
    return counters.kept_precisions("hits"), counters.kept_precisions(counters.PAGE_HITS)


@dataclass
class _Call:
    """One call of visits (a chunk under one id) as planned: its unique-visitor calls and counter
    buckets, and what its replies said (read back by its own parts of the ``WritePlan``)."""

    visits: Sequence[Visit]
    message_id: str | None
    sessions: list[tuple[str, date, list[int], str | None]]  # (site, day, ids, the call's message id)
    per_counter: dict[str, counters.Fields]
    applied: int = 0  # views written now, and skipped as written before (site_day replies)
    duplicates: int = 0
    closed: int = 0  # views and ids of a closed day


def _plan(visits: Sequence[Visit], message_id: str | None) -> _Call:
    sessions: dict[tuple[str, date], list[int]] = defaultdict(list)
    site_precisions, page_precisions = hits_precisions()
    unit = math.gcd(*page_precisions)  # every precision a page keeps is a multiple of it: 60 s by default
    per_second: Counter[tuple[str, int]] = Counter()  # (site, whole second) -> views: visits come in bursts
    per_unit: Counter[tuple[str, str, int]] = Counter()  # (site, path, start of its unit) -> views
    for visit in visits:
        view = visit.view
        if visit.session is not None:
            sessions[view.site, visit.session[0]].append(visit.session[1])
        second = int(visit.ts)
        per_second[view.site, second] += 1
        per_unit[view.site, view.path, second - second % unit] += 1
    # The counters in the order their views first came (a site's hits before its first page's),
    # their fields too: a payload's calls of a tag group, cut at FIELDS_PER_CALL, and so their dedupe
    # ids, stay what they were when each (page, second) was folded on its own.
    per_counter: dict[str, counters.Fields] = {}
    names: dict[tuple[str, str], tuple[str, str]] = {}  # (site, path) -> hits_names, made once a batch
    page_fields = []
    for site, path, _start in per_unit:
        named = names.get((site, path)) or names.setdefault((site, path), hits_names(path, site))
        per_counter.setdefault(named[0], {})
        page_fields.append(per_counter.setdefault(named[1], {}))
    site_hits = {site: site_name for (site, _path), (site_name, _page_name) in names.items()}
    # each (site, second) and (page, unit) folded once, not each view: a unit's start falls in
    # the same bucket as its seconds at every precision that is a multiple of the unit
    site_kept, page_kept = counters.indexed(site_precisions), counters.indexed(page_precisions)
    for (site, second), views in per_second.items():
        counters.add_to_fields(per_counter[site_hits[site]], second, views, site_kept)
    for fields, ((_site, _path, start), views) in zip(page_fields, per_unit.items(), strict=True):
        counters.add_to_fields(fields, start, views, page_kept)
    calls = []
    for (site, day), numbers in sessions.items():  # a day's ids in calls of UNIQUES_PER_CALL (each deduped)
        parts = [numbers[first : first + UNIQUES_PER_CALL] for first in range(0, len(numbers), UNIQUES_PER_CALL)]
        ids = chunk_ids(message_id, len(parts), "/")
        calls += [(site, day, part, call_id) for part, call_id in zip(parts, ids, strict=True)]
    return _Call(visits, message_id, calls, per_counter)


def _add_sessions(plan: WritePlan, call: _Call, expected: dict[tuple[str, date], int]) -> None:
    """The call's unique-visitor calls, each read back by ``uniques.apply_ids`` (which sends it
    again when the day's figure moved) and a closed day's ids counted."""
    conn = plan.conn
    for site, day, numbers, call_id in call.sessions:
        read = functools.partial(_read_ids, conn, call, site, day, numbers, call_id)
        uniques.add_ids(plan, day, numbers, expected[site, day], call_id, site, read, note=False)


def _read_ids(
    conn: RedisClient, call: _Call, site: str, day: date, numbers: list[int], call_id: str | None, replies: list[Any]
) -> None:
    [reply] = replies
    if uniques.apply_ids(conn, day, numbers, call_id, reply, site) == uniques.CLOSED:
        call.closed += len(numbers)


def _add_views(plan: WritePlan, call: _Call) -> None:
    """The call's page views (``sitestats.queue_views``), their ``site_day`` replies read back:
    views written now or before, and those of a closed day."""
    day_calls: list[tuple[date, int, int]] = []

    def queue(pipe: Any) -> None:
        day_calls[:] = sitestats.queue_views(plan.conn, pipe, [visit.view for visit in call.visits], call.message_id)

    def read(replies: list[Any]) -> None:
        day_replies = replies[: sitestats.sent_calls(day_calls)]  # queue_views queues its site_day calls first
        call.applied, call.duplicates = sitestats.applied_views(day_calls, day_replies)
        call.closed += sitestats.closed_views(day_replies)

    plan.add(queue, read)


def write_calls(
    plan: WritePlan, calls: Sequence[tuple[Sequence[Visit], str | None]], tally: throughput.Tally | None = None
) -> Callable[[], list[None]]:
    """Queue calls of validated visits on ``plan`` (the write's one round trip; a second only to
    re-send a day whose uniques layout moved), each call at most once per its message id: each
    call's uniques, views and counters, and the live sightings. Returns how to read the outcome
    once sent: ``tally``, when given, gets the visits applied now and those skipped as applied
    before (from the ``site_day`` replies), a closed day's views are counted (``refusals``), and
    None per call (no call is refused as written: the visit kind's ``write``)."""
    conn = plan.conn
    planned = [_plan(visits, message_id) for visits, message_id in calls if visits]
    expected = {
        (site, day): uniques.expected_for(conn, day, site) for call in planned for site, day, _ids, _id in call.sessions
    }
    for call in planned:
        _add_sessions(plan, call, expected)
        _add_views(plan, call)
        plan.add(functools.partial(_queue_counters, conn, call))
    if planned:
        plan.add(
            lambda pipe: live.queue_sightings(
                pipe, ((v.view.site, v.ts, v.view.visitor) for call in planned for v in call.visits)
            )
        )

    def outcome() -> list[None]:
        for call in planned:
            if tally is not None:
                tally.add(call.applied, call.duplicates, max(visit.ts for visit in call.visits))
            refusals.count_partial(conn, "record_visits", call.message_id, call.closed)
        return [None] * len(calls)

    return outcome


def _queue_counters(conn: RedisClient, call: _Call, pipe: Any) -> None:
    counters.queue_counter_writes(conn, pipe, call.per_counter, call.message_id)


def apply_visit(conn: RedisClient, *args: Any, message_id: str | None = None, **kwargs: Any) -> None:
    """One visit, its fields given as ``record_visit`` takes them (``VISIT.fields``, by position
    or name: ``ip, path, session_id=None, ts=None, site=None, ...``), written at once in this
    process: site PV/UV, counters ``hits`` and ``hits:<path>``, the session's daily unique, who
    visits and its source, at most once per ``message_id``."""
    check_message_id(message_id)
    visit = prepare_visit(VISIT.bind(args, kwargs))
    write_through(conn, lambda plan: write_calls(plan, [([visit], message_id)]))


def apply_visits(conn: RedisClient, visits: list[dict[str, Any]], *, message_id: str | None = None) -> int:
    """Many visits (dicts of ``VISIT.fields``: a ``record_visits`` message's items) as ``apply_visit`` each, in chunks,
    at most once per ``message_id`` (the batch id): the visit kind's payload (``payloads.apply_payload``).
    Every item is validated before anything is written; a bad item is refused on its own (logged
    and counted, ``refusals``) and the others are applied. Returns the number of visits applied.

    Chunk ``n`` holds the accepted items among positions ``n*CHUNK .. (n+1)*CHUNK - 1`` and is
    deduplicated under ``<batch id>#<n>``, so a redelivered batch maps every id to the same
    items even if an item's refusal changed meanwhile (a day closed, the clock moved)."""
    return apply_payload(conn, VISIT, visits, message_id=message_id)


VISIT = register(
    Kind(
        name="visit",
        fields=("ip", "path", "session_id", "ts", *sitestats.VIEW_FIELDS, "client"),
        required=2,
        item_task="counters_tasks.record_visit",
        worker_batches=True,
        payload_task="counters_tasks.record_visits",
        items_argument="visits",
        max_items=MAX_BATCH,
        prepare=prepare_visit,
        app_item=app_visit,
        merge=pack_visits,
        applied_metric=(
            "counters_visits_applied",
            "Page views applied (each counted once, a redelivery as a duplicate)",
        ),
        to_entry=visit_entry,
        from_entry=visit_from_entry,
        recheck=recheck_visit,
        write=write_calls,
        per_call=CHUNK,
    )
)
"""The page view: one visit a ``record_visit`` message, many a ``record_visits`` one."""
