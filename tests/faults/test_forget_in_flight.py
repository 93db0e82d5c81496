"""A visit (and an event) of a visitor made before its erasure but still on the broker is not
counted back after ``forget_visitor`` (``store.tombstones``): queued while no worker runs, and sent
to a running worker whose copy of the tombstones was read before the erasure."""

from __future__ import annotations

import time

import pytest

from counters_tasks import events, refusals, sitestats, tasks, visits
from counters_tasks.core.days import local_day
from counters_tasks.local.waiting import wait_until
from counters_tasks.worker import forget
from tests.support.faults import wait_idle
from tests.support.procs import celery_env, start_worker

pytestmark = [pytest.mark.processes, pytest.mark.workers, pytest.mark.long]

TARGET = "203.0.113.77"


def test_items_in_flight_are_not_counted_back(fault_env, counters_conn, broker_conn, publisher, tmp_path):
    now = time.time()
    day = local_day(now)
    visits.apply_visits(
        counters_conn,
        [{"ip": ip, "path": "/", "ts": now} for ip in ("198.51.100.1", "198.51.100.2", TARGET)],
        message_id="first",
    )
    # queued while no worker runs: made before the erasure
    tasks.record_visit.apply_async((TARGET, "/queued", None, now), producer=publisher)
    tasks.track_event.apply_async(("click", None, now, TARGET), producer=publisher)
    tasks.record_visit.apply_async(("198.51.100.3", "/queued", None, now), producer=publisher)

    answer = forget.forget_visitor(ip=TARGET, conn=counters_conn)  # waits out the workers' copies
    assert answer["removed"] >= 2 and sitestats.site_visit_info(counters_conn, day).uv == 2

    worker = start_worker(celery_env(fault_env["COUNTERS_REDIS_URL"], **fault_env), tmp_path / "w.log")
    try:
        wait_until(
            lambda: sitestats.site_visit_info(counters_conn, day, "/queued").pv >= 1,
            timeout=60,
            what=f"the other visitor's queued visit; log:\n{worker.output()[-3000:]}",
        )
        wait_idle(broker_conn)
        # the running worker's copy is read now (no tombstone of the next visitor yet)...
        tasks.record_visit.apply_async(("198.51.100.4", "/warm", None, time.time()), producer=publisher)
        wait_until(lambda: sitestats.site_visit_info(counters_conn, day, "/warm").pv == 1, timeout=30, what="/warm")
        made = time.time()
        second = forget.forget_visitor(ip="198.51.100.4", conn=counters_conn)
        assert second["removed"] >= 1
        # ...and a visit it made before its erasure arrives after it
        tasks.record_visit.apply_async(("198.51.100.4", "/late", None, made), producer=publisher)
        tasks.record_visit.apply_async(("198.51.100.5", "/late", None, time.time()), producer=publisher)
        wait_until(lambda: sitestats.site_visit_info(counters_conn, day, "/late").pv >= 1, timeout=30, what="/late")
        wait_idle(broker_conn)
    finally:
        worker.stop()
    assert sitestats.site_visit_info(counters_conn, day, "/queued") == (day, 1, 1)
    assert sitestats.site_visit_info(counters_conn, day, "/late") == (day, 1, 1)
    assert sitestats.site_visit_info(counters_conn, day).uv == 4  # .1, .2, .3, .5: neither forgotten one
    assert [row.name for row in events.event_report(counters_conn).events] == []
    assert refusals.counts(counters_conn)["forgotten"] == 3
    # a visit made after the erasure counts: a new visit
    visits.apply_visits(counters_conn, [{"ip": TARGET, "path": "/again", "ts": time.time() + 1}], message_id="after")
    assert sitestats.site_visit_info(counters_conn, day, "/again").uv == 1
