"""``counters_tasks.integrations.track_event``: an app's view says "signup happened" without
knowing the visitor's ids, under the WSGI (Flask), ASGI (Starlette) and Django middleware, in
process with a stand-in recorder. The event carries what the request's page view is counted
with: the client address by the trusted-proxy rule, the session cookie, the site of the Host."""

from __future__ import annotations

import asyncio
import json

import django
import httpx
import pytest
from django.conf import settings
from django.http import HttpResponse
from django.test import RequestFactory
from flask import Flask, request
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse
from starlette.routing import Route

from counters_tasks import InvalidInput
from counters_tasks.core.events import MAX_PROPS
from counters_tasks.integrations import track_event
from counters_tasks.integrations.asgi import CountersASGIMiddleware
from counters_tasks.integrations.common import Options, RequestCounters
from counters_tasks.integrations.django import CountersMiddleware as DjangoMiddleware
from counters_tasks.integrations.wsgi import CountersMiddleware
from tests.support.procs import BROWSER_HEADERS
from tests.support.servers import use_settings

if not settings.configured:  # (tests/integrations/test_django.py configures its own, when it runs first)
    settings.configure(DEBUG=False, ALLOWED_HOSTS=["*"], SECRET_KEY="test-only", USE_TZ=True, INSTALLED_APPS=[])
    django.setup()

SOCKET = "10.0.0.9"
SID = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1"
SITES = json.dumps({"shop": {"hosts": ["shop.example.pt"]}, "default": {"hosts": ["www.example.com"]}})


class EventRecorder:
    """Stands in for VisitRecorder: keeps the visits and events it was given, as the middleware
    hands them over (keyword by keyword), refusing an event as the real one would."""

    def __init__(self) -> None:
        self.visits: list[dict] = []
        self.events: list[dict] = []
        self.skips: list[tuple] = []

    def skipped(self, route, reason, count=1, site=None):
        self.skips.append((route, reason, site))

    def record(self, ip, path, session_id=None, ts=None, site=None, **source):
        self.visits.append({"ip": ip, "path": path, "session_id": session_id, "site": site})

    def track_event(self, name, props=None, ts=None, ip=None, session_id=None, site=None):
        if name == "refused-by-recorder":
            raise InvalidInput("refused")
        self.events.append({"name": name, "props": props, "ip": ip, "session_id": session_id, "site": site, "ts": ts})


def without_ts(events: list[dict]) -> list[dict]:
    return [{k: v for k, v in event.items() if k != "ts"} for event in events]


# -- Flask (WSGI) ---------------------------------------------------------------------------------

flask_app = Flask(__name__)


@flask_app.post("/signup")
def signup():
    track_event(request, "signup", {"plan": request.args.get("plan", "free")})
    return "", 303, {"Location": "/welcome"}


@flask_app.get("/welcome")
def welcome():
    track_event(request.environ, "welcome_seen")
    return "<!doctype html><p>welcome</p>"


@flask_app.post("/bad")
def bad():
    try:
        track_event(request, "bad", {"list": [1, 2]})
    except InvalidInput as exc:
        return {"refused": str(exc)}, 400
    return {"refused": None}


@flask_app.post("/many")
def many():
    track_event(request, "many", {f"k{n}": n for n in range(MAX_PROPS + 3)})
    track_event(request, "refused-by-recorder")
    return {}


def flask_client(middleware, host: str = "t") -> httpx.Client:
    return httpx.Client(
        transport=httpx.WSGITransport(app=middleware, remote_addr=SOCKET),
        base_url=f"http://{host}",
        headers=BROWSER_HEADERS,
    )


def test_a_flask_view_tracks_events_of_the_visitor_the_page_view_counts():
    """A POST (never a page view) and a page that is one: each event has the client address the
    trusted proxy gave, the browser's session cookie, and its time; the page view and its event
    name the same visitor."""
    recorder = EventRecorder()
    middleware = CountersMiddleware(flask_app.wsgi_app, recorder=recorder, trusted_proxies=1)
    proxy = {"X-Forwarded-For": "198.51.100.1, 203.0.113.7"}
    with flask_client(middleware) as client:
        client.cookies.set("ct_sid", SID)
        assert client.post("/signup?plan=pro", headers=proxy).status_code == 303
        assert client.get("/welcome", headers=proxy).status_code == 200
    assert without_ts(recorder.events) == [
        {"name": "signup", "props": {"plan": "pro"}, "ip": "203.0.113.7", "session_id": SID, "site": None},
        {"name": "welcome_seen", "props": None, "ip": "203.0.113.7", "session_id": SID, "site": None},
    ]
    assert recorder.visits == [{"ip": "203.0.113.7", "path": "/welcome", "session_id": SID, "site": None}]
    assert all(isinstance(event["ts"], float) for event in recorder.events)
    stats = middleware.stats.as_dict()
    assert (stats["events"], stats["events_refused"], stats["events_no_site"], stats["counted"]) == (2, 0, 0, 1)


def test_a_new_visitors_event_has_the_session_id_its_page_view_is_counted_and_cookied_with():
    recorder = EventRecorder()
    middleware = CountersMiddleware(flask_app.wsgi_app, recorder=recorder)
    with flask_client(middleware) as client:
        response = client.get("/welcome")
    sid = response.cookies["ct_sid"]
    assert recorder.events[0]["session_id"] == sid == recorder.visits[0]["session_id"]
    assert recorder.events[0]["ip"] == SOCKET  # no trusted proxy: the socket's address


def test_caps_refuse_in_the_view_and_the_recorders_refusal_is_counted_never_raised():
    recorder = EventRecorder()
    middleware = CountersMiddleware(flask_app.wsgi_app, recorder=recorder)
    with flask_client(middleware) as client:
        refused = client.post("/bad")
        assert client.post("/many").status_code == 200
    assert refused.status_code == 400 and "list" in refused.json()["refused"]
    # past MAX_PROPS the recorder drops and counts the rest (core.events): handed over as given
    assert [event["name"] for event in recorder.events] == ["many"]
    assert len(recorder.events[0]["props"]) == MAX_PROPS + 3
    stats = middleware.stats.as_dict()
    assert (stats["events"], stats["events_refused"]) == (1, 1)


def test_an_event_of_a_request_no_site_lists_is_counted_as_such_not_sent(monkeypatch):
    use_settings(monkeypatch, COUNTERS_SITES=SITES)
    recorder = EventRecorder()
    middleware = CountersMiddleware(flask_app.wsgi_app, recorder=recorder)
    with flask_client(middleware, "shop.example.pt") as client:
        client.post("/signup")
    with flask_client(middleware, "unknown.example.org") as client:
        client.post("/signup")
    assert [(event["name"], event["site"]) for event in recorder.events] == [("signup", "shop")]
    assert middleware.stats.events_no_site == 1 and middleware.stats.events == 1


def test_outside_a_middleware_the_helper_says_so():
    with pytest.raises(LookupError, match="no counters_tasks middleware"):
        track_event({}, "signup")
    with pytest.raises(LookupError, match="no counters_tasks middleware"):
        track_event(object(), "signup")
    with pytest.raises(LookupError, match="no request"):
        RequestCounters().track_event("signup")


# -- Starlette (ASGI) -----------------------------------------------------------------------------


async def starlette_signup(request: Request):
    track_event(request, "signup", {"plan": "team"})
    return JSONResponse({"ok": True})


async def starlette_page(request: Request):
    track_event(request.scope, "page_event", {"n": 1})
    return HTMLResponse("<!doctype html><p>page</p>")


starlette_app = Starlette(routes=[Route("/signup", starlette_signup, methods=["POST"]), Route("/page", starlette_page)])


def test_a_starlette_view_tracks_events_through_the_asgi_middleware():
    recorder = EventRecorder()
    middleware = CountersASGIMiddleware(starlette_app, recorder=recorder, trusted_proxies=1)

    async def run():
        transport = httpx.ASGITransport(app=middleware, client=(SOCKET, 1234))
        async with httpx.AsyncClient(transport=transport, base_url="http://t", headers=BROWSER_HEADERS) as client:
            client.cookies.set("ct_sid", SID)
            await client.post("/signup", headers={"X-Forwarded-For": "203.0.113.8"})
            await client.get("/page", headers={"X-Forwarded-For": "203.0.113.8"})

    asyncio.run(run())
    assert without_ts(recorder.events) == [
        {"name": "signup", "props": {"plan": "team"}, "ip": "203.0.113.8", "session_id": SID, "site": None},
        {"name": "page_event", "props": {"n": 1}, "ip": "203.0.113.8", "session_id": SID, "site": None},
    ]
    assert recorder.visits == [{"ip": "203.0.113.8", "path": "/page", "session_id": SID, "site": None}]
    assert middleware.stats.events == 2


# -- Django ---------------------------------------------------------------------------------------


def test_a_django_view_tracks_events_through_request_counters(monkeypatch):
    use_settings(monkeypatch, COUNTERS_SITES=SITES)
    recorder = EventRecorder()

    def view(request):
        track_event(request, "signup", {"plan": "pro", "trial": True})
        return HttpResponse("", status=302)

    middleware = DjangoMiddleware(view, options=Options(recorder=recorder, trusted_proxies=1))
    factory = RequestFactory()
    request = factory.post(
        "/signup",
        HTTP_HOST="shop.example.pt",
        HTTP_X_FORWARDED_FOR="203.0.113.9",
        HTTP_COOKIE=f"ct_sid={SID}",
        REMOTE_ADDR=SOCKET,
    )
    assert middleware(request).status_code == 302
    assert without_ts(recorder.events) == [
        {
            "name": "signup",
            "props": {"plan": "pro", "trial": True},
            "ip": "203.0.113.9",
            "session_id": SID,
            "site": "shop",
        }
    ]


def test_a_request_without_a_client_address_sends_its_event_with_the_session_alone():
    """A Unix socket and no trusted header: the page view is not counted (no visitor), the event
    is, its visitor then its session's (``core.visitors.session_visitor_id``)."""
    recorder = EventRecorder()
    middleware = CountersMiddleware(flask_app.wsgi_app, recorder=recorder)
    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/welcome",
        "HTTP_USER_AGENT": BROWSER_HEADERS["User-Agent"],
        "HTTP_ACCEPT": BROWSER_HEADERS["Accept"],
        "HTTP_COOKIE": f"ct_sid={SID}",
        "wsgi.input": None,
        "wsgi.url_scheme": "http",
        "SERVER_NAME": "t",
        "SERVER_PORT": "80",
    }
    body = middleware(environ, lambda status, headers, exc_info=None: None)
    b"".join(body)
    body.close()
    assert without_ts(recorder.events) == [
        {"name": "welcome_seen", "props": None, "ip": None, "session_id": SID, "site": None}
    ]
    assert recorder.visits == [] and middleware.stats.no_client_ip == 1
