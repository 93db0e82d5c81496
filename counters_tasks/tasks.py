"""The Celery tasks, one line of work each: validate, call the module, nothing more. Their
delivery rules are their bases' (``worker.task_bases``); the per-item tasks are applied by the
worker in batches (``worker.batch_consumer``, ``worker.batch_apply``). The tasks of a kind with
payloads (visits, ranking bumps) are made from its declaration (``worker.kind_tasks``).

The per-item tasks' base here, ``DelayBuffered``, takes a plain ``.delay()`` into the app side's
buffer (``recorder.buffer_delay``, COUNTERS_DELAY_BUFFER).
"""

from __future__ import annotations

from typing import Any

from . import counters, ranking, ranking_bumps, recorder, sitestats, skips, uniques, visits
from .app import app
from .core.kind import Kind
from .events.kind import EVENT
from .store.client import get_redis
from .worker import dead_letters, forget, retention
from .worker.kind_tasks import define_tasks
from .worker.maintenance import run_exclusive
from .worker.task_bases import CountingTask, MaintenanceTask, WorkerBatches, counting


class DelayBuffered(WorkerBatches):
    """The per-item tasks' base on the app side: with ``COUNTERS_DELAY_BUFFER`` on, a plain
    ``.delay()`` goes to the process's shared recorder (``recorder.buffer_delay``)."""

    abstract = True
    buffer_call = staticmethod(recorder.buffer_delay)


def define_kind_tasks(kind: Kind) -> tuple[Any, Any]:
    """The tasks of ``kind`` on the package's app (``worker.kind_tasks.define_tasks``), its
    per-item task's ``.delay()`` buffered like ``record_visit``'s: what an app calls to count a
    kind of its own (docs/architecture.md, "Adding a kind")."""
    return define_tasks(app, kind, item_base=DelayBuffered)


@app.task(name="counters_tasks.update_counter", base=CountingTask, bind=True)
@counting
def update_counter(
    self: CountingTask, name: str, count: int = 1, ts: float | None = None, site: str | None = None
) -> None:
    counters.update_counter(get_redis(), name, count, ts, message_id=self.message_id, site=site)


@app.task(name="counters_tasks.clean_counters", base=MaintenanceTask, bind=True)
def clean_counters(self: MaintenanceTask) -> Any:
    conn = get_redis()
    return run_exclusive(conn, "clean_counters", lambda: counters.clean_counters(conn), self.lock_seconds)


incr_ranking, incr_rankings = define_kind_tasks(ranking_bumps.RANKING)
"""``incr_ranking.delay(board, member, ...)``, the fields of ``RANKING`` (its ``signature``; docs/tasks.md),
applied by the worker in batches; ``incr_rankings``: many bumps in one message
(``VisitRecorder.incr_ranking`` sends these)."""


@app.task(name="counters_tasks.rotate_rankings", base=MaintenanceTask, bind=True)
def rotate_rankings(self: MaintenanceTask) -> Any:
    conn = get_redis()
    return run_exclusive(conn, "rotate_rankings", lambda: ranking.rotate_all(conn), self.lock_seconds)


# --- visits and daily uniques -----------------------------------------------------------------

record_visit, record_visits = define_kind_tasks(visits.VISIT)
"""``record_visit.delay(ip, path, ...)``, the fields of ``VISIT`` (its ``signature``; docs/tasks.md),
applied by the worker in batches; ``record_visits``: many visits in one message (``VisitRecorder``
sends these; the task id is the batch id)."""


track_event, track_events = define_kind_tasks(EVENT)
"""``track_event.delay(name, props=None, ts=None, ip=None, session_id=None, site=None)``: one
analytics event (``events.kind``; docs/events.md), applied by the worker in batches;
``track_events``: many events in one message (``VisitRecorder.track_event`` sends these)."""


@app.task(name="counters_tasks.count_skips", base=CountingTask, bind=True)
@counting
def count_skips(self: CountingTask, items: list[dict[str, Any]]) -> int:
    """Requests a web process's middleware did not count as page views, by reason
    (``VisitRecorder.skipped`` sends these with its batches)."""
    return skips.count_skipped(get_redis(), items, message_id=self.message_id)


@app.task(name="counters_tasks.count_unique", base=CountingTask, bind=True)
@counting
def count_unique(self: CountingTask, session_id: str, ts: float | None = None, site: str | None = None) -> bool:
    return uniques.count_visit(get_redis(), session_id, ts, message_id=self.message_id, site=site)


@app.task(name="counters_tasks.precompute_expected", base=MaintenanceTask, bind=True)
def precompute_expected(self: MaintenanceTask) -> Any:
    conn = get_redis()
    return run_exclusive(conn, "precompute_expected", lambda: uniques.precompute_due(conn), self.lock_seconds)


@app.task(name="counters_tasks.make_day_tops", base=MaintenanceTask, bind=True)
def make_day_tops(self: MaintenanceTask) -> Any:
    """Hourly: each site's last finished days get their top pages made (``sitestats.make_day_tops``)."""
    conn = get_redis()
    return run_exclusive(conn, "make_day_tops", lambda: sitestats.make_day_tops(conn), self.lock_seconds)


@app.task(name="counters_tasks.apply_retention", base=MaintenanceTask, bind=True)
def apply_retention(self: MaintenanceTask) -> Any:
    """Hourly: each table's data of the site's days past its tier's horizon goes (COUNTERS_VISITOR_DAYS,
    COUNTERS_AGGREGATE_DAYS; ``worker.retention.apply_retention``)."""
    conn = get_redis()
    return run_exclusive(conn, "apply_retention", lambda: str(retention.apply_retention(conn)), self.lock_seconds)


@app.task(name="counters_tasks.expire_dead_letters", base=MaintenanceTask, bind=True)
def expire_dead_letters(self: MaintenanceTask) -> Any:
    """Hourly: the dead letters older than COUNTERS_DEAD_LETTER_DAYS go (``dead_letters.expire_due``)."""
    return run_exclusive(
        get_redis(),
        "expire_dead_letters",
        lambda: dead_letters.expire_due(dead_letters.store_client()),
        self.lock_seconds,
    )


@app.task(name="counters_tasks.forget_visitor", base=MaintenanceTask, bind=True, soft_time_limit=3600, time_limit=3660)
def forget_visitor(
    self: MaintenanceTask, site: str | None = None, ip: str | None = None, session_id: str | None = None
) -> dict[str, Any]:
    """Forget one visitor of ``site`` by its ``ip`` and/or ``session_id`` (``worker.forget``;
    docs/privacy.md, "Erasing one visitor"): its answer, with no personal data. On the maintenance
    queue, with an hour's time limit (a site's 400 days of tables are read through); run again, it
    finishes what an interrupted run left (each call is whole, a second removes nothing twice)."""
    return forget.forget_visitor(site, ip, session_id)
