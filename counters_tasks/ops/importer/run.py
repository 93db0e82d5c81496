"""The import itself: ``import_lines`` reads the lines of one input (``reading``), makes each a
visit or a skip reason (``formats``) and hands the page views to ``Importer``, which cuts them
into chunks of ``CHUNK`` and applies each through ``visits.apply_visits`` under a message id
derived from its content, then notes it in the import ledger (``ledger``, ``keys.import_ledger``).
A chunk found there is skipped, so importing the same lines again counts nothing twice.
With event rules (``rules``, ``--event PATH=NAME``), a chunk's page views of those paths are
applied as events too, through the event kind's payload (``payloads.apply_payload``) under an id
derived from the chunk's, before the chunk is noted: a chunk imported again sends none again.
``Summary`` is what an import did: lines read, page views counted, lines skipped by reason,
events counted by name.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date
from typing import Any
from zoneinfo import ZoneInfo

from ... import payloads, skips, visits
from ...core.days import DAY, local_day
from ...core.settings import get_settings
from ...core.sites import check_site, hosts_of, zone_of
from ...errors import ConfigurationError, InvalidInput
from ...events.kind import EVENT
from ...store import keys
from ...store.client import RedisClient
from .formats import ALREADY_IMPORTED, FORMATS, MALFORMED, SKIP_REASONS, Skip, first_line_format, line_visit
from .ledger import canonical, content_digest, visit_fields
from .reading import chain_lines
from .rules import EventRule, events_of, parse_rules

CHUNK = visits.CHUNK
"""Page views per chunk: one ``record_visits`` payload (one message id) and one ledger entry."""

PROGRESS_EVERY = 5000
"""Lines between two progress reports (and one after every chunk written)."""

MALFORMED_LINES_SHOWN = 10
"""Line numbers of unreadable lines the summary shows (the first ones)."""


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
    events: Counter[str] = field(default_factory=Counter)
    """Events counted, by name (``--event`` rules); those the event kind refused are in
    ``events_refused``, by reason."""
    events_refused: Counter[str] = field(default_factory=Counter)
    dated_skips: dict[tuple[str, str, date], list[float]] = field(default_factory=dict)
    """(site scope, reason, local day) -> [lines, the first one's ts]: the skips of lines with a
    time, counted in their site's day (``skips``); the others count in the totals only."""

    def skip(self, reason: str, count: int = 1) -> None:
        self.skipped[reason] += count
        if reason == MALFORMED and len(self.malformed_lines) < MALFORMED_LINES_SHOWN:
            self.malformed_lines.append(self.lines)
        if isinstance(reason, Skip) and reason.ts is not None:
            where = (reason.site, str(reason), local_day(reason.ts, zone_of(reason.site)))
            found = self.dated_skips.setdefault(where, [0, reason.ts])
            found[0] += count

    def skip_items(self) -> list[dict[str, Any]]:
        """The skips as ``count_skips`` items: each reason of each site's day with the time of its
        first line, and what has no time (unread lines, chunks imported before) undated."""
        undated = self.skipped.copy()
        items = []
        for (scope, reason, _day), (count, ts) in sorted(self.dated_skips.items()):
            undated[reason] -= int(count)
            items += skips.as_items(skips.IMPORT, {reason: int(count)}, ts=ts, site=scope)
        return items + skips.as_items(skips.IMPORT, undated)

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``--json``: ``lines == counted + skipped_total``."""
        skipped = {reason: self.skipped[reason] for reason in SKIP_REASONS}
        skipped |= {reason: n for reason, n in sorted(self.skipped.items()) if reason not in skipped}
        return {
            "file": self.file,
            "format": self.format,
            "all": self.include_all,
            "lines": self.lines,
            "counted": self.counted,
            "skipped_total": sum(skipped.values()),
            "skipped": skipped,
            "malformed_lines": list(self.malformed_lines),
            "days": dict(sorted(self.days.items())),
            "events_total": sum(self.events.values()),
            "events": dict(sorted(self.events.items())),
            "events_refused": dict(sorted(self.events_refused.items())),
        }


class Importer:
    """Applies chunks of visit dicts through ``visits.apply_visits``, each at most once (the
    import ledger), the events their views count as (``rules``) through the event kind's
    payload, and keeps the summary."""

    def __init__(self, conn: RedisClient, summary: Summary, rules: tuple[EventRule, ...] = ()) -> None:
        self.conn = conn
        self.summary = summary
        self.rules = rules
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
        # what record_visits will refuse, for the summary
        accepted, refused = payloads.prepare_payload(visits.VISIT, batch)
        if batch:
            digest = content_digest("\n".join(fields[n] for n in fresh))
            self.summary.counted += visits.apply_visits(self.conn, batch, message_id="import:" + digest)
            self.apply_events([batch[n] for n, _visit in accepted], "import-events:" + digest)
        for _n, error in refused:
            self.summary.skip(f"refused:{error.reason}")
        for _n, visit in accepted:
            self.summary.days[visit.view.day.isoformat()] += 1
        if len(chunk) == CHUNK and not refused:
            self.note([chunk_field])
        else:  # a refused visit may be tried again; the accepted ones are noted one by one
            self.note([fields[fresh[n]] for n, _visit in accepted])

    def apply_events(self, counted: list[dict[str, Any]], message_id: str) -> None:
        """The events the counted views make by the rules, applied as the event kind's payloads
        (of at most its ``max_items``, each under ``message_id`` and its number: a chunk applied
        again, after a crash before its ledger note, counts them once), counted in the summary."""
        if not self.rules:
            return
        kind = EVENT
        found = [event for visit in counted for event in events_of(visit, self.rules)]
        for part, first in enumerate(range(0, len(found), kind.max_items)):
            items = found[first : first + kind.max_items]
            accepted, refused = payloads.prepare_payload(kind, items)
            payloads.apply_payload(self.conn, kind, items, message_id=f"{message_id}:{part}")
            refused_at = {n for n, _error in refused}
            self.summary.events.update(item["name"] for n, item in enumerate(items) if n not in refused_at)
            self.summary.events_refused.update(f"refused:{error.reason}" for _n, error in refused)

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
        raise ConfigurationError(
            "COUNTERS_SECRET is not set: the import makes visitor ids (HMACs of the IPs) "
            "with it; use the workers' value"
        )
    return secret


def import_lines(
    conn: RedisClient,
    lines: Iterable[bytes | None],
    fmt: str | None = None,
    *,
    include_all: bool = False,
    name: str = "-",
    progress: Callable[[int], None] | None = None,
    site: str | None = None,
    events: Iterable[str] = (),
) -> Summary:
    """Import the lines of one input (``fmt`` None: detected from its first non-empty line) and
    return the summary. Needs COUNTERS_SECRET and Redis (checked first); a line never stops it.
    ``site``: the site of ``COUNTERS_SITES`` every line counts for (None: the default site);
    a JSON line's time without an offset is in that site's zone. ``events``: ``PATH=NAME`` rules
    (``rules.parse_rule``): the page views of PATH (exact, or a prefix ending with ``*``) count
    as the event NAME too, with the view's time, address, session id and site."""
    secret = require_secret()
    scope = check_site(site)
    rules = parse_rules(events)
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
    importer = Importer(conn, summary, rules)
    chunk: list[dict[str, Any]] = []
    for raw in chain_lines(head, iterator):
        summary.lines += 1
        outcome = line_visit(raw, fmt, secret, zone, include_all, own_hosts)
        if isinstance(outcome, str):
            if scope and isinstance(outcome, Skip):  # the import's site, as its page views'
                outcome = Skip(outcome, outcome.ts, scope)
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
    skipped = summary.skip_items()
    for first in range(0, len(skipped), skips.MAX_REASONS):
        skips.count_skipped(conn, skipped[first : first + skips.MAX_REASONS])
    return summary
