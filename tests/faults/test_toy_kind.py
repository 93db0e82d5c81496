"""A kind declared in the test tree alone (``tests.support.toy_kind``: likes of a post) through
real processes: per-item messages applied by a worker in claimed batches, the worker SIGKILLed
half way and its messages applied by the next one (none lost, none counted twice), a
``VisitRecorder`` and a buffered ``.delay()`` in this process, and ``/metrics`` of a ``serve``
process that never imported the kind."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from collections import Counter

import pytest
from prometheus_client.parser import text_string_to_metric_families

from counters_tasks import throughput
from counters_tasks.local.waiting import wait_until
from tests.support import toy_kind, toy_table
from tests.support.faults import broker_idle
from tests.support.procs import REPO, celery_env, serving, start_worker

pytestmark = [pytest.mark.processes, pytest.mark.workers, pytest.mark.long]

WITH_THE_KIND = ("-I", "tests.support.toy_kind,tests.support.toy_table", "-O", "fair")  # its table too
APP = textwrap.dedent("""
    import sys, time
    from counters_tasks.recorder import VisitRecorder, shared_recorder
    from tests.support import toy_kind

    recorded, delayed = int(sys.argv[1]), int(sys.argv[2])
    recorder = VisitRecorder()
    for _ in range(recorded):
        recorder.add(toy_kind.TOY, "recorded", time.time())
    assert recorder.close(timeout=30), recorder.stats()
    for _ in range(delayed):  # COUNTERS_DELAY_BUFFER: into the shared recorder, sent at exit
        toy_kind.like.delay("delayed")
    print(recorder.stats()["sent"], shared_recorder().stats()["recorded"], flush=True)
""")
PER_ITEM, RECORDED, DELAYED = int(os.environ.get("FAULTS_VISITS", 3_000)), 500, 200


def metric(base: str, name: str, **labels: str) -> float | None:
    with urllib.request.urlopen(base + "/metrics", timeout=10) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return None


def test_a_kind_of_the_tests_counts_exactly_through_a_sigkill(
    fault_env, counters_conn, broker_conn, publisher, tmp_path, capsys
):
    env = celery_env(fault_env["COUNTERS_REDIS_URL"], **fault_env, COUNTERS_VISIBILITY_TIMEOUT="2")
    expected = Counter(f"post{n % 17}" for n in range(PER_ITEM))
    first = start_worker(env, tmp_path / "w1.log", name="w1", extra=WITH_THE_KIND)
    second = None
    sender = threading.Thread(
        target=lambda: [
            toy_kind.like.apply_async((f"post{n % 17}", time.time()), producer=publisher) for n in range(PER_ITEM)
        ]
    )
    sender.start()
    try:
        wait_until(
            lambda: sum(toy_kind.totals(counters_conn).values()) >= PER_ITEM // 3,
            timeout=120,
            interval=0.01,
            what=f"a third of the likes; log:\n{first.output()[-3000:]}",
        )
        first.kill()
        second = start_worker(env, tmp_path / "w2.log", name="w2", extra=WITH_THE_KIND)
        sender.join(120)

        app = subprocess.run(
            [sys.executable, "-c", APP, str(RECORDED), str(DELAYED)],
            cwd=REPO,
            env={**env, "COUNTERS_DELAY_BUFFER": "1"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert app.returncode == 0, app.stderr
        assert app.stdout.split() == [str(RECORDED), str(DELAYED)]  # sent by the recorder, taken by the buffer
        expected.update(recorded=RECORDED, delayed=DELAYED)

        wait_until(
            lambda: toy_kind.totals(counters_conn) == expected and broker_idle(broker_conn),
            timeout=120,
            what="every like",
        )
    except TimeoutError:
        print(
            "counted",
            toy_kind.totals(counters_conn),
            "queued",
            broker_conn.llen("visits"),
            "unacked",
            broker_conn.zcard("unacked_index"),
            "\nsecond worker:",
            second and second.output()[-3000:],
        )
        raise
    finally:
        sender.join(120)
        first.kill()
        if second is not None:
            second.stop()
    assert toy_kind.totals(counters_conn) == expected  # none lost, none twice
    hours = toy_table.read_hours(counters_conn)  # the table an app added, fed in the kind's plans: the same
    assert sum(hour["likes"] for hour in hours) == sum(expected.values()), hours
    assert "tests.toy.like" in first.output() and "Traceback" not in second.output()

    total = PER_ITEM + RECORDED + DELAYED
    totals = throughput.totals(counters_conn)
    applied, duplicates = totals.applied["toy_like"], totals.duplicates["toy_like"]
    assert applied <= total <= applied + duplicates  # a batch killed before its count: counted as a duplicate later
    assert totals.batches["like"].total >= PER_ITEM and totals.batches["likes"].total == RECORDED + DELAYED
    with serving(
        env, tmp_path / "serve.log", lambda base: metric(base, "counters_source_up", source="redis") == 1
    ) as base:
        assert metric(base, "counters_events_applied_total", kind="toy_like") == applied
        assert metric(base, "counters_batch_size_sum", kind="likes") == RECORDED + DELAYED
    with capsys.disabled():
        print(
            f"\n[kinds] toy kind: {total} likes ({PER_ITEM} per-item messages, a SIGKILL at a third), "
            f"counted exactly; throughput applied {applied}, duplicates {duplicates}"
        )
