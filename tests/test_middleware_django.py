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
from counters_tasks.ranking import Ranking

MIDDLEWARE = "counters_tasks.integrations.django.CountersMiddleware"


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


urlpatterns = [path("", home), path("articles/<int:number>", article), path("api/data", api),
               path("private", private)]

if not settings.configured:
    settings.configure(DEBUG=False, ALLOWED_HOSTS=["testserver"], ROOT_URLCONF=__name__, MIDDLEWARE=[MIDDLEWARE],
                       SECRET_KEY="test-only", USE_TZ=True, INSTALLED_APPS=[])
    django.setup()


@pytest.fixture
def recorder(eager_app):
    made = VisitRecorder(app=eager_app, flush_on_sigterm=False)
    yield made
    made.close(timeout=5)


def test_django_middleware_counts_page_views_sets_the_cookie_and_bumps(recorder, raw_conn):
    day = local_day(time.time())
    with override_settings(COUNTERS_MIDDLEWARE={"recorder": recorder, "trusted_proxies": 1}):
        client = Client()
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
        client = Client()
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
