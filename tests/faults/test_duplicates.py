"""Duplicate delivery: one message applied twice (same task id) counts once, for every counting
task: through a real worker, eagerly, and after a retry that follows a partly sent pipeline."""

from __future__ import annotations

import re
import time
import uuid

import pytest
import redis

from counters_tasks import counters, ranking, ranking_bumps, sitestats, tasks, uniques, visits
from counters_tasks.core.days import local_day
from counters_tasks.worker.task_bases import WorkerBatches
from tests.support.faults import wait_idle
from tests.support.procs import celery_env, start_worker
from tests.support.servers import dump_all, empty, is_cluster_run

pytestmark = pytest.mark.processes

SESSION = "6f1c2b1e-98a4-4c51-9d0e-5b2a7c3d4e5f"
OTHER_SESSION = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
THIRD_SESSION = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"


def calls(ts: float) -> list[tuple]:
    """One message of every counting task: (task, args)."""
    return [
        (tasks.update_counter, ("dup-counter", 3, ts)),
        (tasks.incr_ranking, ("dup-board", "member", 2, ts)),
        (tasks.record_visit, ("10.0.0.1", "/dup?q=1", SESSION, ts)),
        (tasks.count_unique, (OTHER_SESSION, ts)),
        (
            tasks.record_visits,
            (
                [
                    {"ip": "10.0.0.2", "path": "/dup-batch", "session_id": THIRD_SESSION, "ts": ts},
                    {"ip": "10.0.0.1", "path": "/dup-batch", "ts": ts},
                ],
            ),
        ),
        (
            tasks.incr_rankings,
            (
                [
                    {"board": "dup-board", "member": "member", "amount": 5, "ts": ts},
                    {"board": "dup-board", "member": "other", "amount": 1, "ts": ts},
                ],
            ),
        ),
    ]


def check_counted_once(conn, ts: float) -> None:
    day = local_day(ts)
    minute = counters.bucket_start(ts, 60)
    assert counters.get_counter(conn, "dup-counter", 86400, now=ts) == [(counters.bucket_start(ts, 86400), 3)]
    assert ranking.Ranking(conn, "dup-board").top(withscores=True, now=ts) == [("member", 7), ("other", 1)]
    assert tuple(sitestats.site_visit_info(conn, day)) == (day, 3, 2)
    assert tuple(sitestats.site_visit_info(conn, day, "/dup"))[1:] == (1, 1)
    assert tuple(sitestats.site_visit_info(conn, day, "/dup-batch"))[1:] == (2, 2)
    assert counters.get_counter(conn, "hits", 60, now=ts) == [(minute, 3)]
    assert counters.get_counter(conn, "hits:/dup", 60, now=ts) == [(minute, 1)]
    assert counters.get_counter(conn, "hits:/dup-batch", 60, now=ts) == [(minute, 2)]
    assert uniques.unique_visitors(conn, day) == 3


def test_published_twice_with_one_task_id_counts_once(fault_env, counters_conn, broker_conn, publisher, tmp_path):
    ts = float(int(time.time()))
    env = celery_env(fault_env["COUNTERS_REDIS_URL"], **fault_env)
    worker = start_worker(env, tmp_path / "w.log", concurrency=2)
    ids = []
    try:
        for task, args in calls(ts):
            task_id = str(uuid.uuid4())
            ids.append(task_id)
            for _ in range(2):
                task.apply_async(args, task_id=task_id, producer=publisher)
        wait_idle(broker_conn)  # both copies of every message taken and acknowledged
    finally:
        worker.stop()
    for task_id, (task, _args) in zip(ids, calls(ts), strict=True):
        if not isinstance(task, WorkerBatches):  # per-item tasks run in worker-side batches, logged per batch
            assert len(re.findall(rf"\[{task_id}\] succeeded", worker.output())) == 2, task.name
    check_counted_once(counters_conn, ts)


def test_eager_duplicate_changes_nothing(eager_app, raw_conn):
    ts = float(int(time.time()))
    for task, args in calls(ts):
        task_id = str(uuid.uuid4())
        task.apply(args, task_id=task_id)
        once = dump_all(raw_conn)
        task.apply(args, task_id=task_id)
        assert dump_all(raw_conn) == once, task.name
    check_counted_once(raw_conn, ts)


class LosesConnection(redis.Redis):
    """A client whose connection drops after ``budget`` commands went through (pipelined or not):
    those are applied, their replies lost, the rest never sent."""

    def __init__(self, pool: redis.ConnectionPool, budget: int) -> None:
        super().__init__(connection_pool=pool)
        self.budget, self.sent = budget, 0

    def _lost(self) -> redis.ConnectionError:
        return redis.ConnectionError(f"connection lost after {self.sent} commands (test)")

    def execute_command(self, *args, **options):
        if self.sent >= self.budget:
            raise self._lost()
        reply = super().execute_command(*args, **options)
        self.sent += 1
        if self.sent == self.budget:
            raise self._lost()
        return reply

    def pipeline(self, transaction=True, shard_hint=None):
        pipe = super().pipeline(transaction, shard_hint)
        send, owner = pipe.execute, self

        def execute(raise_on_error: bool = True):
            allowed = owner.budget - owner.sent
            if allowed > len(pipe.command_stack):
                owner.sent += len(pipe.command_stack)
                return send(raise_on_error)
            pipe.command_stack = pipe.command_stack[: max(0, allowed)]
            if pipe.command_stack:
                send(False)
            owner.sent += max(0, allowed)
            raise owner._lost()

        pipe.execute = execute
        return pipe


TS = float(int(time.time()))
WRITES = {
    "record_visit": lambda c, mid: visits.apply_visit(c, "10.0.0.9", "/partial", SESSION, TS, message_id=mid),
    "update_counter": lambda c, mid: counters.update_counter(c, "partial", 5, TS, message_id=mid),
    "count_unique": lambda c, mid: uniques.count_visit(c, OTHER_SESSION, TS, message_id=mid),
    "incr_ranking": lambda c, mid: ranking.Ranking(c, "partial").incr("m", 4, TS, message_id=mid),
    "record_visits": lambda c, mid: visits.apply_visits(
        c,
        [{"ip": f"10.0.1.{n % 7}", "path": f"/b/{n % 5}", "session_id": f"{n % 3:015x}", "ts": TS} for n in range(600)],
        message_id=mid,
    ),
    "incr_rankings": lambda c, mid: ranking_bumps.incr_bumps(
        c,
        [{"board": f"partial-{n % 2}", "member": f"m{n % 9}", "amount": n, "ts": TS} for n in range(1200)],
        message_id=mid,
    ),
}


@pytest.mark.skipif(is_cluster_run(), reason="wraps a single-server client")
@pytest.mark.parametrize("write", sorted(WRITES))
def test_retry_after_a_partly_sent_pipeline_counts_once(write, raw_conn):
    """Every prefix of a write's commands applied, then the connection lost, then the retry (same
    message id): Redis ends byte for byte as after one clean application."""
    apply = WRITES[write]
    message_id = str(uuid.uuid4())
    sent = []
    for _ in range(2):  # the fewer: a process's first write also checks the deployment (store.deployment)
        empty(raw_conn)  # (the tag key kept: the runs make the same keys)
        uniques.forget_expected()
        counting = LosesConnection(raw_conn.connection_pool, 10**9)
        apply(counting, message_id)
        sent.append(counting.sent)
    total, clean = min(sent), dump_all(raw_conn)
    assert total >= 1
    for budget in range(total):
        empty(raw_conn)
        uniques.forget_expected()
        with pytest.raises(redis.ConnectionError):
            apply(LosesConnection(raw_conn.connection_pool, budget), message_id)
        apply(raw_conn, message_id)
        assert dump_all(raw_conn) == clean, f"{write}: lost after {budget} of {total} commands"
