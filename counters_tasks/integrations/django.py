"""Django middleware: count each page view of a Django site.

    # settings.py
    MIDDLEWARE = [..., "counters_tasks.integrations.django.CountersMiddleware"]
    COUNTERS_MIDDLEWARE = {"trusted_proxies": 1}          # common.Options, all optional

The callables among the options (``recorder``, ``session_id``, ``should_count``) may be given as
dotted paths (``"myapp.analytics.session_id"``), as Django settings usually name code.

Views reach ``request.counters`` (``common.RequestCounters``): ``request.counters.bump(board,
member)`` and ``request.counters.skip()``. This module imports Django only when Django makes
the middleware (to read its settings), so the package imports without Django installed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from .common import Counting, Options, RequestInfo, Stats, request_path, wire_text
from .wsgi import raw_target

SETTING = "COUNTERS_MIDDLEWARE"
"""The Django setting holding the middleware's options (a dict of ``common.Options`` fields)."""


def request_info(request: Any) -> RequestInfo:
    """A Django ``HttpRequest`` as the counting rules see it: the page named from the target as
    sent when the server gives it (under WSGI ``REQUEST_URI`` or ``RAW_URI``, as the WSGI
    middleware, ``wsgi.raw_target``; under ASGI the scope's ``raw_path``), else from
    ``request.path``. Headers are latin-1 strings in ``request.META`` under WSGI and ASGI alike:
    read as UTF-8 (``common.wire_text``)."""
    scope = getattr(request, "scope", None)  # under ASGI
    if isinstance(scope, dict):
        raw_path = scope.get("raw_path")
        path = request_path(raw_path if isinstance(raw_path, bytes) else None, request.path or "/")
    else:
        path = request_path(raw_target(request.META), wsgi_decoded_path(request.path or "/"))
    return RequestInfo(
        method=request.method or "GET",
        path=path,
        remote_addr=request.META.get("REMOTE_ADDR") or None,
        headers=_headers(request.META),
        raw=request,
        query=wire_text(request.META.get("QUERY_STRING") or ""),
    )


_UNDECODED = re.compile(r"%([89A-F][0-9A-F])")


def wsgi_decoded_path(path: str) -> str:
    """``request.path`` under WSGI as ``common.request_path`` takes a decoded path: Django writes
    each byte of PATH_INFO that is not UTF-8 as ``%XX`` (and sets META's PATH_INFO so too), which
    becomes that byte's ``surrogateescape`` character, so the page has the name the raw target
    gives (``/%FF%FE``), not ``/%25FF%25FE``. (A ``%25`` followed by those digits in the
    target, which decodes to the same text, is rarer still: the raw target, which gunicorn,
    uWSGI and mod_wsgi give, tells them apart.)"""
    if "%" not in path:
        return path
    return _UNDECODED.sub(lambda match: chr(0xDC00 + int(match.group(1), 16)), path)


def _headers(meta: Mapping[str, Any]) -> dict[str, str]:
    return {
        key[5:].replace("_", "-").lower(): wire_text(value)
        for key, value in meta.items()
        if key.startswith("HTTP_") and isinstance(value, str)
    }


DOTTED = ("recorder", "session_id", "should_count")
"""Options that may be dotted paths in ``COUNTERS_MIDDLEWARE``."""


def options_from_settings(settings: Mapping[str, Any]) -> Options:
    """``common.Options`` from the ``COUNTERS_MIDDLEWARE`` dict, dotted paths imported."""
    from django.utils.module_loading import import_string

    resolved = {
        key: import_string(value) if key in DOTTED and isinstance(value, str) else value
        for key, value in settings.items()
    }
    return Options.from_mapping(resolved)


class CountersMiddleware:
    """Records each page view through the process's ``VisitRecorder`` once the view has made its
    response, and sets the session cookie on a page view of a browser without it. Options come
    from ``settings.COUNTERS_MIDDLEWARE``, or ``options`` when made by hand (tests)."""

    sync_capable = True
    async_capable = False  # Django adapts it under ASGI; the recorder's append never blocks

    def __init__(self, get_response: Callable[[Any], Any], options: Options | None = None) -> None:
        self.get_response = get_response
        if options is None:
            from django.conf import settings  # only when Django builds its middleware chain

            options = options_from_settings(getattr(settings, SETTING, {}))
        self.counting = Counting(options)

    @property
    def stats(self) -> Stats:
        """What this middleware counted, skipped and refused in this process."""
        return self.counting.stats

    def __call__(self, request: Any) -> Any:
        info = request_info(request)
        visit = self.counting.begin(info)
        request.counters = visit.counters
        response = self.get_response(request)
        options = self.counting.options
        headers = list(response.items())
        if options.cookie_name in response.cookies:  # the app set it itself
            headers.append(("Set-Cookie", f"{options.cookie_name}={response.cookies[options.cookie_name].value}"))
        if self.counting.response(visit, response.status_code, headers) is not None:
            response.set_cookie(
                options.cookie_name,
                visit.new_cookie,
                max_age=options.cookie_max_age,
                path=options.cookie_path,
                domain=options.cookie_domain,
                secure=options.cookie_secure,
                httponly=True,
                samesite="Lax",
            )
        self.counting.finish(visit)
        return response
