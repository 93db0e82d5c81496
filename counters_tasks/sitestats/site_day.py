"""Site PV/UV (docs/design.md): all-time and per-day page views and unique visitors, site and path.

Unlike a read-decide-write design (read counts, then decide, then pipeline), every decision is
made inside Lua, on a set of visitor ids: a visitor is new to a set exactly when SADD (or
HSETNX) says so, whatever the interleaving of requests. A visit touches three slots, one script
call each, in one pipeline:

- the day's slot (``site_day``): the site's totals and visitors of that local day, and each
  path's figures of the day (a pages HASH path -> "<pv> <uv>", exact per path through a SET of
  visitor/path pairs), capped at COUNTERS_MAX_DAY_PATHS paths a day, the rest under OTHER;
- the visitor's shard slot (``site_all``): the site's all-time totals and visitors (16 shards
  by visitor id, so no one key holds every visitor and the hot all-time key is spread);
- the path's tag group (``path_all``): each path's all-time figures in one small HASH per path
  (pv, uv and its visitor ids), expiring COUNTERS_PATH_KEEP_DAYS after its latest view.

Each set answers "new visitor?" for its own figure only, so all UV figures stay exact without
any cross-slot step. The visitor id is an HMAC of the IP (raw IPs never reach Redis).

History: any past day is accepted. A day never counted is opened by its first write, however
old, and is exact; its visitor sets live COUNTERS_DAY_GRACE_DAYS past its end or past that
first write, whichever is later. A later view of a closed day (its visitor sets gone) still
counts in the day's PV, the all-time figures and the counters, not in that day's UV, and is
reported (``refusals``, reason ``closed_day``). Totals are kept COUNTERS_DAY_TOTALS_DAYS past
the day's end or its latest write.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import heapq
import hmac
import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any, NamedTuple

from redis.client import NEVER_DECODE
from redis.exceptions import RedisError

from .. import live, refusals
from ..core import days
from ..core.clients import Who, check_headers, family, shown, who_of
from ..core.days import local_day
from ..core.settings import Settings, get_settings
from ..core.sites import check_site, hosts_of, site_names, zone_of
from ..core.sources import DIRECT, check_campaign, referrer_domain
from ..core.validation import (
    check_day,
    check_day_range,
    check_event_time,
    check_int,
    check_ip,
    check_message_id,
    check_now,
    check_path,
)
from ..errors import ConfigurationError, InvalidInput
from ..store import keys, page_sketch
from ..store.client import RedisClient, as_str, is_cluster, read_pipeline
from ..store.hll import union_count
from ..store.scripts import execute_in_order, run_script


class SiteCount(NamedTuple):
    day: date | None
    pv: int
    uv: int


class SiteView(NamedTuple):
    """One validated page view: who (HMAC visitor id), what (normalized path), which local day.
    (A NamedTuple, not a frozen dataclass: one is made per view a worker applies, at a third
    of the cost.)"""

    visitor: str
    path: str
    day: date
    site: str = ""  # the scope of the view's site (core.sites): "" for the default site
    referrer: str = DIRECT  # its referring domain, reduced (core.sources)
    campaign: tuple[tuple[str, str], ...] = ()  # (kind letter, tag) of its UTM tags: keys.SOURCE_KINDS
    who: Who | None = None  # browser, system, device, country, language (core.clients); None: no such tables


normalize_ip = check_ip
normalize_path = check_path


def visitor_id(ip: Any) -> str:
    """HMAC-SHA256 of the normalized IP under COUNTERS_SECRET, first 64 bits as a signed integer.

    A signed 64-bit integer so small sets stay intsets; the IP cannot be recovered without the key.
    """
    ip = check_ip(ip)
    secret = get_settings().secret
    if not secret:
        raise ConfigurationError("COUNTERS_SECRET is not set: visitor ids cannot be made")
    return _visitor_id(secret, ip)


@functools.lru_cache(maxsize=65536)
def _visitor_id(secret: str, ip: str) -> str:
    mac = hmac.new(secret.encode("utf-8"), ip.encode("utf-8"), hashlib.sha256).digest()
    return str(int.from_bytes(mac[:8], "big", signed=True))


def visitors_expire_at(day: date, site: str = "") -> int:
    """The day-based end of a day's visitor sets: its end plus COUNTERS_DAY_GRACE_DAYS. A day
    first written later (a back-fill) keeps them that long after its first write instead."""
    return days.kept_until(day, get_settings().day_grace_days, zone_of(site))


def totals_days() -> int:
    """Days a day's totals and pages are kept (never fewer than its visitor sets)."""
    settings = get_settings()
    return max(settings.day_totals_days, settings.day_grace_days)


def totals_expire_at(day: date, site: str = "") -> int:
    """The day-based end of a day's PV/UV totals: COUNTERS_DAY_TOTALS_DAYS after its end, or
    that long after its latest write when later."""
    return days.kept_until(day, totals_days(), zone_of(site))


def prepare_view(
    ip: Any,
    path: Any,
    now: Any = None,
    site: Any = None,
    referrer: Any = None,
    utm: Any = None,
    user_agent: Any = None,
    language: Any = None,
    client: Any = None,
) -> SiteView:
    """Validate one page view (raises InvalidInput; writes nothing), with its visitor id."""
    scope = check_site(site)
    day = local_day(check_event_time(now, "now"), zone_of(scope))
    return view_on(ip, path, day, scope, referrer, utm, user_agent, language, client)


def view_on(
    ip: Any,
    path: Any,
    day: date,
    site: str = "",
    referrer: Any = None,
    utm: Any = None,
    user_agent: Any = None,
    language: Any = None,
    client: Any = None,
) -> SiteView:
    """One page view on ``day`` of site ``site`` (a checked scope; ``day`` the site's local day of
    a time already checked: a caller that also needs the day computes it once), its path and IP
    validated, its source reduced (``core.sources``: ``referrer`` a URL or a domain, ``utm`` the
    campaign's tags), who visits derived (``core.clients``: from the IP, ``user_agent`` (or its
    reduced ``client``) and the Accept-Language header ``language``; not when
    COUNTERS_CLIENT_TABLES is off) (raises InvalidInput)."""
    clean_path = check_path(path)
    clean_ip = check_ip(ip)
    source = DIRECT if referrer is None else referrer_domain(referrer, hosts_of(site))
    campaign = (
        () if utm is None else tuple((keys.SOURCE_KINDS[f"utm_{k}"], tag) for k, tag in check_campaign(utm).items())
    )
    if get_settings().client_tables:
        who: Who | None = who_of(clean_ip, user_agent, language, client)
    else:  # nothing kept, but bad input refused as with the tables on
        check_headers(user_agent, language, client)
        who = None
    return SiteView(visitor_id(clean_ip), clean_path, day, site, source, campaign, who)


def queue_views(
    conn: RedisClient, pipe: Any, views: Iterable[SiteView], message_id: str | None
) -> list[tuple[date, int]]:
    """Queue on ``pipe`` one script call per slot (day, visitor shard, path group) for ``views``.

    Returns the day and number of views of each ``site_day`` call (DAY_VIEWS_PER_CALL views at
    most each), in order: they are queued first, and each one's reply is the number of its views
    that fell on a closed day (``closed_views``), or -1 when its message was applied there
    before (``applied_views``). Every view is in exactly one of them."""
    with keys.bound(conn, write=True):
        settings = get_settings()
        mode = settings.uv_mode
        ttl = settings.dedupe_ttl if message_id is not None else 0
        by_day: dict[tuple[str, date], list[SiteView]] = defaultdict(list)
        by_shard: dict[int, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
        by_group: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
        group_of: dict[tuple[str, str], tuple[str, str]] = {}  # (site, path) -> (its group, its name): once a call
        for view in views:
            site, visitor = view.site, view.visitor
            by_day[site, view.day].append(view)
            by_shard[keys.site_shard_of(visitor)][site].append(visitor)
            named = group_of.get((site, view.path))
            if named is None:
                name = keys.scoped(site, view.path)
                named = group_of[site, view.path] = (keys.path_tag(name), name)
            by_group[named[0]][named[1]].append(visitor)

        day_calls = [
            (site, day, part, part_id)
            for (site, day), day_views in by_day.items()
            for part, part_id in zip(*_parts(day_views, message_id), strict=True)
        ]
        for site, day, day_views, part_id in day_calls:
            _queue_day_call(conn, pipe, site, site, day, day_views, part_id, ttl)
        pages = client_pages()
        for (site, day), day_views in by_day.items() if pages else ():  # then each page's who visits
            by_page: dict[str, list[SiteView]] = defaultdict(list)
            for view in day_views:
                if view.who is not None and view.path in pages:
                    by_page[view.path].append(view)
            for path, page_views in by_page.items():
                scope = keys.page_scope(site, path)
                for part, part_id in zip(*_parts(page_views, message_id), strict=True):
                    _queue_day_call(conn, pipe, scope, site, day, part, part_id, ttl)
        for shard, per_site in by_shard.items():  # a shard's slot is every site's: one call for all of them
            script_keys, args = [], [ttl, mode]
            for site, ids in per_site.items():
                script_keys += [keys.site_all_totals(shard, site), keys.site_all_visitors(shard, mode, site)]
                args += [len(ids), *ids]
            if ttl and message_id is not None:
                script_keys.append(keys.site_seen(message_id, tag=keys.site_shard_tag(shard)))
            run_script(conn, "site_all", script_keys, args, client=pipe)
        kept = settings.path_keep_days * days.DAY
        for tag, per_path in by_group.items():
            script_keys = []
            args = [ttl, mode, kept, len(per_path)]
            for path, ids in per_path.items():
                script_keys.append(keys.path_totals(path, tag=tag))
                if mode == "hll":
                    script_keys.append(keys.path_visitors(path, tag=tag))
                args += [len(ids), *ids]
            if ttl and message_id is not None:
                script_keys.append(keys.path_seen(message_id, tag=tag))
            run_script(conn, "path_all", script_keys, args, client=pipe)
        return [(day, len(day_views)) for _site, day, day_views, _id in day_calls]


def _queue_day_call(
    conn: RedisClient,
    pipe: Any,
    scope: str,
    site: str,
    day: date,
    day_views: list[SiteView],
    part_id: str | None,
    ttl: int,
) -> None:
    """Queue one ``site_day`` call of ``day_views`` (one part of a day's, ``_parts``) on ``pipe``:
    under the keys of ``scope``, the site's own (``site``, whose zone makes the day's expiry),
    or a page's (``keys.page_scope``: its who visits alone, COUNTERS_CLIENT_PAGES; no pages or
    sources table is sent)."""
    settings = get_settings()
    mode = settings.uv_mode
    page = scope != site
    tag = keys.site_day_tag(day, scope)
    script_keys = [
        keys.site_day_totals(day, tag=tag, site=scope),
        keys.site_day_visitors(day, mode, tag=tag, site=scope),
        keys.site_day_range_hll(day, tag=tag, site=scope),
        keys.site_day_pairs(day, tag=tag, site=scope),
    ]
    args: list[Any] = [
        ttl,
        mode,
        visitors_expire_at(day, site),
        days.kept_from_now(settings.day_grace_days),
        totals_expire_at(day, site),
        days.kept_from_now(totals_days()),
        len(day_views),
    ]
    args += [view.visitor for view in day_views]
    pages, tables, who, short_ids, profiles = _day_tables(day_views)
    if page:  # (its page's views and visitors are the site's pages table's)
        pages, tables = {}, {}
    script_keys.append(keys.site_day_pages(day, tag=tag, site=scope))  # the tables: the pages, then the sources
    script_keys += [keys.site_day_table(day, kind, tag=tag, site=scope) for kind in tables]
    if who:  # then who visits: its five tables and their sketches
        script_keys += [keys.site_day_table(day, letter, tag=tag, site=scope) for letter, *_rest in who]
        script_keys.append(keys.site_day_who_sketches(day, tag=tag, site=scope))
    args += [short_ids, profiles, 1 + len(tables)]
    # the pages: each path's UV exact through the pairs SET
    args += [settings.max_day_paths, "pairs", len(pages)]
    for path, ids in pages.items():
        args += [path, keys.path_digest(path), len(ids), *ids]
    for fields, marks in tables.values():  # a kind of source: each one's UV from its sketch
        args += [settings.max_day_sources, "sketch", len(fields), *fields, bytes(marks)]
    if who:
        args.append(settings.max_day_clients)
        for letter, values, counts, view_values in who:
            args += [letter, len(values), *values, *counts, bytes(view_values)]
    if ttl and part_id is not None:
        script_keys.append(keys.site_seen(part_id, tag=tag))
    run_script(conn, "site_day", script_keys, args, client=pipe)


CLIENT_LETTERS = tuple(keys.CLIENT_KINDS.values())
"""The letters of the who-visits tables, in the order of ``SiteView.who``."""

SketchTable = tuple[dict[str, int], bytearray]
"""One sketch table of a ``site_day`` call: its fields (value -> its number, from 1, in the
order first met), and a byte a view of the call: the number of its field (0: none)."""

WhoTable = tuple[str, list[str], list[int], bytearray]
"""One who-visits table of a ``site_day`` call: its letter, its values (in the order first met),
their page views in the call, and a byte a view: the number of its value (from 1)."""


def _day_tables(
    views: list[SiteView],
) -> tuple[dict[str, list[str]], dict[str, SketchTable], list[WhoTable], str, str]:
    """The entries of one ``site_day`` call (at most DAY_VIEWS_PER_CALL views): the pages (path
    -> its views' visitors in pairs form), each kind of source (``keys.SOURCE_KINDS`` letter)
    its views have as a ``SketchTable``, who visits (``CLIENT_LETTERS``: five ``WhoTable``, or
    none when the views have no such values), the views' 6-character ids (``page_sketch``) one
    after the other, and (with who visits) each view's pairs member of its visitor and profile
    (``who_digest``), one after the other. A view is a byte of each table, not an argument: a
    call of 100 views with nine tables sends 100 ids once, not 900 times."""
    count = len(views)
    pages: dict[str, list[str]] = defaultdict(list)
    referrers: SketchTable = ({}, bytearray(count))
    tables: dict[str, SketchTable] = {"r": referrers}
    who_numbers: list[dict[str, int]] = []
    who_counts: list[list[int]] = []
    who_marks: list[bytearray] = []
    short_ids, profiles = [], []
    for at, view in enumerate(views):
        member = pair_visitor(view.visitor)
        short_ids.append(member[:6])
        pages[view.path].append(member)
        fields = referrers[0]
        referrers[1][at] = fields.get(view.referrer) or fields.setdefault(view.referrer, len(fields) + 1)
        for kind, tag in view.campaign:
            fields, marks = tables.get(kind) or tables.setdefault(kind, ({}, bytearray(count)))
            marks[at] = fields.get(tag) or fields.setdefault(tag, len(fields) + 1)
        if view.who is None:
            if who_numbers:
                profiles.append("~" * 19)  # (none: a view without them, from an older journal)
            continue
        if not who_numbers:
            who_numbers = [{} for _ in CLIENT_LETTERS]
            who_counts = [[] for _ in CLIENT_LETTERS]
            who_marks = [bytearray(count) for _ in CLIENT_LETTERS]
            profiles = ["~" * 19] * at  # (the views before it had none)
        for numbers, counts, marks, value in zip(who_numbers, who_counts, who_marks, view.who, strict=True):
            number = numbers.get(value)
            if number is None:
                counts.append(0)
                number = numbers[value] = len(counts)
            counts[number - 1] += 1
            marks[at] = number
        profiles.append(member + who_digest(view.who))
    who = (
        [
            (letter, list(numbers), counts, marks)
            for letter, numbers, counts, marks in zip(CLIENT_LETTERS, who_numbers, who_counts, who_marks, strict=True)
        ]
        if who_numbers
        else []
    )
    return pages, tables, who, "".join(short_ids), "".join(profiles)


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


DAY_VIEWS_PER_CALL = 100
"""Views one ``site_day`` call applies at most (under 256: a view's value in a table is one byte,
``_day_tables``). A view costs the server ~15-25 us there (its
pages' and sources' values read, parsed and written back with their sketches): 150 a call took
2-3 ms of CPU, up to 6 ms on zipf traffic (issue 32). Fewer a call cost more a visit, as a
popular page's value is read and written again by each call: 75 took the longest call to ~3 ms
for 10-20% more of this script's CPU a visit; 100 is between."""


DAY_WHO_VALUES_PER_CALL = 64
"""Distinct who-visits values (``SiteView.who``, over its five tables) one ``site_day`` call
takes at most. A value costs that call ~3-5 us (read, folded past the cap, written, and its
sketch worked): traffic of real browsers brings ~30 to a call of 100 views, but 100 views each of
a new user agent and language brought 200 and calls of ~3.7 ms (50,000 user agents in a day,
``tests/core/test_clients.py``); such views go ~30 to a call."""


def _parts(views: list[SiteView], message_id: str | None) -> tuple[list[list[SiteView]], list[str | None]]:
    """A day's views of one message in parts of DAY_VIEWS_PER_CALL, fewer when their who-visits
    values pass DAY_WHO_VALUES_PER_CALL, each part with its own dedupe id (``<id>/d<n>``, the
    same on every delivery: the views come in the message's order, and the parts follow them)."""
    if all(view.who is None for view in views):  # (no who visits: parts of DAY_VIEWS_PER_CALL)
        parts = [views[first : first + DAY_VIEWS_PER_CALL] for first in range(0, len(views), DAY_VIEWS_PER_CALL)]
        return parts, keys.chunk_ids(message_id, len(parts), "/d")
    parts = []
    part: list[SiteView] = []
    values: set[tuple[str, str]] = set()  # (letter, value) of the part's views
    for view in views:
        pairs = list(zip(CLIENT_LETTERS, view.who or (), strict=False))
        new = [pair for pair in pairs if pair not in values]
        if part and (len(part) == DAY_VIEWS_PER_CALL or len(values) + len(new) > DAY_WHO_VALUES_PER_CALL):
            parts.append(part)
            part, values, new = [], set(), pairs  # (each of its values new to the new part)
        part.append(view)
        values.update(new)
    if part:
        parts.append(part)
    return parts, keys.chunk_ids(message_id, len(parts), "/d")


@functools.lru_cache(maxsize=65536)
def pair_visitor(visitor: str) -> str:
    """A visitor id in 11 characters (base64 of its 64 bits) for the day's pairs SET: members
    of 19 characters fit a smaller allocation than the decimal id's ~28. (Cached: a call per
    view a worker applies.)"""
    return base64.urlsafe_b64encode(int(visitor).to_bytes(8, "big", signed=True)).decode()[:11]


def closed_views(replies: Iterable[Any]) -> int:
    """How many views the ``site_day`` replies say fell on a closed day (counted without UV)."""
    return sum(max(0, int(reply)) for reply in replies)


def applied_views(calls: Iterable[tuple[date, int]], replies: Iterable[Any]) -> tuple[int, int]:
    """``(applied, duplicates)``: the views of the ``site_day`` calls (``queue_views``) written
    now, and those skipped because their message was applied before (reply -1)."""
    applied = duplicates = 0
    for (_day, count), reply in zip(calls, replies, strict=True):
        if int(reply) == -1:
            duplicates += count
        else:
            applied += count
    return applied, duplicates


def record_visit(
    conn: RedisClient,
    ip: str,
    path: str,
    now: float | None = None,
    *,
    message_id: str | None = None,
    site: str | None = None,
    referrer: str | None = None,
    utm: dict[str, str] | None = None,
    user_agent: str | None = None,
    language: str | None = None,
) -> None:
    """One page view of ``path`` by visitor ``ip``: site and path, all-time and per-day PV/UV.

    Atomic per slot, one round trip; with ``message_id`` a redelivered message changes nothing.
    Any past day is accepted: a day never counted is opened by its first view and is then
    exact. A view of a closed day (one counted before, whose visitor sets expired) counts in PV
    and the all-time figures but not in that day's UV, and is reported as ``closed_day``.
    ``site``: a site of ``COUNTERS_SITES`` (None: the default site); its day is in its zone.
    ``referrer`` (the Referer URL, or a domain) and ``utm`` (``{"source", "medium", "campaign"}``)
    are the view's source (``core.sources``; none: ``(direct)``), counted in the day's sources.
    ``user_agent`` and ``language`` (the User-Agent and Accept-Language headers) with ``ip`` tell
    who visits (``core.clients``: browser, system, device, country, language), counted in the
    day's tables of them.
    """
    check_message_id(message_id)
    ts = check_event_time(now, "now")
    view = prepare_view(ip, path, ts, site, referrer, utm, user_agent, language)
    with keys.bound(conn, write=True) as used:

        def data(pipe: Any) -> None:
            queue_views(conn, pipe, [view], message_id)
            live.queue_sightings(pipe, [(view.site, ts, view.visitor)])

        [replies] = execute_in_order(conn, data)
        keys.confirm_written(conn, used)
        refusals.count_partial(conn, "record_visit", message_id, closed_views(replies[:1]))


OTHER = "(other)"
"""How the views of a day's paths past COUNTERS_MAX_DAY_PATHS are listed (stored under "")."""


def _page_figures(value: Any) -> tuple[int, int]:
    """``(pv, uv)`` from a pages HASH value "<pv> <uv> <sketch>" (None: not tracked)."""
    pv, uv, _sketch = _page_value(value)
    return pv, uv


def _page_views(value: Any) -> int:
    """The page views alone of a day table's value "<pv> <uv> <sketch>" (None: 0), without
    decoding the rest: a range read parses thousands of them."""
    if value is None:
        return 0
    return int(value.partition(b" " if isinstance(value, bytes) else " ")[0])


def _page_value(value: Any) -> tuple[int, int, str]:
    """``(pv, uv, sketch)`` from a pages HASH value (the sketch: ``store.page_sketch``; "" when
    the day was counted before sketches were kept)."""
    if value is None:
        return 0, 0, ""
    pv, uv, sketch = (as_str(value).split(" ", 2) + [""])[:3]
    return int(pv), int(uv), sketch


def site_visit_info(
    conn: RedisClient, day: date | None = None, path: str | None = None, *, site: str | None = None
) -> SiteCount:
    """PV and UV of the site (``path`` None) or a path, on a local ``day`` or all time (None).
    ``site``: which site (None: the default one; its days are in its own zone).

    A path's figures of a day are 0 when the path was not among the day's first
    COUNTERS_MAX_DAY_PATHS paths (its views count under ``OTHER``, see ``top_pages``)."""
    scope = check_site(site)
    with keys.bound(conn):
        if day is not None:
            check_day(day)
        if path is not None:
            path = normalize_path(path)
        if path is not None and day is not None:
            return SiteCount(day, *_page_figures(conn.hget(keys.site_day_pages(day, site=scope), path)))
        if path is not None:
            pairs = [conn.hmget(keys.path_totals(keys.scoped(scope, path)), "pv", "uv")]
        elif day is not None:
            pairs = [conn.hmget(keys.site_day_totals(day, site=scope), "pv", "uv")]
        else:
            pipe = read_pipeline(conn)
            for shard in range(keys.SITE_SHARDS):
                pipe.hmget(keys.site_all_totals(shard, scope), "pv", "uv")
            pairs = pipe.execute()
        pv = sum(int(p or 0) for p, _ in pairs)
        uv = sum(int(u or 0) for _, u in pairs)
        return SiteCount(day, pv, uv)


class SiteRange(NamedTuple):
    """PV/UV over the days ``start``..``end``: ``pv`` summed, ``uv`` the distinct visitors of the
    whole range (a union of the days: a visitor of several days counts once; ``uv_approximate``
    when it is an estimate), with the per-day figures in ``days``."""

    start: date
    end: date
    path: str | None
    pv: int
    uv: int | None
    uv_approximate: bool
    days: list[SiteCount]


def site_visit_range(
    conn: RedisClient, start: date, end: date, path: str | None = None, *, site: str | None = None
) -> SiteRange:
    """PV and UV of the site (or ``path``) over the local days ``start``..``end`` (at most 400).

    PV is the sum of the days. UV of one day is that day's figure (exact in the default mode);
    the site's UV over several days is the union of per-day HyperLogLogs (``uv_approximate``,
    ~0.81% error): a visitor seen on several days counts once. A path's UV over several days is
    the union of its days' sketches (``store.page_sketch``, kept in the day's pages HASH): exact
    while each day of the range had at most 42 visitors of the path, else estimated
    (``uv_approximate``, 6.5% standard error). A day counted before sketches were kept (before
    0.5) adds its own UV as a floor, and the figure is marked approximate. ``site``: as in
    ``site_visit_info``.
    """
    scope = check_site(site)
    with keys.bound(conn):
        check_day_range(start, end)
        if path is not None:
            path = normalize_path(path)
        span = days.days_between(start, end)
        pipe = read_pipeline(conn)
        for day in span:
            if path is not None:
                pipe.hget(keys.site_day_pages(day, site=scope), path)
            else:
                pipe.hmget(keys.site_day_totals(day, site=scope), "pv", "uv")
        replies = pipe.execute()
        if path is not None:
            per_day = [SiteCount(day, *_page_figures(value)) for day, value in zip(span, replies, strict=True)]
        else:
            per_day = [SiteCount(day, int(pv or 0), int(uv or 0)) for day, (pv, uv) in zip(span, replies, strict=True)]
        pv = sum(d.pv for d in per_day)
        if len(span) == 1:
            return SiteRange(
                start, end, path, pv, per_day[0].uv, get_settings().uv_mode == "hll" and path is None, per_day
            )
        if path is not None:
            uv, approximate = _path_range_uv(per_day, replies)
            return SiteRange(start, end, path, pv, uv, approximate, per_day)
        if not is_cluster(conn):
            uv = int(conn.pfcount(*(keys.site_day_range_hll(day, site=scope) for day in span)))
        else:  # one slot per day: merge the HLLs here, read-only
            uv = union_count(
                conn.execute_command("GET", keys.site_day_range_hll(day, site=scope), **{NEVER_DECODE: True})
                for day in span
            )
        return SiteRange(start, end, path, pv, uv, True, per_day)


def _path_range_uv(per_day: list[SiteCount], values: list[Any]) -> tuple[int, bool]:
    """A path's distinct visitors over its days (``site_visit_range``): the union of the days'
    sketches, and whether it is an estimate (or a floor, for days counted without sketches)."""
    sketches = [_page_value(value)[2] for value in values]
    union, estimated = page_sketch.union_count(sketches)
    unsketched = [
        d.uv
        for d, sketch in zip(per_day, sketches, strict=True)
        if d.uv and not sketch.startswith("!") and len(sketch) // page_sketch.ID_CHARS < d.uv
    ]
    if unsketched:
        return max(union, *unsketched), True
    return union, estimated


PAGES_PER_CALL = 1000
"""Fields one HSCAN call of ``top_pages`` asks for, so no read runs long."""

DAY_TOP_KEPT = 250
"""Paths a day's ``DayTop`` lists: a range read of ``top_pages`` reads these, not every page."""

RESOLVE_LIMIT = 2000
"""Paths whose missing days ``top_pages`` reads one by one before it reads the days whole."""


@dataclass(frozen=True)
class DayTop:
    """The most viewed paths of one day's pages HASH, for range reads: ``pages`` the first
    DAY_TOP_KEPT ``(field, pv)`` by views (then field), ``floor`` the most views of a path left
    out (0: none is), ``pv`` the day's totals pv when it was made (the top is exact while the
    day's pv is still that: every view adds to both in one script call). ``slack``: the views the
    day got since (its pv now minus ``pv``; not stored): a listed path has at most that many more
    than listed, one left out at most ``floor`` plus that many."""

    pv: int
    floor: int
    pages: dict[str, int]
    slack: int = 0

    @classmethod
    def of(cls, pv: int, views: dict[str, int]) -> DayTop:
        ranked = heapq.nsmallest(DAY_TOP_KEPT + 1, views.items(), key=_rank)
        left_out = ranked[DAY_TOP_KEPT:]
        return cls(pv, left_out[0][1] if left_out else 0, dict(ranked[:DAY_TOP_KEPT]))

    def dumps(self) -> str:
        return json.dumps(
            {"pv": self.pv, "floor": self.floor, "fields": list(self.pages), "views": list(self.pages.values())}
        )

    @classmethod
    def loads(cls, raw: Any) -> DayTop | None:
        try:
            data = json.loads(raw)
            pages = dict(zip(data["fields"], data["views"], strict=True))
            if not set(map(type, data["views"])) <= {int} or not set(map(type, pages)) <= {str}:  # (C loops)
                return None
            return cls(int(data["pv"]), int(data["floor"]), pages)
        except (ValueError, TypeError, KeyError):
            return None  # not one of ours: made again


def _tables_views(conn: RedisClient, tables: list[str]) -> list[dict[str, int]]:
    """Every field's page views of each of ``tables`` (day tables of "<pv> <uv> <sketch>"
    values), read in HSCAN pages of PAGES_PER_CALL: one round trip a page for all the tables at
    once, so a range of small tables costs one round trip, not one a day."""
    views: list[dict[str, int]] = [{} for _ in tables]
    for first in range(0, len(tables), TABLES_PER_ROUND):
        _read_views(conn, tables, views, range(first, min(first + TABLES_PER_ROUND, len(tables))))
    return views


TABLES_PER_ROUND = 16
"""Tables ``_tables_views`` pages through together (a round trip carries a page of each)."""


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
                pv = _page_views(value)
                if pv > 0:
                    into[as_str(field)] = pv
            if int(cursor) == 0:
                del cursors[n]
            else:
                cursors[n] = cursor


def _day_tops(conn: RedisClient, span: list[date], scope: str) -> list[DayTop]:
    """Each day's ``DayTop``: the stored one, with the views the day got since it was made as its
    ``slack`` (today, under traffic: ``_certain_top`` reads the leading paths' views of that day
    one by one, not the day); a day with none, or whose pv is below the top's (its data was
    lost and counted again), made now (``_made_again``)."""
    tops, missing = _stored_tops(conn, span, scope)
    return _made_again(conn, span, tops, missing, scope)


def _stored_tops(conn: RedisClient, span: list[date], scope: str) -> tuple[list[DayTop], list[int]]:
    """Each day's stored ``DayTop`` (its slack set), and the days that have none worth using
    (missing, not ours, or made at a pv above the day's): an empty top in their place. A day
    with no view has an empty, exact one."""
    pipe = read_pipeline(conn)
    for day in span:
        tag = keys.site_day_tag(day, scope)
        pipe.hget(keys.site_day_totals(day, tag=tag, site=scope), "pv")
        pipe.get(keys.site_day_pages_top(day, tag=tag, site=scope))
    replies = pipe.execute()
    tops: list[DayTop] = []
    missing: list[int] = []
    for n in range(len(span)):
        pv, stored = int(replies[2 * n] or 0), replies[2 * n + 1]
        top = DayTop.loads(stored) if stored is not None else None
        if pv == 0:
            top = DayTop(0, 0, {})
        elif top is None or top.pv > pv:
            missing.append(n)
            top = DayTop(pv, 0, {})
        elif top.pv < pv:
            top = DayTop(top.pv, top.floor, top.pages, pv - top.pv)
        tops.append(top)
    return tops, missing


TOP_DAYS_BACK = 2
"""Finished days per site that beat's ``make_day_tops`` looks at: yesterday and the day before."""


def make_day_tops(conn: RedisClient, now: float | None = None) -> int:
    """Beat's ``make_day_tops`` (hourly): each site's last TOP_DAYS_BACK finished days, in its own
    zone, get an exact ``DayTop`` when theirs is missing or behind their views, so that the first
    range read of those days reads tops, not pages (a first 90-day read that made its 90 tops
    took 1.2 s at a million paths). A day's pages are read whole once, after it ends (and again
    only if it gets views later: a log imported late); when nothing is due, a run costs two reads
    a site and day. Returns the tops made."""
    now = check_now(now)
    made = 0
    with keys.bound(conn):
        for name in site_names():
            scope = check_site(name)
            today = local_day(now, zone_of(scope))
            span = [today - timedelta(days=back) for back in range(TOP_DAYS_BACK, 0, -1)]
            tops, missing = _stored_tops(conn, span, scope)
            due = sorted({*missing, *(n for n, top in enumerate(tops) if top.slack)})
            _made_again(conn, span, tops, due, scope)
            made += len(due)
    return made


def _made_again(conn: RedisClient, span: list[date], tops: list[DayTop], which: list[int], scope: str) -> list[DayTop]:
    """``tops`` with the days at ``which`` made again from their pages (every page read: each a
    complete top, floor 0 and no slack, for this read) and stored for the next reads with the
    pages HASH's time to live, at the day's pv as read before its pages (a view counted between
    the two reads is then slack for the next read, never a view the top claims and lacks). A
    store that fails (a full Redis) is left: the top is only a shortcut, the figures come from
    the pages."""
    if not which:
        return tops
    tops = list(tops)
    pages = [keys.site_day_pages(span[n], site=scope) for n in which]
    lives = read_pipeline(conn)
    for n in which:
        lives.hget(keys.site_day_totals(span[n], site=scope), "pv")
    for table in pages:
        lives.pttl(table)
    read = lives.execute()
    pvs, ttls = [int(pv or 0) for pv in read[: len(which)]], read[len(which) :]
    made = []
    for n, pv, ttl, views in zip(which, pvs, ttls, _tables_views(conn, pages), strict=True):
        made.append((keys.site_day_pages_top(span[n], site=scope), DayTop.of(pv, views), ttl))
        tops[n] = DayTop(pv, 0, views)  # this read has every page of the day
    try:
        store = read_pipeline(conn)
        for key, top, ttl in made:
            store.set(key, top.dumps(), px=ttl if ttl > 0 else days.DAY * 1000)
        store.execute()
    except RedisError:
        pass
    return tops


def top_pages(
    conn: RedisClient, start: date, end: date, limit: int = 10, *, site: str | None = None
) -> list[tuple[str, int]]:
    """``(path, page views)`` over the local days ``start``..``end``, most viewed first, ties by
    path. Exact, and bounded by the days, never by the paths ever seen: each day's most viewed
    paths (``DayTop``, made from its pages HASH once, its day's views since as slack) give the
    candidates and, with the most views of a path each day left out, a bound on every other
    path; the leading candidates' other days (and the days behind their tops) are read one by
    one until the first ``limit`` are certain; days whose slack leaves them uncertain are made
    again and tried once more. When they cannot be (ties at the bound, or more than RESOLVE_LIMIT paths to read),
    every page of the days is read and summed, as a day's HASH holds at most
    COUNTERS_MAX_DAY_PATHS paths plus ``OTHER``. ``site``: as in ``site_visit_info``."""
    scope = check_site(site)
    with keys.bound(conn):
        check_day_range(start, end)
        check_int(limit, "limit", 1, 10_000)
        span = days.days_between(start, end)
        tops = _day_tops(conn, span, scope)
        ranked = _certain_top(conn, span, tops, limit, scope)
        behind = [n for n, top in enumerate(tops) if top.slack]
        if ranked is None and behind:  # the days that got views since their tops: made again, tried again
            tops = _made_again(conn, span, tops, behind, scope)
            ranked = _certain_top(conn, span, tops, limit, scope)
        if ranked is None:  # every page: a day whose top lists them all (floor 0) is not read again
            totals: Counter[str] = Counter()
            for top in tops:
                if not top.floor:
                    totals.update(top.pages)
            partial = [keys.site_day_pages(day, site=scope) for day, top in zip(span, tops, strict=True) if top.floor]
            for views in _tables_views(conn, partial):
                totals.update(views)
            ranked = sorted(totals.items(), key=_rank)[:limit]
        return [(path or OTHER, n) for path, n in ranked]


def _rank(item: tuple[str, int]) -> tuple[int, str]:
    """Most views first, ties by the name shown (the field "" is shown as ``OTHER``)."""
    return -item[1], item[0] or OTHER


def _certain_top(
    conn: RedisClient, span: list[date], tops: list[DayTop], limit: int, scope: str
) -> list[tuple[str, int]] | None:
    """The first ``limit`` ``(field, pv)`` over the days of ``tops``, or None when they are not
    certain within RESOLVE_LIMIT reads. A field's views over the range are at least those its
    days list, and at most that plus each other day's floor and each day's slack; a field no day
    lists has at most the sum of the floors and slacks. Candidates are made exact (the days that
    may hold more of them than listed read one by one) in the order of their bound, until the
    ``limit``-th exact total is over every bound left."""
    known: dict[str, int] = {}
    listed_floors: dict[str, int] = {}  # per field, the floors of the days that list it
    known_get, floors_get = known.get, listed_floors.get
    for top in tops:  # (one plain loop a day: the range's 250 x days entries are most of a read)
        floor = top.floor
        if floor:
            for field, n in top.pages.items():
                known[field] = known_get(field, 0) + n
                listed_floors[field] = floors_get(field, 0) + floor
        else:
            for field, n in top.pages.items():
                known[field] = known_get(field, 0) + n
    floors = sum(top.floor + top.slack for top in tops)  # the most views of a field no day lists
    if not floors:  # every day's top lists all its paths
        return heapq.nsmallest(limit, known.items(), key=_rank)
    upper = {field: n + floors - floors_get(field, 0) for field, n in known.items()}
    order = [field for field, _bound in sorted(upper.items(), key=_rank)]
    if len(order) < limit or upper[order[limit - 1]] <= floors:
        return None  # a path no day lists may be among the first ``limit``: no read can rule it out
    exact: dict[str, int] = {}
    next_at, reads, size = 0, 0, max(limit, 50)
    unsure = [(n, top.pages, top.slack) for n, top in enumerate(tops) if top.floor or top.slack]  # days to read

    def certain() -> bool:
        best = heapq.nsmallest(limit, exact.items(), key=_rank)
        left = upper[order[next_at]] if next_at < len(order) else 0
        return len(best) == limit and best[-1][1] > max(floors, left)

    while not certain():
        if next_at >= len(order) or reads > RESOLVE_LIMIT:
            return None
        batch = order[next_at : next_at + size]
        next_at, size = next_at + len(batch), 2 * size
        asked = [(field, n) for field in batch for n, pages, slack in unsure if slack or field not in pages]
        values = []
        if asked:
            pipe = read_pipeline(conn)
            for field, n in asked:
                pipe.hget(keys.site_day_pages(span[n], site=scope), field)
            values = pipe.execute()
        reads += len(asked)
        for field in batch:
            exact[field] = known[field]
        for (field, n), value in zip(asked, values, strict=True):  # a day read replaces what it lists
            exact[field] += _page_views(value) - tops[n].pages.get(field, 0)
    return heapq.nsmallest(limit, exact.items(), key=_rank)


class SourceCount(NamedTuple):
    """One source of a site's page views over a range (``top_sources``): its page views, and its
    distinct visitors: the union of its days' sketches (``store.page_sketch``), exact while each
    day had at most 42 visitors of it, else an estimate (``uv_approximate``, ~6.5%)."""

    source: str
    pv: int
    uv: int
    uv_approximate: bool


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
        letter = keys.SOURCE_KINDS.get(kind) if isinstance(kind, str) else None
        if letter is None:
            raise InvalidInput(f"kind must be one of {', '.join(keys.SOURCE_KINDS)}, got {kind!r}")
        span = days.days_between(start, end)
        return _top_values(conn, [keys.site_day_table(day, letter, site=scope) for day in span], limit)


def _top_values(conn: RedisClient, tables: list[str], limit: int) -> list[SourceCount]:
    """The sources of a range's day tables by page views, most first (ties by name), ``(other)``
    for the views past a day's cap; each one's UV the union of its days' sketches."""
    views: Counter[str] = Counter()
    for day_views in _tables_views(conn, tables):
        views.update(day_views)

    def day_sketches(fields: list[str]) -> list[dict[str, str]]:  # a source's sketch is in its value
        pipe = read_pipeline(conn)
        for table in tables:
            pipe.hmget(table, fields)
        return [
            {field: _page_value(value)[2] for field, value in zip(fields, values, strict=True)}
            for values in pipe.execute()
        ]

    return _ranked_counts(views, {name: {name} for name in views}, limit, day_sketches)


def _ranked_counts(
    views: Counter[str],
    fields_of: dict[str, set[str]],
    limit: int,
    day_sketches: Callable[[list[str]], list[dict[str, str]]],
) -> list[SourceCount]:
    """The first ``limit`` names of ``views`` (page views a name over a range, "" the views past
    a day's cap), most first (ties by name), each with its UV: the union of the sketches of its
    fields (``fields_of``: a source is its own field; a browser family is its versions) that
    ``day_sketches`` reads, a ``{field: sketch}`` a day, for the fields of the names listed."""
    ranked = sorted(((name, n) for name, n in views.items() if n > 0), key=_rank)[:limit]
    if not ranked:
        return []
    per_day = day_sketches([field for name, _n in ranked for field in sorted(fields_of[name])])
    out = []
    for name, pv in ranked:
        uv, approximate = page_sketch.union_count(day[field] for day in per_day for field in fields_of[name])
        out.append(SourceCount(shown(name) if name else OTHER, pv, uv, approximate))
    return out


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
    Redis is asked, with or without a deployment bound: the page's scope (``keys.page_scope``)
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
    or its page's (``keys.page_scope``: within ``keys.bound``, as it is keyed with the tag key)."""
    return scope if page is None else keys.page_scope(scope, page)


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
    of its days' sketches: exact while a day had at most 42 visitors of it, else an estimate,
    ``uv_approximate``), most views first (ties by name), ``(other)`` for the views of the
    values past COUNTERS_MAX_DAY_CLIENTS on a day, ``(unknown)`` for views that did not tell
    (no User-Agent or Accept-Language given, an IP of no country). Bounded like ``top_sources``."""
    scope, page = check_client_page(site, path)
    with keys.bound(conn):
        scope = _clients_scope(scope, page)
        check_day_range(start, end)
        check_int(limit, "limit", 1, CLIENTS_LIMIT)
        if kind not in CLIENT_VIEWS:
            raise InvalidInput(f"kind must be one of {', '.join(CLIENT_VIEWS)}, got {kind!r}")
        letter = keys.CLIENT_KINDS[kind.partition("_")[0]]
        span = days.days_between(start, end)
        views, fields_of = _client_views(conn, span, kind, scope)

        def day_sketches(fields: list[str]) -> list[dict[str, str]]:  # a value's sketch is apart, by "<letter>:<value>"
            pipe = read_pipeline(conn)
            for day in span:
                pipe.hmget(keys.site_day_who_sketches(day, site=scope), [f"{letter}:{field}" for field in fields])
            return [
                {field: as_str(sketch or b"") for field, sketch in zip(fields, sketches, strict=True)}
                for sketches in pipe.execute()
            ]

        return _ranked_counts(views, fields_of, limit, day_sketches)


def _client_views(
    conn: RedisClient, span: list[date], kind: str, scope: str
) -> tuple[Counter[str], dict[str, set[str]]]:
    """The page views of each value of ``kind`` over the days ``span`` of ``scope`` (a family's
    versions summed for ``browser`` and ``os``; "" the views past a day's cap), and the table
    fields each value is made of: one HGETALL a day (a table holds at most
    COUNTERS_MAX_DAY_CLIENTS values and "")."""
    table, _by, how = kind.partition("_")
    letter = keys.CLIENT_KINDS[table]
    grouped = table in ("browser", "os") and how != "version"
    pipe = read_pipeline(conn)
    for day in span:
        pipe.hgetall(keys.site_day_table(day, letter, site=scope))
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
        letter = keys.CLIENT_KINDS[kind.partition("_")[0]]
        pipe = read_pipeline(conn)
        for day in days.days_between(start, end):
            pipe.hget(keys.site_day_table(day, letter, site=scope), "")
        return sum(int(views or 0) for views in pipe.execute())


class TableTotals(NamedTuple):
    """A who-visits or sources table over a range, whole (``client_totals``, ``source_totals``):
    ``values``, the rows ``top_clients`` / ``top_sources`` would list with no limit (``(other)``
    one of them), and ``pv``, the page views the table holds (every row's, ``(other)`` and
    ``(unknown)`` included): what a reader says beside a table cut at its limit ("N more") or
    that holds fewer views than the site's (or page's) PV (views counted while the tables were off)."""

    values: int
    pv: int


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


def source_totals(
    conn: RedisClient, start: date, end: date, kind: str = "referrer", *, site: str | None = None
) -> TableTotals:
    """The whole sources table of ``kind`` over ``start``..``end`` (``top_sources`` with no
    limit): how many sources it lists (``(other)`` one of them) and the page views it holds. Each
    day's table read in HSCAN pages, as ``top_sources`` reads it."""
    scope = check_site(site)
    with keys.bound(conn):
        check_day_range(start, end)
        letter = keys.SOURCE_KINDS.get(kind) if isinstance(kind, str) else None
        if letter is None:
            raise InvalidInput(f"kind must be one of {', '.join(keys.SOURCE_KINDS)}, got {kind!r}")
        views: Counter[str] = Counter()
        tables = [keys.site_day_table(day, letter, site=scope) for day in days.days_between(start, end)]
        for day_views in _tables_views(conn, tables):
            views.update(day_views)
        return TableTotals(sum(1 for n in views.values() if n > 0), sum(views.values()))


def page_totals(conn: RedisClient, start: date, end: date, *, site: str | None = None) -> TableTotals:
    """Every page of the site over ``start``..``end`` (``top_pages`` with no limit): how many paths
    it would list (``(other)`` one of them) and their page views. Reads every page of the days
    (at most COUNTERS_MAX_DAY_PATHS a day, in HSCAN pages): for a reader that says "N more" under
    a cut list (the CLI's ``top-pages``), not for every read of the dashboard."""
    scope = check_site(site)
    with keys.bound(conn):
        check_day_range(start, end)
        views: Counter[str] = Counter()
        for day_views in _tables_views(
            conn, [keys.site_day_pages(day, site=scope) for day in days.days_between(start, end)]
        ):
            views.update(day_views)
        return TableTotals(sum(1 for n in views.values() if n > 0), sum(views.values()))
