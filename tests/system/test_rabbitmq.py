"""RabbitMQ as the broker (a private node started here): real workers count ``.delay()`` per visit,
batches and ranking bumps exactly, a SIGKILLed worker loses nothing; ``counters-tasks health``,
``dead-letters`` and ``/metrics`` work (they crashed: "Redis URL must specify one of the following
schemes"), the dead letters being kept in the counters' Redis."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from kombu import Connection, Queue

from counters_tasks import counters, ranking, refusals, sitestats, tasks
from counters_tasks.app import app
from counters_tasks.core.days import local_day
from counters_tasks.core.privacy import masked_ip
from counters_tasks.local.waiting import wait_until
from counters_tasks.ops import health
from counters_tasks.store import keys
from tests.support import raw_ips
from tests.support.procs import celery_env, cli, run_python, start_worker
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


def visit_calls(count: int, first: int = 0, path: str = "/r") -> list[tuple]:
    return [(f"198.51.100.{(first + n) % 200 + 1}", path, None, NOW) for n in range(count)]


SCRAPE = """
from counters_tasks.ops.web import create_app
from counters_tasks.store.client import get_redis
from tests.support.dashboard import TestClient
print(TestClient(create_app(get_redis(), auth=None)).get("/metrics").text)
"""
"""``/metrics`` scraped in a process whose Celery app is configured with the environment's broker."""


def test_health_dead_letters_and_metrics_answer_with_rabbitmq(rabbit, env, raw_conn, tmp_path):
    publish(rabbit, tasks.record_visit, *visit_calls(7))
    out = cli(env, "health", "--json")
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr  # no worker yet: unhealthy
    report = json.loads(out.stdout)
    assert report["queues"] == {"ok": True, "visits": 7, "maintenance": 0}
    assert report["dead_letters"]["count"] == 0 and not report["workers"]["ok"]
    listed = cli(env, "dead-letters", "list", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout)["records"] == [], listed.stderr
    scraped = run_python(env, SCRAPE)  # an app process of RabbitMQ's: this one's Celery app keeps the session's broker
    assert scraped.returncode == 0, scraped.stderr
    scrape = scraped.stdout
    assert 'counters_queue_length{queue="visits"} 7.0' in scrape and 'counters_source_up{source="broker"} 1.0' in scrape
    worker = start_worker(env, tmp_path / "worker.log").wait_ready()
    try:
        wait_until(
            lambda: sitestats.site_visit_info(raw_conn, DAY, "/r").pv == 7,
            timeout=30,
            what=f"7 visits through RabbitMQ; log:\n{worker.output()[-2000:]}",
        )
        report = json.loads(cli(env, "health", "--json").stdout)
        assert report["workers"]["ok"] and report["queues"]["visits"] == 0
    finally:
        worker.stop()


def test_a_real_worker_counts_exactly_through_rabbitmq_and_a_sigkill_loses_nothing(rabbit, env, raw_conn, tmp_path):
    publish(rabbit, tasks.record_visit, *visit_calls(300))
    publish(
        rabbit,
        tasks.record_visits,
        *[
            ([{"ip": f"203.0.113.{n % 50 + 1}", "path": "/b", "ts": NOW} for n in range(first, first + 100)],)
            for first in range(0, 500, 100)
        ],
    )
    publish(rabbit, tasks.incr_ranking, *[("posts", f"p{n % 3}", 1, NOW) for n in range(60)])
    first = start_worker(env, tmp_path / "w1.log", name="w1").wait_ready()
    wait_until(lambda: sitestats.site_visit_info(raw_conn, DAY, "/r").pv > 0, timeout=30, what="the first counts")
    first.kill()  # SIGKILL under load: what it held unacknowledged goes back to the queue
    publish(rabbit, tasks.record_visit, *visit_calls(100, first=300))
    second = start_worker(env, tmp_path / "w2.log", name="w2").wait_ready()
    try:
        wait_until(
            lambda: (
                (sitestats.site_visit_info(raw_conn, DAY, "/r").pv, sitestats.site_visit_info(raw_conn, DAY, "/b").pv)
                == (400, 500)
            ),
            timeout=90,
            what=f"every visit once; log:\n{second.output()[-2000:]}",
        )
        wait_until(
            lambda: (
                ranking.Ranking(raw_conn, "posts").top(withscores=True, now=NOW) == [("p0", 20), ("p1", 20), ("p2", 20)]
            ),
            timeout=30,
            what="every like once",
        )
        report = json.loads(cli(env, "health", "--json").stdout)
        assert report["queues"]["visits"] == 0
        assert sitestats.site_visit_info(raw_conn, DAY, "/r").pv == 400  # never counted twice
        assert sitestats.site_visit_info(raw_conn, DAY, "/r").uv == 200
    finally:
        second.stop()


def publish_raw(rabbit: RabbitServer, body: str, task: str, message_id: str) -> None:
    """A message as a foreign or broken producer sends it: a task header, any body; to the
    ``visits`` queue alone, as Celery sends a task (the default exchange: the ``visits`` exchange
    is bound to the ``maintenance`` queue too)."""
    with Connection(rabbit.url) as connection:
        connection.Producer().publish(
            body,
            exchange="",
            routing_key="visits",
            declare=[Queue("visits")],
            content_type="application/json",
            content_encoding="utf-8",
            headers={"task": task, "id": message_id},
        )


def test_malformed_messages_are_set_aside_and_the_worker_goes_on(rabbit, env, raw_conn, tmp_path):
    """A body that is JSON but not Celery's ``[args, kwargs, embed]`` killed the worker's main
    process (``ValueError: not enough values to unpack``) and every visit sent after it waited;
    a body that is not JSON was logged by Celery with its raw IP (CRITICAL "Can't decode message
    body") and acknowledged: lost; a message of a task the worker does not know was logged whole
    and dropped. Each is set aside in the counters' Redis with its reason and
    its IPs masked, listed by ``dead-letters list``, and the visits behind them all count."""
    v4, v6 = "192.0.2.61", "2001:db8:61::61"
    poison = [
        ("bad_body", json.dumps([1, 2]), "counters_tasks.record_visit"),
        ("bad_body", json.dumps([[v4, "/p"], {}]), "counters_tasks.update_counter"),
        ("not_json", f"not json: {v4} {v6}", "counters_tasks.record_visit"),
        ("not_json", json.dumps({"ip": v6, "path": "/p"})[:-1], "counters_tasks.incr_ranking"),
        ("unknown_task", json.dumps([[v4, "/p"], {}, {}]), "counters_tasks.no_such_task"),
    ]
    worker = start_worker(env, tmp_path / "worker.log").wait_ready()
    try:
        for n, (_reason, body, task) in enumerate(poison):
            publish_raw(rabbit, body, task, f"poison-{n}")
        publish(rabbit, tasks.record_visit, *visit_calls(50, path="/after"))
        wait_until(
            lambda: sitestats.site_visit_info(raw_conn, DAY, "/after").pv == 50,
            timeout=60,
            what=f"the visits sent after the malformed messages; log:\n{worker.output()[-3000:]}",
        )
        wait_until(
            lambda: raw_conn.llen(keys.dead_letters()) == len(poison),
            timeout=30,
            what=f"the malformed messages set aside; log:\n{worker.output()[-3000:]}",
        )
        assert json.loads(cli(env, "health", "--json").stdout)["queues"]["visits"] == 0
        assert worker.process.poll() is None, worker.output()[-3000:]
    finally:
        worker.stop()
    reasons = {k.decode(): int(v) for k, v in raw_conn.hgetall(keys.dead_letter_reasons()).items()}
    assert reasons == {"bad_body": 2, "not_json": 2, "unknown_task": 1}
    listed = cli(env, "dead-letters", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    records = json.loads(listed.stdout)["records"]
    assert sorted((r["reason"], r["id"], r["task"]) for r in records) == sorted(
        (reason, f"poison-{n}", task) for n, (reason, _body, task) in enumerate(poison)
    )
    assert masked_ip(v4) in json.dumps(records) and masked_ip(v6) in json.dumps(records)
    assert raw_ips.raw_ips_in(raw_conn, [v4, v6]) == {}
    log = worker.output()
    assert v4 not in log and v6 not in log and "Traceback" not in log, log[-3000:]
    requeued = cli(env, "dead-letters", "requeue", "--all")  # a body without its message cannot be sent again
    assert requeued.returncode == 0 and "requeued 0" in requeued.stdout, requeued.stdout + requeued.stderr
    assert raw_conn.llen(keys.dead_letters()) == len(poison) and not raw_conn.exists("visits")


@pytest.mark.usefixtures("bound_deployment")  # (a counter's key clobbered by hand)
def test_a_failing_call_is_set_aside_in_the_counters_redis_and_requeued(rabbit, env, raw_conn, tmp_path):
    """Calls that keep failing are set aside in the counters' Redis; once mended, ``requeue``
    applies the one that holds no IP, and keeps the visit, whose IP is masked there."""
    clobbered = keys.counter_hash("hits:/d")
    raw_conn.rpush(clobbered, "written by hand")
    env = {**env, "COUNTERS_MAX_ATTEMPTS": "2"}
    worker = start_worker(env, tmp_path / "worker.log").wait_ready()
    try:
        publish(rabbit, tasks.record_visit, *visit_calls(1, path="/d"))
        publish(rabbit, tasks.update_counter, ("hits:/d", 3, NOW))

        def records() -> list:
            out = cli(env, "dead-letters", "list", "--json")
            assert out.returncode == 0, out.stderr
            found = json.loads(out.stdout)["records"]
            return found if len(found) == 2 else []

        found = wait_until(records, timeout=120, what=f"the calls set aside; log:\n{worker.output()[-3000:]}")
        assert "WRONGTYPE" in json.dumps(found) and raw_conn.llen(keys.dead_letters()) == 2
        masked = {r["task"]: r.get("masked", False) for r in found}
        assert masked == {"counters_tasks.record_visit": True, "counters_tasks.update_counter": False}
        raw_conn.delete(clobbered)
        out = cli(env, "dead-letters", "requeue", "--all")
        assert out.returncode == 0 and "requeued 1" in out.stdout, out.stderr
        wait_until(
            lambda: [n for _start, n in counters.get_counter(raw_conn, "hits:/d", 86400, now=NOW)] == [3],
            timeout=30,
            what=f"the requeued call applied; log:\n{worker.output()[-3000:]}",
        )
        kept = json.loads(cli(env, "dead-letters", "list", "--json").stdout)["records"]
        assert [r["task"] for r in kept] == ["counters_tasks.record_visit"]  # the visit stays, to be dropped
    finally:
        worker.stop()


@pytest.mark.usefixtures("bound_deployment")  # (a counter's key clobbered by hand)
def test_no_raw_ip_is_kept_in_the_counters_redis(rabbit, env, raw_conn, tmp_path):
    """Visits through every path a message can take with RabbitMQ as the broker (applied, refused
    as bad input or malformed, set aside after failing, undecodable and set aside), sent by an app's
    ``.delay()`` and ``VisitRecorder``: the counters' Redis holds no raw IP anywhere (docs/keys.md:
    "Raw IPs are never stored"), though it keeps the dead letters with this broker: a call set
    aside keeps its IPs masked, is listed, is not sent again (it could not be applied), and goes
    with ``drop``."""
    raw_conn.rpush(keys.counter_hash(f"hits:{raw_ips.FAILING_PATH}"), "written by hand")
    env = {**env, "COUNTERS_MAX_ATTEMPTS": "2"}
    worker = start_worker(env, tmp_path / "worker.log").wait_ready()
    try:
        raw_ips.send(env, raw_ips.counted_actions(NOW))
        v4, v6 = raw_ips.PATHS["poison"]
        for body in (f"not json: {v4} {v6}", json.dumps({"ip": v4, "path": "/p"})[:-1]):  # a broken producer's
            publish_raw(rabbit, body, "counters_tasks.record_visit", f"poison-{len(body)}")
        raw_ips.wait_for(
            lambda: (
                sitestats.site_visit_info(raw_conn, DAY, raw_ips.APPLIED_PATH).pv,
                {r: n for r, n in refusals.counts(raw_conn).items() if n},
            ),
            (raw_ips.APPLIED, raw_ips.REFUSED),
            worker,
            "the visits applied and refused",
        )
        raw_ips.send(env, raw_ips.failing_actions(NOW))
        raw_ips.wait_for(
            lambda: raw_conn.llen(keys.dead_letters()),
            raw_ips.SET_ASIDE + 2,
            worker,
            "the calls and the undecodable messages set aside",
        )
        report = json.loads(cli(env, "health", "--json").stdout)
        assert report["queues"]["visits"] == 0 and worker.process.poll() is None
    finally:
        worker.stop()
    assert raw_ips.raw_ips_in(raw_conn, raw_ips.all_ips()) == {}
    listed = cli(env, "dead-letters", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    records = json.loads(listed.stdout)["records"]
    shown = json.dumps(records)
    for ip in raw_ips.PATHS["delay_failed"] + raw_ips.PATHS["recorder_failed"] + raw_ips.PATHS["poison"]:
        assert masked_ip(ip) in shown, (ip, shown)  # masked, as Flower shows them
    failed = [r for r in records if r["reason"] == "failed"]
    assert {r["task"] for r in failed} == {"counters_tasks.record_visit", "counters_tasks.record_visits"}
    assert len(failed) == raw_ips.SET_ASIDE and all(r["masked"] and "WRONGTYPE" in r["error"] for r in failed), records
    assert sorted(r["reason"] for r in records if r not in failed) == ["not_json", "not_json"]
    assert all(r["masked"] for r in records), records
    requeued = cli(env, "dead-letters", "requeue", "--all")
    assert requeued.returncode == 0 and "requeued 0" in requeued.stdout, requeued.stdout + requeued.stderr
    assert raw_conn.llen(keys.dead_letters()) == raw_ips.SET_ASIDE + 2  # kept: the operator drops them
    dropped = cli(env, "dead-letters", "drop", "--all")
    assert dropped.returncode == 0 and f"dropped {raw_ips.SET_ASIDE + 2}" in dropped.stdout, dropped.stderr
