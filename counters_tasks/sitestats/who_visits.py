"""Who visits (``who_visits``): a site's day of page views by browser, operating system, device
type, country and language (``core.clients``), one table a kind (``CLIENT_KINDS``: value -> its
page views, keyed as the sources tables are, ``sources.site_day_table``) and the sketches of each
value's visitors (``site_day_who_sketches``), kept with COUNTERS_CLIENT_TABLES on; again for each
page of COUNTERS_CLIENT_PAGES in a scope of its own (``page_scope``). Written by the ``site_day``
call (``day_keys`` and ``add_day_args``: its part of the call); read here (``top_clients``,
``folded_client_views``, ``client_totals``).
"""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from datetime import date
from typing import Any

from ..core import days
from ..core.clients import Who, family
from ..core.settings import Settings, get_settings
from ..core.sites import check_site
from ..core.table import StoredKey, Table, register
from ..core.validation import check_day_range, check_int, check_path
from ..errors import InvalidInput
from ..store import keys, page_sketch, sweeps
from ..store.client import RedisClient, as_str, read_pipeline
from . import slots, sources
from .page_day import SKETCHED, TableTotals
from .sources import SourceCount, ranked_counts

CLIENT_KINDS = {"browser": "b", "os": "o", "device": "d", "country": "g", "language": "l"}
"""Who visits (``core.clients``): each a table of its own a day (``sources.site_day_table``: value ->
its page views), by letter, in the order of ``SiteView.who``; their values' visitors in
``site_day_who_sketches``. A browser's and a system's value is ``<family><tab><version>`` (or
the family alone)."""


CLIENT_LETTERS = tuple(CLIENT_KINDS.values())
"""The letters of the who-visits tables, in the order of ``SiteView.who``."""


def site_day_who_sketches(day: date, *, tag: str | None = None, site: str = "") -> str:
    """HASH "<letter>:<value>" -> the sketch of that value's visitors on one day (``page_sketch``),
    for each value of the who-visits tables (``CLIENT_KINDS``; "<letter>:" the ``(other)`` of
    one); kept as long as the day's totals (from its own latest write)."""
    return f"{keys.prefix()}site:{{{tag or slots.site_day_tag(day, site)}}}:who:{keys.day_label(day, site)}"


PAGE_SCOPE_SEPARATOR = "\x1e"
"""Between a site's scope and a page's digest in a page scope (``page_scope``): no site name has it."""


def page_scope(scope: str, path: str) -> str:
    """The scope of one page's who-visits tables (COUNTERS_CLIENT_PAGES): the site's scope, then
    ``PAGE_SCOPE_SEPARATOR`` and the page's digest (``%1E<digest>`` in a key). Given as the site
    of the site-day keys, it puts the page's tables in their own slot."""
    return f"{scope}{PAGE_SCOPE_SEPARATOR}{keys.path_digest(path)}"


WhoTable = tuple[str, list[str], list[int], bytearray]
"""One who-visits table of a ``site_day`` call: its letter, its values (in the order first met),
their page views in the call, and a byte a view: the number of its value (from 1)."""


def sweep(conn: RedisClient, scope: str, day: date, until: float | None) -> int:
    """The retention sweep of a site's (or page's) day's who-visits tables (aggregate): the five
    tables, the sketches' HASH and the HyperLogLog of each value whose sketch reads ``#``."""
    with keys.bound(conn):
        sketches = site_day_who_sketches(day, site=scope)
        hlls = sweeps.sketched_keys(conn, sketches, functools.partial(_who_hll, sketches))
        tables = [sources.site_day_table(day, letter, site=scope) for letter in CLIENT_LETTERS]
        return sweeps.apply(conn, [*hlls, *tables, sketches], until)


def _who_hll(sketches: str, field: str, value: str) -> str | None:
    """The HyperLogLog of a who-visits value (field ``"<letter>:<value>"``) whose sketch reads ``#``."""
    letter, _sep, shown_value = field.partition(":")
    return page_sketch.hll_key(sketches, shown_value, letter) if sweeps.is_hll_sketch(value) else None


WHO_VISITS = register(
    Table(
        name="who_visits",
        what="page views of a local day by browser, operating system, device type, country and "
        "language (a table each), and each value's sketch of visitors; for the site and for each "
        "page of COUNTERS_CLIENT_PAGES; with COUNTERS_CLIENT_TABLES on",
        module=__name__,
        keys=(
            StoredKey("ct:site:{tag(D)}:src<client letter>:<D>", "HASH"),
            StoredKey("ct:site:{tag(D)}:who:<D>", "HASH"),
            StoredKey("ct:site:{tag(D)}:who:<D>:<client letter><digest(value)>", "HLL"),
        ),
        tag="per site (or page of COUNTERS_CLIENT_PAGES) and day",
        fed_by=("visit",),
        writers=("store/lua/site_day.lua",),
        readers=(
            "sitestats.top_clients",
            "sitestats.folded_client_views",
            "sitestats.client_totals",
            "counters-tasks browsers, operating-systems, devices, countries, languages",
            "/api/clients",
        ),
        retention=slots.day_tables_kept(sweep),
        erasure=SKETCHED,
    )
)
"""The who-visits tables (``core.table``)."""


def day_keys(day: date, who: list[WhoTable], tag: str, scope: str) -> list[str]:
    """The keys of a ``site_day`` call's who-visits part: its five tables, then their sketches."""
    return [
        *(sources.site_day_table(day, letter, tag=tag, site=scope) for letter, *_rest in who),
        site_day_who_sketches(day, tag=tag, site=scope),
    ]


def add_day_args(args: list[Any], who: list[WhoTable], settings: Settings) -> None:
    """The who-visits part of a ``site_day`` call's arguments: the cap, then each table's letter,
    its values, their digests, their views in the call, and a byte a view (its value's number)."""
    args.append(settings.max_day_clients)
    for letter, values, counts, view_values in who:
        digests = [keys.path_digest(value) for value in values]  # (its HLL's key: page_sketch.hll_key)
        args += [letter, len(values), *values, *digests, *counts, bytes(view_values)]


def who_digest(who: Who) -> str:
    """8 characters naming a view's five values (``core.clients``) in the day's pairs SET, after
    its visitor's 11: the member is new the first time that visitor shows that profile that day,
    and only then are its values' sketches worked (``site_day``: a visitor's later views add
    nothing to them). Made like a path's digest (``keys.path_digest``) of the values joined by a
    control character, which no path has: with the tag key bound now (cached per tag key)."""
    return _who_digest(keys.tag_key(), who)


@functools.lru_cache(maxsize=4096)
def _who_digest(tag_key: bytes, who: Who) -> str:
    """(``tag_key``: the cache's key only; ``keys.path_digest`` reads the same bound one.)"""
    return keys.path_digest("\x1f".join(who))


def client_pages() -> frozenset[str]:
    """The canonical names (``check_path``) of the pages of COUNTERS_CLIENT_PAGES: their views
    are counted again in who-visits tables of their own (who reads ``/pricing``), when the tables
    are on."""
    settings = get_settings()
    return _client_pages(settings) if settings.client_tables else frozenset()


def client_tables_status() -> dict[str, Any]:
    """Whether the who-visits tables are kept (``client_tables``: COUNTERS_CLIENT_TABLES, read from
    the settings: on by default) and the pages of COUNTERS_CLIENT_PAGES counted again
    (``client_pages``, canonical names, sorted; none while the tables are off): what health,
    ``/api/config``, the who-visits reads and ``make run`` say, so a table with no rows, or fewer
    views than the site's, is explained where it is shown."""
    return {"client_tables": get_settings().client_tables, "client_pages": sorted(client_pages())}


def client_tables_said(status: dict[str, Any]) -> str:
    """``client_tables_status`` as one line of text (``health``, ``make run``)."""
    if not status["client_tables"]:
        return "who visits tables off (COUNTERS_CLIENT_TABLES=off; unset or on, on the workers, keeps them)"
    pages = ", ".join(status["client_pages"]) or "none"
    return f"who visits tables on (COUNTERS_CLIENT_TABLES); pages of COUNTERS_CLIENT_PAGES: {pages}"


@functools.lru_cache(maxsize=4)
def _client_pages(settings: Settings) -> frozenset[str]:
    """(Cached per settings: a page's canonical name also follows COUNTERS_PATH_TRAILING_SLASH
    and COUNTERS_PATH_CASE, which ``check_path`` reads.)"""
    return frozenset(check_path(path) for path in settings.client_pages)


def check_client_page(site: str | None, path: str | None) -> tuple[str, str | None]:
    """What a who-visits read reads, checked: the site's scope (``check_site``) and the page
    (``check_path``; None: the site's own tables). InvalidInput for a page whose tables are not
    kept (not in COUNTERS_CLIENT_PAGES). It makes no key, so a reader can refuse a page before
    Redis is asked, with or without a deployment bound: the page's scope (``page_scope``)
    needs the deployment's tag key, and is made inside ``keys.bound`` (``_clients_scope``)."""
    scope = check_site(site)
    if path is None:
        return scope, None
    page = check_path(path)
    if page not in client_pages():
        raise InvalidInput(
            f"path {page[:100]!r} is not in COUNTERS_CLIENT_PAGES: who visits is kept for those pages alone"
            " (and with COUNTERS_CLIENT_TABLES=on)"
        )
    return scope, page


def _clients_scope(scope: str, page: str | None) -> str:
    """The scope whose tables a who-visits read reads (a checked ``check_client_page``): the site's,
    or its page's (``page_scope``: within ``keys.bound``, as it is keyed with the tag key)."""
    return scope if page is None else page_scope(scope, page)


CLIENTS_LIMIT = 1000
"""The most values one ``top_clients`` call lists."""


CLIENT_VIEWS = ("browser", "browser_version", "os", "os_version", "device", "country", "language")
"""What ``top_clients`` lists: a browser or system by family (its versions' figures together),
or by version (``Chrome 120``); the device type; the country code; the preferred language."""


def top_clients(
    conn: RedisClient,
    start: date,
    end: date,
    kind: str = "browser",
    limit: int = 10,
    *,
    site: str | None = None,
    path: str | None = None,
) -> list[SourceCount]:
    """Who visited the site (or its page ``path``, one of COUNTERS_CLIENT_PAGES: who reads
    ``/pricing``) over the local days ``start``..``end`` (``core.clients``), by
    ``kind`` (one of ``CLIENT_VIEWS``): each value's page views and distinct visitors (the union
    of its days' sketches: exact while a day had at most 256 visitors of it, else an estimate,
    ``uv_approximate``, ``uv_error``), most views first (ties by name), ``(other)`` for the views of the
    values past COUNTERS_MAX_DAY_CLIENTS on a day, ``(unknown)`` for views that did not tell
    (no User-Agent or Accept-Language given, an IP of no country). Bounded like ``top_sources``."""
    scope, page = check_client_page(site, path)
    with keys.bound(conn):
        scope = _clients_scope(scope, page)
        check_day_range(start, end)
        check_int(limit, "limit", 1, CLIENTS_LIMIT)
        if kind not in CLIENT_VIEWS:
            raise InvalidInput(f"kind must be one of {', '.join(CLIENT_VIEWS)}, got {kind!r}")
        letter = CLIENT_KINDS[kind.partition("_")[0]]
        span = days.days_between(start, end)
        views, fields_of = _client_views(conn, span, kind, scope)

        tables = [site_day_who_sketches(day, site=scope) for day in span]

        def day_sketches(fields: list[str]) -> list[dict[str, page_sketch.Sketch]]:  # apart, by "<letter>:<value>"
            pipe = read_pipeline(conn)
            for table in tables:
                pipe.hmget(table, [f"{letter}:{field}" for field in fields])
            return [
                {
                    field: (as_str(sketch or b""), page_sketch.hll_key(table, field, letter))
                    for field, sketch in zip(fields, sketches, strict=True)
                }
                for table, sketches in zip(tables, pipe.execute(), strict=True)
            ]

        return ranked_counts(views, fields_of, limit, day_sketches, page_sketch.union_of(conn))


def _client_views(
    conn: RedisClient, span: list[date], kind: str, scope: str
) -> tuple[Counter[str], dict[str, set[str]]]:
    """The page views of each value of ``kind`` over the days ``span`` of ``scope`` (a family's
    versions summed for ``browser`` and ``os``; "" the views past a day's cap), and the table
    fields each value is made of: one HGETALL a day (a table holds at most
    COUNTERS_MAX_DAY_CLIENTS values and "")."""
    table, _by, how = kind.partition("_")
    letter = CLIENT_KINDS[table]
    grouped = table in ("browser", "os") and how != "version"
    pipe = read_pipeline(conn)
    for day in span:
        pipe.hgetall(sources.site_day_table(day, letter, site=scope))
    views: Counter[str] = Counter()
    fields_of: dict[str, set[str]] = defaultdict(set)
    for day_table in pipe.execute():
        for field, count in day_table.items():
            value = as_str(field)
            name = family(value) if grouped and value else value
            views[name] += int(count)
            fields_of[name].add(value)
    return views, fields_of


def folded_client_views(
    conn: RedisClient,
    start: date,
    end: date,
    kind: str = "browser",
    *,
    site: str | None = None,
    path: str | None = None,
) -> int:
    """The page views of ``kind`` (one of ``CLIENT_VIEWS``) that the site's (or its page's) days over
    ``start``..``end`` counted under ``(other)``: the views of the values past
    COUNTERS_MAX_DAY_CLIENTS on a day. One field a day: what a reader says beside the figures
    when ``(other)`` is not among the values ``top_clients`` listed."""
    scope, page = check_client_page(site, path)
    with keys.bound(conn):
        scope = _clients_scope(scope, page)
        check_day_range(start, end)
        if kind not in CLIENT_VIEWS:
            raise InvalidInput(f"kind must be one of {', '.join(CLIENT_VIEWS)}, got {kind!r}")
        letter = CLIENT_KINDS[kind.partition("_")[0]]
        pipe = read_pipeline(conn)
        for day in days.days_between(start, end):
            pipe.hget(sources.site_day_table(day, letter, site=scope), "")
        return sum(int(views or 0) for views in pipe.execute())


def client_totals(
    conn: RedisClient,
    start: date,
    end: date,
    kind: str = "browser",
    *,
    site: str | None = None,
    path: str | None = None,
) -> TableTotals:
    """The whole table of ``kind`` (one of ``CLIENT_VIEWS``) of the site (or its page ``path``)
    over ``start``..``end``: how many values ``top_clients`` would list with no limit (a family's
    versions one value for ``browser`` and ``os``), and the page views it holds. One HGETALL a day
    (a table holds at most COUNTERS_MAX_DAY_CLIENTS values and ``(other)``)."""
    scope, page = check_client_page(site, path)
    with keys.bound(conn):
        scope = _clients_scope(scope, page)
        check_day_range(start, end)
        if kind not in CLIENT_VIEWS:
            raise InvalidInput(f"kind must be one of {', '.join(CLIENT_VIEWS)}, got {kind!r}")
        views, _fields_of = _client_views(conn, days.days_between(start, end), kind, scope)
        return TableTotals(sum(1 for n in views.values() if n > 0), sum(views.values()))
