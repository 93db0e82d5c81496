"""The request integrations (counters_tasks/integrations/): the shared rules one by one (client
IP through trusted proxies, skipped paths and responses, the session cookie), each middleware in
process with a stand-in recorder, and then real apps under real servers: a Flask app under
gunicorn (2 workers, the recorder made before the fork) and a plain ASGI app under uvicorn,
real HTTP requests, a real Celery worker, and the counts read back through the public API."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from counters_tasks import InvalidInput, sitestats, uniques
from counters_tasks import recorder as recorder_module
from counters_tasks.core.days import local_day
from counters_tasks.core.validation import check_ip
from counters_tasks.integrations import common
from counters_tasks.integrations.asgi import CountersASGIMiddleware
from counters_tasks.integrations.client_ip import client_ip
from counters_tasks.integrations.common import Counting, Options, RequestInfo, request_counters
from counters_tasks.integrations.wsgi import CountersMiddleware
from counters_tasks.local.redis_server import free_port
from counters_tasks.local.waiting import wait_until
from counters_tasks.ranking import Ranking
from tests.support.procs import BROWSER_AGENT, BROWSER_HEADERS, REPO, Server, celery_env

SOCKET = "10.0.0.9"


class FakeRecorder:
    """Stands in for VisitRecorder in the in-process tests: keeps what it was given, and refuses
    what the real one refuses (the same validation)."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.visits: list[tuple[str, str, str | None]] = []
        self.bumps: list[tuple[str, str, int]] = []
        self.skips: Counter[tuple[str, str]] = Counter()
        self.fail = fail

    def skipped(self, route, reason, count=1):
        self.skips[(route, reason)] += count

    def record(self, ip, path, session_id=None, ts=None, user_agent=None, language=None):
        if self.fail is not None:
            raise self.fail
        from counters_tasks.visits import VISIT, check_visit

        check_visit(VISIT.bind((ip, path, session_id, ts), {"user_agent": user_agent, "language": language}))
        self.visits.append((ip, path, session_id))

    def incr_ranking(self, board, member, amount=1, ts=None, period_hours=24, interval_hours=1):
        from counters_tasks.ranking_bumps import RANKING, prepare_bump

        prepare_bump(RANKING.bind((board, member, amount, ts, period_hours, interval_hours), {}))
        self.bumps.append((board, member, amount))


# -- the client IP -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header, trusted, expected",
    [
        ("203.0.113.7", 0, SOCKET),  # no trusted proxy: a client's header is ignored
        ("203.0.113.7", 1, "203.0.113.7"),
        ("198.51.100.1, 203.0.113.7", 1, "203.0.113.7"),  # the left part is the client's to write
        ("198.51.100.1, 203.0.113.7", 2, "198.51.100.1"),
        ("203.0.113.7", 2, SOCKET),  # fewer hops than trusted proxies: the request bypassed them
        ("203.0.113.7:4711", 1, "203.0.113.7"),
        ("[2001:db8::1]:443", 1, "2001:db8::1"),
        ("2001:DB8::1", 1, "2001:db8::1"),
        ("::ffff:192.0.2.5", 1, "192.0.2.5"),
        ("not-an-ip", 1, SOCKET),
        ("1.2.3.4.5", 1, SOCKET),
        ("203.0.113.7,,", 1, SOCKET),
        ("", 1, SOCKET),
        (" , ", 1, SOCKET),
        ("x" * 10_000, 1, SOCKET),
    ],
)
def test_x_forwarded_for_counts_only_through_trusted_proxies(header, trusted, expected):
    assert client_ip(SOCKET, {"x-forwarded-for": header}, trusted) == expected


@pytest.mark.parametrize(
    "header, trusted, expected",
    [
        ("for=203.0.113.7", 0, SOCKET),
        ("for=203.0.113.7", 1, "203.0.113.7"),
        ('for=192.0.2.60;proto=http;by=203.0.113.43, for="[2001:db8:cafe::17]:4711"', 1, "2001:db8:cafe::17"),
        ('for=192.0.2.60;proto=http;by=203.0.113.43, for="[2001:db8:cafe::17]:4711"', 2, "192.0.2.60"),
        ('For="198.51.100.17";Proto=https', 1, "198.51.100.17"),
        ("for=unknown", 1, SOCKET),
        ("for=_hidden, for=203.0.113.7", 2, SOCKET),
        ("proto=https", 1, SOCKET),  # an element without for=
        ('for="203.0.113.7', 1, SOCKET),  # unterminated quote
        ("for", 1, SOCKET),
        ('for="a,b", for=203.0.113.7', 1, "203.0.113.7"),  # a comma inside quotes splits nothing
    ],
)
def test_forwarded_header_rfc_7239(header, trusted, expected):
    headers = {"forwarded": header, "x-forwarded-for": "198.51.100.99"}
    assert client_ip(SOCKET, headers, trusted, proxy_header="Forwarded") == expected


def test_the_socket_address_is_canonical_and_a_unix_socket_has_none():
    assert client_ip("::ffff:10.0.0.9", {}) == SOCKET
    assert client_ip(None, {"x-forwarded-for": "203.0.113.7"}, 0) is None
    assert client_ip("", {"x-forwarded-for": "203.0.113.7"}, 1) == "203.0.113.7"  # a proxy on a Unix socket


@given(header=st.text(max_size=200), trusted=st.integers(0, 4), forwarded=st.booleans())
def test_no_header_value_raises_or_yields_a_non_ip(header, trusted, forwarded):
    name = "forwarded" if forwarded else "x-forwarded-for"
    ip = client_ip(SOCKET, {name: header}, trusted, proxy_header=name)
    assert ip == SOCKET or ip == check_ip(ip)
    if trusted == 0:
        assert ip == SOCKET


def test_options_refuse_what_cannot_work():
    with pytest.raises(ValueError):
        Options(trusted_proxies=-1)
    with pytest.raises(ValueError):
        Options(proxy_header="X-Real-IP")
    with pytest.raises(ValueError):
        Options(cookie_name="a b")
    with pytest.raises(ValueError, match="unknown counters middleware options: trusted_proxy"):
        Options.from_mapping({"trusted_proxy": 1})
    assert Options.from_mapping({"trusted_proxies": 2}).trusted_proxies == 2


# -- what counts ---------------------------------------------------------------------------------


def info(path: str = "/", method: str = "GET", **headers: str) -> RequestInfo:
    """A request of a browser (its user agent unless ``user_agent`` is given)."""
    given = {k.replace("_", "-"): v for k, v in headers.items()}
    return RequestInfo(method, path, SOCKET, {"user-agent": BROWSER_AGENT} | given)


HTML = [("Content-Type", "text/html; charset=utf-8")]


@pytest.mark.parametrize(
    "path",
    [
        "/static/app.css",
        "/favicon.ico",
        "/robots.txt",
        "/img/logo.PNG",
        "/app.js",
        "/media/x",
        "/.well-known/security.txt",
    ],
)
def test_static_paths_are_skipped(path):
    counting = Counting()
    assert counting.path_is_skipped(path)
    assert not counting.request_may_count(info(path))
    assert not counting.default_should_count(info(path), 200, HTML)


@pytest.mark.parametrize(
    "method, status, headers, counted",
    [
        ("GET", 200, HTML, True),
        ("GET", 301, HTML, True),
        ("GET", 404, HTML, False),
        ("GET", 500, HTML, False),
        ("GET", 200, [("content-type", "application/json")], False),
        ("GET", 200, [("Content-Type", "application/xhtml+xml")], True),
        ("GET", 200, [], True),  # no media type: judged from the request (a browser's: a page)
        ("HEAD", 200, HTML, False),
        ("POST", 200, HTML, False),
    ],
)
def test_only_page_responses_count(method, status, headers, counted):
    assert Counting().default_should_count(info("/page", method), status, headers) is counted


@pytest.mark.parametrize(
    "request_headers, counted",
    [
        ({"sec-fetch-dest": "document", "accept": "text/html"}, True),  # a browser revalidating a page
        ({"sec-fetch-dest": "iframe"}, True),
        ({"sec-fetch-dest": "empty", "accept": "*/*"}, False),  # fetch() revalidating an API answer
        ({"sec-fetch-dest": "image", "accept": "image/avif,image/webp,*/*"}, False),
        ({"accept": "text/html,application/xhtml+xml"}, True),  # an older browser: no Sec-Fetch-Dest
        ({"accept": "application/json"}, False),
        ({}, True),  # nothing says what it is: the page name decides (as for a logged request)
    ],
)
def test_a_304_is_judged_by_its_request(request_headers, counted):
    """304 Not Modified carries no Content-Type (Werkzeug, Starlette and Django strip it): one
    view of three was lost when only text/html answers counted."""
    assert Counting().default_should_count(info("/page", **request_headers), 304, []) is counted


@pytest.mark.parametrize(
    "agent",
    [
        "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
        "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
        "curl/8.5.0",
        "python-requests/2.32.3",
        "Go-http-client/1.1",
        "",
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/131.0.0.0 Safari/537.36",
    ],
)
def test_crawlers_and_scripts_are_not_visitors(agent):
    counting = Counting()
    assert counting.skip_reason(info("/page", user_agent=agent), 200, HTML) == "crawler"
    assert Counting(skip_crawlers=False).default_should_count(info("/page", user_agent=agent), 200, HTML)


def test_a_crawler_pattern_of_ones_own_is_added_to_the_list(monkeypatch):
    from counters_tasks.core.settings import reset_settings

    agent = "ShopWatcher/2.0 (internal)"
    assert Counting().default_should_count(info("/page", user_agent=agent), 200, HTML)
    monkeypatch.setenv("COUNTERS_CRAWLER_PATTERN", r"^ShopWatcher/")
    reset_settings()
    assert Counting().skip_reason(info("/page", user_agent=agent), 200, HTML) == "crawler"


def test_every_skip_is_counted_by_reason_and_handed_to_the_recorder():
    recorder = FakeRecorder()
    middleware = CountersMiddleware(wsgi_page, recorder=recorder)
    with wsgi_client(middleware) as client:
        client.get("/page")
        client.head("/page")
        client.get("/static/app.css")
        client.get("/page", headers={"User-Agent": "curl/8.5.0"})
        client.get("/page", headers={"Accept": "application/json", "Sec-Fetch-Dest": "empty"})
    reasons = {"method": 1, "static": 1, "crawler": 1}
    assert middleware.stats.counted == 2 and middleware.stats.skipped == 3  # a JSON Accept: the answer is HTML
    assert dict(middleware.stats.skipped_by) == reasons
    assert recorder.skips == {("middleware", reason): n for reason, n in reasons.items()}


def test_the_rules_are_configurable():
    counting = Counting(
        methods=("GET", "HEAD"), statuses=(200,), content_types=None, skip_prefixes=("/admin/",), skip_extensions=()
    )
    assert counting.default_should_count(info("/api/x.json", "HEAD"), 200, [("content-type", "application/json")])
    assert not counting.default_should_count(info("/page"), 302, HTML)
    assert not counting.default_should_count(info("/admin/users"), 200, HTML)
    assert counting.default_should_count(info("/static/x.css"), 200, HTML)
    custom = Counting(should_count=lambda request, status, headers: request.path.startswith("/api/"))
    assert custom.request_may_count(info("/static/x.css"))  # the callable decides everything
    visit = custom.begin(info("/api/items"))
    custom.response(visit, 200, [("content-type", "application/json")])
    assert visit.counted


# -- the session cookie --------------------------------------------------------------------------


def test_a_browser_without_the_cookie_gets_a_new_id_on_a_page_view():
    counting = Counting(cookie_secure=True, cookie_max_age=3600, cookie_domain="example.org")
    visit = counting.begin(info("/"))
    assert visit.new_cookie is not None and visit.counters.session_id == visit.new_cookie
    assert len(visit.new_cookie) == 32 and int(visit.new_cookie, 16) >= 0
    header = counting.response(visit, 200, HTML)
    assert header == (
        f"ct_sid={visit.new_cookie}; Path=/; Max-Age=3600; HttpOnly; SameSite=Lax; Domain=example.org; Secure"
    )
    json_visit = counting.begin(info("/api"))
    assert counting.response(json_visit, 200, [("content-type", "application/json")]) is None


@pytest.mark.parametrize(
    "cookie, kept",
    [
        ("ct_sid=0123456789abcdef0123456789abcdef", True),
        ("a=1; ct_sid=01234567-89ab-cdef-0123-456789abcdef; b=2", True),
        ('ct_sid="0123456789abcdef0123456789abcdef"', True),
        ("ct_sid=0123456789abcd", False),  # 14 hex digits: the recorder would refuse it
        ("ct_sid=not-hex-at-all-not-hex-at-all", False),
        ("ct_sid=", False),
        ("other_sid=0123456789abcdef0123456789abcdef", False),
    ],
)
def test_the_cookie_is_kept_only_when_the_recorder_accepts_it(cookie, kept):
    counting = Counting()
    visit = counting.begin(info("/", cookie=cookie))
    if kept:
        assert visit.new_cookie is None and visit.counters.session_id is not None
        assert counting.response(visit, 200, HTML) is None
        common.check_session_id(visit.counters.session_id)
    else:
        assert visit.new_cookie is not None and counting.response(visit, 200, HTML) is not None


def test_an_apps_session_callable_replaces_the_cookie_and_bad_ids_are_dropped():
    ids = iter(["0123456789abcdef0123456789abcdef", "user-42", None])
    counting = Counting(session_id=lambda request: next(ids))
    first, second, third = (counting.begin(info("/")) for _ in range(3))
    assert first.counters.session_id == "0123456789abcdef0123456789abcdef"
    assert second.counters.session_id is None and third.counters.session_id is None  # counted without one
    assert all(v.new_cookie is None and counting.response(v, 200, HTML) is None for v in (first, second, third))

    def broken(request):
        raise RuntimeError("app bug")

    assert Counting(session_id=broken).begin(info("/")).counters.session_id is None


def test_an_app_that_sets_the_cookie_itself_gets_no_second_one():
    counting = Counting()
    visit = counting.begin(info("/"))
    assert counting.response(visit, 200, [*HTML, ("Set-Cookie", "ct_sid=abc; Path=/")]) is None
    assert visit.counted


# -- WSGI in process -----------------------------------------------------------------------------


def wsgi_page(environ, start_response):
    path = environ["PATH_INFO"]
    if path.startswith("/like/"):
        request_counters(environ).bump("likes", path.removeprefix("/like/"))
        start_response("200 OK", [("Content-Type", "application/json")])
        return [b"{}"]
    if path == "/private":
        request_counters(environ).skip()
    if path == "/missing":
        start_response("404 Not Found", [("Content-Type", "text/html")])
        return [b"no"]
    start_response("200 OK", [("Content-Type", "text/html")])
    return [b"<p>page</p>"]


def wsgi_client(middleware) -> httpx.Client:
    return httpx.Client(
        transport=httpx.WSGITransport(app=middleware, remote_addr=SOCKET), base_url="http://t", headers=BROWSER_HEADERS
    )


def test_wsgi_middleware_counts_pages_sets_the_cookie_and_bumps():
    recorder = FakeRecorder()
    middleware = CountersMiddleware(wsgi_page, recorder=recorder, trusted_proxies=1)
    with wsgi_client(middleware) as client:
        first = client.get("/", headers={"X-Forwarded-For": "198.51.100.1, 203.0.113.7"})
        sid = first.cookies["ct_sid"]
        assert "HttpOnly" in first.headers["set-cookie"] and "SameSite=Lax" in first.headers["set-cookie"]
        again = client.get("/a?x=1")  # the client keeps the cookie
        assert "set-cookie" not in again.headers
        client.get("/static/app.css")
        client.get("/missing")
        client.get("/private")
        client.post("/like/post-1")
        client.post("/like/" + "x" * 2000)  # a member the recorder refuses: the request still succeeds
        assert client.post("/like/post-1").status_code == 200
    assert recorder.visits == [("203.0.113.7", "/", sid), (SOCKET, "/a", sid)]
    assert recorder.bumps == [("likes", "post-1", 1), ("likes", "post-1", 1)]
    assert middleware.stats.as_dict() == {
        "counted": 2,
        "skipped": 6,
        "refused": 0,
        "failed": 0,
        "no_client_ip": 0,
        "cookies_set": 1,
        "bumps": 2,
        "bumps_refused": 1,
        "events": 0,
        "events_refused": 0,
        "events_no_site": 0,
    }


@pytest.mark.parametrize("failure, stat", [(InvalidInput("refused"), "refused"), (RuntimeError("closed"), "failed")])
def test_a_visit_the_recorder_refuses_never_breaks_the_request(failure, stat):
    recorder = FakeRecorder(fail=failure)
    middleware = CountersMiddleware(wsgi_page, recorder=recorder)
    with wsgi_client(middleware) as client:
        response = client.get("/")
    assert response.status_code == 200 and response.text == "<p>page</p>"
    assert middleware.stats.as_dict()[stat] == 1 and middleware.stats.counted == 0
    # a refusal is never silent: a skip of its own reason, which the recorder sends on (health, /metrics)
    refused = isinstance(failure, InvalidInput)
    assert recorder.skips == (Counter({("middleware", "refused"): 1}) if refused else Counter())
    assert middleware.stats.skipped_by == (Counter({"refused": 1}) if refused else Counter())


def test_a_long_path_counts_under_its_cut_name():
    """A path over the API's 1,024 characters counts under its name cut to 512 bytes (``core.paths``),
    as ``counters-tasks import`` counts its logged line, instead of being refused."""
    recorder = FakeRecorder()
    middleware = CountersMiddleware(wsgi_page, recorder=recorder)
    for target in ("/" + "é" * 1100, "/bad%01path", "/" + "é" * 600, "/long/" + "a" * 3000):
        raw = latin1(target.encode())  # a PEP 3333 string, as gunicorn gives it
        environ = {"REQUEST_METHOD": "GET", "REQUEST_URI": raw, "PATH_INFO": raw, "REMOTE_ADDR": SOCKET}
        middleware(environ | {"HTTP_USER_AGENT": BROWSER_AGENT}, lambda status, headers, exc_info=None: None).close()
    paths = [path for _ip, path, _session in recorder.visits]
    assert paths == ["/" + "é" * 255, "/bad%01path", "/" + "é" * 255, "/long/" + "a" * 506]
    assert middleware.stats.refused == 0 and not recorder.skips


def latin1(raw: bytes) -> str:
    return raw.decode("latin-1")


def test_a_static_file_keeps_the_servers_file_wrapper():
    body = object()

    def static(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/css")])
        return body

    middleware = CountersMiddleware(static, recorder=FakeRecorder())
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/static/a.css", "REMOTE_ADDR": SOCKET}
    assert middleware(environ, lambda status, headers, exc_info=None: None) is body


def test_request_counters_says_when_no_middleware_wraps_the_app():
    with pytest.raises(LookupError, match="no counters_tasks middleware"):
        request_counters({})


# -- ASGI in process -----------------------------------------------------------------------------


async def asgi_page(scope, receive, send):
    path = scope["path"]
    if path.startswith("/like/"):
        request_counters(scope).bump("likes", path.removeprefix("/like/"), 2)
    kind = b"application/json" if path.startswith(("/like/", "/api/")) else b"text/html; charset=utf-8"
    await send(
        {
            "type": "http.response.start",
            "status": 404 if path == "/missing" else 200,
            "headers": [(b"content-type", kind)],
        }
    )
    await send({"type": "http.response.body", "body": b"ok"})


def test_asgi_middleware_counts_pages_sets_the_cookie_and_bumps():
    recorder = FakeRecorder()
    middleware = CountersASGIMiddleware(asgi_page, recorder=recorder)

    async def run():
        transport = httpx.ASGITransport(app=middleware, client=(SOCKET, 1234))
        async with httpx.AsyncClient(transport=transport, base_url="http://t", headers=BROWSER_HEADERS) as client:
            first = await client.get("/", headers={"X-Forwarded-For": "203.0.113.7"})
            client.cookies.set("ct_sid", first.cookies["ct_sid"])
            second = await client.get("/b", headers={"Cookie": "x=1", "cookie": f"ct_sid={first.cookies['ct_sid']}"})
            for path in ("/static/x.css", "/missing", "/api/data"):
                await client.get(path)
            await client.post("/like/p1")
            return first, second

    first, second = asyncio.run(run())
    sid = first.cookies["ct_sid"]
    assert "set-cookie" not in second.headers
    assert recorder.visits == [(SOCKET, "/", sid), (SOCKET, "/b", sid)]  # trusted_proxies=0: the socket
    assert recorder.bumps == [("likes", "p1", 2)]
    assert middleware.stats.counted == 2 and middleware.stats.skipped == 4


def test_shared_recorder_is_one_per_process(monkeypatch):
    monkeypatch.setattr(recorder_module, "_shared", None)
    first = common.shared_recorder()
    try:
        assert common.shared_recorder() is first
        assert Counting().recorder is first
    finally:
        first.close(timeout=1)


# -- real servers ----------------------------------------------------------------------------------

SID_A = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1"
SID_B = "b2b2b2b2-b2b2-b2b2-b2b2-b2b2b2b2b2b2"


def exercise(server: Server) -> dict[str, int]:
    """Send the scenario's requests; return what it must count: pages per path prefix, uniques."""
    s = server
    # pages without the cookie: each gets a new one (and a new daily unique)
    new_cookies = set()
    for n in range(3):
        status, headers, _ = s.get(f"/direct/page{n}", {"X-Forwarded-For": f"203.0.113.{n + 1}"})  # spoofed
        assert status == 200
        cookie = headers["Set-Cookie"]
        assert cookie.startswith("ct_sid=") and "HttpOnly" in cookie and "SameSite=Lax" in cookie
        assert "Max-Age=31536000" in cookie and "Path=/" in cookie
        new_cookies.add(cookie.split(";")[0])
    assert len(new_cookies) == 3
    # pages with a cookie: none is set again; two browsers, two uniques
    for sid in (SID_A, SID_A, SID_B):
        status, headers, _ = s.get("/direct/page0", {"Cookie": f"ct_sid={sid}", "X-Forwarded-For": "198.51.100.9"})
        assert status == 200 and headers["Set-Cookie"] is None
    # a cookie the recorder would refuse is replaced
    status, headers, _ = s.get("/direct/page0", {"Cookie": "ct_sid=zzz"})
    assert headers["Set-Cookie"].startswith("ct_sid=") and "zzz" not in headers["Set-Cookie"]
    # behind one trusted proxy: the rightmost X-Forwarded-For entry is the client
    for client_address in ("203.0.113.10", "203.0.113.11"):
        s.get("/proxied/page", {"X-Forwarded-For": f"6.6.6.6, {client_address}", "Cookie": f"ct_sid={SID_A}"})
    s.get("/proxied/page", {"X-Forwarded-For": "garbage", "Cookie": f"ct_sid={SID_A}"})  # the socket: 127.0.0.1
    s.get("/proxied/page", {"Cookie": f"ct_sid={SID_A}"})  # no header: the socket again
    # not page views: static files, a 404, JSON, HEAD, a POST that bumps a ranking
    for path in ("/static/app.css", "/favicon.ico", "/robots.txt", "/direct/logo.png"):
        status, headers, _ = s.get(path)
        assert status in (200, 404) and headers["Set-Cookie"] is None, path
    status, headers, _ = s.get("/direct/missing")
    assert status == 404 and headers["Set-Cookie"] is None
    status, headers, body = s.get("/direct/api/data")
    assert status == 200 and json.loads(body) == {"ok": True} and headers["Set-Cookie"] is None
    assert s.get("/direct/page0", method="HEAD")[0] == 200
    for member in ("post-1", "post-1", "post-2"):
        assert s.get(f"/direct/like/{member}", method="POST")[0] == 200
    # site UV: 127.0.0.1 and the two proxied clients; none of the spoofed addresses
    return {"direct": 3 + 3 + 1, "proxied": 4, "uniques": 3 + 2 + 1, "uv": 3, "direct_uv": 1, "proxied_uv": 3}


def read_counts(conn, day) -> dict[str, object]:
    site = sitestats.site_visit_info(conn, day)
    return {
        "pv": site.pv,
        "uv": site.uv,
        "direct": sum(sitestats.site_visit_info(conn, day, f"/direct/page{n}").pv for n in range(3)),
        "proxied": sitestats.site_visit_info(conn, day, "/proxied/page").pv,
        "uniques": uniques.unique_visitors(conn, day),
        "direct_uv": sitestats.site_visit_info(conn, day, "/direct/page0").uv,
        "proxied_uv": sitestats.site_visit_info(conn, day, "/proxied/page").uv,
        "likes": Ranking(conn, "likes").top(withscores=True),  # its own batches, applied on their own
    }


def wait_for_counts(conn, day, want: dict[str, object], timeout: float = 30.0) -> None:
    """Until the counts in Redis are ``want`` (the worker applies what the servers sent); on a
    timeout, the assertion shows the last counts read against the expected ones."""
    seen: dict[str, object] = {}

    def arrived() -> bool:
        seen.clear()
        seen.update(read_counts(conn, day))
        return seen == want

    try:
        wait_until(arrived, timeout=timeout, what="the counts")
    except TimeoutError:
        pass
    assert seen == want


def expected_counts(expected: dict[str, int]) -> dict[str, object]:
    return {"pv": expected["direct"] + expected["proxied"], **expected, "likes": [("post-1", 2), ("post-2", 1)]}


@pytest.mark.processes
def test_flask_under_gunicorn_counts_pages_by_the_proxy_rule_and_loses_nothing_on_sigterm(
    redis_url, raw_conn, module_worker, tmp_path
):
    day = local_day(time.time())
    env = celery_env(redis_url, COUNTERS_TEST_MAX_DELAY="60")  # nothing is sent before the SIGTERM
    port = free_port()
    server = Server(
        [
            "gunicorn",
            "--preload",
            "-w",
            "2",
            "-k",
            "sync",
            "-b",
            f"127.0.0.1:{port}",
            "--graceful-timeout",
            "20",
            "tests.support.web_apps:wsgi_app",
        ],
        env,
        tmp_path / "gunicorn.log",
        port,
    )
    try:
        server.wait_for_workers(2)  # fork safety is exercised
        expected = exercise(server)
        assert read_counts(raw_conn, day)["pv"] == 0  # still buffered in the workers (max_delay 60 s)
    finally:
        assert server.stop() == 0, server.log.read_text()[-3000:]
    wait_for_counts(raw_conn, day, expected_counts(expected))


def guide_uwsgi_ini(module: str, port: int) -> str:
    """The uWSGI block of docs/guides/gunicorn.md, serving ``module`` on ``port`` from this venv."""
    guide = (REPO / "docs" / "guides" / "gunicorn.md").read_text()
    [ini] = re.findall(r"## uWSGI\n\n```ini\n(.*?)```", guide, re.S)
    assert "module = myapp:app\n" in ini
    return (
        ini.replace("module = myapp:app\n", f"module = {module}\n")
        + f"http-socket = 127.0.0.1:{port}\nhome = {sys.prefix}\n"
    )


def guide_uwsgi(env: dict[str, str], tmp_path: Path) -> Server:
    """``uwsgi`` (of this venv) serving the WSGI test app with the guide's ini block."""
    uwsgi = shutil.which("uwsgi", path=str(Path(sys.executable).parent))
    assert uwsgi, "uWSGI is in the test extra"
    port = free_port()
    (tmp_path / "uwsgi.ini").write_text(guide_uwsgi_ini("tests.support.web_apps:wsgi_app", port))
    return Server(["--ini", str(tmp_path / "uwsgi.ini")], env, tmp_path / "uwsgi.log", port, program=uwsgi)


@pytest.mark.processes
def test_flask_under_uwsgi_as_the_guide_sets_it_up_counts_pages_and_loses_nothing_on_sigterm(
    redis_url, raw_conn, module_worker, tmp_path
):
    day = local_day(time.time())
    server = guide_uwsgi(celery_env(redis_url, COUNTERS_TEST_MAX_DELAY="60"), tmp_path)  # nothing sent before SIGTERM
    try:
        server.wait_for_workers(4)
        expected = exercise(server)
        assert read_counts(raw_conn, day)["pv"] == 0  # still buffered in the workers (max_delay 60 s)
    finally:
        stopped = time.monotonic()
        assert server.stop() == 0, server.log.read_text()[-3000:]  # SIGTERM, as systemd or docker stop sends
        assert time.monotonic() - stopped < 20
    wait_for_counts(raw_conn, day, expected_counts(expected))


@pytest.mark.processes
def test_a_page_still_being_served_at_sigterm_under_uwsgi_is_counted(redis_url, raw_conn, module_worker, tmp_path):
    """The guide's uWSGI set-up stops gracefully on SIGTERM: a page in hand is finished and
    counted (``die-on-term`` killed the worker under it: the page and its view were lost)."""
    day = local_day(time.time())
    server = guide_uwsgi(celery_env(redis_url, COUNTERS_TEST_FLAG_DIR=str(tmp_path)), tmp_path)
    try:
        server.wait_for_workers(4)  # every worker has loaded the app (lazy-apps) and serves
        with ThreadPoolExecutor(1) as pool:
            slow = pool.submit(server.get, "/direct/slow")
            wait_until(lambda: (tmp_path / "started").exists(), timeout=10, what="the slow page to start")
            server.process.send_signal(signal.SIGTERM)
            wait_until(
                lambda: "graceful shutdown triggered" in server.log.read_text() or server.process.poll() is not None,
                timeout=10,
                what="uWSGI to take the SIGTERM",
            )
            (tmp_path / "release").touch()
            assert slow.result(timeout=30)[0] == 200
    finally:
        assert server.stop() == 0, server.log.read_text()[-3000:]
    wait_until(
        lambda: sitestats.site_visit_info(raw_conn, day, "/direct/slow").pv == 1,
        timeout=30,
        what="the page served during the shutdown to be counted",
    )


@pytest.mark.processes
def test_an_asgi_app_under_uvicorn_counts_pages_by_the_proxy_rule_and_loses_nothing_on_sigterm(
    redis_url, raw_conn, module_worker, tmp_path
):
    day = local_day(time.time())
    env = celery_env(redis_url, COUNTERS_TEST_MAX_DELAY="60")  # nothing is sent before the SIGTERM
    port = free_port()
    # --no-proxy-headers: uvicorn would otherwise rewrite the client address from X-Forwarded-For
    # itself for a peer on 127.0.0.1 (its default --forwarded-allow-ips); the middleware's rule is tested
    server = Server(
        [
            "uvicorn",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-access-log",
            "--no-proxy-headers",
            "tests.support.web_apps:asgi_app",
        ],
        env,
        tmp_path / "uvicorn.log",
        port,
    )
    try:
        expected = exercise(server)
        # over the API's 1,024 characters: counted under its name cut to 512 bytes (a known visitor and session)
        long_page = "/direct/bad" + "x" * 5000
        assert server.get(long_page, {"Cookie": f"ct_sid={SID_A}"})[0] == 200
        stats = json.loads(server.get("/stats")[2])
        assert stats["direct"]["refused"] == 0 and stats["direct"]["counted"] == expected["direct"] + 1
        assert stats["proxied"]["counted"] == expected["proxied"] and stats["direct"]["bumps"] == 3
        assert read_counts(raw_conn, day)["pv"] == 0  # still buffered in the server (max_delay 60 s)
    finally:
        server.stop()
    wait_for_counts(raw_conn, day, expected_counts(expected) | {"pv": expected["direct"] + expected["proxied"] + 1})
    assert sitestats.site_visit_info(raw_conn, day, long_page[:512]).pv == 1


WITHOUT_FRAMEWORKS = """
import importlib.abc, sys

BLOCKED = {"django", "flask", "werkzeug", "gunicorn", "starlette", "uvicorn", "asgiref"}

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is not installed here")
        return None

sys.meta_path.insert(0, Block())
import counters_tasks
from counters_tasks.integrations import asgi, common, django, wsgi
wsgi.CountersMiddleware(lambda environ, start_response: [])
asgi.CountersASGIMiddleware(lambda scope, receive, send: None)
django.CountersMiddleware(lambda request: None, options=common.Options())
print(sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED))
"""


@pytest.mark.processes
def test_the_package_and_its_middleware_import_without_any_web_framework():
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_FRAMEWORKS], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_visits_of_requests_in_flight_after_a_sigterm_flush_go_to_a_renewed_shared_recorder(
    eager_app, raw_conn, monkeypatch
):
    monkeypatch.setattr(recorder_module, "_shared", None)
    middleware = CountersMiddleware(wsgi_page)  # the shared recorder, in eager mode here
    day = local_day(time.time())
    with wsgi_client(middleware) as client:
        client.get("/")
        first = common.shared_recorder()
        first.close(timeout=5)  # what VisitRecorder's SIGTERM handler does while requests still drain
        client.get("/")
        client.post("/like/after-close")
    renewed = common.shared_recorder()
    try:
        assert renewed is not first
        assert middleware.stats.counted == 2 and middleware.stats.failed == 0 and middleware.stats.bumps == 1
        assert sitestats.site_visit_info(raw_conn, day, "/").pv == 2
    finally:
        renewed.close(timeout=5)


def test_the_asgi_lifespan_shutdown_flushes_the_recorder():
    class Flushing(FakeRecorder):
        flushed = 0

        def flush(self, timeout=None):
            Flushing.flushed += 1
            return True

    middleware = CountersASGIMiddleware(asgi_lifespan_app, recorder=Flushing())
    messages = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])
    sent = []

    async def receive():
        return next(messages)

    async def send(message):
        sent.append(message["type"])

    async def run():
        await middleware(
            {"type": "http", "method": "GET", "path": "/", "headers": [], "client": (SOCKET, 1)}, receive, send
        )  # a page view: the recorder is made
        sent.clear()
        await middleware({"type": "lifespan"}, receive, send)

    asyncio.run(run())
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert Flushing.flushed == 1


async def asgi_lifespan_app(scope, receive, send):
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    await asgi_page(scope, receive, send)


def test_a_recorder_callable_is_called_once_at_the_first_counted_request():
    made = []

    def make():
        made.append(FakeRecorder())
        return made[-1]

    middleware = CountersMiddleware(wsgi_page, recorder=make)
    assert made == []  # nothing made at import or construction (a server may fork after)
    with wsgi_client(middleware) as client:
        client.get("/")
        client.get("/b")
    assert len(made) == 1 and [path for _, path, _ in made[0].visits] == ["/", "/b"]


@pytest.mark.processes
def test_a_page_still_being_served_at_sigterm_is_counted(redis_url, raw_conn, module_worker, tmp_path):
    """gunicorn without --preload, the shared recorder made at the first page view (in the worker,
    so its SIGTERM handler runs first and closes it before gunicorn drains): the page served
    after that goes to a renewed recorder, flushed at the worker's exit."""
    day = local_day(time.time())
    env = celery_env(redis_url, COUNTERS_TEST_FLAG_DIR=str(tmp_path))
    port = free_port()
    server = Server(
        [
            "gunicorn",
            "-w",
            "1",
            "-k",
            "sync",
            "-b",
            f"127.0.0.1:{port}",
            "--graceful-timeout",
            "20",
            "tests.support.web_apps:shared_wsgi_app",
        ],
        env,
        tmp_path / "gunicorn.log",
        port,
    )
    try:
        assert server.get("/direct/page0")[0] == 200  # the shared recorder is made here
        with ThreadPoolExecutor(1) as pool:
            slow = pool.submit(server.get, "/direct/slow")
            wait_until(lambda: (tmp_path / "started").exists(), timeout=10, what="the slow page to start")
            server.process.send_signal(signal.SIGTERM)
            wait_until(lambda: (tmp_path / "sigterm-seen").exists(), timeout=10, what="the worker's SIGTERM")
            (tmp_path / "release").touch()  # the recorder is closed by now: the handlers ran before the view goes on
            assert slow.result(timeout=30)[0] == 200
    finally:
        assert server.stop() == 0, server.log.read_text()[-3000:]
    wait_until(
        lambda: (
            (
                sitestats.site_visit_info(raw_conn, day, "/direct/page0").pv,
                sitestats.site_visit_info(raw_conn, day, "/direct/slow").pv,
            )
            == (1, 1)
        ),
        timeout=30,
        what="both pages counted (the slow one was lost before the renewal)",
    )
