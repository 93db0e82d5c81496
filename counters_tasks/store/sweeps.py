"""The bounded calls a table's retention sweep (``core.table.Sweeper``) is made of: its keys of a
site's day unlinked, or re-timed to a later horizon (``apply``), and the HyperLogLogs its HASH's
sketches name found with ``HSCAN`` of the HASH (``sketched_keys``), never by a SCAN of the
keyspace: a sweep costs in proportion to the day's keys, whatever else is stored.

Every call is bounded: ``UNLINK`` of at most ``CHUNK`` keys (UNLINK frees a big value in the
background: the call itself is O(keys)), ``PTTL`` then ``EXPIREAT`` a key each in pipelines of at
most ``CHUNK``, ``HSCAN ... COUNT SCAN_COUNT``. The keys of one call are one day's of one table, so
they share the day's hash tag (a multi-key UNLINK is refused across slots on a cluster).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from .client import RedisClient, as_str

CHUNK = 500
"""Keys a sweep call unlinks or re-times at most."""
SCAN_COUNT = 500
"""The COUNT of each ``HSCAN`` looking for a HASH's sketches' HyperLogLogs."""


def apply(conn: RedisClient, keys: Iterable[str], until: float | None) -> int:
    """UNLINK ``keys`` (``until`` None), else make them expire at ``until`` (epoch seconds) when
    that is later than they would (a horizon made longer; a key without a TTL keeps none, a key
    already gone stays gone), in calls of ``CHUNK`` keys at most; returns how many keys were
    removed (or re-timed)."""
    batch = list(dict.fromkeys(keys))
    done = 0
    for first in range(0, len(batch), CHUNK):
        chunk = batch[first : first + CHUNK]
        if until is None:
            done += int(conn.unlink(*chunk))
            continue
        done += _retime(conn, chunk, int(until))
    return done


def _retime(conn: RedisClient, chunk: list[str], until: int) -> int:
    """``EXPIREAT until`` of the keys of ``chunk`` that would expire before it (what ``EXPIREAT ...
    GT`` does on Redis 7; the server may be 6.2): their PTTLs read, then the earlier ones set."""
    read: Any = conn.pipeline(transaction=False)
    for key in chunk:
        read.pttl(key)
    now = time.time()
    earlier = [key for key, left in zip(chunk, read.execute(), strict=True) if left >= 0 and now + left / 1000 < until]
    if earlier:
        write: Any = conn.pipeline(transaction=False)
        for key in earlier:
            write.expireat(key, until)
        write.execute()
    return len(earlier)


def sketched_keys(conn: RedisClient, table_key: str, key_of: Callable[[str, str], str | None]) -> list[str]:
    """The HyperLogLogs the sketches of HASH ``table_key`` name: ``key_of(field, value)`` for
    each of its fields (None: the field has none), read with HSCAN of ``SCAN_COUNT`` fields a call."""
    found: list[str] = []
    cursor: Any = 0
    fields: Any
    while True:
        cursor, fields = conn.hscan(table_key, cursor, count=SCAN_COUNT)
        for field, value in fields.items():
            key = key_of(as_str(field), as_str(value))
            if key is not None:
                found.append(key)
        if not int(cursor):
            return found


def is_hll_sketch(sketch: str) -> bool:
    """Whether a ``page_sketch`` sketch's visitors are in its HyperLogLog (it reads ``#``)."""
    return sketch.startswith("#")


def last_word_sketch(value: str) -> str:
    """The sketch of a table value ``"<figures> <sketch>"`` (its last space-separated word; ``""``
    when it has none)."""
    _head, sep, tail = value.rpartition(" ")
    return tail if sep else ""
