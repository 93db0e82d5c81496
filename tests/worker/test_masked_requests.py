"""A real worker shows a call's arguments with IP addresses masked whatever its producer wrote: a
message whose ``argsrepr`` / ``kwargsrepr`` headers carry raw IPs (another service's Celery app, or
a caller giving its own texts) is reported in the worker's task events with the networks only
(``worker.batch_consumer.MaskedRequest``), for batched ``record_visit`` messages and for a
``record_visits`` batch (a ``CountingTask``: Celery's own strategy), and is counted all the same."""

from __future__ import annotations

import json

import pytest
import redis

from counters_tasks import tasks
from counters_tasks.app import app
from counters_tasks.core.settings import load_settings
from counters_tasks.local.waiting import wait_until
from tests.support.procs import celery_env, purge_broker, start_worker
from tests.support.task_events import TaskEventLog
from tests.support.visit_model import model_of, random_visits

pytestmark = [pytest.mark.workers, pytest.mark.processes]


def test_the_worker_masks_argument_texts_a_producer_left_raw(redis_url, raw_conn, tmp_path):
    purge_broker(redis_url)
    visits = random_visits(40, seed=33)
    ids = []
    for v in visits[:20]:  # positional, texts given by the caller (kept by the app's MaskingAMQP)
        args = (v["ip"], v["path"], v.get("session_id"), v["ts"])
        ids.append(tasks.record_visit.apply_async(args, argsrepr=repr(args), kwargsrepr="{}").id)
    for v in visits[20:30]:  # by keyword
        kwargs = {"ip": v["ip"], "path": v["path"], "session_id": v.get("session_id"), "ts": v["ts"]}
        ids.append(tasks.record_visit.apply_async(kwargs=kwargs, argsrepr="()", kwargsrepr=repr(kwargs)).id)
    batch = (visits[30:],)
    ids.append(tasks.record_visits.apply_async(batch, argsrepr=repr(batch), kwargsrepr="{}").id)

    conn = redis.Redis.from_url(load_settings({"COUNTERS_REDIS_URL": redis_url}).broker_url)
    try:  # the producer's texts, as the worker receives them: every raw IP in them
        headers = [json.loads(m)["headers"] for m in conn.lrange("visits", 0, -1)]
    finally:
        conn.close()
    assert {h["id"] for h in headers} == set(ids)
    sent_texts = json.dumps([[h["argsrepr"], h["kwargsrepr"]] for h in headers])
    assert all(v["ip"] in sent_texts for v in visits)

    with TaskEventLog.listening(app.conf.broker_url) as task_log:
        worker = start_worker(
            celery_env(redis_url, COUNTERS_WORKER_BATCH="10", COUNTERS_WORKER_BATCH_MS="20"),
            tmp_path / "worker.log",
            concurrency=1,
            extra=("-E",),
        )
        try:
            wait_until(
                lambda: set(ids) <= task_log.ids("task-succeeded"),
                timeout=60,
                what=f"{len(ids)} task-succeeded task events; log:\n{worker.output()[-2000:]}",
            )
        finally:
            assert worker.stop() == 0, worker.output()[-3000:]
        received = {e["uuid"]: e for e in task_log.of("task-received") if e["uuid"] in ids}
        task_events = json.dumps([e for e in task_log.heard if e["type"].startswith("task-")])
    assert set(received) == set(ids)
    assert [v["ip"] for v in visits if v["ip"] in task_events] == []  # no raw IP in any task event
    for task_event in received.values():  # each shows its networks: 198.51.0.x, 2001:db8::/48
        assert (
            ".x'" in task_event["args"] + task_event["kwargs"] or "/48'" in task_event["args"] + task_event["kwargs"]
        ), task_event
    assert model_of(visits).mismatches(raw_conn) == []  # counted all the same
