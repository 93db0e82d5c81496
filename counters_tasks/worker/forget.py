"""Forgetting one visitor (issue 44, docs/privacy.md "Erasing one visitor"): ``forget_visitor``
(the task ``counters_tasks.forget_visitor``, the command ``counters-tasks forget``).

It walks every table's declaration (``worker.table_modules.data_tables``, ``core.table.Erasure``):
each table with a ``Forgetter`` is called once (tables sharing one, as the tables of a site's day
do, once for all) over the site's days, and the answers are summed into one: entries removed,
exact figures corrected, the figures that are estimates (a HyperLogLog cannot forget one visitor)
with their standard error, and each table that holds something of a visitor but has no forgetter,
with its declared reason. An audit entry (``forget_audit``: when, which site, how many entries,
which tables; no id, IP or session) is kept of every erasure.

The days: those the day registry lists for the site (``store.day_registry.days_of``, both tiers:
the day tables' sketches are aggregates kept COUNTERS_AGGREGATE_DAYS and hold the visitor's
6-character ids), with the site's days from today back COUNTERS_VISITOR_DAYS +
COUNTERS_DAY_GRACE_DAYS added: a day written before its writes noted it in the registry (data of
an earlier version) is still walked within the visitor-level horizon.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import date, timedelta
from typing import Any

from ..core import days as core_days
from ..core.settings import get_settings
from ..core.sites import check_site, site_name, zone_of
from ..core.table import (
    AGGREGATE,
    VISITOR_LEVEL,
    Erasure,
    ForgetTarget,
    Forgetter,
    Forgotten,
    Retention,
    StoredKey,
    Table,
    register,
)
from ..core.validation import check_ip, check_session_id
from ..errors import InvalidInput
from ..sitestats.erase import visitor_ids
from ..store import day_registry, keys, tombstones
from ..store.client import RedisClient, as_str, get_redis
from . import table_modules

AUDIT_KEPT = 1000
"""Audit entries kept (the newest; LTRIM at each erasure)."""


def audit_key() -> str:
    """LIST of the erasures' audit entries, newest first (JSON, no personal data)."""
    return f"{keys.prefix()}forget:audit"


def read_audit(conn: RedisClient, limit: int = 100) -> list[dict[str, Any]]:
    """The newest ``limit`` audit entries (``counters-tasks table forget_audit``)."""
    return [json.loads(as_str(raw)) for raw in conn.lrange(audit_key(), 0, max(0, limit - 1))]


FORGET_AUDIT = register(
    Table(
        name="forget_audit",
        what="one entry per visitor forgotten (forget_visitor): when, which site, how many entries were "
        "removed, which tables, how many figures were corrected and which are estimates; no id, IP or session",
        module=__name__,
        keys=(StoredKey("ct:forget:audit", "LIST"),),
        tag="none (one key)",
        fed_by=(),
        writers=("worker.forget.forget_visitor",),
        readers=("counters-tasks forget", "counters-tasks table forget_audit"),
        retention=Retention(f"the newest {AUDIT_KEPT} entries (LTRIM at each erasure)"),
        erasure=Erasure.none("when, which site and how many entries an erasure removed: no visitor's id"),
        read=lambda conn, **options: read_audit(conn),
    )
)
"""The audit of erasures (``core.table``)."""


def settle() -> None:
    """Wait ``store.tombstones.SETTLE`` seconds: every worker's copy of the tombstones is then at
    most that old (tests of no worker replace it)."""
    time.sleep(tombstones.SETTLE)


def check_request(site: Any, ip: Any, session_id: Any) -> ForgetTarget:
    """The checked request: a known site, at least one of an IP and a session id, each valid
    (InvalidInput otherwise, before anything is written)."""
    scope = check_site(site)
    if ip is None and session_id is None:
        raise InvalidInput("forget_visitor needs an ip or a session_id (or both)")
    checked_ip = None if ip is None else check_ip(ip)
    if session_id is not None:
        check_session_id(session_id)
    return ForgetTarget(scope, checked_ip, session_id, time.time())


def days_to_walk(conn: RedisClient, scope: str, today: date | None = None) -> list[date]:
    """The site's days that may hold the visitor: listed in the registry (either tier), and the
    days from today back COUNTERS_VISITOR_DAYS + COUNTERS_DAY_GRACE_DAYS (module docstring)."""
    settings = get_settings()
    listed = set(day_registry.days_of(conn, VISITOR_LEVEL, scope)) | set(day_registry.days_of(conn, AGGREGATE, scope))
    today = today or core_days.today(zone_of(scope))
    back = settings.visitor_days + settings.day_grace_days
    listed |= {today - timedelta(days=n) for n in range(-1, back + 1)}  # (-1: a site ahead of the server's day)
    return sorted(listed)


def forget_visitor(
    site: Any = None, ip: Any = None, session_id: Any = None, *, conn: RedisClient | None = None
) -> dict:
    """Forget one visitor of ``site`` named by its ``ip`` and/or ``session_id``: every table's
    forgetter, summed (module docstring). Returns the answer: ``site``, ``removed``, ``corrected``
    (figures), ``estimates`` (``[figure, relative standard error]``), ``tables`` (those whose
    forgetter removed or corrected something: tables sharing one, as a day's slot's, are named
    together), ``not_forgotten`` (``[table, reason]``: tables holding something of a visitor
    without a forgetter) and ``audit`` (the entry recorded)."""
    target = check_request(site, ip, session_id)
    conn = conn or get_redis()
    with keys.bound(conn, write=True):
        walked = days_to_walk(conn, target.scope)
    tombstones.note(conn, {vid for day in walked for vid in visitor_ids(target, day)}, target.erased_at)
    settle()  # every worker's copy of the tombstones holds it before the erasure (store.tombstones)
    total = Forgotten()
    touched: list[str] = []
    not_forgotten: list[list[str]] = []
    done: dict[Callable[..., Any], Forgotten] = {}
    for declared in table_modules.data_tables():
        forget: Forgetter | None = declared.erasure.forget
        if forget is None:
            if declared.erasure.holds_visitor:
                not_forgotten.append([declared.name, declared.erasure.how])
            continue
        if forget not in done:
            done[forget] = forget(conn, target, walked)
            total.add(done[forget])
        if done[forget].removed or done[forget].corrected:
            touched.append(declared.name)
    entry = {
        "at": round(target.erased_at, 3),
        "site": site_name(target.scope),
        "removed": total.removed,
        "corrected": len(total.corrected),
        "estimates": len(total.estimates),
        "tables": touched,
        "days": len(walked),
    }
    with keys.bound(conn, write=True):
        pipe = conn.pipeline(transaction=True)
        pipe.lpush(audit_key(), json.dumps(entry, sort_keys=True))
        pipe.ltrim(audit_key(), 0, AUDIT_KEPT - 1)
        pipe.execute()
    return {
        "site": entry["site"],
        "removed": total.removed,
        "corrected": total.corrected,
        "estimates": [[figure, error] for figure, error in total.estimates],
        "tables": touched,
        "not_forgotten": not_forgotten,
        "audit": entry,
    }
