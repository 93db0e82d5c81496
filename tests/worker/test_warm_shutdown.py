"""A warm shutdown (SIGTERM, as a process manager or a graceful reload sends it) that comes while
the worker is handing a message to a pool process.

Celery's consumer, as it closes, drops from its pool's cache every job a pool process has not yet
said it took, even one already written to that process's pipe: the process runs it, then waits 30
seconds for the main process to read a result nobody reads any more (billiard's
``_ensure_messages_consumed``). The worker took 30 seconds to stop (past ``docker stop``'s 10
second grace period), and the message ran without being acknowledged, to run again on the next
worker. Seen twice in CI as a worker SIGKILLed by ``stop()``; it happens with a plain Celery app
(5.7.0, billiard 4.3.2) too. ``worker.consumer`` keeps those jobs.

The race is made certain here: the pool processes are paused (SIGSTOP) while the message is
written to one of them and while the worker closes, and go on (SIGCONT) once the main process
has sent each its stop sentinel, so the job is taken only after the consumer closed.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
import redis

from counters_tasks import tasks
from counters_tasks.core.settings import load_settings
from counters_tasks.local.waiting import wait_until
from tests.support.faults import broker_idle
from tests.support.procs import bytes_in_pipes, celery_env, purge_broker, start_worker
from tests.support.visit_model import model_of, random_visits

pytestmark = pytest.mark.workers

GRACE = 10.0
"""Seconds a stop may take: ``docker stop``'s default grace period."""


def waiting_bytes(pids: list[int]) -> dict[str, int]:
    """Bytes waiting in the pipes the pool processes hold (their inbound ones: they are paused)."""
    waiting: dict[str, int] = {}
    for pid in pids:
        waiting.update(bytes_in_pipes(pid))
    return waiting


@pytest.mark.processes
@pytest.mark.parametrize("per_visit", [False, True], ids=["record_visits", "record_visit"])
def test_sigterm_while_a_message_reaches_a_pool_process_stops_at_once_and_acknowledges_it(
    redis_url, raw_conn, tmp_path, per_visit
):
    broker = redis.Redis.from_url(load_settings({"COUNTERS_REDIS_URL": redis_url}).broker_url)
    purge_broker(redis_url)
    worker = start_worker(
        celery_env(redis_url, COUNTERS_WORKER_BATCH="5", COUNTERS_WORKER_BATCH_MS="5"), tmp_path / "w.log"
    ).wait_ready()
    pool = worker.pool_pids()
    assert len(pool) == 2, worker.output()[-2000:]
    visits = random_visits(1 if per_visit else 3, seed=100)  # one message (a lone record_visit goes at once)
    for pid in pool:
        os.kill(pid, signal.SIGSTOP)
    try:
        if per_visit:
            for v in visits:
                tasks.record_visit.delay(v["ip"], v["path"], v.get("session_id"), v["ts"])
        else:
            tasks.record_visits.delay(visits)
        written = wait_until(
            lambda: {pipe: n for pipe, n in waiting_bytes(pool).items() if n} or None,
            timeout=30,
            what=f"the message written to a pool process; log:\n{worker.output()[-2000:]}",
        )
        started = time.monotonic()
        worker.process.send_signal(signal.SIGTERM)
        wait_until(  # each process's stop sentinel: the consumer closed, the pool is being joined
            lambda: sum(1 for pipe, n in waiting_bytes(pool).items() if n > written.get(pipe, 0)) >= len(pool),
            timeout=30,
            what=f"the stop sentinels; log:\n{worker.output()[-2000:]}",
        )
    finally:
        for pid in pool:
            os.kill(pid, signal.SIGCONT)
    code = worker.stop(timeout=40)
    took = time.monotonic() - started
    assert code == 0 and took < GRACE, f"stopped in {took:.1f}s with {code}; log:\n{worker.output()[-4000:]}"
    assert model_of(visits).mismatches(raw_conn) == []  # applied once, by this worker
    assert broker_idle(broker)  # and acknowledged: nothing comes back to run again
