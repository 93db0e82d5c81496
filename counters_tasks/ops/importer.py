"""``counters-tasks import``: access logs (combined or common format, ``.gz``, stdin) and JSON
lines into the same counters, with each view's original time, through the batches the
``record_visits`` task and ``VisitRecorder`` use (``visits.record_visits``).

A line becomes a page view when it is a ``GET`` answered 200-399, and, unless ``--all``, its
path is not a static file and its user agent not a crawler. Lines are cut into chunks of
``CHUNK`` counted views; a chunk's message id is a digest of its views, so a re-run of the same
lines makes the same ids: the dedupe markers (15 minutes) and the import ledger (a Redis hash of
the chunks applied, kept ``LEDGER_DAYS``) make it count nothing twice. For log lines the session
id is derived from IP and user agent, so daily unique visitors are counted too.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any

from .. import refusals, visits
from ..core.days import local_day
from ..errors import InvalidInput
from ..store import keys

CHUNK = visits.CHUNK
"""Views per batch (and per ledger entry)."""
LEDGER_DAYS = 400
"""Days the ledger of imported chunks lives after the latest import (as long as the day totals)."""
MAX_LINE = 64 * 1024
"""Longer lines are counted as malformed, unread."""
FORMATS = ("combined", "common", "jsonl")

LOG_LINE = re.compile(
    r'^(?P<ip>\S+) \S+ \S+ \[(?P<time>[^\]]+)\] "(?P<request>[^"]*)" (?P<status>\d{3}) \S+'
    r'(?: "(?P<referer>[^"]*)" "(?P<agent>[^"]*)")?')
LOG_TIME = "%d/%b/%Y:%H:%M:%S %z"

STATIC_EXTENSIONS = frozenset(
    "css js mjs map png jpg jpeg gif ico svg webp avif bmp tif tiff woff woff2 ttf otf eot "
    "mp3 mp4 m4a ogg oga ogv wav webm flac avi mov zip gz tgz bz2 xz 7z rar txt xml".split())
"""File extensions of requests that are not page views (robots.txt and sitemaps included)."""
BOT_MARKERS = ("bot", "crawl", "spider", "slurp", "curl", "wget", "python-requests", "python-urllib",
               "httpclient", "go-http-client", "java/", "libwww", "scrapy", "headless", "phantomjs",
               "facebookexternalhit", "preview", "monitor", "uptime", "pingdom", "lighthouse")
"""Substrings of a user agent (any case) that mark a crawler or a tool; an empty agent ("-") too."""


@dataclass
class Summary:
    """What an import did: lines read, views counted, lines skipped by reason."""

    lines: int = 0
    counted: int = 0
    already_imported: int = 0
    closed_day: int = 0
    skipped: Counter = field(default_factory=Counter)
    first: float | None = None
    last: float | None = None

    def as_dict(self) -> dict[str, Any]:
        def day(ts: float | None) -> str | None:
            return None if ts is None else local_day(ts).isoformat()

        return {"lines": self.lines, "counted": self.counted, "already_imported": self.already_imported,
                "counted_without_day_uv": self.closed_day, "skipped": dict(sorted(self.skipped.items())),
                "skipped_total": sum(self.skipped.values()), "first_view": day(self.first), "last_view": day(self.last)}


class Skip(Exception):
    """A line that is not counted, and why (the summary's reason)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def detect_format(first_line: str) -> str:
    """``jsonl`` for a JSON object, ``combined`` when the referer and agent are there, else ``common``."""
    text = first_line.strip()
    if text.startswith("{"):
        return "jsonl"
    found = LOG_LINE.match(text)
    return "combined" if found and found.group("agent") is not None else "common"


def is_static(path: str) -> bool:
    name = path.split("?", 1)[0].split("#", 1)[0].rsplit("/", 1)[-1]
    return "." in name and name.rsplit(".", 1)[1].lower() in STATIC_EXTENSIONS


def is_bot(agent: str | None) -> bool:
    if agent is None:  # common format: no agent to judge
        return False
    lowered = agent.strip().lower()
    return lowered in ("", "-") or any(marker in lowered for marker in BOT_MARKERS)


def session_of(ip: str, agent: str | None) -> str:
    """A session id (32 hex digits) for the visitor of a log line: the same IP and user agent
    make the same id, so a day's unique visitors are counted from logs too."""
    return hashlib.blake2b(f"{ip}\x00{agent or ''}".encode(), digest_size=16, person=b"ct-import").hexdigest()


def parse_log_line(line: str, every: bool) -> dict[str, Any]:
    """One combined/common log line as a visit dict (``ip``, ``path``, ``ts``, ``session_id``),
    or Skip with the reason."""
    found = LOG_LINE.match(line)
    if not found:
        raise Skip("malformed")
    parts = found.group("request").split()
    if len(parts) < 2:
        raise Skip("malformed")
    method, target = parts[0], parts[1]
    if method != "GET":
        raise Skip("method")
    if not 200 <= int(found.group("status")) <= 399:
        raise Skip("status")
    agent = found.group("agent")
    if not every and is_static(target):
        raise Skip("static")
    if not every and is_bot(agent):
        raise Skip("bot")
    try:
        ts = datetime.strptime(found.group("time"), LOG_TIME).timestamp()
    except ValueError:
        raise Skip("malformed") from None
    return {"ip": found.group("ip"), "path": target, "ts": ts, "session_id": session_of(found.group("ip"), agent)}


def parse_json_line(line: str, every: bool) -> dict[str, Any]:
    """One JSON line: ``ip``, ``path``, ``ts`` (epoch seconds or ISO 8601), optional
    ``session_id``; optional ``method``, ``status`` and ``user_agent`` are filtered like log lines."""
    try:
        item = json.loads(line)
    except ValueError:
        raise Skip("malformed") from None
    if not isinstance(item, dict) or "ip" not in item or "path" not in item:
        raise Skip("malformed")
    if item.get("method", "GET") != "GET":
        raise Skip("method")
    status = item.get("status", 200)
    if not isinstance(status, int) or not 200 <= status <= 399:
        raise Skip("status")
    if not every and isinstance(item["path"], str) and is_static(item["path"]):
        raise Skip("static")
    if not every and "user_agent" in item and is_bot(item["user_agent"]):
        raise Skip("bot")
    ts = item.get("ts")
    if isinstance(ts, str):
        try:
            parsed = datetime.fromisoformat(ts.replace("Z", "+00:00"))
        except ValueError:
            raise Skip("malformed") from None
        ts = (parsed if parsed.tzinfo else parsed.astimezone()).timestamp()
    visit = {"ip": item["ip"], "path": item["path"], "ts": ts}
    if item.get("session_id") is not None:
        visit["session_id"] = item["session_id"]
    return visit


def open_input(name: str) -> IO[bytes]:
    """The file (``.gz`` decompressed), or stdin for ``-``."""
    raw: IO[bytes] = sys.stdin.buffer if name == "-" else open(name, "rb")  # noqa: SIM115 (closed by the caller)
    head = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
    if name.endswith(".gz") or head == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    return raw


def read_lines(stream: IO[bytes]) -> Iterator[str | None]:
    """Decoded lines without their newline (UTF-8, else Latin-1); None for a line too long."""
    for raw in stream:
        if len(raw) > MAX_LINE:
            yield None
            continue
        try:
            yield raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            yield raw.decode("latin-1").rstrip("\r\n")


def chunk_id(chunk: list[dict[str, Any]]) -> str:
    """The message id of a chunk: a digest of its views, the same on every run."""
    text = json.dumps(chunk, sort_keys=True, separators=(",", ":"))
    return "import:" + hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def import_lines(conn: Any, lines: Iterable[str | None], fmt: str | None = None, every: bool = False,
                 progress: Callable[[int], None] | None = None) -> Summary:
    """Count the page views of ``lines`` (format ``fmt``, detected from the first line when None)."""
    summary = Summary()
    chunk: list[dict[str, Any]] = []
    closed_before = refusals.counts(conn).get("closed_day", 0)

    def flush() -> None:
        if not chunk:
            return
        message_id = chunk_id(chunk)
        ledger = keys.import_ledger()
        if conn.hexists(ledger, message_id):
            summary.already_imported += len(chunk)
        else:
            summary.counted += visits.record_visits(conn, chunk, message_id=message_id)
            conn.hset(ledger, message_id, int(time.time()))
            conn.expire(ledger, LEDGER_DAYS * 86400)
        chunk.clear()

    for line in lines:
        summary.lines += 1
        if progress is not None and summary.lines % 1000 == 0:
            progress(summary.lines)
        if line is None:
            summary.skipped["malformed"] += 1
            continue
        if not line.strip():
            summary.lines -= 1
            continue
        if fmt is None:
            fmt = detect_format(line)
        try:
            visit = parse_json_line(line, every) if fmt == "jsonl" else parse_log_line(line, every)
            visits.check_visit(visit["ip"], visit["path"], visit.get("session_id"), visit["ts"])
        except Skip as skip:
            summary.skipped[skip.reason] += 1
            continue
        except InvalidInput as exc:
            summary.skipped[f"invalid ({exc.reason})"] += 1
            continue
        summary.first = visit["ts"] if summary.first is None else min(summary.first, visit["ts"])
        summary.last = visit["ts"] if summary.last is None else max(summary.last, visit["ts"])
        chunk.append(visit)
        if len(chunk) == CHUNK:
            flush()
    flush()
    if progress is not None:
        progress(summary.lines)
    summary.closed_day = refusals.counts(conn).get("closed_day", 0) - closed_before
    return summary
