"""Goals (issue 43, ``events.goal_day``; docs/events.md "Goals"): page goals through real visit
writes (``visits.apply_visits``, the eager tasks), event goals through the feeder on a write plan
(``store.scripts.write_through``), their conversions, converters and revenue read by
``events.goal_report``."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from counters_tasks import events, sitestats, visits
from counters_tasks.core import days
from counters_tasks.core.events import Event
from counters_tasks.core.table import by_name
from counters_tasks.core.visitors import visitor_id
from counters_tasks.errors import InvalidInput
from counters_tasks.events import definitions, goal_day
from counters_tasks.store import hll, keys, scripts
from counters_tasks.store.scripts import write_through
from tests.support.servers import is_cluster_run

pytestmark = pytest.mark.cluster

HOUR = 3600


@pytest.fixture(autouse=True)
def no_goals_left(request):
    """The goals a test defined are gone after it (and this process's cache of them with them:
    ``definitions.current``), on the test's own client."""
    client = request.getfixturevalue("conn" if "conn" in request.fixturenames else "raw_conn")
    yield
    for goal in events.goals(client):
        events.remove_goal(client, goal.name, site=goal.site or None)


def since_before(now: float) -> float:
    """A ``now`` for ``define_goal`` whose goal counts from about an hour before ``now``."""
    return now - HOUR - 120


def row(report, name):
    return next(r for r in report.goals if r.name == name)


def event(name, props=(), *, ts, ip="192.0.2.1", site=""):
    """A prepared event (``core.events.Event``), as the event kind's ``prepare`` makes it."""
    return Event(name, tuple(props), 0, ts, days.local_day(ts), site, None if ip is None else visitor_id(ip))


def feed(conn, items, call_id="m1#0"):
    """Events fed to the goals table on a write plan of their own, as the event kind's write feeds it."""
    write_through(conn, lambda plan: (goal_day.feed_events(plan, [(items, call_id)]), lambda: None)[1])


def test_page_goals_exact_prefix_and_pattern_through_visits(conn):
    now = time.time()
    at = since_before(now)
    events.define_goal(conn, "pricing", page="/pricing", now=at)
    events.define_goal(conn, "blog", page="/blog/", match="prefix", now=at)
    events.define_goal(conn, "install", page="/docs/*/install", match="pattern", now=at)
    views = [
        ("192.0.2.1", "/pricing"),
        ("192.0.2.1", "/pricing?plan=pro"),  # the same page (its canonical name)
        ("192.0.2.2", "/pricing/old"),  # not exact
        ("192.0.2.2", "/blog/"),
        ("192.0.2.3", "/blog/a/b"),
        ("192.0.2.4", "/blogs"),  # not under the prefix
        ("192.0.2.5", "/docs/linux/install"),
        ("192.0.2.6", "/docs/linux/arm/install"),  # * is no run of /
        ("192.0.2.7", "/docs//install"),
    ]
    assert visits.apply_visits(conn, [{"ip": ip, "path": path, "ts": now} for ip, path in views], message_id="b1") == 9
    report = events.goal_report(conn)
    assert (report.site, report.start, report.end) == ("", days.local_day(now), days.local_day(now))
    assert (report.visitors, report.visitors_error) == (7, 0.0)
    figures = {r.name: (r.conversions, r.converters, r.converters_error, r.revenue) for r in report.goals}
    assert figures == {"blog": (2, 2, 0.0, None), "install": (2, 2, 0.0, None), "pricing": (2, 1, 0.0, None)}
    assert row(report, "pricing").rate == pytest.approx(1 / 7)
    assert [r.label for r in report.goals] == [
        "page /blog/ (prefix)",
        "page /docs/*/install (pattern)",
        "page /pricing",
    ]


def test_page_goals_through_the_eager_tasks_and_a_redelivery_counted_once(conn, eager_app):
    from counters_tasks import tasks

    now = time.time()
    events.define_goal(conn, "signup", page="/signup", now=since_before(now))
    items = [{"ip": f"192.0.2.{n}", "path": "/signup", "ts": now} for n in range(1, 5)]
    tasks.record_visits.apply_async(args=[items], task_id="batch-1")
    tasks.record_visits.apply_async(args=[items], task_id="batch-1")  # redelivered: counted once
    tasks.record_visit.apply_async(args=["192.0.2.1", "/signup", None, now], task_id="one-1")
    tasks.record_visit.apply_async(args=["192.0.2.1", "/signup", None, now], task_id="one-1")
    visits.apply_visits(conn, items, message_id="batch-2")  # another message: counted
    signup = row(events.goal_report(conn), "signup")
    assert (signup.conversions, signup.converters) == (9, 4)
    assert sitestats.site_visit_info(conn, days.local_day(now)).pv == 9  # the views counted as often


def test_a_part_of_many_conversions_goes_in_several_calls_each_goal_once(conn, monkeypatch):
    """250 views of a day, each converting 12 goals: three parts of at most ITEMS_PER_PART views,
    each part's 1,200 conversions in calls of at most CONVERSIONS_PER_CALL; delivered again, none
    counted twice."""
    now = time.time()
    for n in range(12):
        events.define_goal(conn, f"g{n:02}", page="/", match="prefix", now=since_before(now))
    items = [{"ip": f"10.0.{n // 256}.{n % 256}", "path": f"/p/{n % 7}", "ts": now} for n in range(250)]
    calls = []
    original = goal_day._call

    def counted(*args):
        made = original(*args)
        calls.append(made)
        return made

    monkeypatch.setattr(goal_day, "_call", counted)
    for _ in range(2):
        assert visits.apply_visits(conn, items, message_id="many") == 250
    sent = calls[: len(calls) // 2]
    goals_of = [args[5] for _keys, args in sent]
    assert sum(goals_of) == 3 * 12  # each part's goals, each in one call
    assert all(sum(args[8 + 6 * g] for g in range(args[5])) <= goal_day.CONVERSIONS_PER_CALL for _k, args in sent)
    assert len({keys[2] for keys, _args in sent}) == 3  # a marker a part
    report = events.goal_report(conn)
    assert {(r.conversions, r.converters) for r in report.goals} == {(250, 250)}


def test_a_visitor_converting_twice_a_day_and_on_two_days_is_one_converter_over_the_range(conn):
    now = time.time()
    today = days.local_day(now)
    yesterday = today - timedelta(days=1)
    events.define_goal(conn, "pricing", page="/pricing", now=now - 3 * 86400)
    views = [
        {"ip": "192.0.2.1", "path": "/pricing", "ts": now},
        {"ip": "192.0.2.1", "path": "/pricing", "ts": now},
        {"ip": "192.0.2.1", "path": "/pricing", "ts": now - 86400},
        {"ip": "192.0.2.2", "path": "/pricing", "ts": now - 86400},
        {"ip": "192.0.2.3", "path": "/", "ts": now},
    ]
    visits.apply_visits(conn, views, message_id="days")
    both = events.goal_report(conn, start=yesterday, end=today)
    pricing = row(both, "pricing")
    assert (pricing.conversions, pricing.converters, pricing.converters_error) == (4, 2, 0.0)
    assert both.visitors == 3 and both.visitors_error == hll.STANDARD_ERROR  # a range's UV: an estimate
    assert pricing.rate == pytest.approx(2 / 3)
    for day, figures in ((today, (2, 1)), (yesterday, (2, 2))):
        one = row(events.goal_report(conn, start=day, end=day), "pricing")
        assert (one.conversions, one.converters) == figures


def test_a_goal_defined_after_the_events_counts_from_its_since(conn):
    now = time.time()
    goal = events.define_goal(conn, "late", page="/a", now=now - 2 * HOUR)
    assert goal.since == definitions.since_now(now - 2 * HOUR)
    visits.apply_visits(
        conn,
        [
            {"ip": "192.0.2.1", "path": "/a", "ts": goal.since - 1},  # before it counts
            {"ip": "192.0.2.2", "path": "/a", "ts": goal.since},
            {"ip": "192.0.2.3", "path": "/a", "ts": goal.since + 60},
        ],
        message_id="since",
    )
    late = row(events.goal_report(conn, start=days.local_day(goal.since - 1), end=days.local_day(now)), "late")
    assert (late.conversions, late.converters, late.since) == (2, 2, goal.since)


def test_event_goals_with_a_property_and_revenue(conn):
    now = time.time()
    at = since_before(now)
    events.define_goal(conn, "signup", event="signup", now=at)
    events.define_goal(conn, "pro", event="signup", prop="plan", value="pro", now=at)
    events.define_goal(conn, "sales", event="purchase", revenue="amount", now=at)
    feed(
        conn,
        [
            event("signup", [("plan", "pro")], ts=now, ip="192.0.2.1"),
            event("signup", [("plan", "free")], ts=now, ip="192.0.2.2"),
            event("signup", ts=now, ip=None),  # no visitor: a conversion, no converter
            event("purchase", [("amount", "12.5")], ts=now, ip="192.0.2.1"),
            event("purchase", [("amount", "7")], ts=now, ip="192.0.2.1"),
            event("purchase", [("amount", "abc")], ts=now, ip="192.0.2.3"),  # not a number: counted, no revenue
            event("purchase", [("amount", "true")], ts=now, ip="192.0.2.3"),
            event("purchase", ts=now, ip="192.0.2.4"),  # no amount
            event("pageview-ish", ts=now),
        ],
    )
    report = events.goal_report(conn)
    figures = {r.name: (r.conversions, r.converters, r.revenue, r.no_revenue) for r in report.goals}
    assert figures == {"pro": (1, 1, None, 0), "sales": (5, 3, 19.5, 3), "signup": (3, 2, None, 0)}
    assert row(report, "pro").label == "event signup[plan=pro]"
    assert report.visitors == 0 and row(report, "sales").rate == 0.0  # no page view: no visitor of the site


def test_event_goals_fed_again_under_the_same_call_id_are_counted_once(conn):
    now = time.time()
    events.define_goal(conn, "sales", event="purchase", revenue="amount", now=since_before(now))
    sold = [event("purchase", [("amount", "10")], ts=now, ip=f"192.0.2.{n}") for n in range(1, 4)]
    feed(conn, sold, "call-1#0")
    feed(conn, sold, "call-1#0")
    feed(conn, sold[:1], "call-2#0")
    sales = row(events.goal_report(conn), "sales")
    assert (sales.conversions, sales.converters, sales.revenue) == (4, 3, 40.0)


def test_event_goals_through_the_event_kind_each_route_and_a_redelivery_counted_once(conn, eager_app):
    """Through the event kind (``events.kind.EVENT``): ``track_event`` and a ``track_events``
    batch, each delivered twice under one id, and ``VisitRecorder.track_event``; revenue from an
    int, a float and a number in text, not from a bool or a missing property."""
    from counters_tasks import tasks
    from counters_tasks.recorder import VisitRecorder

    now = time.time() - 5
    events.define_goal(conn, "sales", event="purchase", revenue="amount", now=since_before(now))
    events.define_goal(conn, "pro", event="signup", prop="plan", value="pro", now=since_before(now))
    batch = [
        {"name": "purchase", "props": {"amount": 10}, "ts": now, "ip": "192.0.2.1"},
        {"name": "purchase", "props": {"amount": 2.5}, "ts": now, "ip": "192.0.2.1"},
        {"name": "purchase", "props": {"amount": "3"}, "ts": now, "ip": "192.0.2.2"},
        {"name": "purchase", "props": {"amount": True}, "ts": now, "ip": "192.0.2.3"},
        {"name": "signup", "props": {"plan": "pro"}, "ts": now, "ip": "192.0.2.3"},
        {"name": "signup", "props": {"plan": "free"}, "ts": now, "ip": "192.0.2.4"},
    ]
    for _ in range(2):  # a redelivered message: counted once
        tasks.track_events.apply_async(args=[batch], task_id="events-1")
        tasks.track_event.apply_async(args=["purchase", {"amount": 100}, now, "192.0.2.5"], task_id="event-1")
    tasks.track_event.delay("purchase", None, now)  # no amount and no visitor: a conversion only
    VisitRecorder(flush_on_sigterm=False).track_event("signup", {"plan": "pro"}, now, ip="192.0.2.6")
    report = events.goal_report(conn)
    figures = {r.name: (r.conversions, r.converters, r.revenue, r.no_revenue) for r in report.goals}
    assert figures == {"pro": (2, 2, None, 0), "sales": (6, 4, 115.5, 2)}


def test_page_and_event_goals_share_the_range_visitors(conn, eager_app):
    from counters_tasks import tasks

    now = time.time() - 5
    events.define_goal(conn, "pricing", page="/pricing", now=since_before(now))
    events.define_goal(conn, "signup", event="signup", now=since_before(now))
    visits.apply_visits(
        conn, [{"ip": f"192.0.2.{n}", "path": "/pricing" if n < 3 else "/", "ts": now} for n in range(1, 5)]
    )
    tasks.track_event.delay("signup", None, now, "192.0.2.1")
    report = events.goal_report(conn)
    assert report.visitors == 4
    assert {r.name: r.rate for r in report.goals} == {"pricing": 0.5, "signup": 0.25}


def test_a_site_counts_its_own_goals(conn, monkeypatch):
    from tests.support.servers import use_settings

    use_settings(monkeypatch, COUNTERS_SITES='{"shop": {"hosts": ["shop.example"], "timezone": "Pacific/Kiritimati"}}')
    now = time.time()
    events.define_goal(conn, "cart", page="/cart", site="shop", now=since_before(now))
    visits.apply_visits(
        conn,
        [
            {"ip": "192.0.2.1", "path": "/cart", "ts": now, "site": "shop"},
            {"ip": "192.0.2.2", "path": "/cart", "ts": now},  # the default site has no such goal
        ],
        message_id="sites",
    )
    shop = events.goal_report(conn, site="shop")
    assert [(r.name, r.conversions, r.converters) for r in shop.goals] == [("cart", 1, 1)]
    assert (shop.site, shop.visitors) == ("shop", 1)
    assert shop.end == days.local_day(now, "Pacific/Kiritimati")  # today in the site's zone (UTC+14)
    assert events.goal_report(conn).goals == []


def test_no_goal_costs_a_visit_nothing(conn):
    now = time.time()
    visits.apply_visits(conn, [{"ip": "192.0.2.1", "path": "/a", "ts": now}], message_id="none")
    with keys.bound(conn):
        day_key = goal_day.goal_day_key(days.local_day(now))
    assert conn.exists(day_key) == 0
    assert by_name("goal_day").feeds.keys() == {"visit", "event"}


def test_a_bad_range_or_site_is_refused(conn):
    today = days.local_day(time.time())
    with pytest.raises(InvalidInput):
        events.goal_report(conn, start=today, end=today - timedelta(days=1))
    with pytest.raises(InvalidInput):
        events.goal_report(conn, site="nowhere.example")


@pytest.mark.skipif(is_cluster_run(), reason="reads one server's key")
def test_the_goal_day_key_is_the_one_written(conn):
    now = time.time()
    goal = events.define_goal(conn, "a", page="/a", now=since_before(now))
    visits.apply_visits(conn, [{"ip": "192.0.2.1", "path": "/a", "ts": now}], message_id="k")
    with keys.bound(conn):
        day_key = goal_day.goal_day_key(days.local_day(now))
        pairs = goal_day.goal_day_pairs(days.local_day(now))
    stored = {k.decode() if isinstance(k, bytes) else k for k in conn.hkeys(day_key)}
    assert goal_day.goal_id(goal) == f"a@{int(goal.since)}"
    assert stored == {"open_until", *(f"{letter}:a@{int(goal.since)}" for letter in "cus")}
    assert conn.scard(pairs) == 1 and conn.ttl(pairs) > 0 and conn.ttl(day_key) > 0


def test_a_conversion_of_a_closed_day_counts_without_its_converter_and_is_reported(conn):
    """A day whose pairs are gone (its open_until passed) can no longer tell a converter new: its
    conversions count, its converters do not, and they are counted as closed_day (refusals)."""
    from counters_tasks import refusals

    now = time.time()
    events.define_goal(conn, "a", page="/a", now=since_before(now))
    visits.apply_visits(conn, [{"ip": "192.0.2.1", "path": "/a", "ts": now}], message_id="open")
    with keys.bound(conn):
        day_key = goal_day.goal_day_key(days.local_day(now))
    conn.hset(day_key, "open_until", 1)  # (closed, as its grace had passed)
    before = refusals.counts(conn).get("closed_day", 0)
    visits.apply_visits(conn, [{"ip": "192.0.2.2", "path": "/a", "ts": now}], message_id="closed")
    a = row(events.goal_report(conn), "a")
    assert (a.conversions, a.converters) == (2, 1)
    assert refusals.counts(conn).get("closed_day", 0) - before == 1  # its conversion (the site's day is open)


LIMIT_GOALS = 2.8
"""The budget test's limit, in reference calls (``tests/support/server_cpu.py``): about 1.6 times
the most it measured on the machine of record (its docstring)."""


@pytest.mark.budget
@pytest.mark.long  # alone on the machine (budget) for 5-20 s: make test-long, keeping make test under 8 min
@pytest.mark.usefixtures("bound_deployment")
def test_a_hundred_goals_on_every_view_stay_under_the_budget(raw_conn, call_budget):
    """The worst a site may define: MAX_DEFINITIONS (100) goals, each converting on every view,
    over 5,000 visitors of a day in batches of 500: every view is 100 conversions, each goal's
    converters pass 256 (its sketch becomes a HyperLogLog). A ``goal_day`` call takes at most
    CONVERSIONS_PER_CALL conversions (and GOAL_COST a goal): 1,700 calls of about three goals'
    100 conversions each. One run decides: the ``goal_day`` calls' median, in reference calls of
    about 0.6 ms (``tests/support/server_cpu.py``).

    Measured on the machine of record (shared with four other test runs): 1.58 and 1.72 reference
    calls at the median (~0.7 ms), the costliest calls 2.9 ms in one run and 8.7 ms in the other
    (a reference call of that run took up to 1.9 ms: moments of a shared machine, which the median
    leaves out). The limit, 2.8, is 1.6 times the most: a call of twice the work fails."""
    from counters_tasks.core.conversions import MAX_DEFINITIONS

    now = time.time()
    for n in range(MAX_DEFINITIONS):
        events.define_goal(raw_conn, f"goal {n:03}", page="/", match="prefix", now=since_before(now))
    call_budget.reset()
    for first in range(0, 5000, 500):
        batch = [
            {"ip": f"10.1.{n // 256}.{n % 256}", "path": f"/p/{n % 50}", "ts": now} for n in range(first, first + 500)
        ]
        assert visits.apply_visits(raw_conn, batch, message_id=f"flood-{first}") == 500
    print(call_budget.report())
    sha = scripts.script(raw_conn, "goal_day").sha.upper().encode()
    [(cost, calls, _kind)] = [kind for kind in call_budget.kinds() if kind[2] == b"EVALSHA " + sha]
    goal_calls = [us for us, head in call_budget.calls() if head.upper().startswith(b"EVALSHA " + sha)]
    print(f"[goals] {calls} goal_day calls, median {cost} reference calls; costliest (us) {goal_calls[:10]}")
    assert calls >= 1000 and cost <= LIMIT_GOALS
    report = events.goal_report(raw_conn)
    assert {(r.conversions, r.converters) for r in report.goals} == {(5000, 5000)}


@pytest.mark.skipif(is_cluster_run(), reason="a pipeline of one server cut by hand")
@pytest.mark.parametrize("calls", [0, 3, 9])
def test_a_worker_batch_killed_half_way_counts_each_goal_once_when_its_messages_come_back(raw_conn, monkeypatch, calls):
    """A worker's claimed batch of per-visit messages (``worker.batch_apply.write_claimed``) dies
    after its first ``calls`` commands; its messages come back in other batches, some twice: each
    goal's figures equal a count made in plain Python from the visits."""
    from counters_tasks import throughput
    from counters_tasks.kinds import VISIT
    from counters_tasks.worker import batch_apply
    from tests.faults.test_batch_claims import killed_after, visit_items
    from tests.support.visit_model import random_visits

    now = time.time()
    batch = random_visits(60, seed=43, paths=25, ts=now)
    visits.apply_visits(raw_conn, random_visits(5, seed=1), message_id="warm")  # the scripts loaded
    raw_conn.flushdb()
    events.define_goal(raw_conn, "home", page="/", now=since_before(now))
    events.define_goal(raw_conn, "pages", page="/page/", match="prefix", now=since_before(now))
    events.define_goal(raw_conn, "teens", page="/page/1*", match="pattern", now=since_before(now))
    tally = throughput.Tally()
    killed_after(monkeypatch, calls)
    with pytest.raises(SystemExit):
        batch_apply.write_claimed(raw_conn, VISIT, visit_items(batch[:40]), tally)
    batch_apply.write_claimed(raw_conn, VISIT, visit_items(batch[10:12], 10) + visit_items(batch[40:], 40), tally)
    for first in range(0, 60, 7):
        batch_apply.write_claimed(raw_conn, VISIT, visit_items(batch[first : first + 7], first), tally)
    rules = {
        "home": lambda path: path == "/",
        "pages": lambda path: path.startswith("/page/"),
        "teens": lambda path: path.startswith("/page/1") and "/" not in path[len("/page/1") :],
    }
    expected = {
        name: (sum(rule(v["path"]) for v in batch), len({v["ip"] for v in batch if rule(v["path"])}))
        for name, rule in rules.items()
    }
    report = events.goal_report(raw_conn)
    assert {r.name: (r.conversions, r.converters) for r in report.goals} == expected
    assert all(conversions > 0 for conversions, _converters in expected.values())


def test_a_goal_defined_again_starts_again_from_its_new_since(conn):
    """Defined again under its name (another page, a later ``since``), a goal counts apart: not
    on top of what the goal it replaced counted that day."""
    now = time.time()
    first = events.define_goal(conn, "main", page="/a", now=now - 3 * HOUR)
    visits.apply_visits(conn, [{"ip": "192.0.2.1", "path": "/a", "ts": first.since + 60}], message_id="one")
    again = events.define_goal(conn, "main", page="/b", now=now - HOUR)
    visits.apply_visits(
        conn,
        [
            {"ip": "192.0.2.1", "path": "/a", "ts": again.since + 60},  # the old page: no longer the goal
            {"ip": "192.0.2.2", "path": "/b", "ts": again.since - 60},  # before the new since
            {"ip": "192.0.2.3", "path": "/b", "ts": again.since + 60},
        ],
        message_id="two",
    )
    start = days.local_day(first.since)
    main = row(events.goal_report(conn, start=start, end=days.local_day(now)), "main")
    assert (main.label, main.conversions, main.converters, main.since) == ("page /b", 1, 1, again.since)


def test_goals_over_days_and_ranges_equal_a_plain_python_count(conn):
    """1,500 visits of 250 visitors spread over three days (in batches, one delivered twice):
    each goal's conversions and converters of each day and of every range equal a count made in
    plain Python from the same visits, exact (at most 256 converters a day: each day's sketch a
    list of ids, ``store.page_sketch``)."""
    from tests.support.visit_model import random_visits

    now = time.time()
    batch = random_visits(1500, seed=431, visitors=200, paths=30, ts=now, spread=2.5 * 86400)  # 200 + 50 IPv6
    for goal, (page, match) in {
        "home": ("/", "exact"),
        "pages": ("/page/", "prefix"),
        "ones": ("/page/1*", "pattern"),
    }.items():
        events.define_goal(conn, goal, page=page, match=match, now=now - 4 * 86400)
    for first in range(0, 1500, 500):
        visits.apply_visits(conn, batch[first : first + 500], message_id=f"days-{first}")
    visits.apply_visits(conn, batch[500:1000], message_id="days-500")  # redelivered
    rules = {
        "home": lambda path: path == "/",
        "pages": lambda path: path.startswith("/page/"),
        "ones": lambda path: path.startswith("/page/1") and "/" not in path[len("/page/1") :],
    }
    today = days.local_day(now)
    span = [today - timedelta(days=n) for n in range(3, -1, -1)]
    for start in span:
        for end in [day for day in span if day >= start]:
            within = [v for v in batch if start <= days.local_day(v["ts"]) <= end]
            expected = {
                name: (sum(rule(v["path"]) for v in within), len({v["ip"] for v in within if rule(v["path"])}))
                for name, rule in rules.items()
            }
            report = events.goal_report(conn, start=start, end=end)
            assert {r.name: (r.conversions, r.converters) for r in report.goals} == expected, (start, end)
            assert all(r.converters_error == 0.0 for r in report.goals)


def test_past_256_converters_a_day_a_range_is_an_estimate_with_its_error(conn):
    """A day's sketch of more than 256 converters is a HyperLogLog: one day stays exact (its
    pairs SET), a range is Redis's estimate of the union, with its standard error shown."""
    now = time.time()
    events.define_goal(conn, "all", page="/", match="prefix", now=now - 3 * 86400)
    for back in (0, 1):
        ts = now - back * 86400
        visits.apply_visits(conn, [{"ip": f"10.2.{n // 256}.{n % 256}", "path": "/x", "ts": ts} for n in range(600)])
    today = days.local_day(now)
    one = row(events.goal_report(conn, start=today, end=today), "all")
    assert (one.converters, one.converters_error) == (600, 0.0)
    both = row(events.goal_report(conn, start=today - timedelta(days=1), end=today), "all")
    assert both.conversions == 1200 and both.converters_error == hll.STANDARD_ERROR
    assert abs(both.converters - 600) <= 0.03 * 600
