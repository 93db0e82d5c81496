"""Sliding-window rankings (docs/design.md): e.g. posts by likes over the last 24 hours.

A board keeps one HASH per time slot (member -> amount added in that slot), an index of its
live slots, and one ZSET with every member's total over the live slots, all under the board's
hash tag. Every write is one Lua call that keeps the invariant "top = sum of the indexed slots",
so a reader or a rotation never sees half a bump:

- ``incr`` adds to the slot of the bump's own ``now`` (a task that waited in the queue still
  expires on time). The board's watermark is the newest slot it has seen or been rotated to; an
  bump whose slot is not among the last ``period // interval`` slots up to the watermark is
  late: ignored, and counted (``stats()["late"]``).
- ``rotate`` moves the rotation point forward to the window of its ``now`` and subtracts every
  expired slot from the totals, member by member in the same calls that delete them from the slot,
  so a repeated or concurrent rotation subtracts nothing twice.
- ``top`` reads the totals; slots of the index outside the window of its ``now`` (beat is late,
  or bumps came from ahead of ``now``) are corrected for in the same read, so the answer is exact
  for any ``now`` at or after the latest rotation, whether or not beat has run.

The totals ZSET stores minus the total, so Redis's own ascending order is "highest total first,
ties by ascending member name (UTF-8 byte order, which is code point order)": pages never
overlap. A slot hash has a TTL as a safety net only (the window + 2 days, refreshed on each
write to it); if one ever expires before beat rotated it, the next rotation or read sees its
index entry without a hash and rebuilds the totals from the live slots, which still holds every
in-window bump (an expired slot is always days out of the window).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

from redis.exceptions import ResponseError

from . import throughput
from .boards import Board, RankingBump, bump_on, check_board, slot_of  # noqa: F401  (slot_of: the module's API)
from .core import table
from .core.settings import get_settings
from .core.sites import check_site
from .core.validation import check_int, check_message_id, check_now, check_text
from .errors import BoardSettingsConflict, InvalidInput
from .store import keys, registry
from .store.client import RedisClient, as_str, is_transient
from .store.scripts import WritePlan, run_script, write_through

log = logging.getLogger(__name__)

MAX_PAGE = 10**9
SLOT_TTL_GRACE = 2 * 86400
"""Seconds a slot hash outlives its window (so it expires only if beat is down for two days)."""
ROTATE_BUDGET = 40
"""Members one rotation call subtracts at most (a big slot takes several short calls)."""
CORRECT_AT_MOST = 500
"""Members of expired, not yet rotated slots that a read corrects for; past that it rotates first."""
REBUILD_BUDGET = 100
"""Slot reads one rebuild step makes at most (a member costs one read per live slot)."""
DELETE_BUDGET = 500
"""Slot hashes one deletion step unlinks at most."""
PAGE_PER_CALL = 500
"""Members one ``top`` read returns at most; a bigger page is read in several calls."""
BUSY = -5
"""What a ranking script answers while the board is being rebuilt or deleted."""


def _incr_call(board: Board, bumps: Sequence[RankingBump], message_id: str | None) -> tuple[list, list]:
    """The keys and args of the one ``ranking_incr`` call applying ``bumps`` (all of ``board``), in order."""
    tag = keys.board_tag(board.name)
    slots = list(dict.fromkeys(bump.slot for bump in bumps))
    position = {slot: n for n, slot in enumerate(slots, 1)}
    script_keys = [*_board_keys(board.name, tag)[0], *(keys.ranking_slot(board.name, slot, tag=tag) for slot in slots)]
    ttl = 0
    if message_id is not None:
        script_keys.append(keys.ranking_seen(board.name, message_id, tag=tag))
        ttl = get_settings().dedupe_ttl
    slot_ttl = (board.period_hours + board.interval_hours) * 3600 + SLOT_TTL_GRACE
    clock_slot = board.slot_of(time.time())
    args: list[Any] = [
        ttl,
        board.period_hours,
        board.interval_hours,
        slot_ttl,
        clock_slot,
        len(slots),
        *slots,
        len(bumps),
    ]
    for bump in bumps:
        args += [position[bump.slot], bump.member, bump.amount, -bump.amount]
    return script_keys, args


def register_board(conn: RedisClient, name: str) -> None:
    """List the board in the registry, then mark it listed (a crash in between retries it)."""
    with keys.bound(conn, write=True):
        conn.zadd(keys.board_registry(keys.board_registry_shard_of(name)), {name: 0})
        conn.hset(keys.ranking_meta(name), "reg", 1)


def settings_mismatch(conn: RedisClient, board: Board) -> BoardSettingsConflict:
    """The error for bumps given other settings than the ones ``board.name`` is fixed to."""
    stored = board_settings(conn, board.name)
    return BoardSettingsConflict(
        f"board {board.name!r} is fixed to (period_hours, interval_hours) = {stored}, "
        f"not ({board.period_hours}, {board.interval_hours})"
    )


def write_bumps(
    plan: WritePlan, calls: Sequence[tuple[Sequence[RankingBump], str | None]], tally: throughput.Tally | None = None
) -> Callable[[], list[int | InvalidInput]]:
    """Queue calls of prepared bumps on ``plan`` (the write's one round trip), one Lua call each
    (every bump of a call of one board), each call at most once per its message id. Returns how to
    read the outcome once sent: per call, the number of its bumps that were late (ignored), or the
    InvalidInput refusing it when its board is fixed to other settings (then nothing of that call
    was written). A board being rebuilt or deleted is finished, then its calls sent again; boards
    written for the first time are listed in the registry the rotation job walks. ``tally``, when
    given, gets the bumps applied now (late ones are not) and those skipped because their message
    was applied before."""
    conn = plan.conn
    calls = [(bumps, message_id) for bumps, message_id in calls]
    for bumps, _message_id in calls:
        if not bumps or any(bump.board != bumps[0].board for bump in bumps):
            raise ValueError("every call holds bumps of exactly one board")

    def queue(pipe: Any, some: Sequence[tuple[Sequence[RankingBump], str | None]]) -> None:
        for bumps, message_id in some:
            script_keys, args = _incr_call(bumps[0].board, bumps, message_id)
            run_script(conn, "ranking_incr", script_keys, args, client=pipe)

    replies: list[Any] = []
    plan.add(functools.partial(queue, some=calls), replies.extend)

    def outcome() -> list[int | InvalidInput]:
        for _attempt in range(3):  # a board being rebuilt or deleted: finish that, then send again
            busy = [n for n, (status, _u, _l) in enumerate(replies) if int(status) == BUSY]
            if not busy:
                break
            for name in {calls[n][0][0].board.name for n in busy}:
                finish_maintenance(conn, name)
            again, resent = WritePlan(conn), list[Any]()
            again.add(functools.partial(queue, some=[calls[n] for n in busy]), resent.extend)
            again.run()
            for n, reply in zip(busy, resent, strict=True):
                replies[n] = reply
        results: list[int | InvalidInput] = []
        registered: set[str] = set()
        for (bumps, _message_id), (status, unregistered, late) in zip(calls, replies, strict=True):
            board = bumps[0].board
            if int(status) == BUSY:
                raise RuntimeError(f"ranking {board.name!r} stays busy (rebuilt or deleted by others)")
            if int(status) == -1:
                results.append(settings_mismatch(conn, board))
                continue
            if tally is not None:
                tally.add(0, len(bumps)) if int(status) == 0 else tally.add(len(bumps) - int(late), 0)
            if int(unregistered) and board.name not in registered:
                registered.add(board.name)
                register_board(conn, board.name)
            results.append(int(late))
        return results

    return outcome


class Ranking:
    """One board: members ranked by their total over the last ``period_hours``.

    The settings are fixed by the board's first write (stored in Redis, first writer wins);
    a call with other settings for the same name raises InvalidInput and writes nothing.
    """

    def __init__(
        self, conn: RedisClient, name: str, period_hours: int = 24, interval_hours: int = 1, *, site: str | None = None
    ) -> None:
        self.conn = conn
        self.board = check_board(name, period_hours, interval_hours, site)
        self.name = name
        self.site = site
        self.period_hours, self.interval_hours = self.board.period_hours, self.board.interval_hours
        self.slots_in_window = self.board.slots_in_window

    def _keys(self) -> tuple[list[str], tuple[str, str]]:
        """The board's keys and slot-key parts, made with the deployment's tag key of now (a
        long-lived board object follows a tag key put back after a loss)."""
        with keys.bound(self.conn):
            return _board_keys(self.board.name)

    def __repr__(self) -> str:
        return f"Ranking({self.name!r}, period_hours={self.period_hours}, interval_hours={self.interval_hours})"

    def slot_of(self, ts: float) -> int:
        return self.board.slot_of(ts)

    def incr(self, member: str, amount: int = 1, now: float | None = None, *, message_id: str | None = None) -> None:
        """Add ``amount`` to ``member`` in the slot of ``now``, in one Lua call (one round trip).

        A bump whose slot already left the window is ignored and counted as late. With
        ``message_id``, a second call with the same id (a redelivered task) changes nothing.
        The board's first writes also list it in the registry the rotation job walks.
        """
        self.incr_many([(member, amount, now)], message_id=message_id)

    def incr_many(self, bumps: list[tuple[str, int, float | None]], *, message_id: str | None = None) -> int:
        """Apply ``(member, amount, now)`` bumps in order, in one Lua call, as ``incr`` would one
        by one (all validated first; at most once per ``message_id``). Returns the late ones."""
        check_message_id(message_id)
        prepared = [bump_on(self.board, member, amount, now, "now") for member, amount, now in bumps]
        if not prepared:
            return 0
        [result] = write_through(self.conn, lambda plan: write_bumps(plan, [(prepared, message_id)]))
        if isinstance(result, InvalidInput):
            raise result
        return result

    def top(
        self, offset: int = 0, limit: int = 10, withscores: bool = False, now: float | None = None
    ) -> list[str] | list[tuple[str, int]]:
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
        pairs: list[tuple[str, int]] = []
        while len(pairs) < limit:  # pages of PAGE_PER_CALL, so no read runs long
            want = min(PAGE_PER_CALL, limit - len(pairs))
            page = self._top_page(offset + len(pairs), want, now)
            pairs += page
            if len(page) < want:
                break
        return pairs if withscores else [member for member, _ in pairs]

    def _top_page(self, offset: int, limit: int, now: float) -> list[tuple[str, int]]:
        """One bounded read of ``top``: ``(member, total)`` pairs."""
        if limit == 0:
            return []
        now_slot = self.slot_of(now)
        board_keys, slot_parts = self._keys()
        # rotating on a read is what beat would do, so only for a ``now`` not ahead of the clock
        may_rotate = now_slot <= self.slot_of(time.time())
        args = [*slot_parts, now_slot, offset, limit, self.period_hours, self.interval_hours, CORRECT_AT_MOST]
        rotated = False
        for _attempt in range(3):
            reply = run_script(self.conn, "ranking_top", board_keys, args)
            if reply == -1:
                raise settings_mismatch(self.conn, self.board)
            if reply == BUSY:
                finish_maintenance(self.conn, self.board.name)
            elif reply == -2:  # a slot hash expired under its safety-net TTL: recover, then read again
                self.rebuild()
            elif int(reply[0]) == 3 and may_rotate and not rotated:  # beat is late: do its work, read again
                self.rotate(now)
                rotated = True
            elif int(reply[0]) == 3:  # slots ahead of ``now``, or ``now`` ahead of the clock: read in parts
                return self._corrected_in_parts(offset, limit, now_slot)
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
            head = merged[offset : offset + limit]
        return head

    def _corrected_in_parts(self, offset: int, limit: int, now_slot: int) -> list[tuple[str, int]]:
        """``top`` for a window whose slots out of it hold more than CORRECT_AT_MOST members and
        cannot be rotated (ahead of ``now``, or ``now`` ahead of the clock): those slots read with
        HSCAN and the head of the totals by rank, in pages of PAGE_PER_CALL, merged here. Exact:
        a member whose total does not change keeps its order, so it is among the first
        ``offset + limit + len(changed)`` by rank if it belongs to the page."""
        conn, (board_keys, slot_parts) = self.conn, self._keys()
        first_in, head_part, tail_part = now_slot - self.slots_in_window + 1, *slot_parts
        outside = [int(as_str(s)) for s in conn.zrange(board_keys[2], 0, -1)]
        outside = [s for s in outside if s < first_in or s > now_slot]
        change: dict[str, int] = {}
        for slot in outside:
            for member, amount in conn.hscan_iter(f"{head_part}{slot}{tail_part}", count=PAGE_PER_CALL):
                change[as_str(member)] = change.get(as_str(member), 0) + int(amount)
        totals: dict[str, int] = {}
        need = offset + limit + len(change)
        for start in range(0, need, PAGE_PER_CALL):
            page = cast(
                list[tuple[Any, float]],
                conn.zrange(board_keys[1], start, min(start + PAGE_PER_CALL, need) - 1, withscores=True),
            )
            totals.update((as_str(m), -int(s)) for m, s in page)
            if len(page) < PAGE_PER_CALL:
                break
        changed = list(change)
        for start in range(0, len(changed), PAGE_PER_CALL):
            part = changed[start : start + PAGE_PER_CALL]
            for member, score in zip(part, conn.zmscore(board_keys[1], part), strict=True):
                totals[member] = -int(score or 0) - change[member]
        ranked = sorted(((m, t) for m, t in totals.items() if t > 0), key=lambda p: (-p[1], p[0]))
        return ranked[offset : offset + limit]

    def rotate(self, now: float | None = None) -> int:
        """Drop the slots that left the window of ``now``; returns how many were dropped.

        Idempotent: each member of an expired slot is subtracted in the same Lua call that
        deletes it, so a retried or duplicated run subtracts nothing twice. A board that was
        never written is left alone (nothing is written).
        """
        now = check_now(now)
        return _rotate(self.conn, self.board.name, self.slot_of(now), self.period_hours, self.interval_hours)

    def rebuild(self) -> int:
        """Recompute the totals from the live slot hashes (recovery); returns the members listed."""
        return _rebuild(self.conn, self.board.name)

    def stats(self) -> dict[str, int | None]:
        """Operator figures: late bumps ignored, watermark and rotation slots, rebuilds, sizes."""
        with keys.bound(self.conn):
            pipe = self.conn.pipeline(transaction=False)
            pipe.hmget(keys.ranking_meta(self.board.name), "period", "interval", "wm", "rot", "late", "rebuilds")
            pipe.zcard(keys.ranking_slots(self.board.name))
            pipe.zcard(keys.ranking_top(self.board.name))
            (period, interval, wm, rot, late, rebuilds), slots, members = pipe.execute()
            if period is not None and (int(period), int(interval)) != (self.period_hours, self.interval_hours):
                raise settings_mismatch(self.conn, self.board)
            return {
                "late": int(late or 0),
                "watermark_slot": None if wm is None else int(wm),
                "rotated_slot": None if rot is None else int(rot),
                "rebuilds": int(rebuilds or 0),
                "live_slots": int(slots),
                "members": int(members),
            }


def _pairs(flat: list) -> list[tuple[str, int]]:
    """``[member, -total, ...]`` from the totals ZSET as ``(member, total)``."""
    return [(as_str(m), -int(float(s))) for m, s in zip(flat[::2], flat[1::2], strict=True)]


def _board_keys(name: str, tag: str | None = None) -> tuple[list[str], tuple[str, str]]:
    """The board's meta, totals and slot index keys, and the two halves of its slot hash names."""
    tag = tag or keys.board_tag(name)
    board = [keys.ranking_meta(name, tag=tag), keys.ranking_top(name, tag=tag), keys.ranking_slots(name, tag=tag)]
    return board, keys.ranking_slot_parts(name, tag=tag)


def _rotate(
    conn: RedisClient, name: str, now_slot: int, period_hours: int | str = "", interval_hours: int | str = ""
) -> int:
    """Rotate one board (settings checked unless given as ''), in as many short calls as needed."""
    with keys.bound(conn, write=True):
        board, parts = _board_keys(name)
        dropped = 0
        rebuilt = False
        while True:
            reply = run_script(
                conn, "ranking_rotate", board, [*parts, now_slot, period_hours, interval_hours, ROTATE_BUDGET]
            )
            if reply == BUSY:
                finish_maintenance(conn, name)
                continue
            if reply == -1:
                raise settings_mismatch(conn, Board(name, int(period_hours), int(interval_hours)))
            if int(reply[0]) == -2:
                if rebuilt:
                    raise RuntimeError(f"ranking {name!r}: slots lost during rebuild")
                dropped += int(reply[1])
                _rebuild(conn, name)
                rebuilt = True
                continue
            dropped += int(reply[0])
            if not int(reply[2]):
                return dropped


def _work_keys(name: str) -> tuple[list[str], tuple[str, str]]:
    """The board's keys as the rebuild and delete scripts take them, and its slot name halves."""
    tag = keys.board_tag(name)
    board, parts = _board_keys(name, tag)
    return [*board, keys.ranking_rebuild_top(name, tag=tag), keys.ranking_rebuild_done(name, tag=tag)], parts


def rebuild(conn: RedisClient, name: str, *, site: str | None = None) -> int:
    """Recompute board ``name``'s totals from its live slot hashes; returns the members listed.

    For recovery (e.g. after a slot hash expired under its safety-net TTL, or a manual repair).
    In bounded steps (REBUILD_BUDGET slot reads each), so Redis serves other clients in between;
    meanwhile the board's writes, reads and rotations finish the rebuild first. ``site``: whose
    board (None: the default site's).
    """
    check_text(name, "board")
    return _rebuild(conn, keys.scoped(check_site(site), name))


def _rebuild(conn: RedisClient, name: str) -> int:
    """``rebuild`` of the board of scoped name ``name``."""
    with keys.bound(conn, write=True):
        board, parts = _work_keys(name)
        while True:
            finished, listed = run_script(conn, "ranking_rebuild", board, [*parts, REBUILD_BUDGET])
            if int(finished):
                return int(listed)


def delete_board(conn: RedisClient, name: str, *, site: str | None = None) -> bool:
    """Delete board ``name`` (of ``site``; None: the default site) and every key of it, in
    bounded steps; False when there was none.

    Its writes, reads and rotations meanwhile finish the deletion first; a write after it starts
    a new board (with the settings it is given)."""
    check_text(name, "board")
    return _delete_board(conn, keys.scoped(check_site(site), name))


def _delete_board(conn: RedisClient, name: str) -> bool:
    """``delete_board`` of the board of scoped name ``name``."""
    with keys.bound(conn, write=True):
        existed = bool(conn.exists(keys.ranking_meta(name)))
        board, parts = _work_keys(name)
        while not int(run_script(conn, "ranking_delete", board, [*parts, DELETE_BUDGET])):
            pass
        registry_key = keys.board_registry(keys.board_registry_shard_of(name))
        conn.zrem(registry_key, name)
        if conn.exists(keys.ranking_meta(name)):  # written again meanwhile: keep it listed
            conn.zadd(registry_key, {name: 0})
        return existed


def finish_maintenance(conn: RedisClient, name: str) -> None:
    """Finish a rebuild or deletion of board ``name`` that another client started (or left)."""
    with keys.bound(conn):
        deleting, rebuilding = conn.hmget(keys.ranking_meta(name), "del", "rb")
        if deleting is not None:
            _delete_board(conn, name)
        elif rebuilding is not None:
            _rebuild(conn, name)


def board_settings(conn: RedisClient, name: str) -> tuple[int, int] | None:
    """The fixed ``(period_hours, interval_hours)`` of board ``name``, or None before its first write."""
    with keys.bound(conn):
        period, interval = conn.hmget(keys.ranking_meta(name), "period", "interval")
        return None if period is None or interval is None else (int(period), int(interval))


def known_boards(conn: RedisClient, *, site: str | None = None) -> list[str]:
    """Names of every board of ``site`` (None: the default site) ever written, sorted (from the
    registry, never KEYS or SCAN)."""
    scope = check_site(site)
    names = (keys.unscoped(scope, name) for name in registry.all_names(conn, keys.board_registries()))
    return sorted(name for name in names if name is not None)


def idle_for(period_hours: int) -> float | None:
    """Seconds without a write after which a board with this period is deleted: the longer of
    COUNTERS_BOARD_IDLE_DAYS and the period (so no bump still in its window goes); None: never."""
    days = get_settings().board_idle_days
    return None if days == 0 else max(days * 86400, period_hours * 3600)


def rotate_all(conn: RedisClient, now: float | None = None) -> int:
    """Rotate every registered board with its own settings, and delete the boards idle for
    ``idle_for`` their period (no write for that long as of ``now``); returns the slots dropped.

    This is the beat job (``counters_tasks.rotate_rankings``), hourly.
    """
    now = check_now(now)
    with keys.bound(conn, write=True):
        dropped = 0
        failed: list[str] = []
        for _shard_key, names in registry.walk(conn, keys.board_registries(), get_settings().cleaner_batch):
            for name in names:
                period, interval, last_write = conn.hmget(keys.ranking_meta(name), "period", "interval", "lw")
                if period is None or interval is None:
                    continue
                idle = idle_for(int(period))
                written = (
                    None if last_write is None else (int(last_write) + 1) * int(interval) * 3600
                )  # end of that slot
                if idle is not None and written is not None and written < now - idle:
                    log.info("ranking %r has had no write for %.0f days: deleted", name, (now - written) / 86400)
                    _delete_board(conn, name)
                    continue
                try:
                    dropped += _rotate(conn, name, slot_of(now, int(interval)))
                except (RuntimeError, ResponseError) as exc:  # one broken board does not hold the others back
                    if isinstance(exc, ResponseError) and is_transient(exc):  # Redis busy: the whole job waits
                        raise
                    log.exception("rotating ranking %r failed", name)  # e.g. a key changed by hand (WRONGTYPE)
                    failed.append(name)
        if failed:
            raise RuntimeError(f"rotation failed for {len(failed)} board(s): {failed[:10]!r}")
        return dropped


BOARDS = table.register(
    table.Table(
        name="rankings",
        what="sliding-window boards: a hash a time slot, a totals zset a board, its settings and the board registry",
        module=__name__,
        keys=(
            table.StoredKey("ct:rank:{tag(board)}:meta:<board>", "HASH"),
            table.StoredKey("ct:rank:{tag(board)}:top:<board>", "ZSET"),
            table.StoredKey("ct:rank:{tag(board)}:slots:<board>", "ZSET"),
            table.StoredKey("ct:rank:{tag(board)}:s:<slot>:<board>", "HASH"),
            table.StoredKey("ct:rank:{tag(board)}:rebuild:<board>", "ZSET"),
            table.StoredKey("ct:rank:{tag(board)}:rebuilt:<board>", "SET"),
            table.StoredKey("ct:boards:{b<0..15>}", "ZSET"),
        ),
        tag="the board's (one a board); the registry in 16 shards",
        fed_by=("ranking",),
        writers=(
            "store/lua/ranking_incr.lua",
            "store/lua/ranking_rotate.lua (rotate_rankings, beat, hourly)",
            "delete_board (counters-tasks delete-board)",
        ),
        readers=("Ranking.top", "ranking.known_boards", "counters-tasks top", "the dashboard's rankings"),
        retention=table.Retention(
            "a board's window (period_hours), each slot rotated out hourly; an idle board deleted after COUNTERS_BOARD_IDLE_DAYS",
            "COUNTERS_BOARD_IDLE_DAYS",
            lambda settings: settings.board_idle_days,
        ),
        erasure=table.Erasure(
            "nothing of a visitor",
            False,
            "members are what the app names (posts, products), amounts by slot: no visitor id",
        ),
    )
)
"""The boards' table (``core.table``)."""
