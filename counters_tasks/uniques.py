"""Daily unique visitors (docs/design.md): session ids in sharded integer sets, exact daily counts.

The id is the integer of a session UUID's first 15 hex digits (60 bits), so members are
integers and each shard, kept at most 512 members, stays an intset (8 bytes a member). The
number of shards of a day comes from its "expected uniques" figure, fixed once per day (first
writer wins, in Lua) so a day's layout never changes. A day with fewer than ~86 uniques the day
before still gets one shard (a plain ``expected // 512`` would give zero shards and divide by it).
SADD and INCR of the day's count run in one Lua call.
"""

from __future__ import annotations

import functools
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import date, datetime, timedelta
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

from . import refusals
from .core import days, table
from .core.days import local_day
from .core.kind import Kind, register
from .core.settings import get_settings
from .core.sites import check_site, site_names, zone_of
from .core.validation import check_day, check_day_range, check_item_time, check_message_id, check_now
from .core.visitors import SESSION_DIGITS, session_number, short_session_id  # noqa: F401  (the contract's: made there)
from .store import day_registry, keys, sweeps
from .store.client import RedisClient, as_str, read_pipeline
from .store.scripts import WritePlan, run_script, write_through

SHARD_SIZE = 512
"""Members a shard is sized for; Redis keeps a set of integers an intset up to 512 members."""
LEVEL_FANOUT = 16
"""Sets of each level of a full shard: level l has LEVEL_FANOUT ** l (``unique_visit.lua``'s FANOUT)."""
DAILY_EXPECTED = 1_000_000
"""The expected figure of a day with no history (no count the day before)."""

_expected_cache: dict[str, int] = {}


def expected_from_count(previous: int | None) -> int:
    """The previous day's count x 1.5 rounded up to the next power of two; 1,000,000 with no history."""
    if not previous or previous < 1:
        return DAILY_EXPECTED
    target = (3 * previous + 1) // 2  # ceil(previous * 1.5), exact
    return 1 << (target - 1).bit_length()


def shard_count(expected: int) -> int:
    """Shards of a day: about SHARD_SIZE / 2 members each at the expected figure, never zero."""
    return max(1, 2 * expected // SHARD_SIZE)


def shard_of(number: int, expected: int) -> int:
    """The shard of an id, as the original design does (CRC32 of ``'x' + id``: ids are not dense)."""
    return _shard(number, shard_count(expected))


def _shard(number: int, shards: int) -> int:
    return zlib.crc32(b"x%d" % number) % shards


def shard_days() -> int:
    """Days a day's shards are kept: COUNTERS_UNIQUES_SHARD_DAYS."""
    return get_settings().uniques_shard_days


def count_days() -> int:
    """Days a day's count and figure are kept: COUNTERS_UNIQUES_COUNT_DAYS (never fewer than the shards')."""
    settings = get_settings()
    return max(settings.uniques_count_days, settings.uniques_shard_days)


def shards_expire_at(day: date, site: str = "") -> int:
    """The day-based end of a day's shards: COUNTERS_UNIQUES_SHARD_DAYS after its end. A day
    first written later (a back-fill) keeps them that long after its first write instead."""
    return days.kept_until(day, shard_days(), zone_of(site))


def count_expire_at(day: date, site: str = "") -> int:
    """The day-based end of a day's count: COUNTERS_UNIQUES_COUNT_DAYS after its end, or that
    long after its latest write when later."""
    return days.kept_until(day, count_days(), zone_of(site))


def _fix_expected(conn: RedisClient, day: date, site: str) -> int:
    previous = conn.get(keys.uniques_count(day - timedelta(days=1), site=site))
    figure = expected_from_count(int(previous) if previous is not None else None)
    fixed = int(
        run_script(
            conn,
            "unique_expected",
            [keys.uniques_expected(day, site=site)],
            [figure, count_expire_at(day, site), days.kept_from_now(count_days())],
        )
    )
    _remember(day, site, fixed)
    return fixed


def _remember(day: date, site: str, figure: int) -> None:
    if len(_expected_cache) > 64:
        _expected_cache.clear()
    _expected_cache[keys.uniques_expected(day, site=site)] = figure


def precompute_expected(conn: RedisClient, day: date, *, site: str | None = None) -> int:
    """Fix (first writer wins) and return ``day``'s expected-uniques figure (of ``site``: None
    for the default site)."""
    scope = check_site(site)
    with keys.bound(conn, write=True):
        return _fix_expected(conn, check_day(day), scope)


def expected_for(conn: RedisClient, day: date, site: str = "") -> int:
    """The day's fixed figure: from this process's memory, else Redis, else fixed now."""
    with keys.bound(conn):
        cached = _expected_cache.get(keys.uniques_expected(day, site=site))
        if cached is not None:
            return cached
        stored = conn.get(keys.uniques_expected(day, site=site))
        if stored is not None:
            _remember(day, site, int(stored))
            return int(stored)
        return _fix_expected(conn, day, site)


def forget_expected() -> None:
    """Drop this process's memory of fixed figures (they are re-read from Redis when needed)."""
    _expected_cache.clear()


def queue_ids(
    conn: RedisClient,
    pipe: Any,
    day: date,
    numbers: Iterable[int],
    expected: int,
    message_id: str | None,
    site: str = "",
) -> None:
    """Queue the one script call that adds ``numbers`` to ``day``'s shards (of site ``site``, a
    scope) laid out for ``expected``."""
    with keys.bound(conn, write=True):
        tag = keys.uniques_tag(day, site)
        per_shard: dict[int, list[int]] = defaultdict(list)
        shards = shard_count(expected)
        for number in numbers:
            per_shard[_shard(number, shards)].append(number)
        script_keys = [
            keys.uniques_expected(day, tag=tag, site=site),
            keys.uniques_count(day, tag=tag, site=site),
            keys.uniques_open(day, tag=tag, site=site),
            keys.uniques_overflow(day, tag=tag, site=site),
            keys.uniques_levels(day, tag=tag, site=site),
        ]
        ttl = get_settings().dedupe_ttl if message_id is not None else 0
        args: list[Any] = [
            ttl,
            expected,
            shards_expire_at(day, site),
            days.kept_from_now(shard_days()),
            count_expire_at(day, site),
            days.kept_from_now(count_days()),
            len(per_shard),
        ]
        ordered = sorted(per_shard.items())
        script_keys += keys.uniques_shards(day, [shard for shard, _members in ordered], tag=tag, site=site)
        for shard, members in ordered:
            args += [shard, len(members), *members]
        if ttl and message_id is not None:
            script_keys.append(keys.uniques_seen(day, message_id, tag=tag, site=site))
        run_script(conn, "unique_visit", script_keys, args, client=pipe)


def add_ids(
    plan: WritePlan,
    day: date,
    numbers: list[int],
    expected: int,
    message_id: str | None,
    site: str,
    read: Callable[[list[Any]], None],
    *,
    note: bool = True,
) -> None:
    """``queue_ids`` of these ids as a part of ``plan``, its one reply handed to ``read`` once sent
    (``apply_ids`` takes it: a day whose figure moved is sent again); with ``note``, the site's day
    noted in the day registry (``store.day_registry``) in the same round trip (a visit's write
    notes its days with the site's day tables: ``note=False`` there)."""
    queue = functools.partial(
        queue_ids, plan.conn, day=day, numbers=numbers, expected=expected, message_id=message_id, site=site
    )
    plan.add(queue, read)
    if note:
        plan.add(functools.partial(day_registry.queue_note, days=[(site, day)]))


CLOSED = -1
"""What ``apply_ids`` returns for ids of a closed day (counted nowhere: they cannot be deduplicated)."""


def apply_ids(
    conn: RedisClient, day: date, numbers: list[int], message_id: str | None, reply: Any = None, site: str = ""
) -> int:
    """Add ids to a day, in one script call; ``reply`` is that call's reply when already sent in a
    pipeline. A reply saying the day's figure is not the one used (first use of the day, another
    writer fixed it, or data flushed) makes it re-read or fix the figure and send again.
    Returns the number of new ids, or CLOSED when the day's shards have expired (the day was
    counted, then closed ``COUNTERS_UNIQUES_SHARD_DAYS`` after its end or its back-fill): the
    ids are not counted, and the caller reports them (``refusals.count_partial``).
    """
    with keys.bound(conn, write=True):
        for _ in range(3):
            if reply is None:
                expected = expected_for(conn, day, site)
                plan, replies = WritePlan(conn), list[Any]()  # (a NOSCRIPT reply loads the script)
                add_ids(plan, day, numbers, expected, message_id, site, replies.extend)
                plan.run()
                [reply] = replies
            result = int(reply)
            if result == -2:
                return CLOSED
            if result != -1:
                return result
            _expected_cache.pop(keys.uniques_expected(day, site=site), None)
            reply = None
        raise RuntimeError(f"the expected figure of {day.isoformat()} keeps changing")  # pragma: no cover


def prepare_id(session_id: Any, ts: Any = None, site: Any = None) -> tuple[date, int]:
    """Validate one sighting (raises InvalidInput; writes nothing): its site's local day and
    integer id."""
    session_number(session_id)  # (checked first: a bad id is refused as before)
    day = local_day(check_item_time(ts), zone_of(check_site(site)))
    return day, session_number(session_id, day)  # (keyed by the day with COUNTERS_VISITOR_KEY=daily)


UNIQUE = register(
    Kind(name="unique", fields=("session_id", "ts", "site"), required=1, item_task="counters_tasks.count_unique")
)
"""A session seen on its day, one a ``count_unique`` message."""


def count_visit(
    conn: RedisClient,
    session_id: str,
    now: float | None = None,
    *,
    message_id: str | None = None,
    site: str | None = None,
) -> bool:
    """Mark the session as seen on ``now``'s local day; True when it is new for that day.

    Any past day is accepted: a day never counted is opened by its first id. A day whose shards
    have expired is closed: the id is not counted (False) and is reported as ``closed_day``.
    With ``message_id``, a second call with the same id (a redelivered task) changes nothing.
    ``site``: a site of ``COUNTERS_SITES`` (None: the default site); its day is in its zone.
    """
    check_message_id(message_id)
    scope = check_site(site)
    day, number = prepare_id(session_id, check_item_time(now, "now"), scope)  # the contract names it now

    def queue(plan: WritePlan) -> Callable[[], bool]:
        replies: list[Any] = []
        add_ids(plan, day, [number], expected_for(conn, day, scope), message_id, scope, replies.extend)

        def outcome() -> bool:
            new = apply_ids(conn, day, [number], message_id, replies[0], site=scope)
            if new == CLOSED:
                refusals.count_partial(conn, "count_unique", message_id, 1)
            return new > 0

        return outcome

    return write_through(conn, queue)


def unique_visitors(conn: RedisClient, day: date, *, site: str | None = None) -> int:
    """Exact number of distinct session ids seen on ``day`` (of ``site``: None for the default)."""
    scope = check_site(site)
    with keys.bound(conn):
        value = conn.get(keys.uniques_count(check_day(day), site=scope))
        return int(as_str(value)) if value is not None else 0


def precompute_due(conn: RedisClient, now: float | None = None) -> dict[str, int]:
    """The beat job (hourly): fix today's figure when missing, and tomorrow's from local 23:00 on.

    Each site's days are in its own zone, so each site's "23:00" comes at its own hour. Returns
    the figures fixed (or found), by ISO day, prefixed ``<site>:`` for a site other than the
    default one.
    """
    now = check_now(now)
    done = {}
    for name in site_names():
        scope = check_site(name)
        zone = zone_of(scope)
        label = f"{scope}:" if scope else ""
        today = local_day(now, zone)
        done[f"{label}{today.isoformat()}"] = precompute_expected(conn, today, site=scope)
        if datetime.fromtimestamp(now, ZoneInfo(zone)).hour >= 23:
            tomorrow = today + timedelta(days=1)
            done[f"{label}{tomorrow.isoformat()}"] = precompute_expected(conn, tomorrow, site=scope)
    return done


class UniquesRange(NamedTuple):
    """Distinct session ids over ``start``..``end`` (exact), the days' own counts, and the days
    whose shards have expired (COUNTERS_UNIQUES_SHARD_DAYS) so their ids are not in the union."""

    start: date
    end: date
    visitors: int
    days: list[tuple[date, int]]
    missing_days: list[date]


def day_sets(conn: RedisClient, day: date, expected: int, site: str = "") -> list[str]:
    """Every set that may hold ``day``'s ids: its shards, their levels (``unique_visit.lua``) and
    the overflow chains of the layout of 0.1."""
    with keys.bound(conn):
        tag = keys.uniques_tag(day, site)
        pipe = read_pipeline(conn)
        pipe.hgetall(keys.uniques_levels(day, tag=tag, site=site))
        pipe.hgetall(keys.uniques_overflow(day, tag=tag, site=site))
        levels, legacy = ({int(as_str(s)): int(as_str(n)) for s, n in found.items()} for found in pipe.execute())
        sets = []
        for shard in range(shard_count(expected)):
            base = keys.uniques_shard(day, shard, tag=tag, site=site)
            sets.append(base)
            sets += [f"{base}:{k}" for k in range(1, legacy.get(shard, 0) + 1)]
            sets += [
                keys.uniques_level_set(base, level, index)
                for level in range(1, levels.get(shard, 0) + 1)
                for index in range(LEVEL_FANOUT**level)
            ]
        return sets


def unique_visitors_range(conn: RedisClient, start: date, end: date, *, site: str | None = None) -> UniquesRange:
    """Exact number of distinct session ids seen over the local days ``start``..``end``.

    Each day's shards (one slot per day, at most 512 ids a set) are read with SMEMBERS in one
    pipeline and unioned here, in memory (8 bytes an id in Redis, more in Python: ~100 MB per million distinct ids).
    ``site``: as in ``unique_visitors``.
    """
    scope = check_site(site)
    with keys.bound(conn):
        check_day_range(start, end)
        span = days.days_between(start, end)
        pipe = read_pipeline(conn)
        for day in span:
            pipe.get(keys.uniques_count(day, site=scope))
            pipe.get(keys.uniques_expected(day, site=scope))
        replies = pipe.execute()
        counts = [int(as_str(c)) if c is not None else 0 for c in replies[0::2]]
        union: set[int] = set()
        missing = []
        for day, count, expected in zip(span, counts, replies[1::2], strict=True):
            if not count:
                continue
            found = False
            if expected is not None:
                pipe = read_pipeline(conn)
                for key in day_sets(conn, day, int(as_str(expected)), scope):
                    pipe.smembers(key)
                for members in pipe.execute():
                    found = found or bool(members)
                    union.update(int(as_str(m)) for m in members)
            if not found:
                missing.append(day)
        return UniquesRange(start, end, len(union), list(zip(span, counts, strict=True)), missing)


def sweep_ids(conn: RedisClient, scope: str, day: date, until: float | None) -> int:
    """The retention sweep of a site's day's session ids (visitor-level): its shards, their level
    sets (``day_sets``, from the day's expected figure and levels), the levels and overflow HASHes
    and the open marker."""
    with keys.bound(conn):
        tag = keys.uniques_tag(day, scope)
        expected = conn.get(keys.uniques_expected(day, tag=tag, site=scope))
        sets = day_sets(conn, day, int(as_str(expected)) if expected is not None else 0, scope)
        bookkeeping = [
            keys.uniques_levels(day, tag=tag, site=scope),
            keys.uniques_overflow(day, tag=tag, site=scope),
            keys.uniques_open(day, tag=tag, site=scope),
        ]
        return sweeps.apply(conn, [*sets, *bookkeeping], until)


def sweep_counts(conn: RedisClient, scope: str, day: date, until: float | None) -> int:
    """The retention sweep of a site's day's count and expected figure (aggregate)."""
    with keys.bound(conn):
        tag = keys.uniques_tag(day, scope)
        figures = [keys.uniques_count(day, tag=tag, site=scope), keys.uniques_expected(day, tag=tag, site=scope)]
        return sweeps.apply(conn, figures, until)


DAILY_UNIQUES = table.register(
    table.Table(
        name="daily_uniques",
        what="the day's session ids in sharded intsets (at most 512 a set), the exact count and the expected figure",
        module=__name__,
        keys=(
            table.StoredKey("ct:uniq:{tag(D)}:count:<D>", "STRING"),
            table.StoredKey("ct:uniq:{tag(D)}:expected:<D>", "STRING"),
            table.StoredKey("ct:uniq:{tag(D)}:open:<D>", "STRING"),
            table.StoredKey("ct:uniq:{tag(D)}:shard:<D>:<n>", "SET"),
            table.StoredKey("ct:uniq:{tag(D)}:shard:<D>:<n>:L<l>:<i>", "SET"),
            table.StoredKey("ct:uniq:{tag(D)}:levels:<D>", "HASH"),
            table.StoredKey("ct:uniq:{tag(D)}:shard:<D>:<n>:<k>", "SET"),
            table.StoredKey("ct:uniq:{tag(D)}:overflow:<D>", "HASH"),
        ),
        tag="the day's (one a site and day)",
        fed_by=("unique", "visit"),
        writers=("store/lua/unique_visit.lua", "store/lua/unique_expected.lua (precompute_expected, beat, daily)"),
        readers=("uniques.unique_visitors", "uniques.unique_visitors_range", "counters-tasks uniques", "health"),
        retention=table.Retention(
            "the session ids (the shards) COUNTERS_VISITOR_DAYS (7) past the day's end; the day's count and "
            "expected figure (no id) COUNTERS_AGGREGATE_DAYS (400; 0: for ever) (the hourly apply_retention; "
            "their TTLs are a safety net)",
            "COUNTERS_VISITOR_DAYS",
            lambda settings: settings.visitor_days,
            {table.VISITOR_LEVEL: sweep_ids, table.AGGREGATE: sweep_counts},
        ),
        erasure=table.Erasure(
            "session ids (the first 15 hex digits of the session UUID)",
            True,
            "SREM of the session's id from the shard (or level set) it hashes to while the day's shards are kept, "
            "and the day's count minus one when it was there, in one call (lua/forget_members.lua); by a session "
            "id only: an IP names no session",
            forget=lambda conn, target, days: forget_session(conn, target, days),
        ),
    )
)
"""The daily uniques' table (``core.table``)."""


def forget_session(conn: RedisClient, target: table.ForgetTarget, days: Iterable[date]) -> table.Forgotten:
    """Forget ``target``'s session from each of ``days`` (``worker.forget``): its id out of the one
    set of the day that holds it (its shard's, or one of the shard's levels: each checked with
    SISMEMBER, one pipeline a day), and the day's count minus one in the same call
    (``lua/forget_members.lua``). An IP names no session: nothing is done without a session id."""
    done = table.Forgotten()
    if target.session_id is None:
        return done
    scope = target.scope
    with keys.bound(conn, write=True):
        for day in days:
            number = session_number(target.session_id, day)  # (keyed by the day with COUNTERS_VISITOR_KEY=daily)
            expected = conn.get(keys.uniques_expected(day, site=scope))
            if expected is None:
                continue
            shard = _shard(number, shard_count(int(as_str(expected))))
            base = keys.uniques_shard(day, shard, site=scope)
            candidates = [
                key
                for key in day_sets(conn, day, int(as_str(expected)), scope)
                if key == base or key.startswith(base + ":")
            ]
            pipe = read_pipeline(conn)
            for key in candidates:
                pipe.sismember(key, number)
            for key, held in zip(candidates, pipe.execute(), strict=True):
                if held:
                    count = keys.uniques_count(day, site=scope)
                    done.removed += int(run_script(conn, "forget_members", [key, count], ["", number]))
                    done.corrected.append(f"daily_uniques {day.isoformat()} count")
    return done
