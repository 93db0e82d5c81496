"""Ranking bumps, the payload beside the board (``ranking``), as ``visits`` is for page views,
declared as the kind ``RANKING`` (``core.kind``): one bump validated (``prepare_bump``, as
``incr_ranking`` takes it; ``app_bump`` in the app's process), a payload's bumps checked against
the boards' stored settings (``screen_boards``) and applied (``incr_bumps``, through
``payloads.apply_payload``), and a bump's journal form (``bump_entry``, for the worker's batch
claims).

Every item is validated before anything is written; a bad item is refused on its own (counted,
``refusals``) and the others are applied, in calls of BUMPS_PER_CALL bumps of one board, each at
most once per its id made from the message id.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from . import throughput
from .boards import Board, RankingBump, bump_on, check_board, slot_of
from .core.kind import Kind, register
from .core.settings import DEFAULT_SITE
from .core.validation import MAX_AMOUNT
from .errors import BoardSettingsConflict, InvalidInput
from .payloads import apply_payload
from .ranking import board_settings, write_bumps
from .store.client import RedisClient
from .store.scripts import WritePlan


def bump_entry(bump: RankingBump) -> list[Any]:
    """A prepared bump as JSON-able data (a worker batch's journal), ``bump_from_entry``'s input."""
    board = bump.board
    return [board.name, board.period_hours, board.interval_hours, bump.member, bump.amount, bump.slot]


def bump_from_entry(entry: list[Any]) -> RankingBump:
    """The prepared bump ``bump_entry`` made ``entry`` of."""
    name, period_hours, interval_hours, member, amount, slot = entry
    return RankingBump(Board(name, period_hours, interval_hours), member, amount, slot)


def prepare_bump(fields: Mapping[str, Any]) -> RankingBump:
    """Validate one bump, its fields as ``RANKING.bind`` returns them (raises InvalidInput; writes nothing).
    Whether the board's stored settings agree is known only when it is written (``write_bumps``)."""
    get = fields.get
    board = check_board(fields["board"], get("period_hours", 24), get("interval_hours", 1), get("site"))
    return bump_on(board, fields["member"], get("amount", 1), get("ts"))


BUMPS_PER_CALL = 100
"""Ranking bumps per Lua call of a batch, so no call runs long: a slot hash of up to 512 members
is a listpack (Redis 7's default ``hash-max-listpack-entries``), where each member's lookup scans
it; 500 bumps of new members into a new hour took 5-12 ms on a 2-core machine, 200 up to 6.5 ms
(issue 21, ``tests/test_ranking_scale.py``)."""
MAX_BUMPS = 20_000
"""The most bumps one ``incr_rankings`` message may carry."""


def app_bump(fields: Mapping[str, Any]) -> dict[str, Any]:
    """One bump (its fields as ``RANKING.bind`` returns them) checked in the app's process
    (``prepare_bump``; ``ts`` None: now) and written as an item of an ``incr_rankings`` message,
    the default amount, settings and site left out."""
    bump: dict[str, Any] = {"board": fields["board"], "member": fields["member"], "ts": fields.get("ts")}
    if bump["ts"] is None:
        bump["ts"] = time.time()
    prepare_bump({**fields, "ts": bump["ts"]})
    amount, site = fields.get("amount", 1), fields.get("site")
    period_hours, interval_hours = fields.get("period_hours", 24), fields.get("interval_hours", 1)
    if type(amount) is not int or amount != 1:
        bump["amount"] = amount
    if (period_hours, interval_hours) != (24, 1):
        bump.update(period_hours=period_hours, interval_hours=interval_hours)
    if site is not None and site != DEFAULT_SITE:
        bump["site"] = site
    return bump


def merge_bumps(bumps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A batch's bumps as ``app_bump`` wrote them, those of one board (its settings and site),
    member and slot merged into the first of them: the amounts summed (while the sum stays within
    the amount's bounds: past them a new item begins) and the latest time kept, which is in the
    same slot. The board's figures are the same (a bump adds its amount to its member's slot,
    whatever its time within the slot); the broker, the worker and Redis carry, check and write
    one item where a popular member had many (``VisitRecorder``'s batches: ``Kind.merge``).
    Mutates and returns the items it was given, which the caller owns."""
    merged: list[dict[str, Any]] = []
    into: dict[tuple[Any, ...], dict[str, Any]] = {}
    for bump in bumps:
        interval = bump.get("interval_hours", 1)
        key = (
            bump["board"],
            bump.get("site"),
            bump.get("period_hours", 24),
            interval,
            bump["member"],
            slot_of(bump["ts"], interval),
        )
        first = into.get(key)
        if first is not None:
            total = first.get("amount", 1) + bump.get("amount", 1)
            if abs(total) <= MAX_AMOUNT:
                first["amount"] = total
                first["ts"] = max(first["ts"], bump["ts"])
                continue
        into[key] = bump
        merged.append(bump)
    return merged


def screen_boards(
    conn: RedisClient, prepared: list[tuple[int, RankingBump]]
) -> tuple[list[tuple[int, RankingBump]], list[tuple[int, InvalidInput]]]:
    """A payload's prepared bumps checked against each board's stored settings (and the first
    settings a board is given in the payload): ``(accepted, refused)`` (index, ...) pairs."""
    stored = {name: board_settings(conn, name) for name in dict.fromkeys(e.board.name for _n, e in prepared)}
    fixed: dict[str, Board] = {}
    accepted = []
    refused: list[tuple[int, InvalidInput]] = []
    for n, bump in prepared:
        board = bump.board
        settings = stored.get(board.name)
        first = fixed.setdefault(board.name, board if settings is None else Board(board.name, *settings))
        if first != board:
            refused.append(
                (
                    n,
                    BoardSettingsConflict(
                        f"bump {n}: board {board.name!r} is fixed to (period_hours, interval_hours) = "
                        f"{(first.period_hours, first.interval_hours)}, not {(board.period_hours, board.interval_hours)}"
                    ),
                )
            )
        else:
            accepted.append((n, bump))
    return accepted, refused


def write_calls(
    plan: WritePlan, calls: list[tuple[list[RankingBump], str | None]], tally: throughput.Tally
) -> Callable[[], list[InvalidInput | None]]:
    """``ranking.write_bumps`` as the ranking kind writes: per call, None, or the InvalidInput
    refusing it (its board fixed to other settings by another writer meanwhile)."""
    outcome = write_bumps(plan, calls, tally)
    return lambda: [result if isinstance(result, InvalidInput) else None for result in outcome()]


def incr_bumps(conn: RedisClient, bumps: list[dict[str, Any]], *, message_id: str | None = None) -> int:
    """Many ranking bumps in one round trip, at most once per ``message_id`` (the batch id): the
    ranking kind's payload (``payloads.apply_payload``). Every item is validated before anything is
    written; a bad item is refused on its own (logged and counted, ``refusals``) and the others are
    applied. Returns the bumps applied or late.

    The bumps at positions ``n*BUMPS_PER_CALL ..`` make calls (one per board) deduplicated
    under ``<batch id>#<n>`` and the board, so a redelivery maps every id to the same bumps."""
    return apply_payload(conn, RANKING, bumps, message_id=message_id)


RANKING = register(
    Kind(
        name="ranking",
        fields=("board", "member", "amount", "ts", "period_hours", "interval_hours", "site"),
        required=2,
        item_task="counters_tasks.incr_ranking",
        worker_batches=True,
        payload_task="counters_tasks.incr_rankings",
        items_argument="events",  # the wire name of incr_rankings' argument: kept for messages in flight
        max_items=MAX_BUMPS,
        prepare=prepare_bump,
        app_item=app_bump,
        to_entry=bump_entry,
        from_entry=bump_from_entry,
        write=write_calls,
        per_call=BUMPS_PER_CALL,
        call_key=lambda bump: bump.board,
        screen=screen_boards,
        merge=merge_bumps,
        applied_metric=("counters_ranking_events_applied", "Ranking bumps applied (late ones not counted)"),
    )
)
"""A ranking bump: one bump an ``incr_ranking`` message, many an ``incr_rankings`` one."""
