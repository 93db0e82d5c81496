"""Visitor identity: how the ids every table keeps of a visitor are made from what a visit
carries, and nothing else (no key, no Redis).

- ``visitor_id``: the visitor of a page view, an HMAC of its IP under COUNTERS_SECRET (raw IPs
  never reach Redis); what the site's and the paths' visitor sets, and the visitors-now
  sketches, hold;
- ``pair_visitor``: the same id in 11 characters, what a day's pairs SET and the page sketches
  hold (``store.page_sketch``: its first 6 characters);
- ``session_visitor_id``: the visitor of an event sent with a session id and no IP, an HMAC of
  the session under the same secret, in the same form as ``visitor_id``;
- ``session_number``: the session of a visit (a session UUID's first 15 hex digits as an
  integer), what the daily uniques shards hold; ``short_session_id``, what the app's process
  sends of it.

Every table that holds one of these says so, and how one visitor is erased from it or why not
(``core.table.Erasure``).

The privacy mode (COUNTERS_VISITOR_KEY, docs/privacy.md "Privacy modes"): ``standard`` makes one
id of a visitor for all time; ``daily`` keys every id (and a worker's session number) with the
item's local day, so no id is the same on two days. What a unique-visitor figure then counts
(``uv_counts``: visitors, or visitor-days over several days) and the notes every reader shows
beside it (``VISITOR_DAYS_NOTE``, ``FOLLOWED_NOTE``) are here too.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
from datetime import date
from typing import Any

from ..errors import ConfigurationError, InvalidInput
from .settings import get_settings
from .validation import check_ip, check_session_id


def visitor_id(ip: Any, day: date | None = None) -> str:
    """HMAC-SHA256 of the normalized IP under COUNTERS_SECRET, first 64 bits as a signed integer.

    A signed 64-bit integer so small sets stay intsets; the IP cannot be recovered without the key.
    With COUNTERS_VISITOR_KEY=daily the key is the secret and the visit's local ``day``
    (``day_key``): the same IP is another visitor each day, and no one can link its days.
    """
    ip = check_ip(ip)
    settings = get_settings()
    secret = settings.secret
    if not secret:
        raise ConfigurationError("COUNTERS_SECRET is not set: visitor ids cannot be made")
    if settings.visitor_key == DAILY:
        return _daily_visitor_id(secret, day, ip)
    return _visitor_id(secret, ip)


def day_key(secret: str, mode: str, day: date | None) -> str:
    """The HMAC key of visitor ids: the secret (``standard``), or the secret and the local day
    (``daily``: a ``day`` is then required)."""
    if mode != DAILY:
        return secret
    if day is None:
        raise ValueError("COUNTERS_VISITOR_KEY=daily: a visitor id is made for a day, and none was given")
    return f"{secret}\x1f{day.isoformat()}"


@functools.lru_cache(maxsize=65536)
def _visitor_id(secret: str, ip: str) -> str:
    mac = hmac.new(secret.encode("utf-8"), ip.encode("utf-8"), hashlib.sha256).digest()
    return str(int.from_bytes(mac[:8], "big", signed=True))


@functools.lru_cache(maxsize=65536)
def _daily_visitor_id(secret: str, day: date | None, message: str) -> str:
    """``_visitor_id`` under the day's key (``day_key``), cached on the day itself: a hit costs
    one lookup, as in the standard mode (no key string made per visit). A missing day raises
    ValueError (and is not cached)."""
    return _visitor_id.__wrapped__(day_key(secret, DAILY, day), message)


STANDARD, DAILY = "standard", "daily"
"""The privacy modes (COUNTERS_VISITOR_KEY, docs/privacy.md "Privacy modes"): one keyed hash of a
visitor for all time, or a key that rotates each local day."""

VISITORS, VISITOR_DAYS = "visitors", "visitor-days"
"""What a unique-visitor figure counts (``uv_counts``): distinct visitors, or visitor-days (a
visitor of several days counted once a day)."""

VISITOR_DAYS_NOTE = (
    "UV over several days counts visitor-days (COUNTERS_VISITOR_KEY=daily: a visitor's id changes "
    "each local day, so a visitor of n days counts n; docs/privacy.md)"
)
"""What every reader says beside a figure that counts visitor-days."""

FOLLOWED_NOTE = (
    "COUNTERS_VISITOR_KEY=daily: a visitor is not followed past the local midnight (a step or "
    "conversion on a later day is another visitor's; docs/privacy.md)"
)
"""What a funnel's or a goal's answer says in the daily mode."""


def uv_counts(days: int | None) -> str:
    """What a unique-visitor figure over ``days`` local days (None: all time) counts under
    COUNTERS_VISITOR_KEY: ``VISITORS`` (the standard mode, or a single day), else
    ``VISITOR_DAYS`` (the daily mode: ids of different days never match, so the union of
    several days' visitor sets is the sum of the days' visitors)."""
    if days == 1 or get_settings().visitor_key != DAILY:
        return VISITORS
    return VISITOR_DAYS


def daily_key() -> bool:
    """Whether visitor ids are made per local day (COUNTERS_VISITOR_KEY=daily)."""
    return get_settings().visitor_key == DAILY


def session_visitor_id(session_id: Any, day: date | None = None) -> str:
    """The visitor of an event that carries a session id and no IP (``events.kind.prepare_event``):
    HMAC-SHA256 under COUNTERS_SECRET of the session (its first ``SESSION_DIGITS`` hex digits, as
    ``session_number`` reads it), in a message of its own (``session:`` first, so no IP's id can
    equal it), first 64 bits as a signed integer: the same form as ``visitor_id``, so the pairs
    SETs and the page sketches take it (``pair_visitor``)."""
    short = check_session_id(session_id)[:SESSION_DIGITS].lower()
    settings = get_settings()
    secret = settings.secret
    if not secret:
        raise ConfigurationError("COUNTERS_SECRET is not set: visitor ids cannot be made")
    if settings.visitor_key == DAILY:
        return _daily_visitor_id(secret, day, "session:" + short)
    return _visitor_id(secret, "session:" + short)


@functools.lru_cache(maxsize=65536)
def pair_visitor(visitor: str) -> str:
    """A visitor id in 11 characters (base64 of its 64 bits) for the day's pairs SET: members
    of 19 characters fit a smaller allocation than the decimal id's ~28. (Cached: a call per
    view a worker applies.)"""
    return base64.urlsafe_b64encode(int(visitor).to_bytes(8, "big", signed=True)).decode()[:11]


def session_number(session_id: Any, day: date | None = None) -> int:
    """The integer id of a session: its first 15 hex digits (dashes ignored, any case).

    With COUNTERS_VISITOR_KEY=daily and the sighting's local ``day`` (a worker's: what the daily
    uniques hold), an HMAC of them under the day's key (``day_key``) in the same 60 bits: a session
    cookie that lasts several days is another number each day, so the daily uniques link no
    visitor's days. ``day`` None: the session's own number (the app's process checks a session id
    with it, without the secret)."""
    if type(session_id) is str and len(session_id) <= MAX_CACHED_SESSION_ID:
        number = _session_number(session_id)
    else:
        number = int(check_session_id(session_id)[:SESSION_DIGITS], 16)
    if day is None:
        return number
    settings = get_settings()
    if settings.visitor_key != DAILY:
        return number
    if not settings.secret:
        raise ConfigurationError("COUNTERS_SECRET is not set: session ids cannot be keyed by day")
    return _daily_session_number(settings.secret, day, number)


@functools.lru_cache(maxsize=65536)
def _daily_session_number(secret: str, day: date, number: int) -> int:
    """A session's number of ``day`` (``session_number``): the first 60 bits of an HMAC of its
    own number (``uniq:`` first, so no visitor id's message equals it) under the day's key."""
    message = f"uniq:{number:015x}".encode()
    mac = hmac.new(day_key(secret, DAILY, day).encode("utf-8"), message, hashlib.sha256).digest()
    return int.from_bytes(mac[:8], "big") >> 4


SESSION_DIGITS = 15
"""The hex digits of a session id that name its session (``session_number``)."""


def short_session_id(session_id: Any) -> Any:
    """The part of a session id that ``session_number`` reads, its first 15 hex digits: what
    ``VisitRecorder`` sends (a UUID's other 21 characters change no figure), or the value as it
    is when it is not a session id (the worker refuses it, item by item)."""
    if type(session_id) is str and len(session_id) <= MAX_CACHED_SESSION_ID:
        return _short_session_id(session_id)
    return session_id


@functools.lru_cache(maxsize=65536)
def _short_session_id(session_id: str) -> str:
    try:
        return check_session_id(session_id)[:SESSION_DIGITS]
    except InvalidInput:
        return session_id


MAX_CACHED_SESSION_ID = 64
"""Session ids up to this long (a UUID is 36) are checked once a process while they come back
(``lru_cache``: a session's views come in a row); a longer one every time."""


@functools.lru_cache(maxsize=65536)
def _session_number(session_id: str) -> int:
    """Cached: bad input raises, and is not cached."""
    return int(check_session_id(session_id)[:SESSION_DIGITS], 16)
