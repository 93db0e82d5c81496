"""Requests that were not page views, counted by route and reason, so a site sees what its
figures leave out (``/metrics``: ``counters_skipped_total{route, reason}``).

- ``middleware``: a web process's middleware counts its skips by reason (``core.pageviews``:
  method, static, status, not_page, crawler; ``app`` for one the app left out, ``host`` for one
  of no site, ``refused`` for a page view the recorder refused as bad input) and its
  ``VisitRecorder`` sends them with its batches (``counters_tasks.count_skips``, one message per
  batch interval at most), added once per message id like the refusals.
- ``import``: ``counters-tasks import`` adds the lines each import skipped (its summary's
  reasons; an import run again adds its skips again, as it reads them again).

Each count goes to the all-time totals and, when it says when (``ts``) or by default at the
time it is added, to its site's local day (``day_counts``), which ``stats``, the dashboard and
``health`` show beside the day's page views: a site sees what it did not count where it reads
what it did (a script's or a monitor's requests, which send no browser User-Agent, are the
usual surprise). A line of an import that could not be read (``blank``, ``malformed``) has no
time: it counts in the totals only.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from datetime import date
from typing import Any

from . import refusals
from .core import table
from .core.days import DAY, days_between, local_day
from .core.kind import Kind, register
from .core.pageviews import APP, HOST, REASONS, REFUSED
from .core.settings import get_settings
from .core.sites import check_site, zone_of
from .core.validation import check_int, check_item_time, check_message_id
from .errors import InvalidInput
from .store import day_registry, keys, sweeps
from .store.client import RedisClient, as_str, read_pipeline
from .store.scripts import execute_in_order, run_script

MIDDLEWARE, IMPORT = "middleware", "import"
ROUTES = (MIDDLEWARE, IMPORT)
"""Where a skip was decided."""

IMPORT_REASONS = ("blank", "malformed", "already_imported")
"""The importer's reasons besides the page view rule's."""

KNOWN_REASONS = frozenset((*REASONS, APP, HOST, REFUSED, *IMPORT_REASONS))

MAX_REASONS = 64
"""Most (route, reason) entries one message carries."""

SKIPS = register(
    Kind(
        name="skip",
        fields=("route", "reason", "count", "ts", "site"),
        required=2,
        payload_task="counters_tasks.count_skips",
        items_argument="items",
        max_items=MAX_REASONS,
    )
)
"""Requests that were not page views: a ``count_skips`` message's items (written by ``count_skipped``,
not by the payload path: they are counts, not items to claim)."""


SkipField = tuple[str, date | None, str]
"""Where one count goes: (scope of its site, its local day or None for the totals only,
``"<route>:<reason>"``)."""


def check_counts(items: Any, now: float | None = None) -> tuple[Counter[SkipField], list[tuple[int, InvalidInput]]]:
    """A message's skip counts, ``[{"route": ..., "reason": ..., "count": n}, ...]``, each with
    an optional ``ts`` (when, epoch seconds; ``None``: no day, the totals only; left out: ``now``)
    and ``site``: what to add where, and the items refused, ``(index, error)``, each on its own.
    A payload that is not such a list is refused whole (InvalidInput). The reason of an import's
    refused line (``refused:<why>``) is counted as refusals are, not here."""
    if not isinstance(items, list) or not 0 < len(items) <= MAX_REASONS:
        raise InvalidInput(f"skip counts must be a list of 1 to {MAX_REASONS} entries")
    now = time.time() if now is None else now
    fields: Counter[SkipField] = Counter()
    refused: list[tuple[int, InvalidInput]] = []
    for index, item in enumerate(items):
        try:
            field, count = check_item(item, now)
        except InvalidInput as error:
            refused.append((index, error))
            continue
        fields[field] += count
    return fields, refused


ITEM_FIELDS = frozenset(("route", "reason", "count"))
ITEM_OPTIONAL = frozenset(("ts", "site"))


def check_item(item: Any, now: float | None = None) -> tuple[SkipField, int]:
    """One skip count: where it goes (``SkipField``) and its count (InvalidInput when it is not one)."""
    if not isinstance(item, Mapping) or not ITEM_FIELDS <= set(item) <= ITEM_FIELDS | ITEM_OPTIONAL:
        raise InvalidInput("a skip count is {route, reason, count} with an optional ts and site")
    if item["route"] not in ROUTES or item["reason"] not in KNOWN_REASONS:
        raise InvalidInput(f"unknown skip route or reason: {item['route']!r}, {item['reason']!r}")
    count = check_int(item["count"], "count", 1, 2**31)
    scope = check_site(item.get("site"))
    if "ts" in item and item["ts"] is None:
        day = None
    else:
        day = local_day(check_item_time(item.get("ts", now if now is not None else time.time())), zone_of(scope))
    return (scope, day, f"{item['route']}:{item['reason']}"), count


def count_skipped(conn: RedisClient, items: Any, message_id: str | None = None) -> int:
    """Add one message's skip counts (``check_counts``) to the totals and to each day, once per
    ``message_id``; a bad item is refused on its own (logged and counted, ``refusals``) and the
    others are added. Returns how many requests they count (0 for a redelivered message)."""
    check_message_id(message_id)
    fields, refused = check_counts(items)
    added = 0
    if fields and _add(conn, fields, message_id):
        added = sum(fields.values())
    refusals.count_refused(conn, "count_skips", message_id, refused)
    return added


def _add(conn: RedisClient, fields: Counter[SkipField], message_id: str | None) -> bool:
    """One ``skip_count`` call: False when the message's skips were added before."""
    script_keys = [keys.skip_seen(message_id or "-"), keys.skip_counts()]
    index: dict[tuple[str, date], int] = {}
    args: list[Any] = [
        get_settings().dedupe_ttl if message_id is not None else 0,
        max(1, get_settings().day_totals_days) * DAY,
    ]
    for (scope, day, field), count in sorted(
        fields.items(), key=lambda entry: (entry[0][0], str(entry[0][1]), entry[0][2])
    ):
        where = 0
        if day is not None:
            if (scope, day) not in index:
                script_keys.append(keys.skip_day_counts(day, scope))
                index[(scope, day)] = len(script_keys)
            where = index[(scope, day)]
        args += [where, field, count]

    def queue(pipe: Any) -> None:
        run_script(conn, "skip_count", script_keys, args, client=pipe)
        day_registry.queue_note(pipe, index)  # (the days, for the retention pass: same round trip)

    [replies] = execute_in_order(conn, queue)
    return bool(int(replies[0]))


def as_items(
    route: str,
    counts: Mapping[str, int],
    ts: float | None = None,
    site: str | None = None,
) -> list[dict[str, Any]]:
    """``counts`` (reason -> n) as a message's items (the reasons ``count_skipped`` knows; zeros left
    out), all of time ``ts`` (``None``: no day, the totals only) and ``site``."""
    where: dict[str, Any] = {"ts": ts} | ({"site": site} if site else {})
    return [
        {"route": route, "reason": reason, "count": n, **where}
        for reason, n in sorted(counts.items())
        if n > 0 and reason in KNOWN_REASONS
    ]


def counts(conn: RedisClient) -> dict[tuple[str, str], int]:
    """Requests skipped so far by (route, reason)."""
    return parse_counts(conn.hgetall(keys.skip_counts()))


def parse_counts(reply: Mapping[Any, Any]) -> dict[tuple[str, str], int]:
    """``counts`` from the reply of an HGETALL of ``keys.skip_counts()``."""
    found = {}
    for field, count in reply.items():
        route, _, reason = as_str(field).partition(":")
        found[(route, reason)] = int(count)
    return found


def day_counts(conn: RedisClient, first: date, last: date, site: Any = None) -> dict[date, dict[str, int]]:
    """Requests of a site's days ``first`` to ``last`` that were not page views: for each day,
    reason -> requests (every route added up; a day with none: ``{}``). One round trip."""
    scope = check_site(site)
    days = days_between(first, last)
    pipe = read_pipeline(conn)
    for day in days:
        pipe.hgetall(keys.skip_day_counts(day, scope))
    found: dict[date, dict[str, int]] = {}
    for day, reply in zip(days, pipe.execute(), strict=True):
        by_reason: Counter[str] = Counter()
        for (_route, reason), count in parse_counts(reply).items():
            by_reason[reason] += count
        found[day] = dict(sorted(by_reason.items()))
    return found


def sweep(conn: RedisClient, scope: str, day: date, until: float | None) -> int:
    """The retention sweep of a site's day's skip counts (aggregate)."""
    with keys.bound(conn):
        return sweeps.apply(conn, [keys.skip_day_counts(day, scope)], until)


SKIPPED = table.register(
    table.Table(
        name="skips",
        what="requests and log lines that were not page views, by route and reason, all time and by day",
        module=__name__,
        keys=(
            table.StoredKey("ct:skipped:{skipped}", "HASH"),
            table.StoredKey("ct:skipped:{skipped}:day:<day>", "HASH"),
        ),
        tag="{skipped}",
        fed_by=("skip",),
        writers=("store/lua/skip_count.lua",),
        readers=("skips.counts", "skips.day_counts", "health", "/metrics"),
        retention=table.Retention(
            "all-time counts never deleted; a day's counts COUNTERS_AGGREGATE_DAYS (400; 0: for ever) after "
            "the end of the day (the hourly apply_retention; their TTL, COUNTERS_DAY_TOTALS_DAYS from the "
            "latest write, is a safety net)",
            "COUNTERS_AGGREGATE_DAYS",
            lambda settings: settings.aggregate_days or None,
            {table.AGGREGATE: sweep},
        ),
        erasure=table.Erasure.none("counts by route and reason only"),
    )
)
"""The skips' table (``core.table``)."""
