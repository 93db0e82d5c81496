"""Funnels (``events.funnels``, docs/events.md "Funnels"): what the Lua judge counts equals a plain
Python count of the same step events made from the semantics (``reference`` below, written from
docs/events.md, not from the script), whatever order and however often the events arrive."""

from __future__ import annotations

import math
import random
import time
from collections import Counter, defaultdict
from datetime import date

import pytest

from counters_tasks import payloads
from counters_tasks.core.conversions import Funnel
from counters_tasks.core.days import day_end, local_day
from counters_tasks.core.events import Event
from counters_tasks.core.settings import get_settings
from counters_tasks.core.visitors import visitor_id
from counters_tasks.errors import InvalidInput
from counters_tasks.events import definitions
from counters_tasks.events.funnels import (  # (``events.funnels`` is the function that lists them)
    STATE_CAP,
    TIME_BUCKETS,
    feed_events,
    funnel_base,
    funnel_report,
    judge,
    step_mask,
)
from counters_tasks.store import keys
from counters_tasks.store.scripts import write_through
from counters_tasks.visits import VISIT
from tests.support.servers import empty

HOUR = 3600

# --- the reference: docs/events.md "Funnels", in plain Python -----------------------------------


def bucket_of(seconds: float) -> int:
    """1-based index of the histogram bucket of a time between steps."""
    for i, (_label, bound) in enumerate(TIME_BUCKETS):
        if seconds <= bound:
            return i + 1
    raise AssertionError("the last bucket takes every time")


def reference(funnel: Funnel, step_events: list[tuple[str, float, int, date]]):
    """Per (day, step): the set of visitors; per (day, step, bucket): visitors (histogram). Every
    attempt of every visitor tried from scratch, nothing pruned, nothing cached."""
    window = funnel.window
    by_visitor: dict[str, list[tuple[float, int, date]]] = defaultdict(list)
    for visitor, ts, mask, day in step_events:
        by_visitor[visitor].append((ts, mask, day))
    reached: dict[tuple[date, int], set[str]] = defaultdict(set)
    histogram: Counter[tuple[date, int, int]] = Counter()
    for visitor, events in by_visitor.items():
        events.sort(key=lambda e: e[0])
        starts, open_until = [], -math.inf
        for i, (ts, mask, _day) in enumerate(events):
            if mask & 1 and ts > open_until:
                starts.append(i)
                open_until = ts + window
        best: dict[date, list[float]] = {}
        for i0 in starts:
            t0 = events[i0][0]
            used, times = {i0}, [t0]
            for k in range(1, len(funnel.steps)):
                own = funnel.steps[k].window
                found = [
                    j
                    for j, (ts, mask, _day) in enumerate(events)
                    if j not in used
                    and mask >> k & 1
                    and ts >= times[-1]
                    and ts - t0 <= window
                    and (own is None or ts - times[-1] <= own)
                ]
                if not found:
                    break
                j = min(found, key=lambda j: events[j][0])
                used.add(j)
                times.append(events[j][0])
            day = events[i0][2]
            if day not in best or len(times) > len(best[day]):
                best[day] = times
        for day, times in best.items():
            for k in range(len(times)):
                reached[(day, k + 1)].add(visitor)
            for k in range(1, len(times)):
                histogram[(day, k + 1, bucket_of(times[k] - times[k - 1]))] += 1
    return reached, histogram


def assert_matches(conn, funnel: Funnel, step_events, days: list[date], late: int = 0, capped: int = 0):
    """The report of each day, and of the whole range, equals the reference."""
    reached, histogram = reference(funnel, step_events)
    n = len(funnel.steps)
    for day in days:
        report = funnel_report(conn, funnel.name, funnel.site or None, day, day)
        assert [s.visitors for s in report.steps] == [len(reached[(day, k)]) for k in range(1, n + 1)], day
        for s in report.steps[1:]:
            assert [count for _label, count in s.time_to_convert] == [
                histogram[(day, s.step, b)] for b in range(1, len(TIME_BUCKETS) + 1)
            ], (day, s.step)
    report = funnel_report(conn, funnel.name, funnel.site or None, days[0], days[-1])
    assert [s.visitors for s in report.steps] == [
        len(set().union(*(reached[(d, k)] for d in days))) for k in range(1, n + 1)
    ]
    assert (report.late, report.capped) == (late, capped)
    return report


# --- helpers ---------------------------------------------------------------------------------


def define(conn, steps, window, *, since: float, name: str = "f") -> Funnel:
    """A funnel counting from ``since`` (defined as if made just before it)."""
    made = definitions.define_funnel(conn, name, steps, window, now=since - 600)
    assert made.since <= since
    return made


def event_of(name: str, ip: str, ts: float, **props: str) -> Event:
    return Event(name, tuple(props.items()), 0, ts, local_day(ts), "", visitor_id(ip))


def write_events(conn, events: list[Event], call_id: str | None) -> None:
    """Events through the funnel table's feeder of the ``event`` kind, in one write."""

    def queue(plan):
        feed_events(plan, [(events, call_id)])
        return lambda: None

    write_through(conn, queue)


def write_views(conn, views: list[tuple[str, str, float]], message_id: str | None) -> None:
    """Page views (ip, path, ts) through the visit kind's real payload path."""
    items = [{"ip": ip, "path": path, "ts": ts} for ip, path, ts in views]
    assert payloads.apply_payload(conn, VISIT, items, message_id=message_id) == len(items)


def step_events_of(funnel: Funnel, views, events, now: float):
    """What the reference judges: the step events (visitor, ts, mask, day) at or after since and
    not late, and the number of late ones."""
    cutoff = now - funnel.window - get_settings().funnel_lateness
    judged, late = [], 0
    for ip, path, ts in views:
        mask = step_mask(funnel, path=path)
        if mask and ts >= funnel.since:
            if ts < cutoff:
                late += 1
            else:
                judged.append((visitor_id(ip), ts, mask, local_day(ts)))
    for event in events:
        mask = step_mask(funnel, name=event.name, props=event.props)
        if mask and event.ts >= funnel.since:
            if event.ts < cutoff:
                late += 1
            else:
                judged.append((event.visitor, event.ts, mask, event.day))
    return judged, late


# --- (a) the done-when test -------------------------------------------------------------------

STEPS = [
    {"page": "/pricing"},
    {"event": "signup", "prop": "plan", "value": "pro"},
    {"page": "/welcome", "match": "prefix", "window": 600},
]


def test_ten_thousand_visitors_in_any_order_equal_the_plain_count(raw_conn):
    """A 3-step funnel (a page, an event with a property, a page prefix with its own 10-minute
    window) with a 30-minute window over 10,000 visitors of mixed paths: shuffled batches, a
    tenth of them delivered twice, late events (older than the window plus the lateness) and
    events before ``since``; page views through the visit kind's payload path, events through
    the event feeder. Every day's steps and histograms equal the plain count."""
    conn, rng, now = raw_conn, random.Random(43), time.time()
    funnel = define(conn, STEPS, 1800, since=now - 29 * HOUR)
    pages = ["/pricing", "/pricing", "/", "/blog/a", "/welcome", "/welcome/tour", "/pricingx", "/welcomeback"]
    views: list[tuple[str, str, float]] = []
    events: list[Event] = []
    for v in range(10_000):
        ip = f"10.{v // 65536}.{v // 256 % 256}.{v % 256}"
        kind = rng.random()
        start = now - (rng.uniform(26, 30) if kind < 0.05 else rng.uniform(1, 20)) * HOUR
        for _ in range(rng.randint(1, 6)):
            ts = round(start + rng.uniform(0, 50 * 60), 3)
            if rng.random() < 0.6:
                views.append((ip, rng.choice(pages), ts))
            else:
                name = rng.choice(["signup", "signup", "click"])
                events.append(event_of(name, ip, ts, plan=rng.choice(["pro", "pro", "free"])))
    rng.shuffle(views)
    rng.shuffle(events)
    batches: list[tuple[str, list]] = [("v", views[i : i + 400]) for i in range(0, len(views), 400)]
    batches += [("e", events[i : i + 300]) for i in range(0, len(events), 300)]
    deliveries = [(kind, n, batch) for n, (kind, batch) in enumerate(batches)]
    deliveries += rng.sample(deliveries, len(deliveries) // 10)  # redelivered: the same message id
    rng.shuffle(deliveries)
    for kind, n, batch in deliveries:
        if kind == "v":
            write_views(conn, batch, f"views-{n}")
        else:
            write_events(conn, batch, f"events-{n}")
    judged, late = step_events_of(funnel, views, events, now)
    assert late > 100 and len(judged) > 10_000
    days = sorted({local_day(now - h * HOUR) for h in range(0, 31)})
    report = assert_matches(conn, funnel, judged, days, late=late)
    assert report.steps[2].visitors > 100  # the funnel is reached to its end, not trivially empty
    assert sum(count for _label, count in report.steps[2].time_to_convert) > 100


# --- (b) a funnel defined after the events ----------------------------------------------------


def test_a_funnel_defined_after_events_counts_from_its_since(conn):
    now = time.time()
    early = [("1.1.1.1", "/a", now - 2 * HOUR), ("1.1.1.1", "/b", now - 2 * HOUR + 60)]
    write_views(conn, early, "early")  # no funnel yet: nothing judged
    funnel = define(conn, [{"page": "/a"}, {"page": "/b"}], 3600, since=now - HOUR)
    write_views(conn, early, "early-again")  # before since: not judged, not late
    later = [("1.1.1.1", "/a", now - 30 * 60), ("1.1.1.1", "/b", now - 29 * 60), ("2.2.2.2", "/a", now - 20 * 60)]
    write_views(conn, later, "later")
    report = funnel_report(conn, "f", None, local_day(now - 2 * HOUR), local_day(now))
    assert [s.visitors for s in report.steps] == [2, 1]
    assert (report.since, report.late) == (funnel.since, 0)
    assert report.open_days[-1] == local_day(now)  # today's window is open
    with pytest.raises(InvalidInput):
        funnel_report(conn, "nope")


# --- (c) windows, step windows, attempts --------------------------------------------------------


@pytest.mark.parametrize(
    "steps, window, stream",
    [
        # the funnel's window: exactly W is in, W + 1 s out
        ([{"page": "/a"}, {"page": "/b"}], 600, [("/a", 0), ("/b", 600)]),
        ([{"page": "/a"}, {"page": "/b"}], 600, [("/a", 0), ("/b", 601)]),
        # a step's own window, from the step before
        ([{"page": "/a"}, {"page": "/b", "window": 60}, {"page": "/c"}], 600, [("/a", 0), ("/b", 100), ("/c", 110)]),
        ([{"page": "/a"}, {"page": "/b"}, {"page": "/c", "window": 60}], 600, [("/a", 0), ("/b", 100), ("/c", 160)]),
        ([{"page": "/a"}, {"page": "/b"}, {"page": "/c", "window": 60}], 600, [("/a", 0), ("/b", 100), ("/c", 161)]),
        # out of order steps do not count; equal times do
        ([{"page": "/a"}, {"page": "/b"}], 600, [("/b", 0), ("/a", 10)]),
        ([{"page": "/a"}, {"page": "/b"}], 600, [("/a", 5), ("/b", 5)]),
        # one view is one step of an attempt, even when it matches two
        ([{"page": "/a"}, {"page": "/a"}], 600, [("/a", 0)]),
        ([{"page": "/a"}, {"page": "/a"}], 600, [("/a", 0), ("/a", 30)]),
        # a step-1 view inside an attempt's window opens none; after it, the next attempt
        ([{"page": "/a"}, {"page": "/b"}], 600, [("/a", 0), ("/a", 500), ("/b", 1050)]),
        ([{"page": "/a"}, {"page": "/b"}], 600, [("/a", 0), ("/a", 700), ("/b", 1250)]),
        # a late step-1 view that opens an earlier attempt takes the later one's progress away
        ([{"page": "/a"}, {"page": "/b"}], 1800, [("/a", 1200), ("/b", 2700), ("/a", 0)]),
        # the first attempt of the day that reached furthest gives the histogram
        ([{"page": "/a"}, {"page": "/b"}], 60, [("/a", 0), ("/b", 50), ("/a", 100), ("/b", 105)]),
    ],
)
def test_windows_and_attempts_as_the_semantics_say(conn, steps, window, stream):
    """Each stream fed one view at a time, in its order (a later element may be earlier in time),
    equals the reference, and so does the same stream fed in reverse."""
    now = time.time()
    base = now - 2 * HOUR
    for order in ("given", "reversed"):
        empty(conn)
        funnel = define(conn, steps, window, since=base - 60)
        views = [("9.9.9.9", path, base + offset) for path, offset in stream]
        for n, view in enumerate(views if order == "given" else views[::-1]):
            write_views(conn, [view], f"{order}-{n}")
        judged, late = step_events_of(funnel, views, [], now)
        assert late == 0
        assert_matches(conn, funnel, judged, sorted({local_day(base), local_day(now)}))


def test_a_late_step_event_is_counted_as_late_and_not_judged(conn):
    now = time.time()
    lateness = get_settings().funnel_lateness
    define(conn, [{"event": "go"}, {"event": "done"}], 600, since=now - lateness - 2 * HOUR)
    old = now - lateness - HOUR
    write_events(conn, [event_of("go", "3.3.3.3", old), event_of("done", "3.3.3.3", old + 10)], "old")
    write_events(conn, [event_of("go", "3.3.3.3", now - 60), event_of("done", "3.3.3.3", now - 50)], "new")
    report = funnel_report(conn, "f", None, local_day(old), local_day(now))
    assert ([s.visitors for s in report.steps], report.late) == ([1, 1], 2)


# --- (d) a visitor's state: its cap, its expiry, pruned attempts ------------------------------


def state_key(conn, funnel: Funnel, visitor: str) -> str:
    with keys.bound(conn):
        return funnel_base(funnel) + "v:" + visitor


def test_a_state_never_exceeds_its_cap_and_expires(raw_conn):
    conn, now = raw_conn, time.time()
    funnel = define(conn, [{"page": "/a"}, {"page": "/b"}], 600, since=now - 3 * HOUR)
    who = visitor_id("4.4.4.4")
    views = [("4.4.4.4", "/b" if i % 2 else "/a", now - 2 * HOUR + i) for i in range(STATE_CAP + 40)]
    for n in range(0, len(views), 25):
        write_views(conn, views[n : n + 25], f"cap-{n}")
    key = state_key(conn, funnel, who)
    entries = [f for f in conn.hkeys(key) if f not in (b"a", b"d")]
    assert len(entries) == STATE_CAP
    report = funnel_report(conn, "f", None, local_day(now - 2 * HOUR), local_day(now))
    assert report.capped == 40 and [s.visitors for s in report.steps] == [1, 1]
    latest = max(ts for _ip, _path, ts in views[:STATE_CAP])
    settings = get_settings()
    expected = latest + 2 * funnel.window + settings.funnel_lateness + settings.future_tolerance
    assert abs(now + conn.ttl(key) - expected) <= 3
    assert conn.memory_usage(key) < 64 * STATE_CAP + 512


def test_attempts_over_for_good_leave_the_state_and_their_results_stay(conn):
    """Judged as if later (``judge(now=...)``): an attempt whose window ended before any step event
    can still be judged is pruned from the state; its day keeps its result, and a new attempt of
    the same day that reaches no further does not replace it."""
    now = time.time()
    settings = get_settings()
    funnel = define(conn, [{"page": "/a"}, {"page": "/b"}], 600, since=now - 3 * HOUR)
    who = visitor_id("5.5.5.5")
    t = now - 2 * HOUR
    day = local_day(t)
    judge(conn, funnel, [(who, t, 1, day), (who, t + 60, 2, day)], now=now)
    key = state_key(conn, funnel, who)
    assert conn.hlen(key) == 4  # a, d and two step events
    later = t + 600 + funnel.window + settings.funnel_lateness + settings.future_tolerance + 60
    judge(conn, funnel, [(who, later - funnel.window - settings.funnel_lateness + 1, 1, day)], now=later)
    assert conn.hlen(key) == 3  # the first attempt pruned
    report = funnel_report(conn, "f", None, day, day, now=later)
    assert [s.visitors for s in report.steps] == [1, 1]
    assert sum(n for _label, n in report.steps[1].time_to_convert) == 1
    assert report.open_days == ([day] if later < day_end(day) + funnel.window else [])


def test_a_funnel_step_call_stays_cheap_at_the_cap(raw_conn):
    """One call of ``PER_CALL`` step events, each of a visitor at the cap: its Lua time under 5 ms
    (SLOWLOG's wall time: a bound from above of its CPU)."""
    conn, now = raw_conn, time.time()
    funnel = define(conn, [{"page": "/a"}, {"page": "/b"}, {"page": "/c"}], 3600, since=now - 3 * HOUR)
    day = local_day(now - HOUR)
    for v in range(4):
        who = f"v{v}"
        found = [(who, now - 2 * HOUR + i * 7, 1 << (i % 3), day) for i in range(STATE_CAP)]
        judge(conn, funnel, found, now=now)
    conn.config_set("slowlog-log-slower-than", 0)
    conn.slowlog_reset()
    found = [(f"v{v}", now - 2 * HOUR + 3 + i, 1 << (i % 3), day) for v in range(4) for i in range(16)]
    judge(conn, funnel, found, call_id="cheap", now=now)
    slowest = max(entry["duration"] for entry in conn.slowlog_get(128))
    conn.config_set("slowlog-log-slower-than", 10000)
    assert slowest < 5000, slowest
