"""What ``.delay()`` gives back: the package's tasks keep no results (counting is fire-and-forget),
so the ``AsyncResult`` of a call says so plainly when asked for a state or a value, at once, in the
producer's process as a user runs it; the call's effect is read from the figures it changes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import redis
from celery.result import AsyncResult

from counters_tasks import counters
from counters_tasks.local.waiting import wait_until
from tests.support.procs import REPO, celery_env, start_worker

pytestmark = pytest.mark.processes

PRODUCER = """
import json
from counters_tasks import tasks

result = tasks.update_counter.delay("results-probe", 1)
asked = {"id": result.id}
asks = [("state", lambda: result.state), ("ready", result.ready), ("get", lambda: result.get(timeout=1)),
        ("forget", result.forget)]
if hasattr(result, "exists"):  # Celery 5.7+
    asks.append(("exists", result.exists))
for what, ask in asks:
    try:
        asked[what] = ["answered", repr(ask())]
    except Exception as exc:
        asked[what] = [type(exc).__name__, str(exc), isinstance(exc, NotImplementedError)]
print(json.dumps(asked))
"""


def test_delay_result_says_no_results_are_kept_and_the_figures_show_the_call_applied(raw_conn, redis_url, tmp_path):
    broker = redis_url.rsplit("/", 1)[0] + "/5"
    broker_conn = redis.Redis.from_url(broker)
    broker_conn.flushdb()
    env = celery_env(redis_url, CELERY_BROKER_URL=broker)
    try:
        sent = subprocess.run(
            [sys.executable, "-c", PRODUCER], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
        )
        assert sent.returncode == 0, sent.stderr
        asked = json.loads(sent.stdout.splitlines()[-1])
        assert len(asked["id"]) == 36  # the message's id
        assert asked["get"] == ["answered", "None"]  # Celery's rule for a task that ignores its result: at once
        asked_all = ("state", "ready", "forget") + (("exists",) if hasattr(AsyncResult, "exists") else ())
        for what in asked_all:
            name, message, not_implemented = asked[what]
            assert name == "ResultsNotKept" and not_implemented, (what, asked[what])  # Celery's kind of error
            assert "keeps no task results" in message and "docs/tasks.md" in message, message
        assert broker_conn.llen("visits") == 1  # sent all the same
        worker = start_worker(env, tmp_path / "worker.log", concurrency=1).wait_ready()
        try:  # what docs/tasks.md says to do instead: read the figure the call changes
            wait_until(
                lambda: sum(t for _b, t in counters.get_counter(raw_conn, "results-probe", 60)) == 1,
                timeout=30,
                what="the call to be applied",
            )
        finally:
            worker.stop()
        assert "Traceback" not in worker.output(), worker.output()[-3000:]
    finally:
        broker_conn.flushdb()
        broker_conn.close()
