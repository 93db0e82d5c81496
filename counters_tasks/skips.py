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
from .core.pageviews import APP, REASONS
from .core.validation import check_int, check_message_id
from .errors import InvalidInput
from .store import keys
from .store.client import as_str

MIDDLEWARE, IMPORT = "middleware", "import"
ROUTES = (MIDDLEWARE, IMPORT)
"""Where a skip was decided."""

IMPORT_REASONS = ("blank", "malformed", "already_imported")
"""The importer's reasons besides the page view rule's."""

KNOWN_REASONS = frozenset((*REASONS, APP, *IMPORT_REASONS))

MAX_REASONS = 64
"""Most (route, reason) entries one message carries."""


def check_counts(items: Any) -> Counter[str]:
    """A message's skip counts, ``[{"route": ..., "reason": ..., "count": n}, ...]``, as the hash
    fields to add (``"<route>:<reason>"``); InvalidInput for anything else. The reason of an
    import's refused line (``refused:<why>``) is counted as refusals are, not here."""
    if not isinstance(items, list) or not 0 < len(items) <= MAX_REASONS:
        raise InvalidInput(f"skip counts must be a list of 1 to {MAX_REASONS} entries")
    fields: Counter[str] = Counter()
    for item in items:
        if not isinstance(item, Mapping) or set(item) != {"route", "reason", "count"}:
            raise InvalidInput("a skip count is {route, reason, count}")
        if item["route"] not in ROUTES or item["reason"] not in KNOWN_REASONS:
            raise InvalidInput(f"unknown skip route or reason: {item['route']!r}, {item['reason']!r}")
        fields[f"{item['route']}:{item['reason']}"] += check_int(item["count"], "count", 1, 2**31)
    return fields


def record(conn: Any, items: Any, message_id: str | None = None) -> int:
    """Add one message's skip counts (``check_counts``), once per ``message_id``; returns how many
    requests they count (0 for a redelivered message)."""
    check_message_id(message_id)
    fields = check_counts(items)
    marker = None if message_id is None else keys.skip_seen(message_id)
    return sum(fields.values()) if refusals.add_counts(conn, keys.skip_counts(), marker, fields) else 0


def as_items(route: str, counts: Mapping[str, int]) -> list[dict[str, Any]]:
    """``counts`` (reason -> n) as a message's items (the reasons ``record`` knows; zeros left out)."""
    return [{"route": route, "reason": reason, "count": n} for reason, n in sorted(counts.items())
            if n > 0 and reason in KNOWN_REASONS]


def counts(conn: Any) -> dict[tuple[str, str], int]:
    """Requests skipped so far by (route, reason)."""
    return parse_counts(conn.hgetall(keys.skip_counts()))


def parse_counts(reply: Mapping[Any, Any]) -> dict[tuple[str, str], int]:
    """``counts`` from the reply of an HGETALL of ``keys.skip_counts()``."""
    found = {}
    for field, count in reply.items():
        route, _, reason = as_str(field).partition(":")
        found[(route, reason)] = int(count)
    return found
