"""The counters' Redis (AOF, appendfsync always) killed for 5 s under load, then started again
on the same port and data: tasks retry with backoff until it is back; every total is exact.
The broker is another server, so the queue and the retries survive the outage."""

from __future__ import annotations

import re
import threading
import time

import pytest

from counters_tasks.local.waiting import wait_until
from tests.support.faults import VisitModel, broker_idle, messages, observed, site_pv
from tests.support.procs import celery_env, start_worker

pytestmark = [pytest.mark.processes, pytest.mark.long]

VISITS = 5_000
OUTAGE = 5.0


@pytest.mark.parametrize("sending", ["per-visit", "batches"])
def test_counters_redis_outage_under_load(
    sending, fault_env, counters_server, counters_conn, broker_conn, publisher, tmp_path, capsys
):
    ts = float(int(time.time()))
    model = VisitModel.random(VISITS, ts, seed=7)
    to_send = messages(model, sending)
    env = celery_env(fault_env["COUNTERS_REDIS_URL"], **fault_env)
    worker = start_worker(env, tmp_path / "w.log", extra=("-O", "fair"))

    def publish() -> None:
        for task, args in to_send:
            task.apply_async(args, producer=publisher)

    sender = threading.Thread(target=publish)
    sender.start()
    try:
        wait_until(
            lambda: site_pv(counters_conn, ts) >= VISITS // 5,
            timeout=60,
            interval=0.01,
            what=f"a fifth of the visits; log:\n{worker.output()[-3000:]}",
        )
        counters_server.kill()
        down_at = time.monotonic()
        time.sleep(OUTAGE)  # the outage itself: the worker keeps taking messages meanwhile
        counters_server.start()
        at_restart = site_pv(counters_conn, ts)
        sender.join(120)
        wait_until(
            lambda: site_pv(counters_conn, ts) >= VISITS and broker_idle(broker_conn),
            timeout=150,
            interval=0.2,
            what=f"every visit after the outage; pv={site_pv(counters_conn, ts)}; log:\n{worker.output()[-3000:]}",
        )
        recovered_in = time.monotonic() - down_at
    finally:
        sender.join(120)
        worker.stop()
    assert observed(counters_conn, model) == model.expected()
    # per-task retries (Celery, with backoff) and worker-side batches waiting for Redis (in place)
    retries = len(re.findall(r"Retry in|waits for Redis", worker.output()))
    with capsys.disabled():
        print(
            f"\n[faults] Redis outage {OUTAGE:.0f} s ({sending}): {VISITS} visits in {len(to_send)} messages, pv after restart {at_restart}, "
            f"retries {retries}, all counted {recovered_in:.1f} s after the kill, lost 0, doubled 0"
        )
    assert retries > 0
