"""Forgetting one visitor from the site's tables (``worker.forget``, issue 44): what each table
declares as its ``Erasure.forget``.

- ``forget_days``: a site's day, one slot, all its tables at once (and the day of each page of
  COUNTERS_CLIENT_PAGES, in its own slot: the pages listed now): the day's visitors SET and the
  totals' ``uv`` (``site_day``), the pairs SET (``pairs``: ``SSCAN MATCH <pair id>*``), each path's
  ``uv`` and sketch of the day (``page_day``), the sources' and the who-visits' sketches
  (``sources``, ``who_visits``). The day's tables are read with ``HSCAN`` (``HSCAN_COUNT`` fields a
  call) to find the fields whose list sketch holds the visitor's 6-character id, or whose path's
  pairs member is the visitor's; each batch of ``FIELDS_PER_CALL`` fields is then corrected in one call of
  ``lua/forget_sketches.lua`` (the id out of the sketch, and the ``uv`` minus one, atomically).
- ``forget_all_time``: the site's all-time shard (``site_all``: ``SREM`` and the shard's ``uv``
  minus one, ``lua/forget_members.lua``) and every path's all-time HASH (``page_all``: its field
  of the visitor, ``lua/forget_field.lua``). No index lists a visitor's paths: the paths' HASHes
  are found with ``SCAN MATCH <prefix>path:*:all:*`` in calls of ``SCAN_COUNT`` keys, a cost in
  proportion to the whole keyspace (a million paths: ~1,000 SCAN calls and one pipelined
  ``HEXISTS`` a key, a few seconds), paid once per erasure.

A HyperLogLog (a day's range HLL, the ``hll`` UV mode's sets, a sketch past 256 visitors) cannot
forget one visitor: each such figure is named in the answer with its standard error.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any

from ..core.settings import get_settings
from ..core.table import ForgetTarget, Forgotten
from ..core.visitors import pair_visitor, session_visitor_id, visitor_id
from ..store import hll, keys
from ..store.client import RedisClient, as_str
from ..store.page_sketch import ID_CHARS
from ..store.scripts import run_script
from . import page_all, page_day, pairs, site_all, site_day, slots, sources, who_visits

SCAN_COUNT = 500
"""Members (or keys) one SSCAN or SCAN call asks for: each call stays well under 5 ms."""
HSCAN_COUNT = 100
"""Fields one HSCAN of a day's table asks for: values of up to 1.5 KB (a sketch of 256 ids), so
a page of 500 took 2.9 ms of the server's CPU in the budget test, 100 well under 1 ms."""
FIELDS_PER_CALL = 50
"""Fields one ``forget_sketches`` call corrects (each an HGET, a SREM and an HSET of up to 1.5 KB):
50 took 1.8 reference calls (~1.1 ms on the machine of record) at the median in the budget test,
100 twice that."""


def visitor_ids(target: ForgetTarget, day: date | None) -> list[str]:
    """The ids ``target`` has on ``day`` (``core.visitors``: made per day, for
    COUNTERS_VISITOR_KEY=daily): its IP's visitor id and its session's, those it names."""
    ids = []
    if target.ip is not None:
        ids.append(visitor_id(target.ip, day))
    if target.session_id is not None:
        ids.append(session_visitor_id(target.session_id, day))
    return ids


def has_id(sketch: str, short: str) -> bool:
    """Whether a list sketch holds ``short`` at one of its 6-character places."""
    at = sketch.find(short)
    while at >= 0:
        if at % ID_CHARS == 0:
            return True
        at = sketch.find(short, at + 1)
    return False


def scan_hash(conn: RedisClient, key: str) -> list[tuple[str, str]]:
    """Every ``(field, value)`` of a day table, ``HSCAN_COUNT`` fields a call (bounded: a day's
    table holds at most COUNTERS_MAX_DAY_PATHS fields)."""
    found: list[tuple[str, str]] = []
    cursor = 0
    while True:
        cursor, page = conn.hscan(key, cursor, count=HSCAN_COUNT)
        assert isinstance(page, dict)  # (HSCAN without NOVALUES: field -> value)
        found += [(as_str(field), as_str(value)) for field, value in page.items()]
        if not cursor:
            return found


def scan_set(conn: RedisClient, key: str, prefix: str) -> list[str]:
    """The members of a SET that start with ``prefix`` (``SSCAN MATCH``, ``SCAN_COUNT`` a call)."""
    found: list[str] = []
    cursor = 0
    while True:
        cursor, page = conn.sscan(key, cursor, match=glob_escape(prefix) + "*", count=SCAN_COUNT)
        found += [as_str(member) for member in page]
        if not cursor:
            return found


def glob_escape(text: str) -> str:
    """``text`` matched literally in a SCAN MATCH pattern."""
    return "".join("\\" + char if char in "*?[]\\" else char for char in text)


def sketch_calls(
    conn: RedisClient, key: str, short: str, fields: list[list[str]], pairs_key: str | None = None
) -> tuple[int, int, list[str]]:
    """``lua/forget_sketches.lua`` over ``fields`` (each ``[field, form, pairs member, count
    field]``, as the script reads them), ``FIELDS_PER_CALL`` a call: (removed, corrected, fields
    whose sketch is an estimate)."""
    removed = corrected = 0
    estimates: list[str] = []
    script_keys = [key] + ([pairs_key] if pairs_key else [])
    for first in range(0, len(fields), FIELDS_PER_CALL):
        args: list[Any] = [short]
        for entry in fields[first : first + FIELDS_PER_CALL]:
            args += entry
        got, fixed, hlls = run_script(conn, "forget_sketches", script_keys, args)
        removed += int(got)
        corrected += int(fixed)
        estimates += [as_str(each) for each in hlls]
    return removed, corrected, estimates


def is_list(sketch: str) -> bool:
    """Whether a sketch lists its ids (not ``#``, an HLL, nor ``!``, key layout 1's registers)."""
    return bool(sketch) and not sketch.startswith(("#", "!"))


def forget_days(conn: RedisClient, target: ForgetTarget, days: Sequence[date]) -> Forgotten:
    """Forget ``target`` from the site's tables of each of ``days`` (one slot a day): see the
    module's docstring. The correction of each figure is atomic with its removal."""
    done = Forgotten()
    settings = get_settings()
    scope = target.scope
    with keys.bound(conn, write=True):
        scopes = [scope, *(who_visits.page_scope(scope, path) for path in settings.client_pages)]
        for day in days:
            for vid in visitor_ids(target, day):
                for each in scopes:  # the site's day, then each COUNTERS_CLIENT_PAGES page's own
                    _forget_day(conn, done, each, day, vid, settings.uv_mode)
    return done


def _forget_day(conn: RedisClient, done: Forgotten, scope: str, day: date, vid: str, mode: str) -> None:
    tag = slots.site_day_tag(day, scope)
    label = f"{day.isoformat()}"
    totals = site_day.site_day_totals(day, tag=tag, site=scope)
    if not conn.exists(totals):
        return
    pair = pair_visitor(vid)
    short = pair[:ID_CHARS]
    if mode == "hll":
        done.estimates.append((f"site_day {label} uv (COUNTERS_UV_MODE=hll)", hll.STANDARD_ERROR))
    else:
        visitors = site_day.site_day_visitors(day, mode, tag=tag, site=scope)
        got = int(run_script(conn, "forget_members", [visitors, totals], ["uv", vid]))
        if got:
            done.removed += got
            done.corrected.append(f"site_day {label} uv")
    if conn.exists(site_day.site_day_range_hll(day, tag=tag, site=scope)):
        done.estimates.append((f"site_day {label} range HLL (uv over days)", hll.STANDARD_ERROR))

    pairs_key = pairs.site_day_pairs(day, tag=tag, site=scope)
    members = scan_set(conn, pairs_key, pair)
    by_digest = {member[len(pair) :]: member for member in members}
    pages_key = page_day.site_day_pages(day, tag=tag, site=scope)
    fields: list[list[str]] = []
    for field, value in scan_hash(conn, pages_key):
        digest = keys.path_digest(field) if field else ""
        member = by_digest.pop(digest, None)
        sketch = page_day.page_value(value)[2]
        if member is not None or (is_list(sketch) and has_id(sketch, short)):
            fields.append([field, "2:2", member or (pair + digest), ""])
    removed, corrected, estimates = sketch_calls(conn, pages_key, short, fields, pairs_key)
    done.removed += removed
    done.corrected += [f"page_day {label} uv of a path"] * corrected
    done.estimates += [(f"page_day {label} range sketch of a path (HLL)", hll.STANDARD_ERROR) for _ in estimates]
    if by_digest:  # the who-visits profiles' members (and paths no longer in the table)
        done.removed += int(run_script(conn, "forget_members", [pairs_key], ["", *by_digest.values()]))

    for letter in sources.SOURCE_KINDS.values():
        _forget_sketch_table(
            conn,
            done,
            sources.site_day_table(day, letter, tag=tag, site=scope),
            short,
            "2:2",
            f"sources {label} {letter}",
        )
    _forget_sketch_table(
        conn,
        done,
        who_visits.site_day_who_sketches(day, tag=tag, site=scope),
        short,
        "0:0",
        f"who_visits {label}",
    )


def _forget_sketch_table(conn: RedisClient, done: Forgotten, key: str, short: str, form: str, figure: str) -> None:
    """The visitor's 6-character id out of every list sketch of a day table (sources, who visits);
    its sketches past 256 visitors (HLLs) named as estimates that may hold it."""
    fields: list[list[str]] = []
    estimates = 0
    for field, value in scan_hash(conn, key):
        sketch = page_day.page_value(value)[2] if form != "0:0" else value
        if sketch.startswith(("#", "!")):
            estimates += 1
        elif has_id(sketch, short):
            fields.append([field, form, "", ""])
    removed, corrected, _none = sketch_calls(conn, key, short, fields)
    done.removed += removed
    done.corrected += [f"{figure} uv of a value"] * corrected
    if estimates:
        done.estimates.append((f"{figure}: {estimates} value(s) past 256 visitors (HLL)", hll.STANDARD_ERROR))


def forget_all_time(conn: RedisClient, target: ForgetTarget, days: Sequence[date]) -> Forgotten:
    """Forget ``target`` from the site's all-time shards (``site_all``) and from every path's
    all-time HASH (``page_all``): see the module's docstring. ``days``: the days whose ids to
    forget (every day's id is one with COUNTERS_VISITOR_KEY=standard)."""
    done = Forgotten()
    settings = get_settings()
    scope = target.scope
    each_day: list[date | None] = list(days) or [None]
    ids = sorted({vid for day in each_day for vid in visitor_ids(target, day)})
    with keys.bound(conn, write=True):
        for vid in ids:
            shard = site_all.site_shard_of(vid)
            if settings.uv_mode == "hll":
                done.estimates.append(("site_all uv (COUNTERS_UV_MODE=hll)", hll.STANDARD_ERROR))
                continue
            got = int(
                run_script(
                    conn,
                    "forget_members",
                    [site_all.site_all_visitors(shard, "exact", scope), site_all.site_all_totals(shard, scope)],
                    ["uv", vid],
                )
            )
            if got:
                done.removed += got
                done.corrected.append("site_all uv")
        if settings.uv_mode == "hll":
            done.estimates.append(("page_all uv of each path (COUNTERS_UV_MODE=hll)", hll.STANDARD_ERROR))
            return done
        for key in _path_keys(conn, scope):
            held = conn.hmget(key, ids)
            fields = [vid for vid, value in zip(ids, held, strict=True) if value is not None]
            if fields:
                got = int(run_script(conn, "forget_field", [key], ["uv", *fields]))
                done.removed += got
                done.corrected += ["page_all uv of a path"] * min(got, 1)
    return done


def _path_keys(conn: RedisClient, scope: str) -> list[str]:
    """Every path's all-time HASH of site ``scope`` (``SCAN MATCH``, ``SCAN_COUNT`` keys a call; on a
    cluster, each master's keyspace in turn: ``scan_iter``)."""
    sample = page_all.path_totals(keys.scoped(scope, "/"))
    head = sample.split("{", 1)[0]
    found: list[str] = []
    for raw in conn.scan_iter(match=glob_escape(head) + "*:all:*", count=SCAN_COUNT):
        key = as_str(raw)
        if ":hll:all:" not in key and _of_site(key, scope):
            found.append(key)
    return found


def _of_site(key: str, scope: str) -> bool:
    """Whether a path's all-time key is site ``scope``'s (its name after ``:all:``)."""
    name = key.split("}:all:", 1)[-1]
    if not scope:
        return "%1F" not in name.split("/", 1)[0]
    return name.startswith(keys.escape(scope + keys.SITE_SEPARATOR))


slots.FORGET_DAY_TABLES.install(forget_days)
slots.FORGET_ALL_TIME.install(forget_all_time)
