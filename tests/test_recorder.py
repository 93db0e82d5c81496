"""VisitRecorder as a real app uses it: a process that goes idle, is stopped with SIGTERM, has no
COUNTERS_SECRET (only workers need it), and runs its own tests in eager mode."""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from counters_tasks import sitestats
from counters_tasks.core.days import local_day
from counters_tasks.core.settings import load_settings
from counters_tasks.local.redis_server import free_port
from counters_tasks.local.waiting import wait_until
from tests.support.procs import REPO, celery_env, purge_broker, run_python

pytestmark = pytest.mark.workers

APP = textwrap.dedent("""
    import sys, time
    from counters_tasks import VisitRecorder
    from counters_tasks.errors import InvalidInput

    recorder = VisitRecorder(max_delay=float(sys.argv[1]))
    for line in sys.stdin:  # the "requests": one visit a line, "check-bad" tries a bad one
        word = line.strip()
        if word == "check-bad":
            try:
                recorder.record("not an ip", "/")
            except InvalidInput:
                print("refused", flush=True)
            continue
        for n in range(int(word)):
            recorder.record(f"192.0.2.{n % 250 + 1}", f"/app/{n % 9}")
        print("recorded", word, flush=True)
""")


def broker_visits(broker) -> int:
    """Visits inside the record_visits messages waiting on the broker (no worker runs here)."""
    total = 0
    for raw in broker.lrange("visits", 0, -1):
        body = json.loads(base64.b64decode(json.loads(raw)["body"]))
        total += len(body[0][0])
    return total


@pytest.fixture
def broker(redis_url):
    import redis

    purge_broker(redis_url)
    client = redis.Redis.from_url(load_settings({"COUNTERS_REDIS_URL": redis_url}).broker_url)
    yield client
    client.close()


def start_app(redis_url: str, max_delay: float, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", APP, str(max_delay)],
        cwd=REPO,
        env=celery_env(redis_url, **env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def tell(app: subprocess.Popen, line: str) -> str:
    app.stdin.write(line + "\n")
    app.stdin.flush()
    return app.stdout.readline().strip()


@pytest.mark.processes
@pytest.mark.timing  # a visit sent within 0.5 s: alone, not beside another test (make test's two workers)
def test_a_visit_after_a_quiet_spell_is_sent_within_max_delay(redis_url, broker):
    app = start_app(redis_url, 0.2)
    try:
        assert tell(app, "50") == "recorded 50"
        wait_until(lambda: broker_visits(broker) == 50, timeout=5, what="the burst")
        time.sleep(1.5)  # the scenario: the site goes quiet for longer than max_delay
        assert tell(app, "1") == "recorded 1"
        sent_at = time.monotonic()
        wait_until(
            lambda: broker_visits(broker) == 51,
            timeout=5,
            interval=0.01,
            what="the visit after the quiet spell (it waited for 500 more before)",
        )
        assert time.monotonic() - sent_at < 0.2 + 0.3
    finally:
        app.kill()
        app.wait()


@pytest.mark.processes
def test_sigterm_after_a_burst_loses_nothing(redis_url, broker):
    app = start_app(redis_url, 60.0)  # nothing would be sent on time before the signal
    try:
        assert tell(app, "1234") == "recorded 1234"
        assert broker_visits(broker) == 0
        app.send_signal(signal.SIGTERM)
        assert app.wait(30) == -signal.SIGTERM  # it still dies of SIGTERM, as the app expects
    finally:
        app.kill()
    assert broker_visits(broker) == 1234


@pytest.mark.processes
def test_the_web_process_needs_no_secret(redis_url, broker):
    env = {k: v for k, v in celery_env(redis_url).items() if k != "COUNTERS_SECRET"}
    app = subprocess.Popen(
        [sys.executable, "-c", APP, "0.05"],
        cwd=REPO,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert tell(app, "10") == "recorded 10", app.stderr.read() if app.poll() is not None else ""
        assert tell(app, "check-bad") == "refused"  # still validated, without the HMAC
        wait_until(lambda: broker_visits(broker) == 10, timeout=5, what="the visits")
    finally:
        app.kill()
        app.wait()


EAGER_APP = textwrap.dedent("""
    import sys
    from counters_tasks import VisitRecorder
    from counters_tasks.app import app
    import counters_tasks.tasks  # registers the tasks
    app.conf.update(task_always_eager=True, task_eager_propagates=True)
    recorder = VisitRecorder(app=app)
    now = float(sys.argv[1])
    recorder.record("192.0.2.1", "/eager", ts=now)
    recorder.incr_ranking("eager-board", "post", 2, ts=now)
    from counters_tasks import sitestats
    from counters_tasks.core.days import local_day
    from counters_tasks.store.client import get_redis
    print(sitestats.site_visit_info(get_redis(), local_day(now), "/eager").pv)  # at once, as .delay() would
    print(recorder.close(timeout=5), recorder.stats()["sent"], recorder.stats()["send_errors"])
""")


@pytest.mark.processes
def test_eager_mode_applies_in_process_without_a_broker(redis_url, raw_conn):
    """In a process of its own, whose Celery app is configured with a broker where nothing listens
    (this process's app keeps the session's broker: ``tests/support/isolation.py``)."""
    env = celery_env(redis_url, CELERY_BROKER_URL=f"redis://127.0.0.1:{free_port()}/1")
    now = time.time()
    done = run_python(env, EAGER_APP, str(now))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "True", "2", "0"]
    assert sitestats.site_visit_info(raw_conn, local_day(now), "/eager").pv == 1


CHAINED_APP = (
    """
import signal, sys
signal.signal(signal.SIGTERM, lambda signum, frame: (print("app handler", flush=True), sys.exit(0)))
"""
    + APP
)


@pytest.mark.processes
def test_an_apps_own_sigterm_handler_still_runs_after_the_flush(redis_url, broker):
    app = subprocess.Popen(
        [sys.executable, "-c", CHAINED_APP, "60"],
        cwd=REPO,
        env=celery_env(redis_url),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert tell(app, "100") == "recorded 100"
        app.send_signal(signal.SIGTERM)
        assert app.wait(30) == 0  # the app's handler decided how to exit
        assert app.stdout.read().strip() == "app handler"
    finally:
        app.kill()
    assert broker_visits(broker) == 100


DRAINING_APP = textwrap.dedent("""
    import os, signal, sys
    from counters_tasks import VisitRecorder

    stopping = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))  # as uvicorn's: drain, then exit
    recorder = VisitRecorder(max_delay=60)  # installs its handler over the app's
    recorder.record("192.0.2.1", "/before-the-signal")
    os.kill(os.getpid(), signal.SIGTERM)
    assert stopping, "the app's own handler ran"
    # a request in flight when the signal came: the server still finishes it, and its visit
    recorder.record("192.0.2.2", "/in-flight")
    recorder.skipped("middleware", "crawler")
    print("drained", flush=True)
""")  # and exits normally: the exit flushes


@pytest.mark.processes
def test_a_request_finished_after_sigterm_by_a_draining_server_is_still_sent(redis_url, broker):
    """uvicorn (and gunicorn's workers) handle SIGTERM by draining the requests in flight, whose
    visits reach the recorder after the signal; the recorder's own SIGTERM handler flushes then,
    and must not close it (a closed recorder refused those visits: issue 21's routes test lost a
    skip that way under load)."""
    app = subprocess.run(
        [sys.executable, "-c", DRAINING_APP],
        cwd=REPO,
        env=celery_env(redis_url),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert app.returncode == 0, app.stderr
    assert app.stdout.strip() == "drained"
    sent: dict[str, list] = {}
    for raw in broker.lrange("visits", 0, -1):
        message = json.loads(raw)
        sent.setdefault(message["headers"]["task"], []).extend(json.loads(base64.b64decode(message["body"]))[0][0])
    assert sorted(visit["path"] for visit in sent["counters_tasks.record_visits"]) == [
        "/before-the-signal",
        "/in-flight",
    ]
    [skip] = sent["counters_tasks.count_skips"]
    assert skip.pop("ts") <= time.time() and skip == {"route": "middleware", "reason": "crawler", "count": 1}
