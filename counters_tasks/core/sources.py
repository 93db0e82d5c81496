"""Where a page view came from: its referring domain and its campaign (UTM) tags, reduced.

One rule for every route (the middleware, the importer, the tasks, the module API), so a view has
the same source whichever way it was counted:

- the **referrer** is reduced to its host name, lower-cased, without a leading ``www.`` (no path,
  no query string, no user or port is ever kept or sent on): ``https://www.google.com/search?q=x``
  is ``google.com``; an international name is kept in its IDNA (punycode) form, the one browsers
  send (``http://bücher.example/``, ``http://b%C3%BCcher.example/`` and
  ``http://xn--bcher-kva.example/`` are all ``xn--bcher-kva.example``: one source, however it
  was written), and a host that is not text (bytes that were not UTF-8, read as U+FFFD by the
  middleware) is ``(unknown)``; a referrer on one of the site's own hosts is ``(internal)``; no referrer
  (or an empty one) is ``(direct)``; one with no host (``about:blank``, garbage) is
  ``(unknown)``. Reducing a value already reduced gives it back, so a producer may reduce and the
  worker check again.
- the **campaign** is ``utm_source``, ``utm_medium`` and ``utm_campaign`` of the page's own query
  string (first value of each; trimmed, at most ``MAX_TAG`` characters; a value with control
  characters is dropped).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any
from urllib.parse import parse_qs, unquote_to_bytes, urlsplit

from ..errors import InvalidInput
from .validation import check_unicode

DIRECT, INTERNAL, UNKNOWN = "(direct)", "(internal)", "(unknown)"
"""The referrers that are not a domain: none given, the site's own pages, no host in it."""

UTM_KEYS = ("source", "medium", "campaign")
"""The campaign tags kept, as ``utm_<key>`` in a page's query string."""

MAX_TAG = 100
"""The longest campaign tag kept (characters); a longer one is cut."""

MAX_REFERRER = 2048
"""The longest referrer URL read (characters); a longer one counts as ``(unknown)``."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_HOST = re.compile(r"[^\s/?#@:\[\]]{1,253}")


def referrer_domain(referrer: Any, own_hosts: Collection[str] = ()) -> str:
    """The source of a view whose Referer was ``referrer`` (a URL, a bare host, one of the
    special values, or None), ``own_hosts`` being the site's own Host names (lower-case, as
    ``COUNTERS_SITES`` keeps them, or the request's own Host)."""
    if referrer is None:
        return DIRECT
    if not isinstance(referrer, str):
        raise InvalidInput(f"referrer must be a str, got {type(referrer).__name__}")
    text = check_unicode(referrer, "referrer").strip()
    if not text or text == "-":
        return DIRECT
    if text in (DIRECT, INTERNAL, UNKNOWN):
        return text
    if len(text) > MAX_REFERRER or _CONTROL.search(text):
        return UNKNOWN
    if "//" not in text:  # a bare host (what a producer already reduced), or a scheme without one
        _name, colon, rest = text.partition(":")
        if colon and not rest.split("/")[0].isdigit():
            return UNKNOWN  # about:blank, mailto:..., data:...
        text = "//" + text
    try:
        host = urlsplit(text).hostname
    except ValueError:
        return UNKNOWN
    host = ascii_host((host or "").rstrip("."))
    if not host or not _HOST.fullmatch(host):
        return UNKNOWN
    if host in own_hosts or _strip_www(host) in {_strip_www(ascii_host(h.split(":")[0])) for h in own_hosts}:
        return INTERNAL
    return _strip_www(host)


def ascii_host(host: str) -> str:
    """A host name in the form browsers send it: ``%XX`` escapes decoded as UTF-8, then an
    international name in its IDNA (punycode) form, lower-case (``bücher.example`` is
    ``xn--bcher-kva.example``); an ASCII name as given. ``""`` when it is not a name: escapes or
    text that are not UTF-8 (U+FFFD, what a header's undecodable bytes are read as), or a name
    IDNA refuses. (Python's ``idna`` codec, IDNA 2003: the same form as browsers' for all but a
    few characters, such as ``ß``, which it writes ``ss``.)"""
    if "%" in host:
        try:
            host = unquote_to_bytes(host).decode("utf-8")
        except UnicodeDecodeError:
            return ""
        if _CONTROL.search(host):
            return ""
    if host.isascii():
        return host.lower()
    if "\ufffd" in host:
        return ""
    try:
        return host.encode("idna").decode("ascii").lower()
    except UnicodeError:
        return ""


def _strip_www(host: str) -> str:
    return host[4:] if host.startswith("www.") and host.count(".") > 1 else host


def campaign_of(query: Any) -> dict[str, str]:
    """The UTM tags of a page's query string (``a=1&utm_source=x``), as ``{"source": "x", ...}``
    (only those present)."""
    if not isinstance(query, str) or "utm_" not in query:
        return {}
    try:
        found = parse_qs(query[:8192], keep_blank_values=False, max_num_fields=100)
    except ValueError:
        return {}
    return check_campaign({key: values[0] for key in UTM_KEYS if (values := found.get(f"utm_{key}"))})


def source_fields(referrer: Any, query: Any, own_hosts: Collection[str] = ()) -> dict[str, Any]:
    """A view's source as a visit carries it (``record_visit``'s ``referrer=`` and ``utm=``): the
    Referer reduced to its domain (``referrer_domain``) and the campaign tags of the page's query
    string (``campaign_of``), each left out when there is none. What the middleware and the
    importer send."""
    found: dict[str, Any] = {}
    domain = referrer_domain(referrer, own_hosts)
    if domain != DIRECT:
        found["referrer"] = domain
    campaign = campaign_of(query)
    if campaign:
        found["utm"] = campaign
    return found


def check_campaign(campaign: Any) -> dict[str, str]:
    """A campaign given to the API (``{"source": ..., "medium": ..., "campaign": ...}``, each
    optional), reduced as ``campaign_of`` reduces a query's; raises InvalidInput for another
    shape."""
    if campaign is None:
        return {}
    if not isinstance(campaign, Mapping) or set(campaign) - set(UTM_KEYS):
        raise InvalidInput(f"utm must be a dict with keys among {', '.join(UTM_KEYS)}")
    out = {}
    for key in UTM_KEYS:
        value = campaign.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise InvalidInput(f"utm {key} must be a str, got {type(value).__name__}")
        value = check_unicode(value, f"utm {key}").strip()[:MAX_TAG]
        if value and not _CONTROL.search(value):
            out[key] = value
    return out
