"""Site PV/UV (docs/design.md): all-time and per-day page views and unique visitors, site and path.

Unlike a read-decide-write design (read counts, then decide, then pipeline), every decision is made inside Lua,
on a set of visitor ids: a visitor is new to a set exactly when SADD says so, whatever the
interleaving of requests. A visit touches three slots, one script call each, in one pipeline:

- the day's slot: the site's totals and visitors of that local day;
- the visitor's shard slot: the site's all-time totals and visitors (16 shards by visitor id,
  so no one key holds every visitor and the hot all-time key is spread);
- the path's slot: the path's all-time and per-day totals and visitors.

Each set answers "new visitor?" for its own figure only, so all four UV figures stay exact
without any cross-slot step. The visitor id is an HMAC of the IP (raw IPs never reach Redis).
Per-day visitor sets expire once the day can no longer receive events; totals are kept.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from typing import Any, NamedTuple

from redis.client import NEVER_DECODE

from .core import days
from .core.days import local_day
from .core.settings import get_settings
from .core.validation import (
    check_day,
    check_day_range,
    check_event_time,
    check_int,
    check_ip,
    check_message_id,
    check_path,
)
from .errors import ConfigurationError
from .store import keys
from .store.client import as_str, is_cluster, read_pipeline
from .store.hll import union_count
from .store.scripts import execute_in_order, run_script


class SiteCount(NamedTuple):
    day: date | None
    pv: int
    uv: int


@dataclass(frozen=True)
class SiteView:
    """One validated page view: who (HMAC visitor id), what (normalized path), which local day."""

    visitor: str
    path: str
    day: date


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


def visitors_expire_at(day: date) -> int:
    """When a day's visitor sets go: its end plus COUNTERS_DAY_GRACE_DAYS (no event after that)."""
    return days.kept_until(day, get_settings().day_grace_days)


def totals_expire_at(day: date) -> int:
    """When a day's PV/UV totals go: COUNTERS_DAY_TOTALS_DAYS after its end (never before its visitors)."""
    settings = get_settings()
    return days.kept_until(day, max(settings.day_totals_days, settings.day_grace_days))


def check_day_open(day: date) -> None:
    """Refuse an event of a day whose visitor sets are (about to be) gone: it could not be deduplicated."""
    days.check_day_open(day, get_settings().day_grace_days, "COUNTERS_DAY_GRACE_DAYS")


def check_view(ip: Any, path: Any, now: Any = None) -> tuple[str, str, date]:
    """Validate one page view without making its visitor id (so without COUNTERS_SECRET: what a
    web process needs): the canonical IP, the normalized path and the local day."""
    clean_path = check_path(path)
    clean_ip = check_ip(ip)
    day = local_day(check_event_time(now, "now"))
    check_day_open(day)
    return clean_ip, clean_path, day


def prepare_view(ip: Any, path: Any, now: Any = None) -> SiteView:
    """Validate one page view (raises InvalidInput; writes nothing), with its visitor id."""
    clean_ip, clean_path, day = check_view(ip, path, now)
    return SiteView(visitor_id(clean_ip), clean_path, day)


def queue_views(conn: Any, pipe: Any, views: Iterable[SiteView], message_id: str | None) -> None:
    """Queue on ``pipe`` one script call per slot (day, visitor shard, path group) for ``views``."""
    mode = get_settings().uv_mode
    ttl = get_settings().dedupe_ttl if message_id is not None else 0
    by_day: dict[date, list[str]] = defaultdict(list)
    pages: dict[date, Counter[str]] = defaultdict(Counter)
    by_shard: dict[int, list[str]] = defaultdict(list)
    by_path: dict[str, dict[date | None, list[str]]] = defaultdict(lambda: defaultdict(list))
    for view in views:
        by_day[view.day].append(view.visitor)
        pages[view.day][view.path] += 1
        by_shard[keys.site_shard_of(view.visitor)].append(view.visitor)
        by_path[view.path][None].append(view.visitor)
        by_path[view.path][view.day].append(view.visitor)

    def call(groups: list[tuple], marker: str) -> None:
        """``groups``: (totals, visitors, visitors_at, totals_at, ids[, range_hll[, pages, counts]])."""
        script_keys: list[str] = []
        args: list[Any] = [ttl, mode, len(groups)]
        for totals, visitors, visitors_at, totals_at, ids, *extra in groups:
            script_keys += [totals, visitors, *extra[:2]]
            args += [visitors_at, totals_at, len(ids), *ids, len(extra[:2])]
            if len(extra) > 2:
                args.append(len(extra[2]))
                for path, count in extra[2].items():
                    args += [path, count]
        if ttl:
            script_keys.append(marker)
        run_script(conn, "site_visit", script_keys, args, client=pipe)

    for day, ids in by_day.items():
        tag = keys.site_day_tag(day)
        group = (keys.site_day_totals(day, tag=tag), keys.site_day_visitors(day, mode, tag=tag),
                 visitors_expire_at(day), totals_expire_at(day), ids,
                 keys.site_day_range_hll(day, tag=tag), keys.site_day_pages(day, tag=tag), pages[day])
        call([group], message_id and keys.site_seen(message_id, tag=tag))
    for shard, ids in by_shard.items():
        tag = keys.site_shard_tag(shard)
        group = (keys.site_all_totals(shard), keys.site_all_visitors(shard, mode), 0, 0, ids)
        call([group], message_id and keys.site_seen(message_id, tag=tag))
    by_group: dict[str, list[tuple]] = defaultdict(list)
    for path, per_day in by_path.items():
        tag = keys.path_tag(path)
        for day, ids in per_day.items():
            if day is None:
                by_group[tag].append((keys.path_totals(path, None, tag=tag),
                                      keys.path_visitors(path, None, mode, tag=tag), 0, 0, ids))
            else:
                by_group[tag].append((keys.path_totals(path, day, tag=tag),
                                      keys.path_visitors(path, day, mode, tag=tag),
                                      visitors_expire_at(day), totals_expire_at(day), ids,
                                      keys.path_range_hll(path, day, tag=tag)))
    for tag, groups in by_group.items():
        call(groups, message_id and keys.path_seen(message_id, tag=tag))


def record_visit(conn: Any, ip: str, path: str, now: float | None = None, *, message_id: str | None = None) -> None:
    """One page view of ``path`` by visitor ``ip``: site and path, all-time and per-day PV/UV.

    Atomic per slot, one round trip; with ``message_id`` a redelivered message changes nothing.
    """
    check_message_id(message_id)
    view = prepare_view(ip, path, now)
    execute_in_order(conn, lambda pipe: queue_views(conn, pipe, [view], message_id))


def site_visit_info(conn: Any, day: date | None = None, path: str | None = None) -> SiteCount:
    """PV and UV of the site (``path`` None) or a path, on a local ``day`` or all time (None)."""
    if day is not None:
        check_day(day)
    if path is not None:
        path = normalize_path(path)
    if path is not None:
        pairs = [conn.hmget(keys.path_totals(path, day), "pv", "uv")]
    elif day is not None:
        pairs = [conn.hmget(keys.site_day_totals(day), "pv", "uv")]
    else:
        pipe = read_pipeline(conn)
        for shard in range(keys.SITE_SHARDS):
            pipe.hmget(keys.site_all_totals(shard), "pv", "uv")
        pairs = pipe.execute()
    pv = sum(int(p or 0) for p, _ in pairs)
    uv = sum(int(u or 0) for _, u in pairs)
    return SiteCount(day, pv, uv)


class SiteRange(NamedTuple):
    """PV/UV over the days ``start``..``end``: ``pv`` summed, ``uv`` the distinct visitors of the
    whole range (a union of the days), with the per-day figures in ``days``."""

    start: date
    end: date
    path: str | None
    pv: int
    uv: int
    uv_approximate: bool
    days: list[SiteCount]


def site_visit_range(conn: Any, start: date, end: date, path: str | None = None) -> SiteRange:
    """PV and UV of the site (or ``path``) over the local days ``start``..``end`` (at most 400).

    PV is the sum of the days. UV of one day is that day's figure (exact in the default mode);
    over several days it is the union of per-day HyperLogLogs (``uv_approximate``, ~0.81%
    error): a visitor seen on several days counts once. Days written before those HLLs existed
    add their PV but no visitors to a multi-day UV.
    """
    check_day_range(start, end)
    if path is not None:
        path = normalize_path(path)
    span = days.days_between(start, end)
    pipe = read_pipeline(conn)
    for day in span:
        pipe.hmget(keys.path_totals(path, day) if path is not None else keys.site_day_totals(day), "pv", "uv")
    per_day = [SiteCount(day, int(pv or 0), int(uv or 0)) for day, (pv, uv) in zip(span, pipe.execute(), strict=True)]
    pv = sum(d.pv for d in per_day)
    if len(span) == 1:
        return SiteRange(start, end, path, pv, per_day[0].uv, get_settings().uv_mode == "hll", per_day)
    if path is not None:  # every day of a path shares the path's slot: one PFCOUNT
        tag = keys.path_tag(path)
        uv = int(conn.pfcount(*(keys.path_range_hll(path, day, tag=tag) for day in span)))
    elif not is_cluster(conn):
        uv = int(conn.pfcount(*(keys.site_day_range_hll(day) for day in span)))
    else:  # one slot per day: merge the HLLs here, read-only
        uv = union_count(conn.execute_command("GET", keys.site_day_range_hll(day), **{NEVER_DECODE: True})
                         for day in span)
    return SiteRange(start, end, path, pv, uv, True, per_day)


def top_pages(conn: Any, start: date, end: date, limit: int = 10) -> list[tuple[str, int]]:
    """``(path, page views)`` over the local days ``start``..``end``, most viewed first, ties by
    path. Exact: each day's ZSET (one slot per day) is read whole and summed here."""
    check_day_range(start, end)
    check_int(limit, "limit", 1, 10_000)
    pipe = read_pipeline(conn)
    for day in days.days_between(start, end):
        pipe.zrange(keys.site_day_pages(day), 0, -1, withscores=True)
    totals: Counter[str] = Counter()
    for pairs in pipe.execute():
        for member, score in pairs:
            totals[as_str(member)] += int(score)
    ranked = sorted(((p, n) for p, n in totals.items() if n > 0), key=lambda item: (-item[1], item[0]))
    return ranked[:limit]
