"""Events through a real worker: per-event ``track_event`` messages applied in the worker's
claimed batches (``Kind.worker_batches``: claimed, journaled with ``events.kind.event_entry``,
written as one call), and ``VisitRecorder.track_event``'s ``track_events`` batches, every count
exact. (SIGKILL half way, through a web app: the acceptance tests of issue 43.)"""

from __future__ import annotations

import time

import pytest

from counters_tasks import tasks
from counters_tasks.events import event_counter, event_report
from counters_tasks.local.waiting import wait_until
from counters_tasks.recorder import VisitRecorder

pytestmark = [pytest.mark.workers]


@pytest.fixture(scope="module")
def worker(batching_worker):
    return batching_worker


@pytest.mark.processes
def test_a_worker_applies_events_exactly(worker, raw_conn):
    now = time.time() - 5
    for n in range(600):
        tasks.track_event.delay("signup", {"plan": ("free", "pro")[n % 2]}, now, f"198.51.100.{n % 200}")
    tasks.track_event.delay("signup", {"plan": ["not", "a", "scalar"]})  # refused alone
    recorder = VisitRecorder(max_batch=100, max_delay=0.05, flush_on_sigterm=False)
    for n in range(400):
        recorder.track_event("buy", {"sku": f"s{n % 7}"}, now, session_id=f"{n % 50:015x}")
    assert recorder.flush(timeout=30)

    def totals() -> dict[str, int]:
        return {row.name: row.total for row in event_report(raw_conn).events}

    wait_until(
        lambda: totals() == {"signup": 600, "buy": 400}, timeout=60, what=f"the worker; log:\n{worker.output()[-2000:]}"
    )
    rows = {row.name: row for row in event_report(raw_conn).events}
    assert rows["signup"].uv == 200 and rows["buy"].uv == 50
    assert {v.value: (v.total, v.uv) for v in rows["signup"].props["plan"]} == {"free": (300, 100), "pro": (300, 100)}
    assert sum(total for _start, total in event_counter(raw_conn, "signup", 60)) == 600
    wait_until(lambda: "refused" in worker.output(), timeout=10, what="the bad message to be refused")
