"""A worker that cannot be stopped by a message: raw messages a foreign or broken producer could
put on the queue (a body that is not ``[args, kwargs, embed]``, not JSON at all, not even UTF-8,
no task name or id, a 40 MB batch) sit among good ones. The worker must stay alive, apply every good message exactly,
set each bad one aside in the dead letters with its reason, never restore it, and let an
operator list, requeue and drop them."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time

import pytest

from counters_tasks import counters, sitestats, tasks
from counters_tasks.core.days import local_day
from counters_tasks.local.waiting import wait_until
from counters_tasks.store import keys
from tests.support.faults import wait_idle
from tests.support.procs import REPO, celery_env, start_worker
from tests.support.task_events import TaskEventLog

pytestmark = pytest.mark.processes


def template(broker_conn, publisher, task, args) -> dict:
    """A real message of ``task``, taken back off the broker to be edited."""
    task.apply_async(args, producer=publisher)
    return json.loads(broker_conn.rpop("visits"))


def with_body(message: dict, body: object) -> str:
    edited = json.loads(json.dumps(message))
    edited["body"] = base64.b64encode(json.dumps(body).encode()).decode()
    return json.dumps(edited)


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "counters_tasks", "dead-letters", *args],
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_poison_messages_are_set_aside_and_the_worker_goes_on(
    fault_env, counters_conn, broker_conn, publisher, tmp_path, monkeypatch
):
    now = float(int(time.time()))
    day = local_day(now)
    visit = template(broker_conn, publisher, tasks.record_visit, ("192.0.2.1", "/t", None, now))
    counter = template(broker_conn, publisher, tasks.update_counter, ("poison", 1, now))
    no_task = json.loads(json.dumps(counter))
    del no_task["headers"]["task"]
    no_id = json.loads(json.dumps(visit))  # Celery's request read headers["id"]: a KeyError in the worker's loop
    del no_id["headers"]["id"]
    kombu_type = json.loads(json.dumps(counter))  # JSON, but not what kombu's decoder accepts
    kombu_type["headers"]["sent_at"] = {"__type__": "datetime", "__value__": "not a date"}
    huge = [{"ip": "192.0.2.9", "path": "/" + "x" * 1000, "ts": now}] * 40_000  # ~40 MB
    big = template(broker_conn, publisher, tasks.record_visits, ([],))
    poison = {
        "bad_body": [with_body(visit, {"a": 1}), with_body(counter, {"a": 1}), with_body(counter, [1, 2])],
        "not_json": ["{this is not json", json.dumps(kombu_type), b"\xff\xfe{not UTF-8 " + visit["body"].encode()],
        "no_task": [json.dumps(no_task)],
        "no_id": [json.dumps(no_id)],
        "oversize": [with_body(big, [[huge], {}, {}])],
    }
    good = [(f"10.1.{i // 256}.{i % 256}", f"/g{i % 5}") for i in range(1, 301)]
    for n, (ip, path) in enumerate(good):
        tasks.record_visit.apply_async((ip, path, None, now), producer=publisher)
        tasks.update_counter.apply_async(("good", 1, now), producer=publisher)
        if n % 60 == 0:
            for raws in poison.values():
                for raw in raws:
                    broker_conn.lpush("visits", raw)
    expected_dead = {reason: len(raws) * 5 for reason, raws in poison.items()}
    env = {**fault_env, "COUNTERS_VISIBILITY_TIMEOUT": "5", "COUNTERS_DEDUPE_TTL": "200"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    worker = start_worker(celery_env(fault_env["COUNTERS_REDIS_URL"], **env), tmp_path / "w.log")
    try:
        wait_until(
            lambda: sitestats.site_visit_info(counters_conn, day).pv >= len(good),
            timeout=90,
            what=f"the good visits; log:\n{worker.output()[-3000:]}",
        )
        wait_idle(broker_conn)
        time.sleep(8)  # past the 5 s visibility timeout: nothing set aside may come back
        wait_idle(broker_conn)
        assert worker.process.poll() is None, worker.output()[-3000:]
    finally:
        worker.stop()
    assert sitestats.site_visit_info(counters_conn, day).pv == len(good)
    assert counters.get_counter(counters_conn, "good", 86400, now=now)[0][1] == len(good)
    assert counters.get_counter(counters_conn, "poison", 86400, now=now) == []
    reasons = {k.decode(): int(v) for k, v in broker_conn.hgetall(keys.dead_letter_reasons()).items()}
    assert reasons == expected_dead
    assert broker_conn.llen(keys.dead_letters()) == sum(expected_dead.values())
    assert broker_conn.hlen("unacked") == 0

    listed = json.loads(cli(env, "list", "--json", "--limit", "100").stdout)
    assert listed["count"] == sum(expected_dead.values()) and {r["reason"] for r in listed["records"]} == set(poison)
    assert cli(env, "drop", "--index", "0").stdout.strip() == "dropped 1"
    requeued = cli(env, "requeue", "--all")
    assert requeued.returncode == 0, requeued.stderr
    kept = broker_conn.llen(keys.dead_letters())  # an oversize record keeps only the start of its payload,
    # a record of bytes that are not UTF-8 shows them escaped: neither is the message as it was, so neither is sent
    assert kept == sum(1 for r in listed["records"][1:] if r.get("truncated") or r.get("escaped"))
    dropped = listed["records"][0]
    assert kept == expected_dead["oversize"] + 5 - (1 if dropped.get("truncated") or dropped.get("escaped") else 0)
    assert broker_conn.llen("visits") == sum(expected_dead.values()) - 1 - kept
    assert cli(env, "drop", "--all").returncode == 0 and broker_conn.llen(keys.dead_letters()) == 0


def test_calls_that_keep_failing_are_set_aside_then_requeued_once_fixed(
    fault_env, counters_server, counters_conn, broker_conn, publisher, tmp_path, monkeypatch
):
    """The counters' Redis user loses the right to run scripts (an ACL tightened by mistake):
    every write fails with NOPERM, which is not Redis being away, so after COUNTERS_MAX_ATTEMPTS
    tries each message is set aside, not retried forever nor dropped; once the ACL is repaired,
    a requeue applies them all exactly once."""
    now = float(int(time.time()))
    day = local_day(now)
    counters_conn.execute_command("ACL", "SETUSER", "worker", "on", ">pw", "~*", "&*", "+@all", "-evalsha", "-eval")
    url = counters_server.url.replace("redis://", "redis://worker:pw@")
    env = {**fault_env, "COUNTERS_REDIS_URL": url, "COUNTERS_MAX_ATTEMPTS": "2"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with TaskEventLog.listening(fault_env["CELERY_BROKER_URL"]) as task_log:
        # task events on, as Flower turns them on when it watches (off by default)
        worker = start_worker(celery_env(url, **env), tmp_path / "w.log", extra=("-E",))
        try:
            sent = [
                tasks.record_visit.apply_async((f"192.0.2.{n + 1}", "/a", None, now), producer=publisher).id
                for n in range(3)
            ]
            sent.append(
                tasks.record_visits.apply_async(
                    ([{"ip": "192.0.2.9", "path": "/b", "ts": now}],), producer=publisher
                ).id
            )
            sent.append(tasks.update_counter.apply_async(("signups", 2, now), producer=publisher).id)
            wait_until(
                lambda: broker_conn.llen(keys.dead_letters()) >= 5,
                timeout=90,
                what=f"the failing calls to be set aside; log:\n{worker.output()[-3000:]}",
            )
            wait_idle(broker_conn)
            records = [json.loads(r) for r in broker_conn.lrange(keys.dead_letters(), 0, -1)]
            assert sorted(r["task"] for r in records) == (
                ["counters_tasks.record_visit"] * 3 + ["counters_tasks.record_visits", "counters_tasks.update_counter"]
            )
            assert all(r["reason"] == "failed" and "NOPERM" in r["error"].upper() for r in records), records
            assert sitestats.site_visit_info(counters_conn, day).pv == 0
            # Flower's failed tasks are the messages that did not count, batched or not
            wait_until(
                lambda: set(sent) <= task_log.ids("task-failed"),
                timeout=30,
                what=f"a task-failed event for each call set aside; got {task_log.ids('task-failed')}",
            )
            failed = [e for e in task_log.of("task-failed") if e["uuid"] in sent]
            assert len(failed) == 5 and all(
                "set aside in the dead letters after 2 tries" in e["exception"] and "NOPERM" in e["exception"].upper()
                for e in failed
            ), failed
            assert not set(sent) & task_log.ids("task-succeeded")
            counters_conn.execute_command("ACL", "SETUSER", "worker", "+evalsha", "+eval")  # the operator repairs it
            assert cli(env, "requeue", "--all").stdout.strip() == "requeued 5"
            wait_until(
                lambda: sitestats.site_visit_info(counters_conn, day).pv == 4,
                timeout=60,
                what=f"the requeued calls; log:\n{worker.output()[-3000:]}",
            )
            wait_idle(broker_conn)
            wait_until(
                lambda: set(sent) <= task_log.ids("task-succeeded"),
                timeout=30,
                what="a task-succeeded event for each requeued call (same ids)",
            )
            assert worker.process.poll() is None
        finally:
            worker.stop()
    assert sitestats.site_visit_info(counters_conn, day, "/a").pv == 3
    assert counters.get_counter(counters_conn, "signups", 86400, now=now)[0][1] == 2
    assert broker_conn.llen(keys.dead_letters()) == 0
