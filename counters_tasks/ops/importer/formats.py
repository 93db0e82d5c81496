"""The input formats of ``counters-tasks import`` and what one line of them is, pure functions
(no I/O, no Redis): ``detect_format``, ``parse_log_line`` and ``log_line_visit`` (Apache/nginx
combined or common format), ``vhost_line_visit`` (the combined format after the virtual host),
``json_line_visit`` (JSON lines), and ``line_visit`` over them for a line as read.

Each line gives a visit dict (``ip``, ``path``, ``ts``, ``session_id``) or the reason it is
skipped (``SKIP_REASONS``): the page view rule of ``core.pageviews`` and the page name of
``core.paths``, as the middleware applies them to a live request, so an imported log counts what
the middleware would have. Parsing is lenient where the request, status and time are intact: a
line cut inside its user agent (or referer, or size) is read, with what it has.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import math
import re
from collections.abc import Collection, Iterator
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any, NamedTuple

from ...core import pageviews
from ...core.days import local_day
from ...core.settings import get_settings
from ...core.sites import hosts_of, site_for_host, zone_of
from ...core.sources import source_fields
from ...core.validation import check_ip, page_name
from ...core.visitors import DAILY, day_key
from ...errors import InvalidInput

FORMATS = ("combined", "common", "jsonl", "vhost_combined")
"""The input formats: Apache/nginx combined and common log formats, JSON lines, and the combined
format after the virtual host (Apache's ``vhost_combined``, ``%v:%p %h ...``; nginx ``$host
$remote_addr ...``): each line then counts for the site its host names (``COUNTERS_SITES``)."""

MALFORMED, BLANK, ALREADY_IMPORTED = "malformed", "blank", "already_imported"
METHOD, STATUS, STATIC, CRAWLER = pageviews.METHOD, pageviews.STATUS, pageviews.STATIC, pageviews.CRAWLER
HOST = pageviews.HOST
SKIP_REASONS = (BLANK, MALFORMED, METHOD, STATUS, STATIC, CRAWLER, HOST, ALREADY_IMPORTED)
"""Why a line is not counted (always listed in the summary): unreadable, the page view rule's
reasons (``core.pageviews``; a log has no content type, so never ``not_page``), or imported
before; besides these, ``refused:<reason>`` for a page view the API refused
(``InvalidInput.reason``: ``bad_input``, ``closed_day``, ``future``...), listed when it happened."""


class Skip(str):
    """Why a line is not counted: the reason itself (a ``str``, equal to it), with the line's
    time (``ts``, None when the line could not be read) and its site's scope where the line names
    one (``vhost_combined``), so its skip counts in that site's day (``skips``)."""

    ts: float | None
    site: str

    def __new__(cls, reason: str, ts: float | None = None, site: str = "") -> Skip:
        made = super().__new__(cls, reason)
        made.ts, made.site = ts, site
        return made


EVERY_PAGE = pageviews.PageViewRule(skip_prefixes=(), skip_extensions=(), skip_crawlers=False)
"""The rule of ``--all``: static files and crawlers counted too (method and status still apply)."""

MONTHS = {
    name: n
    for n, name in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)
}

_QUOTED = r'"((?:[^"\\]|\\.)*)"'
LOG_LINE = re.compile(
    r"(?P<ip>\S+) \S+ (?P<user>.*?) \[(?P<time>[^\]]{1,40})\] "
    + _QUOTED.replace("(", "(?P<request>", 1)
    + r" (?P<status>[^\s\"]+)(?: (?P<size>[^\s\"]+))?(?P<rest>.*)"
)
"""``%h %l %u %t "%r" %>s %b``, the common log format (the size may be cut off), and whatever follows it."""
COMBINED_REST = re.compile(
    r" " + _QUOTED.replace("(", "(?P<referer>", 1) + " " + _QUOTED.replace("(", "(?P<agent>", 1) + r"(?:\s.*)?"
)
"""What the combined format adds: ``"%{Referer}i" "%{User-agent}i"`` (and anything after them)."""
CUT_COMBINED_REST = re.compile(r'(?: "(?P<referer>(?:[^"\\]|\\.)*)(?:" "(?P<agent>(?:[^"\\]|\\.)*)"?)?)?\s*')
"""The combined format's fields cut short (a line truncated by the logger or a copy): the user
agent without its closing quote, the referer without the user agent, or neither."""
LOG_TIME = re.compile(r"(\d{2})/([A-Za-z]{3})/(\d{4}):(\d{2}):(\d{2}):(\d{2}) ([+-])(\d{2})(\d{2})")
"""``%t`` inside its brackets: ``10/Oct/2000:13:55:36 -0700``."""


class LogLine(NamedTuple):
    """The fields of an access log line that decide whether it is a page view."""

    ip: str
    ts: int
    method: str
    target: str | None
    status: int | None
    agent: str | None  # None in the common format
    referer: str | None = None  # None in the common format


def detect_format(first_line: str) -> str:
    """The format of an input from its first non-empty line: ``jsonl`` when it starts with
    ``{``, ``combined`` when it has the quoted referer and user agent fields, else ``common``."""
    text = first_line.strip()
    if text.startswith("{"):
        return "jsonl"
    match = LOG_LINE.fullmatch(text)
    if match and (COMBINED_REST.fullmatch(match["rest"]) or match["rest"].startswith(' "')):
        return "combined"
    return "common"


@functools.lru_cache(maxsize=4096)
def parse_log_time(text: str) -> int | None:
    """Epoch seconds of a ``%t`` time (``10/Oct/2000:13:55:36 -0700``, the offset respected);
    None when it is not one. Cached: a busy log repeats each second many times."""
    match = LOG_TIME.fullmatch(text)
    month = MONTHS.get(match[2].title()) if match else None
    if match is None or month is None:
        return None
    sign = 1 if match[7] == "+" else -1
    try:
        offset = timezone(sign * timedelta(hours=int(match[8]), minutes=int(match[9])))
        when = datetime(int(match[3]), month, int(match[1]), int(match[4]), int(match[5]), int(match[6]), tzinfo=offset)
    except ValueError:
        return None
    return int(when.timestamp())


def unescape(text: str) -> str:
    r"""A logged string with Apache's and nginx's ``\"`` and ``\\`` escapes undone, and their
    ``\xhh`` escapes of bytes written ``%hh`` (what the client sent, named by ``core.paths``)."""
    if "\\" not in text:
        return text
    return re.sub(r'\\(["\\])|\\x([0-9A-Fa-f]{2})', lambda m: m[1] or f"%{m[2].upper()}", text)


def logged_header(text: str) -> str:
    """A logged header's text. nginx and Apache write a header's bytes past ASCII as ``\\xHH``
    (``unescape``: ``%HH``, which ``core.sources`` reads as UTF-8); gunicorn (any Python WSGI
    server's log) writes the header's PEP 3333 string, each byte read as latin-1, in UTF-8: a
    text whose characters past ASCII are all latin-1 and whose latin-1 bytes are UTF-8 is taken
    back to those bytes, read as UTF-8, as the middleware reads the header itself
    (``http://bÃ¼cher.example/`` is ``http://bücher.example/``). Bytes that were not UTF-8 cannot
    be told from latin-1 text there: they stay as written."""
    if text.isascii():
        return text
    try:
        return text.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return text


def parse_log_line(text: str, fmt: str) -> LogLine | None:
    """The fields of one line in the ``combined`` or ``common`` format; None when it is malformed
    (its time, request or status unreadable). A combined line cut short has the user agent it
    kept (the start of it; None when it was cut before it: not known, as in the common format);
    a common one may have more fields."""
    match = LOG_LINE.fullmatch(text)
    if match is None:
        return None
    agent = referer = None
    if fmt == "combined":
        rest = COMBINED_REST.fullmatch(match["rest"]) or CUT_COMBINED_REST.fullmatch(match["rest"])
        if rest is None:
            return None
        agent, referer = rest["agent"], rest["referer"] and logged_header(unescape(rest["referer"]))
    ts = parse_log_time(match["time"])
    status_text = match["status"]
    if ts is None or not (status_text == "-" or (status_text.isdigit() and len(status_text) == 3)):
        return None
    method, _, rest_of_request = match["request"].partition(" ")
    target = rest_of_request.split(" ")[0] if rest_of_request else None
    status = int(status_text) if status_text != "-" else None
    return LogLine(match["ip"], ts, method, target and unescape(target), status, agent, referer)


def page_path(target: str) -> str | None:
    """The page's canonical name (``core.paths``) of a request target in origin form (``/a?b``)
    or absolute form (``http://host/a``); None for any other (``*``, a proxy's ``host:port``)."""
    if not target.startswith("/") and not target[:8].lower().startswith(("http://", "https://")):
        return None
    return page_name(target) or None


def session_key(secret: str, ts: float, zone: tzinfo | str | None = None) -> str:
    """The HMAC key of a log line's session id (``session_id_for``): COUNTERS_SECRET, or with
    COUNTERS_VISITOR_KEY=daily the secret and the line's local day in ``zone`` (``core.visitors.
    day_key``, as visitor ids are made), so the daily uniques hold no session id that links a
    visitor's days (docs/privacy.md, "Privacy modes")."""
    mode = get_settings().visitor_key
    if mode != DAILY:
        return secret
    return day_key(secret, mode, local_day(ts, None if zone is None else str(zone)))


@functools.lru_cache(maxsize=65536)
def session_id_for(secret: str, ip: str, agent: str) -> str:
    """The session id of a log line's visitor: 32 hex digits of an HMAC (under COUNTERS_SECRET,
    like visitor ids, so the IP cannot be recovered from it) of the IP and the user agent.
    The same (IP, agent) on the same day is one daily unique (``uniques``: its first 15 digits)."""
    try:
        ip = check_ip(ip)
    except InvalidInput:
        pass  # the API refuses the visit anyway
    message = f"session\0{ip}\0{agent}".encode("utf-8", "surrogatepass")
    return hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()[:32]


def log_line_visit(
    text: str,
    fmt: str,
    secret: str,
    include_all: bool = False,
    own_hosts: Collection[str] = (),
    zone: tzinfo | str | None = None,
) -> dict[str, Any] | str:
    """The visit of one access log line (``combined`` or ``common``), or why it is skipped:
    ``malformed``, or the page view rule's reason (``core.pageviews``: the user agent is known in
    the combined format only; with ``include_all`` static files and crawlers count too). Its
    source (``core.sources``): the combined format's referer, reduced to its domain
    (``(internal)`` on ``own_hosts``), and the campaign tags of the request's query string. Who
    visits (``core.clients``): the combined format's user agent (no log carries Accept-Language:
    an imported view's language is ``(unknown)``), the country from the IP in the worker. ``zone``:
    the site's time zone (None: COUNTERS_TIMEZONE), whose local day keys the session id with
    COUNTERS_VISITOR_KEY=daily (``session_key``)."""
    line = parse_log_line(text, fmt)
    if line is None:
        return MALFORMED
    path = page_path(line.target) if line.target else None
    if path is None:
        return MALFORMED
    rule = EVERY_PAGE if include_all else pageviews.DEFAULT_RULE
    reason = rule.skip_reason(line.method, path, line.status, user_agent=line.agent)
    if reason is not None:
        return Skip(reason, line.ts)
    session = session_id_for(session_key(secret, line.ts, zone), line.ip, line.agent or "")
    query = line.target.partition("?")[2] if line.target else ""
    visit = {
        "ip": line.ip,
        "path": path,
        "ts": line.ts,
        "session_id": session,
        **source_fields(line.referer, query, own_hosts),
    }
    if line.agent is not None:  # who visits (core.clients): the worker parses it ("-", none sent: a bot)
        visit["user_agent"] = logged_header(line.agent)  # (its session id: from the agent as logged, as before)
    return visit


def json_time(value: Any, zone: tzinfo) -> float | int | None:
    """Epoch seconds from a JSON ``ts``: a number, or an ISO-8601 string (``Z`` or an offset; a
    time without one is in ``zone``); None when it is neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value if math.isfinite(value) else None
    if not isinstance(value, str) or len(value) > 64:
        return None
    text = value.strip()
    if text[-1:] in ("Z", "z"):
        text = text[:-1] + "+00:00"
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=zone)
    return when.timestamp()


def json_line_visit(text: str, zone: tzinfo, include_all: bool = False) -> dict[str, Any] | str:
    """The visit of one JSON line (an object with ``ip``, ``path``, ``ts`` and optionally
    ``session_id``, ``user_agent`` and ``language``; other keys are ignored), or why it is
    skipped: ``malformed`` (not such an object), ``static`` (unless ``include_all``). The values
    themselves are checked by the API."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return MALFORMED
    if not isinstance(data, dict):
        return MALFORMED
    ip, path, session = data.get("ip"), data.get("path"), data.get("session_id")
    ts = json_time(data.get("ts"), zone)
    if not isinstance(ip, str) or not isinstance(path, str) or ts is None:
        return MALFORMED
    if session is not None and not isinstance(session, str):
        return MALFORMED
    clean = page_name(path) or path  # the API refuses what is not a path
    if not include_all and pageviews.DEFAULT_RULE.is_static(clean):
        return Skip(STATIC, ts)
    visit: dict[str, Any] = {"ip": ip, "path": clean, "ts": ts}
    if session is not None:
        visit["session_id"] = session
    for header in ("user_agent", "language"):  # who visits (core.clients)
        if data.get(header) is not None:
            visit[header] = data[header]
    return visit


def line_visit(
    raw: bytes | None, fmt: str, secret: str, zone: tzinfo, include_all: bool = False, own_hosts: Collection[str] = ()
) -> dict[str, Any] | str:
    """The visit of one line as read (``None``: a line over MAX_LINE), or why it is skipped:
    ``blank``, ``malformed`` (too long, not UTF-8, a NUL byte, or unparsable), and the reasons of
    ``log_line_visit`` / ``json_line_visit``."""
    if raw is None:
        return MALFORMED
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        return MALFORMED
    if not text:
        return BLANK
    if "\0" in text:
        return MALFORMED
    if fmt == "jsonl":
        return json_line_visit(text, zone, include_all)
    if fmt == "vhost_combined":
        return vhost_line_visit(text, secret, include_all)
    return log_line_visit(text, fmt, secret, include_all, own_hosts, zone)


def vhost_line_visit(text: str, secret: str, include_all: bool = False) -> dict[str, Any] | str:
    """The visit of a combined line after its virtual host (``host[:port] <combined line>``), for
    the site the host names through the allowlist of ``COUNTERS_SITES`` (``core.sites``, as the
    middleware takes a request's Host), or why it is skipped: ``host`` for a host no site lists,
    and the reasons of ``log_line_visit``."""
    vhost, _, line = text.partition(" ")
    site = site_for_host(vhost)
    if site is None:
        parsed = parse_log_line(line, "combined")
        return MALFORMED if parsed is None else Skip(HOST, parsed.ts)
    outcome = log_line_visit(line, "combined", secret, include_all, {vhost.lower(), *hosts_of(site)}, zone_of(site))
    if isinstance(outcome, dict) and site:
        outcome["site"] = site
    elif isinstance(outcome, Skip) and site:
        outcome = Skip(outcome, outcome.ts, site)
    return outcome


def first_line_format(lines: Iterator[bytes | None]) -> tuple[str, list[bytes | None]]:
    """The detected format (``detect_format``) and the lines read to find the first non-empty one
    (to be imported first)."""
    head: list[bytes | None] = []
    for raw in lines:
        head.append(raw)
        if raw is not None and raw.strip():
            return detect_format(raw.decode("utf-8", "replace")), head
    return "combined", head
