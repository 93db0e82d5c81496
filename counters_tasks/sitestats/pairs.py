"""The pairs table (``pairs``): a day's SET of who viewed which path, each path's exact UV of the
day (a member new to the SET is a visitor new to the path that day), and, with the who-visits
tables on, each visitor's first view of the day with a profile (``who_visits.who_digest``). Its
members are written by the ``site_day`` call (``site_day.queue_views``; the members made in
``site_day``'s loop over the views, ``core.visitors.pair_visitor``); it is read by no one but that
script.
"""

from __future__ import annotations

from datetime import date

from ..core.table import VISITOR_LEVEL, Erasure, Retention, StoredKey, Table, register
from ..store import keys, sweeps
from ..store.client import RedisClient
from . import slots


def site_day_pairs(day: date, *, tag: str | None = None, site: str = "") -> str:
    """SET of "<visitor><path digest>" (11 + 8 characters) seen on one day: each path's exact daily UV
    (until the day's open_until)."""
    return f"{keys.prefix()}site:{{{tag or slots.site_day_tag(day, site)}}}:pairs:{keys.day_label(day, site)}"


def sweep(conn: RedisClient, scope: str, day: date, until: float | None) -> int:
    """The retention sweep of a site's day's pairs (visitor-level)."""
    with keys.bound(conn):
        return sweeps.apply(conn, [site_day_pairs(day, site=scope)], until)


PAIRS = register(
    Table(
        name="pairs",
        what="who viewed which path on a local day (a visitor id and a path digest a member), for "
        "each path's exact UV of the day; with the who-visits tables on, also a visitor's first "
        "view of the day with each browser, system, device, country and language",
        module=__name__,
        keys=(StoredKey("ct:site:{tag(D)}:pairs:<D>", "SET"),),
        tag="per site and day",
        fed_by=("visit",),
        writers=("store/lua/site_day.lua",),
        readers=("store/lua/site_day.lua (a path's UV of the day, the who-visits sketches)",),
        retention=Retention(
            "until the day's open_until: the later of the end of D and its first write, plus "
            "COUNTERS_DAY_GRACE_DAYS (at least a day); never past COUNTERS_VISITOR_DAYS after the end "
            "of D (the hourly apply_retention)",
            "COUNTERS_DAY_GRACE_DAYS",
            lambda settings: settings.day_grace_days,
            {VISITOR_LEVEL: sweep},
        ),
        erasure=Erasure(
            "visitor ids",
            True,
            "SREM of every member that starts with the visitor's 11-character pair id "
            "(core.visitors.pair_visitor; SSCAN MATCH <id>*), and for each path member the path's "
            "uv of the day in the pages HASH minus one; while D is open (the SET goes at open_until) (lua/forget_sketches.lua, with the day's sketches: sitestats/erase.py)",
            forget=slots.FORGET_DAY_TABLES,
        ),
    )
)
"""The pairs table (``core.table``)."""
