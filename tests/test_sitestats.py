"""Site PV/UV against a real Redis: an exact model, races, privacy, retention, DST."""

from __future__ import annotations

import ipaddress
import random
import threading
import time
import uuid
from collections import defaultdict
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from counters_tasks import sitestats, uniques, visits
from counters_tasks.core import days
from counters_tasks.core.settings import reset_settings
from counters_tasks.core.visitors import visitor_id
from counters_tasks.errors import ConfigurationError, InvalidInput
from counters_tasks.sitestats import SiteCount, page_all, page_day, pairs, site_all, site_day
from counters_tasks.store.scripts import execute_in_order
from tests.support.concurrency import run_threads
from tests.support.servers import dump_all, expires_at, use_settings

pytestmark = pytest.mark.cluster


class Model:
    """Plain dicts and sets: what every answer must be."""

    def __init__(self, zone: str):
        self.zone = ZoneInfo(zone)
        self.pv = defaultdict(int)
        self.uv = defaultdict(set)
        self.sessions = defaultdict(set)

    def day(self, ts):
        return datetime.fromtimestamp(ts, self.zone).date()

    def visit(self, who, path, ts, session=None):
        day = self.day(ts)
        for scope in ((None, None), (day, None), (None, path), (day, path)):
            self.pv[scope] += 1
            self.uv[scope].add(who)
        if session is not None:
            self.sessions[day].add(int(session.replace("-", "")[:15], 16))

    def answer(self, day, path):
        return SiteCount(day, self.pv[(day, path)], len(self.uv[(day, path)]))


def ip_forms(rng, n):
    """n visitors, each with several spellings of its address (all the same visitor)."""
    out = []
    for i in range(n):
        if i % 3 == 0:
            v6 = ipaddress.IPv6Address(0x20010DB8 << 96 | rng.getrandbits(64))
            out.append([str(v6), v6.exploded, v6.exploded.upper()])
        else:
            v4 = f"10.{i % 7}.{rng.randrange(256)}.{i % 250 + 1}"
            out.append([v4, f"::ffff:{v4}"])
    return out


def test_random_stream_matches_exact_model(conn, monkeypatch):
    use_settings(monkeypatch, COUNTERS_TIMEZONE="Europe/Berlin", COUNTERS_DAY_GRACE_DAYS=10, COUNTERS_VISITOR_DAYS=10)
    rng = random.Random(3)
    model = Model("Europe/Berlin")
    visitors = ip_forms(rng, 90)
    paths = [f"/p/{i}" for i in range(12)] + ["/", "/caf\u00e9", "/a b/{x}"]
    sessions = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(60)]
    now = time.time()
    for step in range(1, 1501):
        who = rng.randrange(len(visitors))
        path = rng.choice(paths)
        ts = now - rng.uniform(0, 6 * 86400) + rng.uniform(0, 60)  # several days, out of order
        session = rng.choice(sessions + [None] * 20)
        shown = rng.choice([session, session.upper().replace("-", "")]) if session else None
        suffix = rng.choice(["", "", "?utm=x", "#top", "?a=1#b"])
        visits.apply_visit(
            conn, rng.choice(visitors[who]), path + suffix, shown, ts, message_id=rng.choice([None, f"m{step}"])
        )
        model.visit(who, path, ts, session)
        if step % 500 == 0:
            all_days = [None] + sorted({model.day(now - d * 86400) for d in range(8)})
            for day in all_days:
                for path_ in [None, *paths]:
                    assert sitestats.site_visit_info(conn, day, path_) == model.answer(day, path_), (day, path_)
                if day is not None:
                    assert uniques.unique_visitors(conn, day) == len(model.sessions[day]), day


def test_seed_bugs_returning_visitor_and_later_days(conn):
    """The seed missed a returning visitor's first view of another path, and counted a new
    visitor's path UV again on a later day; here each figure is its own exact set."""
    today = days.local_day(time.time())
    now = days.day_start(today) + 60
    yesterday = now - 86400
    sitestats.record_visit(conn, "192.0.2.7", "/a", yesterday)
    sitestats.record_visit(conn, "192.0.2.7", "/b", now)  # returning visitor, new path
    sitestats.record_visit(conn, "192.0.2.7", "/a", now)  # new visitor's path, a later day
    assert sitestats.site_visit_info(conn, None, "/b") == SiteCount(None, 1, 1)
    assert sitestats.site_visit_info(conn, None, "/a") == SiteCount(None, 2, 1)
    assert sitestats.site_visit_info(conn, today, "/a") == SiteCount(today, 1, 1)
    assert sitestats.site_visit_info(conn, today) == SiteCount(today, 2, 1)
    assert sitestats.site_visit_info(conn) == SiteCount(None, 3, 1)


def test_same_visitor_from_many_threads_counts_once(raw_conn):
    now = time.time()
    today = days.local_day(now)
    session = str(uuid.uuid4())
    barrier = threading.Barrier(8)

    def work(i):
        barrier.wait()
        for j in range(24):
            ip = "2001:db8::1" if (i + j) % 2 else "2001:0DB8:0000::0001"
            visits.apply_visit(raw_conn, ip, f"/t/{j % 2}", session, now)

    assert run_threads(work, 8) == []
    assert sitestats.site_visit_info(raw_conn) == SiteCount(None, 192, 1)
    assert sitestats.site_visit_info(raw_conn, today) == SiteCount(today, 192, 1)
    for path in ("/t/0", "/t/1"):
        assert sitestats.site_visit_info(raw_conn, today, path) == SiteCount(today, 96, 1)
        assert sitestats.site_visit_info(raw_conn, None, path) == SiteCount(None, 96, 1)
    assert uniques.unique_visitors(raw_conn, today) == 1


def _everything_stored(client) -> list[bytes]:
    found = []
    for key in client.scan_iter(count=1000):
        found.append(key)
        kind = client.type(key)
        if kind == b"string":
            found.append(client.get(key))
        elif kind == b"hash":
            for field, value in client.hgetall(key).items():
                found += [field, value]
        elif kind == b"set":
            found += list(client.smembers(key))
        elif kind == b"zset":
            for member, score in client.zrange(key, 0, -1, withscores=True):
                found += [member, repr(score).encode()]
        elif kind == b"list":
            found += client.lrange(key, 0, -1)
        else:  # pragma: no cover
            raise AssertionError(f"unexpected type {kind} of {key}")
    return found


def test_no_raw_ip_anywhere_in_redis(raw_conn, monkeypatch):
    ips = ["203.0.113.45", "::ffff:198.51.100.9", "2001:db8:85a3::8a2e:370:7334", "fe80::1%eth0", "10.1.2.3"]
    now = time.time()
    for i, ip in enumerate(ips):
        visits.apply_visit(raw_conn, ip, f"/x/{i}", str(uuid.uuid4()), now, message_id=f"task-{i}")
    use_settings(monkeypatch, COUNTERS_UV_MODE="hll")
    for ip in ips:
        visits.apply_visit(raw_conn, ip, "/hll", None, now)
    forms = set()
    for ip in ips:
        address = ipaddress.ip_address(ip.split("%")[0])
        forms |= {
            ip,
            str(address),
            address.exploded,
            getattr(address, "ipv4_mapped", None) and str(address.ipv4_mapped),
        }
    forms = {f.encode() for f in forms if f}
    stored = _everything_stored(raw_conn)
    assert len(stored) > 50
    leaks = [(form, blob) for blob in stored for form in forms if form in blob]
    assert not leaks


def test_visitor_id_is_keyed_hmac_of_normalized_ip(monkeypatch):
    a = visitor_id("::ffff:192.0.2.1")
    assert a == visitor_id("192.0.2.1")
    assert visitor_id("2001:DB8::1") == visitor_id("2001:db8:0:0:0:0:0:1")
    assert visitor_id("fe80::1%eth0") == visitor_id("fe80::1")  # a zone is not identity
    assert -(2**63) <= int(a) < 2**63
    use_settings(monkeypatch, COUNTERS_SECRET="another secret")
    assert visitor_id("192.0.2.1") != a


def test_missing_secret_is_a_configuration_error_and_writes_nothing(raw_conn, monkeypatch):
    monkeypatch.delenv("COUNTERS_SECRET")
    reset_settings()
    with pytest.raises(ConfigurationError):
        visits.apply_visit(raw_conn, "192.0.2.1", "/", None, time.time())
    assert dump_all(raw_conn) == {}


@pytest.mark.usefixtures("bound_deployment")
def test_path_normalization_and_byte_cap(conn):
    now = time.time()
    today = days.local_day(now)
    long_path = "/" + "\u00e9" * 300  # 601 bytes
    cut = "/" + "\u00e9" * 255  # 511 bytes: the next character would cross 512
    assert sitestats.normalize_path(long_path) == cut
    assert sitestats.normalize_path("/a/b?x=1&y=2#frag") == "/a/b"
    assert sitestats.normalize_path("/a#f?g") == "/a"
    sitestats.record_visit(conn, "192.0.2.1", long_path + "?q", now)
    sitestats.record_visit(conn, "192.0.2.2", cut, now)
    assert sitestats.site_visit_info(conn, today, long_path) == SiteCount(today, 2, 2)
    assert sitestats.site_visit_info(conn, None, cut + "#x") == SiteCount(None, 2, 2)
    assert conn.exists(page_all.path_totals(cut))


@pytest.mark.usefixtures("bound_deployment")
def test_all_time_site_figures_sum_the_shards(raw_conn):
    now = time.time()
    for i in range(200):
        sitestats.record_visit(raw_conn, f"198.51.100.{i}", "/", now)
    sitestats.record_visit(raw_conn, "198.51.100.1", "/", now)
    used = [s for s in range(site_all.SITE_SHARDS) if raw_conn.exists(site_all.site_all_totals(s))]
    assert len(used) > 8  # the visitors spread over the shards
    assert sitestats.site_visit_info(raw_conn) == SiteCount(None, 201, 200)


@pytest.mark.usefixtures("bound_deployment")
def test_retention_visitor_sets_expire_after_grace_totals_kept(raw_conn, monkeypatch):
    use_settings(monkeypatch, COUNTERS_TIMEZONE="America/New_York")
    now = time.time()
    day = days.local_day(now)
    sitestats.record_visit(raw_conn, "192.0.2.1", "/r", now)
    end = days.day_end(day)
    assert expires_at(raw_conn, site_day.site_day_visitors(day, "exact")) == end + 2 * 86400
    assert expires_at(raw_conn, pairs.site_day_pairs(day)) == end + 2 * 86400
    assert expires_at(raw_conn, site_day.site_day_totals(day)) == end + 400 * 86400
    assert expires_at(raw_conn, page_day.site_day_pages(day)) == end + 400 * 86400
    path_at = expires_at(raw_conn, page_all.path_totals("/r"))
    assert now + 400 * 86400 - 5 <= path_at <= now + 400 * 86400 + 5  # 400 days after the path's latest view
    shard = site_all.site_shard_of(visitor_id("192.0.2.1"))
    for key in (site_all.site_all_totals(shard), site_all.site_all_visitors(shard, "exact")):
        assert raw_conn.ttl(key) == -1  # the site's all-time figures and members are kept
    use_settings(
        monkeypatch,
        COUNTERS_TIMEZONE="America/New_York",
        COUNTERS_DAY_GRACE_DAYS=5,
        COUNTERS_DAY_TOTALS_DAYS=30,
        COUNTERS_PATH_KEEP_DAYS=0,
    )
    sitestats.record_visit(raw_conn, "192.0.2.1", "/s", now)
    # the day was opened by its first write: its visitor sets go when fixed then, whatever came later
    assert expires_at(raw_conn, site_day.site_day_visitors(day, "exact")) == end + 2 * 86400
    assert expires_at(raw_conn, site_day.site_day_totals(day)) == end + 30 * 86400  # totals follow the setting
    assert raw_conn.ttl(page_all.path_totals("/s")) == -1  # COUNTERS_PATH_KEEP_DAYS=0: kept for ever
    yesterday = day - timedelta(days=1)  # never counted: opened now, for COUNTERS_DAY_GRACE_DAYS from now
    sitestats.record_visit(raw_conn, "192.0.2.1", "/s", days.day_start(yesterday) + 60)
    assert abs(expires_at(raw_conn, site_day.site_day_visitors(yesterday, "exact")) - (now + 5 * 86400)) < 5


def _recent_dst_day(zone: str) -> date:
    today = days.local_day(time.time())
    for back in range(1, 400):
        day = today - timedelta(days=back)
        if days.day_end(day) - days.day_start(day) != 86400:
            return day
    raise AssertionError("no DST change in the last 400 days")  # pragma: no cover


def test_day_boundaries_follow_local_midnight_with_dst(monkeypatch):
    use_settings(monkeypatch, COUNTERS_TIMEZONE="Europe/Berlin")
    spring, autumn = date(2026, 3, 29), date(2026, 10, 25)
    assert days.day_end(spring) - days.day_start(spring) == 23 * 3600
    assert days.day_end(autumn) - days.day_start(autumn) == 25 * 3600
    assert days.day_start(autumn) == int(datetime(2026, 10, 24, 22, 0, tzinfo=ZoneInfo("UTC")).timestamp())
    for day in (spring, autumn, date(2026, 7, 1)):
        assert days.local_day(days.day_end(day) - 60) == day
        assert days.local_day(days.day_end(day)) == day + timedelta(days=1)
        assert days.local_day(days.day_start(day)) == day
    with pytest.raises(InvalidInput):
        days.check_day(datetime(2026, 1, 1))


@pytest.mark.usefixtures("bound_deployment")
def test_an_item_a_minute_before_local_midnight_counts_for_its_own_day(conn, monkeypatch):
    """Queued at 23:59 on a 23 or 25 hour day, processed after midnight (now): still that day."""
    use_settings(
        monkeypatch, COUNTERS_TIMEZONE="Europe/Berlin", COUNTERS_DAY_GRACE_DAYS=400, COUNTERS_UNIQUES_SHARD_DAYS=400
    )
    day = _recent_dst_day("Europe/Berlin")
    ts = days.day_end(day) - 60
    assert datetime.fromtimestamp(ts, ZoneInfo("Europe/Berlin")).strftime("%H:%M") == "23:59"
    visits.apply_visit(conn, "192.0.2.1", "/late", str(uuid.uuid4()), ts)
    visits.apply_visit(conn, "192.0.2.1", "/late", str(uuid.uuid4()), ts + 120)  # 00:01 next day
    nxt = day + timedelta(days=1)
    assert sitestats.site_visit_info(conn, day) == SiteCount(day, 1, 1)
    assert sitestats.site_visit_info(conn, nxt) == SiteCount(nxt, 1, 1)
    assert uniques.unique_visitors(conn, day) == 1 and uniques.unique_visitors(conn, nxt) == 1
    # opened by this write, months after its end: open COUNTERS_DAY_GRACE_DAYS from now
    assert abs(expires_at(conn, site_day.site_day_visitors(day, "exact")) - (time.time() + 400 * 86400)) < 5


@pytest.mark.scale  # 100,000 visitors
@pytest.mark.usefixtures("bound_deployment")
def test_hll_mode_within_two_percent_at_100k_visitors(raw_conn, monkeypatch):
    use_settings(monkeypatch, COUNTERS_UV_MODE="hll")
    now = time.time()
    today = days.local_day(now)
    n = 100_000
    views = [
        sitestats.SiteView(visitor_id(str(ipaddress.IPv4Address(0x0A000000 + i))), "/big" if i % 2 else "/half", today)
        for i in range(n)
    ]
    views += views[:5000]  # repeat visits: PV grows, UV does not
    for start in range(0, len(views), 5000):
        batch = views[start : start + 5000]
        execute_in_order(raw_conn, lambda pipe, b=batch: sitestats.queue_views(raw_conn, pipe, b, None))
    for day in (None, today):
        got = sitestats.site_visit_info(raw_conn, day)
        assert got.pv == n + 5000
        assert abs(got.uv - n) <= 0.02 * n, got
    half = sitestats.site_visit_info(raw_conn, today, "/half")
    assert abs(half.uv - n / 2) <= 0.02 * n / 2, half
    assert raw_conn.type(site_day.site_day_visitors(today, "hll")) == b"string"
    assert not raw_conn.exists(site_day.site_day_visitors(today, "exact"))


def test_hll_mode_small_counts_are_exact(conn, monkeypatch):
    use_settings(monkeypatch, COUNTERS_UV_MODE="hll")
    now = time.time()
    for ip in ("192.0.2.1", "192.0.2.2", "192.0.2.1"):
        sitestats.record_visit(conn, ip, "/", now)
    assert sitestats.site_visit_info(conn) == SiteCount(None, 3, 2)
    assert sitestats.site_visit_info(conn, days.local_day(now), "/") == SiteCount(days.local_day(now), 3, 2)


def test_message_id_applies_once(conn):
    now = time.time()
    for _ in range(3):
        sitestats.record_visit(conn, "192.0.2.1", "/m", now, message_id="task-1")
    sitestats.record_visit(conn, "192.0.2.1", "/m", now, message_id="task-2")
    today = days.local_day(now)
    assert sitestats.site_visit_info(conn, today, "/m") == SiteCount(today, 2, 1)
    assert sitestats.site_visit_info(conn) == SiteCount(None, 2, 1)


BAD_VISITS = [
    {"ip": "1.2.3"},
    {"ip": "256.1.1.1"},
    {"ip": ""},
    {"ip": None},
    {"ip": 3232235777},
    {"ip": "1.2.3.4/24"},
    {"ip": "example.com"},
    {"path": ""},
    {"path": None},
    {"path": 5},
    {"path": b"/bytes"},
    {"path": "?only=query"},
    {"path": "#frag"},
    {"path": "/a\nb"},
    {"path": "/" + "x" * 1024},
    {"now": -1},
    {"now": float("nan")},
    {"now": "1700000000"},
    {"now": True},
    {"message_id": ""},
    {"message_id": 7},
]


@pytest.mark.parametrize("kwargs", BAD_VISITS)
def test_bad_input_is_refused_before_any_write(raw_conn, kwargs):
    sitestats.record_visit(raw_conn, "192.0.2.1", "/seed", time.time())
    before = dump_all(raw_conn)
    args = {"ip": "192.0.2.9", "path": "/ok", "now": time.time()} | kwargs
    with pytest.raises(InvalidInput):
        sitestats.record_visit(raw_conn, **args)
    assert dump_all(raw_conn) == before


@pytest.mark.parametrize(
    "day, path", [(datetime(2026, 1, 1), None), ("2026-01-01", None), (None, ""), (None, "?q"), (None, 3)]
)
def test_bad_queries_are_refused(conn, day, path):
    with pytest.raises(InvalidInput):
        sitestats.site_visit_info(conn, day, path)


def test_unknown_day_and_path_are_zero(conn):
    assert sitestats.site_visit_info(conn) == SiteCount(None, 0, 0)
    assert sitestats.site_visit_info(conn, date(2020, 1, 1), "/nothing") == SiteCount(date(2020, 1, 1), 0, 0)


@pytest.mark.parametrize("mode", ["exact", "hll"])
def test_one_call_of_more_views_of_a_path_than_lua_can_unpack(raw_conn, monkeypatch, mode):
    """``path_all`` reads a path's visitors with HMGET (issue 21); 9,000 distinct visitors of one
    path in one call (what ``bench/uniques_memory.py`` sends) passed Lua's unpack limit (~8,000
    values: "too many results to unpack") until the reads and writes went 1,000 at a time."""
    from counters_tasks.core.days import today
    from counters_tasks.store.scripts import execute_in_order

    use_settings(monkeypatch, COUNTERS_UV_MODE=mode)
    day = today()
    views = [sitestats.SiteView(str(n * 7919 - 2**62), "/many", day) for n in range(9000)]
    execute_in_order(raw_conn, lambda pipe: sitestats.queue_views(raw_conn, pipe, views, None))
    execute_in_order(raw_conn, lambda pipe: sitestats.queue_views(raw_conn, pipe, views[:10], None))
    pv, uv = sitestats.site_visit_info(raw_conn, None, "/many")[1:]
    assert pv == 9010
    assert uv == 9000 if mode == "exact" else abs(uv - 9000) < 9000 * 0.05
