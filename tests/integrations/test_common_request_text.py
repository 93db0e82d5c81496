"""What the middleware reads of a request, as bytes on the wire (issue 40): the same requests,
built as each server hands them over (a WSGI environ as gunicorn builds it, and as a server
that gives no ``REQUEST_URI``; an ASGI scope as uvicorn builds it; a Django request under WSGI,
with and without the raw target), are counted through a real ``VisitRecorder`` (eager) under the
same pages and sources on every route, and a request that cannot be counted says why.

- a path of 1,500 or 3,000 characters counts under its name cut to 512 bytes (``core.paths``),
  as ``counters-tasks import`` counts it, not refused without a word;
- a path sent as UTF-8 bytes is its text, one with bytes that are not UTF-8 keeps them as
  ``%XX`` escapes, whichever route (WSGI's PATH_INFO and headers are PEP 3333 latin-1 strings);
- a Referer's host is read as UTF-8 and named in its IDNA (punycode) form, the form browsers
  send, so ``http://bücher.example/`` and ``http://xn--bcher-kva.example/`` are one source; a
  host whose bytes are not UTF-8 is ``(unknown)`` (docs/sources.md);
- a visit the recorder refuses (``InvalidInput``) is a skip of reason ``refused``, in the skip
  counts that ``health`` and ``/metrics`` show.
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from collections import Counter

import pytest

from counters_tasks import VisitRecorder, sitestats, skips
from counters_tasks.core.days import local_day
from counters_tasks.core.paths import canonical_path
from counters_tasks.integrations import asgi, common, wsgi
from tests.support.procs import BROWSER_AGENT

IP = "203.0.113.5"
LONG_A = b"/long/" + b"a" * 1500
LONG_B = b"/long/" + b"b" * 3000
BUCHER = "http://bücher.example/".encode()

REQUESTS: list[tuple[bytes, bytes | None]] = [  # (target as sent, Referer as sent)
    (LONG_A, None),
    (LONG_B, None),
    ("/bücher".encode(), None),  # UTF-8, unescaped (as curl sends what it is given)
    (b"/\xff\xfe", None),  # not UTF-8
    (b"/p", BUCHER),
    (b"/p", b"http://\xff\xfe.example/"),
    (b"/p", b"https://www.xn--bcher-kva.example/a?b"),  # what a browser sends for the same host
]
EXPECTED_PAGES = Counter(
    {
        "/long/" + "a" * 506: 1,  # 512 bytes
        "/long/" + "b" * 506: 1,
        "/bücher": 1,
        "/%FF%FE": 1,
        "/p": 3,
    }
)
EXPECTED_SOURCES = Counter({"(direct)": 4, "xn--bcher-kva.example": 2, "(unknown)": 1})


def latin1(raw: bytes) -> str:
    """A PEP 3333 string: each byte one character."""
    return raw.decode("latin-1")


def wsgi_environ(target: bytes, referer: bytes | None, *, raw: bool) -> dict:
    """The environ gunicorn builds (``raw``: with ``REQUEST_URI``), or waitress and wsgiref (without)."""
    environ = {
        "REQUEST_METHOD": "GET",
        "SCRIPT_NAME": "",
        "PATH_INFO": latin1(target),  # no %XX in these targets: the decoded path is the target
        "QUERY_STRING": "",
        "REMOTE_ADDR": IP,
        "HTTP_USER_AGENT": BROWSER_AGENT,
        "HTTP_HOST": "site.example",
    }
    if raw:
        environ["REQUEST_URI"] = environ["RAW_URI"] = latin1(target)
    if referer is not None:
        environ["HTTP_REFERER"] = latin1(referer)
    return environ


def page(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
    return [b"<p>page</p>"]


def through_wsgi(recorder, raw: bool) -> common.Stats:
    middleware = wsgi.CountersMiddleware(page, recorder=recorder)
    for target, referer in REQUESTS:
        middleware(wsgi_environ(target, referer, raw=raw), lambda status, headers, exc_info=None: None).close()
    return middleware.stats


async def asgi_page(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/html")]})
    await send({"type": "http.response.body", "body": b"<p>page</p>"})


def asgi_scope(target: bytes, referer: bytes | None, *, raw: bool = True) -> dict:
    """The scope uvicorn builds: ``raw_path`` as sent, ``path`` decoded as UTF-8 (invalid bytes
    replaced), headers as bytes."""
    headers = [(b"user-agent", BROWSER_AGENT.encode()), (b"host", b"site.example")]
    if referer is not None:
        headers.append((b"referer", referer))
    scope = {
        "type": "http",
        "method": "GET",
        "path": target.decode("utf-8", "replace"),
        "query_string": b"",
        "headers": headers,
        "client": (IP, 5000),
    }
    if raw:
        scope["raw_path"] = target
    return scope


def through_asgi(recorder, scopes) -> common.Stats:
    middleware = asgi.CountersASGIMiddleware(asgi_page, recorder=recorder)

    async def run() -> None:
        async def receive():
            return {"type": "http.request", "body": b""}

        async def send(message):
            pass

        for scope in scopes:
            await middleware(scope, receive, send)

    asyncio.run(run())
    return middleware.stats


def through_django(recorder, raw: bool) -> common.Stats:
    pytest.importorskip("django")
    from django.conf import settings
    from django.http import HttpResponse
    from django.test import RequestFactory

    if not settings.configured:
        import tests.support.django_site  # noqa: F401  (configures Django)
    from counters_tasks.integrations.django import CountersMiddleware

    middleware = CountersMiddleware(
        lambda request: HttpResponse("<p>page</p>"), options=common.Options(recorder=recorder)
    )
    factory = RequestFactory()
    for target, referer in REQUESTS:
        # a WSGIRequest as Django makes it of the environ (PATH_INFO a PEP 3333 string, request.path decoded)
        extra = {"REQUEST_URI": latin1(target)} if raw else {}
        if referer is not None:
            extra["HTTP_REFERER"] = latin1(referer)
        request = factory.get(
            urllib.parse.quote(target), REMOTE_ADDR=IP, HTTP_USER_AGENT=BROWSER_AGENT, HTTP_HOST="site.example", **extra
        )
        middleware(request)
    return middleware.stats


ROUTES = {
    "wsgi (gunicorn)": lambda recorder: through_wsgi(recorder, raw=True),
    "wsgi (no REQUEST_URI)": lambda recorder: through_wsgi(recorder, raw=False),
    "asgi (uvicorn)": lambda recorder: through_asgi(recorder, [asgi_scope(t, r) for t, r in REQUESTS]),
    "django (gunicorn)": lambda recorder: through_django(recorder, raw=True),
    "django (no REQUEST_URI)": lambda recorder: through_django(recorder, raw=False),
}


def figures(conn) -> tuple[Counter, Counter]:
    day = local_day(time.time())
    pages = Counter(dict(sitestats.top_pages(conn, day, day, limit=100)))
    sources = Counter({found.source: found.pv for found in sitestats.top_sources(conn, day, day, limit=100)})
    return pages, sources


@pytest.mark.parametrize("route", ROUTES)
def test_every_route_counts_long_paths_encoded_paths_and_referrers_the_same(route, raw_conn, eager_app):
    recorder = VisitRecorder(app=eager_app, flush_on_sigterm=False)
    try:
        stats = ROUTES[route](recorder)
    finally:
        recorder.close()
    assert (stats.counted, stats.refused, stats.failed) == (len(REQUESTS), 0, 0), stats
    assert figures(raw_conn) == (EXPECTED_PAGES, EXPECTED_SOURCES)
    assert skips.counts(raw_conn) == {}


def test_the_names_are_the_rule_s_and_the_recorder_s_own_referrer_agrees(raw_conn, eager_app):
    """The expected names above are the rule's (``core.paths``), and ``VisitRecorder.record``
    given the Referers as text names the same sources."""
    for name in EXPECTED_PAGES:
        assert canonical_path(name) == name
    assert canonical_path(LONG_A.decode()) == "/long/" + "a" * 506
    recorder = VisitRecorder(app=eager_app, flush_on_sigterm=False)
    for target, referer in REQUESTS:
        text = None if referer is None else referer.decode("utf-8", "replace")
        recorder.record(IP, target.decode("utf-8", "replace")[:1000], referrer=text)
    recorder.close()
    assert figures(raw_conn)[1] == EXPECTED_SOURCES


def test_a_header_is_read_as_utf8_text_whatever_the_server():
    agent = BROWSER_AGENT + " Grüße/1.0"
    environ = wsgi_environ(b"/", None, raw=True) | {"HTTP_USER_AGENT": latin1(agent.encode())}
    assert wsgi.request_info(environ).headers["user-agent"] == agent
    scope = asgi_scope(b"/", None) | {"headers": [(b"user-agent", agent.encode())]}
    assert asgi.request_info(scope).headers["user-agent"] == agent
    assert common.wire_text(latin1(b"a\xff")) == "a\ufffd"  # not UTF-8: replaced, never read as latin-1
    assert common.wire_text("日本") == "日本"  # not a PEP 3333 string (a test transport's): as given


def test_a_visit_the_recorder_refuses_is_a_skip_shown_with_the_others(raw_conn, eager_app):
    """An ASGI server without ``raw_path`` that hands over a path it could not decode (a lone
    surrogate): the recorder refuses the visit (InvalidInput); the request is served, and the
    skip counts say ``refused``, as ``health`` and ``/metrics`` read them."""
    recorder = VisitRecorder(app=eager_app, flush_on_sigterm=False)
    scope = asgi_scope(b"/x", None, raw=False) | {"path": "/caf\ud800"}
    try:
        stats = through_asgi(recorder, [scope, asgi_scope(b"/ok", None)])
    finally:
        recorder.close()
    assert (stats.counted, stats.refused, stats.skipped_by["refused"]) == (1, 1, 1)
    assert skips.counts(raw_conn) == {("middleware", "refused"): 1}
    day = local_day(time.time())
    assert skips.day_counts(raw_conn, day, day)[day] == {"refused": 1}
