"""What a stored *table* is (a site's day totals, a page's all-time figures, the daily uniques
shards, a ranking board...): one declaration, ``Table``, from which every list of tables is read:
``counters-tasks tables`` (what an operator or a privacy officer asks first: every table, its
keys, who writes and reads it, how long it is kept, whether one visitor can be erased from it),
the key model's check (every row of docs/keys.md is a key of exactly one table:
``tests/repo/test_tables.py``), and the write of every kind (``payloads.write_planned``: a table
declaring a feeder for a kind gets that kind's calls queued on the same ``store.scripts.WritePlan``
as the kind's own writes, in the same round trip).

A table is declared and registered by the module that writes it, at import, as a kind is
(``core.kind``); ``counters_tasks.kinds`` imports every module of the package that declares one.
docs/architecture.md "Adding a table" walks through a new one.

This module holds the declaration's type and the registry only: it imports nothing of the store
or data modules, so every layer can read the registry.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from .days import DAY, local_day
from .settings import Settings

Feeder = Callable[[Any, list[tuple[list[Any], str | None]]], None]
"""How the items of a kind feed a table: ``feeder(plan, calls)`` queues, on the write's
``store.scripts.WritePlan``, the table's writes of ``calls`` (each ``(prepared items, call
id)``, as ``core.kind.Kind.write`` gets them), each call at most once per its id."""


@dataclass(frozen=True)
class StoredKey:
    """One key of a table, as docs/keys.md writes it (``ct:site:{tag(D)}:day:<D>``) and its type."""

    pattern: str
    type: str


VISITOR_LEVEL = "visitor-level"
"""The retention tier of what names or sketches one visitor (a day's visitor and pair sets, session
ids, funnel states, dead letters): kept at most COUNTERS_VISITOR_DAYS after its day."""
AGGREGATE = "aggregate"
"""The retention tier of a day's figures (page views, unique counts, sources, who visits, events):
kept COUNTERS_AGGREGATE_DAYS after its day, or for ever (0)."""
TIERS = (VISITOR_LEVEL, AGGREGATE)


def tier_days(tier: str, settings: Settings) -> int | None:
    """The horizon of ``tier`` in days after a day ends under ``settings`` (None: for ever)."""
    if tier == VISITOR_LEVEL:
        return settings.visitor_days
    if tier == AGGREGATE:
        return settings.aggregate_days or None
    raise ValueError(f"no retention tier {tier!r}: one of {TIERS}")


TIER_SETTINGS = {VISITOR_LEVEL: "COUNTERS_VISITOR_DAYS", AGGREGATE: "COUNTERS_AGGREGATE_DAYS"}
"""The setting that sets each tier's horizon (docs/configuration.md)."""


def first_day_kept(tier: str, settings: Settings, zone: str, now: float) -> date | None:
    """The first day of ``tier`` still kept at ``now`` in ``zone`` (None: every day is kept).
    A day leaves its tier when its end plus the tier's days is past (``core.days.kept_until``, the
    rule of the retention pass, ``worker.retention``), so the first day kept is the one that holds
    the instant ``now`` less those days: the reads say so over a range that starts before it."""
    horizon = tier_days(tier, settings)
    return None if horizon is None else local_day(now - horizon * DAY, zone)


Sweeper = Callable[[Any, str, date, "float | None"], int]
"""How the retention pass (``worker.retention``) applies a tier's horizon to one site's day of a
table: ``sweep(conn, scope, day, until)`` deletes (UNLINK) the table's keys of that tier for the
site's ``day`` when ``until`` is None, else makes them expire at ``until`` (epoch seconds: a
horizon made longer since they were written), in calls of bounded cost (a day's many keys, a
per-path sketch each, in several calls); returns how many keys it removed (or re-timed)."""


@dataclass(frozen=True)
class Retention:
    """How long a table's data is kept: ``horizon`` in words (what an operator reads), the
    setting that changes it (None: none does), and the horizon in days under given settings
    (``days(settings)``; None: kept until deleted, or for as long as the table's data is
    written).

    ``sweeps``: tier (``VISITOR_LEVEL``, ``AGGREGATE``) -> the ``Sweeper`` of the table's keys of
    that tier, for a table whose keys are a site's day's: the retention pass applies each tier's
    horizon (``tier_days``) to every site's day the day registry lists (``store.day_registry``),
    so a changed setting applies to data already stored. A table without sweeps keeps its
    own rule (counters, rankings, markers: a TTL or a job of its own)."""

    horizon: str
    setting: str | None = None
    days: Callable[[Settings], float | None] | None = None
    sweeps: Mapping[str, Sweeper] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.sweeps) - set(TIERS)
        if unknown:
            raise ValueError(f"retention sweeps of unknown tiers {sorted(unknown)}: one of {TIERS}")

    def days_under(self, settings: Settings) -> float | None:
        """The horizon in days under ``settings`` (None: no horizon in days)."""
        return None if self.days is None else self.days(settings)


@dataclass(frozen=True)
class ForgetTarget:
    """One visitor to forget on one site (``worker.forget``): the site's scope, what the request
    named (an IP and/or a session id, checked), and when the erasure was asked (epoch seconds).
    Each table's ``Forgetter`` derives the ids it holds from these through ``core.visitors``
    (``visitor_id(ip, day)``, ``pair_visitor``, ``session_visitor_id``, ``session_number``): with
    COUNTERS_VISITOR_KEY=daily a visitor's id differs each day, so ids are made per day."""

    scope: str
    ip: str | None
    session_id: str | None
    erased_at: float


@dataclass
class Forgotten:
    """What forgetting one visitor did to one table (summed over tables for the answer and the
    audit entry): entries removed (set members, hash fields, keys), figures corrected (each a short
    name, ``"site_day 2026-12-01 uv"``), and the figures that are estimates and cannot forget one
    visitor, each with the bound of what remains (``(figure, relative standard error)``). No
    personal data: no id, IP or session goes in here."""

    removed: int = 0
    corrected: list[str] = field(default_factory=list)
    estimates: list[tuple[str, float]] = field(default_factory=list)

    def add(self, other: Forgotten) -> None:
        self.removed += other.removed
        self.corrected += other.corrected
        self.estimates += other.estimates


Forgetter = Callable[[Any, ForgetTarget, Sequence[date]], Forgotten]
"""How one visitor is erased from a table: ``forget(conn, target, days)`` removes what the
table holds of ``target`` on its site for each of ``days`` (the site's days the day registry
lists within the visitor-level horizon; a table that is not by day ignores them), correcting its
exact figures in the same atomic call as each removal, in calls of bounded cost."""


class ForgetterSlot:
    """A ``Forgetter`` that a module above the table's installs (``install``), for a table whose
    forgetter needs more than its own module (the tables of one slot, forgotten in one pass that
    makes every one's keys: ``sitestats.erase``, ``events.erase``), without an import cycle: the
    table declares the slot, the forgetting module imports the table's and fills it. Tables sharing
    one slot are forgotten by one call (``worker.forget`` calls each forgetter once)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.forget: Forgetter | None = None

    def install(self, forget: Forgetter) -> None:
        """The forgetter this slot calls (the forgetting module, at its import)."""
        self.forget = forget

    def __call__(self, conn: Any, target: ForgetTarget, days: Sequence[date]) -> Forgotten:
        if self.forget is None:
            raise RuntimeError(f"forgetter {self.name!r}: the module that installs it was not imported")
        return self.forget(conn, target, days)

    def __repr__(self) -> str:
        return f"ForgetterSlot({self.name!r})"


@dataclass(frozen=True)
class Erasure:
    """Whether one visitor can be erased from a table, and how, or the declared reason why not.

    ``holds``: what of a visitor the table holds (``"visitor ids"``, ``"nothing"``, ...);
    ``erasable``: one visitor's part can be taken out; ``how``: how (when erasable) or why not
    (an estimate, with its error bound; nothing of a visitor is held); ``forget``: the
    ``Forgetter`` that does it (``counters_tasks.forget_visitor`` calls each table's)."""

    holds: str
    erasable: bool
    how: str
    forget: Forgetter | None = None

    @classmethod
    def none(cls, why: str) -> Erasure:
        """A table that holds nothing of a visitor (``why``: what it holds instead)."""
        return cls(NOTHING_OF_A_VISITOR, False, why)

    @property
    def holds_visitor(self) -> bool:
        """Whether it holds anything of a visitor (ids, sketches of them, a message's arguments)."""
        return self.holds != NOTHING_OF_A_VISITOR


NOTHING_OF_A_VISITOR = "nothing of a visitor"
"""What ``Erasure.holds`` says of a table that holds no visitor's id, sketch or arguments."""


@dataclass(frozen=True)
class Table:
    """The declaration of one stored table.

    ``name``: its name (``site_day``), what ``counters-tasks tables`` lists;
    ``what``: what it holds, in one line;
    ``module``: the module that declares, writes and reads it (its ``__name__``);
    ``keys``: its keys, as docs/keys.md has them (each row of docs/keys.md is a key of one table);
    ``tag``: the hash tag its keys share (one per counter group, board, day...);
    ``fed_by``: the kinds (``core.kind.Kind.name``) whose items are written to it;
    ``writers``: the scripts (``store/lua/<name>.lua``) and jobs that write or delete it;
    ``readers``: the public functions, CLI commands and pages that read it;
    ``retention``, ``erasure``: how long it is kept, and whether one visitor can be erased from it;
    ``feeds``: kind name -> its ``Feeder``, for a table another module adds to a kind's write (the
    package's own tables are written by their kind's ``write``: none here);
    ``read``: ``read(conn, **options)`` -> rows (dicts), for a table that has no reader of its own
    in the CLI (``counters-tasks table NAME``)."""

    name: str
    what: str
    module: str
    keys: tuple[StoredKey, ...]
    tag: str
    fed_by: tuple[str, ...]
    writers: tuple[str, ...]
    readers: tuple[str, ...]
    retention: Retention
    erasure: Erasure
    feeds: Mapping[str, Feeder] = field(default_factory=dict)
    read: Callable[..., list[dict[str, Any]]] | None = None

    def __post_init__(self) -> None:
        unfed = set(self.feeds) - set(self.fed_by)
        if unfed:
            raise ValueError(f"table {self.name!r} feeds kinds it does not say it is fed by: {sorted(unfed)}")
        if not self.keys:
            raise ValueError(f"table {self.name!r} declares no key")


_registry: dict[str, Table] = {}
_lock = threading.Lock()


def register(table: Table) -> Table:
    """Make ``table`` known to every list of tables (the CLI, the key model's check, the kinds'
    writes); registering the same declaration again changes nothing, another one under a taken
    name raises ValueError, as does a key pattern another table declares."""
    with _lock:
        other = _registry.get(table.name)
        if other is table:
            return table
        if other is not None:
            raise ValueError(f"table {table.name!r} is declared twice ({other.module}, {table.module})")
        for other in _registry.values():
            shared = {key.pattern for key in table.keys} & {key.pattern for key in other.keys}
            if shared:
                raise ValueError(f"table {table.name!r}: keys {sorted(shared)} are table {other.name!r}'s")
        _registry[table.name] = table
    return table


def registered() -> list[Table]:
    """Every table registered in this process, in the order they were."""
    return list(_registry.values())


def by_name(name: str) -> Table | None:
    """The table named ``name``, if one is registered."""
    return _registry.get(name)


def fed_by(kind: str) -> list[tuple[Table, Feeder]]:
    """The tables a feeder adds to ``kind``'s write, with their feeders (``payloads.write_planned``)."""
    return [(table, table.feeds[kind]) for table in _registry.values() if kind in table.feeds]
