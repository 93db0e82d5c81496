"""ASGI middleware: count each page view of any ASGI app (Starlette, FastAPI, Django's ASGI
handler, a plain ASGI callable) served by uvicorn, hypercorn, daphne...

    from counters_tasks.integrations.asgi import CountersASGIMiddleware
    app = CountersASGIMiddleware(app, trusted_proxies=1)

The rules are ``common.Counting``'s; this module reads the scope, watches the response's start
message (status and headers, where the session cookie is added), and hands the visit to the
recorder once the app has sent the response. ``websocket`` scopes pass through untouched; on
the ``lifespan`` shutdown (the server has drained its requests) the recorder is flushed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from .common import REQUEST_KEY, Counting, Options, RequestInfo, Stats, request_path, wire_text

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def request_info(scope: Scope) -> RequestInfo:
    """The request of an ASGI ``http`` scope, as the counting rules see it: its headers and query
    string read as UTF-8 (``common.wire_text``), its page named from ``raw_path`` when the server
    gives it (the ``path`` a server decoded has lost the bytes that were not UTF-8)."""
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers", ()):
        name = raw_name.decode("latin-1").lower()
        value = wire_text(raw_value)
        if name in headers:  # HTTP/2 splits Cookie in several fields; other repeats join with ", "
            value = headers[name] + ("; " if name == "cookie" else ", ") + value
        headers[name] = value
    client = scope.get("client")
    raw_path = scope.get("raw_path")  # the target as sent (uvicorn, hypercorn, daphne); optional in ASGI
    path = request_path(raw_path if isinstance(raw_path, bytes) else None, scope.get("path") or "/")
    query = scope.get("query_string")
    return RequestInfo(
        method=scope.get("method", "GET"),
        path=path,
        remote_addr=client[0] if client else None,
        headers=headers,
        raw=scope,
        query=wire_text(query) if isinstance(query, bytes) else "",
    )


class CountersASGIMiddleware:
    """Wraps an ASGI app: each page view is recorded (after the response) through the process's
    ``VisitRecorder``; see ``common.Options`` for the keyword options and docs/integrations.md.

    A view reaches ``scope[REQUEST_KEY]`` (``common.request_counters(request.scope)``) to bump
    a ranking or skip the page view. The recorder's append takes microseconds and never waits
    for the broker, so it is called on the event loop.
    """

    def __init__(self, app: ASGIApp, options: Options | None = None, **kwargs: Any) -> None:
        self.app = app
        self.counting = Counting(options, **kwargs)

    @property
    def stats(self) -> Stats:
        """What this middleware counted, skipped and refused in this process."""
        return self.counting.stats

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") == "lifespan":
            await self.app(scope, self._flushing_on_shutdown(receive), send)
            return
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        info = request_info(scope)
        visit = self.counting.begin(info)
        scope[REQUEST_KEY] = visit.counters
        started = False

        async def send_with_cookie(message: Message) -> None:
            nonlocal started
            if message.get("type") == "http.response.start" and not started:
                started = True
                raw_headers = list(message.get("headers", ()))
                headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw_headers]
                cookie = self.counting.response(visit, int(message.get("status", 0)), headers)
                if cookie is not None:
                    message = {**message, "headers": [*raw_headers, (b"set-cookie", cookie.encode("latin-1"))]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_cookie)
        finally:
            if started:
                self.counting.finish(visit)

    def _flushing_on_shutdown(self, receive: Receive) -> Receive:
        """``receive`` of a lifespan scope that flushes the recorder when the server announces its
        shutdown: uvicorn does so once it has drained the requests in flight, so their visits are
        sent before the process ends, whatever happens to SIGTERM afterwards."""

        async def receive_then_flush() -> Message:
            message = await receive()
            if message.get("type") == "lifespan.shutdown":
                await asyncio.get_running_loop().run_in_executor(None, self.counting.flush)
            return message

        return receive_then_flush
