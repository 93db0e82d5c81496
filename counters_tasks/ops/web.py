"""The read-only web dashboard (``counters-tasks serve``): JSON endpoints and one HTML page.

The endpoints return the same dicts as the CLI's ``--json`` (``counters_tasks.views``). The
page and its chart code are served from the package (``static/``): no CDN, it works offline.
Optional basic auth: ``COUNTERS_DASHBOARD_AUTH=user:password`` (read when the app is made);
it covers every route, ``/metrics`` (Prometheus, ``ops.metrics``) too: a scrape job gives the
same ``basic_auth``. Without it, only requests whose Host is a loopback name or one of
``COUNTERS_DASHBOARD_HOSTS`` are answered (a page of another site cannot reach it by DNS rebinding).
A read-only token (``counters-tasks tokens create``) sent as ``Authorization: Bearer <token>``
opens the JSON API's GET routes and ``/metrics`` without the password (``TokenAuth``).
Handlers are plain functions, so Starlette runs the blocking Redis calls in its thread pool,
bounded by ``THREADS``; ``serve`` bounds the requests in hand (``RequestLimit``), the connections
and their time to send a request (``ops.connections``) and the shutdown (``run``).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import threading
import time
from collections.abc import Callable
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

import anyio.to_thread
import redis
from starlette.applications import Starlette
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..core.settings import get_settings
from ..errors import InvalidInput
from ..store.client import RedisClient, get_redis
from ..store.deployment import DeploymentMismatch
from . import event_views, health, metrics, views
from .connections import GuardedH11Protocol

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")
"""The Host names an unauthenticated dashboard answers besides ``COUNTERS_DASHBOARD_HOSTS``."""
THREADS = 8
"""Handler threads at most (Redis calls, health checks): what a hung backend can hold."""
MAX_REQUESTS = 64
"""Requests in hand at most; past it the server answers 503 at once. Connections waiting to
send a request do not count (``ops.connections`` bounds those)."""
SHUTDOWN_GRACE = 5
"""Seconds requests still running get after SIGTERM before the server exits anyway."""
ARGUMENT = {"from": "start", "to": "end"}
"""Query parameters whose view argument has another name (``from`` is a Python keyword)."""
STATIC = resources.files(__package__).joinpath("static")


class BasicAuth:
    """Every request needs the one user and password (constant-time compare), else 401."""

    def __init__(self, app: ASGIApp, user: str, password: str) -> None:
        self.app = app
        self.expected = f"{user}:{password}".encode()

    def _allowed(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", []):
            if name == b"authorization" and value[:6].lower() == b"basic ":
                try:
                    given = base64.b64decode(value[6:].strip(), validate=True)
                except (binascii.Error, ValueError):
                    return False
                return hmac.compare_digest(given, self.expected)
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self._allowed(scope):
            response = Response(
                "authentication required",
                status_code=401,
                headers={"WWW-Authenticate": 'Basic realm="counters-tasks", charset="UTF-8"'},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


TOKEN_METHODS = ("GET", "HEAD")
"""What a token may do: read (Starlette answers HEAD on every GET route)."""


SITELESS_PATHS = frozenset({"/metrics", "/api/health"})
"""What a token limited to one site may not read: the deployment's figures, not a site's."""


def bearer_token(scope: Scope) -> str | None:
    """The token of the request's ``Authorization: Bearer <token>``, else None."""
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            return value[7:].strip().decode("latin-1") if value[:7].lower() == b"bearer " else None
    return None


class TokenAuth:
    """A request that presents a bearer token on one of ``paths`` with a GET (or HEAD) goes to
    ``app`` (past ``guarded``'s basic auth) when the token is stored (``views.token_allows_read``:
    one HGET a request, no cache, so a revoked token is refused from the next request), is
    answered 401 (``WWW-Authenticate: Bearer``) when it is not, and 503 when Redis cannot say.
    Every other request goes to ``guarded`` as before: the token opens nothing else (the page,
    its static files, another method), and without basic auth the API is as open as without it."""

    def __init__(self, app: ASGIApp, guarded: ASGIApp, paths: frozenset[str], connection: Callable[[], Any]) -> None:
        self.app, self.guarded, self.paths, self.connection = app, guarded, paths, connection

    def _sites(self, token: str) -> set[str] | None:
        return views.token_sites(self.connection(), token)

    @staticmethod
    def _site_asked(scope: Scope) -> str | None:
        """The site a request reads (its ``site`` parameter, else ``default``); None for what is
        no site's: ``/metrics`` and ``/api/health``, the deployment's."""
        if scope["path"] in SITELESS_PATHS:
            return None
        asked = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("site")
        return asked[0] if asked and asked[0] else "default"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = bearer_token(scope) if scope["type"] == "http" else None
        if token is None or scope["method"] not in TOKEN_METHODS or scope["path"] not in self.paths:
            await self.guarded(scope, receive, send)
            return
        try:
            sites = await anyio.to_thread.run_sync(self._sites, token)
        except redis.RedisError as exc:  # neither allowed nor a server error: try again later
            await JSONResponse(
                {"error": f"Redis: {type(exc).__name__}: {exc}"}, status_code=503, headers={"Cache-Control": "no-store"}
            )(scope, receive, send)
            return
        if sites is None:
            await JSONResponse(
                {"error": "invalid or revoked token"},
                status_code=401,
                headers={
                    "WWW-Authenticate": 'Bearer realm="counters-tasks", error="invalid_token"',
                    "Cache-Control": "no-store",
                },
            )(scope, receive, send)
            return
        if sites and self._site_asked(scope) not in sites:  # a token of one site, asked for another
            await JSONResponse(
                {"error": f"this token reads the site {', '.join(sorted(sites))} only"},
                status_code=403,
                headers={
                    "WWW-Authenticate": 'Bearer realm="counters-tasks", error="insufficient_scope"',
                    "Cache-Control": "no-store",
                },
            )(scope, receive, send)
            return
        await self.app(scope, receive, send)


SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]
"""Sent with every answer: only the package's own scripts run on the page, no other site may
frame it, and no browser guesses a content type."""


class SecurityHeaders:
    """Adds SECURITY_HEADERS to every HTTP answer (the 401s of BasicAuth too)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


class RequestLimit:
    """At most ``limit`` HTTP requests in hand at once; one more is answered 503 at once (uvicorn's
    own ``limit_concurrency`` counted open connections, so idle ones shut out real requests)."""

    def __init__(self, app: ASGIApp, limit: int = MAX_REQUESTS) -> None:
        self.app, self.limit, self.in_hand = app, limit, 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.in_hand >= self.limit:
            await Response("too many requests in hand; try again", status_code=503, headers={"Retry-After": "1"})(
                scope, receive, send
            )
            return
        self.in_hand += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_hand -= 1


def _default_health(_conn: RedisClient) -> dict:
    return health.report(ping_timeout=1.0, beat_max_age=180.0)


class SharedHealth:
    """One health check at a time, its report shared for ``fresh_for`` seconds.

    Concurrent ``/api/health`` requests each pinging the workers once exhausted kombu's producer
    pool and deadlocked the server (40 at once were enough): here the first request checks, the
    others wait for its report (at most ``wait`` seconds, then answer that a check is running).
    """

    def __init__(self, check: Callable[[Any], dict], fresh_for: float = 2.0, wait: float = 15.0) -> None:
        self.check, self.fresh_for, self.wait = check, fresh_for, wait
        self.lock = threading.Lock()
        self.last: tuple[float, dict] | None = None

    def _fresh(self) -> dict | None:
        last = self.last
        return last[1] if last is not None and time.monotonic() - last[0] < self.fresh_for else None

    def __call__(self, conn: RedisClient) -> dict:
        report = self._fresh()
        if report is not None:
            return report
        if not self.lock.acquire(timeout=self.wait):
            return {"ok": False, "error": "a health check is still running; try again"}
        try:
            report = self._fresh()
            if report is None:
                report = self.check(conn)
                self.last = (time.monotonic(), report)
            return report
        finally:
            self.lock.release()


def create_app(
    conn: RedisClient | None = None,
    auth: tuple[str, str] | None | bool = True,
    health: Callable[[Any], dict] | None = None,
    hosts: tuple[str, ...] | None = None,
) -> ASGIApp:
    """The dashboard app over ``conn`` (default: the configured Redis). ``auth``: True reads
    ``COUNTERS_DASHBOARD_AUTH``; a ``(user, password)`` pair; or None/False for none. ``hosts``:
    the Host names answered (default ``COUNTERS_DASHBOARD_HOSTS``); without auth the loopback
    names are added, and an empty list means only those; with auth an empty list means any."""
    if auth is True:
        auth = get_settings().dashboard_auth
    hosts = tuple(get_settings().dashboard_hosts if hosts is None else hosts)
    get_health = SharedHealth(health or _default_health)

    def connection() -> Any:
        return conn if conn is not None else get_redis()

    def endpoint(view: Callable[..., dict], *params: str) -> Callable[[Request], Response]:
        """A GET handler calling ``view`` with the query parameters ``params`` (``name!``: required,
        passed as None when missing so the view refuses it)."""

        def handle(request: Request) -> Response:
            query = request.query_params
            kwargs = {name.strip("!"): query.get(name.strip("!")) or None for name in params if name.endswith("!")}
            kwargs.update(
                {ARGUMENT.get(name, name): query[name] for name in params if query.get(name) not in (None, "")}
            )
            try:
                return JSONResponse(view(connection(), **kwargs), headers={"Cache-Control": "no-store"})
            except InvalidInput as exc:
                return JSONResponse({"error": str(exc)}, status_code=400)
            except redis.RedisError as exc:
                return JSONResponse({"error": f"Redis: {type(exc).__name__}: {exc}"}, status_code=503)
            except DeploymentMismatch as exc:
                return JSONResponse({"error": str(exc)}, status_code=503)

        return handle

    def index(_request: Request) -> Response:
        return FileResponse(str(STATIC.joinpath("index.html")), headers={"Cache-Control": "no-store"})

    routes: list[Route | Mount] = [
        Route("/", index),
        Route("/api/stats", endpoint(views.stats_view, "day", "from", "to", "path", "site")),
        Route("/api/top-pages", endpoint(views.top_pages_view, "from", "to", "limit", "site")),
        Route("/api/uniques", endpoint(views.uniques_view, "day", "from", "to", "site")),
        Route("/api/now", endpoint(views.now_view, "site")),
        Route("/api/sources", endpoint(views.sources_view, "from", "to", "kind", "limit", "site")),
        Route("/api/clients", endpoint(views.clients_view, "from", "to", "kind", "limit", "site", "path")),
        Route("/api/events", endpoint(event_views.events_view, "from", "to", "site")),
        Route("/api/goals", endpoint(event_views.goals_view, "from", "to", "site")),
        Route("/api/funnel", endpoint(event_views.funnel_view, "name!", "from", "to", "site")),
        Route("/api/funnels", endpoint(event_views.funnels_list, "site")),
        Route("/api/config", endpoint(views.config_view, "site")),
        Route("/api/counters", endpoint(views.counters_list, "cursor", "limit", "site")),
        Route("/api/counter", endpoint(views.counter_view, "name!", "precision", "last", "site")),
        Route("/api/boards", endpoint(views.boards_list, "site")),
        Route("/api/top", endpoint(views.board_view, "board!", "limit", "site")),
        Route("/api/health", endpoint(get_health)),
        Route("/metrics", metrics.endpoint(connection)),
        Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
    ]
    app: ASGIApp = Starlette(routes=routes, lifespan=_bounded_threads)
    token_paths = frozenset(r.path for r in routes if r.path.startswith("/api/") or r.path == "/metrics")
    app = TokenAuth(app, BasicAuth(app, *auth) if auth else app, token_paths, connection)
    if hosts or not auth:
        app = TrustedHostMiddleware(app, allowed_hosts=[*hosts, *([] if auth else LOOPBACK_HOSTS)])
    return SecurityHeaders(RequestLimit(app))


@contextlib.asynccontextmanager
async def _bounded_threads(_app: Any) -> Any:
    """At most THREADS handlers run at once (the rest wait their turn, not in new threads)."""
    anyio.to_thread.current_default_thread_limiter().total_tokens = THREADS
    yield


def run(app: ASGIApp, host: str, port: int) -> None:
    """Serve ``app`` until SIGTERM or Ctrl-C, with the connection rules of ``ops.connections``
    (a request must arrive within seconds; idle connections cannot shut real ones out), and an exit
    SHUTDOWN_GRACE seconds after the signal at the latest, even when a handler thread is stuck
    in a call that never returns: requests still running then are cancelled, and uvicorn (from
    0.29, the floor) raises the signal again once it has shut down, so the process ends of it
    without waiting for the stuck thread."""
    import uvicorn

    uvicorn.run(
        app, host=host, port=port, log_level="info", http=GuardedH11Protocol, timeout_graceful_shutdown=SHUTDOWN_GRACE
    )
