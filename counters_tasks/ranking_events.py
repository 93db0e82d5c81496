"""Ranking events, the payload beside the board (``ranking``), as ``visits`` is for page views:
one event validated (``prepare_event``, as ``incr_ranking`` takes it; ``prepare_event_item``, an
item of an ``incr_rankings`` payload), a payload validated item by item against the boards'
stored settings (``prepare_events``) and applied (``incr_events``), and an event's journal form
(``event_entry``, for the worker's batch claims).

Every item is validated before anything is written; a bad item is refused on its own (counted,
``refusals``) and the others are applied, in calls of EVENTS_PER_CALL events of one board, each at
most once per its id made from the message id.
"""

from __future__ import annotations

from typing import Any

from . import refusals, throughput
from .core.validation import check_amount, check_event_time, check_message_id, check_text
from .errors import BoardSettingsConflict, InvalidInput, MalformedMessage
from .ranking import Board, RankingEvent, board_settings, check_board, write_events
from .store import keys
from .store.client import RedisClient


def event_entry(event: RankingEvent) -> list[Any]:
    """A prepared event as JSON-able data (a worker batch's journal), ``event_from_entry``'s input."""
    board = event.board
    return [board.name, board.period_hours, board.interval_hours, event.member, event.amount, event.slot]


def event_from_entry(entry: list[Any]) -> RankingEvent:
    """The prepared event ``event_entry`` made ``entry`` of."""
    name, period_hours, interval_hours, member, amount, slot = entry
    return RankingEvent(Board(name, period_hours, interval_hours), member, amount, slot)


def prepare_event(board: Any, member: Any, amount: Any = 1, ts: Any = None, period_hours: Any = 24,
                  interval_hours: Any = 1, site: Any = None) -> RankingEvent:
    """Validate one event, given as ``incr_ranking`` takes it (raises InvalidInput; writes nothing).
    Whether the board's stored settings agree is known only when it is written (``write_events``)."""
    target = check_board(board, period_hours, interval_hours, site)
    check_text(member, "member")
    check_amount(amount, "amount")
    return RankingEvent(target, member, amount, target.slot_of(check_event_time(ts)))


RANKING_EVENT_FIELDS = frozenset({"board", "member", "amount", "ts", "period_hours", "interval_hours", "site"})
EVENTS_PER_CALL = 100
"""Ranking events per Lua call of a batch, so no call runs long: a slot hash of up to 512 members
is a listpack (Redis 7's default ``hash-max-listpack-entries``), where each member's lookup scans
it; 500 events of new members into a new hour took 5-12 ms on a 2-core machine, 200 up to 6.5 ms
(issue 21, ``tests/test_ranking_scale.py``)."""
MAX_EVENTS = 20_000
"""The most events one ``incr_rankings`` message may carry."""


def prepare_event_item(event: Any) -> RankingEvent:
    """Validate one item of an ``incr_rankings`` payload (a dict of ``incr_ranking``'s arguments)."""
    if not isinstance(event, dict):
        raise MalformedMessage(f"must be a dict, got {type(event).__name__}")
    if set(event) - RANKING_EVENT_FIELDS or "board" not in event or "member" not in event:
        raise MalformedMessage(f"needs board and member, and only {sorted(RANKING_EVENT_FIELDS)}")
    return prepare_event(**event)


def prepare_events(conn: RedisClient, events: Any) -> tuple[list[tuple[int, RankingEvent]], list[tuple[int, InvalidInput]]]:
    """Validate an ``incr_rankings`` payload item by item, against each board's stored settings
    (and the first settings a board is given in the batch): ``(accepted (index, event) pairs,
    refused (index, error) pairs)``. A payload that is not a list, or holds more than MAX_EVENTS
    items, is refused whole (MalformedMessage)."""
    if not isinstance(events, list):
        raise MalformedMessage(f"events must be a list, got {type(events).__name__}")
    if len(events) > MAX_EVENTS:
        raise MalformedMessage(f"a batch holds at most {MAX_EVENTS} events, got {len(events)}")
    prepared: list[tuple[int, RankingEvent]] = []
    refused: list[tuple[int, InvalidInput]] = []
    for n, event in enumerate(events):
        try:
            prepared.append((n, prepare_event_item(event)))
        except InvalidInput as exc:
            refused.append((n, type(exc)(f"event {n}: {exc}")))
    stored = {name: board_settings(conn, name) for name in dict.fromkeys(e.board.name for _n, e in prepared)}
    fixed: dict[str, Board] = {}
    accepted = []
    for n, event in prepared:
        board = event.board
        settings = stored.get(board.name)
        first = fixed.setdefault(board.name, board if settings is None else Board(board.name, *settings))
        if first != board:
            refused.append((n, BoardSettingsConflict(
                f"event {n}: board {board.name!r} is fixed to (period_hours, interval_hours) = "
                f"{(first.period_hours, first.interval_hours)}, not {(board.period_hours, board.interval_hours)}")))
        else:
            accepted.append((n, event))
    refused.sort(key=lambda pair: pair[0])
    return accepted, refused


def incr_events(conn: RedisClient, events: list[dict[str, Any]], *, message_id: str | None = None) -> int:
    """Many ranking events in one round trip, at most once per ``message_id`` (the batch id).
    Every item is validated before anything is written; a bad item is refused on its own (logged
    and counted, ``refusals``) and the others are applied. Returns the events applied or late.

    The events at positions ``n*EVENTS_PER_CALL ..`` make calls (one per board) deduplicated
    under ``<batch id>#<n>`` and the board, so a redelivery maps every id to the same events."""
    check_message_id(message_id)
    accepted, refused = prepare_events(conn, events)  # a payload refused whole raises (the task counts it)
    calls: dict[tuple[int, Board], list[tuple[int, RankingEvent]]] = {}
    for n, event in accepted:
        calls.setdefault((n // EVENTS_PER_CALL, event.board), []).append((n, event))
    ids = keys.chunk_ids(message_id, -(-len(events) // EVENTS_PER_CALL))
    planned = list(calls.values())
    tally = throughput.Tally()
    results = write_events(conn, [([event for _n, event in call], ids[part]) for (part, _board), call in calls.items()],
                           tally)
    for call, result in zip(planned, results, strict=True):
        if isinstance(result, InvalidInput):  # the board was fixed by another writer meanwhile
            refused += [(n, result) for n, _event in call]
    refusals.record(conn, "incr_rankings", message_id, refused)
    throughput.count(conn, "ranking", tally, batch=("incr_rankings", len(events)))
    return sum(len(call) for call, result in zip(planned, results, strict=True) if not isinstance(result, InvalidInput))
