"""The forgotten visitors' tombstones (``forgotten``): so that a visit or event of a visitor made
before its erasure (``worker.forget``) but still in flight on the broker is not counted back after
it. Each is a keyed digest of a visitor id (HMAC-SHA256 under COUNTERS_SECRET of
``forgotten:<id>``, 16 hex digits: not the id, and no one without the secret can tell whose it
is) with the erasure's time, in one ZSET; entries older than ``kept_seconds`` (the dead letters'
COUNTERS_DEAD_LETTER_DAYS plus a day: no message older than that comes back from the broker or the
dead letters) are dropped at each erasure, and the key itself expires that long after the latest.

The workers' check (``check_not_forgotten``, in ``visits.prepare_visit`` and
``events.kind.prepare_event``, and again on the items of a batch journaled by a worker that died,
``Kind.recheck``) reads an in-process copy of the ZSET, read again at most every ``REFRESH`` seconds (one
``ZRANGE`` a process every 2 s while visits come, none a visit); with no tombstone it costs a
dict lookup. ``worker.forget`` waits ``SETTLE`` seconds after writing one and before erasing, so
that every worker's copy holds it: an item prepared after that is refused (reason
``forgotten``), and one prepared before and written before the erasure is erased with the rest.
What is left: an item prepared before the tombstone was seen and written more than ``SETTLE``
seconds later, after the erasure's pass over its table (a worker stalled between its check and
its write for that long).
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections.abc import Iterable
from typing import Any

from ..core.settings import get_settings
from ..core.table import Erasure, Retention, StoredKey, Table, register
from ..errors import ConfigurationError, ForgottenVisitor
from . import keys
from .client import RedisClient, as_str, get_redis

REFRESH = 2.0
"""Seconds a process keeps its copy of the tombstones before it reads them again."""
SETTLE = REFRESH + 1.0
"""Seconds ``worker.forget`` waits between writing a tombstone and erasing: every process's copy
is then at most that old, with a second for a read in progress."""
MAX_READ = 10_000
"""Tombstones a process reads (the newest): erasures are rare; more within the horizon are
dropped oldest first at each erasure (``note``)."""


def tombstones_key() -> str:
    """ZSET digest -> the erasure's time (epoch s) of each visitor forgotten within the horizon."""
    return f"{keys.prefix()}forgotten:{{forgotten}}"


def kept_seconds() -> int:
    """How long a tombstone is kept: COUNTERS_DEAD_LETTER_DAYS plus a day."""
    return (get_settings().dead_letter_days + 1) * 86400


def digest(visitor: str) -> str:
    """The tombstone of a visitor id: HMAC-SHA256 of ``forgotten:<id>`` under COUNTERS_SECRET, 16 hex digits."""
    secret = get_settings().secret
    if not secret:
        raise ConfigurationError("COUNTERS_SECRET is not set: visitor ids cannot be made")
    return hmac.new(secret.encode(), b"forgotten:" + visitor.encode(), hashlib.sha256).hexdigest()[:16]


def note(conn: RedisClient, visitors: Iterable[str], erased_at: float) -> int:
    """Write the tombstones of ``visitors`` (their ids) erased at ``erased_at``, drop those past
    the horizon and the oldest past ``MAX_READ``, in one transaction; returns how many were written."""
    mapping = {digest(visitor): erased_at for visitor in visitors}
    if not mapping:
        return 0
    key = tombstones_key()
    pipe = conn.pipeline(transaction=True)
    pipe.zadd(key, mapping)
    pipe.zremrangebyscore(key, "-inf", f"({erased_at - kept_seconds()}")
    pipe.zremrangebyrank(key, 0, -MAX_READ - 1)
    pipe.expire(key, kept_seconds())
    pipe.execute()
    forget_copy()
    return len(mapping)


_lock = threading.Lock()
_copy: dict[str, float] = {}
_read_at = float("-inf")


def forget_copy() -> None:
    """This process reads the tombstones again at its next check (tests; ``note``)."""
    global _read_at
    with _lock:
        _read_at = float("-inf")


def _current(conn: RedisClient | None) -> dict[str, float]:
    global _copy, _read_at
    now = time.monotonic()
    if now - _read_at < REFRESH:
        return _copy
    with _lock:
        if now - _read_at >= REFRESH:
            reply: Any = (conn or get_redis()).zrange(tombstones_key(), -MAX_READ, -1, withscores=True)
            _copy = {as_str(member): float(score) for member, score in reply}
            _read_at = now
    return _copy


def erased_after(visitor: str | None, ts: float, conn: RedisClient | None = None) -> bool:
    """Whether ``visitor`` (an id) was forgotten after ``ts``: its item, made before the erasure,
    is not to be counted (the copy of at most ``REFRESH`` seconds; ``conn``: default the
    configured client)."""
    if visitor is None:
        return False
    copy = _current(conn)
    if not copy:
        return False
    erased = copy.get(digest(visitor))
    return erased is not None and ts <= erased


def check_not_forgotten(visitor: str | None, ts: float) -> None:
    """Refuse (``ForgottenVisitor``) an item of ``visitor`` made at ``ts`` when the visitor was
    forgotten after it: the check of every item that names a visitor, when it is prepared and
    again when a journaled batch left by a dead worker is applied (``core.kind.Kind.recheck``)."""
    if erased_after(visitor, ts):
        raise ForgottenVisitor("its visitor was forgotten after it was made: not counted back")


FORGOTTEN = register(
    Table(
        name="forgotten",
        what="a keyed digest of each visitor forgotten within the horizon and when, so that its items "
        "still on the broker are not counted back (refused, reason forgotten)",
        module=__name__,
        keys=(StoredKey("ct:forgotten:{forgotten}", "ZSET"),),
        tag="{forgotten} (one key)",
        fed_by=(),
        writers=("worker.forget.forget_visitor",),
        readers=("visits.prepare_visit", "events.kind.prepare_event"),
        retention=Retention(
            "COUNTERS_DEAD_LETTER_DAYS plus a day after the erasure (dropped at each erasure; the key "
            "expires that long after the latest)",
            "COUNTERS_DEAD_LETTER_DAYS",
            lambda settings: settings.dead_letter_days + 1,
        ),
        erasure=Erasure.none(
            "a keyed digest (HMAC under the secret) of a forgotten visitor's ids and the erasure's time: "
            "no id, IP or session; it is what keeps the visitor forgotten"
        ),
    )
)
"""The tombstones (``core.table``)."""
