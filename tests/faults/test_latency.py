"""Per-visit latency on an idle stack: from ``.delay()`` in the app to the visit in Redis.

The worker consumes two queues (the documented ``-Q visits,maintenance``, and the other order,
where the visits queue is the one waited on by a connection of its own: ``worker/broker.py``'s
``QueueWait``). Goal (issue 21): 20 ms at p90 (asserted with a 2x margin: ``MARGIN``). Before: the worker waited on its queues in turn,
in 20 ms slices that Redis ends on its ``hz`` tick, and the worker-side batch waited its 20 ms
flush interval even for a lone visit: 26 ms at the median, 108 ms at p90.

A broker user whose ACL refuses ``CLIENT`` falls back to the slices, and still counts."""

from __future__ import annotations

import random
import statistics
import time

import pytest
import redis

from counters_tasks import sitestats, tasks
from counters_tasks.core.days import local_day
from tests.support.procs import celery_env, start_worker

pytestmark = [pytest.mark.processes, pytest.mark.timing]  # timing: alone under xdist (tests/support/timing.py)

VISITS = 30
GOAL_P90 = 0.020
"""Issue 21's goal: an idle stack applies a visit within 20 ms at p90 (5-6 ms measured: docs/figures.md)."""
MARGIN = 2
"""The test asserts the goal with a margin of 2x (40 ms): wall time on a shared 2-core machine has
slow moments, and a regression to the old design (108 ms at p90) still fails it; each run prints
the measured p90 against the goal itself."""


def visit_latencies(env, counters_conn, publisher, tmp_path, queues: str) -> tuple[list[float], str]:
    worker = start_worker(celery_env(env["COUNTERS_REDIS_URL"], **env), tmp_path / "w.log", queues=queues).wait_ready()
    rng = random.Random(3)
    latencies = []
    try:
        time.sleep(1)  # the scenario: an idle stack (the worker is waiting for messages)
        for n in range(VISITS):
            now = time.time()
            day = local_day(now)
            sent = time.perf_counter()
            tasks.record_visit.apply_async((f"192.0.2.{n + 1}", "/latency", None, now), producer=publisher)
            deadline = sent + 5
            while sitestats.site_visit_info(counters_conn, day, "/latency").pv < n + 1:
                assert time.perf_counter() < deadline, worker.output()[-3000:]
                time.sleep(0.0005)
            latencies.append(time.perf_counter() - sent)
            # idle again between visits (its 20 ms batch flushed), each sent at a random moment of the
            # old design's 20 and 100 ms waiting slices
            time.sleep(rng.uniform(0.05, 0.15))
    finally:
        worker.kill()  # measured: its warm shutdown (a second) proves nothing here, and the test runs alone
        worker.stop()  # (closes its log)
    return latencies, worker.output()


def p90(latencies: list[float]) -> float:
    return sorted(latencies)[int(0.9 * len(latencies)) - 1]


def report(capsys, what: str, latencies: list[float]) -> None:
    met = "met" if p90(latencies) < GOAL_P90 else "not met"
    with capsys.disabled():
        print(
            f"\n[latency] .delay() -> Redis, idle worker, {what}: median {statistics.median(latencies) * 1000:.1f} ms, "
            f"p90 {p90(latencies) * 1000:.1f} ms (goal {GOAL_P90 * 1000:.0f} ms: {met}), "
            f"max {max(latencies) * 1000:.1f} ms over {len(latencies)} visits"
        )


@pytest.mark.parametrize("queues", ["visits,maintenance", "maintenance,visits"])
def test_a_visit_reaches_redis_within_the_goal_at_p90(fault_env, counters_conn, publisher, tmp_path, capsys, queues):
    latencies, _output = visit_latencies(fault_env, counters_conn, publisher, tmp_path, queues)
    report(capsys, f"-Q {queues}", latencies)
    assert p90(latencies) < MARGIN * GOAL_P90, f"p90 {p90(latencies) * 1000:.1f} ms: goal 20 ms, budget 2x"
    assert max(latencies) < 0.2  # no visit waits a 100 ms slice or more (the old design's p90 was 108 ms)


def test_a_broker_user_without_client_commands_waits_in_slices(
    fault_env, broker_server, counters_conn, publisher, tmp_path, capsys
):
    admin = redis.Redis.from_url(broker_server.url)
    admin.acl_setuser(
        "worker", enabled=True, passwords=["+worker-pw"], keys=["*"], channels=["*"], commands=["+@all", "-client"]
    )
    host, port = broker_server.url.split("//")[1].split("/")[0].split(":")
    env = dict(fault_env, CELERY_BROKER_URL=f"redis://worker:worker-pw@{host}:{port}/1")
    latencies, output = visit_latencies(env, counters_conn, publisher, tmp_path, "maintenance,visits")
    report(capsys, "-Q maintenance,visits, CLIENT refused", latencies)
    assert "refused CLIENT ID / CLIENT UNBLOCK" in output
    assert max(latencies) < 0.5
