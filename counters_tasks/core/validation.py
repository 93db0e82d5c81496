"""Input checks shared by every public function and task: bad input raises InvalidInput."""

from __future__ import annotations

import functools
import ipaddress
import math
import re
import time
from datetime import date, datetime
from typing import Any

from ..errors import FutureTime, InvalidInput, MalformedMessage
from .paths import canonical_path
from .settings import get_settings

MAX_TEXT = 1024
MAX_AMOUNT = 2**53 - 1  # exact in a Lua number and in JSON everywhere
MAX_TS = 253402300799  # 9999-12-31T23:59:59Z
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def check_text(value: Any, what: str = "name", max_length: int = MAX_TEXT) -> str:
    """A non-empty str of at most ``max_length`` characters without control characters."""
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be a str, got {type(value).__name__}")
    if not value:
        raise InvalidInput(f"{what} must not be empty")
    if len(value) > max_length:
        raise InvalidInput(f"{what} is longer than {max_length} characters ({len(value)})")
    if value.isascii() and value.isprintable():  # the common case: no control character, no surrogate
        return value
    if _CONTROL.search(value):
        raise InvalidInput(f"{what} contains control characters")
    return check_unicode(value, what)


def check_unicode(value: str, what: str = "name") -> str:
    """``value`` when it is text that UTF-8 can encode: a ``str`` with a lone surrogate (what
    ``surrogateescape`` makes of bytes that are not UTF-8, or ``"\\udcff"`` written by hand) is
    refused with InvalidInput. The one rule of every text field of every kind (``check_text``'s
    names, and ``check_item_text``'s walk of every item): such a string cannot reach Redis, the
    broker's UTF-8 or a user-agent parser written in Rust, and would fail the whole call it is in."""
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"{what} is not valid Unicode text (a lone surrogate at {exc.start})") from None
    return value


MAX_ITEM_DEPTH = 4
"""How deep ``check_item_text`` looks into an item's lists and dicts (a visit's ``utm`` and
``client`` are one level down); anything deeper is refused: no kind takes it."""


def check_item_text(fields: dict[str, Any], depth: int = 0) -> None:
    """Every ``str`` in an item's fields (and in their lists and dicts, keys too) encodable as
    UTF-8 (``check_unicode``; InvalidInput naming the field): checked once for every item of
    every kind as its fields are bound (``core.kind.Kind.bind``), on each route, before any of
    its checks parses a field or anything is written, so one bad string is refused with its own
    item and never takes a batch (or a sender thread) down with it."""
    for value in fields.values():  # (the names looked up only for an error)
        if type(value) is str:
            if not value.isascii():
                check_unicode(value, _name_of(fields, value))
        elif value is not None and isinstance(value, _NESTED):
            try:
                _check_nested(value, "", depth + 1)
            except InvalidInput:  # checked again to name the field (an event's props: no lookup a call)
                _check_nested(value, _name_of(fields, value), depth + 1)


_NESTED = (list, tuple, dict)


def _name_of(fields: dict[str, Any], value: Any) -> str:
    return next(str(name) for name, found in fields.items() if found is value)


def _check_nested(value: list[Any] | tuple[Any, ...] | dict[Any, Any], what: str, depth: int) -> None:
    if depth > MAX_ITEM_DEPTH:
        raise InvalidInput(f"{what} is nested more than {MAX_ITEM_DEPTH} levels deep")
    pairs = value.items() if isinstance(value, dict) else enumerate(value)
    for key, inner in pairs:
        if isinstance(key, str) and not key.isascii():
            check_unicode(key, what)
        if isinstance(inner, str):
            if not inner.isascii():
                check_unicode(inner, what)
        elif isinstance(inner, _NESTED):
            _check_nested(inner, what, depth + 1)


def check_amount(value: Any, what: str = "count") -> int:
    """An int (not bool), negative allowed, within +-(2**53 - 1)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{what} must be an int, got {type(value).__name__}")
    if abs(value) > MAX_AMOUNT:
        raise InvalidInput(f"{what} is out of range (|{what}| <= 2**53 - 1)")
    return value


def finite_number(value: Any) -> float | None:
    """``value`` as a float when it is a finite int or float (not a bool), else None: a lenient
    reading of a number in data the package keeps or relays (an item time in a waiting message,
    a send-time header, a dead letter's time), where a bad value is passed over, not refused."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def check_now(value: Any, what: str = "now") -> float | int:
    """Epoch seconds: finite, >= 0, up to year 9999. ``None`` means the current time."""
    if type(value) is float and 0 <= value <= MAX_TS:  # the common case, in one test (NaN fails it)
        return value
    if value is None:
        return time.time()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInput(f"{what} must be epoch seconds (int or float), got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInput(f"{what} must be finite")
    if value < 0 or value > MAX_TS:
        raise InvalidInput(f"{what} must be between 0 and {MAX_TS}, got {value!r}")
    return value


def check_item_time(value: Any, what: str = "ts") -> float | int:
    """The time of an item (``None``: now): as ``check_now``, and not more than
    ``COUNTERS_FUTURE_TOLERANCE`` seconds ahead of this process's clock. A clock that runs ahead
    would otherwise count into buckets, days and ranking slots that have not begun, and push a
    board's watermark so far that current items look late."""
    checked = check_now(value, what)
    if value is not None:
        ahead = checked - time.time()
        if ahead > 0 and ahead > get_settings().future_tolerance:  # (the tolerance is never negative)
            raise FutureTime(
                f"{what} is {ahead:.0f} s ahead of this worker's clock "
                f"(more than COUNTERS_FUTURE_TOLERANCE, {get_settings().future_tolerance} s)"
            )
    return checked


MAX_MESSAGE_ID = 200
"""Longest message (task or batch) id: it is part of the dedupe markers' keys."""


def check_message_id(value: Any) -> str | None:
    """A task or batch id used for dedupe (None: no dedupe)."""
    if value is None:
        return None
    try:
        return check_text(value, "message id", max_length=MAX_MESSAGE_ID)
    except InvalidInput as exc:
        raise MalformedMessage(str(exc)) from None


def check_int(value: Any, what: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """An int (not bool) within ``[minimum, maximum]`` when those are given."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{what} must be an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise InvalidInput(f"{what} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise InvalidInput(f"{what} must be <= {maximum}, got {value}")
    return value


# --- visits: IPs, paths, session ids, days ---------------------------------------------------

MAX_IP_TEXT = 64
"""Longest IP text accepted: an IPv6 address (45 characters) with a scope id of an interface name."""
_HEX_ID = re.compile(r"[0-9a-fA-F]{15,}")


def check_ip(value: Any) -> str:
    """The canonical text of an IPv4 or IPv6 address (an IPv4-mapped IPv6 address as IPv4)."""
    if not isinstance(value, str):
        raise InvalidInput(f"ip must be a str, got {type(value).__name__}")
    if len(value) > MAX_IP_TEXT:  # before parsing or caching: a client chooses this string
        raise InvalidInput(f"ip is longer than {MAX_IP_TEXT} characters ({len(value)})")
    return _canonical_ip(value)


@functools.lru_cache(maxsize=65536)
def _canonical_ip(value: str) -> str:
    """Cached: a site's visitors come back (bad input raises, and is not cached)."""
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        raise InvalidInput("ip is not an IPv4 or IPv6 address") from None
    if isinstance(address, ipaddress.IPv6Address):
        # the zone of a link-local address names the receiver's interface, not the visitor
        address = address.ipv4_mapped or ipaddress.IPv6Address(int(address))
    return str(address)


def check_path(value: Any) -> str:
    """The canonical name of a page (``core.paths.canonical_path``: query and fragment dropped,
    safe escapes decoded, at most 512 UTF-8 bytes), the one every route counts a view under. The
    text given is at most 1024 characters (``check_text``), as every name the API takes."""
    path = page_name(check_text(value, "path"))
    if not path:
        raise InvalidInput("path is empty once the query string and fragment are dropped")
    return path


def page_name(text: str) -> str:
    """``core.paths.canonical_path`` with this deployment's COUNTERS_PATH_TRAILING_SLASH and
    COUNTERS_PATH_CASE: the name a route gives a page before deciding anything on it (``""``
    when nothing is left). ``check_path`` is this with the input checks."""
    settings = get_settings()
    return canonical_path(
        text, strip_trailing_slash=settings.path_trailing_slash == "strip", lower_case=settings.path_case == "lower"
    )


def check_session_id(value: Any) -> str:
    """A session UUID (dashes optional, any case) or at least 15 hex digits: its hex digits."""
    check_text(value, "session id")
    digits = value.replace("-", "")
    if not _HEX_ID.fullmatch(digits):
        raise InvalidInput("session id must be a UUID or at least 15 hex digits")
    return digits


def check_day(value: Any, what: str = "day") -> date:
    """A ``datetime.date`` (not a ``datetime``, whose day would depend on its own zone)."""
    if isinstance(value, datetime) or not isinstance(value, date):
        raise InvalidInput(f"{what} must be a datetime.date, got {type(value).__name__}")
    if value in (date.min, date.max):
        raise InvalidInput(f"{what} must have a day before and after it")
    return value


MAX_RANGE_DAYS = 400
"""Longest range of days a query accepts (per-day totals are kept about this long)."""


def check_day_range(
    start: Any, end: Any, max_days: int = MAX_RANGE_DAYS, names: tuple[str, str] = ("start", "end")
) -> tuple[date, date]:
    """Two days, ``start <= end``, covering at most ``max_days`` days (``names``: how errors call them)."""
    check_day(start, names[0])
    check_day(end, names[1])
    if start > end:
        raise InvalidInput(f"{names[0]} ({start}) is after {names[1]} ({end})")
    if (end - start).days + 1 > max_days:
        raise InvalidInput(f"a range covers at most {max_days} days, got {(end - start).days + 1}")
    return start, end
