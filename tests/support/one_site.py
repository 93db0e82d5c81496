"""One small site served three ways, for tests/system/test_routes_agree.py: Flask (WSGI, under
gunicorn), Starlette (ASGI, under uvicorn) and Django (WSGI, under gunicorn), each behind the
package's middleware for its kind, trusting one proxy (the test sends ``X-Forwarded-For``).
Each answers as such an app does, with its framework's own handling:

- ``/static/<file>``: a stylesheet;
- ``/missing``: 404;
- ``/health`` (plain text): the test's readiness probe;
- any other path: an HTML page with an ETag; a request that sends it back (``If-None-Match``)
  gets ``304 Not Modified``, which Werkzeug, Starlette and Django send without a Content-Type.

Visits go through a ``VisitRecorder`` made at import, to the broker, to a real worker.
"""

from __future__ import annotations

import os

ETAG = '"v1"'
KIND = os.environ.get("ONE_SITE_KIND", "")


def _flask_app():
    from flask import Flask, Response, request

    from counters_tasks.integrations.wsgi import CountersMiddleware

    app = Flask(__name__, static_folder=None)

    @app.get("/health")
    def health():
        return Response("ok", content_type="text/plain")

    @app.get("/static/<path:name>")
    def static_file(name: str):
        return Response("body {}", content_type="text/css")

    @app.get("/missing")
    def missing():
        return Response("<p>not found</p>", status=404, content_type="text/html")

    @app.get("/", defaults={"page": ""})
    @app.get("/<path:page>")
    def page(page: str):
        response = Response(f"<!doctype html><p>{page}</p>", content_type="text/html; charset=utf-8")
        response.set_etag(ETAG.strip('"'))
        return response.make_conditional(request)

    middleware = CountersMiddleware(app.wsgi_app, trusted_proxies=1)
    app.wsgi_app = middleware
    return app


def _starlette_app():
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, PlainTextResponse, Response
    from starlette.routing import Route

    from counters_tasks.integrations.asgi import CountersASGIMiddleware

    async def static_file(request: Request) -> Response:
        return PlainTextResponse("body {}", media_type="text/css")

    async def health(request: Request) -> Response:
        return PlainTextResponse("ok")

    async def missing(request: Request) -> Response:
        return HTMLResponse("<p>not found</p>", status_code=404)

    async def page(request: Request) -> Response:
        if request.headers.get("if-none-match") == ETAG:
            return Response(status_code=304, headers={"etag": ETAG})  # as Starlette's StaticFiles answers
        return HTMLResponse(f"<!doctype html><p>{request.url.path}</p>", headers={"etag": ETAG})

    app = Starlette(
        routes=[
            Route("/static/{name:path}", static_file),
            Route("/health", health),
            Route("/missing", missing),
            Route("/{page:path}", page),
        ]
    )
    middleware = CountersASGIMiddleware(app, trusted_proxies=1)
    return middleware


def _django_app():
    import django
    from django.conf import settings
    from django.core.wsgi import get_wsgi_application
    from django.http import HttpResponse
    from django.urls import re_path
    from django.views.decorators.http import etag

    def static_file(request, name):
        return HttpResponse("body {}", content_type="text/css")

    def missing(request):
        return HttpResponse("<p>not found</p>", status=404)

    def health(request):
        return HttpResponse("ok", content_type="text/plain")

    @etag(lambda request, page: ETAG)
    def page(request, page):
        return HttpResponse(f"<!doctype html><p>{page}</p>")

    settings.configure(
        DEBUG=False,
        ALLOWED_HOSTS=["127.0.0.1"],
        ROOT_URLCONF=__name__,
        SECRET_KEY="test-only",
        USE_TZ=True,
        INSTALLED_APPS=[],
        APPEND_SLASH=False,
        MIDDLEWARE=["counters_tasks.integrations.django.CountersMiddleware"],
        COUNTERS_MIDDLEWARE={"trusted_proxies": 1},
    )
    global urlpatterns
    urlpatterns = [
        re_path(r"^static/(?P<name>.*)$", static_file),
        re_path(r"^health$", health),
        re_path(r"^missing$", missing),
        re_path(r"^(?P<page>.*)$", page),
    ]
    django.setup()
    return get_wsgi_application()


urlpatterns: list = []

application = {"flask": _flask_app, "starlette": _starlette_app, "django": _django_app}.get(KIND, lambda: None)()
"""The app of ``ONE_SITE_KIND`` (flask, starlette, django)."""
