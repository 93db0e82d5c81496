"""What task arguments show outside the message body: visitor IPs masked to their network.

Celery writes a text form of every call's arguments (``argsrepr`` / ``kwargsrepr``) into the
message headers, and workers copy it into their ``task-received`` events: that is what Flower,
``celery events`` and ``celery inspect`` show. The arguments of ``record_visit`` and
``record_visits`` hold raw visitor IPs, so the text form is made here with every IP address cut
to its network: an IPv4 address to its /24 (``203.0.113.x``), an IPv6 address to its /48
(``2001:db8:1::/48``; an IPv4-mapped one as IPv4). Long lists show their first items and how many
more there are; the text is cut at ``MAX_REPR`` characters, as Celery cuts its own.

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


def masked(value: Any, depth: int = 0) -> Any:
    """A copy of ``value`` fit for display: IP addresses masked (anywhere in it), lists and dicts
    cut to ``ITEMS_SHOWN`` items and ``MAX_DEPTH`` levels."""
    if isinstance(value, str):
        hidden = masked_ip(value)
        return value if hidden is None else hidden
    if isinstance(value, (list, tuple, dict)) and depth >= MAX_DEPTH:
        return _Shown("...")
    if isinstance(value, (list, tuple)):
        shown: list[Any] = [masked(item, depth + 1) for item in value[:ITEMS_SHOWN]]
        if len(value) > ITEMS_SHOWN:
            shown.append(_Shown(f"<{len(value) - ITEMS_SHOWN} more>"))
        return tuple(shown) if isinstance(value, tuple) else shown
    if isinstance(value, dict):
        entries = list(value.items())
        out = {masked(k, depth + 1): masked(v, depth + 1) for k, v in entries[:ITEMS_SHOWN]
               if isinstance(k, (str, int, float, bool, type(None)))}
        if len(entries) > ITEMS_SHOWN:
            out[_Shown("...")] = _Shown(f"<{len(entries) - ITEMS_SHOWN} more>")
        return out
    if value is None or isinstance(value, (int, float, bool)):
        return value
    return _Shown(f"<{type(value).__name__}>")


def cut(text: str) -> str:
    return text if len(text) <= MAX_REPR else text[:MAX_REPR - 3] + "..."


def masked_reprs(args: Any, kwargs: Any) -> tuple[str, str]:
    """``(argsrepr, kwargsrepr)`` of a call, IP addresses masked: what its message headers and
    task events may show."""
    shown_args = tuple(args) if isinstance(args, (list, tuple)) else args
    return cut(repr(masked(shown_args))), cut(repr(masked(kwargs)))
