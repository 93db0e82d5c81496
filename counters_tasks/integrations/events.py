"""An app's way in for events: ``track_event(request, name, props)`` in a view, the visitor and
site taken from the request exactly as the middleware counts its page view (``common``: the
client address through trusted proxies, the session cookie, the site of the Host header), sent
through the process's recorder (``VisitRecorder.track_event``).

    from counters_tasks.integrations import track_event

    @app.post("/signup")
    def signup():
        ...
        track_event(flask.request, "signup", {"plan": "pro"})

Works under each middleware of this package (WSGI, ASGI, Django): the request is found by
``counters_of``; the rule itself is ``common.Counting.send_event``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .common import RequestCounters, request_counters


def counters_of(request: Any) -> RequestCounters:
    """The ``RequestCounters`` of a request however the app holds it: a WSGI environ or ASGI
    scope (``common.request_counters``), a Django request (``request.counters``), a request object that
    carries its environ (Flask's and Werkzeug's ``request``) or its scope (Starlette's, FastAPI's).
    LookupError when no counters middleware wraps the app."""
    if isinstance(request, Mapping):
        return request_counters(request)
    found = getattr(request, "counters", None)
    if isinstance(found, RequestCounters):
        return found
    for name in ("environ", "scope"):
        inner = getattr(request, name, None)
        if isinstance(inner, Mapping):
            return request_counters(inner)
    raise LookupError(
        f"no counters_tasks middleware wraps this app, or {type(request).__name__} is not a request "
        "(give the WSGI environ, the ASGI scope, or Flask's, Starlette's or Django's request)"
    )


def track_event(request: Any, name: str, props: dict[str, Any] | None = None) -> None:
    """Record the event ``name`` (``props``: its properties) of the visitor of ``request``, in the
    view serving it: ``track_event(flask.request, "signup", {"plan": "pro"})``. ``request``: a
    WSGI environ, an ASGI scope, or Flask's, Starlette's or Django's request (``counters_of``).
    The visitor and site are the ones the middleware counts the request's page view with: the
    client address through its trusted proxies, the session cookie (or the app's ``session_id``
    callable) and the site of the Host header; the event goes to the process's recorder at once,
    timed now (``RequestCounters.track_event``: InvalidInput for a name or properties the caps
    refuse, LookupError when no middleware wraps the app)."""
    counters_of(request).track_event(name, props)
