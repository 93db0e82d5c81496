"""The web apps tests/integrations/test_middleware.py runs under real servers: a Flask app (WSGI, for gunicorn)
and a plain ASGI app (for uvicorn), each serving the same routes twice over: under ``/direct/``
through middleware that trusts no proxy, under ``/proxied/`` through middleware that trusts one.

- ``/direct/page<n>``, ``/proxied/page``: HTML pages (counted);
- ``/direct/api/data``: JSON (not counted); ``/direct/like/<member>`` (POST): bumps ``likes``;
- ``/direct/slow``: a page still being served when the worker gets SIGTERM;
- ``/health``, ``/pid``, ``/stats``: for the test itself (plain text or JSON, never counted).

``COUNTERS_TEST_MAX_DELAY`` sets the recorder's ``max_delay``: a long one keeps every visit in
the process until the server is stopped, so the test sees that SIGTERM loses nothing.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from flask import Flask, jsonify, request

from counters_tasks import VisitRecorder
from counters_tasks.integrations.asgi import CountersASGIMiddleware
from counters_tasks.integrations.common import request_counters
from counters_tasks.integrations.wsgi import CountersMiddleware

MAX_DELAY = float(os.environ.get("COUNTERS_TEST_MAX_DELAY", "0.2"))

RECORDER = VisitRecorder(max_delay=MAX_DELAY)
"""Made at import (as docs/guides/gunicorn.md advises): in gunicorn's master with --preload, so
each forked worker gets its own empty buffer and sender thread (VisitRecorder is fork-safe); in
uvicorn's process before uvicorn takes SIGTERM over, so its flush runs after uvicorn has drained.
One recorder per process, for both apps."""

# -- WSGI: Flask under gunicorn --preload -------------------------------------------------------

flask_app = Flask(__name__)


@flask_app.get("/health")
def health():
    return "ok", 200, {"Content-Type": "text/plain"}


@flask_app.get("/pid")
def pid():
    time.sleep(0.02)  # held a moment, so concurrent requests find this worker busy and go to the other
    return jsonify(os.getpid())


@flask_app.get("/direct/page<int:n>")
@flask_app.get("/proxied/page")
def page(n: int = 0):
    return f"<!doctype html><title>page {n}</title><p>page {n}</p>"


@flask_app.get("/direct/api/data")
def data():
    return jsonify(ok=True)


@flask_app.post("/direct/like/<member>")
def like(member: str):
    request_counters(request.environ).bump("likes", member)
    return jsonify(liked=member)


@flask_app.get("/direct/slow")
def slow():
    """A request still running when the worker gets SIGTERM: it says it started, marks the SIGTERM
    when it comes (before the handlers already there: the recorder's flush, gunicorn's drain), and
    answers once the test releases it."""
    flags = Path(os.environ["COUNTERS_TEST_FLAG_DIR"])
    previous = signal.getsignal(signal.SIGTERM)

    def mark(signum, frame):
        (flags / "sigterm-seen").touch()
        if callable(previous):
            previous(signum, frame)

    signal.signal(signal.SIGTERM, mark)
    (flags / "started").touch()
    deadline = time.monotonic() + 30
    while not (flags / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.01)  # the app's own wait for the test's signal (a signal handler runs in between)
    return "<!doctype html><p>slow page</p>"


direct_wsgi = CountersMiddleware(flask_app.wsgi_app, recorder=RECORDER)
proxied_wsgi = CountersMiddleware(flask_app.wsgi_app, recorder=RECORDER, trusted_proxies=1)


shared_wsgi = CountersMiddleware(flask_app.wsgi_app)
"""Middleware on the shared recorder (``shared_recorder()``, made at the first page view)."""


def shared_wsgi_app(environ, start_response):
    """The Flask app through ``shared_wsgi``: the recorder the middleware makes by itself."""
    return shared_wsgi(environ, start_response)


def wsgi_app(environ, start_response):
    """Routes ``/proxied/`` through the middleware that trusts one proxy, the rest through the other."""
    middleware = proxied_wsgi if environ.get("PATH_INFO", "").startswith("/proxied/") else direct_wsgi
    return middleware(environ, start_response)


# -- ASGI: a plain ASGI app under uvicorn ---------------------------------------------------------


async def _respond(send, status: int, content_type: str, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def pages(scope, receive, send):
    if scope["type"] == "lifespan":  # nothing to set up; say so, as uvicorn expects
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    path, method = scope["path"], scope["method"]
    if path == "/health":
        await _respond(send, 200, "text/plain", b"ok")
    elif path == "/stats":
        body = {"direct": direct_asgi.stats.as_dict(), "proxied": proxied_asgi.stats.as_dict()}
        await _respond(send, 200, "application/json", json.dumps(body).encode())
    elif path == "/direct/api/data":
        await _respond(send, 200, "application/json", b'{"ok": true}')
    elif path.startswith("/direct/like/") and method == "POST":
        request_counters(scope).bump("likes", path.removeprefix("/direct/like/"))
        await _respond(send, 200, "application/json", b"{}")
    elif path.startswith(("/direct/page", "/direct/bad", "/proxied/page")):
        await _respond(send, 200, "text/html; charset=utf-8", b"<!doctype html><p>page</p>")
    else:
        await _respond(send, 404, "text/html; charset=utf-8", b"<p>not found</p>")


direct_asgi = CountersASGIMiddleware(pages, recorder=RECORDER)
proxied_asgi = CountersASGIMiddleware(pages, recorder=RECORDER, trusted_proxies=1)


async def asgi_app(scope, receive, send):
    """Routes ``/proxied/`` through the middleware that trusts one proxy, the rest through the other."""
    middleware = proxied_asgi if scope.get("path", "").startswith("/proxied/") else direct_asgi
    await middleware(scope, receive, send)
