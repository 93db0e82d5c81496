"""The dead letters are not kept for good: a call set aside keeps its arguments (a visitor's IP
among them) and an undecodable message its raw payload, so records older than
``COUNTERS_DEAD_LETTER_DAYS`` (14) are removed by the hourly beat job ``expire_dead_letters``,
while younger ones, and all of them with the setting at 0, stay for the operator. Kept in the
counters' Redis (a broker that is not a Redis), a call's IPs are masked there."""

from __future__ import annotations

import json
import time

import pytest
import redis

from counters_tasks import tasks
from counters_tasks.core.settings import load_settings
from counters_tasks.local.waiting import wait_until
from counters_tasks.ops import health
from counters_tasks.store import keys
from counters_tasks.worker import dead_letters
from counters_tasks.worker.maintenance import job_status
from tests.support.procs import celery_env, purge_broker, start_worker
from tests.support.servers import is_cluster_run, use_settings

DAY = 86400.0


@pytest.fixture
def broker(redis_url: str):
    client = redis.Redis.from_url(load_settings({"COUNTERS_REDIS_URL": redis_url}).broker_url)
    client.delete(keys.dead_letters(), keys.dead_letter_reasons())
    yield client
    client.delete(keys.dead_letters(), keys.dead_letter_reasons())
    client.close()


def set_aside_at(when: float, n: int, tag: str) -> None:
    """``n`` + 1 records written by the worker's own code, on a clock that reads ``when``: ``n``
    failed calls holding an IP, and a raw message of 300 KB."""
    with pytest.MonkeyPatch.context() as clock:
        clock.setattr(dead_letters.time, "time", lambda: when)
        for i in range(n):
            dead_letters.set_aside_call(
                "counters_tasks.record_visit",
                f"{tag}-{i}",
                [f"198.51.100.{i % 250}", "/p"],
                {},
                "visits",
                RuntimeError("NOPERM"),
                5,
            )
        item = json.dumps(
            {
                "headers": {"task": "counters_tasks.record_visit", "id": f"{tag}-raw"},
                "properties": {"delivery_tag": f"{tag}-tag"},
                "body": "x" * 300_000,
            }
        )
        dead_letters.set_aside_message(
            dead_letters.store_client(),
            ("unacked", "unacked_index"),
            "visits",
            item,
            "not_json_content",
            json.loads(item),
        )


def kept_ids(broker) -> list[str]:
    return [json.loads(raw)["id"] for raw in broker.lrange(keys.dead_letters(), 0, -1)]


def test_records_older_than_the_setting_go_and_younger_ones_stay(broker, monkeypatch):
    use_settings(monkeypatch, COUNTERS_VISITOR_DAYS=30)  # (COUNTERS_DEAD_LETTER_DAYS, 14, is then the horizon)
    now = time.time()
    set_aside_at(now - 40 * DAY, 30, "old")
    set_aside_at(now - 15 * DAY, 20, "stale")
    set_aside_at(now - 13 * DAY, 10, "young")
    set_aside_at(now - 60, 5, "new")
    assert broker.llen(keys.dead_letters()) == 30 + 20 + 10 + 5 + 4

    assert dead_letters.expire_due(broker, now) == 30 + 1 + 20 + 1
    kept = kept_ids(broker)
    assert len(kept) == 10 + 5 + 2 and all(i.startswith(("young", "new")) for i in kept), kept
    assert dead_letters.summary(broker)["by_reason"] == {"failed": 65, "not_json_content": 4}  # ever set aside

    broker.config_resetstat()
    assert dead_letters.expire_due(broker, now) == 0  # nothing due: one read of the last record
    calls = {name: int(stats["calls"]) for name, stats in broker.info("commandstats").items()}
    assert calls.get("cmdstat_lindex") == 1 and "cmdstat_rpop" not in calls, calls

    assert dead_letters.expire_due(broker, now + 14 * DAY) == 17  # two weeks on, all of them
    assert broker.llen(keys.dead_letters()) == 0
    broker.rpush(keys.dead_letters(), b"not a record", json.dumps({"at": "yesterday"}))
    assert dead_letters.expire_due(broker, now) == 2  # of unknown age: removed as due, never stuck


def test_they_are_never_kept_past_the_visitor_days_and_the_setting_at_0_means_those(broker, monkeypatch):
    """Issue 44: a dead letter holds a visitor's message (a masked IP, a session id): visitor-level
    data, kept COUNTERS_DEAD_LETTER_DAYS but never past COUNTERS_VISITOR_DAYS (0: those days)."""
    now = time.time()
    set_aside_at(now - 400 * DAY, 3, "ancient")
    set_aside_at(now - 9 * DAY, 2, "nine")
    use_settings(monkeypatch, COUNTERS_DEAD_LETTER_DAYS=500, COUNTERS_VISITOR_DAYS=401, COUNTERS_AGGREGATE_DAYS=401)
    assert dead_letters.expire_due(broker, now) == 0
    assert broker.llen(keys.dead_letters()) == 3 + 1 + 2 + 1  # (each call sets aside a raw record too)
    use_settings(monkeypatch, COUNTERS_DEAD_LETTER_DAYS=0, COUNTERS_VISITOR_DAYS=10)
    assert dead_letters.expire_due(broker, now) == 4  # the 400-day-old ones (and the unknown's record)
    use_settings(monkeypatch, COUNTERS_DEAD_LETTER_DAYS=14, COUNTERS_VISITOR_DAYS=7)
    assert dead_letters.expire_due(broker, now) == 3  # nine days old: past the visitor days


def test_a_record_pushed_meanwhile_is_never_taken_for_the_old_one(broker, monkeypatch):
    """The step that found the last record old removes only that record: a requeue that could
    not send a truncated payload puts it back at the end between the read and the removal."""
    now = time.time()
    set_aside_at(now - 20 * DAY, 1, "old")
    real_lindex = redis.client.Pipeline.lindex
    pushed = []

    def lindex_then_push(pipe, name, index):
        found = real_lindex(pipe, name, index)
        if not pushed:  # another client writes between this read and the removal
            young = json.dumps({"reason": "oversize", "at": now, "id": "young-meanwhile"})
            pushed.append(broker.rpush(keys.dead_letters(), young))
        return found

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(redis.client.Pipeline, "lindex", lindex_then_push)
        assert dead_letters.expire(broker, now - 14 * DAY) == 0  # the read was spoilt: retried, now young at the end
    assert kept_ids(broker)[-1] == "young-meanwhile" and len(kept_ids(broker)) == 3


VISITS = [
    {"ip": "198.51.100.23", "path": "/a", "ts": 1.0},
    {"ip": "2001:db8:5:6::7", "path": "/b", "ts": 1.0},
    {"ip": "::ffff:192.0.2.44", "path": "/c", "ts": 1.0},
]
"""A ``record_visits`` batch: an IPv4, an IPv6 and an IPv4-mapped IPv6 address."""
RAW = ("198.51.100.23", "2001:db8:5:6::7", "192.0.2.44")


def test_a_call_kept_in_the_counters_redis_keeps_no_raw_ip(raw_conn, monkeypatch):
    """With a broker that is not a Redis the dead letters are in the counters' Redis: a call set
    aside there keeps its arguments and error with every IP masked as task events show them, and
    ``requeue`` keeps it (its masked IPs would be refused); a call without an IP is kept as it was."""
    use_settings(monkeypatch, CELERY_BROKER_URL="amqp://guest:guest@127.0.0.1:5672//")
    assert dead_letters.kept_with_the_counters()
    dead_letters.set_aside_call(
        "counters_tasks.record_visits",
        "batch-1",
        [VISITS],
        {},
        "visits",
        RuntimeError("no route to 198.51.100.23:6379 nor [2001:db8:5:6::7]:80"),
        5,
    )
    dead_letters.set_aside_call(
        "counters_tasks.record_visit",
        "visit-1",
        ["198.51.100.23"],
        {"path": "/a", "ip_again": "2001:db8:5:6::7"},
        "visits",
        RuntimeError("WRONGTYPE"),
        5,
    )
    dead_letters.set_aside_call(
        "counters_tasks.update_counter", "counter-1", ["signups", 1], {}, "visits", RuntimeError("WRONGTYPE"), 5
    )
    stored = raw_conn.lrange(keys.dead_letters(), 0, -1)
    assert len(stored) == 3 and not any(ip.encode() in raw for raw in stored for ip in RAW), stored
    counter, visit, batch = (json.loads(raw) for raw in stored)
    assert (
        batch["args"]
        == [
            [
                {**VISITS[0], "ip": "198.51.100.x"},
                {**VISITS[1], "ip": "2001:db8:5::/48"},
                {**VISITS[2], "ip": "192.0.2.x"},
            ]
        ]
        and batch["masked"] is True
    )
    assert batch["error"] == "RuntimeError: no route to 198.51.100.x:6379 nor [2001:db8:5::/48]:80"
    assert visit["args"] == ["198.51.100.x"] and visit["kwargs"] == {"path": "/a", "ip_again": "2001:db8:5::/48"}
    assert counter["args"] == ["signups", 1] and "masked" not in counter  # nothing changed: it can be sent again
    assert dead_letters.drop(raw_conn, 0) == 1  # the counter's call (the RabbitMQ tests requeue such a call)
    assert dead_letters.requeue(raw_conn, None, None) == 0  # no app: sending one would raise
    assert raw_conn.llen(keys.dead_letters()) == 2 and dead_letters.drop(raw_conn, None) == 2


def test_a_call_kept_on_the_brokers_redis_keeps_its_arguments_to_be_sent_again(raw_conn, broker):
    """The broker's Redis holds the raw IPs in its queues anyway (docs/reliability.md, "Where raw
    IPs live"): a call set aside there keeps its arguments as they were, so that requeue applies
    it; the counters' Redis gets nothing."""
    assert not dead_letters.kept_with_the_counters()
    dead_letters.set_aside_call(
        "counters_tasks.record_visits", "batch-1", [VISITS], {}, "visits", RuntimeError("WRONGTYPE"), 5
    )
    [record] = [json.loads(raw) for raw in broker.lrange(keys.dead_letters(), 0, -1)]
    assert record["args"] == [VISITS] and "masked" not in record
    assert raw_conn.llen(keys.dead_letters()) == 0


def test_the_beat_job_is_scheduled_hourly_on_the_maintenance_queue():
    from counters_tasks.worker.celery_defaults import beat_schedule, task_routes  # read at use: it reads the settings

    entry = beat_schedule["expire-dead-letters"]
    assert entry["task"] == tasks.expire_dead_letters.name == "counters_tasks.expire_dead_letters"
    assert entry["schedule"].minute == {30} and len(entry["schedule"].hour) == 24
    assert task_routes["counters_tasks.expire_dead_letters"] == {"queue": "maintenance"}
    assert "expire_dead_letters" in health.JOBS


@pytest.mark.processes
@pytest.mark.skipif(is_cluster_run(), reason="the broker is one server")
def test_a_real_worker_runs_the_job_and_reports_it(redis_url, raw_conn, broker, tmp_path):
    now = time.time()
    purge_broker(redis_url)
    set_aside_at(now - 30 * DAY, 12, "old")
    set_aside_at(now - DAY, 3, "new")
    worker = start_worker(celery_env(redis_url), tmp_path / "worker.log")
    try:
        tasks.expire_dead_letters.delay()
        wait_until(
            lambda: broker.llen(keys.dead_letters()) == 4,
            timeout=60,
            what=f"the old records to go ({broker.llen(keys.dead_letters())} kept, maintenance queue {broker.llen('maintenance')}); log:\n{worker.output()[-3000:]}",
        )
        status = wait_until(lambda: job_status(raw_conn, "expire_dead_letters"), timeout=10, what="the job's status")
    finally:
        assert worker.stop() == 0, worker.output()[-3000:]
    assert status["last_result"] == "13" and float(status["last_started"]) >= now - 5
    assert all(i.startswith("new") for i in kept_ids(broker))
    assert health.check(raw_conn, broker, now=time.time())["jobs"]["expire_dead_letters"]["last_result"] == "13"
