"""Refusals: every item refused as bad input is logged and counted, never silent; so is every
item counted only in part (a visit of a closed day: ``count_partial``).

Batches refuse item by item (the others are applied); each refusal is logged at WARNING with
its message id and counted by reason (``InvalidInput.reason``: bad input, closed day, future,
board settings, malformed) in one Redis hash, once per message however often it is delivered.
``counts`` reads the totals: what ``counters-tasks health`` and the metrics show.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from .core import table
from .core.settings import get_settings
from .errors import REFUSAL_REASONS, ClosedDay, InvalidInput
from .store import keys
from .store.client import RedisClient, as_str
from .store.scripts import run_script

log = logging.getLogger(__name__)

LOGGED_PER_MESSAGE = 20
"""Refusals of one message logged one by one; the rest are summed up in one line."""


def count_refused(
    conn: RedisClient, kind: str, message_id: str | None, refused: Sequence[tuple[int | None, InvalidInput]]
) -> None:
    """Log and count the ``(item index or None for the whole message, error)`` refusals of one
    message of ``kind`` (a task name); counted once per ``message_id``."""
    if not refused:
        return
    for index, error in refused[:LOGGED_PER_MESSAGE]:
        where = "" if index is None else f" item {index}"
        log.warning("%s %s%s refused (%s): %s", kind, message_id, where, error.reason, error)
    if len(refused) > LOGGED_PER_MESSAGE:
        log.warning("%s %s: %d more items refused", kind, message_id, len(refused) - LOGGED_PER_MESSAGE)
    _count(conn, message_id, Counter(error.reason for _index, error in refused))


def count_partial(conn: RedisClient, kind: str, message_id: str | None, count: int) -> None:
    """Log and count ``count`` items of one message of ``kind`` that were counted only in part,
    because their day is closed (its per-visitor sets expired): a page view still counts in
    PV, all-time figures and counters but not in that day's unique visitors; a session id is
    not counted. Counted under ``closed_day``, once per ``message_id``."""
    if count <= 0:
        return
    log.warning("%s %s: %d item(s) of a closed day counted without that day's unique visitors", kind, message_id, count)
    _count(conn, None if message_id is None else f"{message_id}/closed", Counter({ClosedDay.reason: count}))


def _count(conn: RedisClient, marker_id: str | None, by_reason: Counter[str]) -> None:
    """Add ``by_reason`` to the counts, once per ``marker_id`` (none: every time)."""
    add_counts(conn, keys.refusal_counts(), None if marker_id is None else keys.refusal_seen(marker_id), by_reason)


def add_counts(conn: RedisClient, counts_key: str, marker_key: str | None, by_field: Mapping[str, int]) -> bool:
    """Add ``by_field`` to the HASH ``counts_key`` (the ``refusal_count`` script), once per
    ``marker_key`` (a dedupe marker in the hash's slot, kept COUNTERS_DEDUPE_TTL; None: every
    time). Returns False when
    the marker says it was added before (a redelivery)."""
    args: list[Any] = [get_settings().dedupe_ttl if marker_key is not None else 0]
    for field, count in sorted(by_field.items()):
        args += [field, count]
    script_keys = [counts_key] if marker_key is None else [counts_key, marker_key]
    return bool(int(run_script(conn, "refusal_count", script_keys, args)))


def counts(conn: RedisClient) -> dict[str, int]:
    """Items refused so far, by reason (every reason listed, 0 when none)."""
    return parse_counts(conn.hgetall(keys.refusal_counts()))


def parse_counts(reply: dict[Any, Any]) -> dict[str, int]:
    """``counts`` from the reply of an HGETALL of ``keys.refusal_counts()`` (for a caller that
    pipelines it with other reads)."""
    stored = {as_str(reason): int(count) for reason, count in reply.items()}
    return {reason: stored.get(reason, 0) for reason in REFUSAL_REASONS} | stored


REFUSALS = table.register(
    table.Table(
        name="refusals",
        what="items refused, by reason (bad input, a closed day, from the future, board settings, malformed)",
        module=__name__,
        keys=(table.StoredKey("ct:refused:{refused}", "HASH"),),
        tag="{refused}",
        fed_by=(),
        writers=("store/lua/refusal_count.lua (every payload, batch and task that refuses)",),
        readers=("refusals.counts", "health", "/metrics"),
        retention=table.Retention("counts since the start: never deleted"),
        erasure=table.Erasure.none("counts by reason only"),
    )
)
"""The refusals' table (``core.table``)."""
