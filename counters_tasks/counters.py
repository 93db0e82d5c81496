"""Named counters at several precisions (docs/design.md), with a cleaner whose cost follows the work due.

Each counter is one HASH holding every precision's buckets (field ``bucket_start // precision *
10 + precision index`` -> total: integer fields keep a small hash a compact listpack, ~190 bytes for
a counter hit once instead of ~940 for seven hashes). Counters hash into 256 tag groups; each
group has a due index, a ZSET counter -> the earliest time one of its samples leaves the window,
kept by the same Lua call that writes the buckets (one call per group a batch touches, one
round trip, no registry round trip). The cleaner takes from each group only the counters whose
score has passed, in bounded calls, so a pass costs in proportion to the samples due, not to
the counters known. Reads filter to the retention window, so answers never depend on when the
cleaner last ran.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from .core import table
from .core.kind import Kind, register
from .core.settings import COUNTER_PRECISIONS, get_settings
from .core.sites import check_site
from .core.validation import check_amount, check_int, check_item_time, check_message_id, check_now, check_text
from .errors import InvalidInput
from .store import keys
from .store.client import RedisClient, as_str, read_pipeline
from .store.scripts import WritePlan, execute_in_order, run_script, write_through

PRECISIONS = COUNTER_PRECISIONS
SAMPLE_COUNT = 120
PRECISION_INDEX = {precision: index for index, precision in enumerate(PRECISIONS)}

Buckets = dict[int, dict[int, int]]
"""precision -> bucket_start -> amount to add."""


def bucket_start(now: float, precision: int) -> int:
    return int(now // precision) * precision


def check_precision(precision: Any) -> int:
    if isinstance(precision, bool) or not isinstance(precision, int) or precision not in PRECISIONS:
        raise InvalidInput(f"precision must be one of {PRECISIONS}, got {precision!r}")
    return precision


PAGE_HITS = "hits:"
"""The family of the pages' counters, ``hits:<path>`` (``visits.hits_names``)."""


def kept_precisions(name: str) -> tuple[int, ...]:
    """The precisions counter ``name`` keeps: a page's ``hits:<path>`` those of
    COUNTERS_PATH_HITS_PRECISIONS (by default not 1 s and 5 s), every other counter all of
    PRECISIONS. Writes fill only these, and reads of another precision are refused rather than
    answered with zeros."""
    return get_settings().path_hits_precisions if name.startswith(PAGE_HITS) else PRECISIONS


def check_kept_precision(name: str, precision: Any) -> int:
    """``precision`` checked (``check_precision``) and one that counter ``name`` keeps
    (``kept_precisions``): a precision not kept would read as zeros."""
    check_precision(precision)
    kept = kept_precisions(name)
    if precision not in kept:
        raise InvalidInput(
            f"counter {name[:64]!r} keeps precisions {', '.join(map(str, kept))} "
            f"(a page's hits: COUNTERS_PATH_HITS_PRECISIONS), not {precision}"
        )
    return precision


Fields = dict[int, int]
"""A counter's additions as its write sends them: hash field (``field_of``) -> amount."""


def indexed(precisions: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """``(precision, its index in PRECISIONS)`` of each of ``precisions``: what ``add_to_fields``
    takes, made once a batch rather than looked up once an item."""
    return tuple((precision, PRECISION_INDEX[precision]) for precision in precisions)


def add_to_fields(fields: Fields, second: int, count: int, precisions: tuple[tuple[int, int], ...]) -> None:
    """Fold ``count`` items of one whole ``second`` into ``fields`` at ``precisions``
    (``indexed``): one dict update a precision."""
    for precision, index in precisions:
        field = second // precision * 10 + index
        fields[field] = fields.get(field, 0) + count


def fields_of(buckets: Buckets) -> Fields:
    """``buckets`` as hash fields (``field_of``), amounts of 0 left out."""
    return {field_of(bucket, precision): n for precision, per in buckets.items() for bucket, n in per.items() if n}


def field_of(bucket: int, precision: int) -> int:
    """The hash field of one bucket: ``bucket_start // precision * 10 + precision index`` (the
    bucket's number rather than its start: coarse precisions' fields are small integers, which
    a listpack stores in 3 to 5 bytes instead of 9)."""
    return bucket // precision * 10 + PRECISION_INDEX[precision]


def bucket_of(field: Any) -> tuple[int, int]:
    """``(precision, bucket_start)`` of a hash field."""
    number = int(as_str(field))
    precision = PRECISIONS[number % 10]
    return precision, number // 10 * precision


def first_leaves_window(flat: list[int]) -> int:
    """When the first bucket of ``flat`` (field, amount, ...) leaves the window: get_counter
    keeps buckets with start > now - 120 p, so a bucket leaves at its start + 120 p (0: none)."""
    return min([(field // 10 + SAMPLE_COUNT) * PRECISIONS[field % 10] for field in flat[::2]], default=0)


FIELDS_PER_CALL = 125
"""Buckets one ``counter_update`` call adds to at most (a batch spread over a day touches
thousands of one-second buckets of ``hits``: several calls of ~1 ms rather than one long one)."""


def queue_counter_writes(conn: RedisClient, pipe: Any, per_counter: dict[str, Fields], message_id: str | None) -> int:
    """Queue on ``pipe`` (or run, when ``pipe`` is ``conn``) the script calls adding
    ``per_counter`` (each counter's ``Fields``): per tag group, calls of at most FIELDS_PER_CALL
    buckets, each at most once per ``message_id`` (parts after the first under ``<id>/c<n>``,
    the same on every delivery of the same counts). Returns the number of calls (replies: 1
    applied, 0 already applied)."""
    with keys.bound(conn, write=True):
        by_group: dict[str, list[tuple[keys.CounterWriteKeys, list[int]]]] = defaultdict(list)
        for name, fields in per_counter.items():
            flat = [value for field, n in fields.items() if n for value in (field, n)]  # field, amount, ...
            written = keys.counter_write_keys(name)
            for first in range(0, max(1, len(flat)), 2 * FIELDS_PER_CALL):
                by_group[written[0]].append((written, flat[first : first + 2 * FIELDS_PER_CALL]))
        ttl = get_settings().dedupe_ttl if message_id is not None else 0
        calls = 0
        for group, entries in by_group.items():
            parts: list[list[tuple[keys.CounterWriteKeys, list[int]]]] = [[]]
            size = 0
            for written, flat in entries:
                if size and size + len(flat) > 2 * FIELDS_PER_CALL:
                    parts.append([])
                    size = 0
                parts[-1].append((written, flat))
                size += len(flat)
            part_ids = [message_id] + keys.chunk_ids(message_id, len(parts), "/c")[1:]
            for part, part_id in zip(parts, part_ids, strict=True):
                script_keys: list[str] = []
                args: list[Any] = [ttl, len(part)]
                for (_tag, hash_key, due_key, member, subset), flat in part:
                    script_keys += [hash_key, due_key]
                    args += [member, subset, first_leaves_window(flat), len(flat) // 2, *flat]
                script_keys.append(keys.counter_due(group))
                if ttl and part_id is not None:  # (a part has an id when the message has one)
                    script_keys.append(keys.counter_seen(part_id, tag=group))
                run_script(conn, "counter_update", script_keys, args, client=pipe)
                calls += 1
        return calls


def write_counters(conn: RedisClient, per_counter: dict[str, Buckets], message_id: str | None = None) -> None:
    """Apply already-validated counts to many counters: one script call per tag group, one round trip."""
    if not per_counter:
        return
    per_fields = {name: fields_of(buckets) for name, buckets in per_counter.items()}

    def queue(plan: WritePlan) -> Callable[[], None]:
        plan.add(lambda pipe: queue_counter_writes(conn, pipe, per_fields, message_id))
        return lambda: None

    write_through(conn, queue)


COUNTER_UPDATE = register(
    Kind(name="counter", fields=("name", "count", "ts", "site"), required=1, item_task="counters_tasks.update_counter")
)
"""An update of a named counter, one an ``update_counter`` message."""


def update_counter(
    conn: RedisClient,
    name: str,
    count: int = 1,
    now: float | None = None,
    *,
    message_id: str | None = None,
    site: str | None = None,
) -> None:
    """Add ``count`` to counter ``name`` at every precision it keeps (``kept_precisions``),
    atomically, in one round trip.

    With ``message_id``, a second call with the same id (a redelivered task) changes nothing.
    ``site``: the site whose counter it is (a site of ``COUNTERS_SITES``; None: the default one).
    """
    check_text(name, "name")
    check_amount(count, "count")
    now = check_item_time(now, "now")
    check_message_id(message_id)
    scope = check_site(site)
    buckets: Buckets = {p: {bucket_start(now, p): count} for p in kept_precisions(name)}
    write_counters(conn, {keys.scoped(scope, name): buckets}, message_id)


def get_counter(
    conn: RedisClient, name: str, precision: int, now: float | None = None, *, site: str | None = None
) -> list[tuple[int, int]]:
    """``(bucket_start, total)`` pairs, oldest first, within the retention window, non-zero only.
    ``site``: as in ``update_counter``."""
    check_text(name, "name")
    check_kept_precision(name, precision)
    now = check_now(now)
    scope = check_site(site)
    with keys.bound(conn):
        cutoff = now - SAMPLE_COUNT * precision
        samples = []
        for field, total in conn.hgetall(keys.counter_hash(keys.scoped(scope, name))).items():
            p, bucket = bucket_of(field)
            if p == precision and bucket > cutoff and int(total):
                samples.append((bucket, int(total)))
        return sorted(samples)


MAX_SERIES_POINTS = 10_000
"""Most buckets one ``get_series`` call may return (the range is clipped to the retention first)."""


def get_series(
    conn: RedisClient,
    name: str,
    precision: int,
    start: float,
    end: float,
    now: float | None = None,
    *,
    site: str | None = None,
) -> list[tuple[int, int]]:
    """Every bucket of ``precision`` from the one holding ``start`` to the one holding ``end``,
    as ``(bucket_start, total)`` oldest first, 0 where there is no data (like RedisTimeSeries's
    ``EMPTY``): what a chart needs. Clipped to the retention window of ``now`` (the buckets
    ``get_counter`` would list), so a range before it is empty.
    """
    check_text(name, "name")
    check_kept_precision(name, precision)
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
    found = dict(get_counter(conn, name, precision, now, site=site))
    return [(b, found.get(b, 0)) for b in range(first, last + 1, precision)]


CLEAN_COUNTERS_PER_CALL = 200
"""Counters one cleaner call takes from a group at most."""
CLEAN_FIELDS_PER_CALL = 250
"""Hash fields one cleaner call examines at most (a back-filled counter takes several calls)."""


def _precision_args() -> list[int]:
    return [SAMPLE_COUNT, *PRECISIONS]


def group_names(conn: RedisClient, group: str, site: str = "") -> list[str]:
    """The counters of site ``site`` (a scope) in one tag group that hold samples, sorted (one
    ZRANGE of each of its due ZSETs). Every site's counters share the groups, so the cleaner's
    pass costs the same however many sites there are."""
    with keys.bound(conn):
        pipe = read_pipeline(conn)
        for subset in range(keys.DUE_SUBSETS):
            pipe.zrange(keys.counter_due_subset(group, subset), 0, -1)
        names = (keys.unscoped(site, unquote(as_str(member))) for members in pipe.execute() for member in members)
        return sorted(name for name in names if name is not None)


def known_counters(conn: RedisClient, *, site: str | None = None) -> list[str]:
    """Names of the counters that hold samples, sorted. A counter leaves when its last sample
    goes: at once when corrections bring it to zero, at the cleaner's next pass when its samples
    leave the window. Read group by group; ``counter_page`` gives them a page at a time.
    ``site``: whose counters (None: the default site's)."""
    scope = check_site(site)
    names: list[str] = []
    for group in keys.counter_groups():
        names += group_names(conn, group, scope)
    return sorted(names)


MAX_PAGE = 1000


def counter_page(
    conn: RedisClient, cursor: str = "0", limit: int = 100, *, site: str | None = None
) -> tuple[list[str], str | None]:
    """A page of ``known_counters``: ``(names, next cursor or None at the end)``. Names come
    group by group (sorted within a group); the cursor is ``"<group>.<offset>"`` (start: "0")."""
    check_int(limit, "limit", 1, MAX_PAGE)
    scope = check_site(site)
    group_text, _, offset_text = str(cursor).partition(".")
    try:
        group_index, offset = int(group_text), int(offset_text or 0)
    except ValueError:
        raise InvalidInput(f"cursor must be a cursor from a previous page, got {cursor!r}") from None
    groups = keys.counter_groups()
    if not (0 <= group_index <= len(groups) and offset >= 0):
        raise InvalidInput(f"cursor must be a cursor from a previous page, got {cursor!r}")
    page: list[str] = []
    while group_index < len(groups) and len(page) < limit:
        names = group_names(conn, groups[group_index], scope)[offset:]
        taken = names[: limit - len(page)]
        page += taken
        if len(taken) < len(names):
            return page, f"{group_index}.{offset + len(taken)}"
        group_index, offset = group_index + 1, 0
    return page, (f"{group_index}.0" if group_index < len(groups) else None)


def clean_counters(conn: RedisClient, now: float | None = None) -> int:
    """One pass of the cleaner; returns the samples removed.

    Each tag group is asked, in one call, for its counters whose first sample has left the
    window of ``now`` (its due index); those are cleaned and re-scored with their next due
    time, or leave the index when empty. A group with nothing due costs one ZRANGEBYSCORE, so a
    pass costs in proportion to the work due; calls are bounded (CLEAN_COUNTERS_PER_CALL
    counters, CLEAN_FIELDS_PER_CALL fields) and a group with more is called again. Coarse
    precisions are cleaned when one of their samples is due, which is their own cadence.
    """
    now = check_now(now)
    with keys.bound(conn, write=True):
        groups = keys.counter_groups()
        args = [repr(now), None, None, CLEAN_COUNTERS_PER_CALL, CLEAN_FIELDS_PER_CALL, *_precision_args()]

        def queue(pipe: Any, batch: list[str]) -> None:
            for group in batch:
                args[1], args[2] = keys.counter_hash_head(group), keys.counter_due_head(group)
                run_script(
                    conn, "counter_clean", [keys.counter_due(group), keys.counter_scan(group)], list(args), client=pipe
                )

        removed = 0
        pending = groups
        while pending:
            [replies] = execute_in_order(conn, functools.partial(queue, batch=pending))
            removed += sum(int(reply[0]) for reply in replies)
            pending = [group for group, reply in zip(pending, replies, strict=True) if int(reply[1])]
        return removed


COUNTERS = table.register(
    table.Table(
        name="counters",
        what="named counters at every precision, the latest SAMPLE_COUNT samples each, and the cleaner's due indexes",
        module=__name__,
        keys=(
            table.StoredKey("ct:cnt:{group(name)}:h:<name>", "HASH"),
            table.StoredKey("ct:cnt:{group}:due:<n>", "ZSET"),
            table.StoredKey("ct:cnt:{group}:due", "ZSET"),
            table.StoredKey("ct:cnt:{group}:scan", "HASH"),
        ),
        tag="the counter's group (256 groups)",
        fed_by=("counter", "visit"),
        writers=("store/lua/counter_update.lua", "store/lua/counter_clean.lua (clean_counters, beat, every minute)"),
        readers=(
            "counters.get_counter",
            "counters.known_counters",
            "counters-tasks counters",
            "the dashboard's series",
        ),
        retention=table.Retention(
            f"the latest {SAMPLE_COUNT} samples of each precision (of days: {SAMPLE_COUNT} days); the cleaner drops older",
            None,
            lambda _settings: SAMPLE_COUNT * max(PRECISIONS) / 86400,
        ),
        erasure=table.Erasure.none("counts by time only: no visitor id is kept"),
    )
)
"""The counters' table (``core.table``): ``hits`` and ``hits:<path>`` are fed by every visit."""
