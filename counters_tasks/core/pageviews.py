"""What a page view is: one rule for every route that decides it (the middleware on a live
request, ``counters-tasks import`` on a logged one), so a site's live figures and its imported
history count the same items.

A request is a page view when all of these hold (``PageViewRule.skip_reason`` returns the first
that does not, as the reason it is skipped and counted in ``/metrics``):

1. ``method``: its method is GET. HEAD is not: browsers navigate with GET; HEAD comes from link
   checkers, uptime monitors and ``curl -I``.
2. ``static``: its path is not a static file or a probe (``SKIP_PREFIXES``, ``SKIP_EXTENSIONS``).
3. ``status``: its status is 200-399 (a redirect and a ``304 Not Modified`` revalidation are
   views; an error is not).
4. ``not_page``: it was answered with a page. An answer with a ``Content-Type`` is a page when
   that is HTML (``PAGE_MEDIA_TYPES``). One without (a 304, which carries none, or a logged
   request) is judged from the request: ``Sec-Fetch-Dest`` (sent by every current browser) is
   ``document``, ``iframe`` or ``frame``; else an ``Accept`` that names HTML; else, with neither
   header known (an access log), the path alone (rule 2).
5. ``crawler``: its user agent is not a crawler, a script or a monitor: empty, or matched by the
   ``crawler-user-agents`` list (github.com/monperrus/crawler-user-agents, 1,500+ patterns kept
   up to date by its users, installed with the package) or by ``COUNTERS_CRAWLER_PATTERN``.
   A route that does not know the user agent (a log in the common format) skips this check.

The middleware's options and the importer's ``--all`` change the rule's parameters, never the
rule: both build a ``PageViewRule``.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from importlib import resources

from .settings import get_settings

METHOD, STATIC, STATUS, NOT_PAGE, CRAWLER = "method", "static", "status", "not_page", "crawler"
REASONS = (METHOD, STATIC, STATUS, NOT_PAGE, CRAWLER)
"""Why a request is not a page view, in the order the rule checks."""

APP = "app"
"""Why the middleware did not count a request the app left out (``skip()``, a ``should_count`` callable)."""

HOST = "host"
"""Why a request was not counted for any site: its Host is not in the allowlist of ``COUNTERS_SITES``
(``core.sites.site_for_host``) or the app's ``site`` callable named none (or an unknown site)."""

REFUSED = "refused"
"""Why the middleware did not count a page view the recorder refused (``InvalidInput``: a path or a
header the API does not take): counted with the skips, so a view not counted always says why."""

METHODS: tuple[str, ...] = ("GET",)
"""Methods of a page view (rule 1)."""

STATUSES = range(200, 400)
"""Statuses of a page view (rule 3): 2xx, and 3xx (a redirect, a 304 revalidation)."""

SKIP_PREFIXES: tuple[str, ...] = (
    "/static/",
    "/media/",
    "/assets/",
    "/favicon.ico",
    "/robots.txt",
    "/sitemap.xml",
    "/apple-touch-icon",
    "/.well-known/",
)
"""Path prefixes that are never page views (static files, crawler and browser probes)."""

SKIP_EXTENSIONS: tuple[str, ...] = (
    ".css",
    ".js",
    ".mjs",
    ".map",  # styles, scripts, source maps
    ".png",
    ".jpg",
    ".jpeg",
    ".gif",
    ".svg",
    ".ico",
    ".webp",
    ".avif",
    ".bmp",
    ".tif",
    ".tiff",  # images
    ".woff",
    ".woff2",
    ".ttf",
    ".otf",
    ".eot",  # fonts
    ".mp4",
    ".webm",
    ".mp3",
    ".m4a",
    ".ogg",
    ".oga",
    ".ogv",
    ".wav",
    ".flac",  # media
    ".zip",
    ".gz",
    ".txt",
    ".xml",
    ".json",
    ".webmanifest",  # archives, robots.txt, feeds, manifests
)
"""Path endings (any case) of static files, whatever folder they are served from."""

PAGE_MEDIA_TYPES: tuple[str, ...] = ("text/html", "application/xhtml+xml")
"""Media types of a page (parameters such as ``; charset=utf-8`` are ignored)."""

DOCUMENT_DESTINATIONS = frozenset({"document", "iframe", "frame"})
"""``Sec-Fetch-Dest`` values of a request for a page."""

CRAWLER_LIST = "crawler-user-agents.json"
"""The list's data file inside its package ``crawleruseragents`` (read as data: its Python API has
changed between versions, the file has not)."""

MAX_AGENT = 1024
"""Characters of a user agent matched (a longer one is matched on its start)."""


@dataclass(frozen=True)
class PageViewRule:
    """The parameters of the page view rule (the defaults are the package's rule)."""

    methods: Collection[str] = METHODS
    skip_prefixes: Collection[str] = SKIP_PREFIXES
    skip_extensions: Collection[str] = SKIP_EXTENSIONS
    statuses: Collection[int] = STATUSES
    media_types: Collection[str] | None = PAGE_MEDIA_TYPES
    """None: any answer counts whatever its type (rule 4 off)."""
    skip_crawlers: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "methods", frozenset(m.upper() for m in self.methods))
        object.__setattr__(self, "skip_prefixes", tuple(self.skip_prefixes))
        object.__setattr__(self, "skip_extensions", tuple(e.lower() for e in self.skip_extensions))
        if self.media_types is not None:
            object.__setattr__(self, "media_types", frozenset(t.lower() for t in self.media_types))

    def request_reason(self, method: str, path: str) -> str | None:
        """The reason known before the answer (rules 1 and 2), or None."""
        if method.upper() not in self.methods:
            return METHOD
        if self.is_static(path):
            return STATIC
        return None

    def is_static(self, path: str) -> bool:
        """Whether ``path`` (a canonical page name) names a static file or a probe."""
        if self.skip_prefixes and path.startswith(self.skip_prefixes):  # type: ignore[arg-type]
            return True
        return bool(self.skip_extensions) and path.lower().endswith(self.skip_extensions)  # type: ignore[arg-type]

    def skip_reason(
        self,
        method: str,
        path: str,
        status: int | None,
        *,
        content_type: str | None = None,
        request_headers: Mapping[str, str] | None = None,
        user_agent: str | None = None,
    ) -> str | None:
        """None for a page view, else why not (``REASONS``). ``content_type``: the answer's, None
        when it has none; ``request_headers`` (lower-case names): None when not known (a log);
        ``user_agent``: None when not known (a log in the common format)."""
        reason = self.request_reason(method, path)
        if reason is not None:
            return reason
        if status not in self.statuses:
            return STATUS
        if self.media_types is not None and not self.answered_with_page(content_type, request_headers):
            return NOT_PAGE
        if self.skip_crawlers and user_agent is not None and is_crawler(user_agent):
            return CRAWLER
        return None

    def answered_with_page(self, content_type: str | None, request_headers: Mapping[str, str] | None) -> bool:
        """Rule 4: the answer's media type, or without one, the request's ``Sec-Fetch-Dest`` or ``Accept``."""
        if content_type:
            return content_type.split(";", 1)[0].strip().lower() in self.media_types  # type: ignore[operator]
        if request_headers is None:
            return True
        destination = request_headers.get("sec-fetch-dest")
        if destination:
            return destination.strip().lower() in DOCUMENT_DESTINATIONS
        accept = request_headers.get("accept")
        if accept is not None:
            accepted = accept.lower()
            return any(media in accepted for media in self.media_types)  # type: ignore[union-attr]
        return True


DEFAULT_RULE = PageViewRule()
"""The package's rule with its default parameters (the importer's, and the middleware's by default)."""


def is_crawler(user_agent: str) -> bool:
    """Whether a user agent is a crawler, a script or a monitor (rule 5): empty or ``-``, or
    matched by the crawler-user-agents list or ``COUNTERS_CRAWLER_PATTERN``. Cached: a site
    sees the same few thousand user agents again and again."""
    return _is_crawler(user_agent[:MAX_AGENT], get_settings().crawler_pattern)


@functools.lru_cache(maxsize=16384)
def _is_crawler(agent: str, extra_pattern: str | None) -> bool:
    text = agent.strip()
    if text in ("", "-"):
        return True
    if _crawler_list().matches(text):
        return True
    return extra_pattern is not None and re.search(extra_pattern, text) is not None


class CrawlerList:
    """The crawler-user-agents patterns, matched through the text each one requires.

    A user agent a process sees for the first time is matched against the whole list: its 1,500
    regular expressions in alternations of 100 took ~430 us a user agent (``re`` tries every
    alternative at every position), paid in a web request (the middleware) and again in the
    worker (a view's device type). Here each pattern is indexed by the longest run of characters
    every match of it contains (``required_text``; the whole pattern for the ~1,100 that are
    plain text): a user agent's 3-character windows find the few patterns whose text it holds,
    and only those are tried (a plain one matches by that text alone). The patterns that require
    no run of 3 characters are tried on every user agent, in alternations of 100 as before. The
    same answers as the list's alternations (``tests/core/test_pageviews_crawlers.py``)."""

    def __init__(self, patterns: list[str]) -> None:
        self.by_window: dict[str, list[tuple[str, re.Pattern[str] | None]]] = {}
        always: list[str] = []
        for pattern in patterns:
            required, plain = required_text(pattern)
            if len(required) < 3:
                always.append(pattern)
                continue
            self.by_window.setdefault(required[:3], []).append((required, None if plain else re.compile(pattern)))
        self.always = tuple(re.compile("|".join(always[first : first + 100])) for first in range(0, len(always), 100))

    def matches(self, text: str) -> bool:
        by_window = self.by_window
        for at in range(len(text) - 2):
            candidates = by_window.get(text[at : at + 3])
            if candidates:
                for required, pattern in candidates:
                    if text.startswith(required, at) and (pattern is None or pattern.search(text)):
                        return True
        return any(pattern.search(text) for pattern in self.always)


def required_text(pattern: str) -> tuple[str, bool]:
    """(the longest run of characters every match of ``pattern`` contains, whether that run is
    the whole pattern), read at the pattern's top level, where each plain or escaped character is
    required (one in a group or a class, or followed by a repeat, is not; a top-level ``|`` leaves
    nothing required). ``("", False)`` for a pattern with inline flags (``(?i)``: its text is not
    one run of characters)."""
    if pattern.startswith("(?") and not pattern.startswith(("(?:", "(?=", "(?!", "(?<", "(?P")):
        return "", False
    runs, run, plain = [], "", True
    at, depth = 0, 0
    while at < len(pattern):
        char = pattern[at]
        if char == "\\" and at + 1 < len(pattern):
            escaped = pattern[at + 1]
            at += 2
            if depth == 0 and not escaped.isalnum():  # \/ \. \( ...: that character
                run += escaped
                continue
            plain = False  # \d \b \1 ...: a class, an anchor, a reference
            if depth == 0:
                runs.append(run)
                run = ""
            continue
        at += 1
        if char == "[":  # a class: up to its unescaped "]" (a "]" first in it is one of its characters)
            plain = False
            at += 1 if pattern[at : at + 1] == "]" else 0
            while at < len(pattern) and pattern[at] != "]":
                at += 2 if pattern[at] == "\\" else 1
            at += 1
            char = ""
        elif char in "*?{" or (char == "+" and depth == 0):
            plain = False
            run = run[:-1]  # the character repeated (or not there at all)
            if char == "{":
                while at < len(pattern) and pattern[at] != "}":
                    at += 1
                at += 1
            char = ""
        elif char in "()":
            plain = False
            depth += 1 if char == "(" else -1
            char = ""
        elif char == "|" and depth == 0:
            return "", False
        elif char in ".^$|+":
            plain = False
            char = ""
        if depth == 0 and char:
            run += char
        else:
            runs.append(run)
            run = ""
    runs.append(run)
    return max(runs, key=len), plain


@functools.cache
def _crawler_list() -> CrawlerList:
    """The crawler-user-agents list, indexed (``CrawlerList``). Loaded on first use, not at import."""
    listed = json.loads(resources.files("crawleruseragents").joinpath(CRAWLER_LIST).read_text("utf-8"))
    return CrawlerList([entry["pattern"] for entry in listed])
