"""Celery's prefork pool (billiard's ``Pool`` under Celery's ``AsynPool``) as the worker's consumer
closes on it: the one module of the package that reaches Celery's and billiard's private names.

When the consumer closes (a warm shutdown, or a lost broker connection), Celery's
``AsynPool.flush`` drops from the pool's cache every job that no pool process has yet said it took
(its ``ACK`` read by the main process), because the broker gives such a message back. But a job
whose bytes were already written to a process's pipe is taken and run by that process anyway.
At a warm shutdown the main process then reads results only while its cache holds a job, so
nobody reads that job's result: the process waits 30 seconds for it to be read (billiard's
``Worker._ensure_messages_consumed``) before it exits, and the message, run but never
acknowledged, runs again on the next worker. A stop took 30 seconds instead of well under one,
past ``docker stop``'s 10 second grace period (``tests/worker/test_warm_shutdown.py``). Celery's
``main`` branch (August 2026) has the same ``flush``.

``jobs_being_taken`` names those jobs before Celery's ``on_close`` and ``keep_jobs`` puts them
back after it (``worker.consumer``): the pool's join then waits for their results, as for any job
a process took, and each message is acknowledged once, by the worker that ran it. The names used
(``TaskPool._pool``, billiard's ``Pool._cache``, a job's ``ApplyResult._accepted`` and
``_write_to``, which ``AsynPool`` sets when the job's first byte is written) were checked
against the releases in ``CHECKED``; should one change, ``tests/worker/test_warm_shutdown.py``
fails.
"""

from __future__ import annotations

from typing import Any

from billiard.pool import ApplyResult
from billiard.pool import Pool as BilliardPool
from celery.concurrency.prefork import TaskPool

CHECKED = {"celery": ("5.7.0",), "billiard": ("4.3.2",)}
"""The releases of Celery and billiard this module was checked against."""


def pool_cache(task_pool: Any) -> dict[Any, Any] | None:
    """The job cache of a prefork task pool; None for any other pool (threads, solo, gevent)."""
    if not isinstance(task_pool, TaskPool) or not isinstance(task_pool._pool, BilliardPool):
        return None
    return task_pool._pool._cache


def jobs_being_taken(task_pool: Any) -> dict[Any, Any]:
    """Jobs written (at least their first byte) to a pool process that it has not yet said it
    took, by their key in the pool's cache."""
    cache = pool_cache(task_pool)
    if cache is None:
        return {}
    return {
        key: job
        for key, job in list(cache.items())
        if isinstance(job, ApplyResult) and not job._accepted and job._write_to is not None
    }


def keep_jobs(task_pool: Any, jobs: dict[Any, Any]) -> None:
    """Put ``jobs`` (from ``jobs_being_taken``) back in the pool's cache, so its join waits for
    their results."""
    cache = pool_cache(task_pool)
    if cache is None:
        return
    for key, job in jobs.items():
        cache.setdefault(key, job)
