"""Goals and funnels as defined by a site's owner (``core.conversions``), kept in Redis so every
worker judges with the same ones: ``define_goal``, ``define_funnel``, ``remove_goal``,
``remove_funnel``, ``goals`` and ``funnels`` (the Python API; the CLI's ``define-goal`` and
``define-funnel`` call them), and ``current`` (what a worker judges views and events with,
read again every ``REFRESH`` seconds).

A definition counts from its ``since``: the time it was made plus ``REFRESH`` plus
COUNTERS_FUTURE_TOLERANCE, rounded up to the minute. Every event or view at or after ``since``
reaches a worker that has read the definition (a worker refuses an item more than the tolerance
ahead of its clock, and reads definitions again within ``REFRESH``), so what a goal or funnel
counts from ``since`` on is exact; nothing before it is judged (a definition made after the events
happened says so: ``since`` is shown with its figures). Defining a goal or funnel again under its
name replaces it and starts it again from the new ``since``.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.conversions import (
    MAX_DEFINITIONS,
    Funnel,
    Goal,
    Match,
    Step,
    funnel_from_json,
    goal_from_json,
    match_of,
    to_json,
)
from ..core.days import DAY
from ..core.settings import get_settings
from ..core.sites import check_site
from ..core.table import Erasure, Retention, StoredKey, Table, register
from ..core.validation import check_text
from ..errors import InvalidInput
from ..store import keys
from ..store.client import RedisClient, as_str

REFRESH = 5.0
"""Seconds a worker judges with the definitions it read before reading them again."""

SEPARATOR = keys.SITE_SEPARATOR
"""Between a site's scope and a definition's name in the definitions' HASH fields."""


def definitions_key(what: str) -> str:
    """HASH "<site scope><US><name>" -> the JSON of a goal (``what`` = ``goals``) or funnel (``funnels``)."""
    return f"{keys.prefix()}defs:{what}"


def since_now(now: float | None = None) -> float:
    """The ``since`` of a definition made at ``now``: from when every worker judges with it."""
    now = time.time() if now is None else now
    return float(math.ceil((now + REFRESH + get_settings().future_tolerance) / 60) * 60)


def _store(conn: RedisClient, what: str, definition: Goal | Funnel) -> None:
    field_name = definition.site + SEPARATOR + definition.name
    with keys.bound(conn):
        key = definitions_key(what)
        if (
            not conn.hexists(key, field_name)
            and sum(1 for f in conn.hkeys(key) if as_str(f).startswith(definition.site + SEPARATOR)) >= MAX_DEFINITIONS
        ):
            raise InvalidInput(f"a site has at most {MAX_DEFINITIONS} {what}")
        conn.hset(key, field_name, json.dumps(to_json(definition), separators=(",", ":")))
    _read_cache.clear()


def define_goal(
    conn: RedisClient,
    name: str,
    *,
    page: str | None = None,
    match: str = "exact",
    event: str | None = None,
    prop: str | None = None,
    value: str | None = None,
    revenue: str | None = None,
    site: str | None = None,
    now: float | None = None,
) -> Goal:
    """Define (or replace) the goal ``name`` of ``site``: a page (``page`` and ``match``: exact,
    prefix or pattern) or an event (``event``, optionally ``prop`` = ``value``), optionally with
    ``revenue`` (an event's numeric property, summed). Counts from ``since_now(now)``;
    InvalidInput when the definition is not allowed (``core.conversions``)."""
    goal = Goal(
        check_text(name, "goal name"), Match(page, match, event, prop, value), revenue, check_site(site), since_now(now)
    )
    _store(conn, "goals", goal)
    return goal


def define_funnel(
    conn: RedisClient,
    name: str,
    steps: Sequence[dict[str, Any]],
    window: int,
    *,
    site: str | None = None,
    now: float | None = None,
) -> Funnel:
    """Define (or replace) the funnel ``name`` of ``site``: ``steps`` (2-8 dicts of ``page`` and
    ``match``, or ``event`` with optionally ``prop`` and ``value``, and optionally the step's own
    ``window`` in seconds from the step before) and ``window`` (seconds, from entering the funnel
    to its last step). Counts from ``since_now(now)``; InvalidInput when not allowed."""
    if isinstance(steps, (str, bytes)) or not isinstance(steps, Sequence):
        raise InvalidInput("steps must be a list of dicts")
    made = tuple(Step(match_of(step), step.get("window")) for step in steps)
    funnel = Funnel(check_text(name, "funnel name"), made, window, check_site(site), since_now(now))
    check_window_kept(funnel.window)
    _store(conn, "funnels", funnel)
    return funnel


def check_window_kept(window: int) -> None:
    """A funnel's window plus COUNTERS_FUNNEL_LATENESS must fit in COUNTERS_VISITOR_DAYS: a
    visitor's funnel state is visitor-level data, kept at most those days after its latest step
    event (``funnel_steps``), so a longer attempt would be lost without a word. InvalidInput
    says which setting to raise."""
    settings = get_settings()
    needed = window + settings.funnel_lateness
    if needed > settings.visitor_days * DAY:
        raise InvalidInput(
            f"a funnel window of {window} s plus COUNTERS_FUNNEL_LATENESS ({settings.funnel_lateness} s) needs "
            f"COUNTERS_VISITOR_DAYS of at least {math.ceil(needed / DAY)} (now {settings.visitor_days}): a visitor's "
            "funnel state is visitor-level data, kept at most those days"
        )


def _remove(conn: RedisClient, what: str, name: str, site: str | None) -> bool:
    with keys.bound(conn):
        removed = bool(conn.hdel(definitions_key(what), check_site(site) + SEPARATOR + name))
    _read_cache.clear()
    return removed


def remove_goal(conn: RedisClient, name: str, *, site: str | None = None) -> bool:
    """Remove a goal's definition (its figures stay until their days leave retention); whether it was defined."""
    return _remove(conn, "goals", name, site)


def remove_funnel(conn: RedisClient, name: str, *, site: str | None = None) -> bool:
    """Remove a funnel's definition (its figures stay until their days leave retention); whether it was defined."""
    return _remove(conn, "funnels", name, site)


def _read(conn: RedisClient, what: str, site: str | None) -> list[Any]:
    with keys.bound(conn):
        stored = conn.hgetall(definitions_key(what))
    parse = goal_from_json if what == "goals" else funnel_from_json
    found = [parse(json.loads(as_str(value))) for value in stored.values()]
    if site is not None:
        scope = check_site(site)
        found = [d for d in found if d.site == scope]
    return sorted(found, key=lambda d: (d.site, d.name))


def goals(conn: RedisClient, site: str | None = None) -> list[Goal]:
    """The goals defined (of ``site``, or of every site when None), by site and name."""
    return _read(conn, "goals", site)


def funnels(conn: RedisClient, site: str | None = None) -> list[Funnel]:
    """The funnels defined (of ``site``, or of every site when None), by site and name."""
    return _read(conn, "funnels", site)


def funnel(conn: RedisClient, name: str, site: str | None = None) -> Funnel | None:
    """The funnel ``name`` of ``site``, if defined."""
    return next((f for f in funnels(conn, site) if f.name == name), None)


@dataclass(frozen=True)
class Defined:
    """The definitions a worker judges with, by site scope (``current``)."""

    goals: dict[str, tuple[Goal, ...]] = field(default_factory=dict)
    funnels: dict[str, tuple[Funnel, ...]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """No goal and no funnel: views and events are judged against nothing (no cost)."""
        return not self.goals and not self.funnels


_read_cache: dict[int, tuple[float, Defined]] = {}
_read_cache_lock = threading.Lock()


def current(conn: RedisClient) -> Defined:
    """The goals and funnels of every site, as this process last read them (again every ``REFRESH`` s)."""
    now = time.monotonic()
    cached = _read_cache.get(id(conn))
    if cached is not None and now - cached[0] < REFRESH:
        return cached[1]
    by_site_goals: dict[str, list[Goal]] = {}
    by_site_funnels: dict[str, list[Funnel]] = {}
    for goal in goals(conn):
        by_site_goals.setdefault(goal.site, []).append(goal)
    for made in funnels(conn):
        by_site_funnels.setdefault(made.site, []).append(made)
    defined = Defined(
        {s: tuple(g) for s, g in by_site_goals.items()}, {s: tuple(f) for s, f in by_site_funnels.items()}
    )
    with _read_cache_lock:
        _read_cache[id(conn)] = (now, defined)
    return defined


DEFINITIONS = register(
    Table(
        name="definitions",
        what="the goals and funnels defined, each with the time it counts from (since)",
        module=__name__,
        keys=(StoredKey("ct:defs:goals", "HASH"), StoredKey("ct:defs:funnels", "HASH")),
        tag="none (single-key commands)",
        fed_by=(),
        writers=("events.define_goal", "events.define_funnel", "events.remove_goal", "events.remove_funnel"),
        readers=("events.goals", "events.funnels", "events.definitions.current (workers, every 5 s)"),
        retention=Retention("until removed"),
        erasure=Erasure.none("definitions (pages, event names, properties), nothing of a visitor"),
    )
)
