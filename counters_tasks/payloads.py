"""The one path of a payload, a message of many items of one kind (``record_visits``,
``incr_rankings``, or a new kind's payload task), whatever the kind (``core.kind``): every item
checked before anything is written, a bad one refused on its own (counted, ``refusals``) and the
others written in calls of the kind's size, each at most once per its id made from the message
id, then the batch counted for the metrics (``throughput``).

The worker's claimed batches of per-item messages cut their items into calls the same way
(``plan_calls``; ``worker.batch_apply``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from . import refusals, throughput
from .core import table
from .core.kind import Kind, short_name
from .core.validation import check_message_id
from .errors import InvalidInput, MalformedMessage
from .store.client import RedisClient
from .store.keys import chunk_ids
from .store.scripts import WritePlan, write_through

Positioned = tuple[int, Any]
"""An item and its position in its message (or its worker batch)."""


def prepare_payload(kind: Kind, items: Any) -> tuple[list[Positioned], list[tuple[int, InvalidInput]]]:
    """Check a payload item by item (``kind.prepare`` of each): ``(accepted (position, prepared
    item) pairs, refused (position, error) pairs)``. A payload that is not a list, or holds more
    than the kind's ``max_items``, is refused whole (MalformedMessage)."""
    if kind.prepare is None:
        raise TypeError(f"kind {kind.name!r} declares no prepare: it has no payloads")
    if not isinstance(items, list):
        raise MalformedMessage(f"{kind.items_argument} must be a list, got {type(items).__name__}")
    if len(items) > kind.max_items:
        raise MalformedMessage(f"a batch holds at most {kind.max_items} {kind.items_argument}, got {len(items)}")
    accepted: list[Positioned] = []
    refused: list[tuple[int, InvalidInput]] = []
    for n, item in enumerate(items):
        try:
            accepted.append((n, kind.prepare(kind.item_fields(item))))
        except InvalidInput as exc:
            refused.append((n, type(exc)(f"{kind.item_noun} {n}: {exc}")))
    return accepted, refused


def plan_calls(
    kind: Kind, positioned: list[Positioned], message_id: str | None, positions: int
) -> list[tuple[list[Positioned], str | None]]:
    """The write calls of prepared items of a message of ``positions`` items (a payload, or a
    worker batch): positions ``n*per_call ..`` make part ``n``, cut again by ``call_key`` (one
    call per board), each call under the id of its part (``<message id>#<n>``: a redelivered
    message, cut the same way, maps every id to the same items; calls of one part that share an
    id are told apart by what their key names, as a board's marker is its own)."""
    call_ids = chunk_ids(message_id, -(-positions // kind.per_call))
    calls: dict[tuple[int, Hashable], list[Positioned]] = {}
    for n, item in positioned:
        key = None if kind.call_key is None else kind.call_key(item)
        calls.setdefault((n // kind.per_call, key), []).append((n, item))
    return [(call, call_ids[part]) for (part, _key), call in calls.items()]


def write_planned(
    conn: RedisClient, kind: Kind, calls: list[tuple[list[Positioned], str | None]], tally: throughput.Tally
) -> list[tuple[int, InvalidInput]]:
    """Write planned calls in one ``WritePlan`` (one round trip): the kind's own writes
    (``kind.write``) and those of every table a feeder adds to the kind (``core.table.fed_by``);
    the items refused as they were written (a board fixed to other settings meanwhile), by
    position."""
    write = kind.write
    if write is None:
        raise TypeError(f"kind {kind.name!r} declares no write")
    if not calls:
        return []
    item_calls = [([item for _n, item in call], call_id) for call, call_id in calls]

    def queue(plan: WritePlan) -> Callable[[], list[Any]]:
        outcome = write(plan, item_calls, tally)
        for _table, feed in table.fed_by(kind.name):
            feed(plan, item_calls)
        return outcome

    results = write_through(conn, queue)
    return [
        (n, result)
        for (call, _id), result in zip(calls, results, strict=True)
        if isinstance(result, InvalidInput)
        for n, _item in call
    ]


def apply_payload(conn: RedisClient, kind: Kind, items: Any, *, message_id: str | None = None) -> int:
    """A payload of ``kind`` (its payload task's one argument) applied at most once per ``message_id``
    (the batch id): every item checked before anything is written, a bad item refused on its own
    (logged and counted) and the others written. Returns the items applied (for a ranking, late
    items included: taken, and ignored as their window has gone)."""
    check_message_id(message_id)
    if kind.payload_task is None:
        raise TypeError(f"kind {kind.name!r} declares no payload task")
    accepted, refused = prepare_payload(kind, items)  # a payload refused whole raises (the task counts it)
    if kind.screen is not None:
        accepted, screened = kind.screen(conn, accepted)
        refused = sorted(refused + screened, key=lambda pair: pair[0])
    tally = throughput.Tally()
    calls = plan_calls(kind, accepted, message_id, len(items))
    conflicts = write_planned(conn, kind, calls, tally)
    refusals.count_refused(conn, short_name(kind.payload_task), message_id, refused + conflicts)
    throughput.count(conn, kind.name, tally, batch=(short_name(kind.payload_task), len(items)))
    return len(accepted) - len(conflicts)


MARKERS = table.register(
    table.Table(
        name="markers",
        what="a call's dedupe marker in the hash tag of what it wrote: the call was applied (a redelivery is a no-op)",
        module=__name__,
        keys=(
            table.StoredKey("ct:cnt:{group}:seen:<msg>", "STRING"),
            table.StoredKey("ct:rank:{tag(board)}:seen:<msg>", "STRING"),
            table.StoredKey("ct:refused:{refused}:seen:<message id>", "STRING"),
            table.StoredKey("ct:skipped:{skipped}:seen:<message id>", "STRING"),
            table.StoredKey("ct:site:{tag}:seen:<msg>", "STRING"),
            table.StoredKey("ct:path:{group}:seen:<msg>", "STRING"),
            table.StoredKey("ct:uniq:{tag(D)}:seen:<msg>", "STRING"),
        ),
        tag="the tag of the keys its call wrote",
        fed_by=(),
        writers=("every script given a message id (SET NX EX in the call it marks)",),
        readers=("the same script, on a redelivery",),
        retention=table.Retention(
            "COUNTERS_DEDUPE_TTL after it is written (the window a redelivery must fall in)",
            "COUNTERS_DEDUPE_TTL",
            lambda settings: settings.dedupe_ttl / 86400,
        ),
        erasure=table.Erasure.none("message ids only"),
    )
)
"""The dedupe markers of every table (``core.table``): a call applied at most once per its id."""
