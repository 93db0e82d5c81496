"""A minimal Django site set up as docs/guides/django.md says, for gunicorn in
tests/integrations/test_django.py (``DJANGO_SETTINGS_MODULE`` is this module; gunicorn serves
``application``). One reverse proxy is trusted; the recorder is named by a dotted path, made at
import (in gunicorn's master with ``--preload``), its ``max_delay`` from ``COUNTERS_TEST_MAX_DELAY``.

- ``/page<n>``: HTML pages (counted); ``/api/data``: JSON (not counted);
- ``/like/<member>`` (POST): bumps ``likes``; ``/private``: a page the view skips;
- ``/health``, ``/pid``: for the test itself (never counted).
"""

from __future__ import annotations

import os
import time

import django
from django.conf import settings
from django.core.wsgi import get_wsgi_application
from django.http import HttpResponse, JsonResponse
from django.urls import path

from counters_tasks import VisitRecorder

RECORDER = VisitRecorder(max_delay=float(os.environ.get("COUNTERS_TEST_MAX_DELAY", "0.2")))


def health(request):
    return HttpResponse("ok", content_type="text/plain")


def pid(request):
    time.sleep(0.02)  # held a moment, so concurrent requests find this worker busy and go to the other
    return JsonResponse(os.getpid(), safe=False)


def page(request, n):
    return HttpResponse(f"<!doctype html><title>page {n}</title><p>page {n}</p>")


def api(request):
    return JsonResponse({"ok": True})


def like(request, member):
    request.counters.bump("likes", member)
    return JsonResponse({"liked": member})


def private(request):
    request.counters.skip()
    return HttpResponse("<!doctype html><p>private</p>")


urlpatterns = [
    path("health", health),
    path("pid", pid),
    path("page<int:n>", page),
    path("api/data", api),
    path("like/<str:member>", like),
    path("private", private),
]

settings.configure(
    DEBUG=False,
    ALLOWED_HOSTS=["127.0.0.1"],
    ROOT_URLCONF=__name__,
    SECRET_KEY="test-only",
    USE_TZ=True,
    INSTALLED_APPS=[],
    MIDDLEWARE=[
        "django.middleware.security.SecurityMiddleware",
        "django.middleware.common.CommonMiddleware",
        "counters_tasks.integrations.django.CountersMiddleware",
    ],
    COUNTERS_MIDDLEWARE={"trusted_proxies": 1, "recorder": f"{__name__}.RECORDER"},
)
django.setup()
application = get_wsgi_application()
