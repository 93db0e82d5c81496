"""A Flask app firing events the three ways an app has (issue 43), for
tests/faults/test_event_kill.py under gunicorn (``tests.support.event_app:wsgi_app``):

- ``POST /helper/<n>?plan=P``: ``integrations.track_event(request, "signup", {"plan": P})``,
  the middleware's helper: the visitor and site are the request's (through one trusted proxy);
- ``POST /delay/<n>?plan=P``: ``counters_tasks.track_event.delay("purchase", ...)``, one message an event;
- ``POST /recorder/<n>?plan=P``: ``RECORDER.track_event("download", ...)``, the app's own recorder;
- ``GET /health``, ``GET /pid``: for the test itself.

The ``.delay()`` and recorder routes take the client as the middleware does (the rightmost
``X-Forwarded-For`` entry) and the session from the ``ct_sid`` cookie, so each route's events
have the visitor the test expects. Each returns ``{"pid": ...}`` once its event is handed over.
"""

from __future__ import annotations

import os
import time

from flask import Flask, jsonify, request

from counters_tasks import VisitRecorder
from counters_tasks import tasks as counter_tasks
from counters_tasks.integrations import track_event
from counters_tasks.integrations.wsgi import CountersMiddleware

RECORDER = VisitRecorder(max_delay=float(os.environ.get("COUNTERS_TEST_MAX_DELAY", "0.05")))
"""Made at import, in gunicorn's master with --preload: each forked worker its own buffer."""

app = Flask(__name__)


def visitor() -> tuple[str, str | None]:
    """The client (one trusted proxy: the rightmost X-Forwarded-For entry) and the session cookie."""
    forwarded = request.headers.get("X-Forwarded-For", "")
    ip = forwarded.split(",")[-1].strip() or request.remote_addr or ""
    return ip, request.cookies.get("ct_sid")


def props(n: int) -> dict:
    """The event's properties: its plan (the ``n`` in the path only tells requests apart)."""
    return {"plan": request.args.get("plan", "free")}


@app.get("/health")
def health():
    return "ok", 200, {"Content-Type": "text/plain"}


@app.get("/pid")
def pid():
    time.sleep(0.02)  # held a moment, so concurrent requests find this worker busy and go to the other
    return jsonify(os.getpid())


@app.post("/helper/<int:n>")
def helper(n: int):
    track_event(request, "signup", props(n))
    return jsonify(pid=os.getpid())


@app.post("/delay/<int:n>")
def delay(n: int):
    ip, session_id = visitor()
    counter_tasks.track_event.delay("purchase", props(n), ts=time.time(), ip=ip, session_id=session_id)
    return jsonify(pid=os.getpid())


@app.post("/recorder/<int:n>")
def recorder(n: int):
    ip, session_id = visitor()
    RECORDER.track_event("download", props(n), ip=ip, session_id=session_id)
    return jsonify(pid=os.getpid())


wsgi_app = CountersMiddleware(app.wsgi_app, trusted_proxies=1)
"""The middleware on the process's shared recorder (``shared_recorder()``), trusting one proxy."""
