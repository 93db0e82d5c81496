"""What a process loads: importing the package, ``store`` or the middleware loads no part of the
worker's side (neither the package's ``worker`` nor ``tasks``, nor Celery's ``celery.worker``);
a web process that counts through the middleware then runs only what sending takes (the Celery
app and its configuration, the broker transport: making a Celery app loads ``celery.worker.state``
itself), never the tasks, their bases or the batch consumer, nor Celery's requests and consumer.
Each case in a new interpreter, so nothing an earlier test imported hides a load."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import redis

from counters_tasks.core.settings import load_settings
from tests.support.procs import REPO, celery_env

WORKER_SIDE = ("celery.worker", "counters_tasks.worker", "counters_tasks.tasks")
NOT_FOR_SENDING = (
    "counters_tasks.tasks",
    "counters_tasks.worker.task_bases",
    "counters_tasks.worker.batch_consumer",
    "counters_tasks.worker.batch_apply",
    "counters_tasks.worker.claims",
    "celery.worker.request",
    "celery.worker.strategy",
    "celery.worker.consumer",
)

SHOW_LOADED = """
import json, sys
print(json.dumps(sorted(m for m in sys.modules if m.startswith({prefixes!r}))))
"""


def loaded_after(code: str, env: dict[str, str], prefixes: tuple[str, ...] = WORKER_SIDE) -> list[str]:
    """The modules of ``prefixes`` loaded once ``code`` ran in a new interpreter."""
    out = subprocess.run(
        [sys.executable, "-c", code + SHOW_LOADED.format(prefixes=prefixes)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.processes
@pytest.mark.parametrize(
    "module",
    [
        "counters_tasks",
        "counters_tasks.store",
        "counters_tasks.store.keys",
        "counters_tasks.recorder",
        "counters_tasks.integrations.wsgi",
        "counters_tasks.integrations.asgi",
        "counters_tasks.integrations.django",
    ],
)
def test_importing_loads_no_worker_side(module, redis_url):
    assert loaded_after(f"import {module}", celery_env(redis_url)) == []


WSGI_PROCESS = """
from counters_tasks.integrations.wsgi import CountersMiddleware
from counters_tasks.recorder import shared_recorder

def page(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/html")])
    return [b"<p>page</p>"]

app = CountersMiddleware(page)
environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/served", "QUERY_STRING": "", "SERVER_NAME": "t",
           "SERVER_PORT": "80", "REMOTE_ADDR": "192.0.2.10", "wsgi.url_scheme": "http",
           "HTTP_USER_AGENT": "Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0", "HTTP_ACCEPT": "text/html"}
statuses = []
body = app(environ, lambda status, headers, exc_info=None: statuses.append(status))
b"".join(body)
body.close()
assert statuses == ["200 OK"], statuses
assert shared_recorder().flush(10), "the visit did not reach the broker"
"""


@pytest.mark.processes
def test_a_web_process_counting_through_the_middleware_runs_no_worker_side(redis_url):
    """A page served through the WSGI middleware, its visit sent to the broker by the process's
    recorder: the message is there, and the process never loaded the tasks or what applies them."""
    env = celery_env(redis_url)
    broker = redis.Redis.from_url(load_settings({"COUNTERS_REDIS_URL": redis_url}).broker_url)
    broker.delete("visits")
    try:
        assert loaded_after(WSGI_PROCESS, env, NOT_FOR_SENDING) == []
        [message] = [json.loads(raw) for raw in broker.lrange("visits", 0, -1)]
        assert message["headers"]["task"] == "counters_tasks.record_visits"
    finally:
        broker.delete("visits")
        broker.close()
