"""Every execution pool a deployment may choose (``celery worker --pool``: prefork, threads, solo,
gevent, eventlet), each a real ``celery worker`` process counting the visits of a site exactly:

- a backlog waiting when the worker starts (a restart under traffic): ``record_visits`` batches,
  as the middleware's ``VisitRecorder`` sends them, each acknowledged by Celery on its own;
- then a stream of ``record_visit`` messages (one ``.delay()`` a visit) that ends in a partial
  batch: fewer messages than ``COUNTERS_WORKER_BATCH`` are left in the worker's buffer, which only
  its time limit (``COUNTERS_WORKER_BATCH_MS``) applies. The whole stream must be counted within
  two of those time limits after its last message was sent.

No acknowledgement may fail on the way (``Couldn't ack`` in the log, the message left in the
broker's unacked records until the visibility timeout gives it back).

Issue 30, under ``--pool gevent -c 50``: the timer entry that applied a partial batch cancelled
itself (gevent's timer entries are greenlets, and cancelling one kills it), so the flush died
before it applied anything and no time limit was set again: the last messages of a stream
waited until a full batch came. The same run logged ``Couldn't ack ... MaxConnectionsError``:
kombu's Redis channel keeps at most 10 connections (``max_connections``) and raises past them,
while 50 greenlets acknowledged at once. docs/production.md, "Pools tested", lists these pools.

The producer's own time limit under the same green threads: ``VisitRecorder`` in an app
monkey-patched by gevent, then by eventlet, sends a partial batch on time.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import redis

from counters_tasks import tasks
from counters_tasks.core.settings import load_settings
from counters_tasks.local.waiting import wait_until
from counters_tasks.recorder import VisitRecorder
from tests.support.faults import broker_idle
from tests.support.procs import REPO, celery_env, purge_broker, start_worker
from tests.support.visit_model import model_of, random_visits
from tests.test_recorder import broker_visits

pytestmark = [pytest.mark.processes, pytest.mark.workers]

BATCH = 100
"""``COUNTERS_WORKER_BATCH`` (its default)."""
WAIT_MS = 1000
"""``COUNTERS_WORKER_BATCH_MS``: long enough that "two time limits" is a fair bound on a busy
machine, short enough that the test stays quick."""
STREAM = 1 + 2 * BATCH + BATCH // 2
"""The first message (applied at once: the stack was idle), two full batches, then half a batch
that only the time limit applies."""
BACKLOG_BATCHES, BACKLOG_BATCH_SIZE = 100, 5
"""``record_visits`` messages waiting when the worker starts, and visits in each: many small
tasks that finish together, so that a green pool acknowledges dozens of them at once (in trial
runs of this backlog under gevent -c 50, 30 to 45 greenlets held a broker connection at once)."""

POOLS = [  # about 8 s each: the default pool and the run with make test, the others with make test-long
    pytest.param("prefork", 2, id="prefork"),
    pytest.param("gevent", 50, id="gevent"),
    pytest.param("threads", 4, id="threads", marks=pytest.mark.long),
    pytest.param("solo", 1, id="solo", marks=pytest.mark.long),
    pytest.param("eventlet", 50, id="eventlet", marks=pytest.mark.long),
]


@pytest.mark.parametrize(("pool", "concurrency"), POOLS)
def test_every_pool_counts_a_stream_ending_in_a_partial_batch(pool, concurrency, redis_url, raw_conn, tmp_path):
    purge_broker(redis_url)
    broker = redis.Redis.from_url(load_settings({"COUNTERS_REDIS_URL": redis_url}).broker_url)
    backlog = random_visits(BACKLOG_BATCHES * BACKLOG_BATCH_SIZE, seed=30)
    stream = random_visits(STREAM, seed=31)
    recorder = VisitRecorder(max_batch=BACKLOG_BATCH_SIZE, max_buffer=len(backlog), flush_on_sigterm=False)
    for v in backlog:
        recorder.record(v["ip"], v["path"], v.get("session_id"), v["ts"])
    assert recorder.close(timeout=30) and recorder.stats()["batches"] >= BACKLOG_BATCHES

    model = model_of(backlog + stream)
    env = celery_env(redis_url, COUNTERS_WORKER_BATCH=str(BATCH), COUNTERS_WORKER_BATCH_MS=str(WAIT_MS))
    worker = start_worker(env, tmp_path / "worker.log", concurrency=concurrency, extra=("--pool", pool))
    try:
        worker.wait_ready()
        wait_until(
            lambda: model.visits_counted(raw_conn) >= len(backlog),
            timeout=60,
            what=f"the backlog to be counted; log:\n{worker.output()[-3000:]}",
        )
        wait_until(
            lambda: broker_idle(broker),
            timeout=10,  # a failed ack leaves its record till the visibility timeout
            what=f"the backlog to be acknowledged; log:\n{worker.output()[-3000:]}",
        )
        for v in stream:
            tasks.record_visit.delay(v["ip"], v["path"], v.get("session_id"), v["ts"])
        limit = 2 * WAIT_MS / 1000  # from the last message sent, now
        try:
            wait_until(
                lambda: model.visits_counted(raw_conn) >= len(backlog) + len(stream),
                timeout=limit,
                interval=0.02,
                what="the stream",
            )
        except TimeoutError:
            counted = model.visits_counted(raw_conn) - len(backlog)
            pytest.fail(
                f"--pool {pool}: {counted} of the stream's {len(stream)} visits counted {limit}s after "
                f"its last message; log:\n{worker.output()[-3000:]}"
            )
        wait_until(lambda: broker_idle(broker), timeout=10, what="the stream to be acknowledged")
    finally:
        code = worker.stop()
    log = worker.output()
    assert code == 0, log[-3000:]
    assert "Couldn't ack" not in log and "CRITICAL" not in log and "Traceback" not in log, log[-5000:]
    assert model.mismatches(raw_conn) == []


GREEN_APP = textwrap.dedent("""
    import sys
    if sys.argv[1] == "gevent":
        from gevent import monkey
        monkey.patch_all()
    else:
        import eventlet
        eventlet.monkey_patch()
    import time
    from counters_tasks import VisitRecorder

    recorder = VisitRecorder(max_batch=100, max_delay=float(sys.argv[2]))
    for n in range(int(sys.argv[3])):  # fewer than max_batch: only the time limit sends them
        recorder.record(f"192.0.2.{n + 1}", "/green")
    print("recorded", flush=True)
    time.sleep(60)  # the app idles, as a green server between requests (other greenlets run)
""")


@pytest.mark.parametrize("green", ["gevent", "eventlet"])
def test_the_recorder_of_a_green_app_sends_a_partial_batch_on_time(green, redis_url):
    """The producer's time limit under the same green threads (an app served by gunicorn's gevent
    or eventlet workers): ``VisitRecorder`` sends a partial batch ``max_delay`` after its first
    visit. Its sender waits on a condition with a deadline, not on a timer entry it could cancel
    from inside (what the worker's batch consumer did), checked here in a monkey-patched process."""
    purge_broker(redis_url)
    broker = redis.Redis.from_url(load_settings({"COUNTERS_REDIS_URL": redis_url}).broker_url)
    max_delay, visits = 0.5, 3
    app = subprocess.Popen(
        [sys.executable, "-c", GREEN_APP, green, str(max_delay), str(visits)],
        cwd=REPO,
        env=celery_env(redis_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert app.stdout.readline().strip() == "recorded", app.stderr.read()
        wait_until(
            lambda: broker_visits(broker) == visits,
            timeout=2 * max_delay,
            interval=0.02,
            what=f"the partial batch {2 * max_delay}s after it was recorded",
        )
    finally:
        app.kill()
        app.wait()
        broker.close()
