"""The slots of a site's figures, and how their keys are named: one slot a site's local day
(``site_day_tag``: every table of that day is in it, ``site_day``, ``page_day``, ``pairs``,
``sources``, ``who_visits`` and ``day_tops``, so one ``site_day`` call writes them all), one a
shard of its all-time visitors (``site_all``), one a group of paths (``page_all``); and how a table
of visitors is named in each UV mode (``uv_kind``, COUNTERS_UV_MODE). The visitor ids those tables
hold are made in ``core.visitors`` (HMACs of the IP, never raw IPs).
"""

from __future__ import annotations

from datetime import date

from ..core.table import ForgetterSlot, Retention
from ..store import keys


def uv_kind(mode: str) -> str:
    """How a table of visitors is named: ``vis`` (a SET of ids, the default, exact) or ``hll`` (a
    HyperLogLog, COUNTERS_UV_MODE=hll)."""
    return "hll" if mode == "hll" else "vis"


def site_day_tag(day: date, site: str = "") -> str:
    return keys.hash_tag("site-day", keys.scoped(site, day.isoformat()))


DAY_TABLES_KEPT = Retention(
    "the later of the end of D and the table's latest write, plus COUNTERS_DAY_TOTALS_DAYS "
    "(never less than COUNTERS_DAY_GRACE_DAYS)",
    "COUNTERS_DAY_TOTALS_DAYS",
    lambda settings: max(settings.day_totals_days, settings.day_grace_days),
)
"""How long the tables of a day's slot that hold figures are kept: the pages, the sources, who
visits (each from its own latest write), as the day's totals (``site_day.totals_days``)."""


FORGET_DAY_TABLES = ForgetterSlot("sitestats day tables")
"""The ``Erasure.forget`` of every table of a site's day's slot (``site_day``, ``pairs``,
``page_day``, ``sources``, ``who_visits``): one pass for them all, ``sitestats.erase.forget_days``
(installed by it: it makes every one's keys)."""
FORGET_ALL_TIME = ForgetterSlot("sitestats all-time tables")
"""The ``Erasure.forget`` of the all-time tables (``site_all``, ``page_all``):
``sitestats.erase.forget_all_time``."""
