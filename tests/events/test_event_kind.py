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
from counters_tasks.events import event_counter, event_day, event_report
from counters_tasks.events.kind import EVENT, prepare_event
from counters_tasks.recorder import VisitRecorder
from counters_tasks.store import keys
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


def test_an_event_counts_through_every_route(eager_app, conn):
    now = time.time() - 5
    tasks.track_event.delay("signup", {"plan": "pro", "seats": 3}, now, "203.0.113.1")
    tasks.track_event.delay("signup", {"plan": "free"}, now, "203.0.113.2")
    tasks.track_event.delay("signup", None, now, session_id="0123456789abcdef0123")  # a session's visitor
    VisitRecorder(flush_on_sigterm=False).track_event("signup", {"plan": "pro"}, now, ip="203.0.113.1")
    tasks.track_event.delay("signup", ts=now)  # no visitor: counted, in no UV
    report = event_report(conn)
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
    assert sum(total for _start, total in event_counter(conn, "signup", 60)) == 5


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


def model_report(events: list[dict], site: str, start: date, end: date, names_cap: int, values_cap: int) -> dict:
    """What ``event_report`` should say, counted in plain Python from the events in the order they
    were applied: per day the first ``names_cap`` names and each (name, key)'s first ``values_cap``
    values tracked, the rest ``(other)``; ``(none)``: a name's events without the key."""
    per_day: dict[date, list[dict]] = {}
    for event in events:
        if event.get("site", "") == site:
            per_day.setdefault(local_day(event["ts"]), []).append(event)
    found: dict[str, dict] = {}
    for day, day_events in per_day.items():
        if not start <= day <= end:
            continue
        names: list[str] = []
        values: dict[tuple[str, str], list[str]] = {}
        keys_seen: dict[str, set[str]] = {}
        for event in day_events:
            name = event["name"]
            if name not in names and len(names) < names_cap:
                names.append(name)
            tracked = name in names
            row = found.setdefault(name if tracked else OTHER, {"total": 0, "uv": set(), "none": 0, "props": {}})
            row["total"] += 1
            visitor = event.get("ip") or event.get("session_id")
            if visitor:
                row["uv"].add(visitor)
            else:
                row["none"] += 1
            if tracked:
                for key, value in (event.get("props") or {}).items():
                    keys_seen.setdefault(name, set()).add(key)
                    seen = values.setdefault((name, key), [])
                    text = str(value)
                    if text not in seen and len(seen) < values_cap:
                        seen.append(text)
                    cell = row["props"].setdefault(key, {}).setdefault(text if text in seen else OTHER, [0, set()])
                    cell[0] += 1
                    if visitor:
                        cell[1].add(visitor)
        for name in keys_seen:  # (none): the name's events of the day without the key
            for key in keys_seen[name]:
                for event in day_events:
                    if event["name"] == name and key not in (event.get("props") or {}):
                        cell = found[name]["props"][key].setdefault(NONE, [0, set()])
                        cell[0] += 1
                        visitor = event.get("ip") or event.get("session_id")
                        if visitor:
                            cell[1].add(visitor)
    for name, row in found.items():  # a key seen on some days: the name's events of the other days lack it
        for key, cells in row["props"].items():
            for day, day_events in per_day.items():
                if start <= day <= end and not any(
                    e["name"] == name and key in (e.get("props") or {}) for e in day_events
                ):
                    for event in day_events:
                        if event["name"] == name:
                            cell = cells.setdefault(NONE, [0, set()])
                            cell[0] += 1
                            visitor = event.get("ip") or event.get("session_id")
                            if visitor:
                                cell[1].add(visitor)
    return {
        name: (
            row["total"],
            len(row["uv"]),
            row["none"],
            0,
            {key: {v: (c[0], len(c[1])) for v, c in cells.items()} for key, cells in row["props"].items()},
        )
        for name, row in found.items()
    }


def test_counts_and_uvs_equal_a_plain_python_count(eager_app, raw_conn, monkeypatch):
    """2,000 events of 6 names (4 tracked a day), 3 keys, 5 values a key (3 tracked a day), over 3
    days and 2 sites, from 60 IPs, 15 sessions and none, in batches (one delivered twice) and
    one by one: every day's and every range's figures equal the plain count."""
    import json
    import random

    use_settings(
        monkeypatch,
        COUNTERS_SITES=json.dumps({"blog": {"hosts": ["blog.example.com"]}}),
        COUNTERS_EVENT_NAMES_PER_DAY=4,
        COUNTERS_EVENT_VALUES_PER_DAY=3,
    )
    rng = random.Random(43)
    base = (int(time.time()) // 86_400 - 3) * 86_400
    events = []
    for _n in range(2_000):
        event: dict = {"name": f"ev{rng.randrange(6)}", "ts": base + rng.randrange(3 * 86_400)}
        props = {key: rng.choice(["a", "b", "c", "d", 5]) for key in ("plan", "color", "n") if rng.random() < 0.6}
        if props:
            event["props"] = props
        who = rng.random()
        if who < 0.7:
            event["ip"] = f"198.51.100.{rng.randrange(60)}"
        elif who < 0.9:
            event["session_id"] = f"{rng.randrange(15):015x}"
        if rng.random() < 0.3:
            event["site"] = "blog"
        events.append(event)
    first = str(uuid.uuid4())
    for at in range(0, 1_800, 300):
        batch_id = first if at == 0 else str(uuid.uuid4())
        tasks.track_events.apply(args=[events[at : at + 300]], task_id=batch_id).get()
    tasks.track_events.apply(args=[events[:300]], task_id=first).get()  # redelivered
    recorder = VisitRecorder(flush_on_sigterm=False)
    for event in events[1_800:]:
        recorder.track_event(**event)
    days = sorted({local_day(e["ts"]) for e in events})
    for site in ("", "blog"):
        for start, end in [(d, d) for d in days] + [(days[0], days[-1]), (days[1], days[-1])]:
            got = rows(event_report(raw_conn, site or None, start, end))
            assert got == model_report(events, site, start, end, 4, 3), (site, start, end)
        # the live counters: each event once, in its site's, a name past a day's cap in (other)'s
        whole = model_report(events, site, days[0], days[-1], 4, 3)
        by_name: dict[str, int] = {}
        for day in days:
            for name, row in model_report(events, site, day, day, 4, 3).items():
                by_name[name] = by_name.get(name, 0) + row[0]
        assert sum(by_name.values()) == sum(row[0] for row in whole.values())
        counted = {name: sum(t for _s, t in event_counter(raw_conn, name, 3600, site or None)) for name in by_name}
        assert counted == by_name, site


def test_the_table_is_listed_with_its_keys():
    """``counters-tasks tables`` lists ``event_day``: its keys (each a row of docs/keys.md:
    tests/repo/test_tables.py), fed by the event kind, kept as a day's totals."""
    import json

    from click.testing import CliRunner

    from counters_tasks.ops.cli import cli

    listed = CliRunner().invoke(cli, ["tables", "--format", "json"])
    assert listed.exit_code == 0, listed.output
    entry = {e["name"]: e for e in json.loads(listed.output)["tables"]}["event_day"]
    assert entry["fed_by"] == ["event"]
    assert [key["key"] for key in entry["keys"]] == [
        "ct:event:{tag(D)}:day:<D>",
        "ct:event:{tag(D)}:day:<D>:<letter><digest>",
        "ct:event:{tag(D)}:pairs:<D>",
        "ct:event:{tag(D)}:seen:<call id>",
    ]


def test_a_journal_entry_is_the_same_event():
    """A worker's claimed batch journals each prepared event (``Kind.to_entry``) and writes what it
    reads back (``from_entry``): the same event, JSON and all."""
    import json

    event = prepare_event(
        EVENT.bind(
            ("buy", {"sku": "a", "n": 2, "ok": True, "price": 9.5, "gone": None}, 1_700_000_000.5, "192.0.2.7"), {}
        )
    )
    assert EVENT.from_entry(json.loads(json.dumps(EVENT.to_entry(event)))) == event
    assert event.props == (("sku", "a"), ("n", "2"), ("ok", "true"), ("price", "9.5"))


def test_an_event_of_a_closed_day_counts_in_no_uv(eager_app, raw_conn):
    """A day whose pairs have gone (its ``open_until`` passed): a later event of it is counted, in
    no UV, and reported as a visit of a closed day is (``closed_day``)."""
    now = time.time() - 5
    tasks.track_event.delay("late", None, now, "192.0.2.1")
    with keys.bound(raw_conn):
        raw_conn.hset(event_day.day_key(local_day(now)), "open_until", 1)  # as if COUNTERS_DAY_GRACE_DAYS had passed
        raw_conn.delete(event_day.pairs_key(local_day(now)))
    tasks.track_event.delay("late", None, now, "192.0.2.2")
    assert rows(event_report(raw_conn)) == {"late": (2, 1, 0, 0, {})}
    assert refusals.counts(raw_conn)["closed_day"] == 1


def test_keys_past_the_days_cap_are_counted_as_dropped(eager_app, raw_conn):
    """An event name tracks ``KEYS_PER_EVENT`` property keys a day: the properties of a key past
    them are dropped and counted (``dropped_props``), the name's other figures kept."""
    now = time.time() - 5
    items = [{"name": "wide", "props": {f"k{n}": "v"}, "ts": now} for n in range(event_day.KEYS_PER_EVENT + 3)]
    assert tasks.track_events.apply(args=[items], task_id=str(uuid.uuid4())).get() == len(items)
    [row] = event_report(raw_conn).events
    assert (row.total, row.dropped_props, len(row.props)) == (len(items), 3, event_day.KEYS_PER_EVENT)
    assert {v.value: v.total for v in row.props["k0"]} == {"v": 1, NONE: len(items) - 1}
    assert {v.value: v.total for v in row.props["k29"]} == {"v": 1, NONE: 29 + 3}
