"""The pages table (``page_day``): a site's day of page views by path, a HASH path ->
``"<pv> <uv> <sketch>"`` (its UV of the day exact through the ``pairs`` SET, its sketch its visitors
for a UV over a range: ``store.page_sketch``), at most COUNTERS_MAX_DAY_PATHS paths, the views of
the others under ``OTHER``. Written by the ``site_day`` call (``add_day_args``: its part of the
call's arguments); read here (``page_totals``, the values of every day table: ``tables_views``),
by ``reads`` and ``day_tops``.
"""

from __future__ import annotations

import functools
from collections import Counter
from datetime import date
from typing import Any, NamedTuple

from ..core import days
from ..core.settings import Settings
from ..core.sites import check_site
from ..core.table import Erasure, StoredKey, Table, register
from ..core.validation import check_day_range
from ..store import keys, page_sketch, sweeps
from ..store.client import RedisClient, as_str, read_pipeline
from . import slots


def site_day_pages(day: date, *, tag: str | None = None, site: str = "") -> str:
    """HASH path -> "<pv> <uv>" on one day, at most COUNTERS_MAX_DAY_PATHS paths, the rest
    under the field "" ("(other)"); kept as long as the totals."""
    return f"{keys.prefix()}site:{{{tag or slots.site_day_tag(day, site)}}}:pages:{keys.day_label(day, site)}"


SKETCHED = Erasure(
    "a sketch of each value's visitors (store.page_sketch), and counts of views",
    True,
    "the visitor's 6-character sketch id (36 bits of its visitor id) taken out of every list sketch of "
    "the day (HSCAN of the table, then lua/forget_sketches.lua a batch of fields) and the value's uv "
    "minus one with it (a path's: when its pairs member was there); a sketch past 256 visitors a day "
    "is a Redis HyperLogLog (0.81% standard error) that cannot forget one visitor: named as an estimate",
    forget=slots.FORGET_DAY_TABLES,
)
"""How one visitor is erased from a day table of sketches: the pages (``page_day``), the
sources (``sources``) and who visits (``who_visits``)."""


def sweep(conn: RedisClient, scope: str, day: date, until: float | None) -> int:
    """The retention sweep of a site's day's pages (aggregate): the HASH and the HyperLogLog of
    each path whose sketch reads ``#`` (found by HSCAN of the HASH), unlinked or re-timed."""
    with keys.bound(conn):
        table_key = site_day_pages(day, site=scope)
        hlls = sweeps.sketched_keys(conn, table_key, functools.partial(sketch_hll, table_key))
        return sweeps.apply(conn, [*hlls, table_key], until)


def sketch_hll(table_key: str, field: str, value: str) -> str | None:
    """The HyperLogLog of a pages (or sources) field whose value's sketch reads ``#``."""
    return page_sketch.hll_key(table_key, field) if sweeps.is_hll_sketch(sweeps.last_word_sketch(value)) else None


PAGE_DAY = register(
    Table(
        name="page_day",
        what="each path's page views and unique visitors of a local day, with a sketch of its "
        "visitors (its UV over a range); at most COUNTERS_MAX_DAY_PATHS paths, the rest as (other)",
        module=__name__,
        keys=(
            StoredKey("ct:site:{tag(D)}:pages:<D>", "HASH"),
            StoredKey("ct:site:{tag(D)}:pages:<D>:<digest(path)>", "HLL"),
            StoredKey("ct:scratch:hll:<random>", "HLL"),
        ),
        tag="per site and day",
        fed_by=("visit",),
        writers=("store/lua/site_day.lua",),
        readers=(
            "sitestats.site_visit_info",
            "sitestats.site_visit_range",
            "sitestats.top_pages",
            "sitestats.page_totals",
            "counters-tasks stats",
            "counters-tasks top-pages",
            "/api/stats",
            "/api/top-pages",
        ),
        retention=slots.day_tables_kept(sweep),
        erasure=SKETCHED,
    )
)
"""The pages table (``core.table``)."""


def add_day_args(args: list[Any], pages: dict[str, list[str]], settings: Settings) -> None:
    """The pages' part of a ``site_day`` call's arguments (after the call's ids): the cap, how
    a path's UV is told ("pairs": exact through the pairs SET) and each path with its digest
    (``keys.path_digest``) and its views' visitors in pairs form."""
    args += [settings.max_day_paths, "pairs", len(pages)]
    for path, ids in pages.items():
        args += [path, keys.path_digest(path), len(ids), *ids]


OTHER = "(other)"
"""How the views of a day's paths past COUNTERS_MAX_DAY_PATHS are listed (stored under "")."""


def page_figures(value: Any) -> tuple[int, int]:
    """``(pv, uv)`` from a pages HASH value "<pv> <uv> <sketch>" (None: not tracked)."""
    pv, uv, _sketch = page_value(value)
    return pv, uv


def views_of_value(value: Any) -> int:
    """The page views alone of a day table's value "<pv> <uv> <sketch>" (None: 0), without
    decoding the rest: a range read parses thousands of them."""
    if value is None:
        return 0
    return int(value.partition(b" " if isinstance(value, bytes) else " ")[0])


def page_value(value: Any) -> tuple[int, int, str]:
    """``(pv, uv, sketch)`` from a pages HASH value (the sketch: ``store.page_sketch``; "" when
    the day was counted before sketches were kept)."""
    if value is None:
        return 0, 0, ""
    pv, uv, sketch = (as_str(value).split(" ", 2) + [""])[:3]
    return int(pv), int(uv), sketch


PAGES_PER_CALL = 1000
"""Fields one HSCAN call of ``top_pages`` asks for, so no read runs long."""


def tables_views(conn: RedisClient, tables: list[str]) -> list[dict[str, int]]:
    """Every field's page views of each of ``tables`` (day tables of "<pv> <uv> <sketch>"
    values), read in HSCAN pages of PAGES_PER_CALL: one round trip a page for all the tables at
    once, so a range of small tables costs one round trip, not one a day."""
    views: list[dict[str, int]] = [{} for _ in tables]
    for first in range(0, len(tables), TABLES_PER_ROUND):
        _read_views(conn, tables, views, range(first, min(first + TABLES_PER_ROUND, len(tables))))
    return views


TABLES_PER_ROUND = 16
"""Tables ``tables_views`` pages through together (a round trip carries a page of each)."""


def _read_views(conn: RedisClient, tables: list[str], views: list[dict[str, int]], which: range) -> None:
    cursors: dict[int, Any] = dict.fromkeys(which, 0)
    while cursors:
        pipe = read_pipeline(conn)
        asked = list(cursors)
        for n in asked:
            pipe.hscan(tables[n], cursors[n], count=PAGES_PER_CALL)
        for n, (cursor, page) in zip(asked, pipe.execute(), strict=True):
            into = views[n]
            for field, value in page.items():
                pv = views_of_value(value)
                if pv > 0:
                    into[as_str(field)] = pv
            if int(cursor) == 0:
                del cursors[n]
            else:
                cursors[n] = cursor


def rank(item: tuple[str, int]) -> tuple[int, str]:
    """Most views first, ties by the name shown (the field "" is shown as ``OTHER``)."""
    return -item[1], item[0] or OTHER


class TableTotals(NamedTuple):
    """A who-visits or sources table over a range, whole (``client_totals``, ``source_totals``):
    ``values``, the rows ``top_clients`` / ``top_sources`` would list with no limit (``(other)``
    one of them), and ``pv``, the page views the table holds (every row's, ``(other)`` and
    ``(unknown)`` included): what a reader says beside a table cut at its limit ("N more") or
    that holds fewer views than the site's (or page's) PV (views counted while the tables were off)."""

    values: int
    pv: int


def page_totals(conn: RedisClient, start: date, end: date, *, site: str | None = None) -> TableTotals:
    """Every page of the site over ``start``..``end`` (``top_pages`` with no limit): how many paths
    it would list (``(other)`` one of them) and their page views. Reads every page of the days
    (at most COUNTERS_MAX_DAY_PATHS a day, in HSCAN pages): for a reader that says "N more" under
    a cut list (the CLI's ``top-pages``), not for every read of the dashboard."""
    scope = check_site(site)
    with keys.bound(conn):
        check_day_range(start, end)
        views: Counter[str] = Counter()
        for day_views in tables_views(conn, [site_day_pages(day, site=scope) for day in days.days_between(start, end)]):
            views.update(day_views)
        return TableTotals(sum(1 for n in views.values() if n > 0), sum(views.values()))
