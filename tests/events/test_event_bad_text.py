"""Any ``str`` a caller can build (lone surrogates, NUL, 10 KB, any code point) as an event's name,
a property's key or a property's value, beside good events, through each app-side route run
in-process (as tests/faults/test_bad_text.py does for visits and bumps): a ``track_event`` message
applied eagerly, a ``track_events`` batch, and ``VisitRecorder.track_event`` under eager mode.
Every event is counted exactly once or refused alone (InvalidInput, counted under its reason): the
good events beside it are counted whatever it holds, and nothing but InvalidInput is raised."""

from __future__ import annotations

import time
import uuid

import pytest
from hypothesis import given

from counters_tasks import tasks
from counters_tasks.errors import InvalidInput
from counters_tasks.events import event_report
from counters_tasks.recorder import VisitRecorder
from tests.faults.test_bad_text import SWEEP, any_text, refused_total


def good_event(n: int) -> dict:
    return {"name": "sweep", "props": {"k": f"v{n}"}, "ip": f"203.0.113.{n + 1}", "ts": time.time()}


def send(route: str, items: list[dict]) -> int:
    """``items`` through ``route``; returns how many were refused with InvalidInput."""
    if route == "batch":
        return len(items) - tasks.track_events.apply(args=[items], task_id=str(uuid.uuid4())).get()
    recorder = VisitRecorder() if route == "recorder" else None
    refused = 0
    for item in items:
        try:
            if recorder is None:
                tasks.track_event.apply(kwargs=item, task_id=str(uuid.uuid4())).get()
            else:
                recorder.track_event(**item)
        except InvalidInput:
            refused += 1
    return refused


def counted(conn) -> int:
    return sum(row.total for row in event_report(conn).events)


@pytest.mark.parametrize("route", ["message", "batch", "recorder"])
@pytest.mark.parametrize("field", ["name", "key", "value"])
def test_any_text_in_an_event(route, field, eager_app, raw_conn):
    @SWEEP
    @given(value=any_text)
    def check(value):
        raw_conn.flushdb()
        odd = good_event(50)
        if field == "name":
            odd["name"] = value
        elif field == "key":
            odd["props"] = {value: "v"}
        else:
            odd["props"] = {"k": value}
        items = [good_event(0), good_event(1), odd, good_event(2)]
        refused = send(route, items)
        assert refused in (0, 1)
        assert counted(raw_conn) == len(items) - refused  # the good ones, whatever the odd one held
        assert refused_total(raw_conn, route) == (0 if route == "recorder" else refused)

    check()
