"""The package's stored tables, listed from their declarations (``core.table``): what
``counters-tasks tables`` shows (every table, its keys, who writes and reads it, how long it is
kept, whether one visitor can be erased from it) and ``counters-tasks table NAME`` reads (a
table declared with a reader of its own, as an app's table is).

Every module of the package that declares a table is in ``PACKAGE_TABLE_MODULES``
(``tests/repo/test_tables.py`` finds any that is not); an app's own tables are listed too once
their module is imported (the worker imports it with ``celery worker -I``, the CLI with
``--import MODULE``).
"""

from __future__ import annotations

import importlib
from datetime import datetime, timezone
from typing import Any

from ..core import table
from ..core.settings import get_settings
from ..errors import InvalidInput
from ..store import keys
from ..store.client import RedisClient
from ..worker import table_modules

PACKAGE_TABLE_MODULES = (
    *table_modules.DATA_TABLE_MODULES,
    "counters_tasks.ops.importer.ledger",
    "counters_tasks.ops.views",
)
"""The modules that declare the package's tables (each registers its own at import)."""


def known_tables(extra_modules: tuple[str, ...] = ()) -> list[table.Table]:
    """Every table declared: the package's (its modules imported), then those of ``extra_modules``
    (an app's, by module name) and any other module this process imported that registered one."""
    for name in PACKAGE_TABLE_MODULES:
        importlib.import_module(name)
    for name in extra_modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise InvalidInput(f"--import {name}: {exc}") from None
    declared = table.registered()
    return sorted(declared, key=lambda each: (_listed_at(each.module), declared.index(each)))


def package_tables() -> list[table.Table]:
    """The package's own tables (those its modules declare), not an app's."""
    return [each for each in known_tables() if _listed_at(each.module) < len(PACKAGE_TABLE_MODULES)]


def _listed_at(module: str) -> int:
    """Where ``module`` (or the package holding it) stands in ``PACKAGE_TABLE_MODULES``: the
    package's tables in that order, an app's after them."""
    for at, listed in enumerate(PACKAGE_TABLE_MODULES):
        if module == listed or module.startswith(listed + "."):
            return at
    return len(PACKAGE_TABLE_MODULES)


def table_entry(declared: table.Table) -> dict[str, Any]:
    """One table as ``counters-tasks tables`` shows it (JSON), its horizon in days under this
    process's settings."""
    retention, erasure = declared.retention, declared.erasure
    days = retention.days_under(get_settings())
    return {
        "name": declared.name,
        "what": declared.what,
        "module": declared.module,
        "keys": [{"key": key.pattern, "type": key.type} for key in declared.keys],
        "tag": declared.tag,
        "fed_by": list(declared.fed_by),
        "writers": list(declared.writers),
        "readers": list(declared.readers),
        "kept": retention.horizon,
        "kept_setting": retention.setting,
        "kept_days": None if days is None else round(days, 3),
        "retention_tiers": list(retention.sweeps),
        "holds": erasure.holds,
        "holds_visitor": erasure.holds_visitor,
        "visitor_erasable": erasure.erasable,
        "erasure": erasure.how,
        "readable_here": declared.read is not None,
    }


def tables_view(extra_modules: tuple[str, ...] = ()) -> dict[str, Any]:
    """Every table (``table_entry``), in the order declared, and how many of them hold something of
    a visitor and can (or cannot) have one visitor erased."""
    entries = [table_entry(declared) for declared in known_tables(extra_modules)]
    of_visitors = [entry for entry in entries if entry["holds_visitor"]]
    return {
        "tables": entries,
        "count": len(entries),
        "hold_visitors": len(of_visitors),
        "visitor_erasable": sum(entry["visitor_erasable"] for entry in of_visitors),
    }


def with_retention(data: dict[str, Any], status: dict[str, Any] | None, problem: str | None = None) -> dict[str, Any]:
    """``data`` (``tables_view``) with what the retention pass removed (``worker.retention.status``):
    each table that has sweeps gets ``removed_by_retention`` (tier -> keys removed since the start),
    and ``retention`` says the last pass (``last``: when, days swept, keys removed and re-timed,
    days pending), or why the figures could not be read (``problem``: Redis away)."""
    removed = {} if status is None else status["removed"]
    for entry in data["tables"]:
        if entry["retention_tiers"]:
            entry["removed_by_retention"] = (
                None
                if status is None
                else {tier: removed.get((entry["name"], tier), 0) for tier in entry["retention_tiers"]}
            )
    data["retention"] = {"last": None if status is None else (status["last"] or None), "problem": problem}
    return data


def retention_line(data: dict[str, Any]) -> str:
    """What ``counters-tasks tables`` says of the retention pass under its table."""
    said = data.get("retention") or {}
    if said.get("problem"):
        return f"retention figures not read: {said['problem']}"
    last = said.get("last")
    if not last:
        return "no retention pass yet (beat's apply_retention, hourly at :45)"
    when = datetime.fromtimestamp(last["run"], tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return (
        f"last retention pass {when}: {last.get('days', 0)} site's days swept, {last.get('keys', 0)} keys removed, "
        f"{last.get('retimed', 0)} re-timed, {last.get('pending', 0)} days past a horizon pending"
    )


def table_read_view(conn: RedisClient, name: str, extra_modules: tuple[str, ...] = ()) -> dict[str, Any]:
    """The rows of table ``name`` through its declared reader (``Table.read``): an app's table
    that has no command of its own. The package's tables have theirs: an InvalidInput names them."""
    tables = {declared.name: declared for declared in known_tables(extra_modules)}
    declared = tables.get(name)
    if declared is None:
        raise InvalidInput(f"no table {name!r}: counters-tasks tables lists them ({', '.join(sorted(tables))})")
    if declared.read is None:
        raise InvalidInput(f"table {name!r} is read by {', '.join(declared.readers)}, not by `table`")
    with keys.bound(conn):  # (its keys made with the deployment's tag key, as every reader's)
        rows = declared.read(conn)
    return {"table": name, "rows": rows, "count": len(rows)}
