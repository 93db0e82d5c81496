"""Celery tasks run eagerly (in-process) against the real Redis."""

from __future__ import annotations

import pytest

from counters_tasks import counters, tasks
from counters_tasks.errors import InvalidInput
from counters_tasks.store.client import is_transient
from counters_tasks.worker import task_bases
from counters_tasks.worker.maintenance import SKIPPED, job_status
from tests.support.servers import dump_all

T0 = 1_700_000_000


def test_update_counter_task(eager_app, raw_conn):
    tasks.update_counter.delay("hits", 3, T0)
    tasks.update_counter.apply(kwargs={"name": "hits", "ts": T0 + 1})
    assert counters.get_counter(raw_conn, "hits", 60, now=T0) == [(T0 // 60 * 60, 4)]


def test_same_task_id_counts_once(eager_app, raw_conn):
    for _ in range(3):
        tasks.update_counter.apply(args=("dup", 2, T0), task_id="same-id")
    tasks.update_counter.apply(args=("dup", 2, T0), task_id="other-id")
    assert counters.get_counter(raw_conn, "dup", 86400, now=T0) == [(T0 // 86400 * 86400, 4)]


@pytest.mark.parametrize(
    "args",
    [("", 1, T0), ("x", 1.5, T0), ("x", True, T0), ("x", 1, -5), ("x", 1, "now"), ("a\tb", 1, T0)],
)
def test_bad_input_fails_without_retry_or_write(eager_app, raw_conn, args):
    before = dump_all(raw_conn)
    with pytest.raises(InvalidInput):  # a retry would raise celery's Retry instead
        tasks.update_counter.apply(args=args)
    eager_app.conf.task_eager_propagates = False
    result = tasks.update_counter.apply(args=args)
    assert result.state == "FAILURE" and isinstance(result.result, InvalidInput)
    assert dump_all(raw_conn) == before


def test_invalid_input_is_never_retried():
    assert not is_transient(InvalidInput("bad"))
    assert InvalidInput in task_bases.CountingTask.throws


def test_clean_counters_task_runs_and_records_status(eager_app, raw_conn):
    counters.update_counter(raw_conn, "old", 1, now=1_000)
    result = tasks.clean_counters.apply()
    assert result.result == 7
    assert counters.known_counters(raw_conn) == []
    assert job_status(raw_conn, "clean_counters")["last_result"] == "7"


def test_clean_counters_task_skips_while_another_run_holds_the_lock(eager_app, raw_conn):
    from counters_tasks.store import keys

    counters.update_counter(raw_conn, "old", 1, now=1_000)
    held = raw_conn.lock(keys.lock("clean_counters"), timeout=30)
    assert held.acquire(blocking=False)
    try:
        assert tasks.clean_counters.apply().result == SKIPPED
        assert counters.known_counters(raw_conn) == ["old"]
    finally:
        held.release()
    assert tasks.clean_counters.apply().result == 7
