"""Two runs of a beat job at once (beat fired twice, two workers): one works, the other skips
(a Redis lock), and the totals are exact."""

from __future__ import annotations

import threading
import time

import pytest

from counters_tasks import counters, ranking, tasks
from counters_tasks.worker.maintenance import SKIPPED, job_status

pytestmark = pytest.mark.processes

JOBS = {"clean_counters": (counters, "clean_counters"), "rotate_rankings": (ranking, "rotate_all")}


def seed(conn, now: float) -> None:
    counters.update_counter(conn, "stale", 1, now=now - 200 * 86400)  # only the cleaner removes it
    counters.update_counter(conn, "live", 2, now=now)
    board = ranking.Ranking(conn, "overlap")
    board.incr("gone", 5, now - 3 * 86400)  # a slot that left the window: only rotation drops it
    board.incr("kept", 1, now)


def check_totals(conn, job: str, now: float) -> None:
    """The job's own work done, exactly: the stale counter gone, or the expired slot dropped."""
    assert counters.get_counter(conn, "live", 1, now=now) == [(int(now), 2)]
    board = ranking.Ranking(conn, "overlap")
    assert board.top(withscores=True, now=now) == [("kept", 1)]  # a read corrects for unrotated slots
    if job == "clean_counters":
        assert counters.known_counters(conn) == ["live"]
    else:
        assert board.stats()["live_slots"] == 1


@pytest.mark.parametrize("job", sorted(JOBS))
def test_overlapping_runs_one_works_one_skips(job, eager_app, raw_conn, monkeypatch):
    now = float(int(time.time()))
    seed(raw_conn, now)
    module, name = JOBS[job]
    work = getattr(module, name)
    started, release = threading.Event(), threading.Event()

    def slow_work(*args, **kwargs):
        started.set()
        assert release.wait(30)
        return work(*args, **kwargs)

    monkeypatch.setattr(module, name, slow_work)
    task = getattr(tasks, job)
    results = {}
    first = threading.Thread(target=lambda: results.setdefault("first", task.apply().get()))
    first.start()
    try:
        assert started.wait(30)
        results["second"] = task.apply().get()  # starts while the first one holds the lock
    finally:
        release.set()
        first.join(30)
    assert results["second"] == SKIPPED
    assert results["first"] != SKIPPED and int(results["first"]) >= 1
    status = job_status(raw_conn, job)
    assert status["skipped"] == "1" and status["last_result"] == str(results["first"])
    check_totals(raw_conn, job, now)
    assert task.apply().get() == 0  # the next run finds nothing left to do: nothing done twice
    check_totals(raw_conn, job, now)
