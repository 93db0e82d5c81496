"""What task arguments show outside the message body: visitor IPs masked to their network.

Celery writes a text form of every call's arguments (``argsrepr`` / ``kwargsrepr``) into the
message headers, and workers copy it into their ``task-received`` task events: that is what Flower,
``celery events`` and ``celery inspect`` show. The arguments of ``record_visit`` and
``record_visits`` hold raw visitor IPs, so the text form is made here with every IP address cut
to its network: an IPv4 address to its /24 (``203.0.113.x``), an IPv6 address to its /48
(``2001:db8:1::/48``; an IPv4-mapped one as IPv4). Long lists show their first items and how many
more there are; the text is cut at ``MAX_REPR`` characters, as Celery cuts its own.

The same rule masks what is kept of a call where no raw IP may be: a call set aside in the
dead letters when they live in the counters' Redis (a broker that is not a Redis) keeps its
arguments through ``masked(..., whole=True)`` (all of them, masked, nothing cut) and its error
text through ``masked_text``.

The message body itself still carries the raw IP (the worker needs it to make the visitor id):
docs/reliability.md, "Where raw IPs live", says where and for how long.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

MAX_REPR = 1024
"""Characters of an argument text at most (Celery's ``argsrepr_maxsize``)."""
ITEMS_SHOWN = 10
"""Items of a list (or entries of a dict) shown; the rest are counted."""
MAX_DEPTH = 4
"""Nesting shown; deeper values are written as ``...``."""

_IP_LIKE = re.compile(r"[0-9A-Fa-f:.]{2,45}(%[^\s%]{1,16})?")
"""Text that may be an IP address (hex digits, dots and colons, an IPv6 zone): the cheap test
before parsing."""


def masked_ip(text: str) -> str | None:
    """``text`` masked to its network if it is an IP address, else None."""
    if not _IP_LIKE.fullmatch(text):
        return None
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if isinstance(address, ipaddress.IPv4Address):
        return ".".join(str(address).split(".")[:3]) + ".x"
    network = ipaddress.IPv6Network((int(address) >> 80 << 80, 48))
    return str(network)


class _Shown:
    """A value written as-is (no quotes) in a text form: ``...`` and ``<N more>``."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def masked(value: Any, depth: int = 0, *, whole: bool = False) -> Any:
    """A copy of ``value`` with every IP address in it masked (a string, or a dict key). For
    display (the default), lists and dicts are cut to ``ITEMS_SHOWN`` items and ``MAX_DEPTH``
    levels and a value of another type is shown by its type's name; ``whole`` keeps all of it,
    as JSON-able as ``value`` was (what is kept of a call where no raw IP may be)."""
    if isinstance(value, str):
        hidden = masked_ip(value)
        return value if hidden is None else hidden
    if isinstance(value, (list, tuple, dict)) and depth >= MAX_DEPTH and not whole:
        return _Shown("...")
    if isinstance(value, (list, tuple)):
        kept = value if whole else value[:ITEMS_SHOWN]
        shown: list[Any] = [masked(item, depth + 1, whole=whole) for item in kept]
        if len(value) > len(kept):
            shown.append(_Shown(f"<{len(value) - len(kept)} more>"))
        return tuple(shown) if isinstance(value, tuple) else shown
    if isinstance(value, dict):
        entries = list(value.items())
        first = entries if whole else entries[:ITEMS_SHOWN]
        out = {
            masked(k, depth + 1, whole=whole): masked(v, depth + 1, whole=whole)
            for k, v in first
            if whole or isinstance(k, (str, int, float, bool, type(None)))
        }
        if len(entries) > len(first):
            out[_Shown("...")] = _Shown(f"<{len(entries) - len(first)} more>")
        return out
    if whole or value is None or isinstance(value, (int, float, bool)):
        return value
    return _Shown(f"<{type(value).__name__}>")


_IPV6_IN_TEXT = re.compile(r"(?<![0-9A-Za-z:.])(?=[0-9A-Fa-f.]*:[0-9A-Fa-f.]*:)[0-9A-Fa-f:.]{2,45}(%[\w.-]{1,16})?")
"""Words of a text that may be an IPv6 address (two colons at least; an IPv4-mapped one too)."""
_IPV4_IN_TEXT = re.compile(r"(?<![0-9A-Za-z.])\d{1,3}(\.\d{1,3}){3}(?![0-9A-Za-z]|\.\d)")
"""Words of a text that may be an IPv4 address (``203.0.113.7:8080`` and ``at 203.0.113.7.`` too)."""


def masked_text(text: str) -> str:
    """``text`` (an error message...) with every IP address written in it masked: IPv6 words
    first (an IPv4-mapped one holds an IPv4 address), then IPv4 ones; a word that ends a
    sentence or a ``host:`` is read without its last dots and colons."""

    def one(match: re.Match[str]) -> str:
        word = match.group()
        hidden = masked_ip(word)
        if hidden is not None:
            return hidden
        bare = word.rstrip(".:")
        hidden = masked_ip(bare)
        return word if hidden is None else hidden + word[len(bare) :]

    return _IPV4_IN_TEXT.sub(one, _IPV6_IN_TEXT.sub(one, text))


def cut(text: str) -> str:
    return text if len(text) <= MAX_REPR else text[: MAX_REPR - 3] + "..."


def masked_reprs(args: Any, kwargs: Any) -> tuple[str, str]:
    """``(argsrepr, kwargsrepr)`` of a call, IP addresses masked: what its message headers and
    task events may show."""
    shown_args = tuple(args) if isinstance(args, (list, tuple)) else args
    return cut(repr(masked(shown_args))), cut(repr(masked(kwargs)))
