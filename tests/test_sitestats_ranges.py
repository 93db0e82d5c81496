"""Range queries over days against an exact model (plain dicts and sets): site/path PV and UV,
top pages, and unique visitors (the union of the days' sharded sets)."""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter, defaultdict
from datetime import timedelta

import pytest

from counters_tasks import sitestats, uniques
from counters_tasks.core.days import local_day
from counters_tasks.errors import InvalidInput
from counters_tasks.sitestats import page_day, site_day
from counters_tasks.store import keys, page_sketch
from counters_tasks.visits import apply_visits
from tests.support.servers import dump_all, expires_at
from tests.support.visit_model import local_date

pytestmark = pytest.mark.cluster

PATHS = ["/", "/a", "/b", "/blog/x", "/pricing"]


def random_visits(rng: random.Random, n: int, now: float, visitors: int = 300):
    """``(ip, path, ts)`` over the last three local days (all still open for writes)."""
    ips = [f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(256)}" for _ in range(visitors)]
    start = time.mktime(local_day(now).timetuple()) - 2 * 86400  # roughly: the day before yesterday
    return [(rng.choice(ips), rng.choice(PATHS), rng.uniform(max(start, now - 2.5 * 86400), now)) for _ in range(n)]


def model(visits):
    pv, uv = defaultdict(int), defaultdict(set)
    for ip, path, ts in visits:
        day = local_date(ts)  # the model's own day (zoneinfo), not the package's
        for where in (None, path):
            pv[where, day] += 1
            uv[where, day].add(ip)
    return pv, uv


@pytest.fixture
def stream(conn):
    """The visits, written 500 at a time as a worker writes a batch (one ``sitestats.record_visit``
    each wrote the same site and path figures in 1.5 s a test instead of 0.3 s)."""
    rng = random.Random(5)
    now = time.time()
    visits = random_visits(rng, 1500, now)
    for first in range(0, len(visits), 500):
        apply_visits(conn, [{"ip": ip, "path": path, "ts": ts} for ip, path, ts in visits[first : first + 500]])
    return visits, now


def test_site_and_path_ranges_match_the_model(conn, stream):
    visits, now = stream
    pv, uv = model(visits)
    today = local_day(now)
    days = [today - timedelta(days=i) for i in range(3, -1, -1)]  # one day before any data, too
    overlap_checked = []
    for first_i in range(len(days)):
        for last_i in range(first_i, len(days)):
            first, last = days[first_i], days[last_i]
            span = days[first_i : last_i + 1]
            for where in (None, *PATHS):
                got = sitestats.site_visit_range(conn, first, last, where)
                assert got.pv == sum(pv[where, d] for d in span)
                assert [(d.day, d.pv, d.uv) for d in got.days] == [(d, pv[where, d], len(uv[where, d])) for d in span]
                truth = len(set().union(*(uv[where, d] for d in span)))
                if len(span) == 1:
                    assert got.uv == truth and not got.uv_approximate  # one day: the exact figure
                elif where is not None:  # the union of the path's day sketches (store.page_sketch)
                    small = all(len(uv[where, d]) <= page_sketch.EXACT_IDS for d in span)
                    assert got.uv_approximate is not small
                    assert abs(got.uv - truth) <= (0 if small else 4 * page_sketch.STANDARD_ERROR * truth), (
                        where,
                        first,
                        last,
                        got.uv,
                        truth,
                    )
                else:
                    assert got.uv_approximate
                    assert abs(got.uv - truth) <= max(2, 0.03 * truth), (where, first, last, got.uv, truth)
                    daily_sum = sum(len(uv[where, d]) for d in span)
                    if daily_sum - truth > 0.03 * truth + 2:
                        assert got.uv < daily_sum  # a union, not a sum of the days
                        overlap_checked.append(where)

    assert None in overlap_checked  # the stream has visitors on several days


def test_top_pages_over_a_range_match_the_model(conn, stream):
    visits, now = stream
    today = local_day(now)
    for back in range(3):
        first = today - timedelta(days=back)
        counts = Counter(path for _ip, path, ts in visits if first <= local_date(ts) <= today)
        expected = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        assert sitestats.top_pages(conn, first, today, limit=10) == expected
        assert sitestats.top_pages(conn, first, today, limit=2) == expected[:2]


def test_cluster_path_unions_per_day_hlls_client_side(conn, stream, monkeypatch):
    """Days of the site live in different slots: the client-side union equals PFCOUNT."""
    visits, now = stream
    today = local_day(now)
    first = today - timedelta(days=2)
    single_server = sitestats.site_visit_range(conn, first, today).uv
    monkeypatch.setattr(page_sketch, "is_cluster", lambda _conn: True)  # (store.page_sketch.hll_union's test)
    assert sitestats.site_visit_range(conn, first, today).uv == single_server


def test_unique_visitors_over_a_range_is_the_exact_union(conn):
    rng = random.Random(9)
    now = time.time()
    sessions = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(700)]
    seen = defaultdict(set)
    for _ in range(2500):
        session = rng.choice(sessions)
        ts = now - rng.uniform(0, 2.5 * 86400)
        uniques.count_visit(conn, str(session), now=ts)
        seen[local_date(ts)].add(int(session.hex[:15], 16))  # the id: the session's first 15 hex digits
    today = local_day(now)
    for back in range(4):
        first = today - timedelta(days=back)
        span = [first + timedelta(days=i) for i in range(back + 1)]
        got = uniques.unique_visitors_range(conn, first, today)
        assert got.visitors == len(set().union(*(seen[d] for d in span)))
        assert got.days == [(d, len(seen[d])) for d in span]
        assert got.missing_days == []


@pytest.mark.usefixtures("bound_deployment")
def test_days_whose_shards_expired_are_reported_missing(conn):
    now = time.time()
    today = local_day(now)
    uniques.count_visit(conn, str(uuid.uuid4()), now=now)
    uniques.count_visit(conn, str(uuid.uuid4()), now=now - 86400)
    yesterday = today - timedelta(days=1)
    expected = int(conn.get(keys.uniques_expected(yesterday)))
    for shard in range(uniques.shard_count(expected)):
        conn.delete(keys.uniques_shard(yesterday, shard))  # what expiry does after COUNTERS_UNIQUES_SHARD_DAYS
    got = uniques.unique_visitors_range(conn, yesterday, today)
    assert got.visitors == 1 and got.missing_days == [yesterday] and got.days == [(yesterday, 1), (today, 1)]


@pytest.mark.parametrize(
    "call",
    [
        lambda c, d: sitestats.site_visit_range(c, d, d - timedelta(days=1)),
        lambda c, d: sitestats.site_visit_range(c, d, "2024-01-01"),
        lambda c, d: sitestats.site_visit_range(c, d - timedelta(days=500), d),
        lambda c, d: sitestats.site_visit_range(c, d, d, path=""),
        lambda c, d: sitestats.top_pages(c, d, d, limit=0),
        lambda c, d: sitestats.top_pages(c, d, d, limit=True),
        lambda c, d: uniques.unique_visitors_range(c, d, d - timedelta(days=1)),
        lambda c, d: uniques.unique_visitors_range(c, None, d),
    ],
)
def test_bad_ranges_raise_before_anything(conn, call):
    before = dump_all(conn)
    with pytest.raises(InvalidInput):
        call(conn, local_day(time.time()))
    assert dump_all(conn) == before


@pytest.mark.usefixtures("bound_deployment")
def test_range_keys_expire_with_the_days_totals_and_dedupe_holds(conn):
    now = time.time()
    day = local_day(now)
    sitestats.record_visit(conn, "198.51.100.7", "/x?q=1", now=now, message_id="m-1")
    sitestats.record_visit(conn, "198.51.100.7", "/x", now=now, message_id="m-1")  # redelivered: no effect
    totals_at = expires_at(conn, site_day.site_day_totals(day))
    assert totals_at == sitestats.totals_expire_at(day)
    for key in (site_day.site_day_range_hll(day), page_day.site_day_pages(day)):
        assert expires_at(conn, key) == totals_at, key
    assert sitestats.top_pages(conn, day, day) == [("/x", 1)]
    assert sitestats.site_visit_range(conn, day, day, "/x").uv == 1
    over_two_days = sitestats.site_visit_range(conn, day - timedelta(days=1), day, "/x")
    assert (over_two_days.uv, over_two_days.uv_approximate) == (1, False)  # the union of the day sketches


def test_hll_mode_marks_even_one_day_approximate(conn, monkeypatch):
    from counters_tasks.core.settings import reset_settings

    monkeypatch.setenv("COUNTERS_UV_MODE", "hll")
    reset_settings()
    now = time.time()
    for i in range(30):
        sitestats.record_visit(conn, f"203.0.113.{i}", "/", now=now)
    day = local_day(now)
    one = sitestats.site_visit_range(conn, day, day)
    assert one.uv_approximate and one.uv == 30 and one.pv == 30
    assert sitestats.site_visit_range(conn, day - timedelta(days=1), day).uv == 30
