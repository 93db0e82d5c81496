"""The clock policy: an item more than COUNTERS_FUTURE_TOLERANCE ahead of this process's clock
is refused (nothing written, counted as "future"); an item within it can never make later
current bumps late, and a board poisoned by a bump from far ahead (written before this
policy) heals."""

from __future__ import annotations

import time
import uuid

import pytest

from counters_tasks import counters, ranking, refusals, sitestats, uniques, visits
from counters_tasks.errors import FutureTime
from counters_tasks.store import keys
from tests.support.servers import dump_all, use_settings

pytestmark = pytest.mark.cluster

YEAR_3000 = 32_503_680_000


@pytest.mark.parametrize("ahead", [3600, 86400, YEAR_3000])
def test_items_from_far_ahead_are_refused_and_write_nothing(conn, ahead):
    ts = ahead if ahead == YEAR_3000 else time.time() + ahead
    writes = [
        lambda: counters.update_counter(conn, "hits", 1, ts),
        lambda: sitestats.record_visit(conn, "192.0.2.1", "/", ts),
        lambda: uniques.count_visit(conn, str(uuid.uuid4()), ts),
        lambda: visits.apply_visit(conn, "192.0.2.1", "/", str(uuid.uuid4()), ts),
        lambda: ranking.Ranking(conn, "posts").incr("p1", 1, ts),
    ]
    for write in writes:
        with pytest.raises(FutureTime):
            write()
    assert dump_all(conn) == {}  # no key, so no TTL of ~974 years either


def test_the_tolerance_is_a_setting(conn, monkeypatch):
    use_settings(monkeypatch, COUNTERS_FUTURE_TOLERANCE=10)
    with pytest.raises(FutureTime):
        counters.update_counter(conn, "hits", 1, time.time() + 60)
    use_settings(monkeypatch, COUNTERS_FUTURE_TOLERANCE=120)
    counters.update_counter(conn, "hits", 1, time.time() + 60)
    assert counters.known_counters(conn) == ["hits"]


def test_a_batch_refuses_the_future_visit_alone(conn):
    now = time.time()
    batch = [{"ip": "192.0.2.1", "path": "/a", "ts": now}, {"ip": "192.0.2.2", "path": "/b", "ts": now + 86400}]
    assert visits.apply_visits(conn, batch, message_id="m") == 1
    assert sitestats.site_visit_info(conn).pv == 1
    assert refusals.counts(conn)["future"] == 1


def test_a_bump_within_the_tolerance_never_makes_current_bumps_late(conn, monkeypatch):
    real_now = time.time()
    boundary = (int(real_now) // 3600 + 1) * 3600
    clock = boundary - 60  # one minute before the hour
    monkeypatch.setattr(time, "time", lambda: clock)
    board = ranking.Ranking(conn, "hourly", 1, 1)  # a window of one slot
    board.incr("early", 1, boundary + 100)  # 160 s ahead (a clock slightly fast): accepted, next slot
    board.incr("now", 1, clock)  # the current slot must still count
    assert board.stats()["late"] == 0
    assert board.top(withscores=True, now=clock) == [("now", 1)]


@pytest.mark.usefixtures("bound_deployment")
def test_a_board_poisoned_by_a_far_future_watermark_heals(conn):
    now = time.time()
    board = ranking.Ranking(conn, "poisoned")
    board.incr("seed", 1, now)
    conn.hset(keys.ranking_meta("poisoned"), "wm", ranking.slot_of(now + 365 * 86400, 1))  # an old far-future bump
    board.incr("current", 2, now)
    assert board.stats()["late"] == 0
    assert board.top(withscores=True, now=now) == [("current", 2), ("seed", 1)]
