"""Forgetting one visitor (issue 44, docs/privacy.md "Erasing one visitor"): after
``forget_visitor``, a scan of every key and value finds none of the visitor's identifiers, and
every exact unique-visitor figure equals a plain-Python count without the visitor, the others'
figures unchanged."""

from __future__ import annotations

import json
import time
import uuid
from collections import defaultdict
from datetime import date
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from counters_tasks import events, sitestats, uniques, visits
from counters_tasks.core import days
from counters_tasks.core.visitors import pair_visitor, session_number, session_visitor_id, visitor_id
from counters_tasks.errors import InvalidInput
from counters_tasks.events.kind import EVENT
from counters_tasks.payloads import apply_payload
from counters_tasks.store import tombstones
from counters_tasks.worker import forget
from tests.faults.test_bad_input import junk
from tests.support.cli_run import run_in_process as run_cli
from tests.support.procs import BROWSER_AGENT
from tests.support.raw_ips import values_of
from tests.support.servers import use_settings

pytestmark = pytest.mark.cluster  # (make test-cluster runs them on a 3-master cluster too)

DAY = 86400
SITES = {"blog": {"hosts": ["blog.example.com"], "timezone": "UTC"}}
TARGET_IP = "203.0.113.77"
TARGET_SESSION = str(uuid.UUID(int=0x5EC5E55E5E5E5E5E5E5E5E5E5E5E5E5E))
OTHERS = [f"198.51.100.{n}" for n in range(1, 31)] + ["2001:db8::77"]
PATHS = ["/", "/a", "/b", "/c?x=1", "/d"]
REFERRERS = ["https://news.example.org/x", "", "https://search.example.net/?q=1"]


def scenario(now: float) -> list[dict[str, Any]]:
    """Visits of 31 other visitors and of the target (with and without its session id) on three
    days (today, yesterday, three days back), on the default site and on ``blog`` (the target
    on the default site only)."""
    out: list[dict[str, Any]] = []
    for d, back in enumerate((0, 1, 3)):
        ts = now - back * DAY
        for n, ip in enumerate(OTHERS):
            for p in range((n + d) % 3 + 1):
                visit = {
                    "ip": ip,
                    "path": PATHS[(n + p) % len(PATHS)],
                    "ts": ts,
                    "user_agent": BROWSER_AGENT,
                    "referrer": REFERRERS[n % 3],
                }
                if n % 2:
                    visit["session_id"] = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"session-{n}"))
                out.append(visit)
                if n % 4 == 0:
                    out.append({**visit, "site": "blog"})
        for p, path in enumerate(PATHS[: 3 + d]):
            visit = {"ip": TARGET_IP, "path": path, "ts": ts, "user_agent": BROWSER_AGENT, "referrer": REFERRERS[p % 3]}
            if p % 2 == 0:
                visit["session_id"] = TARGET_SESSION
            out.append(visit)
    return out


def event_items(now: float) -> list[dict[str, Any]]:
    """Events of the others (by IP, some by session only), and of the target by IP and by its
    session alone, on the scenario's days."""
    out: list[dict[str, Any]] = []
    for back in (0, 1, 3):
        ts = now - back * DAY
        for n, ip in enumerate(OTHERS[:12]):
            out.append({"name": "click", "props": {"button": f"b{n % 3}"}, "ts": ts, "ip": ip})
            if n % 3 == 0:
                out.append(
                    {"name": "play", "ts": ts, "session_id": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"session-{n}"))}
                )
        out.append({"name": "click", "props": {"button": "b1"}, "ts": ts, "ip": TARGET_IP})
        out.append({"name": "play", "ts": ts, "session_id": TARGET_SESSION})
    return out


def event_figures(conn, day_list: list[date]) -> dict[tuple, int]:
    """Each event's, and each property value's, unique visitors of each day."""
    out: dict[tuple, int] = {}
    for day in day_list:
        for row in events.event_report(conn, start=day, end=day).events:
            out[(day, row.name)] = row.uv
            for key, values in row.props.items():
                for value in values:
                    out[(day, row.name, key, value.value)] = value.uv
    return out


def expected_events(items: list[dict[str, Any]], without: set[str]) -> dict[tuple, int]:
    """The same in plain Python, ``without`` some visitors (an IP, a session id)."""
    uv: dict[tuple, set] = defaultdict(set)
    for item in items:
        who = item.get("ip") or item.get("session_id")
        day = days.local_day(item["ts"])
        rows = [(day, item["name"])]
        rows += [(day, item["name"], key, value) for key, value in item.get("props", {}).items()]
        for row in rows:
            uv[row]
            if who not in without:
                uv[row].add(who)
    return {row: len(ids) for row, ids in uv.items()}


def goal_figures(conn, day_list: list[date]) -> dict[date, int]:
    return {day: events.goal_report(conn, start=day, end=day).goals[0].converters for day in day_list}


def expected(visits_: list[dict[str, Any]], without: str | None) -> dict[str, Any]:
    """The exact figures of ``visits_`` in plain Python, ``without`` an IP's visits."""
    pv: dict[tuple, int] = defaultdict(int)
    uv: dict[tuple, set] = defaultdict(set)
    sessions: dict[tuple, set] = defaultdict(set)
    for visit in visits_:
        site = visit.get("site", "")
        day = days.local_day(visit["ts"])
        path = visit["path"].split("?")[0]
        for key in ((site, day, None), (site, day, path), (site, None, None), (site, None, path)):
            pv[key] += 1
            if visit["ip"] != without:
                uv[key].add(visit["ip"])
        if "session_id" in visit and visit["ip"] != without:
            sessions[(site, day)].add(visit["session_id"])
    return {
        "pv": dict(pv),
        "uv": {key: len(ids) for key, ids in uv.items()},
        "sessions": {key: len(ids) for key, ids in sessions.items()},
    }


def observed(conn, figures: dict[str, Any]) -> dict[str, Any]:
    """The same figures as Redis gives them (``sitestats``, ``uniques``)."""
    pv, uv = {}, {}
    for site, day, path in figures["pv"]:
        got = sitestats.site_visit_info(conn, day, path, site=site or None)
        pv[(site, day, path)] = got.pv
        uv[(site, day, path)] = got.uv
    sessions = {(site, day): uniques.unique_visitors(conn, day, site=site or None) for site, day in figures["sessions"]}
    return {"pv": pv, "uv": uv, "sessions": sessions}


def identifiers(ip: str | None, session_id: str | None, day_list: list[date]) -> set[bytes]:
    """Every form of the visitor's ids a value could hold: its IP, its visitor ids (each day's),
    their pairs form and 6-character sketch ids, its session number and short session id."""
    found: set[bytes] = set()
    for day in day_list:
        ids = []
        if ip is not None:
            found.add(ip.encode())
            ids.append(visitor_id(ip, day))
        if session_id is not None:
            ids.append(session_visitor_id(session_id, day))
            found.add(str(session_number(session_id, day)).encode())  # (the day's with COUNTERS_VISITOR_KEY=daily)
            found.add(session_id.replace("-", "")[:15].encode())
        for vid in ids:
            pair = pair_visitor(vid)
            found |= {vid.encode(), pair.encode(), pair[:6].encode()}
    return found


def findings(client, wanted: set[bytes]) -> dict[bytes, set[bytes]]:
    """``{key: the identifiers found in its name or values}`` over every key (SCAN + TYPE + reads)."""
    found: dict[bytes, set[bytes]] = {}
    for key in client.scan_iter(count=1000):
        for value in values_of(client, key):
            hits = {each for each in wanted if each in value}
            if hits:
                found.setdefault(key, set()).update(hits)
    return found


@pytest.fixture(autouse=True)
def no_settling(monkeypatch):
    """No worker runs in these tests (but the in-flight one): the erasure need not wait for their
    copies of the tombstones; each test reads its own afresh."""
    monkeypatch.setattr(forget, "settle", lambda: None)
    tombstones.forget_copy()
    yield
    tombstones.forget_copy()


@pytest.fixture
def two_sites(monkeypatch):
    use_settings(
        monkeypatch, COUNTERS_SITES=json.dumps(SITES), COUNTERS_CLIENT_TABLES="on", COUNTERS_CLIENT_PAGES="/a,/b"
    )


GOAL_PATH = "/b"


def stored_scenario(conn, now: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[date]]:
    """The scenario's goal defined, its visits and events written: (visits, events, days)."""
    events.define_goal(conn, "reached-b", page=GOAL_PATH, now=now - 10 * DAY)
    batch = scenario(now)
    visits.apply_visits(conn, batch, message_id="forget-scenario")
    items = event_items(now)
    apply_payload(conn, EVENT, items, message_id="forget-events")
    return batch, items, sorted({days.local_day(v["ts"]) for v in batch})


def converters(batch: list[dict[str, Any]], day: date, without: str | None) -> int:
    """The goal's converters of the default site's ``day`` but the target (counted apart)."""
    return len(
        {
            v["ip"]
            for v in batch
            if v["path"] == GOAL_PATH
            and "site" not in v
            and days.local_day(v["ts"]) == day
            and v["ip"] not in (without, TARGET_IP)
        }
    )


@pytest.mark.usefixtures("two_sites")
def test_forget_by_ip_leaves_no_identifier_and_exact_figures(raw_conn):
    now = time.time()
    batch, items, day_list = stored_scenario(raw_conn, now)
    wanted = identifiers(TARGET_IP, None, day_list)
    assert findings(raw_conn, wanted), "the scenario stored the target's ids"
    before = expected(batch, None)
    assert observed(raw_conn, before) == {k: before[k] for k in ("pv", "uv", "sessions")}
    assert event_figures(raw_conn, day_list) == expected_events(items, set())
    assert goal_figures(raw_conn, day_list) == {day: 1 + converters(batch, day, None) for day in day_list}

    answer = forget.forget_visitor(ip=TARGET_IP)

    assert findings(raw_conn, wanted) == {}
    after = expected(batch, TARGET_IP)
    got = observed(raw_conn, after)
    assert got["uv"] == after["uv"]
    assert got["pv"] == after["pv"] == before["pv"]  # page views carry no identifier and stay
    assert got["sessions"] == before["sessions"]  # an IP names no session: forget by --session-id
    for path in {visit["path"].split("?")[0] for visit in batch}:  # a page's UV over the range: exact (lists)
        span = sitestats.site_visit_range(raw_conn, day_list[0], day_list[-1], path)
        users = {v["ip"] for v in batch if v["path"].split("?")[0] == path and "site" not in v and v["ip"] != TARGET_IP}
        assert (span.uv, span.uv_approximate) == (len(users), False), path
    assert event_figures(raw_conn, day_list) == expected_events(items, {TARGET_IP})
    assert goal_figures(raw_conn, day_list) == {day: converters(batch, day, TARGET_IP) for day in day_list}
    assert answer["removed"] > 0 and answer["corrected"]
    assert any("range HLL" in figure for figure, _error in answer["estimates"])
    assert answer["audit"]["site"] == "default" and TARGET_IP not in json.dumps(answer["audit"])
    assert forget.read_audit(raw_conn)[0] == answer["audit"]


@pytest.mark.usefixtures("two_sites")
@pytest.mark.parametrize("visitor_key", ["standard", "daily"])
def test_forget_by_session_id_leaves_no_session_and_exact_figures(raw_conn, monkeypatch, visitor_key):
    use_settings(monkeypatch, COUNTERS_VISITOR_KEY=visitor_key)
    now = time.time()
    batch, items, day_list = stored_scenario(raw_conn, now)
    wanted = {each for each in identifiers(None, TARGET_SESSION, day_list)}
    assert findings(raw_conn, wanted)
    before = observed(raw_conn, expected(batch, None))

    answer = forget.forget_visitor(session_id=TARGET_SESSION)

    assert findings(raw_conn, wanted) == {}
    got = observed(raw_conn, expected(batch, None))
    sessions = defaultdict(set)
    for visit in batch:
        if "session_id" in visit and visit["session_id"] != TARGET_SESSION:
            sessions[(visit.get("site", ""), days.local_day(visit["ts"]))].add(visit["session_id"])
    assert got["sessions"] == {key: len(ids) for key, ids in sessions.items()}
    assert (got["pv"], got["uv"]) == (before["pv"], before["uv"])  # the visits' visitor is its IP's
    assert event_figures(raw_conn, day_list) == expected_events(items, {TARGET_SESSION})
    assert answer["removed"] >= 2 * len(day_list)


def test_the_command_and_the_task_forget_and_say_what_they_did(raw_conn, eager_app):
    from counters_tasks import tasks

    now = time.time()
    others = [{"ip": ip, "path": "/", "ts": now} for ip in OTHERS[:5]]
    visits.apply_visits(raw_conn, [*others, {"ip": TARGET_IP, "path": "/a", "ts": now}], message_id="m1")
    code, out, err = run_cli("forget", "--ip", TARGET_IP, "--json")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["removed"] >= 3 and "site_day" in answer["tables"] and answer["audit"]["removed"] == answer["removed"]
    assert sitestats.site_visit_info(raw_conn).uv == 5 and sitestats.site_visit_info(raw_conn).pv == 6
    code, out, _err = run_cli("forget", "--ip", TARGET_IP)  # again: nothing left to remove
    assert code == 0 and "0 entries removed" in out and "estimate" in out
    code, out, _err = run_cli("table", "forget_audit", "--json")
    assert code == 0 and [row["removed"] for row in json.loads(out)["rows"]] == [0, answer["removed"]]
    assert TARGET_IP not in out
    got = tasks.forget_visitor.delay(ip=OTHERS[0]).get()
    assert got["removed"] >= 3 and sitestats.site_visit_info(raw_conn).uv == 4


BAD = [
    {},  # neither
    {"ip": "300.1.1.1"},
    {"ip": "not an ip"},
    {"ip": 17},
    {"session_id": "xyz"},
    {"session_id": ""},
    {"ip": "10.0.0.1", "session_id": "zz"},
    {"ip": "10.0.0.1", "site": "nosuchsite"},
    {"ip": "10.0.0.1", "site": 3},
]


@pytest.mark.parametrize("request_", BAD, ids=[json.dumps(each) for each in BAD])
def test_bad_input_is_refused_before_anything_is_written(raw_conn, eager_app, request_):
    from counters_tasks import tasks

    visits.apply_visits(raw_conn, [{"ip": "10.0.0.1", "path": "/", "ts": time.time()}], message_id="m1")
    before = sorted(raw_conn.scan_iter(count=1000))
    with pytest.raises(InvalidInput):
        forget.forget_visitor(**request_)
    with pytest.raises(InvalidInput):
        tasks.forget_visitor.delay(**request_).get()
    if all(isinstance(value, str) for value in request_.values()):
        args = [f"--{name.replace('_', '-')}={value}" for name, value in request_.items()]
        assert run_cli("forget", *args)[0] == 2
    assert sorted(raw_conn.scan_iter(count=1000)) == before
    assert sitestats.site_visit_info(raw_conn).uv == 1


def test_daily_visitor_key_forgets_each_days_id(raw_conn, monkeypatch):
    use_settings(monkeypatch, COUNTERS_VISITOR_KEY="daily")
    now = time.time()
    batch = [
        {"ip": ip, "path": path, "ts": now - back * DAY}
        for back in (0, 1, 2)
        for ip in [*OTHERS[:4], TARGET_IP]
        for path in ("/", "/a")
    ]
    visits.apply_visits(raw_conn, batch, message_id="daily")
    day_list = sorted({days.local_day(v["ts"]) for v in batch})
    ids = {visitor_id(TARGET_IP, day) for day in day_list}
    assert len(ids) == 3  # another id each day
    wanted = identifiers(TARGET_IP, None, day_list)
    assert findings(raw_conn, wanted)

    forget.forget_visitor(ip=TARGET_IP)

    assert findings(raw_conn, wanted) == {}
    for day in day_list:
        assert sitestats.site_visit_info(raw_conn, day).uv == 4
        assert sitestats.site_visit_info(raw_conn, day, "/a").uv == 4
    assert sitestats.site_visit_info(raw_conn).uv == 12  # all time: each day's id a visitor of its own


def test_a_funnel_forgets_the_visitor_and_equals_the_reference_without_it(raw_conn):
    from tests.events.test_funnels import assert_matches, define, step_events_of, write_views

    now = time.time()
    funnel = define(raw_conn, [{"page": "/a"}, {"page": "/b"}, {"page": "/c"}], 3600, since=now - 3 * DAY)
    views = []
    for back in (0, 1):
        ts = now - back * DAY - 2 * 3600
        for n, ip in enumerate([*OTHERS[:8], TARGET_IP]):
            views.append((ip, "/a", ts + n))
            if n % 2 == 0 or ip == TARGET_IP:
                views.append((ip, "/b", ts + n + 30 * (n + 1)))
            if n % 4 == 0 or ip == TARGET_IP:
                views.append((ip, "/c", ts + n + 900))
    write_views(raw_conn, views, "funnel-views")
    day_list = sorted({days.local_day(ts) for _ip, _path, ts in views})
    judged, late = step_events_of(funnel, views, [], now)  # (yesterday's: late, not judged)
    assert_matches(raw_conn, funnel, judged, day_list, late=late)

    answer = forget.forget_visitor(ip=TARGET_IP)

    without = [one for one in judged if one[0] != visitor_id(TARGET_IP)]
    assert len(without) < len(judged)
    assert_matches(raw_conn, funnel, without, day_list, late=late)
    assert any(figure.startswith("funnel ") for figure in answer["corrected"])
    assert findings(raw_conn, identifiers(TARGET_IP, None, day_list)) == {}


LIMIT_FORGET = 3.0
"""The budget test's limit, in reference calls of about 0.6 ms (``tests/support/server_cpu.py``):
1.83 measured at the median for ``forget_sketches`` (50 fields of 1.5 KB a call; 100 a call took
3.6), so about 1.6 times the most: a call of twice the work fails."""


@pytest.mark.budget
@pytest.mark.long
@pytest.mark.usefixtures("bound_deployment")
def test_forgetting_a_visitor_of_a_full_day_stays_under_the_budget(raw_conn, call_budget):
    """A day of 600 paths each with 250 visitors (every sketch a list of 250 ids, 1.5 KB), the
    visitor on every path: its erasure reads the pages with HSCAN and corrects 50 paths a call
    (an HGET, a SREM and an HSET of a 1.5 KB value each). The costliest kind of call's median, in
    reference calls, stays under LIMIT_FORGET; and no call is over 5 ms of the server's CPU but for
    the moments of a shared machine (printed)."""
    now = time.time()
    ips = [f"10.9.{n // 250}.{n % 250}" for n in range(249)] + [TARGET_IP]
    paths = [f"/p/{n}" for n in range(600)]
    for first in range(0, len(paths), 20):
        batch = [{"ip": ip, "path": path, "ts": now} for path in paths[first : first + 20] for ip in ips]
        visits.apply_visits(raw_conn, batch, message_id=f"full-{first}")
    call_budget.reset()
    forget.forget_visitor(ip=TARGET_IP, conn=raw_conn)
    print(call_budget.report())
    assert call_budget.within(LIMIT_FORGET) == []
    assert sitestats.site_visit_info(raw_conn, days.local_day(now), "/p/7").uv == 249


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ip=st.one_of(st.none(), junk), session_id=st.one_of(st.none(), junk), site=st.one_of(st.none(), junk))
def test_any_bad_request_is_refused_with_nothing_written(raw_conn, ip, session_id, site):
    """Whatever the arguments, either a valid request (forgotten) or InvalidInput before any write."""
    valid = True
    try:
        forget.check_request(site, ip, session_id)
    except InvalidInput:
        valid = False
    before = sorted(raw_conn.scan_iter(count=1000))
    if valid:
        forget.forget_visitor(site=site, ip=ip, session_id=session_id)
        assert raw_conn.llen(forget.audit_key()) >= 1
        raw_conn.flushdb()
    else:
        with pytest.raises(InvalidInput):
            forget.forget_visitor(site=site, ip=ip, session_id=session_id)
        assert sorted(raw_conn.scan_iter(count=1000)) == before


def test_hll_mode_names_its_estimates_and_corrects_the_exact_rest(raw_conn, monkeypatch):
    use_settings(monkeypatch, COUNTERS_UV_MODE="hll")
    now = time.time()
    batch = [{"ip": ip, "path": "/a", "ts": now} for ip in [*OTHERS[:6], TARGET_IP]]
    visits.apply_visits(raw_conn, batch, message_id="hll")
    answer = forget.forget_visitor(ip=TARGET_IP)
    named = " ".join(figure for figure, _error in answer["estimates"])
    assert "site_day" in named and "site_all" in named and "page_all" in named
    assert all(error == pytest.approx(0.0081, abs=1e-4) for _figure, error in answer["estimates"])
    assert sitestats.site_visit_info(raw_conn, days.local_day(now), "/a").uv == 6  # a path's day: its pairs, exact
