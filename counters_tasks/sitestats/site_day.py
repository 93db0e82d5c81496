"""The site's day (``site_day``): its page views and unique visitors of a local day, and the
write of a visit's page view to every table of the site's figures (``queue_views``,
``record_visit``). Site PV/UV (docs/design.md): all-time and per-day page views and unique
visitors, site and path.

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
any cross-slot step. The visitor id is an HMAC of the IP (raw IPs never reach Redis:
``core.visitors``).

The write goes down: ``queue_views`` groups the views once, and each table module gives its part
of the calls (``pairs``, ``page_day``, ``sources``, ``who_visits`` their keys and arguments of the
``site_day`` call; ``site_all`` and ``page_all`` their own calls); none of them calls back here.

History: any past day is accepted. A day never counted is opened by its first write, however
old, and is exact; its visitor sets live COUNTERS_DAY_GRACE_DAYS past its end or past that
first write, whichever is later. A later view of a closed day (its visitor sets gone) still
counts in the day's PV, the all-time figures and the counters, not in that day's UV, and is
reported (``refusals``, reason ``closed_day``). Totals are kept COUNTERS_DAY_TOTALS_DAYS past
the day's end or its latest write.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import date
from typing import Any

from .. import live, refusals
from ..core import days
from ..core.days import local_day
from ..core.settings import get_settings
from ..core.sites import check_site, zone_of
from ..core.table import AGGREGATE, VISITOR_LEVEL, Erasure, Retention, StoredKey, Table, register
from ..core.validation import check_item_time, check_message_id
from ..core.visitors import pair_visitor
from ..store import day_registry, keys, sweeps
from ..store.client import RedisClient
from ..store.scripts import WritePlan, run_script, write_through
from . import page_all, page_day, pairs, site_all, slots, sources, upgrade, who_visits
from .views import VIEW_FIELDS, SiteView, view_on


def site_day_totals(day: date, *, tag: str | None = None, site: str = "") -> str:
    """HASH pv, uv, open_until of the whole site on one local day (kept COUNTERS_DAY_TOTALS_DAYS)."""
    return f"{keys.prefix()}site:{{{tag or slots.site_day_tag(day, site)}}}:day:{keys.day_label(day, site)}"


def site_day_visitors(day: date, mode: str, *, tag: str | None = None, site: str = "") -> str:
    """SET of visitor ids (or HLL in ``hll`` mode) of one day (until the day's open_until)."""
    tag = tag or slots.site_day_tag(day, site)
    return f"{keys.prefix()}site:{{{tag}}}:{slots.uv_kind(mode)}:{keys.day_label(day, site)}"


def site_day_range_hll(day: date, *, tag: str | None = None, site: str = "") -> str:
    """HLL of the site's visitor ids on one day, in every UV mode: range UV is the union of days
    (kept as long as the day's totals)."""
    return f"{keys.prefix()}site:{{{tag or slots.site_day_tag(day, site)}}}:rhll:{keys.day_label(day, site)}"


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


def sweep_visitors(conn: RedisClient, scope: str, day: date, until: float | None) -> int:
    """The retention sweep of a site's day's visitors (visitor-level: the SET, or the HLL)."""
    with keys.bound(conn):
        return sweeps.apply(conn, [site_day_visitors(day, mode, site=scope) for mode in ("exact", "hll")], until)


def sweep_totals(conn: RedisClient, scope: str, day: date, until: float | None) -> int:
    """The retention sweep of a site's day's totals and range HLL (aggregate)."""
    with keys.bound(conn):
        return sweeps.apply(conn, [site_day_range_hll(day, site=scope), site_day_totals(day, site=scope)], until)


SITE_DAY = register(
    Table(
        name="site_day",
        what="the site's (or a COUNTERS_CLIENT_PAGES page's) page views and unique visitors of a local "
        "day, the day's visitors (a SET of ids, or an HLL) and an HLL of them for a UV over a range",
        module=__name__,
        keys=(
            StoredKey("ct:site:{tag(D)}:day:<D>", "HASH"),
            StoredKey("ct:site:{tag(D)}:<kind>:<D>", "SET (or HLL)"),
            StoredKey("ct:site:{tag(D)}:rhll:<D>", "HLL"),
        ),
        tag="per site and day",
        fed_by=("visit",),
        writers=("store/lua/site_day.lua",),
        readers=(
            "sitestats.site_visit_info",
            "sitestats.site_visit_range",
            "sitestats.top_pages (a day's pv)",
            "counters-tasks stats",
            "/api/stats",
            "health",
        ),
        retention=Retention(
            "totals and range HLL: " + slots.AGGREGATE_KEPT + "; the visitors: until the day's open_until "
            "(the later of the end of D and its first write, plus COUNTERS_DAY_GRACE_DAYS), never past "
            "COUNTERS_VISITOR_DAYS after the end of D",
            "COUNTERS_AGGREGATE_DAYS",
            slots.aggregate_days,
            {VISITOR_LEVEL: sweep_visitors, AGGREGATE: sweep_totals},
        ),
        erasure=Erasure(
            "visitor ids",
            True,
            "SREM of the visitor id from the day's visitors SET and the totals' uv minus one when it "
            "was there (exact mode, while D is open: the SET goes at open_until); the range HLL "
            "(and the day's visitors with COUNTERS_UV_MODE=hll) cannot forget one visitor (an "
            "estimate, 0.81% standard error) (lua/forget_members.lua, with the pairs and the day's sketches: sitestats/erase.py)",
            forget=slots.FORGET_DAY_TABLES,
        ),
    )
)
"""The site's day (``core.table``)."""


def queue_views(
    conn: RedisClient, pipe: Any, views: Iterable[SiteView], message_id: str | None
) -> list[tuple[date, int, int]]:
    """Queue on ``pipe`` one script call per slot (day, visitor shard, path tag group) for ``views``:
    the day's ``site_day`` calls, each with every table of the day's part (its own, ``pairs``,
    ``page_day``, ``sources``, ``who_visits``), then the ``site_all`` and ``page_all`` calls.

    Returns, for each part of the site's days (DAY_VIEWS_PER_CALL views at most each, in order),
    its day, the number of its views sent in its ``site_day`` call (0: no call) and the number
    left out as applied by a layout-1 worker before the upgrade (``upgrade``). The calls are
    queued first (``sent_calls`` of them), and each one's reply is the number of its views that
    fell on a closed day (``closed_views``), or -1 when its message was applied there before
    (``applied_views``). Every view is in exactly one part."""
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
            by_shard[site_all.site_shard_of(visitor)][site].append(visitor)
            named = group_of.get((site, view.path))
            if named is None:
                name = keys.scoped(site, view.path)
                named = group_of[site, view.path] = (page_all.path_tag(name), name)
            by_group[named[0]][named[1]].append(visitor)

        scopes = [(site, site, day, day_views) for (site, day), day_views in by_day.items()]
        pages = who_visits.client_pages()
        for (site, day), day_views in by_day.items() if pages else ():  # then each page's who visits
            by_page: dict[str, list[SiteView]] = defaultdict(list)
            for view in day_views:
                if view.who is not None and view.path in pages:
                    by_page[view.path].append(view)
            scopes += [
                (who_visits.page_scope(site, path), site, day, page_views) for path, page_views in by_page.items()
            ]
        before = upgrade.applied_by_layout1(conn, [(scope, day, v) for scope, _site, day, v in scopes], message_id)
        day_calls: list[tuple[date, int, int]] = []
        for number, (scope, site, day, day_views) in enumerate(scopes):
            first = 0
            for part, part_id in zip(*_parts(day_views, message_id), strict=True):
                applied = before[number][first : first + len(part)] if before else ()
                first += len(part)
                sent = [view for view, done in zip(part, applied, strict=True) if not done] if any(applied) else part
                if sent:
                    _queue_day_call(conn, pipe, scope, site, day, sent, part_id, ttl)
                if scope == site:  # (a page's calls count its views again: not in the returned calls)
                    day_calls.append((day, len(sent), len(part) - len(sent)))
        day_registry.queue_note(pipe, [(scope, day) for scope, _site, day, _views in scopes])
        for script_keys, args in site_all.script_calls(by_shard, ttl, mode, message_id):
            run_script(conn, "site_all", script_keys, args, client=pipe)
        for script_keys, args in page_all.script_calls(by_group, ttl, settings, message_id):
            run_script(conn, "path_all", script_keys, args, client=pipe)
        return day_calls


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
    or a page's (``who_visits.page_scope``: its who visits alone, COUNTERS_CLIENT_PAGES; no pages or
    sources table is sent)."""
    settings = get_settings()
    mode = settings.uv_mode
    page = scope != site
    tag = slots.site_day_tag(day, scope)
    script_keys = [
        site_day_totals(day, tag=tag, site=scope),
        site_day_visitors(day, mode, tag=tag, site=scope),
        site_day_range_hll(day, tag=tag, site=scope),
        pairs.site_day_pairs(day, tag=tag, site=scope),
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
    script_keys.append(page_day.site_day_pages(day, tag=tag, site=scope))  # the tables: the pages, then the sources
    script_keys += sources.day_keys(day, tables, tag, scope)
    if who:  # then who visits: its five tables and their sketches
        script_keys += who_visits.day_keys(day, who, tag, scope)
    args += [short_ids, profiles, 1 + len(tables)]
    page_day.add_day_args(args, pages, settings)  # the pages: each path's UV exact through the pairs SET
    sources.add_day_args(args, tables, settings)
    if who:
        who_visits.add_day_args(args, who, settings)
    if ttl and part_id is not None:
        script_keys.append(keys.site_seen(part_id, tag=tag))
    run_script(conn, "site_day", script_keys, args, client=pipe)


def _day_tables(
    views: list[SiteView],
) -> tuple[dict[str, list[str]], dict[str, sources.SketchTable], list[who_visits.WhoTable], str, str]:
    """The entries of one ``site_day`` call (at most DAY_VIEWS_PER_CALL views): the pages (path
    -> its views' visitors in pairs form), each kind of source (``sources.SOURCE_KINDS`` letter)
    its views have as a ``sources.SketchTable``, who visits (``who_visits.CLIENT_LETTERS``: five
    ``who_visits.WhoTable``, or none when the views have no such values), the views' 6-character
    ids (``page_sketch``) one after the other, and (with who visits) each view's pairs member of
    its visitor and profile (``who_visits.who_digest``), one after the other. A view is a byte of
    each table, not an argument: a call of 100 views with nine tables sends 100 ids once, not 900
    times. (One loop over the views for every table of the call: the hot path of a worker.)"""
    count = len(views)
    pages: dict[str, list[str]] = defaultdict(list)
    referrers: sources.SketchTable = ({}, bytearray(count))
    tables: dict[str, sources.SketchTable] = {"r": referrers}
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
            who_numbers = [{} for _ in who_visits.CLIENT_LETTERS]
            who_counts = [[] for _ in who_visits.CLIENT_LETTERS]
            who_marks = [bytearray(count) for _ in who_visits.CLIENT_LETTERS]
            profiles = ["~" * 19] * at  # (the views before it had none)
        for numbers, counts, marks, value in zip(who_numbers, who_counts, who_marks, view.who, strict=True):
            number = numbers.get(value)
            if number is None:
                counts.append(0)
                number = numbers[value] = len(counts)
            counts[number - 1] += 1
            marks[at] = number
        profiles.append(member + who_visits.who_digest(view.who))
    who = (
        [
            (letter, list(numbers), counts, marks)
            for letter, numbers, counts, marks in zip(
                who_visits.CLIENT_LETTERS, who_numbers, who_counts, who_marks, strict=True
            )
        ]
        if who_numbers
        else []
    )
    return pages, tables, who, "".join(short_ids), "".join(profiles)


DAY_VIEWS_PER_CALL = 100
"""Views one ``site_day`` call applies at most (under 256: a view's value in a table is one byte,
``_day_tables``). A view costs the server ~15-25 us there (its pages' and sources' values read,
parsed and written back with their sketches): 150 a call took 2-3 ms of CPU, up to 6 ms on zipf
traffic (issue 32). Fewer a call cost more a visit, as a popular page's value is read and written
again by each call: 75 took the longest call to ~3 ms for 10-20% more of this script's CPU a
visit; 100 is between. Issue 42: fixed parts of 40 (a cut by views alone) cost log2015's traffic
+16% commands and up to +29% of the counters Redis's CPU a visit (``bench.ingest``)."""

DAY_HEADERS_PER_CALL = 64
"""Distinct user agents (or reduced clients) and languages, as the views carry them, one ``site_day``
call takes at most (``_parts``). Each brings up to five who-visits values new to the call, ~3-5 us
each (read, folded past the cap, written, its sketch worked): 100 views each of a new user agent and
language (``tests/core/test_clients.py``'s flood) made calls of 4.5 reference calls (~3 ms) at 100
views, 2.4 at 40; such views go 32 to a call. Traffic of real browsers (~30 of them in 100 views)
keeps its calls of 100. Counted on what the message holds, not on the values ua-parser, iptocc and
COUNTERS_CLIENT_TABLES make of it, so the cut is the same under every setting and version."""

DAY_PART_SEPARATOR = "/v"
"""A ``site_day`` call's dedupe id is ``<message id>/v<n>`` (key layout 2; layout 1's cut named
its parts ``/d<n>``: ``layout1_parts``)."""


def _parts(views: list[SiteView], message_id: str | None) -> tuple[list[list[SiteView]], list[str | None]]:
    """A day's views of one message in parts of DAY_VIEWS_PER_CALL, fewer when their user agents
    and languages pass DAY_HEADERS_PER_CALL, in the message's order, each part with its own dedupe
    id (``<id>/v<n>``). The cut is a function of the views as the message holds them, the same under
    every setting and version (not of their who-visits values, which COUNTERS_CLIENT_TABLES and
    ua-parser's version decide): a message applied in part by one worker and delivered again to
    another finds each part under the same id."""
    parts: list[list[SiteView]] = []
    part: list[SiteView] = []
    seen: set[tuple[int, Any]] = set()  # (0, user agent) and (1, language) of the part's views
    for view in views:
        agent, language = view.headers
        new = [key for key in ((0, agent), (1, language)) if key[1] is not None and key not in seen]
        if part and (len(part) == DAY_VIEWS_PER_CALL or len(seen) + len(new) > DAY_HEADERS_PER_CALL):
            parts.append(part)
            part, seen = [], set()
            new = [key for key in ((0, agent), (1, language)) if key[1] is not None]
        part.append(view)
        seen.update(new)
    if part:
        parts.append(part)
    return parts, keys.chunk_ids(message_id, len(parts), DAY_PART_SEPARATOR)


def sent_calls(calls: Iterable[tuple[date, int, int]]) -> int:
    """How many ``site_day`` calls ``queue_views`` queued first (its parts with views sent)."""
    return sum(1 for _day, sent, _before in calls if sent)


def closed_views(replies: Iterable[Any]) -> int:
    """How many views the ``site_day`` replies say fell on a closed day (counted without UV)."""
    return sum(max(0, int(reply)) for reply in replies)


def applied_views(calls: Iterable[tuple[date, int, int]], replies: Iterable[Any]) -> tuple[int, int]:
    """``(applied, duplicates)``: the views of the ``site_day`` calls (``queue_views``) written
    now, and those skipped because their message was applied before (reply -1, or left out as
    applied by a layout-1 worker)."""
    applied = duplicates = 0
    answers = iter(replies)
    for _day, sent, before in calls:
        duplicates += before
        if not sent:
            continue
        if int(next(answers)) == -1:
            duplicates += sent
        else:
            applied += sent
    return applied, duplicates


def record_visit(
    conn: RedisClient, ip: str, path: str, now: float | None = None, *, message_id: str | None = None, **view: Any
) -> None:
    """One page view of ``path`` by visitor ``ip``: site and path, all-time and per-day PV/UV.

    Atomic per slot, one round trip; with ``message_id`` a redelivered message changes nothing.
    Any past day is accepted: a day never counted is opened by its first view and is then
    exact. A view of a closed day (one counted before, whose visitor sets expired) counts in PV
    and the all-time figures but not in that day's UV, and is reported as ``closed_day``.
    ``view``: the view's other fields by name (``views.VIEW_FIELDS``; another name raises TypeError,
    as for any function): ``site``, a site of ``COUNTERS_SITES`` (None: the default site), whose
    zone makes the day; ``referrer`` (the Referer URL, or a domain) and ``utm`` (``{"source", "medium", "campaign"}``)
    are the view's source (``core.sources``; none: ``(direct)``), counted in the day's sources.
    ``user_agent`` and ``language`` (the User-Agent and Accept-Language headers) with ``ip`` tell
    who visits (``core.clients``: browser, system, device, country, language), counted in the
    day's tables of them.
    """
    unknown = view.keys() - set(VIEW_FIELDS)
    if unknown:
        raise TypeError(f"record_visit() got unexpected keyword arguments: {', '.join(sorted(unknown))}")
    check_message_id(message_id)
    ts = check_item_time(now, "now")
    scope = check_site(view.get("site"))
    seen = view_on({"ip": ip, "path": path, **view}, local_day(ts, zone_of(scope)), scope)
    write_through(conn, lambda plan: _queue_view(plan, seen, ts, message_id))


def _queue_view(plan: WritePlan, view: SiteView, ts: float, message_id: str | None) -> Callable[[], None]:
    """``record_visit``'s view and its sighting queued on ``plan``; once sent, a closed day's view
    counted (``refusals``)."""
    conn, replies = plan.conn, list[Any]()

    calls: list[tuple[date, int, int]] = []

    def data(pipe: Any) -> None:
        calls[:] = queue_views(conn, pipe, [view], message_id)
        live.queue_sightings(pipe, [(view.site, ts, view.visitor)])

    plan.add(data, replies.extend)
    return lambda: refusals.count_partial(conn, "record_visit", message_id, closed_views(replies[: sent_calls(calls)]))
