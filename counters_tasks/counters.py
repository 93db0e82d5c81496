"""Named counters at several precisions (docs/design.md), with an incremental cleaner.

Each counter keeps, per precision, a HASH bucket_start -> total. Writes go through one Lua call
per counter (all precisions, plus an optional per-message dedupe marker), followed in the same
round trip by a ZADD to a sharded registry of known counters, which the cleaner walks with ZSCAN.
Reads filter to the retention window, so answers never depend on when the cleaner last ran.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from .core.settings import get_settings
from .core.validation import check_amount, check_event_time, check_message_id, check_now, check_text
from .errors import InvalidInput
from .store import keys, registry
from .store.scripts import execute_in_order, run_script

PRECISIONS = (1, 5, 60, 300, 3600, 18000, 86400)
SAMPLE_COUNT = 120

Buckets = dict[int, dict[int, int]]
"""precision -> bucket_start -> amount to add."""


def bucket_start(now: float, precision: int) -> int:
    return int(now // precision) * precision


def check_precision(precision: Any) -> int:
    if isinstance(precision, bool) or not isinstance(precision, int) or precision not in PRECISIONS:
        raise InvalidInput(f"precision must be one of {PRECISIONS}, got {precision!r}")
    return precision


def add_to_buckets(buckets: Buckets, now: float, count: int) -> None:
    """Fold one event into ``buckets`` (so a batch costs one script call per counter)."""
    for precision in PRECISIONS:
        per = buckets.setdefault(precision, defaultdict(int))
        per[bucket_start(now, precision)] += count


def queue_counter_writes(conn: Any, pipe: Any, per_counter: dict[str, Buckets], message_id: str | None) -> list[list[str]]:
    """Queue on ``pipe`` (or run, when ``pipe`` is ``conn``) one script call per tag group of
    the counters in ``per_counter``; returns each call's counter names, in call order (the
    order of the replies)."""
    by_group: dict[str, list[str]] = defaultdict(list)
    for name in per_counter:
        by_group[keys.counter_tag(name)].append(name)
    ttl = get_settings().dedupe_ttl if message_id is not None else 0
    calls = []
    for group, names in by_group.items():
        script_keys: list[str] = []
        args: list[Any] = [ttl, len(names), len(PRECISIONS)]
        for name in names:
            script_keys += keys.counter_keys(name, PRECISIONS)
            buckets = per_counter[name]
            for precision in PRECISIONS:
                pairs = [(b, n) for b, n in buckets.get(precision, {}).items() if n]
                args.append(len(pairs))
                for pair in pairs:
                    args += pair
        if ttl:
            script_keys.append(keys.counter_seen(message_id, tag=group))
        reply = run_script(conn, "counter_update", script_keys, args, client=pipe)
        calls.append((names, reply) if pipe is conn else names)
    return calls


def register_counters(conn: Any, names: Iterable[str]) -> None:
    """Add counters to the registry, then mark them registered (in that order, on any layout).

    Called after their data is written, for the counters whose write reported no marker.
    """
    names = list(names)
    if not names:
        return
    by_shard: dict[int, list[str]] = defaultdict(list)
    for name in names:
        by_shard[keys.registry_shard_of(name)].append(name)

    def add_to_registry(pipe: Any) -> None:
        for shard, members in by_shard.items():
            pipe.zadd(keys.counter_registry(shard), dict.fromkeys(members, 0))

    def mark(pipe: Any) -> None:
        for name in names:
            pipe.set(keys.counter_registered(name), 1)

    execute_in_order(conn, add_to_registry, mark)


def unregistered(calls: Iterable[list[str]], replies: Iterable[Any]) -> list[str]:
    """The counters whose ``counter_update`` replies say they still need registering."""
    return [name for names, reply in zip(calls, replies, strict=True)
            for name, registered in zip(names, reply[1:], strict=True) if not int(registered)]


def write_counters(conn: Any, per_counter: dict[str, Buckets], message_id: str | None = None) -> None:
    """Apply already-validated counts to many counters: one script call per tag group, one round
    trip (a second one only for counters that are not in the registry yet)."""
    if not per_counter:
        return
    if len({keys.counter_tag(name) for name in per_counter}) == 1:  # one call: no pipeline needed
        [(names, reply)] = queue_counter_writes(conn, conn, per_counter, message_id)
        calls, replies = [names], [reply]
    else:
        calls = []
        [replies] = execute_in_order(conn, lambda pipe: calls.extend(queue_counter_writes(conn, pipe, per_counter, message_id)))
    register_counters(conn, unregistered(calls, replies))


def update_counter(conn: Any, name: str, count: int = 1, now: float | None = None, *, message_id: str | None = None) -> None:
    """Add ``count`` to counter ``name`` at every precision, atomically, in one round trip.

    With ``message_id``, a second call with the same id (a redelivered task) changes nothing.
    """
    check_text(name, "name")
    check_amount(count, "count")
    now = check_event_time(now, "now")
    check_message_id(message_id)
    buckets: Buckets = {p: {bucket_start(now, p): count} for p in PRECISIONS}
    write_counters(conn, {name: buckets}, message_id)


def get_counter(conn: Any, name: str, precision: int, now: float | None = None) -> list[tuple[int, int]]:
    """``(bucket_start, total)`` pairs, oldest first, within the retention window, non-zero only."""
    check_text(name, "name")
    check_precision(precision)
    now = check_now(now)
    cutoff = now - SAMPLE_COUNT * precision
    raw = conn.hgetall(keys.counter_hash(name, precision))
    samples = ((int(bucket), int(total)) for bucket, total in raw.items())
    return sorted((b, t) for b, t in samples if b > cutoff and t)


MAX_SERIES_POINTS = 10_000
"""Most buckets one ``get_series`` call may return (the range is clipped to the retention first)."""


def get_series(conn: Any, name: str, precision: int, start: float, end: float,
               now: float | None = None) -> list[tuple[int, int]]:
    """Every bucket of ``precision`` from the one holding ``start`` to the one holding ``end``,
    as ``(bucket_start, total)`` oldest first, 0 where there is no data (like RedisTimeSeries's
    ``EMPTY``): what a chart needs. Clipped to the retention window of ``now`` (the buckets
    ``get_counter`` would list), so a range before it is empty.
    """
    check_text(name, "name")
    check_precision(precision)
    start = check_now(start, "start")
    end = check_now(end, "end")
    now = check_now(now)
    if start > end:
        raise InvalidInput(f"start ({start!r}) is after end ({end!r})")
    first = bucket_start(start, precision)
    oldest_kept = bucket_start(now - SAMPLE_COUNT * precision, precision) + precision  # > now - 120 p
    first = max(first, oldest_kept)
    last = bucket_start(end, precision)
    if last < first:
        return []
    points = (last - first) // precision + 1
    if points > MAX_SERIES_POINTS:
        raise InvalidInput(f"the range holds {points} buckets of {precision}s; at most {MAX_SERIES_POINTS}")
    found = dict(get_counter(conn, name, precision, now))
    return [(b, found.get(b, 0)) for b in range(first, last + 1, precision)]


def known_counters(conn: Any) -> list[str]:
    """Names of the counters that have data, sorted."""
    return registry.all_names(conn, keys.counter_registries())


def _due_cutoffs(conn: Any, now: float) -> list[str]:
    """Per precision, the cutoff to clean at, or '-' when that precision is not due this pass.

    Fine precisions are cleaned every pass; a coarse precision p at most once per p seconds of
    ``now`` (the original design's cadence), and always on the first pass or when ``now`` went back.
    """
    last = {int(p): float(t) for p, t in conn.hgetall(keys.cleaner_state()).items()}
    cutoffs = []
    for precision in PRECISIONS:
        previous = last.get(precision)
        due = precision <= 60 or previous is None or now < previous or now - previous >= precision
        cutoffs.append(repr(now - SAMPLE_COUNT * precision) if due else "-")
    return cutoffs


def clean_counters(conn: Any, now: float | None = None) -> int:
    """One pass of the cleaner over every known counter; returns the samples removed.

    Work is bounded per call: the registry is walked with ZSCAN a page at a time, one script
    call per counter. A counter left empty loses its "registered" marker and leaves the
    registry, then is checked again: a write racing with the removal either lands before that
    check (which puts the counter back) or finds no marker and registers the counter itself.
    """
    now = check_now(now)
    cutoffs = _due_cutoffs(conn, now)
    batch = get_settings().cleaner_batch
    removed = 0
    for shard_key, names in registry.walk(conn, keys.counter_registries(), batch):
        removed += _clean_page(conn, shard_key, names, cutoffs)
    conn.hset(keys.cleaner_state(), mapping={p: repr(now) for p, c in zip(PRECISIONS, cutoffs, strict=False) if c != "-"})
    return removed


def _clean_page(conn: Any, shard_key: str, names: list[str], cutoffs: list[str]) -> int:
    def queue_cleans(pipe: Any) -> None:
        for name in names:
            run_script(conn, "counter_clean", list(keys.counter_keys(name, PRECISIONS)), cutoffs, client=pipe)

    [results] = execute_in_order(conn, queue_cleans)
    removed = sum(int(r[0]) for r in results)
    empty = [name for name, r in zip(names, results, strict=False) if int(r[1]) == 0]
    if empty:
        conn.zrem(shard_key, *empty)
        pipe = conn.pipeline(transaction=False)
        for name in empty:
            pipe.exists(*keys.counter_keys(name, PRECISIONS)[:-1])
        back = [name for name, left in zip(empty, pipe.execute(), strict=False) if int(left)]
        if back:
            conn.zadd(shard_key, dict.fromkeys(back, 0))
    return removed
