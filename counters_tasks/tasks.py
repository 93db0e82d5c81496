"""Celery tasks: thin wrappers that validate, call the module, and nothing more.

Counting tasks pass their message id (the task id) down to the Lua calls, so a message
delivered twice is applied once. Bad input raises InvalidInput, which is never retried;
Redis connection and timeout errors are retried with backoff and jitter.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from celery import Task
from celery.exceptions import Retry
from celery.utils.time import get_exponential_backoff_interval

from . import counters, ranking, refusals, skips, uniques
from .app import app
from .core.settings import RETRY_BACKOFF_MAX, get_settings
from .errors import InvalidInput, SetAside
from .store.client import get_redis, is_transient
from .visits import record_visits as apply_visit_batch
from .worker import batching, dead_letters
from .worker.batches import MaskedRequest, WorkerBatches
from .worker.maintenance import run_exclusive


class CountingTask(Task):
    """Applied at most once per message; acknowledged only after it ran or was deliberately
    refused. Bad input (InvalidInput) fails at once, without retry; a Redis error after which the
    write can succeed (Redis away, BUSY, READONLY, OOM, LOADING, a failover) is retried with
    backoff for as long as it lasts; any other error is retried COUNTERS_MAX_ATTEMPTS times,
    then the message is set aside (dead-lettered), never dropped. Its task events show its
    arguments with IP addresses masked (``MaskedRequest``)."""

    Request = MaskedRequest
    acks_late = True
    reject_on_worker_lost = True
    max_retries = None  # retries are bounded by ``counting`` (never for Redis being away)
    throws = (InvalidInput, SetAside)  # expected failures: logged without a traceback
    ignore_result = True

    @property
    def message_id(self) -> str | None:
        return self.request.id

    def set_aside(self, exc: BaseException, attempts: int) -> None:
        """Keep this call in the dead letters (it is then acknowledged, not lost)."""
        dead_letters.set_aside_call(self.name, self.request.id, list(self.request.args or ()),
                                    dict(self.request.kwargs or {}),
                                    (self.request.delivery_info or {}).get("routing_key"), exc, attempts)



def counting(body: Callable[..., Any]) -> Callable[..., Any]:
    """The delivery rules of a counting task, around its body (the way Celery's own autoretry
    wraps ``run``): bad input is counted and fails at once; a Redis error that passes is retried
    with backoff for as long as it lasts; any other error is retried COUNTERS_MAX_ATTEMPTS times,
    then the call is set aside in the dead letters and its message acknowledged, reported
    failed (``SetAside``)."""
    @functools.wraps(body)
    def run(self: CountingTask, *args: Any, **kwargs: Any) -> Any:
        try:
            return body(self, *args, **kwargs)
        except InvalidInput as refused:  # the whole message (a batch counts its refused items itself)
            refusals.record(get_redis(), self.name, self.message_id, [(None, refused)])
            raise
        except Retry:
            raise
        except Exception as exc:
            if self.request.is_eager or self.request.called_directly:
                raise
            attempt = self.request.retries + 1
            if not is_transient(exc) and attempt >= get_settings().max_attempts:
                self.set_aside(exc, attempt)
                raise SetAside(attempt, exc) from exc  # acknowledged (acks_late acks a failure), reported failed
            countdown = get_exponential_backoff_interval(1, self.request.retries, RETRY_BACKOFF_MAX, full_jitter=True)
            raise self.retry(exc=exc, countdown=countdown) from exc

    return run


def set_aside_request(kind: str, request: Any, exc: BaseException) -> None:
    """Keep a message of a worker-side batch that kept failing in the dead letters."""
    dead_letters.set_aside_call(f"counters_tasks.{kind}", request.id, list(request.args or ()),
                                dict(request.kwargs or {}), (request.delivery_info or {}).get("routing_key"), exc,
                                get_settings().max_attempts)


class MaintenanceTask(Task):
    """A beat job: one run at a time (Redis lock), bounded by a time limit."""

    acks_late = False
    autoretry_for = ()
    ignore_result = True
    soft_time_limit = 240
    time_limit = 270
    lock_seconds = 300


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
    interval_hours=1, site=None)``; the worker applies such messages in batches (``worker.batches``, ``batching``)."""
    return batching.apply_batch(get_redis(), "incr_ranking", requests, give_up=set_aside_request)


@app.task(name="counters_tasks.incr_rankings", base=CountingTask, bind=True)
@counting
def incr_rankings(self: CountingTask, events: list[dict[str, Any]]) -> int:
    """Many ranking events in one message (``VisitRecorder.incr_ranking`` sends these)."""
    return ranking.incr_events(get_redis(), events, message_id=self.message_id)


@app.task(name="counters_tasks.rotate_rankings", base=MaintenanceTask, bind=True)
def rotate_rankings(self: MaintenanceTask) -> Any:
    conn = get_redis()
    return run_exclusive(conn, "rotate_rankings", lambda: ranking.rotate_all(conn), self.lock_seconds)


# --- visits and daily uniques -----------------------------------------------------------------

@app.task(name="counters_tasks.record_visit", base=WorkerBatches, bind=True)
def record_visit(self: WorkerBatches, requests: list[Any]) -> dict[str, Any]:
    """Called as ``record_visit.delay(ip, path, session_id=None, ts=None, site=None, referrer=None,
    utm=None)``; the worker applies
    such messages in batches (``worker.batches``, ``batching``)."""
    return batching.apply_batch(get_redis(), "record_visit", requests, give_up=set_aside_request)


@app.task(name="counters_tasks.record_visits", base=CountingTask, bind=True)
@counting
def record_visits(self: CountingTask, visits: list[dict[str, Any]]) -> int:
    """Many visits in one message (``VisitRecorder`` sends these); the task id is the batch id."""
    return apply_visit_batch(get_redis(), visits, message_id=self.message_id)


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
