"""The event kind (``events.kind``; issue 43, docs/events.md "Events"): one event through each
route (``track_event.delay``, a ``track_events`` batch, ``VisitRecorder.track_event``), what it
counts per site and day (``events.event_day``: counts, exact UVs, ``(other)`` and ``(none)``) and
its live counter, checked against a count made in plain Python."""

from __future__ import annotations

import time
import uuid
from datetime import date

import pytest

from counters_tasks import refusals, tasks
from counters_tasks.core.days import local_day
from counters_tasks.core.events import MAX_PROPS, NONE, OTHER
from counters_tasks.errors import InvalidInput
from counters_tasks.events import event_counter, event_report
from counters_tasks.events.kind import EVENT, prepare_event
from counters_tasks.recorder import VisitRecorder
from tests.support.servers import use_settings


def rows(report) -> dict:
    """An EventReport as plain data: name -> (total, uv, no_visitor, dropped, {key: {value: (total, uv)}})."""
    return {
        row.name: (
            row.total,
            row.uv,
            row.no_visitor,
            row.dropped_props,
            {key: {v.value: (v.total, v.uv) for v in values} for key, values in row.props.items()},
        )
        for row in report.events
    }


def test_an_event_counts_through_every_route(eager_app, raw_conn):
    now = time.time() - 5
    tasks.track_event.delay("signup", {"plan": "pro", "seats": 3}, now, "203.0.113.1")
    tasks.track_event.delay("signup", {"plan": "free"}, now, "203.0.113.2")
    tasks.track_event.delay("signup", None, now, session_id="0123456789abcdef0123")  # a session's visitor
    VisitRecorder(flush_on_sigterm=False).track_event("signup", {"plan": "pro"}, now, ip="203.0.113.1")
    tasks.track_event.delay("signup", ts=now)  # no visitor: counted, in no UV
    report = event_report(raw_conn)
    assert report.start == report.end == local_day(now)
    assert rows(report) == {
        "signup": (
            5,
            3,
            1,
            0,
            {
                "plan": {"pro": (2, 1), "free": (1, 1), NONE: (2, 1)},
                "seats": {"3": (1, 1), NONE: (4, 3)},  # 203.0.113.2, the session, 203.0.113.1 again
            },
        )
    }
    assert report.events[0].uv_error == 0.0
    assert sum(total for _start, total in event_counter(raw_conn, "signup", 60)) == 5


def test_a_redelivered_batch_counts_once(eager_app, raw_conn):
    now = time.time() - 5
    batch = [{"name": "buy", "props": {"sku": f"s{n % 3}"}, "ip": f"198.51.100.{n}", "ts": now} for n in range(250)]
    batch_id = str(uuid.uuid4())
    assert tasks.track_events.apply(args=[batch], task_id=batch_id).get() == 250
    assert tasks.track_events.apply(args=[batch], task_id=batch_id).get() == 250  # redelivered: applied before
    [row] = event_report(raw_conn).events
    assert (row.total, row.uv) == (250, 250)
    assert {v.value: v.total for v in row.props["sku"]} == {"s0": 84, "s1": 83, "s2": 83}
    assert sum(total for _start, total in event_counter(raw_conn, "buy", 60)) == 250


def test_bad_items_are_refused_alone(eager_app, raw_conn):
    now = time.time() - 5
    good = {"name": "ok", "ts": now}
    bad = [
        {"name": ""},
        {"name": "x" * 101},
        {"name": "ok", "props": {"k" * 101: 1}},
        {"name": "ok", "props": {"k": "v" * 501}},
        {"name": "ok", "props": {"k": [1]}},
        {"name": "ok", "props": {"k": float("nan")}},
        {"name": "ok", "props": ["k"]},
        {"name": "ok", "ip": "not an ip"},
        {"name": "ok", "session_id": "nope"},
        {"name": "ok", "site": "no such site"},
        {"name": "ok", "ts": "yesterday"},
    ]
    for item in bad:
        with pytest.raises(InvalidInput):
            prepare_event(EVENT.bind((), item))
        with pytest.raises(InvalidInput):
            VisitRecorder(flush_on_sigterm=False).track_event(**item)
    applied = tasks.track_events.apply(args=[[good, *bad, good]], task_id=str(uuid.uuid4())).get()
    assert applied == 2
    assert rows(event_report(raw_conn)) == {"ok": (2, 0, 2, 0, {})}
    assert refusals.counts(raw_conn)[InvalidInput.reason] == len(bad)


def test_the_caps_count_what_they_leave_out(eager_app, raw_conn, monkeypatch):
    """Names past COUNTERS_EVENT_NAMES_PER_DAY as ``(other)``, values past
    COUNTERS_EVENT_VALUES_PER_DAY as ``(other)``, properties past MAX_PROPS counted as dropped."""
    use_settings(monkeypatch, COUNTERS_EVENT_NAMES_PER_DAY=2, COUNTERS_EVENT_VALUES_PER_DAY=2)
    now = time.time() - 5
    items = [
        {"name": "a", "props": {"color": "red"}, "ip": "192.0.2.1", "ts": now},
        {"name": "a", "props": {"color": "blue"}, "ip": "192.0.2.2", "ts": now},
        {"name": "a", "props": {"color": "green"}, "ip": "192.0.2.3", "ts": now},
        {"name": "a", "props": {"color": "pink"}, "ip": "192.0.2.3", "ts": now},
        {"name": "b", "props": {f"p{n}": n for n in range(MAX_PROPS + 4)}, "ip": "192.0.2.1", "ts": now},
        {"name": "c", "ip": "192.0.2.1", "ts": now},
        {"name": "d", "ip": "192.0.2.2", "ts": now},
        {"name": "d", "ip": "192.0.2.2", "ts": now},
    ]
    assert tasks.track_events.apply(args=[items], task_id=str(uuid.uuid4())).get() == len(items)
    found = rows(event_report(raw_conn))
    assert found["a"] == (4, 3, 0, 0, {"color": {"red": (1, 1), "blue": (1, 1), OTHER: (2, 1)}})
    assert found[OTHER] == (3, 2, 0, 0, {})
    assert found["b"][:4] == (1, 1, 0, 4)
    assert len(found["b"][4]) == MAX_PROPS
    counted = {name: sum(t for _s, t in event_counter(raw_conn, name, 60)) for name in ("a", "b", "c", OTHER)}
    assert counted == {"a": 4, "b": 1, "c": 0, OTHER: 3}
    assert event_report(raw_conn, start=date(2000, 1, 1), end=date(2000, 1, 2)).events == []
