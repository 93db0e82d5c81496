"""Throughput: the workers' cumulative totals, kept in Redis, that ``/metrics`` exports.

Celery workers are prefork (several processes per worker, several workers per deployment), so
no one process sees everything: each adds what it applied to one Redis hash
(``store.keys.throughput``), one small Lua call (``throughput_add``) per batch after its
write, and the dashboard server reads the hash when Prometheus scrapes it (``ops.metrics``).
The writes themselves stay one round trip: the data modules fill in a ``Tally`` from their
scripts' replies, and the batch's caller (``record_visits``, ``incr_bumps``, the worker-side
``apply_batch``) adds it with the batch's size. Direct library calls outside a batch
(``visits.apply_visit``, ``Ranking.incr``) are not counted. What is kept:

- ``applied`` and ``duplicates``, per kind of item (``visit``, ``ranking``): counted from the
  replies of the writes themselves, so a redelivered message whose dedupe marker was found
  counts as a duplicate, never as applied twice;
- batch sizes per kind of batch, as histogram buckets (``BATCH_BUCKETS``);
- the newest item time (``ts``) of any visit applied: how far counting lags behind items.

The totals are best effort: they never make a write fail. An error while adding to them (Redis
went away between a batch's write and its count, milliseconds apart) is logged and that count
is lost; it is never counted twice.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

import redis

from .core import table
from .core.kind import registered, short_name
from .store import keys
from .store.client import RedisClient, as_str
from .store.scripts import run_script

log = logging.getLogger(__name__)


def item_kinds() -> list[str]:
    """The kinds of items counted (``core.kind``: every kind registered with a ``write``: page
    views, ranking bumps, an app's own)."""
    return [kind.name for kind in registered() if kind.write is not None]


def batch_kinds() -> list[str]:
    """Batches whose sizes are kept, by task: the worker-side batches of per-item messages
    (messages per batch), then the app-side batch messages (items per message)."""
    written = [kind for kind in registered() if kind.write is not None]
    return [short_name(kind.item_task) for kind in written if kind.worker_batches and kind.item_task] + [
        short_name(kind.payload_task) for kind in written if kind.payload_task
    ]


BATCH_BUCKETS = (1, 10, 50, 100, 500, 1000, 5000, 20000)
"""Upper bounds of the batch-size buckets (a last one, +Inf, holds the rest)."""

NEWEST = "newest_ts"


def bucket_field(kind: str, size: int) -> str:
    """The hash field of the (non-cumulative) bucket a batch of ``size`` items falls in."""
    n = bisect_left(BATCH_BUCKETS, size)
    return f"batch:{kind}:{BATCH_BUCKETS[n] if n < len(BATCH_BUCKETS) else 'inf'}"


def increment(conn: RedisClient, increments: dict[str, int], newest_ts: float | None = None) -> bool:
    """Add ``increments`` (field -> amount) to the totals and keep ``newest_ts`` if it is the
    newest yet, in one call. Returns False (and logs) when Redis did not take it."""
    args: list[Any] = ["" if newest_ts is None else repr(float(newest_ts))]
    for name, amount in increments.items():
        if amount:
            args += [name, int(amount)]
    if len(args) == 1 and newest_ts is None:
        return True
    try:
        run_script(conn, "throughput_add", [keys.throughput()], args)
    except redis.RedisError as exc:  # the metrics never make a write fail
        log.warning("throughput totals not updated (%s: %s): %r lost", type(exc).__name__, exc, increments)
        return False
    return True


@dataclass
class Tally:
    """What writes applied, filled in by the data modules (``visits.write_calls``,
    ``ranking.write_bumps``) from their scripts' replies: items written now, items skipped
    because their message was applied before, and the newest item time written (visits)."""

    applied: int = 0
    duplicates: int = 0
    newest_ts: float | None = None

    def add(self, applied: int, duplicates: int, newest_ts: float | None = None) -> None:
        self.applied += applied
        self.duplicates += duplicates
        if applied and newest_ts is not None:
            self.newest_ts = newest_ts if self.newest_ts is None else max(self.newest_ts, newest_ts)


def count(conn: RedisClient, kind: str, tally: Tally, batch: tuple[str, int] | None = None) -> bool:
    """Add what ``tally`` holds for items of ``kind`` (one of ``item_kinds``) and, when given, one
    ``batch`` of ``(batch kind, size)`` (one of ``batch_kinds``) to the totals, in one call."""
    increments = {f"applied:{kind}": tally.applied, f"duplicate:{kind}": tally.duplicates}
    if batch is not None:
        increments.update({bucket_field(batch[0], batch[1]): 1, f"batch_sum:{batch[0]}": batch[1]})
    return increment(conn, increments, tally.newest_ts)


@dataclass
class BatchSizes:
    """One kind's batch-size histogram: cumulative counts per upper bound (+Inf last), sum."""

    buckets: list[tuple[str, int]]
    total: int

    @property
    def count(self) -> int:
        return self.buckets[-1][1]


@dataclass
class Totals:
    """The totals as read back: per item kind, per batch kind, and the newest item time."""

    applied: dict[str, int] = field(default_factory=dict)
    duplicates: dict[str, int] = field(default_factory=dict)
    batches: dict[str, BatchSizes] = field(default_factory=dict)
    newest_ts: float | None = None


def totals(conn: RedisClient) -> Totals:
    """Read the totals (one HGETALL of a hash of a few dozen fields); every kind registered in this
    process listed (0 when none), and any other kind a worker counted."""
    return parse_totals(conn.hgetall(keys.throughput()))


def parse_totals(reply: dict[Any, Any]) -> Totals:
    """The totals from the reply of an HGETALL of ``keys.throughput()`` (for a caller that
    pipelines it with other reads)."""
    stored = {as_str(name): as_str(value) for name, value in reply.items()}
    result = Totals(newest_ts=float(stored[NEWEST]) if NEWEST in stored else None)
    counted = [name.split(":", 1)[1] for name in stored if name.startswith(("applied:", "duplicate:"))]
    for kind in dict.fromkeys([*item_kinds(), *sorted(counted)]):  # a kind this process does not import too
        result.applied[kind] = int(stored.get(f"applied:{kind}", 0))
        result.duplicates[kind] = int(stored.get(f"duplicate:{kind}", 0))
    sized = [name.split(":")[1] for name in stored if name.startswith("batch_sum:")]
    for kind in dict.fromkeys([*batch_kinds(), *sorted(sized)]):
        running, buckets = 0, []
        for bound in (*BATCH_BUCKETS, "inf"):
            running += int(stored.get(f"batch:{kind}:{bound}", 0))
            buckets.append(("+Inf" if bound == "inf" else str(bound), running))
        result.batches[kind] = BatchSizes(buckets, int(stored.get(f"batch_sum:{kind}", 0)))
    return result


THROUGHPUT = table.register(
    table.Table(
        name="throughput",
        what="items applied and skipped as applied before, by kind; batch sizes; the newest item's time",
        module=__name__,
        keys=(table.StoredKey("ct:throughput:{throughput}", "HASH"),),
        tag="{throughput}",
        fed_by=(),
        writers=("store/lua/throughput_add.lua (one call a batch, after its write)",),
        readers=("throughput.totals", "/metrics", "health"),
        retention=table.Retention("totals since the start: never deleted (Prometheus takes the rates)"),
        erasure=table.Erasure.none("totals by kind only"),
    )
)
"""The throughput table (``core.table``)."""
