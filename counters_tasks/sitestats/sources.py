"""The sources tables (``sources``): a site's day of page views by source, one HASH a kind
(``SOURCE_KINDS``: the referring domain, the UTM source, medium and campaign) source ->
``"<pv> <uv> <sketch>"``, at most COUNTERS_MAX_DAY_SOURCES a kind, the rest under ``(other)``.
Written by the ``site_day`` call (``day_keys`` and ``add_day_args``: its part of the call); read
here (``top_sources``, ``source_totals``). The who-visits tables (``who_visits``) are keyed as these
are (``site_day_table``, by their own letters) and ranked the same way (``ranked_counts``).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import date
from typing import Any, NamedTuple

from ..core import days
from ..core.clients import shown
from ..core.settings import Settings
from ..core.sites import check_site
from ..core.table import StoredKey, Table, register
from ..core.validation import check_day_range, check_int
from ..errors import InvalidInput
from ..store import keys, page_sketch, sweeps
from ..store.client import RedisClient, read_pipeline
from . import slots
from .page_day import OTHER, SKETCHED, TableTotals, page_value, rank, sketch_hll, tables_views

SOURCE_KINDS = {"referrer": "r", "utm_source": "s", "utm_medium": "m", "utm_campaign": "c"}
"""The kinds of source a view has (``core.sources``), each a table of its own a day, by letter."""


def site_day_table(day: date, kind: str, *, tag: str | None = None, site: str = "") -> str:
    """HASH of one kind of value on one day, the rest under the field "" ("(other)"), kept as long
    as the day's totals (from its own latest write): a source (a letter of SOURCE_KINDS) ->
    "<pv> <uv> <sketch>", at most COUNTERS_MAX_DAY_SOURCES; who visits (a letter of
    who_visits.CLIENT_KINDS) -> its page views, at most COUNTERS_MAX_DAY_CLIENTS (its sketch in
    ``who_visits.site_day_who_sketches``)."""
    return f"{keys.prefix()}site:{{{tag or slots.site_day_tag(day, site)}}}:src{kind}:{keys.day_label(day, site)}"


SketchTable = tuple[dict[str, int], bytearray]
"""One sketch table of a ``site_day`` call: its fields (value -> its number, from 1, in the
order first met), and a byte a view of the call: the number of its field (0: none)."""


def sweep(conn: RedisClient, scope: str, day: date, until: float | None) -> int:
    """The retention sweep of a site's day's sources tables (aggregate): each kind's HASH and the
    HyperLogLog of each source whose sketch reads ``#`` (HSCAN of the HASH)."""
    with keys.bound(conn):
        removed = 0
        for letter in SOURCE_KINDS.values():
            table_key = site_day_table(day, letter, site=scope)
            hlls = sweeps.sketched_keys(conn, table_key, functools.partial(sketch_hll, table_key))
            removed += sweeps.apply(conn, [*hlls, table_key], until)
        return removed


SOURCES = register(
    Table(
        name="sources",
        what="page views and unique visitors of a local day by source: referring domain, "
        "utm_source, utm_medium, utm_campaign (a table each, by letter); at most "
        "COUNTERS_MAX_DAY_SOURCES a kind, the rest as (other). The who-visits tables share this "
        "key pattern (letters b, o, d, g, l: table who_visits)",
        module=__name__,
        keys=(
            StoredKey("ct:site:{tag(D)}:src<source letter>:<D>", "HASH"),
            StoredKey("ct:site:{tag(D)}:src<source letter>:<D>:<digest(source)>", "HLL"),
        ),
        tag="per site and day",
        fed_by=("visit",),
        writers=("store/lua/site_day.lua",),
        readers=("sitestats.top_sources", "sitestats.source_totals", "counters-tasks sources", "/api/sources"),
        retention=slots.day_tables_kept(sweep),
        erasure=SKETCHED,
    )
)
"""The sources tables (``core.table``)."""


def day_keys(day: date, tables: dict[str, SketchTable], tag: str, scope: str) -> list[str]:
    """The keys of a ``site_day`` call's sources tables (``tables``: by letter, in the call's order)."""
    return [site_day_table(day, kind, tag=tag, site=scope) for kind in tables]


def add_day_args(args: list[Any], tables: dict[str, SketchTable], settings: Settings) -> None:
    """The sources' part of a ``site_day`` call's arguments: each table's cap, how its UV is told
    ("sketch": from each value's sketch), its values and their digests, and a byte a view (its
    value's number)."""
    for fields, marks in tables.values():  # a kind of source: each one's UV from its sketch
        digests = [keys.path_digest(field) for field in fields]  # (its HLL's key: page_sketch.hll_key)
        args += [settings.max_day_sources, "sketch", len(fields), *fields, *digests, bytes(marks)]


class SourceCount(NamedTuple):
    """One source of a site's page views over a range (``top_sources``): its page views, and its
    distinct visitors: the union of its days' sketches (``store.page_sketch``), exact while each
    day had at most 256 visitors of it, else an estimate (``uv_approximate``; ``uv_error``, its
    relative standard error: 0.81%)."""

    source: str
    pv: int
    uv: int
    uv_approximate: bool
    uv_error: float = 0.0
    """The relative standard error of ``uv``: 0.0 when it is exact."""


SOURCES_LIMIT = 1000
"""The most sources one ``top_sources`` call lists."""


def top_sources(
    conn: RedisClient, start: date, end: date, kind: str = "referrer", limit: int = 10, *, site: str | None = None
) -> list[SourceCount]:
    """The sources of ``kind`` (``referrer``: referring domains, with ``(direct)`` and
    ``(internal)``; ``utm_source``, ``utm_medium``, ``utm_campaign``) of the site's page views
    over the local days ``start``..``end``, most views first (ties by name), ``(other)`` for the
    views of the sources past COUNTERS_MAX_DAY_SOURCES on a day. Bounded like ``top_pages``: each
    day's table is read in HSCAN pages (at most the cap of fields), then the listed sources'
    sketches of each day with one HMGET for their UV over the range."""
    scope = check_site(site)
    with keys.bound(conn):
        check_day_range(start, end)
        check_int(limit, "limit", 1, SOURCES_LIMIT)
        letter = SOURCE_KINDS.get(kind) if isinstance(kind, str) else None
        if letter is None:
            raise InvalidInput(f"kind must be one of {', '.join(SOURCE_KINDS)}, got {kind!r}")
        span = days.days_between(start, end)
        return _top_values(conn, [site_day_table(day, letter, site=scope) for day in span], limit)


def _top_values(conn: RedisClient, tables: list[str], limit: int) -> list[SourceCount]:
    """The sources of a range's day tables by page views, most first (ties by name), ``(other)``
    for the views past a day's cap; each one's UV the union of its days' sketches."""
    views: Counter[str] = Counter()
    for day_views in tables_views(conn, tables):
        views.update(day_views)

    def day_sketches(fields: list[str]) -> list[dict[str, page_sketch.Sketch]]:  # a source's sketch is in its value
        pipe = read_pipeline(conn)
        for table in tables:
            pipe.hmget(table, fields)
        return [
            {
                field: (page_value(value)[2], page_sketch.hll_key(table, field))
                for field, value in zip(fields, values, strict=True)
            }
            for table, values in zip(tables, pipe.execute(), strict=True)
        ]

    return ranked_counts(views, {name: {name} for name in views}, limit, day_sketches, page_sketch.union_of(conn))


def ranked_counts(
    views: Counter[str],
    fields_of: dict[str, set[str]],
    limit: int,
    day_sketches: Callable[[list[str]], list[dict[str, page_sketch.Sketch]]],
    union: Callable[[Iterable[page_sketch.Sketch]], tuple[int, float]],
) -> list[SourceCount]:
    """The first ``limit`` names of ``views`` (page views a name over a range, "" the views past
    a day's cap), most first (ties by name), each with its UV: the union of the sketches of its
    fields (``fields_of``: a source is its own field; a browser family is its versions) that
    ``day_sketches`` reads, a ``{field: (sketch, its HLL's key)}`` a day, for the fields of the
    names listed, counted by ``union`` (``page_sketch.union_of``)."""
    ranked = sorted(((name, n) for name, n in views.items() if n > 0), key=rank)[:limit]
    if not ranked:
        return []
    per_day = day_sketches([field for name, _n in ranked for field in sorted(fields_of[name])])
    out = []
    for name, pv in ranked:
        uv, error = union(day[field] for day in per_day for field in fields_of[name])
        out.append(SourceCount(shown(name) if name else OTHER, pv, uv, error > 0, error))
    return out


def source_totals(
    conn: RedisClient, start: date, end: date, kind: str = "referrer", *, site: str | None = None
) -> TableTotals:
    """The whole sources table of ``kind`` over ``start``..``end`` (``top_sources`` with no
    limit): how many sources it lists (``(other)`` one of them) and the page views it holds. Each
    day's table read in HSCAN pages, as ``top_sources`` reads it."""
    scope = check_site(site)
    with keys.bound(conn):
        check_day_range(start, end)
        letter = SOURCE_KINDS.get(kind) if isinstance(kind, str) else None
        if letter is None:
            raise InvalidInput(f"kind must be one of {', '.join(SOURCE_KINDS)}, got {kind!r}")
        views: Counter[str] = Counter()
        tables = [site_day_table(day, letter, site=scope) for day in days.days_between(start, end)]
        for day_views in tables_views(conn, tables):
            views.update(day_views)
        return TableTotals(sum(1 for n in views.values() if n > 0), sum(views.values()))
