"""One name per page: the canonical path every route counts a page view under.

A page reaches the package in several spellings: the importer reads the request target as the
server logged it (``/caf%C3%A9?x=1``), a middleware gets what its framework decoded (``/café``)
or the raw bytes the client sent, an app passes whatever it has to ``.delay()``, the module API
or ``VisitRecorder``. ``canonical_path`` gives all of them one name, and ``core.validation.
check_path`` (which every route calls before anything is written) applies it:

- an absolute-form target (``http://host/a``) is reduced to its path (``/a``);
- a literal ``?`` or ``#`` ends the path (query string and fragment are dropped);
- ``%XX`` escapes are decoded where the bytes make valid UTF-8 text, except those that would
  change what the path means or make two targets one: ``%2F`` (``/``), ``%3F`` (``?``),
  ``%23`` (``#``), ``%25`` (``%``), control characters and invalid UTF-8 stay encoded, with
  upper-case hex digits; a ``%`` that starts no escape is written ``%25``;
- everything else (trailing slashes, case, ``+``, dot segments) is left as sent, unless
  ``COUNTERS_PATH_TRAILING_SLASH=strip`` or ``COUNTERS_PATH_CASE=lower`` says otherwise;
- the name is cut to ``MAX_PATH_BYTES`` UTF-8 bytes, never inside a character or an escape.

The rule is idempotent (a canonical name is its own name), so a path named by a web process and
named again by a worker keeps its name. The table of inputs and names is in docs/api.md.
"""

from __future__ import annotations

import functools
import re

MAX_PATH_BYTES = 512
"""Longest page name, in UTF-8 bytes."""

CACHED_LENGTH = 1024
"""Targets up to this long are named once per process (``lru_cache``); longer ones every time."""

KEPT_ENCODED = frozenset("/?#%")
"""Characters whose escapes are never decoded: decoded, they would split or end the path."""

_ESCAPES = re.compile(r"(?:%[0-9A-Fa-f]{2})+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_STRAY_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_NEEDS_WORK = re.compile(r"[%?#]|^[hH][tT][tT][pP][sS]?://")


def canonical_path(target: str, *, strip_trailing_slash: bool = False, lower_case: bool = False) -> str:
    """The canonical name of a request target or path (see the module's rule). Returns ``""``
    when nothing is left (a target that is only a query string): the caller refuses it."""
    if len(target) > CACHED_LENGTH:  # rare, and not worth a cache entry of its size
        return _canonical.__wrapped__(target, strip_trailing_slash, lower_case)
    return _canonical(target, strip_trailing_slash, lower_case)


@functools.lru_cache(maxsize=65536)
def _canonical(target: str, strip_trailing_slash: bool, lower_case: bool) -> str:
    path = target
    if _NEEDS_WORK.search(path):
        if path[:8].lower().startswith(("http://", "https://")):
            rest = path.split("://", 1)[1]
            path = "/" + rest.partition("/")[2] if "/" in rest else "/"
        for mark in ("?", "#"):
            path = path.split(mark, 1)[0]
        path = _STRAY_PERCENT.sub("%25", path)
        path = _ESCAPES.sub(_decode_run, path)
    if lower_case:
        path = _ESCAPES.sub(lambda run: run.group(0).upper(), path.lower())
    if strip_trailing_slash and len(path) > 1:
        path = path.rstrip("/") or "/"
    return _cut(path)


def _decode_run(run: re.Match[str]) -> str:
    """One run of ``%XX`` escapes: the characters that are safe to decode, decoded; the rest as
    upper-case escapes (bytes of invalid UTF-8 one by one)."""
    raw = bytes.fromhex(run.group(0).replace("%", ""))
    out = []
    for char in raw.decode("utf-8", "surrogateescape"):
        if "\udc80" <= char <= "\udcff":  # a byte that is not part of valid UTF-8
            out.append(f"%{ord(char) - 0xDC00:02X}")
        elif char in KEPT_ENCODED or _CONTROL.match(char):
            out.append("".join(f"%{byte:02X}" for byte in char.encode("utf-8")))
        else:
            out.append(char)
    return "".join(out)


def _cut(path: str) -> str:
    """``path`` cut to MAX_PATH_BYTES UTF-8 bytes on a character boundary, not inside an escape."""
    encoded = path.encode("utf-8", "surrogatepass")
    if len(encoded) <= MAX_PATH_BYTES:
        return path
    cut = encoded[:MAX_PATH_BYTES].decode("utf-8", "ignore")
    percent = cut.rfind("%", len(cut) - 2)
    return cut[:percent] if percent >= 0 else cut


def encode_target_bytes(raw: bytes) -> str:
    """A request target as received (bytes, e.g. ASGI's ``raw_path`` or a WSGI server's
    ``REQUEST_URI``) as text for ``canonical_path``: bytes that are not printable ASCII (a client
    that sent UTF-8 unescaped, a control byte) become ``%XX`` escapes, decoded again where they
    are valid text."""
    if raw.isascii() and not _CONTROL.search(raw.decode("ascii")) and b" " not in raw:
        return raw.decode("ascii")
    return "".join(chr(b) if 0x20 < b < 0x7F else f"%{b:02X}" for b in raw)


def encode_decoded_path(path: str) -> str:
    """A path a server or framework already decoded (WSGI's ``PATH_INFO``, ASGI's ``path``,
    Django's ``request.path``) as text for ``canonical_path``, when the raw target is not known:
    ``%``, ``?`` and ``#`` in it can only come from ``%25``, ``%3F`` and ``%23`` (literal ones end
    the path before decoding), so they are escaped again; control characters too, and a byte that
    was not UTF-8 (given as its ``surrogateescape`` character, U+DC80 to U+DCFF) becomes its
    ``%XX`` escape, as in a raw target. (A ``%2F`` decoded to ``/`` cannot be told from a ``/``:
    use the raw target where the server gives it.)"""
    if not _NEEDS_ESCAPE_AGAIN.search(path):
        return path
    return _NEEDS_ESCAPE_AGAIN.sub(_escape_again, path)


def _escape_again(match: re.Match[str]) -> str:
    char = match.group(0)
    if "\udc80" <= char <= "\udcff":  # an undecodable byte (surrogateescape)
        return f"%{ord(char) - 0xDC00:02X}"
    return "".join(f"%{b:02X}" for b in char.encode("utf-8", "surrogatepass"))


_NEEDS_ESCAPE_AGAIN = re.compile("[%?#\x00-\x1f\x7f-\x9f\udc80-\udcff]")
