"""counters.get_series: zero-filled ranges against an exact model."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest

from counters_tasks import counters
from counters_tasks.counters import PRECISIONS, SAMPLE_COUNT
from counters_tasks.errors import InvalidInput
from tests.support.servers import dump_all

pytestmark = pytest.mark.cluster

T0 = 1_700_000_000


def model_series(updates, name, precision, start, end, now):
    totals = defaultdict(int)
    for n, count, ts in updates:
        if n == name:
            totals[int(ts // precision) * precision] += count
    out = []
    b = int(start // precision) * precision
    while b <= end:
        if b > now - SAMPLE_COUNT * precision:
            out.append((b, totals.get(b, 0)))
        b += precision
    return out


def test_random_streams_match_the_model(conn):
    rng = random.Random(8)
    updates = []
    now = T0
    for _ in range(400):
        now += rng.choice([0, 0.4, 1, 3, 59, 290, 3500])
        ts = now - rng.choice([0, 0, 2, 40, 700])
        name, count = rng.choice(["a", "b"]), rng.randint(-1, 5)
        counters.update_counter(conn, name, count, now=ts)
        updates.append((name, count, ts))
    for _ in range(60):
        p = rng.choice(PRECISIONS)
        query_now = now + rng.choice([0, 0, 1, p * 3])
        start = query_now - rng.uniform(0, 150 * p)
        end = start + rng.uniform(0, 140 * p)
        got = counters.get_series(conn, "a", p, start, end, now=query_now)
        assert got == model_series(updates, "a", p, start, end, query_now), (p, start, end)
        assert all(isinstance(b, int) and isinstance(t, int) for b, t in got)
        if rng.random() < 0.2:
            counters.clean_counters(conn, now=now)  # cleaning never changes an answer at or after its now


def test_every_bucket_present_and_zero_filled(conn):
    counters.update_counter(conn, "z", 4, now=T0 + 61)
    got = counters.get_series(conn, "z", 60, T0 - 100, T0 + 200, now=T0 + 200)
    first = (T0 - 100) // 60 * 60
    assert [b for b, _ in got] == list(range(first, T0 + 200 + 1, 60))
    assert sum(t for _, t in got) == 4 and dict(got)[(T0 + 61) // 60 * 60] == 4
    assert counters.get_series(conn, "never-written", 1, T0, T0 + 4, now=T0) == [(T0 + i, 0) for i in range(5)]


def test_range_is_clipped_to_retention(conn):
    counters.update_counter(conn, "r", 1, now=T0)
    now = T0 + SAMPLE_COUNT * 5 + 3
    got = counters.get_series(conn, "r", 5, T0 - 1000, now, now=now)
    assert got[0][0] > now - SAMPLE_COUNT * 5 and len(got) == SAMPLE_COUNT
    assert counters.get_series(conn, "r", 5, T0 - 1000, T0 - 500, now=now) == []


@pytest.mark.parametrize(
    "args",
    [
        ("", 60, T0, T0 + 1),
        ("n", 7, T0, T0 + 1),
        ("n", True, T0, T0 + 1),
        ("n", 60, T0 + 1, T0),
        ("n", 60, -1, T0),
        ("n", 60, T0, float("inf")),
        ("n", 60, "0", T0),
        ("n", 1, 0, 10**9 + 20_000),  # more than MAX_SERIES_POINTS after clipping
    ],
)
def test_bad_arguments_raise_before_anything(conn, args):
    before = dump_all(conn)
    with pytest.raises(InvalidInput):
        counters.get_series(conn, *args, now=10**9)
    assert dump_all(conn) == before
