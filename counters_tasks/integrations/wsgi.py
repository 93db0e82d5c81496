"""WSGI middleware: count each page view of any WSGI app (Flask, Django's WSGI handler, Pyramid...).

    from counters_tasks.integrations.wsgi import CountersMiddleware
    app.wsgi_app = CountersMiddleware(app.wsgi_app, trusted_proxies=1)   # Flask

The rules are ``common.Counting``'s; this module only reads the environ and wraps
``start_response`` (to see the status and headers, and add the session cookie) and the response
body (to hand the visit to the recorder once the server has sent it and closed the body).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from .common import REQUEST_KEY, Counting, InFlight, Options, RequestInfo, Stats, request_path, wire_bytes, wire_text

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def request_info(environ: dict[str, Any]) -> RequestInfo:
    """The request of a WSGI environ, as the counting rules see it: its headers and query string
    read as UTF-8 (``common.wire_text``: PEP 3333 hands them over as latin-1 strings)."""
    headers: dict[str, str] = {}
    for key, value in environ.items():
        if key.startswith("HTTP_") and isinstance(value, str):
            headers[key[5:].replace("_", "-").lower()] = wire_text(value)
    return RequestInfo(
        method=environ.get("REQUEST_METHOD", "GET"),
        path=environ_path(environ),
        remote_addr=environ.get("REMOTE_ADDR") or None,
        headers=headers,
        raw=environ,
        query=wire_text(environ.get("QUERY_STRING") or ""),
    )


def environ_path(environ: Mapping[str, Any]) -> str:
    """The page's canonical name: from the target as sent (``REQUEST_URI`` or ``RAW_URI``, set by
    gunicorn, uWSGI, mod_wsgi and Werkzeug), else from ``SCRIPT_NAME`` + ``PATH_INFO`` (which the
    server decoded). PEP 3333: each is the request's bytes decoded as latin-1, so their bytes are
    taken back and read as UTF-8 (``common.wire_text``; a byte that is not UTF-8 stays a ``%XX``
    escape in the name, with or without the raw target)."""
    decoded = environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")
    return request_path(raw_target(environ), wire_text(decoded, "surrogateescape"))


def raw_target(environ: Mapping[str, Any]) -> bytes | None:
    """The request target as the client sent it, when the server gives it (``REQUEST_URI`` or
    ``RAW_URI``, PEP 3333 strings): its bytes; else None."""
    raw = environ.get("REQUEST_URI") or environ.get("RAW_URI")
    return wire_bytes(raw) if isinstance(raw, str) else None


class CountersMiddleware:
    """Wraps a WSGI app: each page view is recorded (after the response) through the process's
    ``VisitRecorder``; see ``common.Options`` for the keyword options and docs/integrations.md.

    A view reaches ``environ[REQUEST_KEY]`` (``common.request_counters(environ)``) to bump a
    ranking or skip the page view.
    """

    def __init__(self, app: WSGIApp, options: Options | None = None, **kwargs: Any) -> None:
        self.app = app
        self.counting = Counting(options, **kwargs)

    @property
    def stats(self) -> Stats:
        """What this middleware counted, skipped and refused in this process."""
        return self.counting.stats

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        info = request_info(environ)
        visit = self.counting.begin(info)
        environ[REQUEST_KEY] = visit.counters
        if visit.reason is not None:  # a method or path that never counts (begin: request_may_count)
            body = self.app(environ, start_response)
            if not visit.counters.bumps:  # a static file: keep the server's file wrapper
                self.counting.skipped(visit)
                return body
            return _Closing(body, self.counting, visit)

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            try:
                code = int(status.split(" ", 1)[0])
            except ValueError:
                code = 0
            cookie = self.counting.response(visit, code, headers)
            if cookie is not None:
                headers = [*headers, ("Set-Cookie", cookie)]
            return start_response(status, headers, exc_info)

        return _Closing(self.app(environ, start), self.counting, visit)


class _Closing:
    """The app's response body, handing the visit to the recorder when the server closes it
    (PEP 3333: ``close()`` is called once the response is sent, or the client went away)."""

    def __init__(self, body: Iterable[bytes], counting: Counting, visit: InFlight) -> None:
        self.body = body
        self.counting = counting
        self.visit = visit

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.body)

    def close(self) -> None:
        try:
            close = getattr(self.body, "close", None)
            if close is not None:
                close()
        finally:
            self.counting.finish(self.visit)
