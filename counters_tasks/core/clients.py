"""Who visits: a page view's browser, operating system, device type, country and language.

One rule for every route (the middleware, ``VisitRecorder``, ``.delay()``, the importer): each of
them sends the visit's raw User-Agent and Accept-Language (or nothing) with its IP, and the worker
derives the five values here, so the same request gives the same figures live and imported.

- **browser** (``Chrome 120``, kept as ``Chrome<tab>120``: ``family``) and **operating system** (``Windows 10``, ``iOS 17.1``): the
  family and version the maintained `ua-parser <https://github.com/ua-parser/uap-python>`_
  finds (uap-core's regexes, the ``ua-parser-builtins`` package; its Rust accelerator
  ``ua-parser-rs`` when installed: the ``fast`` extra). A browser keeps its major version, a
  system its major and minor. Parsed once per distinct user agent per process (``client_of``).
- **device**: ``bot`` when the package's crawler rule says so (``core.pageviews.is_crawler``,
  the rule the middleware and importer skip by: a bot is counted only where crawlers are, e.g.
  ``import --all``); else ``tablet``, ``mobile`` or ``desktop`` from what ua-parser found (its
  device brand and family, and the system's family: ``DEVICE_RULE`` below); else ``(unknown)``.
- **country**: the ISO 3166-1 alpha-2 code of the IP's block as the Regional Internet Registries
  assigned it (the ``iptocc`` package, its data built into the wheel and refreshed with each of
  its releases: upgrading the package updates it; no network lookup). Read from the IP where the
  IP is read (the worker) and never stored: the visit's IP is kept nowhere. A private, loopback
  or unassigned address is ``(unknown)``.
- **language**: the preferred one of Accept-Language (the highest ``q``, the first on a tie), as
  ``en`` or ``en-US`` (its language and region subtags only, their case normalized); ``*``,
  none or an unreadable header is ``(unknown)``. Reducing a reduced value gives it back, so a
  producer may reduce and the worker check again.

A user agent or header that is not a ``str`` is refused (``InvalidInput``); one past
``MAX_HEADER`` characters, or with control characters, is ``(unknown)``, as a referrer is.
"""

from __future__ import annotations

import functools
import re
from typing import Any, NamedTuple

from ..errors import InvalidInput
from .pageviews import is_crawler
from .settings import get_settings
from .validation import check_unicode

TAB = "\t"

UNKNOWN = "(unknown)"
"""A value that could not be derived: no header, an unreadable one, an IP of no country."""

BOT, TABLET, MOBILE, DESKTOP = "bot", "tablet", "mobile", "desktop"
DEVICE_TYPES = (DESKTOP, MOBILE, TABLET, BOT, UNKNOWN)

MAX_HEADER = 1024
"""The longest User-Agent or Accept-Language read (characters); a longer one is ``(unknown)``."""

CACHED_AGENTS = 16384
"""Distinct user agents whose parse a process keeps (a miss costs ~40 us with the accelerator,
~1.3 ms without)."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_LANGUAGE = re.compile(r"([a-zA-Z]{1,8})(?:-[a-zA-Z]{4})?(?:-([a-zA-Z]{2}|[0-9]{3}))?(?:-.*)?")
_QUALITY = re.compile(r"q=([0-9.]{1,5})")


class Client(NamedTuple):
    """What a visit's user agent tells: its browser, operating system and device type."""

    browser: str
    os: str
    device: str


UNKNOWN_CLIENT = Client(UNKNOWN, UNKNOWN, UNKNOWN)
"""A visit given no user agent at all (None: the caller did not tell), or an unreadable one. A
request that sent none (``""``, a log's ``-``) is a script by the crawler rule
(``pageviews.is_crawler``): device ``bot``, its browser and system ``(unknown)``."""

DEVICE_RULE = {
    "tablet brands": ("Generic_Android_Tablet",),
    "tablet families": ("iPad", "Kindle", "Generic Tablet"),  # a family that starts with one of them
    "mobile brands": ("Generic_Android", "Generic"),
    "mobile systems": (
        "iOS",
        "Android",
        "Windows Phone",
        "BlackBerry OS",
        "Symbian OS",
        "KaiOS",
        "Firefox OS",
        "Tizen",
        "webOS",
    ),
    "desktop systems": (
        "Windows",
        "Mac OS X",
        "Linux",
        "Ubuntu",
        "Debian",
        "Fedora",
        "Chrome OS",
        "FreeBSD",
        "OpenBSD",
        "NetBSD",
        "Solaris",
    ),
}
"""The device type from ua-parser's answer: a tablet by its device's brand or family, or an
Android system whose user agent has no ``Mobile`` token (Android's own convention for tablets);
a phone by its brand or its system; a desktop by its system. ua-parser (uap-core) names no type
itself."""


def client_of(user_agent: Any) -> Client:
    """The browser, system and device type of ``user_agent`` (a User-Agent header, or None)."""
    if check_user_agent(user_agent) is None:
        return UNKNOWN_CLIENT
    return _client(user_agent, get_settings().crawler_pattern)


@functools.lru_cache(maxsize=CACHED_AGENTS)
def _client(user_agent: str, _crawler_pattern: str | None) -> Client:
    """(Cached per user agent as given, and per crawler setting: ``is_crawler`` reads it.)"""
    text = user_agent.strip()
    if len(text) > MAX_HEADER or _CONTROL.search(text):
        return UNKNOWN_CLIENT
    result = _parser().parse(text)  # (no User-Agent sent, "" or a log's "-": nothing found, a bot by the crawler rule)
    agent, system = result.user_agent, result.os
    browser = UNKNOWN if agent is None else _named(agent.family, agent.major)
    os = UNKNOWN if system is None else _named(system.family, system.major, system.minor)
    if is_crawler(text):
        return Client(browser, os, BOT)
    return Client(browser, os, _device_type(result.device, None if system is None else system.family, text))


MAX_NAME = 200
"""The longest browser, system or device name a reduced ``client`` may carry (characters)."""


def check_client(client: Any) -> Client:
    """A visit's ``client`` as a producer reduced it (``client_of``: [browser, system, device],
    what ``VisitRecorder`` sends instead of the user agent): three non-empty str of at most
    MAX_NAME characters without control characters (the tab of ``<family><tab><version>``
    apart), the device one of DEVICE_TYPES (raises InvalidInput)."""
    if not isinstance(client, (list, tuple)) or len(client) != 3:
        raise InvalidInput("client must be a list of 3 str: browser, system, device")
    try:
        return _checked_client(tuple(client))
    except TypeError:  # (an unhashable name: not a str)
        raise InvalidInput("client must be a list of 3 str: browser, system, device") from None


@functools.lru_cache(maxsize=CACHED_AGENTS)
def _checked_client(client: tuple[Any, ...]) -> Client:
    """(Cached: a worker sees the same few hundred clients again and again.)"""
    for name in client:
        if not isinstance(name, str) or not name or len(name) > MAX_NAME or _CONTROL.search(name.replace(TAB, " ")):
            raise InvalidInput(f"client holds a bad name: {name!r:.60}")
        check_unicode(name, "client")
    if client[2] not in DEVICE_TYPES:
        raise InvalidInput(f"client's device must be one of {', '.join(DEVICE_TYPES)}, got {client[2]!r:.40}")
    return Client(*client)


def check_user_agent(user_agent: Any) -> str | None:
    """``user_agent`` checked as the app's process sends it (a str UTF-8 can encode, or None;
    parsed by the worker)."""
    if user_agent is not None:
        if not isinstance(user_agent, str):
            raise InvalidInput(f"user_agent must be a str, got {type(user_agent).__name__}")
        check_unicode(user_agent, "user_agent")
    return user_agent


def _named(family: str, major: str | None, minor: str | None = None) -> str:
    """A browser's or system's table field: ``<family><tab><version>``, or the family alone (a
    family's figures are the sum of its versions'; ``shown`` puts a space for the tab)."""
    if not major:
        return family.replace(TAB, " ")
    version = f"{major}.{minor}" if minor else major
    return f"{family.replace(TAB, ' ')}{TAB}{version}"


def shown(field: str) -> str:
    """A table field as people read it: ``Chrome 120`` for ``Chrome<tab>120``."""
    return field.replace(TAB, " ")


def family(field: str) -> str:
    """The family of a browser's or system's table field: ``Chrome`` for ``Chrome<tab>120``."""
    return field.partition(TAB)[0]


def _device_type(device: Any, system: str | None, user_agent: str) -> str:
    brand, model_family = (None, "") if device is None else (device.brand, device.family or "")
    if (
        brand in DEVICE_RULE["tablet brands"]
        or model_family.startswith(DEVICE_RULE["tablet families"])
        or (system == "Android" and "Mobile" not in user_agent)
    ):
        return TABLET
    if brand in DEVICE_RULE["mobile brands"] or system in DEVICE_RULE["mobile systems"]:
        return MOBILE
    if system in DEVICE_RULE["desktop systems"]:
        return DESKTOP
    return UNKNOWN


@functools.cache
def _parser() -> Any:
    """ua-parser's parser with its best resolver (the Rust one when ``ua-parser-rs`` is
    installed), loaded on first use: an app process that only sends visits never loads it."""
    import ua_parser

    return ua_parser.parser


def language_of(accept_language: Any) -> str:
    """The preferred language of an Accept-Language header (or None), reduced: ``en-US``, ``de``."""
    if accept_language is None:
        return UNKNOWN
    check_headers(language=accept_language)
    if len(accept_language) > MAX_HEADER:
        return UNKNOWN
    return _language(accept_language)


@functools.lru_cache(maxsize=4096)
def _language(header: str) -> str:
    best, best_q = UNKNOWN, 0.0
    for part in header.split(","):
        tag, _semicolon, params = part.strip().partition(";")
        found = _QUALITY.search(params) if params else None
        if found is None and "q=" in params:
            continue  # an unreadable weight: not a choice the browser made
        try:
            q = float(found[1]) if found else 1.0
        except ValueError:
            continue
        if q <= best_q or not 0 < q <= 1:
            continue
        match = _LANGUAGE.fullmatch(tag.strip())
        if match is None:
            continue
        language, region = match[1].lower(), match[2]
        best, best_q = (f"{language}-{region.upper()}" if region else language), q
    return best


def country_of(ip: str) -> str:
    """The country code of a checked IP's block (``iptocc``), or ``(unknown)``."""
    return _country_lookup()(ip) or UNKNOWN


@functools.cache
def _country_lookup() -> Any:
    """iptocc's lookup, imported on first use (its tables load with it)."""
    from iptocc import country_code

    return country_code


Who = tuple[str, str, str, str, str]
"""A view's browser, system, device type, country and language (``sitestats.who_visits.CLIENT_KINDS``'s order)."""

UNKNOWN_WHO: Who = (UNKNOWN, UNKNOWN, UNKNOWN, UNKNOWN, UNKNOWN)


def check_headers(user_agent: Any = None, language: Any = None, client: Any = None) -> None:
    """What ``who_of`` refuses, checked without parsing anything: a visit's who-visits fields where
    the tables are off (COUNTERS_CLIENT_TABLES), so that bad input is refused the same either way."""
    check_user_agent(user_agent)
    if language is not None:
        if not isinstance(language, str):
            raise InvalidInput(f"language must be a str, got {type(language).__name__}")
        check_unicode(language, "language")
    if client is not None:
        check_client(client)


def who_of(ip: str, user_agent: Any = None, language: Any = None, client: Any = None) -> Who:
    """Everything ``core.clients`` derives of one view: ``ip`` checked, the headers as given, or
    its ``client`` as a producer reduced the user agent (``check_client``)."""
    browser, os, device = client_of(user_agent) if client is None else check_client(client)
    return (browser, os, device, country_of(ip), language_of(language))
