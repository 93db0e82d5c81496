"""The client address rule of the middleware: who sent a request, from the socket peer or, behind
reverse proxies you run, from the ``X-Forwarded-For`` or RFC 7239 ``Forwarded`` header, counted
``trusted_proxies`` hops from the right (docs/integrations.md, "Behind reverse proxies").

A rule of its own because everything in a proxy header left of what your proxies appended is
written by the client: the parsing here never trusts more, never raises, and answers an
address in ``core.validation.check_ip``'s canonical text or None. ``common.Counting`` applies
it with each middleware's ``Options``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..core.validation import check_ip
from ..errors import InvalidInput


def client_ip(
    remote_addr: str | None, headers: Mapping[str, str], trusted_proxies: int = 0, proxy_header: str = "x-forwarded-for"
) -> str | None:
    """The client's address: the socket peer, or the one ``trusted_proxies`` hops from the right of
    the proxy header's list (the socket peer being the last hop).

    Only a proxy you run appends to ``X-Forwarded-For`` / ``Forwarded`` truthfully; a client can
    write anything to the left of it. So with ``trusted_proxies=0`` (the default) the headers are
    ignored, and with N trusted proxies the address N hops from the right is taken: the one the
    outermost trusted proxy saw. A header that is malformed, names too few hops, or whose chosen
    entry is not an IP address (``unknown``, an obfuscated ``_name``) gives the socket peer; this
    never raises. Returns the canonical text (``core.validation.check_ip``), or None when even the
    socket peer is no IP address (a Unix socket).
    """
    socket_ip = _valid_ip(remote_addr)
    if trusted_proxies <= 0:
        return socket_ip
    value = headers.get(proxy_header.lower())
    if not value:
        return socket_ip
    hops = _forwarded_for(value) if proxy_header.lower() == "forwarded" else _x_forwarded_for(value)
    if hops is None or len(hops) < trusted_proxies:
        return socket_ip
    return _valid_ip(_strip_port(hops[-trusted_proxies])) or socket_ip


def _valid_ip(text: str | None) -> str | None:
    if not text:
        return None
    try:
        return check_ip(text)
    except InvalidInput:
        return None


def _x_forwarded_for(value: str) -> list[str] | None:
    hops = [hop.strip() for hop in value.split(",")]
    return None if any(not hop for hop in hops) else hops


def _forwarded_for(value: str) -> list[str] | None:
    """The ``for=`` of each element of an RFC 7239 ``Forwarded`` header (None when malformed)."""
    hops = []
    for element in _split_outside_quotes(value, ","):
        found = None
        for pair in _split_outside_quotes(element, ";"):
            name, sep, item = pair.strip().partition("=")
            if not sep:
                return None
            if name.strip().lower() == "for":
                item = item.strip()
                if item.startswith('"'):
                    if len(item) < 2 or not item.endswith('"'):
                        return None
                    item = item[1:-1].replace('\\"', '"')
                found = item
        if found is None:
            return None
        hops.append(found)
    return hops


def _split_outside_quotes(text: str, separator: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    quoted, escaped = False, False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\" and quoted:
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == separator and not quoted:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return parts


def _strip_port(hop: str) -> str:
    """``[2001:db8::1]:443`` -> ``2001:db8::1``; ``192.0.2.1:80`` -> ``192.0.2.1``; else as is."""
    if hop.startswith("["):
        end = hop.find("]")
        return hop[1:end] if end > 0 else hop
    if hop.count(":") == 1:
        return hop.split(":", 1)[0]
    return hop
