"""Per-visit latency on an idle stack with the documented worker command (``-Q visits,maintenance``):
from ``.delay()`` in the app to the visit in Redis, under 50 ms. The broker transport used to
wait on one of the two queues only, so a visit could wait a whole second to be noticed."""

from __future__ import annotations

import random
import statistics
import time

import pytest

from counters_tasks import sitestats, tasks
from counters_tasks.core.days import local_day
from tests.support.procs import celery_env, start_worker

pytestmark = pytest.mark.processes

VISITS = 30


def test_a_visit_reaches_redis_within_50_ms_of_delay(fault_env, counters_conn, publisher, tmp_path, capsys):
    worker = start_worker(celery_env(fault_env["COUNTERS_REDIS_URL"], **fault_env), tmp_path / "w.log",
                          queues="visits,maintenance").wait_ready()
    rng = random.Random(3)
    latencies = []
    try:
        time.sleep(2)  # the scenario: an idle stack (the worker is waiting for messages)
        for n in range(VISITS):
            now = time.time()
            day = local_day(now)
            sent = time.perf_counter()
            tasks.record_visit.apply_async((f"192.0.2.{n + 1}", "/latency", None, now), producer=publisher)
            deadline = sent + 5
            while sitestats.site_visit_info(counters_conn, day, "/latency").pv < n + 1:
                assert time.perf_counter() < deadline, worker.output()[-3000:]
                time.sleep(0.001)
            latencies.append(time.perf_counter() - sent)
            time.sleep(rng.uniform(0.05, 0.3))  # idle again between visits
    finally:
        worker.stop()
    median, worst = statistics.median(latencies), max(latencies)
    with capsys.disabled():
        print(f"\n[latency] .delay() -> Redis, idle worker on visits,maintenance: median {median * 1000:.1f} ms, "
              f"p90 {sorted(latencies)[int(0.9 * VISITS) - 1] * 1000:.1f} ms, max {worst * 1000:.1f} ms over {VISITS} visits")
    assert median < 0.05
    assert worst < 0.2
