"""One bad item never loses its batch, through a real worker: a ``record_visits`` batch with a
visit of a closed day, an ``incr_rankings`` batch with an bump for a board fixed to other
settings, worker-side batches of per-visit messages holding a message whose id is not a
string or is 100,000 characters long, and a ranking bump from a clock a day ahead. The good items are applied exactly, each bad one is
refused alone and counted by reason, the worker stays alive and the broker ends idle."""

from __future__ import annotations

import json
import time

import pytest

from counters_tasks import ranking, refusals, sitestats, tasks
from counters_tasks.core.days import local_day
from counters_tasks.local.waiting import wait_until
from tests.support.faults import wait_idle
from tests.support.procs import celery_env, start_worker

pytestmark = pytest.mark.processes


def with_id(broker_conn, queue: str, message_id: object) -> None:
    """Re-publish the newest message of ``queue`` with another id (as a foreign producer could)."""
    raw = json.loads(broker_conn.lpop(queue))
    raw["headers"]["id"] = message_id
    raw["properties"]["correlation_id"] = message_id
    broker_conn.lpush(queue, json.dumps(raw))


def test_bad_items_are_refused_alone(fault_env, counters_conn, broker_conn, publisher, tmp_path):
    now = float(int(time.time()))
    day = local_day(now)
    ranking.Ranking(counters_conn, "fixed", 48, 2).incr("x", 1, now)
    worker_env = celery_env(fault_env["COUNTERS_REDIS_URL"], **fault_env)
    # the worker is started after the messages are queued, so the odd ones sit in its batches
    good = [(f"192.0.2.{i}", f"/p{i % 7}") for i in range(1, 201)]
    for n, (ip, path) in enumerate(good):
        tasks.record_visit.apply_async((ip, path, None, now), producer=publisher)
        if n == 50:
            tasks.record_visit.apply_async(("198.51.100.1", "/int-id", None, now), producer=publisher)
            with_id(broker_conn, "visits", 12345)
        if n == 120:
            tasks.record_visit.apply_async(("198.51.100.2", "/long-id", None, now), producer=publisher)
            with_id(broker_conn, "visits", "x" * 100_000)
    batch = [
        {"ip": "203.0.113.1", "path": "/batch", "ts": now},
        {"ip": "203.0.113.2", "path": "/bad-session", "session_id": "zz", "ts": now},
        {"ip": "203.0.113.3", "path": "/batch", "ts": now},
        {"ip": "203.0.113.4", "path": "/history", "ts": now - 30 * 86400},
    ]  # history: counted
    tasks.record_visits.apply_async((batch,), producer=publisher)
    bumps = [
        {"board": "ok", "member": "a", "ts": now},
        {"board": "fixed", "member": "b", "ts": now},
        {"board": "ok", "member": "c", "amount": 2, "ts": now},
    ]
    tasks.incr_rankings.apply_async((bumps,), producer=publisher)
    tasks.incr_ranking.apply_async(("skewed", "from-tomorrow", 1, now + 86400), producer=publisher)  # a fast clock
    for _ in range(5):
        tasks.incr_ranking.apply_async(("skewed", "current", 1, now), producer=publisher)
    worker = start_worker(worker_env, tmp_path / "w.log")
    try:
        wait_until(
            lambda: sitestats.site_visit_info(counters_conn, day).pv >= len(good) + 2,
            timeout=60,
            what=f"the good visits; log:\n{worker.output()[-3000:]}",
        )
        wait_idle(broker_conn)
        assert worker.process.poll() is None
    finally:
        worker.stop()
    assert sitestats.site_visit_info(counters_conn, day).pv == len(good) + 2
    assert sitestats.site_visit_info(counters_conn, day, "/batch").pv == 2
    for path in ("/int-id", "/long-id", "/bad-session"):
        assert sitestats.site_visit_info(counters_conn, None, path).pv == 0
    assert sitestats.site_visit_info(counters_conn, local_day(now - 30 * 86400), "/history") == (
        local_day(now - 30 * 86400),
        1,
        1,
    )
    assert ranking.Ranking(counters_conn, "ok").top(withscores=True, now=now) == [("c", 2), ("a", 1)]
    assert ranking.Ranking(counters_conn, "fixed", 48, 2).top(withscores=True, now=now) == [("x", 1)]
    assert ranking.Ranking(counters_conn, "skewed").top(withscores=True, now=now) == [("current", 5)]
    counted = refusals.counts(counters_conn)
    assert (counted["malformed"], counted["bad_input"], counted["board_settings"], counted["future"]) == (2, 1, 1, 1)
    log = worker.output()
    assert log.count("refused (malformed)") == 2 and "refused (bad_input)" in log
