"""A Flask app serving two sites from one process, for tests/core/test_sites.py: the package's WSGI
middleware trusting one proxy (the test sends ``X-Forwarded-For``) and taking each request's site
from its Host header through the allowlist of ``COUNTERS_SITES`` (set by the test).

- ``/health`` (plain text): the test's readiness probe;
- ``/like/<member>`` (POST): bumps the board ``likes`` of the request's site;
- any other path: an HTML page.
"""

from __future__ import annotations

from flask import Flask, Response, request

from counters_tasks.integrations.common import request_counters
from counters_tasks.integrations.wsgi import CountersMiddleware

app = Flask(__name__, static_folder=None)


@app.get("/health")
def health():
    return Response("ok", content_type="text/plain")


@app.post("/like/<member>")
def like(member: str):
    request_counters(request.environ).bump("likes", member)
    return Response("{}", content_type="application/json")


@app.get("/", defaults={"page": ""})
@app.get("/<path:page>")
def page(page: str):
    return Response(f"<!doctype html><p>{page}</p>", content_type="text/html; charset=utf-8")


app.wsgi_app = CountersMiddleware(app.wsgi_app, trusted_proxies=1)
application = app
