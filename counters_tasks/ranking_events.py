"""Ranking events, the payload beside the board (``ranking``), as ``visits`` is for page views,
declared as the kind ``RANKING`` (``core.kind``): one event validated (``prepare_event``, as
``incr_ranking`` takes it; ``app_event`` in the app's process), a payload's events checked against
the boards' stored settings (``screen_boards``) and applied (``incr_events``, through
``payloads.apply_payload``), and an event's journal form (``event_entry``, for the worker's batch
claims).

Every item is validated before anything is written; a bad item is refused on its own (counted,
``refusals``) and the others are applied, in calls of EVENTS_PER_CALL events of one board, each at
most once per its id made from the message id.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from . import throughput
from .core.kind import Kind, register
from .core.settings import DEFAULT_SITE
from .core.validation import MAX_AMOUNT
from .errors import BoardSettingsConflict, InvalidInput
from .payloads import apply_payload
from .ranking import Board, RankingEvent, board_settings, check_board, event_on, slot_of, write_events
from .store.client import RedisClient


def event_entry(event: RankingEvent) -> list[Any]:
    """A prepared event as JSON-able data (a worker batch's journal), ``event_from_entry``'s input."""
    board = event.board
    return [board.name, board.period_hours, board.interval_hours, event.member, event.amount, event.slot]


def event_from_entry(entry: list[Any]) -> RankingEvent:
    """The prepared event ``event_entry`` made ``entry`` of."""
    name, period_hours, interval_hours, member, amount, slot = entry
    return RankingEvent(Board(name, period_hours, interval_hours), member, amount, slot)


def prepare_event(fields: Mapping[str, Any]) -> RankingEvent:
    """Validate one event, its fields as ``RANKING.bind`` returns them (raises InvalidInput; writes nothing).
    Whether the board's stored settings agree is known only when it is written (``write_events``)."""
    get = fields.get
    board = check_board(fields["board"], get("period_hours", 24), get("interval_hours", 1), get("site"))
    return event_on(board, fields["member"], get("amount", 1), get("ts"))


EVENTS_PER_CALL = 100
"""Ranking events per Lua call of a batch, so no call runs long: a slot hash of up to 512 members
is a listpack (Redis 7's default ``hash-max-listpack-entries``), where each member's lookup scans
it; 500 events of new members into a new hour took 5-12 ms on a 2-core machine, 200 up to 6.5 ms
(issue 21, ``tests/test_ranking_scale.py``)."""
MAX_EVENTS = 20_000
"""The most events one ``incr_rankings`` message may carry."""


def app_event(fields: Mapping[str, Any]) -> dict[str, Any]:
    """One event (its fields as ``RANKING.bind`` returns them) checked in the app's process
    (``prepare_event``; ``ts`` None: now) and written as an item of an ``incr_rankings`` message,
    the default amount, settings and site left out."""
    event: dict[str, Any] = {"board": fields["board"], "member": fields["member"], "ts": fields.get("ts")}
    if event["ts"] is None:
        event["ts"] = time.time()
    prepare_event({**fields, "ts": event["ts"]})
    amount, site = fields.get("amount", 1), fields.get("site")
    period_hours, interval_hours = fields.get("period_hours", 24), fields.get("interval_hours", 1)
    if type(amount) is not int or amount != 1:
        event["amount"] = amount
    if (period_hours, interval_hours) != (24, 1):
        event.update(period_hours=period_hours, interval_hours=interval_hours)
    if site is not None and site != DEFAULT_SITE:
        event["site"] = site
    return event


def merge_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A batch's events as ``app_event`` wrote them, those of one board (its settings and site),
    member and slot merged into the first of them: the amounts summed (while the sum stays within
    the amount's bounds: past them a new item begins) and the latest time kept, which is in the
    same slot. The board's figures are the same (an event adds its amount to its member's slot,
    whatever its time within the slot); the broker, the worker and Redis carry, check and write
    one item where a popular member had many (``VisitRecorder``'s batches: ``Kind.merge``).
    Mutates and returns the items it was given, which the caller owns."""
    merged: list[dict[str, Any]] = []
    into: dict[tuple[Any, ...], dict[str, Any]] = {}
    for event in events:
        interval = event.get("interval_hours", 1)
        key = (
            event["board"],
            event.get("site"),
            event.get("period_hours", 24),
            interval,
            event["member"],
            slot_of(event["ts"], interval),
        )
        first = into.get(key)
        if first is not None:
            total = first.get("amount", 1) + event.get("amount", 1)
            if abs(total) <= MAX_AMOUNT:
                first["amount"] = total
                first["ts"] = max(first["ts"], event["ts"])
                continue
        into[key] = event
        merged.append(event)
    return merged


def screen_boards(
    conn: RedisClient, prepared: list[tuple[int, RankingEvent]]
) -> tuple[list[tuple[int, RankingEvent]], list[tuple[int, InvalidInput]]]:
    """A payload's prepared events checked against each board's stored settings (and the first
    settings a board is given in the payload): ``(accepted, refused)`` (index, ...) pairs."""
    stored = {name: board_settings(conn, name) for name in dict.fromkeys(e.board.name for _n, e in prepared)}
    fixed: dict[str, Board] = {}
    accepted = []
    refused: list[tuple[int, InvalidInput]] = []
    for n, event in prepared:
        board = event.board
        settings = stored.get(board.name)
        first = fixed.setdefault(board.name, board if settings is None else Board(board.name, *settings))
        if first != board:
            refused.append(
                (
                    n,
                    BoardSettingsConflict(
                        f"event {n}: board {board.name!r} is fixed to (period_hours, interval_hours) = "
                        f"{(first.period_hours, first.interval_hours)}, not {(board.period_hours, board.interval_hours)}"
                    ),
                )
            )
        else:
            accepted.append((n, event))
    return accepted, refused


def write_calls(
    conn: RedisClient, calls: list[tuple[list[RankingEvent], str | None]], tally: throughput.Tally
) -> list[InvalidInput | None]:
    """``ranking.write_events`` as the ranking kind writes: per call, None, or the InvalidInput
    refusing it (its board fixed to other settings by another writer meanwhile)."""
    return [result if isinstance(result, InvalidInput) else None for result in write_events(conn, calls, tally)]


def incr_events(conn: RedisClient, events: list[dict[str, Any]], *, message_id: str | None = None) -> int:
    """Many ranking events in one round trip, at most once per ``message_id`` (the batch id): the
    ranking kind's payload (``payloads.apply_payload``). Every item is validated before anything is
    written; a bad item is refused on its own (logged and counted, ``refusals``) and the others are
    applied. Returns the events applied or late.

    The events at positions ``n*EVENTS_PER_CALL ..`` make calls (one per board) deduplicated
    under ``<batch id>#<n>`` and the board, so a redelivery maps every id to the same events."""
    return apply_payload(conn, RANKING, events, message_id=message_id)


RANKING = register(
    Kind(
        name="ranking",
        fields=("board", "member", "amount", "ts", "period_hours", "interval_hours", "site"),
        required=2,
        event_task="counters_tasks.incr_ranking",
        worker_batches=True,
        batch_task="counters_tasks.incr_rankings",
        items_argument="events",
        max_items=MAX_EVENTS,
        prepare=prepare_event,
        app_item=app_event,
        to_entry=event_entry,
        from_entry=event_from_entry,
        write=write_calls,
        per_call=EVENTS_PER_CALL,
        call_key=lambda event: event.board,
        screen=screen_boards,
        merge=merge_events,
    )
)
"""A ranking bump: one event an ``incr_ranking`` message, many an ``incr_rankings`` one."""
