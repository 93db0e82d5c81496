"""The Celery tasks, one line of work each: validate, call the module, nothing more. Their
delivery rules are their bases' (``worker.task_bases``); the per-event tasks are applied by the
worker in batches (``worker.batch_consumer``, ``worker.batch_apply``).

Importing this module also connects the app side's ``.delay()`` buffer
(``recorder.buffer_delay``, COUNTERS_DELAY_BUFFER) to the per-event tasks' base.
"""

from __future__ import annotations

from typing import Any

from . import counters, ranking, ranking_events, recorder, skips, uniques
from .app import app
from .store.client import get_redis
from .visits import apply_visits
from .worker import batch_apply, dead_letters
from .worker.maintenance import run_exclusive
from .worker.task_bases import CountingTask, MaintenanceTask, WorkerBatches, counting, set_aside_request

WorkerBatches.buffer_call = staticmethod(recorder.buffer_delay)


@app.task(name="counters_tasks.update_counter", base=CountingTask, bind=True)
@counting
def update_counter(self: CountingTask, name: str, count: int = 1, ts: float | None = None,
                   site: str | None = None) -> None:
    counters.update_counter(get_redis(), name, count, ts, message_id=self.message_id, site=site)


@app.task(name="counters_tasks.clean_counters", base=MaintenanceTask, bind=True)
def clean_counters(self: MaintenanceTask) -> Any:
    conn = get_redis()
    return run_exclusive(conn, "clean_counters", lambda: counters.clean_counters(conn), self.lock_seconds)


@app.task(name="counters_tasks.incr_ranking", base=WorkerBatches, bind=True)
def incr_ranking(self: WorkerBatches, requests: list[Any]) -> dict[str, Any]:
    """Called as ``incr_ranking.delay(board, member, amount=1, ts=None, period_hours=24,
    interval_hours=1, site=None)``; the worker applies such messages in batches (``worker.batch_apply``)."""
    return batch_apply.apply_batch(get_redis(), "incr_ranking", requests, give_up=set_aside_request)


@app.task(name="counters_tasks.incr_rankings", base=CountingTask, bind=True)
@counting
def incr_rankings(self: CountingTask, events: list[dict[str, Any]]) -> int:
    """Many ranking events in one message (``VisitRecorder.incr_ranking`` sends these)."""
    return ranking_events.incr_events(get_redis(), events, message_id=self.message_id)


@app.task(name="counters_tasks.rotate_rankings", base=MaintenanceTask, bind=True)
def rotate_rankings(self: MaintenanceTask) -> Any:
    conn = get_redis()
    return run_exclusive(conn, "rotate_rankings", lambda: ranking.rotate_all(conn), self.lock_seconds)


# --- visits and daily uniques -----------------------------------------------------------------

@app.task(name="counters_tasks.record_visit", base=WorkerBatches, bind=True)
def record_visit(self: WorkerBatches, requests: list[Any]) -> dict[str, Any]:
    """Called as ``record_visit.delay(ip, path, session_id=None, ts=None, site=None, referrer=None,
    utm=None)``; the worker applies
    such messages in batches (``worker.batch_apply``)."""
    return batch_apply.apply_batch(get_redis(), "record_visit", requests, give_up=set_aside_request)


@app.task(name="counters_tasks.record_visits", base=CountingTask, bind=True)
@counting
def record_visits(self: CountingTask, visits: list[dict[str, Any]]) -> int:
    """Many visits in one message (``VisitRecorder`` sends these); the task id is the batch id."""
    return apply_visits(get_redis(), visits, message_id=self.message_id)


@app.task(name="counters_tasks.count_skips", base=CountingTask, bind=True)
@counting
def count_skips(self: CountingTask, items: list[dict[str, Any]]) -> int:
    """Requests a web process's middleware did not count as page views, by reason
    (``VisitRecorder.skipped`` sends these with its batches)."""
    return skips.record(get_redis(), items, message_id=self.message_id)


@app.task(name="counters_tasks.count_unique", base=CountingTask, bind=True)
@counting
def count_unique(self: CountingTask, session_id: str, ts: float | None = None, site: str | None = None) -> bool:
    return uniques.count_visit(get_redis(), session_id, ts, message_id=self.message_id, site=site)


@app.task(name="counters_tasks.precompute_expected", base=MaintenanceTask, bind=True)
def precompute_expected(self: MaintenanceTask) -> Any:
    conn = get_redis()
    return run_exclusive(conn, "precompute_expected", lambda: uniques.precompute_due(conn), self.lock_seconds)


@app.task(name="counters_tasks.expire_dead_letters", base=MaintenanceTask, bind=True)
def expire_dead_letters(self: MaintenanceTask) -> Any:
    """Hourly: the dead letters older than COUNTERS_DEAD_LETTER_DAYS go (``dead_letters.expire_due``)."""
    return run_exclusive(get_redis(), "expire_dead_letters",
                         lambda: dead_letters.expire_due(dead_letters.store_client()), self.lock_seconds)
