"""Any bytes a client can send in a request's target, Referer, User-Agent and Accept-Language,
through the middleware of every route (WSGI as gunicorn and as a server without ``REQUEST_URI``
build it, ASGI as uvicorn builds it, Django), beside a good request: the page is served, each
request is counted as a page view or skipped with a reason that the skip counts show (``health``,
``/metrics``), never neither, and the good request is counted whatever its neighbour sent.
(The cases a user reported, one by one: ``test_common_request_text.py``.)"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from counters_tasks import VisitRecorder, sitestats, skips
from tests.integrations.test_common_request_text import (
    asgi_scope,
    latin1,
    through_asgi,
    wsgi_environ,
)

header_bytes = st.one_of(
    st.binary(max_size=60),
    st.text(max_size=30).map(str.encode),
    st.sampled_from([b"\xff\xfe", b"\xed\xa0\x80", b"\x00", b"\xc3", "é".encode() * 3000, b"x" * 10_240]),
)
target_bytes = st.one_of(header_bytes, st.binary(max_size=60).map(lambda raw: b"/" + raw.replace(b"?", b"")))


def wsgi_route(recorder, requests, *, raw: bool):
    from counters_tasks.integrations import wsgi
    from tests.integrations.test_common_request_text import page

    middleware = wsgi.CountersMiddleware(page, recorder=recorder)
    for target, referer, agent, language in requests:
        environ = wsgi_environ(target, referer, raw=raw) | {"HTTP_USER_AGENT": latin1(agent)}
        environ["HTTP_ACCEPT_LANGUAGE"] = latin1(language)
        body = middleware(environ, lambda status, headers, exc_info=None: None)
        assert b"".join(body) == b"<p>page</p>"
        close = getattr(body, "close", None)  # as a WSGI server does: only when the body has one
        if close is not None:  # (a static file's answer is the app's own list: the middleware keeps it)
            close()
    return middleware.stats


def asgi_route(recorder, requests):
    scopes = []
    for target, referer, agent, language in requests:
        scope = asgi_scope(target, referer)
        scope["headers"] = [
            *(pair for pair in scope["headers"] if pair[0] != b"user-agent"),
            (b"user-agent", agent),
            (b"accept-language", language),
        ]
        scopes.append(scope)
    return through_asgi(recorder, scopes)


ROUTES = {
    "wsgi (gunicorn)": lambda recorder, requests: wsgi_route(recorder, requests, raw=True),
    "wsgi (no REQUEST_URI)": lambda recorder, requests: wsgi_route(recorder, requests, raw=False),
    "asgi (uvicorn)": asgi_route,
}

GOOD = (b"/good", b"https://news.example/", b"Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Firefox/121.0", b"en")


@pytest.mark.parametrize("route", ROUTES)
def test_any_request_bytes_are_counted_or_skipped_with_a_reason(route, raw_conn, eager_app):
    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(target=target_bytes, referer=header_bytes, agent=header_bytes, language=header_bytes)
    def check(target, referer, agent, language):
        raw_conn.flushdb()
        recorder = VisitRecorder(app=eager_app, flush_on_sigterm=False)
        try:
            stats = ROUTES[route](recorder, [GOOD, (target, referer, agent, language), GOOD])
        finally:
            recorder.close()
        assert stats.failed == 0, stats
        assert stats.counted + stats.skipped == 3, stats  # each request counted, or skipped with a reason
        assert sitestats.site_visit_info(raw_conn).pv == stats.counted >= 2
        assert sitestats.site_visit_info(raw_conn, None, "/good").pv == 2  # the neighbour counted whatever
        # every skip, by its reason, where health and /metrics read them
        assert skips.counts(raw_conn) == {("middleware", reason): n for reason, n in stats.skipped_by.items() if n}

    check()
