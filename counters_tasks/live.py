"""Visitors right now: distinct visitors of a site in the last few minutes (``visitors_now``).

Every page view written also adds its visitor id to a HyperLogLog of its site and minute (``PFADD``,
idempotent, so a redelivered batch changes nothing and needs no dedupe marker): one ``PFADD`` and
one ``EXPIRE`` a site and minute a batch touches, pipelined with the batch's other writes. A
view older than the window (an import of old logs, a late batch) adds nothing. The figure is the
union of the site's last ``WINDOW_MINUTES`` minutes (the current one included), one ``PFCOUNT``
of keys in one slot (a site's minutes share its tag): ~0.81% standard error, 12 KB at most a key,
and each key expires a few minutes after its minute.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from .core import table
from .core.sites import check_site, site_names
from .core.validation import check_now
from .store import keys
from .store.client import RedisClient, is_cluster, read_pipeline
from .store.hll import STANDARD_ERROR

WINDOW_MINUTES = 5
"""Minutes ``visitors_now`` unions: the current one and the four before it (4 to 5 minutes)."""

KEEP_SECONDS = (WINDOW_MINUTES + 2) * 60
"""How long a minute's key lives after its last write: past the last read that may include it."""


def queue_sightings(pipe: Any, sightings: Iterable[tuple[str, float, str]], now: float | None = None) -> int:
    """Queue on ``pipe`` the ``PFADD``/``EXPIRE`` of ``(site scope, ts, visitor id)`` sightings
    whose minute is still in the window of ``now`` (default: this process's clock); returns the
    commands queued."""
    now = time.time() if now is None else now
    oldest = int(now // 60) - WINDOW_MINUTES
    by_minute: dict[tuple[str, int], set[str]] = defaultdict(set)
    for site, ts, visitor in sightings:
        minute = int(ts // 60)
        if minute > oldest:
            by_minute[site, minute].add(visitor)
    for (site, minute), visitors in by_minute.items():
        key = keys.live_minute(site, minute)
        pipe.pfadd(key, *sorted(visitors))
        pipe.expire(key, KEEP_SECONDS)
    return 2 * len(by_minute)


def visitors_now(conn: RedisClient, *, site: str | None = None, now: float | None = None) -> int:
    """Distinct visitors of ``site`` (None: the default site) in the current minute of ``now``
    and the ``WINDOW_MINUTES - 1`` before it: an estimate (HyperLogLog, ~0.81%)."""
    scope = check_site(site)
    now = check_now(now)
    with keys.bound(conn):
        return int(conn.pfcount(*window_keys(scope, now)))


def window_keys(site: str, now: float) -> list[str]:
    """The keys ``visitors_now`` unions for site scope ``site`` at ``now``."""
    minute = int(now // 60)
    return [keys.live_minute(site, m) for m in range(minute - WINDOW_MINUTES + 1, minute + 1)]


def visitors_now_by_site(conn: RedisClient, now: float | None = None) -> dict[str, int]:
    """``visitors_now`` of every site (the default one first): in one round trip on one server; a
    ``PFCOUNT`` a site on a cluster (redis-py's cluster pipeline refuses multi-key commands)."""
    now = check_now(now)
    with keys.bound(conn):
        names = site_names()
        windows = [window_keys(check_site(name), now) for name in names]
        if is_cluster(conn):
            counts = [conn.pfcount(*window) for window in windows]
        else:
            pipe = read_pipeline(conn)
            for window in windows:
                pipe.pfcount(*window)
            counts = pipe.execute()
        return {name: int(n) for name, n in zip(names, counts, strict=True)}


def name_estimate() -> table.Forgotten:
    """What ``forget_visitor`` can do here: nothing but name the figure, an estimate that may still
    count the visitor for at most ``KEEP_SECONDS``."""
    return table.Forgotten(
        estimates=[(f"visitors_now (HLL, gone within {KEEP_SECONDS // 60} minutes)", STANDARD_ERROR)]
    )


VISITORS_NOW = table.register(
    table.Table(
        name="visitors_now",
        what="a HyperLogLog of visitor ids a site and minute: who visits right now",
        module=__name__,
        keys=(table.StoredKey("ct:live:{tag(S now)}:<S><minute>", "HLL"),),
        tag="the site's (its minutes together)",
        fed_by=("visit",),
        writers=("PFADD + EXPIRE with every write of page views (live.queue_sightings)",),
        readers=("live.visitors_now", "the dashboard (/api/now)", "/metrics"),
        retention=table.Retention(
            f"{KEEP_SECONDS} seconds after its minute (visitor-level, far under COUNTERS_VISITOR_DAYS: no retention "
            "sweep)",
            None,
            lambda _settings: KEEP_SECONDS / 86400,
        ),
        erasure=table.Erasure(
            "visitor ids, as an estimate (HyperLogLog)",
            False,
            f"an estimate (standard error 0.81%): one visitor cannot be taken out of it, and it is gone in "
            f"{KEEP_SECONDS // 60} minutes; forget_visitor names it among its estimates",
            forget=lambda _conn, _target, _days: name_estimate(),
        ),
    )
)
"""The visitors-now table (``core.table``)."""
