"""The day registry: which site's days have data stored, per retention tier (``core.table``'s
``VISITOR_LEVEL`` and ``AGGREGATE``), so that the retention pass (``worker.retention``) finds what is
past a horizon in time proportional to what is due (never a SCAN of the keyspace), a changed horizon
applies to days already stored, and ``forget_visitor`` walks the days a visitor may be held on.

One ZSET a tier, ``ct:days:{days}:<tier>``: members ``<YYYY-MM-DD>\\x1f<scope>`` (the default
site's scope is ``""``), scored by the day's ordinal (``date.toordinal``). Every write of a site's
day notes it in both tiers (``queue_note``: ``ZADD NX``, two commands per site and day of a write,
in the write's own round trip); the retention pass removes a day from a tier once its keys of that
tier are swept (``forget_days``). Nothing here knows a table: the tables' sweeps do.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date
from typing import Any

from ..core.table import AGGREGATE, TIERS, VISITOR_LEVEL
from . import keys
from .client import RedisClient, as_str

SEPARATOR = "\x1f"
"""Between a member's day and its site's scope (``keys.SITE_SEPARATOR``, which no site name holds)."""
_TIER_NAMES = {VISITOR_LEVEL: "visitor", AGGREGATE: "aggregate"}


def registry_key(tier: str) -> str:
    """ZSET of the site's days that have data of ``tier`` stored (``{days}``: one slot)."""
    return f"{keys.prefix()}days:{{days}}:{_TIER_NAMES[tier]}"


def member(scope: str, day: date) -> str:
    """A site's day as the registry lists it."""
    return f"{day.isoformat()}{SEPARATOR}{scope}"


def parse_member(raw: Any) -> tuple[str, date]:
    """``(scope, day)`` of a registry member."""
    text = as_str(raw)
    day, _, scope = text.partition(SEPARATOR)
    return scope, date.fromisoformat(day)


def queue_note(pipe: Any, days: Iterable[tuple[str, date]]) -> None:
    """Queue on ``pipe`` the note that each ``(scope, day)`` has data in every tier (``ZADD NX``:
    a day already listed keeps its entry)."""
    mapping = {member(scope, day): day.toordinal() for scope, day in set(days)}
    if not mapping:
        return
    for tier in TIERS:
        pipe.zadd(registry_key(tier), mapping, nx=True)


def listed(conn: RedisClient, tier: str, *, through: date | None = None, limit: int = 500) -> list[tuple[str, date]]:
    """The site's days listed in ``tier``, oldest first, those on or before ``through`` only when
    given, at most ``limit`` (a bounded call: ``ZRANGEBYSCORE ... LIMIT``)."""
    top = "+inf" if through is None else through.toordinal()
    raw = conn.zrangebyscore(registry_key(tier), "-inf", top, start=0, num=limit)
    return [parse_member(each) for each in raw]


def days_of(conn: RedisClient, tier: str, scope: str) -> list[date]:
    """Every day of site ``scope`` listed in ``tier``, oldest first (the registry holds a few
    hundred entries a site at most: the tier's horizon in days)."""
    days: list[date] = []
    start = 0
    while True:
        raw = conn.zrange(registry_key(tier), start, start + 999)
        for each in raw:
            listed_scope, day = parse_member(each)
            if listed_scope == scope:
                days.append(day)
        if len(raw) < 1000:
            return days
        start += 1000


def forget_days(conn: RedisClient, tier: str, entries: Iterable[tuple[str, date]]) -> int:
    """Take ``entries`` (``(scope, day)``) out of ``tier``'s list: their keys of that tier are gone."""
    members = [member(scope, day) for scope, day in entries]
    return int(conn.zrem(registry_key(tier), *members)) if members else 0
