"""Beat jobs run under a Redis lock, so one run at a time cluster-wide, with their last run kept."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from ..store import keys
from ..store.client import RedisClient, as_str

T = TypeVar("T")

SKIPPED = "skipped"


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
            mapping={"last_started": repr(started), "last_duration": repr(time.time() - started), "last_result": str(result)},
        )
        return result
    finally:
        try:
            lock.release()
        except Exception:  # expired meanwhile: nothing to release
            pass


def job_status(conn: RedisClient, job: str) -> dict[str, str]:
    """What is known of the last run of ``job``."""
    return {as_str(k): as_str(v) for k, v in conn.hgetall(keys.job_stats(job)).items()}
