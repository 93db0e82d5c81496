"""Daily unique visitors against a real Redis: shards, the expected figure, races."""

from __future__ import annotations

import hashlib
import random
import threading
import time
import uuid
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import redis

from counters_tasks import refusals, uniques
from counters_tasks.core import days
from counters_tasks.core.days import local_day
from counters_tasks.errors import InvalidInput
from counters_tasks.store import keys
from tests.support.concurrency import run_threads
from tests.support.servers import dump_all, expires_at, use_settings

pytestmark = pytest.mark.cluster


def sid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128)))


def today_and_now():
    now = time.time()
    return days.local_day(now), now


def test_session_number_forms():
    u = "0123ABCD-ef45-6789-0123-456789abcdef"
    n = int("0123abcdef45678", 16)
    assert uniques.session_number(u) == n
    assert uniques.session_number(u.lower().replace("-", "")) == n
    assert uniques.session_number("0123abcdef45678") == n  # 15 hex digits are enough
    for bad in [
        "",
        "0123abcdef4567",
        "zz23abcdef456789",
        "{0123abcd-ef45-6789-0123-456789abcdef}",
        "-" * 20,
        "0123abcdef45678 ",
        None,
        5,
        b"0123abcdef456789",
    ]:
        with pytest.raises(InvalidInput):
            uniques.session_number(bad)


@pytest.mark.parametrize(
    "previous, expected",
    [
        (None, 1_000_000),
        (0, 1_000_000),
        (1, 2),
        (2, 4),
        (3, 8),
        (10, 16),
        (85, 128),
        (86, 256),
        (341, 512),
        (342, 1024),
        (1365, 2048),
        (1366, 4096),
        (1_000_000, 2_097_152),
    ],
)
def test_expected_from_count(previous, expected):
    assert uniques.expected_from_count(previous) == expected


def test_shard_count_is_never_zero():
    assert uniques.shard_count(2) == 1
    assert uniques.shard_count(128) == 1  # the seed computed 0 here and divided by it
    assert uniques.shard_count(512) == 2
    assert uniques.shard_count(1_000_000) == 3906


def test_count_visit_new_then_not_and_exact_count(conn):
    day, now = today_and_now()
    rng = random.Random(1)
    ids = [sid(rng) for _ in range(300)]
    assert all(uniques.count_visit(conn, s, now) for s in ids)
    assert not any(uniques.count_visit(conn, s.upper(), now) for s in ids)
    assert uniques.unique_visitors(conn, day) == 300
    assert uniques.unique_visitors(conn, day - timedelta(days=1)) == 0


@pytest.mark.usefixtures("bound_deployment")
def test_tiny_history_gives_one_shard_no_crash(raw_conn):
    """Fewer than ~86 uniques yesterday: the seed divided by zero; here one shard."""
    day, now = today_and_now()
    rng = random.Random(2)
    for _ in range(10):
        uniques.count_visit(raw_conn, sid(rng), now - 86400)
    uniques.forget_expected()
    assert uniques.precompute_expected(raw_conn, day) == 16
    for _ in range(40):
        uniques.count_visit(raw_conn, sid(rng), now)
    assert uniques.unique_visitors(raw_conn, day) == 40
    shards = list(raw_conn.scan_iter(match=keys.uniques_shard(day, 0).rsplit(":", 1)[0] + ":*"))
    assert shards == [keys.uniques_shard(day, 0).encode()]
    assert raw_conn.scard(shards[0]) == 40


@pytest.mark.usefixtures("bound_deployment")
def test_count_visit_fixes_a_missing_figure_from_yesterday(raw_conn):
    day, now = today_and_now()
    rng = random.Random(3)
    for _ in range(100):
        uniques.count_visit(raw_conn, sid(rng), now - 86400)
    assert raw_conn.get(keys.uniques_expected(day)) is None
    uniques.count_visit(raw_conn, sid(rng), now)
    assert raw_conn.get(keys.uniques_expected(day)) == b"256"  # 100 x 1.5 -> 256


def test_layout_never_changes_once_fixed(raw_conn):
    day, now = today_and_now()
    rng = random.Random(4)
    tomorrow = day + timedelta(days=1)
    assert uniques.precompute_expected(raw_conn, tomorrow) == 1_000_000  # no count today yet
    for _ in range(20):
        uniques.count_visit(raw_conn, sid(rng), now)
    uniques.forget_expected()
    assert uniques.precompute_expected(raw_conn, tomorrow) == 1_000_000  # first writer won
    assert uniques.precompute_expected(raw_conn, day) == 1_000_000


@pytest.mark.usefixtures("bound_deployment")
def test_precompute_race_first_writer_wins(raw_conn):
    """Threads fix the same day while yesterday's count keeps growing: all get one figure."""
    day, now = today_and_now()
    rng = random.Random(5)
    barrier = threading.Barrier(12)
    results, errors = [], []

    def fixer(i):
        try:
            barrier.wait()
            for _ in range(i * 7):
                uniques.count_visit(raw_conn, str(uuid.uuid4()), now - 86400)
            uniques.forget_expected()
            results.append(uniques.precompute_expected(raw_conn, day))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    for _ in range(3):
        uniques.count_visit(raw_conn, sid(rng), now - 86400)
    threads = [threading.Thread(target=fixer, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(set(results)) == 1
    assert results[0] == int(raw_conn.get(keys.uniques_expected(day)))


def test_concurrent_first_visits_of_a_new_day(raw_conn):
    """Many threads count the same and different sessions on a day with no figure yet."""
    day, now = today_and_now()
    shared = str(uuid.uuid4())
    barrier = threading.Barrier(8)
    new_flags = []

    def work(i):
        barrier.wait()
        new_flags.append(uniques.count_visit(raw_conn, shared, now))
        for j in range(30):
            uniques.count_visit(raw_conn, f"{i:04x}{j:04x}{'0' * 24}", now)

    assert run_threads(work, 8) == []
    assert new_flags.count(True) == 1
    assert uniques.unique_visitors(raw_conn, day) == 1 + 8 * 30


@pytest.mark.usefixtures("bound_deployment")
def test_shards_stay_intsets_and_within_size(raw_conn):
    day, now = today_and_now()
    rng = random.Random(6)
    for _ in range(341):
        uniques.count_visit(raw_conn, sid(rng), now - 86400)
    assert uniques.precompute_expected(raw_conn, day) == 512  # 2 shards
    for _ in range(500):
        uniques.count_visit(raw_conn, sid(rng), now)
    shards = [keys.uniques_shard(day, i) for i in range(2)]  # 512 expected: 2 shards of 256
    assert sum(raw_conn.scard(k) for k in shards) == 500
    for key in shards:
        assert raw_conn.object("encoding", key) == b"intset"
        assert 0 < raw_conn.scard(key) <= 512


@pytest.mark.usefixtures("bound_deployment")
def test_figure_changed_behind_the_cache_is_followed(raw_conn):
    """A process that remembered another figure re-reads it; ids land in the fixed layout."""
    day, now = today_and_now()
    uniques.precompute_expected(raw_conn, day)  # 1,000,000 remembered by this process
    raw_conn.flushdb()
    raw_conn.set(keys.uniques_expected(day), 2)  # e.g. another worker fixed it from a small count
    assert uniques.count_visit(raw_conn, str(uuid.uuid4()), now)
    assert raw_conn.exists(keys.uniques_shard(day, 0))
    assert uniques.unique_visitors(raw_conn, day) == 1


@pytest.mark.usefixtures("bound_deployment")
def test_retention(raw_conn, monkeypatch):
    use_settings(monkeypatch, COUNTERS_TIMEZONE="Asia/Kolkata")
    day, now = today_and_now()
    uniques.count_visit(raw_conn, str(uuid.uuid4()), now)
    end = days.day_end(day)
    shard = next(iter(raw_conn.scan_iter(match="*:shard:*")))
    assert expires_at(raw_conn, shard) == end + 7 * 86400
    assert expires_at(raw_conn, keys.uniques_count(day)) == end + 400 * 86400
    assert expires_at(raw_conn, keys.uniques_expected(day)) == end + 400 * 86400


@pytest.mark.usefixtures("bound_deployment")
def test_a_day_whose_shards_are_gone_is_closed_and_reported(raw_conn):
    _, now = today_and_now()
    old = now - 8 * 86400
    day = local_day(old)
    assert uniques.count_visit(raw_conn, str(uuid.uuid4()), old)  # never counted: opened, however old
    assert uniques.unique_visitors(raw_conn, day) == 1
    # the shards' time passes (Redis expires the shards and the open marker together)
    raw_conn.delete(keys.uniques_open(day), *raw_conn.keys(keys.uniques_shard(day, 0).rsplit(":", 1)[0] + ":*"))
    before = dump_all(raw_conn)
    assert not uniques.count_visit(raw_conn, str(uuid.uuid4()), old, message_id="late-1")
    assert dump_all(raw_conn) == before  # closed: nothing written
    assert refusals.counts(raw_conn)["closed_day"] == 1  # but reported
    assert uniques.unique_visitors(raw_conn, day) == 1


def test_message_id_applies_once(conn):
    day, now = today_and_now()
    assert uniques.count_visit(conn, str(uuid.uuid4()), now, message_id="t1")
    assert not uniques.count_visit(conn, str(uuid.uuid4()), now, message_id="t1")  # a redelivery
    assert uniques.count_visit(conn, str(uuid.uuid4()), now, message_id="t2")
    assert uniques.unique_visitors(conn, day) == 2


@pytest.mark.usefixtures("bound_deployment")
def test_precompute_due_fixes_tomorrow_only_from_local_23h(raw_conn, monkeypatch):
    use_settings(monkeypatch, COUNTERS_TIMEZONE="Europe/Berlin")
    day = days.local_day(time.time()) - timedelta(days=1)  # a past day: items ahead of the clock are refused
    zone = ZoneInfo("Europe/Berlin")
    at = datetime(day.year, day.month, day.day, 22, 30, tzinfo=zone).timestamp()
    assert uniques.precompute_due(raw_conn, at) == {day.isoformat(): 1_000_000}
    assert raw_conn.get(keys.uniques_expected(day + timedelta(days=1))) is None
    uniques.count_visit(raw_conn, str(uuid.uuid4()), at)
    at = datetime(day.year, day.month, day.day, 23, 10, tzinfo=zone).timestamp()
    assert uniques.precompute_due(raw_conn, at) == {
        day.isoformat(): 1_000_000,
        (day + timedelta(days=1)).isoformat(): 2,
    }


@pytest.mark.parametrize("day", [None, "2026-01-01", datetime(2026, 1, 1), 20260101, date.max, date.min])
def test_bad_days_are_refused(conn, day):
    with pytest.raises(InvalidInput):
        uniques.unique_visitors(conn, day)
    with pytest.raises(InvalidInput):
        uniques.precompute_expected(conn, day)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"session_id": "not-a-uuid"},
        {"session_id": ""},
        {"session_id": None},
        {"session_id": 12},
        {"session_id": "abc"},
        {"now": -5},
        {"now": float("inf")},
        {"now": "x"},
        {"message_id": ""},
    ],
)
def test_bad_input_is_refused_before_any_write(raw_conn, kwargs):
    uniques.count_visit(raw_conn, str(uuid.uuid4()), time.time())
    before = dump_all(raw_conn)
    args = {"session_id": str(uuid.uuid4()), "now": time.time()} | kwargs
    with pytest.raises(InvalidInput):
        uniques.count_visit(raw_conn, **args)
    assert dump_all(raw_conn) == before


def test_unknown_day_is_zero(conn):
    assert uniques.unique_visitors(conn, date(2001, 1, 1)) == 0


@pytest.mark.parametrize("clobbered", ["shard", "level set", "levels", "count", "marker"])
@pytest.mark.usefixtures("bound_deployment")
def test_a_key_changed_by_hand_fails_the_call_before_any_write(raw_conn, clobbered):
    """A key of the wrong type (set by hand, or by another program) makes the call fail with
    nothing written and no dedupe marker, so the retry, once the key is repaired, applies all."""
    now = time.time()
    day = local_day(now)
    raw_conn.set(keys.uniques_count(day - timedelta(days=1)), 1)  # one shard, soon full
    uniques.precompute_expected(raw_conn, day)
    rng = random.Random(7)
    first = [rng.getrandbits(60) for _ in range(600)]  # the shard (512) and level 1
    for start in range(0, 600, 120):
        uniques.apply_ids(raw_conn, day, first[start : start + 120], f"fill{start}")
    more = [rng.getrandbits(60) for _ in range(120)]
    base = keys.uniques_shard(day, 0)
    target = {
        "shard": base,
        "level set": keys.uniques_level_set(base, 1, int(hashlib.sha1(str(more[0]).encode()).hexdigest()[:7], 16) % 16),
        "levels": keys.uniques_levels(day),
        "count": keys.uniques_count(day),
        "marker": keys.uniques_seen(day, "m1"),
    }[clobbered]
    saved = raw_conn.dump(target) if raw_conn.exists(target) else None
    raw_conn.delete(target)
    raw_conn.lpush(target, "x")  # a LIST where the script wants another type
    before = dump_all(raw_conn)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        uniques.apply_ids(raw_conn, day, more, "m1")
    assert dump_all(raw_conn) == before  # nothing written, no dedupe marker
    raw_conn.delete(target)
    if saved is not None:
        raw_conn.restore(target, 0, saved)
    assert uniques.apply_ids(raw_conn, day, more, "m1") == 120  # the retry applies it whole
    assert uniques.unique_visitors(raw_conn, day) == 720
    assert uniques.apply_ids(raw_conn, day, more, "m1") == 0  # and once
