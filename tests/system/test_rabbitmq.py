"""RabbitMQ as the broker (a private node started here): real workers count ``.delay()`` per visit,
batches and ranking events exactly, a SIGKILLed worker loses nothing; ``counters-tasks health``,
``dead-letters`` and ``/metrics`` work (they crashed: "Redis URL must specify one of the following
schemes"), the dead letters being kept in the counters' Redis."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from kombu import Connection

from counters_tasks import ranking, sitestats, tasks
from counters_tasks.app import app
from counters_tasks.core.days import local_day
from counters_tasks.local.waiting import wait_until
from counters_tasks.ops import health
from counters_tasks.ops.web import create_app
from counters_tasks.store import keys
from tests.support.dashboard import TestClient
from tests.support.procs import REPO, celery_env, start_worker
from tests.support.rabbitmq import RabbitServer
from tests.support.servers import use_settings

pytestmark = [pytest.mark.processes, pytest.mark.rabbitmq]

NOW = time.time() - 30
DAY = local_day(NOW)


@pytest.fixture(scope="module")
def rabbit(tmp_path_factory) -> Iterator[RabbitServer]:
    server = RabbitServer(tmp_path_factory.mktemp("rabbitmq")).start()
    yield server
    server.stop()


@pytest.fixture
def env(rabbit, redis_url, raw_conn, monkeypatch) -> dict[str, str]:
    """The counters in the test Redis, the broker on RabbitMQ (its queues emptied)."""
    with Connection(rabbit.url) as connection:
        for queue in health.QUEUES:
            channel = connection.channel()
            try:
                channel.queue_purge(queue)
            except connection.channel_errors:
                pass  # not declared yet
            finally:
                channel.close()
    use_settings(monkeypatch, CELERY_BROKER_URL=rabbit.url)
    return celery_env(redis_url, CELERY_BROKER_URL=rabbit.url)


def publish(rabbit: RabbitServer, task, *calls: tuple) -> None:
    """``task.delay(*args)`` for each call, to RabbitMQ (this process's app may be bound to another
    broker, and to the Redis transport of ``worker/broker.py``)."""
    with Connection(rabbit.url) as connection:
        producer = app.amqp.Producer(connection)
        for args in calls:
            task.apply_async(args, producer=producer)


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "counters_tasks.ops.cli", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def visit_calls(count: int, first: int = 0, path: str = "/r") -> list[tuple]:
    return [(f"198.51.100.{(first + n) % 200 + 1}", path, None, NOW) for n in range(count)]


def test_health_dead_letters_and_metrics_answer_with_rabbitmq(rabbit, env, raw_conn, tmp_path):
    publish(rabbit, tasks.record_visit, *visit_calls(7))
    out = cli(env, "health", "--json")
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr  # no worker yet: unhealthy
    report = json.loads(out.stdout)
    assert report["queues"] == {"ok": True, "visits": 7, "maintenance": 0}
    assert report["dead_letters"]["count"] == 0 and not report["workers"]["ok"]
    listed = cli(env, "dead-letters", "list", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout)["records"] == [], listed.stderr
    scrape = TestClient(create_app(raw_conn, auth=None)).get("/metrics").text
    assert 'counters_queue_length{queue="visits"} 7.0' in scrape and 'counters_source_up{source="broker"} 1.0' in scrape
    worker = start_worker(env, tmp_path / "worker.log").wait_ready()
    try:
        wait_until(lambda: sitestats.site_visit_info(raw_conn, DAY, "/r").pv == 7, timeout=30,
                   what=f"7 visits through RabbitMQ; log:\n{worker.output()[-2000:]}")
        report = json.loads(cli(env, "health", "--json").stdout)
        assert report["workers"]["ok"] and report["queues"]["visits"] == 0
    finally:
        worker.stop()


def test_a_real_worker_counts_exactly_through_rabbitmq_and_a_sigkill_loses_nothing(rabbit, env, raw_conn, tmp_path):
    publish(rabbit, tasks.record_visit, *visit_calls(300))
    publish(rabbit, tasks.record_visits, *[([{"ip": f"203.0.113.{n % 50 + 1}", "path": "/b", "ts": NOW}
                                             for n in range(first, first + 100)],) for first in range(0, 500, 100)])
    publish(rabbit, tasks.incr_ranking, *[("posts", f"p{n % 3}", 1, NOW) for n in range(60)])
    first = start_worker(env, tmp_path / "w1.log", name="w1").wait_ready()
    wait_until(lambda: sitestats.site_visit_info(raw_conn, DAY, "/r").pv > 0, timeout=30, what="the first counts")
    first.kill()  # SIGKILL under load: what it held unacknowledged goes back to the queue
    publish(rabbit, tasks.record_visit, *visit_calls(100, first=300))
    second = start_worker(env, tmp_path / "w2.log", name="w2").wait_ready()
    try:
        wait_until(lambda: (sitestats.site_visit_info(raw_conn, DAY, "/r").pv,
                            sitestats.site_visit_info(raw_conn, DAY, "/b").pv) == (400, 500), timeout=90,
                   what=f"every visit once; log:\n{second.output()[-2000:]}")
        wait_until(lambda: ranking.Ranking(raw_conn, "posts").top(withscores=True, now=NOW)
                   == [("p0", 20), ("p1", 20), ("p2", 20)], timeout=30, what="every like once")
        report = json.loads(cli(env, "health", "--json").stdout)
        assert report["queues"]["visits"] == 0
        assert sitestats.site_visit_info(raw_conn, DAY, "/r").pv == 400  # never counted twice
        assert sitestats.site_visit_info(raw_conn, DAY, "/r").uv == 200
    finally:
        second.stop()


def test_a_failing_call_is_set_aside_in_the_counters_redis_and_requeued(rabbit, env, raw_conn, tmp_path):
    clobbered = keys.counter_hash("hits:/d")
    raw_conn.rpush(clobbered, "written by hand")
    env = {**env, "COUNTERS_MAX_ATTEMPTS": "2"}
    worker = start_worker(env, tmp_path / "worker.log").wait_ready()
    try:
        publish(rabbit, tasks.record_visit, *visit_calls(1, path="/d"))

        def records() -> list:
            out = cli(env, "dead-letters", "list", "--json")
            assert out.returncode == 0, out.stderr
            return json.loads(out.stdout)["records"]

        found = wait_until(records, timeout=120, what=f"the call set aside; log:\n{worker.output()[-3000:]}")
        assert "WRONGTYPE" in json.dumps(found) and raw_conn.llen(keys.dead_letters()) == 1
        raw_conn.delete(clobbered)
        out = cli(env, "dead-letters", "requeue", "--all")
        assert out.returncode == 0 and "requeued 1" in out.stdout, out.stderr
        wait_until(lambda: sitestats.site_visit_info(raw_conn, DAY, "/d").pv == 1, timeout=30,
                   what=f"the requeued call applied; log:\n{worker.output()[-3000:]}")
    finally:
        worker.stop()
