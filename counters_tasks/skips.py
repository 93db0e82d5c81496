"""Requests that were not page views, counted by route and reason, so a site sees what its
figures leave out (``/metrics``: ``counters_skipped_total{route, reason}``).

- ``middleware``: a web process's middleware counts its skips by reason (``core.pageviews``:
  method, static, status, not_page, crawler; ``app`` for one the app left out) and its
  ``VisitRecorder`` sends them with its batches (``counters_tasks.count_skips``, one message per
  batch interval at most), added once per message id like the refusals.
- ``import``: ``counters-tasks import`` adds the lines each import skipped (its summary's
  reasons; an import run again adds its skips again, as it reads them again).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from . import refusals
from .core.pageviews import APP, HOST, REASONS
from .core.validation import check_int, check_message_id
from .errors import InvalidInput
from .store import keys
from .store.client import RedisClient, as_str

MIDDLEWARE, IMPORT = "middleware", "import"
ROUTES = (MIDDLEWARE, IMPORT)
"""Where a skip was decided."""

IMPORT_REASONS = ("blank", "malformed", "already_imported")
"""The importer's reasons besides the page view rule's."""

KNOWN_REASONS = frozenset((*REASONS, APP, HOST, *IMPORT_REASONS))

MAX_REASONS = 64
"""Most (route, reason) entries one message carries."""


def check_counts(items: Any) -> tuple[Counter[str], list[tuple[int, InvalidInput]]]:
    """A message's skip counts, ``[{"route": ..., "reason": ..., "count": n}, ...]``: the hash
    fields to add (``"<route>:<reason>"``) and the items refused, ``(index, error)``, each on its
    own. A payload that is not such a list is refused whole (InvalidInput). The reason of an
    import's refused line (``refused:<why>``) is counted as refusals are, not here."""
    if not isinstance(items, list) or not 0 < len(items) <= MAX_REASONS:
        raise InvalidInput(f"skip counts must be a list of 1 to {MAX_REASONS} entries")
    fields: Counter[str] = Counter()
    refused: list[tuple[int, InvalidInput]] = []
    for index, item in enumerate(items):
        try:
            field, count = check_item(item)
        except InvalidInput as error:
            refused.append((index, error))
            continue
        fields[field] += count
    return fields, refused


def check_item(item: Any) -> tuple[str, int]:
    """One skip count: its hash field and its count (InvalidInput when it is not one)."""
    if not isinstance(item, Mapping) or set(item) != {"route", "reason", "count"}:
        raise InvalidInput("a skip count is {route, reason, count}")
    if item["route"] not in ROUTES or item["reason"] not in KNOWN_REASONS:
        raise InvalidInput(f"unknown skip route or reason: {item['route']!r}, {item['reason']!r}")
    return f"{item['route']}:{item['reason']}", check_int(item["count"], "count", 1, 2**31)


def record(conn: RedisClient, items: Any, message_id: str | None = None) -> int:
    """Add one message's skip counts (``check_counts``), once per ``message_id``; a bad item is
    refused on its own (logged and counted, ``refusals``) and the others are added. Returns how
    many requests they count (0 for a redelivered message)."""
    check_message_id(message_id)
    fields, refused = check_counts(items)
    added = 0
    if fields:
        marker = None if message_id is None else keys.skip_seen(message_id)
        added = sum(fields.values()) if refusals.add_counts(conn, keys.skip_counts(), marker, fields) else 0
    refusals.record(conn, "count_skips", message_id, refused)
    return added


def as_items(route: str, counts: Mapping[str, int]) -> list[dict[str, Any]]:
    """``counts`` (reason -> n) as a message's items (the reasons ``record`` knows; zeros left out)."""
    return [{"route": route, "reason": reason, "count": n} for reason, n in sorted(counts.items())
            if n > 0 and reason in KNOWN_REASONS]


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
