"""``counters-tasks import``: the page views of an access log (or of JSON lines) counted at their
original times, through the batch function of ``VisitRecorder``'s batches (``visits.record_visits``).

- Reading: ``open_input`` (a file or stdin, gzip recognised by its magic bytes, the bytes read
  counted for a progress bar) and ``read_lines`` (a line longer than ``MAX_LINE`` bytes is read
  past and reported as malformed, never held whole).
- Parsing and filtering, pure functions: ``detect_format``, ``parse_log_line`` and ``log_line_visit``
  (Apache/nginx combined or common format), ``json_line_visit``. Each line gives a visit dict
  (``ip``, ``path``, ``ts``, ``session_id``) or the reason it is skipped (``SKIP_REASONS``): the
  page view rule of ``core.pageviews`` and the page name of ``core.paths``, as the middleware
  applies them to a live request. Parsing is lenient where the request, status and time are
  intact: a line cut inside its user agent (or referer, or size) is read, with what it has.
- Writing: ``Importer`` cuts the page views into chunks of ``CHUNK`` and applies each through
  ``visits.record_visits`` under a message id derived from its content, then notes it in the
  import ledger (``keys.import_ledger``). A chunk found there is skipped, so importing the same
  lines again counts nothing twice, also long after the message ids' dedupe markers expired.

The ledger holds ``c:<digest>`` for a chunk of ``CHUNK`` page views all applied, and
``v:<digest>`` for each page view applied in a chunk that was not: the last chunk of an input
(fewer than ``CHUNK``; a log that has grown since is then imported for its new lines only) or a
chunk with refused lines (those are tried again by the next import, e.g. once a refusal's cause
is gone). Chunks are cut the same way only for the same sequence of page views: the same lines
with other options (``--all``, ``--format``), or behind other lines, make other chunks.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import hmac
import io
import json
import math
import os
import re
import stat
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone, tzinfo
from typing import IO, Any, BinaryIO, NamedTuple
from zoneinfo import ZoneInfo

from .. import skips, visits
from ..core import pageviews
from ..core.days import DAY
from ..core.settings import get_settings
from ..core.sites import check_site, hosts_of, site_for_host, zone_of
from ..core.sources import source_fields
from ..core.validation import check_ip, page_name
from ..errors import ConfigurationError, InvalidInput
from ..store import keys

FORMATS = ("combined", "common", "jsonl", "vhost_combined")
"""The input formats: Apache/nginx combined and common log formats, JSON lines, and the combined
format after the virtual host (Apache's ``vhost_combined``, ``%v:%p %h ...``; nginx ``$host
$remote_addr ...``): each line then counts for the site its host names (``COUNTERS_SITES``)."""

CHUNK = visits.CHUNK
"""Page views per chunk: one ``record_visits`` call (one group, one message id) and one ledger entry."""

MAX_LINE = 64 * 1024
"""Longest line read (bytes, without its line ending); a longer one is skipped as malformed."""

PROGRESS_EVERY = 5000
"""Lines between two progress reports (and one after every chunk written)."""

MALFORMED, BLANK, ALREADY_IMPORTED = "malformed", "blank", "already_imported"
METHOD, STATUS, STATIC, CRAWLER = pageviews.METHOD, pageviews.STATUS, pageviews.STATIC, pageviews.CRAWLER
HOST = pageviews.HOST
SKIP_REASONS = (BLANK, MALFORMED, METHOD, STATUS, STATIC, CRAWLER, HOST, ALREADY_IMPORTED)
"""Why a line is not counted (always listed in the summary): unreadable, the page view rule's
reasons (``core.pageviews``; a log has no content type, so never ``not_page``), or imported
before; besides these, ``refused:<reason>`` for a page view the API refused
(``InvalidInput.reason``: ``bad_input``, ``closed_day``, ``future``...), listed when it happened."""

EVERY_PAGE = pageviews.PageViewRule(skip_prefixes=(), skip_extensions=(), skip_crawlers=False)
"""The rule of ``--all``: static files and crawlers counted too (method and status still apply)."""

MALFORMED_LINES_SHOWN = 10
"""Line numbers of unreadable lines the summary shows (the first ones)."""

MONTHS = {name: n for n, name in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}

_QUOTED = r'"((?:[^"\\]|\\.)*)"'
LOG_LINE = re.compile(
    r"(?P<ip>\S+) \S+ (?P<user>.*?) \[(?P<time>[^\]]{1,40})\] " + _QUOTED.replace("(", "(?P<request>", 1)
    + r" (?P<status>[^\s\"]+)(?: (?P<size>[^\s\"]+))?(?P<rest>.*)")
"""``%h %l %u %t "%r" %>s %b``, the common log format (the size may be cut off), and whatever follows it."""
COMBINED_REST = re.compile(r" " + _QUOTED.replace("(", "(?P<referer>", 1) + " "
                           + _QUOTED.replace("(", "(?P<agent>", 1) + r"(?:\s.*)?")
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


# --- parsing and filtering (pure) ------------------------------------------------------------

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
        when = datetime(int(match[3]), month, int(match[1]), int(match[4]), int(match[5]), int(match[6]),
                        tzinfo=offset)
    except ValueError:
        return None
    return int(when.timestamp())


def unescape(text: str) -> str:
    r"""A logged string with Apache's and nginx's ``\"`` and ``\\`` escapes undone, and their
    ``\xhh`` escapes of bytes written ``%hh`` (what the client sent, named by ``core.paths``)."""
    if "\\" not in text:
        return text
    return re.sub(r'\\(["\\])|\\x([0-9A-Fa-f]{2})', lambda m: m[1] or f"%{m[2].upper()}", text)


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
        agent, referer = rest["agent"], rest["referer"] and unescape(rest["referer"])
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


def log_line_visit(text: str, fmt: str, secret: str, include_all: bool = False,
                   own_hosts: Collection[str] = ()) -> dict[str, Any] | str:
    """The visit of one access log line (``combined`` or ``common``), or why it is skipped:
    ``malformed``, or the page view rule's reason (``core.pageviews``: the user agent is known in
    the combined format only; with ``include_all`` static files and crawlers count too). Its
    source (``core.sources``): the combined format's referer, reduced to its domain
    (``(internal)`` on ``own_hosts``), and the campaign tags of the request's query string."""
    line = parse_log_line(text, fmt)
    if line is None:
        return MALFORMED
    path = page_path(line.target) if line.target else None
    if path is None:
        return MALFORMED
    rule = EVERY_PAGE if include_all else pageviews.DEFAULT_RULE
    reason = rule.skip_reason(line.method, path, line.status, user_agent=line.agent)
    if reason is not None:
        return reason
    session = session_id_for(secret, line.ip, line.agent or "")
    query = line.target.partition("?")[2] if line.target else ""
    return {"ip": line.ip, "path": path, "ts": line.ts, "session_id": session,
            **source_fields(line.referer, query, own_hosts)}


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
    ``session_id``; other keys are ignored), or why it is skipped: ``malformed`` (not such an
    object), ``static`` (unless ``include_all``). The values themselves are checked by the API."""
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
        return STATIC
    visit: dict[str, Any] = {"ip": ip, "path": clean, "ts": ts}
    if session is not None:
        visit["session_id"] = session
    return visit


def line_visit(raw: bytes | None, fmt: str, secret: str, zone: tzinfo, include_all: bool = False,
               own_hosts: Collection[str] = ()) -> dict[str, Any] | str:
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
    return log_line_visit(text, fmt, secret, include_all, own_hosts)


def vhost_line_visit(text: str, secret: str, include_all: bool = False) -> dict[str, Any] | str:
    """The visit of a combined line after its virtual host (``host[:port] <combined line>``), for
    the site the host names through the allowlist of ``COUNTERS_SITES`` (``core.sites``, as the
    middleware takes a request's Host), or why it is skipped: ``host`` for a host no site lists,
    and the reasons of ``log_line_visit``."""
    vhost, _, line = text.partition(" ")
    site = site_for_host(vhost)
    if site is None:
        return HOST if parse_log_line(line, "combined") is not None else MALFORMED
    outcome = log_line_visit(line, "combined", secret, include_all, {vhost.lower(), *hosts_of(site)})
    if isinstance(outcome, dict) and site:
        outcome["site"] = site
    return outcome


# --- reading ---------------------------------------------------------------------------------

class CountingReader(io.RawIOBase):
    """A readable stream that counts the bytes read from the one it wraps (for a progress bar:
    compressed bytes of a ``.gz``)."""

    def __init__(self, raw: IO[bytes]) -> None:
        super().__init__()
        self.raw = raw
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        read = getattr(self.raw, "read1", self.raw.read)
        data = read(len(buffer))
        size = len(data)
        buffer[:size] = data
        self.count += size
        return size


@dataclass
class Input:
    """An opened input: its lines' stream, the bytes read so far and, for a regular file, its size."""

    name: str
    stream: BinaryIO
    counter: CountingReader
    size: int | None
    compressed: bool
    owned: bool = True  # stdin is left open

    def bytes_read(self) -> int:
        return self.counter.count

    def close(self) -> None:
        self.stream.close()
        if self.owned:
            self.counter.raw.close()


def open_input(path: str, stdin: IO[bytes] | None = None) -> Input:
    """Open ``path`` (``-``: ``stdin``) for reading lines, through gzip when it starts with
    gzip's magic bytes (whatever its name)."""
    raw: IO[bytes] = stdin if path == "-" and stdin is not None else open(path, "rb")  # Input.close closes it
    size = None
    try:
        info = os.fstat(raw.fileno())
        size = info.st_size if stat.S_ISREG(info.st_mode) else None
    except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
        pass
    counter = CountingReader(raw)
    buffered = io.BufferedReader(counter, buffer_size=1 << 16)
    compressed = buffered.peek(2)[:2] == b"\x1f\x8b"
    stream: Any = gzip.GzipFile(fileobj=buffered, mode="rb") if compressed else buffered
    is_stdin = path == "-" and stdin is not None
    return Input("<stdin>" if is_stdin else path, stream, counter, size, compressed, owned=not is_stdin)


def read_lines(stream: BinaryIO, max_line: int = MAX_LINE) -> Iterator[bytes | None]:
    """The lines of ``stream``; ``None`` for a line longer than ``max_line`` bytes (its ending
    aside), read past in pieces without holding it whole."""
    while True:
        line = stream.readline(max_line + 2)
        if not line:
            return
        if len(line.rstrip(b"\r\n")) <= max_line:
            yield line
            continue
        while not line.endswith(b"\n"):
            line = stream.readline(max_line + 2)
            if not line:
                break
        yield None


# --- writing ---------------------------------------------------------------------------------

SOURCE_FIELDS = frozenset({"referrer", "utm"})
"""A visit's source: derived from the same line as the rest, so left out of what its ids hash (a log
imported before sources were kept is not counted again; its days have no sources)."""


def canonical(visit: dict[str, Any]) -> str:
    """The canonical JSON of a visit dict (sorted keys, no spaces, ASCII, without its source):
    what its ids hash."""
    return json.dumps({k: v for k, v in visit.items() if k not in SOURCE_FIELDS}, sort_keys=True,
                      separators=(",", ":"))


def content_digest(text: str) -> str:
    """32 hex digits of a BLAKE2b digest (of a chunk's or a visit's canonical text)."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16, person=b"ct-import").hexdigest()


def visit_fields(ordinal: int, texts: list[str]) -> list[str]:
    """The ledger fields of the visits of chunk number ``ordinal`` (``texts``: their canonical JSON):
    ``v:<digest of the chunk number, the visit and how many equal visits come before it in the chunk>``,
    the same for a chunk that has grown since (a log written to since its last import)."""
    seen: Counter[str] = Counter()
    fields = []
    for text in texts:
        fields.append("v:" + content_digest(f"{ordinal}\n{seen[text]}\n{text}"))
        seen[text] += 1
    return fields


@dataclass
class Summary:
    """What an import did: lines read, page views counted (in all, and per local day) and lines
    skipped by reason."""

    file: str
    format: str
    include_all: bool = False
    lines: int = 0
    counted: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    days: Counter[str] = field(default_factory=Counter)
    malformed_lines: list[int] = field(default_factory=list)

    def skip(self, reason: str, count: int = 1) -> None:
        self.skipped[reason] += count
        if reason == MALFORMED and len(self.malformed_lines) < MALFORMED_LINES_SHOWN:
            self.malformed_lines.append(self.lines)

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``--json``: ``lines == counted + skipped_total``."""
        skipped = {reason: self.skipped[reason] for reason in SKIP_REASONS}
        skipped |= {reason: n for reason, n in sorted(self.skipped.items()) if reason not in skipped}
        return {"file": self.file, "format": self.format, "all": self.include_all, "lines": self.lines,
                "counted": self.counted, "skipped_total": sum(skipped.values()), "skipped": skipped,
                "malformed_lines": list(self.malformed_lines), "days": dict(sorted(self.days.items()))}


class Importer:
    """Applies chunks of visit dicts through ``visits.record_visits``, each at most once (the
    import ledger), and keeps the summary."""

    def __init__(self, conn: Any, summary: Summary) -> None:
        self.conn = conn
        self.summary = summary
        self.ledger = keys.import_ledger()
        self.ledger_ttl = get_settings().day_totals_days * DAY
        self.ordinal = 0
        self.seen_chunks: Counter[str] = Counter()

    def apply(self, chunk: list[dict[str, Any]]) -> None:
        """Apply one chunk (at most CHUNK visits; fewer only at the end of the input)."""
        texts = [canonical(visit) for visit in chunk]
        content = content_digest("\n".join(texts))
        # equal chunks (a burst of equal lines) are told apart by how many came before in this input
        chunk_field = "c:" + content_digest(f"{self.seen_chunks[content]}\n{content}")
        self.seen_chunks[content] += 1
        fields = visit_fields(self.ordinal, texts)
        self.ordinal += 1
        pipe = self.conn.pipeline(transaction=False)
        pipe.hexists(self.ledger, chunk_field)
        pipe.hmget(self.ledger, fields)
        done, marks = pipe.execute()
        if done:
            self.summary.skip(ALREADY_IMPORTED, len(chunk))
            return
        fresh = [n for n, mark in enumerate(marks) if mark is None]
        self.summary.skip(ALREADY_IMPORTED, len(chunk) - len(fresh))
        batch = [chunk[n] for n in fresh]
        accepted, refused = visits.prepare_batch(batch)  # what record_visits will refuse, for the summary
        if batch:
            message_id = "import:" + content_digest("\n".join(fields[n] for n in fresh))
            self.summary.counted += visits.record_visits(self.conn, batch, message_id=message_id)
        for _n, error in refused:
            self.summary.skip(f"refused:{error.reason}")
        for _n, visit in accepted:
            self.summary.days[visit.view.day.isoformat()] += 1
        if len(chunk) == CHUNK and not refused:
            self.note([chunk_field])
        else:  # a refused visit may be tried again; the accepted ones are noted one by one
            self.note([fields[fresh[n]] for n, _visit in accepted])

    def note(self, fields: list[str]) -> None:
        """Note ``fields`` in the ledger as applied now, and keep the ledger COUNTERS_DAY_TOTALS_DAYS."""
        if not fields:
            return
        now = int(time.time())
        pipe = self.conn.pipeline(transaction=False)
        pipe.hset(self.ledger, mapping=dict.fromkeys(fields, now))
        pipe.expire(self.ledger, self.ledger_ttl)
        pipe.execute()


def require_secret() -> str:
    """COUNTERS_SECRET: visitor and session ids are HMACs under it (ConfigurationError without it)."""
    secret = get_settings().secret
    if not secret:
        raise ConfigurationError("COUNTERS_SECRET is not set: the import makes visitor ids (HMACs of the IPs) "
                                 "with it; use the workers' value")
    return secret


def first_line_format(lines: Iterator[bytes | None]) -> tuple[str, list[bytes | None]]:
    """The detected format (``detect_format``) and the lines read to find the first non-empty one
    (to be imported first)."""
    head: list[bytes | None] = []
    for raw in lines:
        head.append(raw)
        if raw is not None and raw.strip():
            return detect_format(raw.decode("utf-8", "replace")), head
    return "combined", head


def import_lines(conn: Any, lines: Iterable[bytes | None], fmt: str | None = None, *, include_all: bool = False,
                 name: str = "-", progress: Callable[[int], None] | None = None, site: str | None = None) -> Summary:
    """Import the lines of one input (``fmt`` None: detected from its first non-empty line) and
    return the summary. Needs COUNTERS_SECRET and Redis (checked first); a line never stops it.
    ``site``: the site of ``COUNTERS_SITES`` every line counts for (None: the default site);
    a JSON line's time without an offset is in that site's zone."""
    secret = require_secret()
    scope = check_site(site)
    if fmt == "vhost_combined" and scope:
        raise InvalidInput("--site and the vhost_combined format both name the site: give one")
    zone = ZoneInfo(zone_of(scope))
    own_hosts = hosts_of(scope)
    conn.ping()
    iterator = iter(lines)
    head: list[bytes | None] = []
    if fmt is None:
        fmt, head = first_line_format(iterator)
    elif fmt not in FORMATS:
        raise InvalidInput(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    summary = Summary(name, fmt, include_all)
    importer = Importer(conn, summary)
    chunk: list[dict[str, Any]] = []
    for raw in chain_lines(head, iterator):
        summary.lines += 1
        outcome = line_visit(raw, fmt, secret, zone, include_all, own_hosts)
        if isinstance(outcome, str):
            summary.skip(outcome)
        else:
            if scope:  # part of the visit's content, so of its ledger entry: another site's import is another
                outcome["site"] = scope
            chunk.append(outcome)
            if len(chunk) == CHUNK:
                importer.apply(chunk)
                chunk = []
                if progress:
                    progress(summary.lines)
        if progress and summary.lines % PROGRESS_EVERY == 0:
            progress(summary.lines)
    if chunk:
        importer.apply(chunk)
    if progress:
        progress(summary.lines)
    skipped = skips.as_items(skips.IMPORT, summary.skipped)
    if skipped:
        skips.record(conn, skipped)
    return summary


def chain_lines(head: list[bytes | None], rest: Iterator[bytes | None]) -> Iterator[bytes | None]:
    """The lines already read, then the others."""
    yield from head
    yield from rest
