"""Multi-precision counters against a real Redis."""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict

import pytest
import redis

from counters_tasks import counters
from counters_tasks.core.validation import MAX_AMOUNT
from counters_tasks.counters import PRECISIONS, SAMPLE_COUNT
from counters_tasks.errors import InvalidInput
from counters_tasks.store import keys
from tests.support.servers import dump_all

pytestmark = pytest.mark.cluster

T0 = 1_700_000_000


def bucket(now, p):
    return int(now // p) * p


def model_answer(updates, name, precision, now):
    totals = defaultdict(int)
    for n, count, ts in updates:
        if n == name:
            totals[bucket(ts, precision)] += count
    cutoff = now - SAMPLE_COUNT * precision
    return sorted((b, t) for b, t in totals.items() if b > cutoff and t)


def test_update_then_get_every_precision(conn):
    counters.update_counter(conn, "hits", 3, now=T0 + 0.5)
    counters.update_counter(conn, "hits", 2, now=T0 + 7)
    for p in PRECISIONS:
        got = counters.get_counter(conn, "hits", p, now=T0 + 10)
        expected = defaultdict(int)
        expected[bucket(T0 + 0.5, p)] += 3
        expected[bucket(T0 + 7, p)] += 2
        assert got == sorted(expected.items()), p


def test_known_counters_and_decoding(conn):
    counters.update_counter(conn, "b", now=T0)
    counters.update_counter(conn, "a:{x} *weird name\u00e9", now=T0)
    assert counters.known_counters(conn) == sorted(["b", "a:{x} *weird name\u00e9"])
    assert all(isinstance(n, str) for n in counters.known_counters(conn))


def test_get_counter_filters_window_and_includes_future(conn):
    now = T0
    counters.update_counter(conn, "c", 1, now=now - SAMPLE_COUNT * 5)  # exactly at the cutoff: out
    counters.update_counter(conn, "c", 1, now=now - SAMPLE_COUNT * 5 + 5)  # in
    counters.update_counter(conn, "c", 4, now=now + 30)  # clock skew ahead: included
    got = counters.get_counter(conn, "c", 5, now=now)
    assert got == [(bucket(now - SAMPLE_COUNT * 5 + 5, 5), 1), (bucket(now + 30, 5), 4)]


def test_corrections_to_zero_are_not_listed(conn):
    counters.update_counter(conn, "z", 5, now=T0)
    counters.update_counter(conn, "z", -5, now=T0)
    assert counters.get_counter(conn, "z", 1, now=T0) == []
    counters.update_counter(conn, "z", -2, now=T0)
    assert counters.get_counter(conn, "z", 60, now=T0) == [(bucket(T0, 60), -2)]


def test_random_stream_matches_model_with_cleaner_at_random_times(conn):
    rng = random.Random(7)
    names = ["hits", "hits:/", "sales", "x"]
    updates = []
    now = T0
    for step in range(600):
        now += rng.choice([0, 0.3, 1, 2, 7, 61, 400, 3000])
        ts = now - rng.choice([0, 0, 0, 3, 30, 500])  # out of order, as queued tasks arrive
        name, count = rng.choice(names), rng.randint(-2, 9)
        counters.update_counter(conn, name, count, now=ts)
        updates.append((name, count, ts))
        if rng.random() < 0.05:
            counters.clean_counters(conn, now=now)
        if step % 50 == 0:
            for n in names:
                for p in PRECISIONS:
                    if p in counters.kept_precisions(n):
                        assert counters.get_counter(conn, n, p, now=now) == model_answer(updates, n, p, now)
                    else:  # a page's counter keeps fewer: read, its 1 s would be zeros
                        with pytest.raises(InvalidInput, match="keeps precisions"):
                            counters.get_counter(conn, n, p, now=now)


@pytest.mark.usefixtures("bound_deployment")
def test_cleaner_removes_old_samples_and_empty_counters(conn):
    counters.update_counter(conn, "old", 1, now=T0)
    counters.update_counter(conn, "new", 1, now=T0 + 200 * 86400)
    later = T0 + 200 * 86400
    before = {p: counters.get_counter(conn, "new", p, now=later) for p in PRECISIONS}
    removed = counters.clean_counters(conn, now=later)
    assert removed == 7  # every precision of "old"
    assert counters.known_counters(conn) == ["new"]
    assert {p: counters.get_counter(conn, "new", p, now=later) for p in PRECISIONS} == before
    assert not conn.exists(keys.counter_hash("old"))


def samples_kept(conn, name: str, precision: int) -> int:
    """Samples of one precision stored in the counter's hash (cleaned or not)."""
    return sum(1 for field in conn.hkeys(keys.counter_hash(name)) if counters.bucket_of(field)[0] == precision)


@pytest.mark.usefixtures("bound_deployment")
def test_cleaner_takes_each_sample_when_it_leaves_the_window(conn):
    counters.update_counter(conn, "k", 1, now=T0)
    # first pass at T0 + 2 days: everything older than 120 samples goes, at every precision
    first = T0 + 2 * 86400
    assert counters.clean_counters(conn, now=first) == 4  # 1 s, 5 s, 1 min, 5 min
    assert samples_kept(conn, "k", 3600) == 1  # 120 h window still holds it
    assert samples_kept(conn, "k", 300) == 0
    # a write that is old for the 1h precision only is due at once: the next pass takes it
    counters.update_counter(conn, "k", 1, now=first - 121 * 3600)
    assert samples_kept(conn, "k", 3600) == 2
    assert counters.clean_counters(conn, now=first + 60) == 5  # it, and its four finer samples
    assert samples_kept(conn, "k", 3600) == 1
    assert counters.get_counter(conn, "k", 3600, now=first + 60) == [(bucket(T0, 3600), 1)]
    # nothing due: a pass removes nothing, whatever the precisions
    assert counters.clean_counters(conn, now=first + 120) == 0


@pytest.mark.usefixtures("bound_deployment")
def test_a_counter_with_more_live_samples_than_a_call_examines_is_cleaned_and_the_pass_ends(conn):
    """A busy counter keeps up to 840 samples in its windows (120 at each of 7 precisions), more
    than one cleaner call examines (CLEAN_FIELDS_PER_CALL): it is cleaned a page at a time. Once
    its scan was done it stayed due, so every call scanned it again and the pass never ended
    (``bench/longhaul.py`` hung in CI with 250 fields a call; with 500, any counter past 500
    live samples, a busy one after a day, would have hung the cleaner)."""
    now = float(int(time.time()))
    buckets = {p: {counters.bucket_start(now - k * p, p): 1 for k in range(130)} for p in counters.PRECISIONS}
    counters.write_counters(conn, {"busy": buckets})
    assert sum(map(len, buckets.values())) > 3 * counters.CLEAN_FIELDS_PER_CALL
    left = sum(1 for p, per in buckets.items() for b in per if b + counters.SAMPLE_COUNT * p <= now)
    passes: list[int] = []
    cleaner = threading.Thread(target=lambda: passes.append(counters.clean_counters(conn, now)), daemon=True)
    cleaner.start()
    cleaner.join(30)
    assert passes == [left], "the cleaner's pass did not end"
    for p, per in buckets.items():
        kept = sorted((b, n) for b, n in per.items() if b + counters.SAMPLE_COUNT * p > now)
        assert counters.get_counter(conn, "busy", p, now) == kept
    assert conn.hlen(keys.counter_hash("busy")) == sum(map(len, buckets.values())) - left
    assert counters.clean_counters(conn, now) == 0  # nothing due until its next sample leaves
    later = now + 7
    assert counters.clean_counters(conn, later) == sum(
        1 for p, per in buckets.items() for b in per if now < b + counters.SAMPLE_COUNT * p <= later
    )


def test_cleaner_never_drops_a_counter_written_during_cleaning(conn):
    """Writers race the cleaner on counters that keep getting emptied; none is lost."""
    stop = threading.Event()
    errors = []
    now = T0 + 200 * 86400

    def cleaner():
        while not stop.is_set():
            try:
                counters.clean_counters(conn, now=now)
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

    thread = threading.Thread(target=cleaner)
    thread.start()
    names = [f"race{i}" for i in range(400)]
    try:
        for name in names:
            counters.update_counter(conn, name, 1, now=T0)  # old: the cleaner empties and drops it
            counters.update_counter(conn, name, 1, now=now)  # racing that drop
    finally:
        stop.set()
        thread.join()
    assert not errors
    counters.clean_counters(conn, now=now)
    assert counters.known_counters(conn) == sorted(names)
    for name in names:
        assert counters.get_counter(conn, name, 86400, now=now) == [(bucket(now, 86400), 1)]


def test_message_id_applies_once(conn):
    counters.update_counter(conn, "m", 5, now=T0, message_id="task-1")
    counters.update_counter(conn, "m", 5, now=T0, message_id="task-1")
    counters.update_counter(conn, "m", 5, now=T0, message_id="task-2")
    assert counters.get_counter(conn, "m", 60, now=T0) == [(bucket(T0, 60), 10)]


def test_totals_past_two_to_the_53_stay_exact_and_a_correction_empties_them(conn):
    """A counter's buckets are summed in Lua (one HMGET and one HSET a counter, issue 21), where
    numbers are doubles: exact only within 2**53. Totals beyond it must still count every unit,
    as HINCRBY did, and a correction of the whole amount must remove the bucket."""
    big = MAX_AMOUNT
    for _ in range(3):
        counters.update_counter(conn, "bytes", big, now=T0)
    for step in (1, 2, -1, 7):
        counters.update_counter(conn, "bytes", step, now=T0)
    exact = 3 * big + 9  # 27,021,597,764,222,985: far past 2**53, odd (a double cannot hold it)
    for p in PRECISIONS:
        assert counters.get_counter(conn, "bytes", p, now=T0) == [(bucket(T0, p), exact)]
    counters.update_counter(conn, "bytes", -9, now=T0)
    for _ in range(3):
        counters.update_counter(conn, "bytes", -big, now=T0)
    assert all(counters.get_counter(conn, "bytes", p, now=T0) == [] for p in PRECISIONS)
    assert counters.known_counters(conn) == []


@pytest.mark.parametrize("held", ["abc", "1.5", "inf", "nan"])
@pytest.mark.usefixtures("bound_deployment")
def test_a_bucket_that_is_not_an_integer_fails_the_call_whole(raw_conn, held):
    """A bucket changed by hand to something HINCRBY would refuse: the call writes nothing (no
    other counter's bucket, no dedupe marker), so the repaired retry applies the message once."""
    counters.write_counters(raw_conn, {"a": {60: {T0 - T0 % 60: 1}}, "b": {60: {T0 - T0 % 60: 1}}})
    field = counters.field_of(T0 - T0 % 60, 60)
    raw_conn.hset(keys.counter_hash("b"), field, held)
    before = dump_all(raw_conn)
    same_group = keys.counter_tag("a") == keys.counter_tag("b")
    with pytest.raises(redis.ResponseError, match="not an integer"):
        counters.write_counters(
            raw_conn, {"a": {60: {T0 - T0 % 60: 2}}, "b": {60: {T0 - T0 % 60: 2}}}, message_id="fix-me"
        )
    if same_group:
        assert dump_all(raw_conn) == before
    else:  # one call a group: the other group's call applied (its own marker), this one nothing
        assert raw_conn.hget(keys.counter_hash("b"), field) == held.encode()
    raw_conn.hset(keys.counter_hash("b"), field, 1)
    for _ in range(2):
        counters.write_counters(
            raw_conn, {"a": {60: {T0 - T0 % 60: 2}}, "b": {60: {T0 - T0 % 60: 2}}}, message_id="fix-me"
        )
    assert [counters.get_counter(raw_conn, name, 60, now=T0) for name in "ab"] == [[(bucket(T0, 60), 3)]] * 2


@pytest.mark.parametrize(
    "kwargs",
    [
        {"name": ""},
        {"name": "x" * 1025},
        {"name": "bad\nname"},
        {"name": "bad\x00"},
        {"name": 5},
        {"name": None},
        {"count": 1.0},
        {"count": True},
        {"count": "1"},
        {"count": 2**60},
        {"now": -1},
        {"now": float("nan")},
        {"now": float("inf")},
        {"now": "1700000000"},
        {"now": True},
    ],
)
def test_bad_input_is_refused_before_any_write(raw_conn, kwargs):
    counters.update_counter(raw_conn, "seed", 1, now=T0)
    before = dump_all(raw_conn)
    args = {"name": "ok", "count": 1, "now": T0} | kwargs
    with pytest.raises(InvalidInput):
        counters.update_counter(raw_conn, **args)
    assert dump_all(raw_conn) == before


@pytest.mark.parametrize("precision", [0, 2, 60.0, "60", None, True])
def test_unknown_precision_is_refused(conn, precision):
    with pytest.raises(InvalidInput):
        counters.get_counter(conn, "hits", precision)


def test_name_of_1024_chars_and_braces_is_accepted(conn):
    name = "{" + "n" * 1022 + "}"
    counters.update_counter(conn, name, 2, now=T0)
    assert counters.get_counter(conn, name, 1, now=T0) == [(T0, 2)]
    assert counters.known_counters(conn) == [name]
