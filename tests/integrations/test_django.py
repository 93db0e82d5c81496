"""The Django middleware in a minimal Django site (settings configured here, Django's test
client), its recorder in eager mode (as an app's own tests run it): each page view is in Redis
when the response comes back, read through the public API."""

from __future__ import annotations

import time

import django
import pytest
from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.test import Client, override_settings
from django.urls import path

from counters_tasks import VisitRecorder, sitestats, uniques
from counters_tasks.core.days import local_day
from counters_tasks.integrations.django import CountersMiddleware, options_from_settings
from counters_tasks.local.redis_server import free_port
from counters_tasks.local.waiting import wait_until
from counters_tasks.ranking import Ranking
from tests.support.procs import BROWSER_HEADERS, Server, celery_env

MIDDLEWARE = "counters_tasks.integrations.django.CountersMiddleware"
SID = "c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3"


def home(request):
    return HttpResponse("<!doctype html><p>home</p>")


def article(request, number):
    request.counters.bump("articles", str(number))
    return HttpResponse(f"<!doctype html><p>article {number}</p>")


def api(request):
    return JsonResponse({"ok": True})


def private(request):
    request.counters.skip()
    return HttpResponse("<!doctype html><p>private</p>")


urlpatterns = [path("", home), path("articles/<int:number>", article), path("api/data", api), path("private", private)]

if not settings.configured:
    settings.configure(
        DEBUG=False,
        ALLOWED_HOSTS=["testserver"],
        ROOT_URLCONF=__name__,
        MIDDLEWARE=[MIDDLEWARE],
        SECRET_KEY="test-only",
        USE_TZ=True,
        INSTALLED_APPS=[],
    )
    django.setup()


@pytest.fixture
def recorder(eager_app):
    made = VisitRecorder(app=eager_app, flush_on_sigterm=False)
    yield made
    made.close(timeout=5)


def test_django_middleware_counts_page_views_sets_the_cookie_and_bumps(recorder, raw_conn):
    day = local_day(time.time())
    with override_settings(COUNTERS_MIDDLEWARE={"recorder": recorder, "trusted_proxies": 1}):
        client = Client(headers=BROWSER_HEADERS)
        first = client.get("/", HTTP_X_FORWARDED_FOR="198.51.100.1, 203.0.113.7")
        assert first.status_code == 200
        cookie = first.cookies["ct_sid"]
        assert len(cookie.value) == 32 and cookie["httponly"] and cookie["samesite"] == "Lax"
        assert cookie["max-age"] == 365 * 24 * 3600 and cookie["path"] == "/" and not cookie["secure"]
        assert sitestats.site_visit_info(raw_conn, day, "/").pv == 1  # eager: applied before the response
        second = client.get("/articles/7", HTTP_X_FORWARDED_FOR="203.0.113.8")
        assert "ct_sid" not in second.cookies  # the client sent it back
        for url in ("/api/data", "/missing", "/static/app.css", "/private"):
            response = client.get(url)
            assert "ct_sid" not in response.cookies, url
        client.post("/articles/7")  # not a page view, but the bump counts
    site = sitestats.site_visit_info(raw_conn, day)
    assert (site.pv, site.uv) == (2, 2)  # 203.0.113.7 and .8: one trusted proxy
    assert uniques.unique_visitors(raw_conn, day) == 1
    assert Ranking(raw_conn, "articles").top(withscores=True) == [("7", 2)]
    assert recorder.stats()["dropped"] == 0


def test_without_trusted_proxies_the_socket_address_counts(recorder, raw_conn):
    day = local_day(time.time())
    with override_settings(COUNTERS_MIDDLEWARE={"recorder": recorder}):
        client = Client(headers=BROWSER_HEADERS)
        for n in range(3):
            client.get("/", HTTP_X_FORWARDED_FOR=f"203.0.113.{n + 1}")
    assert sitestats.site_visit_info(raw_conn, day, "/").uv == 1  # 127.0.0.1, the test client's socket
    assert sitestats.site_visit_info(raw_conn, day, "/").pv == 3


def session_from_user(info):
    return "0123456789abcdef0123456789abcdef"


def test_settings_name_callables_by_dotted_path_and_unknown_options_fail_loudly():
    options = options_from_settings({"session_id": f"{__name__}.session_from_user", "cookie_secure": True})
    assert options.session_id is session_from_user and options.cookie_secure
    with pytest.raises(ValueError, match="unknown counters middleware options: trusted"):
        with override_settings(COUNTERS_MIDDLEWARE={"trusted": 1}):
            CountersMiddleware(home)


@pytest.mark.processes
def test_a_django_site_under_gunicorn_counts_by_the_proxy_rule_and_loses_nothing_on_sigterm(
    redis_url, raw_conn, module_worker, tmp_path
):
    """The guide's set-up (tests/support/django_site.py) served by gunicorn with two preloaded
    workers, real HTTP requests through one trusted proxy, the visits buffered until SIGTERM."""
    day = local_day(time.time())
    env = celery_env(redis_url, COUNTERS_TEST_MAX_DELAY="60", DJANGO_SETTINGS_MODULE="tests.support.django_site")
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
            "tests.support.django_site:application",
        ],
        env,
        tmp_path / "gunicorn.log",
        port,
    )
    try:
        server.wait_for_workers(2)
        cookies = set()
        for n in range(3):  # new browsers behind the proxy: the rightmost entry is the client
            status, headers, _ = server.get(f"/page{n}", {"X-Forwarded-For": f"6.6.6.6, 203.0.113.{n + 1}"})
            assert status == 200 and headers["Set-Cookie"].startswith("ct_sid=")
            cookies.add(headers["Set-Cookie"].split(";")[0])
        assert len(cookies) == 3
        for _ in range(4):  # one returning browser, from a fourth address
            status, headers, _ = server.get("/page0", {"X-Forwarded-For": "203.0.113.9", "Cookie": f"ct_sid={SID}"})
            assert status == 200 and headers["Set-Cookie"] is None
        for path, want in (("/static/app.css", 404), ("/api/data", 200), ("/private", 200), ("/missing", 404)):
            status, headers, _ = server.get(path, {"X-Forwarded-For": "203.0.113.50"})
            assert status == want and headers["Set-Cookie"] is None, path
        for member in ("post-1", "post-1", "post-2"):
            assert server.get(f"/like/{member}", method="POST")[0] == 200
        assert sitestats.site_visit_info(raw_conn, day).pv == 0  # still buffered in the workers (max_delay 60 s)
    finally:
        assert server.stop() == 0, server.log.read_text()[-3000:]

    def counted() -> bool:
        return sitestats.site_visit_info(raw_conn, day).pv == 7 and len(Ranking(raw_conn, "likes").top()) == 2

    wait_until(counted, timeout=30, what="the visits flushed at SIGTERM")
    assert sitestats.site_visit_info(raw_conn, day).uv == 4  # 203.0.113.1-3 and .9; never 6.6.6.6 or .50
    assert [sitestats.site_visit_info(raw_conn, day, f"/page{n}").pv for n in range(3)] == [5, 1, 1]
    assert sitestats.site_visit_info(raw_conn, day, "/private").pv == 0
    assert uniques.unique_visitors(raw_conn, day) == 4  # three new cookies and one returning
    assert Ranking(raw_conn, "likes").top(withscores=True) == [("post-1", 2), ("post-2", 1)]
