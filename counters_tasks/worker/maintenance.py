"""Beat jobs run under a Redis lock, so one run at a time cluster-wide, with their last run kept;
and when a beat last started (health counts beat alive from its start until its job first runs)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from celery import signals
from redis.exceptions import RedisError

from ..core import table
from ..store import keys
from ..store.client import RedisClient, as_str, get_redis

T = TypeVar("T")
log = logging.getLogger(__name__)

SKIPPED = "skipped"

HEARTBEAT_JOB = "clean_counters"
"""The job beat sends every minute: its last run, or beat's own start (``note_beat_started``),
tells whether beat is alive (``ops.health``)."""
BEAT_STARTED = "beat_started"
"""The field of ``HEARTBEAT_JOB``'s status (``job_status``) holding when a beat last started."""


def run_exclusive(conn: RedisClient, job: str, work: Callable[[], T], lock_seconds: float) -> T | str:
    """Run ``work`` unless another run of ``job`` holds the lock; returns its result or SKIPPED.

    The lock expires after ``lock_seconds`` so a crashed run never blocks the job for good;
    the task's time limit is set below it. The last run's time, duration and result are kept
    for operators (``job_status``).
    """
    lock = conn.lock(keys.lock(job), timeout=lock_seconds, blocking=False)
    if not lock.acquire(blocking=False):
        conn.hincrby(keys.job_stats(job), "skipped", 1)
        return SKIPPED
    started = time.time()
    try:
        result = work()
        conn.hset(
            keys.job_stats(job),
            mapping={
                "last_started": repr(started),
                "last_duration": repr(time.time() - started),
                "last_result": str(result),
            },
        )
        return result
    finally:
        try:
            lock.release()
        except Exception:  # expired meanwhile: nothing to release
            pass


def note_beat_started(conn: RedisClient, now: float | None = None) -> None:
    """Keep when a beat started (epoch seconds), in the status of its every-minute job: until that
    job first runs (up to a minute later, at the next minute on the default schedule), it is what
    tells that beat is alive, so a deployment just started does not report a beat that never ran."""
    conn.hset(keys.job_stats(HEARTBEAT_JOB), BEAT_STARTED, repr(time.time() if now is None else now))


@signals.beat_init.connect
def _note_beat_started(**_: object) -> None:
    """A beat (a ``worker -B``'s too) notes its start. Connected when the task table is imported,
    which beat does before it starts, after the app's server checks: a beat they stop notes
    nothing. A Redis away now is no reason to stop beat: its job's first run will tell."""
    try:
        note_beat_started(get_redis())
    except RedisError as exc:
        log.warning(
            "counters-tasks: beat's start could not be noted (%s): health counts beat alive from its "
            "every-minute job's first run",
            exc,
        )


def job_status(conn: RedisClient, job: str) -> dict[str, str]:
    """What is known of the last run of ``job``."""
    return {as_str(k): as_str(v) for k, v in conn.hgetall(keys.job_stats(job)).items()}


BEAT_JOBS = table.register(
    table.Table(
        name="beat_jobs",
        what="each beat job's lock while it runs and its last run (start, duration, result, runs skipped)",
        module=__name__,
        keys=(table.StoredKey("ct:lock:<job>", "STRING"), table.StoredKey("ct:job:<job>", "HASH")),
        tag="none",
        fed_by=(),
        writers=("maintenance.run_exclusive (every beat job)",),
        readers=("maintenance.job_status", "health", "/metrics"),
        retention=table.Retention("a lock its job's lock time; a job's last run until the next"),
        erasure=table.Erasure.none("job names and times only"),
    )
)
"""The beat jobs' locks and last runs (``core.table``)."""
