"""JSON-ready answers for the operator views: the ``counters-tasks`` query commands (``--json``)
and the dashboard's endpoints return exactly these dicts, so the terminal, the browser and
scripts always agree. Arguments arrive as text (command line, query string) and are parsed
here; bad ones raise ``InvalidInput`` before Redis is asked anything. At the end: the read-only
tokens of the dashboard's JSON API (``counters-tasks tokens``, checked by ``web.TokenAuth``).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections import Counter
from datetime import date, timedelta
from typing import Any, cast

from .. import counters, live, ranking, sitestats, skips, uniques
from ..core import table
from ..core.days import today
from ..core.settings import get_settings
from ..core.sites import check_site, site_name, site_names, zone_of
from ..core.validation import MAX_RANGE_DAYS, check_day_range, check_int, check_text
from ..core.visitors import VISITOR_DAYS, VISITOR_DAYS_NOTE, VISITORS, uv_counts
from ..counters import SAMPLE_COUNT, bucket_start
from ..errors import InvalidInput
from ..store import keys
from ..store.client import RedisClient, as_str

MAX_LIMIT = 1000


def parse_day(text: Any, what: str = "day", site: str = "") -> date:
    """An ISO date (``YYYY-MM-DD``), or ``today`` / ``yesterday`` in the zone of site ``site`` (a
    scope: ``COUNTERS_TIMEZONE`` for the default site)."""
    if isinstance(text, date):
        return text
    if not isinstance(text, str):
        raise InvalidInput(f"{what} must be a date YYYY-MM-DD")
    if text == "today":
        return today(zone_of(site))
    if text == "yesterday":
        return today(zone_of(site)) - timedelta(days=1)
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise InvalidInput(f"{what} must be a date YYYY-MM-DD, got {text!r}") from None


def parse_int(text: Any, what: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """An int from text (query strings) or an int, within bounds."""
    if isinstance(text, str):
        try:
            text = int(text, 10)
        except ValueError:
            raise InvalidInput(f"{what} must be an integer, got {text!r}") from None
    return check_int(text, what, minimum, maximum)


def day_range(day: Any = None, start: Any = None, end: Any = None, site: str = "") -> tuple[date, date]:
    """``(first, last)`` days from ``day`` alone, or ``start``/``end`` (either may be missing:
    the other end, or today in the site's zone); at most MAX_RANGE_DAYS days, ``first <= last``."""
    now = today(zone_of(site))
    if day is not None:
        if start is not None or end is not None:
            raise InvalidInput("give either a day or a from/to range, not both")
        first = last = parse_day(day, "day", site)
    else:
        last_given = parse_day(end, "to", site) if end is not None else None
        first_given = parse_day(start, "from", site) if start is not None else None
        first = first_given or last_given or now
        last = last_given or (now if first <= now else first)
    return check_day_range(first, last, names=("from", "to"))


def config_view(_conn: RedisClient | None = None, site: Any = None) -> dict[str, Any]:
    """What the dashboard needs to pick default dates: today in the site's zone, the zone, and
    every site of the deployment (the default one first)."""
    scope = check_site(site)
    zone = zone_of(scope)
    return {
        "today": today(zone).isoformat(),
        "timezone": zone,
        "max_range_days": MAX_RANGE_DAYS,
        "site": site_name(scope),
        "sites": site_names(),
        **sitestats.client_tables_status(),
    }


def counters_list(conn: RedisClient, cursor: Any = None, limit: Any = None, site: Any = None) -> dict[str, Any]:
    """A page of the counters that hold samples (at most ``limit``, default 100, up to 1000),
    from ``cursor`` (the ``next`` of the page before; None at the end)."""
    limit = 100 if limit is None else parse_int(limit, "limit", 1, counters.MAX_PAGE)
    names, following = counters.counter_page(conn, "0" if cursor is None else str(cursor), limit, site=site)
    return {"counters": names, "next": following, "precisions": list(counters.PRECISIONS)}


def counter_view(
    conn: RedisClient, name: Any, precision: Any = 60, last: Any = None, now: float | None = None, site: Any = None
) -> dict[str, Any]:
    """The last ``last`` buckets (default and at most SAMPLE_COUNT) of a counter, zero-filled."""
    check_text(name, "name")
    precision = counters.check_kept_precision(name, parse_int(precision, "precision"))
    last = SAMPLE_COUNT if last is None else parse_int(last, "last", 1, SAMPLE_COUNT)
    now = time.time() if now is None else now
    end = bucket_start(now, precision)
    points = counters.get_series(conn, name, precision, end - (last - 1) * precision, now, now=now, site=site)
    return {
        "name": name,
        "precision": precision,
        "now": now,
        "points": [list(p) for p in points],
        "total": sum(t for _, t in points),
    }


def boards_list(conn: RedisClient, site: Any = None) -> dict[str, Any]:
    return {"boards": ranking.known_boards(conn, site=site)}


def board_view(
    conn: RedisClient, board: Any, limit: Any = 10, now: float | None = None, site: Any = None
) -> dict[str, Any]:
    """A ranking's top members with their totals, with the board's own (stored) settings."""
    check_text(board, "board")
    limit = parse_int(limit, "limit", 1, MAX_LIMIT)
    stored = ranking.board_settings(conn, keys.scoped(check_site(site), board))
    if stored is None:
        known = ", ".join(ranking.known_boards(conn, site=site)) or "none"
        raise InvalidInput(f"no board named {board!r} (boards: {known})")
    period, interval = stored
    board_ = ranking.Ranking(conn, board, period, interval, site=site)
    # (member, total) pairs with withscores=True (Ranking.top is typed with both shapes)
    top = cast("list[tuple[str, int]]", board_.top(0, limit, withscores=True, now=now))
    # the members past the limit: those of the board's totals (rotation drops a member at zero)
    total = len(top) if len(top) < limit else int(board_.stats()["members"] or 0)
    return {
        "board": board,
        "period_hours": period,
        "interval_hours": interval,
        "top": [[member, total] for member, total in top],
        **listed_view(len(top), total),
    }


def delete_board_view(conn: RedisClient, board: Any, site: Any = None) -> dict[str, Any]:
    """Delete a board (``ranking.delete_board``): whether there was one."""
    check_text(board, "board")
    return {"board": board, "deleted": ranking.delete_board(conn, board, site=site)}


def uv_view(uv: int | None, approximate: bool, error: float, counts: str = VISITORS) -> dict[str, Any]:
    """A UV figure as every answer gives it: ``uv``, ``uv_approximate`` (as before), ``uv_exact``
    and ``uv_error`` (the relative standard error the read gave, 0.0 when exact), so every reader
    marks it from the read's own bound (the CLI's ``≈N ±X%``, the dashboard's), never from a
    constant of its own; ``uv_counts``, what it counts (``core.visitors.uv_counts``: ``visitors``,
    or ``visitor-days`` over several days with COUNTERS_VISITOR_KEY=daily)."""
    return {"uv": uv, "uv_approximate": approximate, "uv_exact": error == 0.0, "uv_error": error, "uv_counts": counts}


def counts_view(first: date, last: date) -> dict[str, Any]:
    """What the UV figures of an answer over the days ``first``..``last`` count, at its top
    (``uv_counts``), and the note every reader shows beside them when they count visitor-days
    (``uv_note``: COUNTERS_VISITOR_KEY=daily; None otherwise): no silent figure."""
    counts = uv_counts((last - first).days + 1)
    return {"uv_counts": counts, "uv_note": VISITOR_DAYS_NOTE if counts == VISITOR_DAYS else None}


def retention_view(
    first: date, site: Any = None, tier: str = table.AGGREGATE, now: float | None = None
) -> dict[str, Any]:
    """``retention_note``: what every reader shows beside an answer over a range that starts before
    the first day ``tier`` still keeps in the site's zone (``core.table.first_day_kept``): those
    days' figures were removed by the hourly retention pass (docs/privacy.md), so they count 0 in
    the answer, and the reader says so rather than show a silent 0. None when every day is kept."""
    scope, settings = check_site(site), get_settings()
    kept = table.first_day_kept(tier, settings, zone_of(scope), time.time() if now is None else now)
    if kept is None or first >= kept:
        return {"retention_note": None}
    setting, horizon = table.TIER_SETTINGS[tier], table.tier_days(tier, settings)
    return {
        "retention_note": f"Days before {kept.isoformat()} are past {setting}={horizon}: the retention pass "
        "removed their figures, so they count 0 here."
    }


def uv_bound(error: float) -> str:
    """An estimate's bound as every text prints it: its relative standard error in percent, one
    decimal (``±0.8%``; the dashboard's app.js writes it the same way)."""
    return f"±{error * 100:.1f}%"


def uv_text(figure: dict[str, Any]) -> str:
    """A ``uv_view`` figure as text (the CLI's tables, the demo's report): an estimate ``≈N ±X%``,
    the bound from the read's own ``uv_error``; an exact figure plain."""
    if figure["uv_exact"]:
        return str(figure["uv"])
    return f"≈{figure['uv']} {uv_bound(figure['uv_error'])}"


def stats_view(
    conn: RedisClient, day: Any = None, start: Any = None, end: Any = None, path: Any = None, site: Any = None
) -> dict[str, Any]:
    """Site (or one path's) PV/UV per day over a range, with the range's PV sum and true UV
    (distinct visitors by IP). ``uv_approximate`` only when the figure is an estimate: a range
    whose visitors all came on one day (a new site, the dashboard's default week after a first
    ``make demo``) has that day's own figure, exact as a day's is, not the union of the days'
    HyperLogLogs (which is an estimate even when all but one are empty).

    Each day's figure carries its own ``uv_exact`` and ``uv_error`` (``uv_view``), the bound
    sitestats gives a day's UV (``sitestats.day_uv_error``: exact in the default mode, the day's
    HyperLogLog in ``COUNTERS_UV_MODE=hll``); a day, or a range, with no visitor is an exact 0."""
    first, last = day_range(day, start, end, check_site(site))
    result = sitestats.site_visit_range(conn, first, last, path, site=site)
    visited = [d for d in result.days if d.uv and d.day is not None]
    day_error = sitestats.day_uv_error(result.path)  # each day's own figure's bound
    counts = counts_view(first, last)
    if not visited:  # no visitor: an exact 0, as each of its days says
        figure = uv_view(0, False, 0.0, counts["uv_counts"])
    elif first == last or len(visited) > 1:
        figure = uv_view(result.uv, result.uv_approximate, result.uv_error, result.uv_counts)
    else:  # the union of the days is that day's visitors: its own figure, with its own bound
        figure = uv_view(visited[0].uv, day_error > 0, day_error, counts["uv_counts"])
    view: dict[str, Any] = {
        "from": first.isoformat(),
        "to": last.isoformat(),
        "path": result.path,
        "pv": result.pv,
        **figure,
        "uv_note": counts["uv_note"],
        **retention_view(first, site),
        "days": [
            {
                "day": d.day and d.day.isoformat(),
                "pv": d.pv,
                **(uv_view(d.uv, day_error > 0, day_error) if d.uv else uv_view(0, False, 0.0)),
            }
            for d in result.days
        ],
    }
    if path is None:  # what the site's figures leave out, beside them (a path has no skips of its own)
        view.update(skipped_view(conn, first, last, site))
        for entry, skipped in zip(view["days"], view.pop("skipped_days"), strict=True):
            entry["skipped"] = skipped
    return view


def skipped_view(conn: RedisClient, first: date, last: date, site: Any = None) -> dict[str, Any]:
    """The requests of a site's days that were not page views (``skips``): ``skipped`` (reason
    -> requests over the range), ``skipped_total`` and ``skipped_days`` (requests a day, in order)."""
    by_day = skips.day_counts(conn, first, last, site)
    total: Counter[str] = Counter()
    for counts in by_day.values():
        total.update(counts)
    return {
        "skipped": dict(sorted(total.items())),
        "skipped_total": sum(total.values()),
        "skipped_days": [sum(counts.values()) for counts in by_day.values()],
    }


def top_pages_view(
    conn: RedisClient, start: Any = None, end: Any = None, limit: Any = 10, site: Any = None, count: bool = False
) -> dict[str, Any]:
    """Paths by page views summed over a range (ties by path). ``count`` (the CLI's): with the
    paths there are (``total``) and those not listed (``more``, ``listed_view``), which reads
    every page of the days when the list was cut (``sitestats.page_totals``), so the dashboard
    does not ask for it."""
    first, last = day_range(None, start, end, check_site(site))
    limit = parse_int(limit, "limit", 1, MAX_LIMIT)
    pages = sitestats.top_pages(conn, first, last, limit, site=site)
    view: dict[str, Any] = {
        "from": first.isoformat(),
        "to": last.isoformat(),
        "pages": [[p, n] for p, n in pages],
        **retention_view(first, site),
    }
    if count:
        total = len(pages) if len(pages) < limit else sitestats.page_totals(conn, first, last, site=site).values
        view.update(listed_view(len(pages), total))
    return view


def sources_view(
    conn: RedisClient, start: Any = None, end: Any = None, kind: Any = None, limit: Any = 10, site: Any = None
) -> dict[str, Any]:
    """Where the site's page views came from over a range: referring domains (``kind``
    ``referrer``, the default) or campaign tags (``utm_source``, ``utm_medium``, ``utm_campaign``),
    most views first, with each source's distinct visitors."""
    first, last = day_range(None, start, end, check_site(site))
    limit = parse_int(limit, "limit", 1, sitestats.SOURCES_LIMIT)
    kind = "referrer" if kind is None else kind
    found = sitestats.top_sources(conn, first, last, kind, limit, site=site)
    total = len(found) if len(found) < limit else sitestats.source_totals(conn, first, last, kind, site=site).values
    counts = counts_view(first, last)
    return {
        "from": first.isoformat(),
        "to": last.isoformat(),
        "kind": kind,
        "sources": [
            {"source": s.source, "pv": s.pv, **uv_view(s.uv, s.uv_approximate, s.uv_error, counts["uv_counts"])}
            for s in found
        ],
        **listed_view(len(found), total),
        **counts,
        **retention_view(first, site),
    }


def clients_view(
    conn: RedisClient,
    start: Any = None,
    end: Any = None,
    kind: Any = None,
    limit: Any = 10,
    site: Any = None,
    path: Any = None,
) -> dict[str, Any]:
    """Who visited the site (or its page ``path``, one of COUNTERS_CLIENT_PAGES: who reads
    ``/pricing``) over a range (``sitestats.top_clients``): browsers (``kind``
    ``browser``, the default, or ``browser_version``), systems (``os``, ``os_version``), device
    types (``device``), countries (``country``) or languages (``language``), most views first,
    each with its distinct visitors (``uv_approximate``: an estimate).

    ``other`` is the page views folded into ``(other)`` (the values past a day's
    COUNTERS_MAX_DAY_CLIENTS), so every reader can say them beside the figures even when
    ``(other)`` ranks below ``limit`` (then read apart: ``sitestats.folded_client_views``)."""
    scope = check_site(site)
    first, last = day_range(None, start, end, scope)
    limit = parse_int(limit, "limit", 1, sitestats.CLIENTS_LIMIT)
    kind = "browser" if kind is None else kind
    if kind not in sitestats.CLIENT_VIEWS:  # said before Redis is asked anything
        raise InvalidInput(f"kind must be one of {', '.join(sitestats.CLIENT_VIEWS)}, got {kind!r}")
    page = None if path in (None, "") else sitestats.normalize_path(path)
    sitestats.check_client_page(site, page)  # (a page whose tables are not kept: said before Redis is asked)
    found = sitestats.top_clients(conn, first, last, kind, limit, site=site, path=page)
    folded = [c.pv for c in found if c.source == sitestats.OTHER]
    if not folded and len(found) == limit:  # (a shorter list would have listed it)
        folded = [sitestats.folded_client_views(conn, first, last, kind, site=site, path=page)]
    whole = sitestats.client_totals(conn, first, last, kind, site=site, path=page)
    pv = sitestats.site_visit_range(conn, first, last, page, site=site).pv
    counts = counts_view(first, last)
    return {
        "from": first.isoformat(),
        "to": last.isoformat(),
        "kind": kind,
        "site": site_name(scope),
        "path": page,
        "pages": sorted(sitestats.client_pages()),
        **sitestats.client_tables_status(),
        "clients": [
            {"value": c.source, "pv": c.pv, **uv_view(c.uv, c.uv_approximate, c.uv_error, counts["uv_counts"])}
            for c in found
        ],
        "other": folded[0] if folded else 0,
        **listed_view(len(found), whole.values),
        **coverage_view(pv, whole.pv),
        **counts,
        **retention_view(first, site),
    }


def listed_view(listed: int, total: int) -> dict[str, int]:
    """What a table cut at its limit leaves out, beside its rows: ``total`` (the rows there are)
    and ``more`` (those not listed), so a reader says "N more" under the table."""
    return {"total": max(total, listed), "more": max(total - listed, 0)}


def coverage_view(pv: int, table_pv: int) -> dict[str, int]:
    """How much of the period's page views a who-visits table holds: ``pv`` (the site's, or the
    page's, over the same days), ``table_pv`` (every row's, ``(other)`` and ``(unknown)``
    included) and ``not_in_table``, the views counted while the tables were off (or before the
    page was listed in COUNTERS_CLIENT_PAGES)."""
    return {"pv": pv, "table_pv": table_pv, "not_in_table": max(pv - table_pv, 0)}


def now_view(conn: RedisClient, site: Any = None, now: float | None = None) -> dict[str, Any]:
    """Distinct visitors of the site right now: in the last ``live.WINDOW_MINUTES`` minutes."""
    scope = check_site(site)
    return {
        "site": site_name(scope),
        "visitors": live.visitors_now(conn, site=site, now=now),
        "window_minutes": live.WINDOW_MINUTES,
    }


def uniques_view(
    conn: RedisClient, day: Any = None, start: Any = None, end: Any = None, site: Any = None
) -> dict[str, Any]:
    """Distinct session ids per day and over the whole range (an exact union of the days;
    session-days with COUNTERS_VISITOR_KEY=daily, whose numbers change each day: ``uv_counts``,
    ``uv_note``)."""
    first, last = day_range(day, start, end, check_site(site))
    result = uniques.unique_visitors_range(conn, first, last, site=site)
    return {
        "from": first.isoformat(),
        "to": last.isoformat(),
        "visitors": result.visitors,
        "days": [{"day": d.isoformat(), "visitors": n} for d, n in result.days],
        "missing_days": [d.isoformat() for d in result.missing_days],
        **counts_view(first, last),
        **retention_view(first, site),
    }


# --- read-only tokens of the dashboard's JSON API (``counters-tasks tokens``) ---------------
# A token is "ctk_" + 32 random bytes (urlsafe base64); only its SHA-256 is kept, as a field of
# one HASH (``keys.api_tokens``). A hash of 256 random bits needs no salt or slow KDF: nothing
# guessable is hashed, and a request's token is found by its hash (one HGET), so no comparison
# of secrets runs over the stored ones.

TOKEN_PREFIX = "ctk_"
TOKEN_MAX_LENGTH = 100
"""A presented token longer than this is refused without asking Redis (a real one is 47 characters)."""
MAX_TOKENS = 1000
"""Tokens at most; ``tokens create`` past it is refused (revoke unused ones)."""
TOKEN_SCOPE = "read"
"""The one scope there is: GET of the JSON API and ``/metrics``."""


class TooManyTokens(Exception):
    """``create_token`` with MAX_TOKENS tokens already stored."""


def token_hash(token: str) -> str:
    """What is stored of a token: its SHA-256, hex."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def _token_entry(value: Any) -> dict[str, Any]:
    """A stored token entry, or {} for one that is not a JSON object (changed by hand: it allows nothing)."""
    try:
        entry = json.loads(value)
    except ValueError:
        return {}
    return entry if isinstance(entry, dict) else {}


def _token_entries(pipe: Any) -> dict[str, dict[str, Any]]:
    return {as_str(field): _token_entry(value) for field, value in pipe.hgetall(keys.api_tokens()).items()}


def create_token(conn: RedisClient, name: Any, now: float | None = None, site: Any = None) -> dict[str, Any]:
    """A new token named ``name`` (unique): its entry and, this once, the token itself. ``site``:
    the one site it reads (None: every site, and ``/metrics``)."""
    check_text(name, "name", 100)
    only = None if site is None else site_name(check_site(site))
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    entry = {"name": name, "created": int(time.time() if now is None else now), "scope": TOKEN_SCOPE, "site": only}

    def add(pipe: Any) -> None:  # WATCHed: two creates at once cannot both take a name or the last place
        stored = _token_entries(pipe).values()
        if any(r.get("name") == name for r in stored):
            raise InvalidInput(f"a token named {name!r} exists already (revoke it first)")
        if len(stored) >= MAX_TOKENS:
            raise TooManyTokens(
                f"{MAX_TOKENS} tokens exist already, the most there may be: "
                f"revoke unused ones (counters-tasks tokens list / revoke NAME)"
            )
        pipe.multi()
        pipe.hset(keys.api_tokens(), token_hash(token), json.dumps(entry))

    conn.transaction(add, keys.api_tokens())
    return {**entry, "token": token}


def tokens_list(conn: RedisClient) -> dict[str, Any]:
    """The tokens' entries (name, created, scope, site), oldest first: never a token or its hash."""
    entries = sorted(_token_entries(conn).values(), key=lambda r: (r.get("created", 0), r.get("name", "")))
    return {"tokens": [{k: r.get(k) for k in ("name", "created", "scope", "site")} for r in entries], "max": MAX_TOKENS}


def revoke_token(conn: RedisClient, name: Any) -> dict[str, Any]:
    """Delete the token named ``name``: whether there was one. The dashboard refuses it from its next request."""
    check_text(name, "name", 100)
    found: list[str] = []

    def remove(pipe: Any) -> None:
        found[:] = [field for field, r in _token_entries(pipe).items() if r.get("name") == name]
        pipe.multi()
        if found:
            pipe.hdel(keys.api_tokens(), *found)

    conn.transaction(remove, keys.api_tokens())
    return {"name": name, "revoked": bool(found)}


def token_sites(conn: RedisClient, token: str) -> set[str] | None:
    """The sites ``token`` may read: None when it is no stored read token, an empty set for every
    site (and ``/metrics``), else the one site it was made for. One HGET (no cache, so a revoked
    token is refused from the next request); Redis errors propagate (the dashboard answers 503)."""
    if not token.startswith(TOKEN_PREFIX) or len(token) > TOKEN_MAX_LENGTH:
        return None
    stored = conn.hget(keys.api_tokens(), token_hash(token))
    if stored is None:
        return None
    entry = _token_entry(stored)
    if entry.get("scope") != TOKEN_SCOPE:
        return None
    site = entry.get("site")
    return set() if site is None else {site} if isinstance(site, str) else None


def token_allows_read(conn: RedisClient, token: str, site: str | None = None) -> bool:
    """Whether ``token`` may read the figures of ``site`` (None: anything a read token may, the
    deployment's ``/metrics`` included: only a token for every site)."""
    sites = token_sites(conn, token)
    if sites is None:
        return False
    return not sites or (site is not None and (site or "default") in sites)


API_TOKENS = table.register(
    table.Table(
        name="api_tokens",
        what="the dashboard API's read-only tokens: a SHA-256 of each, its name, creation time and scope",
        module=__name__,
        keys=(table.StoredKey("ct:tokens:{tokens}", "HASH"),),
        tag="{tokens}",
        fed_by=(),
        writers=("counters-tasks tokens create", "counters-tasks tokens revoke"),
        readers=("every dashboard API request with a token", "counters-tasks tokens list"),
        retention=table.Retention("until revoked"),
        erasure=table.Erasure.none("tokens of operators, not of visitors"),
    )
)
"""The dashboard API's tokens (``core.table``)."""
