"""Sliding-window rankings (seed 004): e.g. posts by likes over the last 24 hours.

A board keeps one HASH per time slot (member -> amount added in that slot), an index of its
live slots, and one ZSET with every member's total over the live slots, all under the board's
hash tag. Every write is one Lua call that keeps the invariant "top = sum of the indexed slots",
so a reader or a rotation never sees half an event:

- ``incr`` adds to the slot of the event's own ``now`` (a task that waited in the queue still
  expires on time). The board's watermark is the newest slot it has seen or been rotated to; an
  event whose slot is not among the last ``period // interval`` slots up to the watermark is
  late: ignored, and counted (``stats()["late"]``).
- ``rotate`` moves the rotation point forward to the window of its ``now`` and subtracts every
  expired slot from the totals, member by member in the same calls that delete them from the slot,
  so a repeated or concurrent rotation subtracts nothing twice.
- ``top`` reads the totals; slots of the index outside the window of its ``now`` (beat is late,
  or events came from ahead of ``now``) are corrected for in the same read, so the answer is exact
  for any ``now`` at or after the latest rotation, whether or not beat has run.

The totals ZSET stores minus the total, so Redis's own ascending order is "highest total first,
ties by ascending member name (UTF-8 byte order, which is code point order)": pages never
overlap. A slot hash has a TTL as a safety net only (the window + 2 days, refreshed on each
write to it); if one ever expires before beat rotated it, the next rotation or read sees its
index entry without a hash and rebuilds the totals from the live slots, which still holds every
in-window event (an expired slot is always days out of the window).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from . import keys
from .errors import InvalidInput
from .redis_layer import as_str, execute_in_order, run_script
from .settings import get_settings
from .validation import check_amount, check_int, check_message_id, check_now, check_text

log = logging.getLogger(__name__)

HOURS_DIVIDING_DAY = (1, 2, 3, 4, 6, 8, 12)
MAX_PERIOD_HOURS = 24 * 3660  # ten years
MAX_PAGE = 10**9
SLOT_TTL_GRACE = 2 * 86400
"""Seconds a slot hash outlives its window (so it expires only if beat is down for two days)."""
ROTATE_BUDGET = 10_000
"""Members one rotation call subtracts at most (a big slot takes several short calls)."""
CORRECT_AT_MOST = 5_000
"""Members of expired, not yet rotated slots that a read corrects for; past that it rotates first."""


def check_board_settings(period_hours: Any, interval_hours: Any) -> tuple[int, int]:
    """``interval_hours`` divides 24 or is a multiple of 24; ``period_hours`` a positive multiple of it."""
    check_int(interval_hours, "interval_hours", 1, MAX_PERIOD_HOURS)
    check_int(period_hours, "period_hours", 1, MAX_PERIOD_HOURS)
    if interval_hours not in HOURS_DIVIDING_DAY and interval_hours % 24:
        raise InvalidInput(f"interval_hours must divide 24 or be a multiple of 24, got {interval_hours}")
    if period_hours % interval_hours:
        raise InvalidInput(f"period_hours ({period_hours}) must be a multiple of interval_hours ({interval_hours})")
    return period_hours, interval_hours


def slot_of(ts: float, interval_hours: int) -> int:
    """The slot number of epoch seconds ``ts``."""
    return int(ts // (interval_hours * 3600))


class Ranking:
    """One board: members ranked by their total over the last ``period_hours``.

    The settings are fixed by the board's first write (stored in Redis, first writer wins);
    a call with other settings for the same name raises InvalidInput and writes nothing.
    """

    def __init__(self, conn: Any, name: str, period_hours: int = 24, interval_hours: int = 1) -> None:
        self.conn = conn
        self.name = check_text(name, "board")
        self.period_hours, self.interval_hours = check_board_settings(period_hours, interval_hours)
        self.slots_in_window = period_hours // interval_hours
        tag = keys.board_tag(name)
        self._meta = keys.ranking_meta(name, tag)
        self._top = keys.ranking_top(name, tag)
        self._index = keys.ranking_slots(name, tag)
        self._slot_parts = keys.ranking_slot_parts(name, tag)
        self._tag = tag

    def __repr__(self) -> str:
        return f"Ranking({self.name!r}, period_hours={self.period_hours}, interval_hours={self.interval_hours})"

    def slot_of(self, ts: float) -> int:
        return slot_of(ts, self.interval_hours)

    @property
    def _board_keys(self) -> list[str]:
        return [self._meta, self._top, self._index]

    def _incr_call(self, events: list[tuple[str, int, int]], message_id: str | None) -> tuple[list, list]:
        """The keys and args of the one script call applying already-validated
        ``(member, amount, slot)`` events, in order."""
        slots = list(dict.fromkeys(slot for _m, _a, slot in events))
        position = {slot: n for n, slot in enumerate(slots, 1)}
        script_keys = [*self._board_keys, *(keys.ranking_slot(self.name, slot, self._tag) for slot in slots)]
        ttl = 0
        if message_id is not None:
            script_keys.append(keys.ranking_seen(self.name, message_id, self._tag))
            ttl = get_settings().dedupe_ttl
        slot_ttl = (self.period_hours + self.interval_hours) * 3600 + SLOT_TTL_GRACE
        args: list[Any] = [ttl, self.period_hours, self.interval_hours, slot_ttl, len(slots), *slots, len(events)]
        for member, amount, slot in events:
            args += [position[slot], member, amount, -amount]
        return script_keys, args

    def _register(self) -> None:
        """List the board in the registry, then mark it listed (a crash in between retries it)."""
        self.conn.zadd(keys.board_registry(keys.board_registry_shard_of(self.name)), {self.name: 0})
        self.conn.hset(self._meta, "reg", 1)

    def incr(self, member: str, amount: int = 1, now: float | None = None, *, message_id: str | None = None) -> None:
        """Add ``amount`` to ``member`` in the slot of ``now``, in one Lua call (one round trip).

        An event whose slot already left the window is ignored and counted as late. With
        ``message_id``, a second call with the same id (a redelivered task) changes nothing.
        The board's first writes also list it in the registry the rotation job walks.
        """
        self.incr_many([(member, amount, now)], message_id=message_id)

    def incr_many(self, events: list[tuple[str, int, float | None]], *, message_id: str | None = None) -> int:
        """Apply ``(member, amount, now)`` events in order, in one Lua call, as ``incr`` would one
        by one (all validated first; at most once per ``message_id``). Returns the late ones."""
        check_message_id(message_id)
        checked = []
        for member, amount, now in events:
            check_text(member, "member")
            check_amount(amount, "amount")
            checked.append((member, amount, self.slot_of(check_now(now))))
        if not checked:
            return 0
        script_keys, args = self._incr_call(checked, message_id)
        status, unregistered, late = run_script(self.conn, "ranking_incr", script_keys, args)
        if int(status) == -1:
            raise self._settings_mismatch()
        if int(unregistered):
            self._register()
        return int(late)

    def top(self, offset: int = 0, limit: int = 10, withscores: bool = False,
            now: float | None = None) -> list[str] | list[tuple[str, int]]:
        """Members by descending total over the window of ``now``, ties by ascending name.

        Only positive totals are listed. Exact for ``now`` at or after the latest rotation, even
        when expired slots are still waiting for beat: the read corrects for them, or, when they
        hold more than CORRECT_AT_MOST members and ``now`` is not ahead of the clock, rotates
        first (what beat would do). ``withscores`` gives ``(member, total)``.
        """
        check_int(offset, "offset", 0, MAX_PAGE)
        check_int(limit, "limit", 0, MAX_PAGE)
        if not isinstance(withscores, bool):
            raise InvalidInput(f"withscores must be a bool, got {type(withscores).__name__}")
        now = check_now(now)
        if limit == 0:
            return []
        now_slot = self.slot_of(now)
        # rotating on a read is what beat would do, so only for a ``now`` not ahead of the clock
        may_rotate = now_slot <= self.slot_of(time.time())
        args = [*self._slot_parts, now_slot, offset, limit, self.period_hours, self.interval_hours,
                CORRECT_AT_MOST if may_rotate else -1]
        for _attempt in range(3):
            reply = run_script(self.conn, "ranking_top", self._board_keys, args)
            if reply == -1:
                raise self._settings_mismatch()
            if reply == -2:  # a slot hash expired under its safety-net TTL: recover, then read again
                self.rebuild()
            elif int(reply[0]) == 3:  # beat is late by many members: do its work, then read cheaply
                self.rotate(now)
            else:
                break
        else:
            raise RuntimeError(f"ranking {self.name!r}: the read did not settle (slots lost or rotating)")
        kind = int(reply[0])
        if kind == 0:
            return []
        head = _pairs(reply[1])
        if kind == 2:
            corrected = [(as_str(m), int(t)) for m, t in zip(reply[2][::2], reply[2][1::2], strict=True)]
            changed = {m for m, _ in corrected}
            merged = [p for p in head if p[0] not in changed] + [p for p in corrected if p[1] > 0]
            merged.sort(key=lambda p: (-p[1], p[0]))
            head = merged[offset:offset + limit]
        if withscores:
            return head
        return [member for member, _ in head]

    def rotate(self, now: float | None = None) -> int:
        """Drop the slots that left the window of ``now``; returns how many were dropped.

        Idempotent: each member of an expired slot is subtracted in the same Lua call that
        deletes it, so a retried or duplicated run subtracts nothing twice. A board that was
        never written is left alone (nothing is written).
        """
        now = check_now(now)
        return _rotate(self.conn, self.name, self.slot_of(now), self.period_hours, self.interval_hours)

    def rebuild(self) -> int:
        """Recompute the totals from the live slot hashes (recovery); returns the members listed."""
        return rebuild(self.conn, self.name)

    def stats(self) -> dict[str, int | None]:
        """Operator figures: late events ignored, watermark and rotation slots, rebuilds, sizes."""
        pipe = self.conn.pipeline(transaction=False)
        pipe.hmget(self._meta, "period", "interval", "wm", "rot", "late", "rebuilds")
        pipe.zcard(self._index)
        pipe.zcard(self._top)
        (period, interval, wm, rot, late, rebuilds), slots, members = pipe.execute()
        if period is not None and (int(period), int(interval)) != (self.period_hours, self.interval_hours):
            raise self._settings_mismatch()
        return {
            "late": int(late or 0),
            "watermark_slot": None if wm is None else int(wm),
            "rotated_slot": None if rot is None else int(rot),
            "rebuilds": int(rebuilds or 0),
            "live_slots": int(slots),
            "members": int(members),
        }

    def _settings_mismatch(self) -> InvalidInput:
        stored = board_settings(self.conn, self.name)
        return InvalidInput(f"board {self.name!r} is fixed to (period_hours, interval_hours) = {stored}, "
                            f"not ({self.period_hours}, {self.interval_hours})")


def _pairs(flat: list) -> list[tuple[str, int]]:
    """``[member, -total, ...]`` from the totals ZSET as ``(member, total)``."""
    return [(as_str(m), -int(float(s))) for m, s in zip(flat[::2], flat[1::2], strict=True)]


def _board_keys(name: str) -> tuple[list[str], tuple[str, str]]:
    tag = keys.board_tag(name)
    board = [keys.ranking_meta(name, tag), keys.ranking_top(name, tag), keys.ranking_slots(name, tag)]
    return board, keys.ranking_slot_parts(name, tag)


def _rotate(conn: Any, name: str, now_slot: int, period_hours: int | str = "", interval_hours: int | str = "") -> int:
    """Rotate one board (settings checked unless given as ''), in as many short calls as needed."""
    board, parts = _board_keys(name)
    dropped = 0
    rebuilt = False
    while True:
        reply = run_script(conn, "ranking_rotate", board,
                           [*parts, now_slot, period_hours, interval_hours, ROTATE_BUDGET])
        if reply == -1:
            raise Ranking(conn, name, int(period_hours), int(interval_hours))._settings_mismatch()
        if int(reply[0]) == -2:
            if rebuilt:
                raise RuntimeError(f"ranking {name!r}: slots lost during rebuild")
            dropped += int(reply[1])
            rebuild(conn, name)
            rebuilt = True
            continue
        dropped += int(reply[0])
        if not int(reply[2]):
            return dropped


def rebuild(conn: Any, name: str) -> int:
    """Recompute board ``name``'s totals from its live slot hashes; returns the members listed.

    For recovery (e.g. after a slot hash expired under its safety-net TTL, or a manual repair).
    One Lua call: Redis is busy for the whole board while it runs.
    """
    check_text(name, "board")
    board, parts = _board_keys(name)
    return int(run_script(conn, "ranking_rebuild", board, list(parts)))


def board_settings(conn: Any, name: str) -> tuple[int, int] | None:
    """The fixed ``(period_hours, interval_hours)`` of board ``name``, or None before its first write."""
    period, interval = conn.hmget(keys.ranking_meta(name), "period", "interval")
    return None if period is None else (int(period), int(interval))


def known_boards(conn: Any) -> list[str]:
    """Names of every board ever written, sorted (from the registry, never KEYS or SCAN)."""
    names: set[str] = set()
    for shard in range(keys.BOARD_REGISTRY_SHARDS):
        names.update(as_str(member) for member in conn.zrange(keys.board_registry(shard), 0, -1))
    return sorted(names)


def rotate_all(conn: Any, now: float | None = None) -> int:
    """Rotate every registered board with its own settings; returns the slots dropped in all.

    This is the beat job (``counters_tasks.rotate_rankings``), hourly.
    """
    now = check_now(now)
    dropped = 0
    failed: list[str] = []
    for shard in range(keys.BOARD_REGISTRY_SHARDS):
        registry = keys.board_registry(shard)
        cursor = 0
        while True:
            cursor, page = conn.zscan(registry, cursor, count=get_settings().cleaner_batch)
            for member, _score in page:
                name = as_str(member)
                stored = board_settings(conn, name)
                if stored is None:
                    continue
                try:
                    dropped += _rotate(conn, name, slot_of(now, stored[1]))
                except RuntimeError:  # one broken board does not hold the others back
                    log.exception("rotating ranking %r failed", name)
                    failed.append(name)
            if int(cursor) == 0:
                break
    if failed:
        raise RuntimeError(f"rotation failed for {len(failed)} board(s): {failed[:10]!r}")
    return dropped


RANKING_EVENT_FIELDS = frozenset({"board", "member", "amount", "ts", "period_hours", "interval_hours"})
EVENTS_PER_CALL = 500
"""Ranking events per Lua call of a batch, so no call runs long."""


def prepare_events(conn: Any, events: Any) -> dict[Ranking, list[tuple[str, int, float]]]:
    """Validate an ``incr_rankings`` payload (dicts with board, member[, amount, ts, period_hours,
    interval_hours]) against each board's stored settings; returns the events by board, in order."""
    if not isinstance(events, list):
        raise InvalidInput(f"events must be a list, got {type(events).__name__}")
    by_board: dict[Ranking, list[tuple[str, int, float]]] = {}
    boards: dict[str, Ranking] = {}
    for n, event in enumerate(events):
        if not isinstance(event, dict):
            raise InvalidInput(f"event {n} must be a dict, got {type(event).__name__}")
        unknown = set(event) - RANKING_EVENT_FIELDS
        if unknown or "board" not in event or "member" not in event:
            raise InvalidInput(f"event {n} needs board and member, and only {sorted(RANKING_EVENT_FIELDS)}")
        try:
            board = Ranking(conn, event["board"], event.get("period_hours", 24), event.get("interval_hours", 1))
            member = check_text(event["member"], "member")
            amount = check_amount(event.get("amount", 1), "amount")
            ts = check_now(event.get("ts"))
        except InvalidInput as exc:
            raise InvalidInput(f"event {n}: {exc}") from None
        known = boards.setdefault(board.name, board)
        if (known.period_hours, known.interval_hours) != (board.period_hours, board.interval_hours):
            raise InvalidInput(f"event {n}: board {board.name!r} given two different settings in one batch")
        by_board.setdefault(known, []).append((member, amount, ts))
    for board in by_board:
        stored = board_settings(conn, board.name)
        if stored is not None and stored != (board.period_hours, board.interval_hours):
            raise board._settings_mismatch()
    return by_board


def incr_events(conn: Any, events: list[dict[str, Any]], *, message_id: str | None = None) -> int:
    """Many ranking events in one round trip, at most once per ``message_id`` (the batch id);
    all validated before anything is written. Returns the number of events applied or late."""
    check_message_id(message_id)
    by_board = prepare_events(conn, events)
    calls = []
    for board, board_events in by_board.items():
        for first in range(0, len(board_events), EVENTS_PER_CALL):
            chunk = [(m, a, board.slot_of(ts)) for m, a, ts in board_events[first:first + EVENTS_PER_CALL]]
            calls.append((board, chunk))
    ids = [None if message_id is None else f"{message_id}#{n}" for n in range(len(calls))]

    def queue(pipe: Any) -> None:
        for (board, chunk), call_id in zip(calls, ids, strict=True):
            script_keys, args = board._incr_call(chunk, call_id)
            run_script(conn, "ranking_incr", script_keys, args, client=pipe)

    [replies] = execute_in_order(conn, queue)
    for (board, _chunk), (_status, unregistered, _late) in zip(calls, replies, strict=True):
        if int(unregistered):
            board._register()
    return sum(len(chunk) for _board, chunk in calls)
