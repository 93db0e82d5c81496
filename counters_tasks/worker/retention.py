"""The retention pass (``apply_retention``, the hourly beat task ``counters_tasks.apply_retention``):
each table's data of a site's day is kept as long as its tier says (``core.table.tier_days``:
visitor-level data COUNTERS_VISITOR_DAYS after the end of the day, in the site's zone; daily
aggregates COUNTERS_AGGREGATE_DAYS, or for ever at 0), whatever TTL it was written with, so a
changed setting applies to data already stored.

Which days exist is read from the day registry (``store.day_registry``: one ZSET a tier, noted by
every write), never from a SCAN of the keyspace: a pass reads only the days at or just past the
horizon (``ZRANGEBYSCORE ... LIMIT``), so a pass with nothing due costs the same few calls
whatever is stored, and a pass with days due costs in proportion to their keys (each table's
``Sweeper``, in calls of at most 500 keys or fields). At most ``DAYS_PER_PASS`` site's days a tier
are swept a pass; the rest wait for the next one and are reported as pending.

A horizon made longer than the one last applied (kept per tier in ``state_key``) re-times the
keys of every listed day of the tier (``EXPIREAT`` of their new end, never earlier than they
would go), ``DAYS_PER_PASS`` days a pass from a cursor kept in the same HASH, so keys written
under the shorter setting are not lost to their TTL. (Keys already gone stay gone.)

What a pass removed is counted per table and tier in the HASH, with the last pass's figures:
``/metrics`` (``counters_retention_*``) and ``counters-tasks tables`` show them (``status``).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Any

from ..core import days as core_days
from ..core import table
from ..core.settings import FOREVER_DAYS, Settings, get_settings
from ..core.sites import zone_of
from ..store import day_registry, keys
from ..store.client import RedisClient, as_str
from .table_modules import data_tables

DAYS_PER_PASS = 200
"""Site's days a pass sweeps (or re-times) at most per tier: a day's sweep is a few calls a table
(more for a day with many sketched paths), so a pass stays within its lock time."""
PAGE_SCOPE_SEPARATOR = "\x1e"
"""Between a site's scope and a page's digest in a who-visits page scope (``sitestats.who_visits``,
which this layer does not import): its days are in the site's zone."""
DAY = 86_400


def state_key() -> str:
    """HASH of the retention pass: per tier the horizon last applied (``applied:<tier>``) and a
    re-timing's cursor (``retime:<tier>``), keys removed (re-timed) by table and tier
    (``removed:<table>:<tier>``, ``retimed:<table>:<tier>``), and the last pass (``last_*``)."""
    return f"{keys.prefix()}retention"


@dataclass
class PassReport:
    """What one pass did: site's days swept per tier, keys removed per ``(table, tier)``, keys
    re-timed, site's days past a horizon left for the next pass, and tiers still being re-timed."""

    swept: Counter[str] = field(default_factory=Counter)
    removed: Counter[tuple[str, str]] = field(default_factory=Counter)
    retimed: Counter[tuple[str, str]] = field(default_factory=Counter)
    pending: Counter[str] = field(default_factory=Counter)
    retiming: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return (
            f"days swept {sum(self.swept.values())}, keys removed {sum(self.removed.values())}, "
            f"keys re-timed {sum(self.retimed.values())}, days pending {sum(self.pending.values())}"
        )


def site_zone(scope: str) -> str:
    """The zone of a registry scope's days: its site's (a page scope's site's); a site no longer
    configured: the default site's zone."""
    site = scope.partition(PAGE_SCOPE_SEPARATOR)[0]
    try:
        return zone_of(site)
    except KeyError:
        return zone_of("")


def horizon_end(scope: str, day: date, horizon_days: int | None) -> int:
    """When a site's day leaves a tier of ``horizon_days`` (None: for ever, FOREVER_DAYS)."""
    return core_days.kept_until(day, FOREVER_DAYS if horizon_days is None else horizon_days, site_zone(scope))


def apply_retention(conn: RedisClient, now: float | None = None, *, days_per_pass: int = DAYS_PER_PASS) -> PassReport:
    """One retention pass at ``now``: per tier, re-time the listed days when the horizon grew since
    it was last applied, then sweep the listed days past the horizon (oldest first, at most
    ``days_per_pass``), every table's sweep of that tier, and take them out of the tier's list."""
    now = time.time() if now is None else now
    settings = get_settings()
    tables = data_tables()
    report = PassReport()
    with keys.bound(conn):
        state = {as_str(k): as_str(v) for k, v in conn.hgetall(state_key()).items()}
        updates: dict[str, Any] = {}
        for tier in table.TIERS:
            horizon = table.tier_days(tier, settings)
            sweepers = [(t.name, t.retention.sweeps[tier]) for t in tables if tier in t.retention.sweeps]
            _retime(conn, tier, horizon, state, updates, sweepers, report, days_per_pass)
            if horizon is not None:
                _sweep(conn, tier, settings, now, sweepers, report, days_per_pass)
        pipe: Any = conn.pipeline(transaction=False)
        for (name, tier), count in report.removed.items():
            pipe.hincrby(state_key(), f"removed:{name}:{tier}", count)
        for (name, tier), count in report.retimed.items():
            pipe.hincrby(state_key(), f"retimed:{name}:{tier}", count)
        updates.update(
            {
                "last_run": repr(now),
                "last_days": sum(report.swept.values()),
                "last_keys": sum(report.removed.values()),
                "last_retimed": sum(report.retimed.values()),
                "last_pending": sum(report.pending.values()),
                **{f"last_pending:{tier}": report.pending[tier] for tier in table.TIERS},
            }
        )
        pipe.hset(state_key(), mapping=updates)
        for name in ("retime:" + tier for tier in table.TIERS if tier not in report.retiming):
            if name in state:
                pipe.hdel(state_key(), name)
        pipe.execute()
    return report


def _is_due(tier: str, settings: Settings, scope: str, day: date, now: float) -> bool:
    """Whether a site's listed day has left ``tier`` at ``now``: it is before the tier's first day
    kept in the site's zone (``core.table.first_day_kept``, the rule the reads' retention notes
    state too)."""
    kept = table.first_day_kept(tier, settings, site_zone(scope), now)
    return kept is not None and day < kept


def _sweep(
    conn: RedisClient,
    tier: str,
    settings: Settings,
    now: float,
    sweepers: list[tuple[str, table.Sweeper]],
    report: PassReport,
    days_per_pass: int,
) -> None:
    """Sweep ``tier``'s listed days past its horizon under ``settings`` (in each site's zone)."""
    horizon = table.tier_days(tier, settings) or 0
    # The last day that may be due in some zone: its end is at least UTC-14 h's midnight before now.
    through = datetime.fromtimestamp(max(0.0, now - horizon * DAY), tz=timezone.utc).date() + timedelta(days=1)
    candidates = day_registry.listed(conn, tier, through=through, limit=days_per_pass)
    due = [(scope, day) for scope, day in candidates if _is_due(tier, settings, scope, day, now)]
    for scope, day in due:
        for name, sweep in sweepers:
            report.removed[name, tier] += sweep(conn, scope, day, None)
    day_registry.forget_days(conn, tier, due)
    report.swept[tier] += len(due)
    if len(candidates) == days_per_pass:  # (more listed: those past the horizon wait)
        report.pending[tier] = _pending(conn, tier, settings, now, through)


def _pending(conn: RedisClient, tier: str, settings: Settings, now: float, through: date) -> int:
    """The site's days of ``tier`` past the horizon still listed: those of 3 days before ``through``
    or older are in every zone (``ZCOUNT``), the few of the last 3 days are checked one by one."""
    certain = through - timedelta(days=3)
    count = int(conn.zcount(day_registry.registry_key(tier), "-inf", certain.toordinal()))
    raw = conn.zrangebyscore(day_registry.registry_key(tier), certain.toordinal() + 1, through.toordinal())
    border = (day_registry.parse_member(member) for member in raw)
    return count + sum(1 for scope, day in border if _is_due(tier, settings, scope, day, now))


def _retime(
    conn: RedisClient,
    tier: str,
    horizon: int | None,
    state: dict[str, str],
    updates: dict[str, Any],
    sweepers: list[tuple[str, table.Sweeper]],
    report: PassReport,
    days_per_pass: int,
) -> None:
    """When ``tier``'s horizon is longer than the one last applied, re-time its listed days' keys
    (``days_per_pass`` a pass, from the cursor kept in ``state``); else note the horizon applied."""
    applied_field, cursor_field = f"applied:{tier}", f"retime:{tier}"
    said = "0" if horizon is None else str(horizon)
    before = state.get(applied_field)
    longer = before is not None and before != "0" and (horizon is None or horizon > int(before))
    if not longer:
        if before != said:
            updates[applied_field] = said
        return
    start = int(state.get(cursor_field) or 0)
    raw = conn.zrange(day_registry.registry_key(tier), start, start + days_per_pass - 1)
    for member in raw:
        scope, day = day_registry.parse_member(member)
        until = horizon_end(scope, day, horizon)
        for name, sweep in sweepers:
            report.retimed[name, tier] += sweep(conn, scope, day, until)
    if len(raw) < days_per_pass:  # every listed day re-timed: the new horizon is applied
        updates[applied_field] = said
        return
    updates[cursor_field] = start + len(raw)
    report.retiming.append(tier)


def status(conn: RedisClient) -> dict[str, Any]:
    """What the retention passes did: ``removed`` and ``retimed`` keys by ``(table, tier)`` since
    the start, the horizons last applied by tier, and the last pass (``last``: when, days swept,
    keys removed and re-timed, days pending by tier), empty before the first pass."""
    with keys.bound(conn):
        return parse_status(conn.hgetall(state_key()))


def parse_status(raw: Any) -> dict[str, Any]:
    """``status`` of the HASH's fields as Redis gave them (``/metrics`` reads it in its round trip)."""
    state = {as_str(k): as_str(v) for k, v in raw.items()}
    removed: dict[tuple[str, str], int] = {}
    retimed: dict[tuple[str, str], int] = {}
    applied: dict[str, str] = {}
    last: dict[str, Any] = {}
    for name, value in state.items():
        what, _sep, rest = name.partition(":")
        if what in ("removed", "retimed"):
            table_name, _sep, tier = rest.rpartition(":")
            (removed if what == "removed" else retimed)[table_name, tier] = int(value)
        elif what == "applied":
            applied[rest] = value
        elif name.startswith("last_"):
            last[name[len("last_") :]] = float(value) if name == "last_run" else int(value)
    return {"removed": removed, "retimed": retimed, "applied": applied, "last": last}


RETENTION_STATE = table.register(
    table.Table(
        name="retention",
        what="the day registry (each tier's site's days with data, store.day_registry) and the retention "
        "pass's horizons last applied, a re-timing's cursor, keys removed and re-timed by table and tier, "
        "and the last pass (when, days swept, keys removed, days pending)",
        module=__name__,
        keys=(table.StoredKey("ct:retention", "HASH"), table.StoredKey("ct:days:{days}:<tier>", "ZSET")),
        tag="none",
        fed_by=(),
        writers=(
            "every write of a site's day (the registry: day_registry.queue_note)",
            "worker.retention.apply_retention (beat, hourly)",
        ),
        readers=("worker.retention", "forget_visitor (the registry)", "counters-tasks tables", "/metrics"),
        retention=table.Retention("the counts never deleted; a day's registry entry until its tier's keys are swept"),
        erasure=table.Erasure.none("table names, tiers and counts only"),
    )
)
"""The retention pass's own state (``core.table``)."""
