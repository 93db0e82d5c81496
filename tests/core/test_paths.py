"""A page's name (``core.paths``): the table of docs/api.md ("A page's name") holds on every
route a page view comes by: the module API, ``.delay()``, ``VisitRecorder``, the importer, and
the WSGI, ASGI and Django middleware given the request as their servers build it. The rule is
idempotent, never merges two different targets, and keeps names within 512 bytes."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.parse
from collections import Counter
from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from counters_tasks import sitestats, tasks
from counters_tasks.core.days import local_day
from counters_tasks.core.paths import MAX_PATH_BYTES, canonical_path
from counters_tasks.core.settings import reset_settings
from counters_tasks.core.validation import check_path
from counters_tasks.integrations import asgi, wsgi
from counters_tasks.ops import importer
from counters_tasks.recorder import VisitRecorder
from tests.support.procs import BROWSER_AGENT, REPO
from tests.support.servers import empty

pytestmark = pytest.mark.cluster

IP = "203.0.113.5"


def doc_table() -> list[tuple[str, str]]:
    """(sent, name) rows of docs/api.md's table under "A page's name"."""
    section = (REPO / "docs" / "api.md").read_text().split("## A page's name", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| `([^`]+)` \|$", section, re.M)
    assert len(rows) >= 10
    return rows


TABLE = doc_table()


def expected_views() -> Counter[str]:
    return Counter(name for _sent, name in TABLE)


@pytest.mark.parametrize("sent, name", TABLE)
def test_the_rule_gives_the_documented_name(sent, name):
    assert canonical_path(sent) == name == check_path(sent)
    assert canonical_path(name) == name  # a name is its own name


def figures_by_page(conn) -> Counter[str]:
    day = local_day(time.time())
    return Counter(dict(sitestats.top_pages(conn, day, day, limit=100)))


def test_module_api_delay_and_recorder_count_each_target_under_its_name(raw_conn, eager_app):
    for sent, _name in TABLE:
        sitestats.record_visit(raw_conn, IP, sent)
    assert figures_by_page(raw_conn) == expected_views()
    empty(raw_conn)  # the deployment kept: the shared client writes under the key raw_conn reads
    for sent, _name in TABLE:
        tasks.record_visit.delay(IP, sent)
    assert figures_by_page(raw_conn) == expected_views()
    empty(raw_conn)  # the deployment kept: the shared client writes under the key raw_conn reads
    recorder = VisitRecorder(app=eager_app, flush_on_sigterm=False)
    for sent, _name in TABLE:
        recorder.record(IP, sent)
    recorder.close()
    assert figures_by_page(raw_conn) == expected_views()


def test_the_importer_counts_each_logged_target_under_its_name(raw_conn):
    when = datetime.now(timezone.utc).strftime("%d/%b/%Y:%H:%M:%S +0000")
    lines = [f'{IP} - - [{when}] "GET {sent} HTTP/1.1" 200 10 "-" "{BROWSER_AGENT}"'.encode() for sent, _ in TABLE]
    summary = importer.import_lines(raw_conn, iter(lines), "combined")
    assert summary.counted == len(TABLE)
    assert figures_by_page(raw_conn) == expected_views()


class Names:
    """A recorder that keeps the names the middleware hands it."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def record(self, ip, path, session_id=None, ts=None, user_agent=None, language=None):
        self.paths.append(check_path(path))

    def incr_ranking(self, *args, **kwargs):
        pass


def as_sent(sent: str) -> tuple[bytes, str]:
    """(the target's bytes as a client sends them: no fragment, non-ASCII as UTF-8; the path the
    server decodes from it, as WSGI's PATH_INFO / ASGI's path)."""
    target = sent.split("#", 1)[0].encode("utf-8")
    path = urllib.parse.urlsplit(target.decode("utf-8")).path or "/"
    return target, urllib.parse.unquote(path, errors="replace")


def page(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/html")])
    return [b"<p>page</p>"]


def test_the_wsgi_middleware_names_each_target_as_the_rule_does():
    names = Names()
    middleware = wsgi.CountersMiddleware(page, recorder=names)
    for sent, _name in TABLE:
        target, path = as_sent(sent)
        environ = {
            "REQUEST_METHOD": "GET",
            "REQUEST_URI": target.decode("latin-1"),
            "SCRIPT_NAME": "",
            "PATH_INFO": path.encode("utf-8").decode("latin-1"),
            "REMOTE_ADDR": IP,
            "HTTP_USER_AGENT": BROWSER_AGENT,
        }  # as gunicorn builds it (PEP 3333 strings)
        body = middleware(environ, lambda status, headers, exc_info=None: None)
        body.close()
    assert names.paths == [name for _sent, name in TABLE]


def test_the_asgi_middleware_names_each_target_as_the_rule_does():
    names = Names()

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/html")]})
        await send({"type": "http.response.body", "body": b"<p>page</p>"})

    middleware = asgi.CountersASGIMiddleware(app, recorder=names)

    async def run() -> None:
        async def receive():
            return {"type": "http.request", "body": b""}

        async def send(message):
            pass

        for sent, _name in TABLE:
            target, path = as_sent(sent)
            scope = {
                "type": "http",
                "method": "GET",
                "path": path,
                "raw_path": target.split(b"?", 1)[0],
                "query_string": b"",
                "headers": [(b"user-agent", BROWSER_AGENT.encode())],
                "client": (IP, 5000),
            }  # as uvicorn builds it
            await middleware(scope, receive, send)

    asyncio.run(run())
    assert names.paths == [name for _sent, name in TABLE]


def test_the_django_middleware_names_each_target_as_the_rule_does(monkeypatch):
    pytest.importorskip("django")
    from django.conf import settings
    from django.http import HttpResponse
    from django.test import RequestFactory

    if not settings.configured:
        import tests.support.django_site  # noqa: F401  (configures Django)
    from counters_tasks.integrations.common import Options
    from counters_tasks.integrations.django import CountersMiddleware

    names = Names()
    middleware = CountersMiddleware(lambda request: HttpResponse("<p>page</p>"), options=Options(recorder=names))
    factory = RequestFactory()
    for sent, _name in TABLE:
        target, path = as_sent(sent)
        request = factory.get(
            urllib.parse.quote(path),
            REQUEST_URI=target.decode("latin-1"),
            REMOTE_ADDR=IP,
            HTTP_USER_AGENT=BROWSER_AGENT,
        )
        middleware(request)
    assert names.paths == [name for _sent, name in TABLE]


def test_the_path_settings_strip_trailing_slashes_and_lower_case(monkeypatch, raw_conn):
    monkeypatch.setenv("COUNTERS_PATH_TRAILING_SLASH", "strip")
    monkeypatch.setenv("COUNTERS_PATH_CASE", "lower")
    reset_settings()
    assert check_path("/Blog/Post/?x") == "/blog/post"
    assert check_path("/A%2fB/") == "/a%2Fb"
    assert check_path("/") == "/"
    sitestats.record_visit(raw_conn, IP, "/Docs/")
    sitestats.record_visit(raw_conn, IP, "/docs")
    assert figures_by_page(raw_conn) == Counter({"/docs": 2})


def test_the_importer_names_and_judges_a_page_as_the_middleware_does_under_the_path_settings(monkeypatch):
    """With COUNTERS_PATH_CASE=lower and COUNTERS_PATH_TRAILING_SLASH=strip, a logged target and
    a live one get the same name, and the rule judges that name (``/Static/app.css`` is static)."""
    monkeypatch.setenv("COUNTERS_PATH_TRAILING_SLASH", "strip")
    monkeypatch.setenv("COUNTERS_PATH_CASE", "lower")
    reset_settings()
    names = Names()
    middleware = wsgi.CountersMiddleware(page, recorder=names)
    when = datetime.now(timezone.utc).strftime("%d/%b/%Y:%H:%M:%S +0000")
    for sent, expected in (("/Blog/Post/", "/blog/post"), ("/Static/app.css", None)):
        target, path = as_sent(sent)
        environ = {
            "REQUEST_METHOD": "GET",
            "REQUEST_URI": target.decode("latin-1"),
            "SCRIPT_NAME": "",
            "PATH_INFO": path,
            "REMOTE_ADDR": IP,
            "HTTP_USER_AGENT": BROWSER_AGENT,
        }
        body = middleware(environ, lambda status, headers, exc_info=None: None)
        getattr(body, "close", lambda: None)()  # a static file's body is the app's own (a list here)
        line = f'{IP} - - [{when}] "GET {sent} HTTP/1.1" 200 10 "-" "{BROWSER_AGENT}"'
        logged = importer.log_line_visit(line, "combined", "secret")
        assert (logged["path"] if isinstance(logged, dict) else None) == expected, logged
    assert names.paths == ["/blog/post"] and middleware.stats.skipped_by["static"] == 1


targets = st.text(st.sampled_from("/ab%?#+.~é日2F3F23CF0AE9z"), max_size=40)


@given(targets, targets)
def test_the_name_is_idempotent_and_never_merges_two_targets(first, second):
    for target in (first, second):
        name = canonical_path(target)
        assert canonical_path(name) == name
        assert len(name.encode("utf-8", "surrogatepass")) <= MAX_PATH_BYTES

    # two targets share a name only when they mean the same bytes before the query and fragment
    def meaning(target: str) -> bytes:
        cut = re.split(r"[?#]", target, maxsplit=1)[0]
        cut = re.sub(r"%(?![0-9A-Fa-f]{2})", "%25", cut)
        return urllib.parse.unquote_to_bytes(cut)

    if canonical_path(first) == canonical_path(second):
        assert meaning(first) == meaning(second), (first, second)


def test_a_long_name_is_cut_on_a_character_and_never_inside_an_escape():
    assert canonical_path("/" + "é" * 600) == "/" + "é" * 255
    cut = canonical_path("/" + "a" * 509 + "%2F" * 3)
    assert cut == "/" + "a" * 509 and canonical_path(cut) == cut
