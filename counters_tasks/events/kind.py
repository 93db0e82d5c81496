"""The event kind (``EVENT``, ``core.kind``): one analytics event, a name and its properties, of
the visitor and site as visits have them (issue 43; docs/events.md "Events").

- ``prepare_event``: one event checked in a worker (InvalidInput, nothing written) and made a
  ``core.events.Event``: its name and properties by ``core.events``' caps, its time, its site and
  its local day in the site's zone, its visitor (``core.visitors.visitor_id`` of its IP, else
  ``session_visitor_id`` of its session id, else None: counted, in no unique figure);
- ``app_event``: the same checked in the app's process (no COUNTERS_SECRET there);
- ``write_events``: calls of prepared events written to ``event_day`` (``events.event_day``),
  each at most once per its id, then each event added to its multi-precision counter
  (``counters``: ``event:<name>`` scoped by site, the names past the day's cap as
  ``event:(other)``), under the call's id too.

The tasks are ``counters_tasks.track_event`` (one event a message) and ``track_events`` (many,
what ``VisitRecorder.track_event`` sends): ``tasks.define_kind_tasks(EVENT)``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import date
from typing import Any

from .. import counters, refusals, throughput
from ..core.days import local_day
from ..core.events import OTHER, Event, check_event_name, check_props
from ..core.kind import Kind, register
from ..core.settings import DEFAULT_SITE
from ..core.sites import check_site, zone_of
from ..core.validation import check_ip, check_item_time, check_session_id
from ..core.visitors import session_visitor_id, short_session_id, visitor_id
from ..errors import InvalidInput
from ..store import tombstones
from ..store.scripts import WritePlan, execute_in_order
from . import event_day

MAX_EVENTS = 20_000
"""The most events one ``track_events`` message may carry."""


def prepare_event(fields: Mapping[str, Any]) -> Event:
    """One event, its fields (``EVENT.fields``) as ``EVENT.bind`` returns them, checked (raises
    InvalidInput; writes nothing) and prepared for writing."""
    get = fields.get
    name = check_event_name(fields["name"])
    props, dropped = check_props(get("props"))
    ts = check_item_time(get("ts"))
    site = check_site(get("site"))
    day = local_day(ts, zone_of(site))
    ip, session_id = get("ip"), get("session_id")
    if ip is not None:
        if session_id is not None:
            check_session_id(session_id)
        visitor: str | None = visitor_id(ip, day)
    elif session_id is not None:
        visitor = session_visitor_id(session_id, day)
    else:
        visitor = None
    tombstones.check_not_forgotten(visitor, ts)
    return Event(name, props, dropped, ts, day, site, visitor)


def recheck_event(event: Event) -> None:
    """A journaled event applied late (``Kind.recheck``): refused when its visitor was forgotten
    after it was made."""
    tombstones.check_not_forgotten(event.visitor, event.ts)


def app_event(fields: Mapping[str, Any]) -> dict[str, Any]:
    """One event (its fields as ``EVENT.bind`` returns them) checked in the app's process (every
    check of ``prepare_event`` but the visitor's id, which needs COUNTERS_SECRET; ``ts`` None:
    now) and written as an item of a ``track_events`` message: the properties as given (the
    worker counts those past the cap), the session id shortened to what names its session."""
    get = fields.get
    event: dict[str, Any] = {"name": check_event_name(fields["name"])}
    props = get("props")
    check_props(props)
    ts = get("ts")
    event["ts"] = time.time() if ts is None else check_item_time(ts)
    site = get("site")
    check_site(site)
    ip, session_id = get("ip"), get("session_id")
    if ip is not None:
        event["ip"] = check_ip(ip)
    if session_id is not None:
        check_session_id(session_id)
        event["session_id"] = short_session_id(session_id)
    if props:
        event["props"] = props
    if site is not None and site != DEFAULT_SITE:
        event["site"] = site
    return event


def event_entry(event: Event) -> list[Any]:
    """A prepared event as JSON-able data (a worker batch's journal), ``event_from_entry``'s input."""
    return [
        event.name,
        [list(prop) for prop in event.props],
        event.dropped,
        event.ts,
        event.day.isoformat(),
        event.site,
        event.visitor,
    ]


def event_from_entry(entry: list[Any]) -> Event:
    """The prepared event ``event_entry`` made ``entry`` of."""
    name, props, dropped, ts, day, site, visitor = entry
    return Event(name, tuple((key, value) for key, value in props), dropped, ts, date.fromisoformat(day), site, visitor)


def write_events(
    plan: WritePlan, calls: Sequence[tuple[Sequence[Event], str | None]], tally: throughput.Tally | None = None
) -> Callable[[], list[InvalidInput | None]]:
    """Queue calls of prepared events on ``plan`` (``event_day``, each call at most once per its
        id); once sent, each event's counter (``event_day.counter_name``; a name past the day's cap as
    ``(other)``, which only the ``event_day`` reply says) is added in a second round trip, under
    ``<call id>/n`` (a redelivery's ``event_day`` reply says again which names were tracked, so its
    counters are written once whichever step a crash stopped). ``tally`` gets the events applied
    now and those skipped as applied before; events of a closed day (counted in no UV) are counted
    as refusals do (``closed_day``); no call is refused as written (None each)."""
    conn = plan.conn
    outcome = event_day.queue_events(plan, calls)
    precisions = counters.indexed(counters.PRECISIONS)

    def finish() -> list[InvalidInput | None]:
        results = outcome()
        per_call: list[tuple[dict[str, counters.Fields], str | None]] = []
        for (events, call_id), result in zip(calls, results, strict=True):
            per_counter: dict[str, counters.Fields] = {}
            for event, tracked in zip(events, result.tracked, strict=True):
                fields = per_counter.setdefault(
                    event_day.counter_name(event.name if tracked else OTHER, event.site), {}
                )
                counters.add_to_fields(fields, int(event.ts), 1, precisions)
            per_call.append((per_counter, None if call_id is None else call_id + "/n"))
            if tally is not None and events:
                tally.add(result.applied, result.duplicates, max(event.ts for event in events))
            refusals.count_partial(conn, "track_events", call_id, result.closed)

        def queue(pipe: Any) -> None:
            for per_counter, message_id in per_call:
                if per_counter:
                    counters.queue_counter_writes(conn, pipe, per_counter, message_id)

        execute_in_order(conn, queue)
        return [None] * len(calls)

    return finish


EVENT = register(
    Kind(
        name="event",
        fields=("name", "props", "ts", "ip", "session_id", "site"),
        required=1,
        item_task="counters_tasks.track_event",
        worker_batches=True,
        payload_task="counters_tasks.track_events",
        items_argument="events",
        max_items=MAX_EVENTS,
        prepare=prepare_event,
        app_item=app_event,
        to_entry=event_entry,
        from_entry=event_from_entry,
        recheck=recheck_event,
        write=write_events,
        per_call=event_day.EVENTS_PER_CALL,
    )
)
"""An analytics event: one a ``track_event`` message, many a ``track_events`` one."""
