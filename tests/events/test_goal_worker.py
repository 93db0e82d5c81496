"""Goals through a real worker (issue 43, ``events.goal_day``): the worker's claimed batches of
per-visit ``record_visit`` and per-event ``track_event`` messages feed the goals table in the same
write as their own figures (the worker imports the table with the kinds), every figure exact.
(SIGKILL half way, through a web app: the acceptance tests of issue 43.)"""

from __future__ import annotations

import time

import pytest

from counters_tasks import events, tasks
from counters_tasks.local.waiting import wait_until

pytestmark = [pytest.mark.workers]


@pytest.fixture(scope="module")
def worker(batching_worker):
    return batching_worker


@pytest.mark.processes
def test_a_worker_counts_page_and_event_goals_exactly(worker, raw_conn):
    now = time.time() - 5
    since = now - 3600  # (defined before the worker's first write: it reads them then)
    events.define_goal(raw_conn, "pricing", page="/pricing", now=since)
    events.define_goal(raw_conn, "sales", event="buy", revenue="amount", now=since)
    try:
        for n in range(300):
            tasks.record_visit.delay(f"198.51.100.{n % 120}", ("/pricing", "/", "/docs")[n % 3], None, now)
        for n in range(200):
            tasks.track_event.delay("buy", {"amount": n % 5}, now, f"198.51.100.{n % 40}")

        def figures() -> dict[str, tuple[int, int, float | None]]:
            return {r.name: (r.conversions, r.converters, r.revenue) for r in events.goal_report(raw_conn).goals}

        expected = {"pricing": (100, 40, None), "sales": (200, 40, 400.0)}  # n % 120 for n = 0, 3, ...: 40 ips
        wait_until(lambda: figures() == expected, timeout=60, what=f"the worker; log:\n{worker.output()[-2000:]}")
        assert events.goal_report(raw_conn).visitors == 120
    finally:
        for name in ("pricing", "sales"):
            events.remove_goal(raw_conn, name)
