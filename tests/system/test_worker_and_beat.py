"""Tasks through a real ``celery worker`` and ``celery beat`` (subprocesses) and the real broker."""

from __future__ import annotations

import time

import pytest

from counters_tasks import counters, tasks
from counters_tasks.local.waiting import wait_until
from counters_tasks.worker.maintenance import job_status
from tests.support.procs import celery_env, purge_broker, start_beat, start_worker

pytestmark = [pytest.mark.processes, pytest.mark.workers, pytest.mark.server_version, pytest.mark.server_build]


def test_worker_counts_and_beat_runs_the_cleaner(redis_url, raw_conn, tmp_path):
    now = time.time()
    counters.update_counter(raw_conn, "stale", 1, now=now - 200 * 86400)  # only the cleaner removes it
    env = celery_env(redis_url, COUNTERS_CLEAN_EVERY="1")
    purge_broker(redis_url)
    worker = start_worker(env, tmp_path / "worker.log")
    beat = start_beat(env, tmp_path, tmp_path / "beat.log")
    try:
        for _ in range(5):
            tasks.update_counter.delay("worker-hits", 2, now)
        wait_until(
            lambda: counters.get_counter(raw_conn, "worker-hits", 86400, now=now) == [(int(now // 86400) * 86400, 10)],
            timeout=60,
            what=f"the worker to count; log:\n{worker.output()[-3000:]}",
        )
        wait_until(
            lambda: "stale" not in counters.known_counters(raw_conn),
            timeout=60,
            what=f"beat to run the cleaner; beat log:\n{beat.output()[-3000:]}",
        )
        status = wait_until(lambda: job_status(raw_conn, "clean_counters"), timeout=10, what="the cleaner's status")
        assert float(status["last_started"]) >= now - 5
        assert counters.known_counters(raw_conn) == ["worker-hits"]
    finally:
        beat.stop()
        assert worker.stop() == 0, worker.output()[-3000:]
    assert "counters_tasks.clean_counters" in worker.output()


def test_worker_refuses_to_start_without_secret(redis_url, tmp_path):
    env = celery_env(redis_url)
    env.pop("COUNTERS_SECRET")
    worker = start_worker(env, tmp_path / "worker.log")
    code = worker.process.wait(60)
    worker.stop()
    assert code != 0
    assert "COUNTERS_SECRET is not set" in worker.output()
