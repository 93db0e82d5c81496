"""The slots of a site's figures, and how their keys are named: one slot a site's local day
(``site_day_tag``: every table of that day is in it, ``site_day``, ``page_day``, ``pairs``,
``sources``, ``who_visits`` and ``day_tops``, so one ``site_day`` call writes them all), one a
shard of its all-time visitors (``site_all``), one a group of paths (``page_all``); and how a table
of visitors is named in each UV mode (``uv_kind``, COUNTERS_UV_MODE). The visitor ids those tables
hold are made in ``core.visitors`` (HMACs of the IP, never raw IPs).
"""

from __future__ import annotations

from datetime import date

from ..core.settings import Settings
from ..core.table import AGGREGATE, ForgetterSlot, Retention, Sweeper
from ..store import keys


def uv_kind(mode: str) -> str:
    """How a table of visitors is named: ``vis`` (a SET of ids, the default, exact) or ``hll`` (a
    HyperLogLog, COUNTERS_UV_MODE=hll)."""
    return "hll" if mode == "hll" else "vis"


def site_day_tag(day: date, site: str = "") -> str:
    return keys.hash_tag("site-day", keys.scoped(site, day.isoformat()))


AGGREGATE_KEPT = (
    "COUNTERS_AGGREGATE_DAYS (400; 0: for ever) after the end of D: the hourly apply_retention "
    "removes the day past it (its TTL, COUNTERS_DAY_TOTALS_DAYS from the latest write, is a safety net)"
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


"""What the retention of a day's aggregate table says (``day_tables_kept``)."""


def aggregate_days(settings: Settings) -> float | None:
    """The aggregate tier's horizon in days (None: for ever, COUNTERS_AGGREGATE_DAYS=0)."""
    return settings.aggregate_days or None


def day_tables_kept(sweep: Sweeper, horizon: str = AGGREGATE_KEPT) -> Retention:
    """How long a table of a day's figures is kept: the aggregate tier, swept by ``sweep``."""
    return Retention(horizon, "COUNTERS_AGGREGATE_DAYS", aggregate_days, {AGGREGATE: sweep})


DAY_TABLES_KEPT = Retention(AGGREGATE_KEPT, "COUNTERS_AGGREGATE_DAYS", aggregate_days)
"""How long the tables of a day's slot that hold figures are kept (the aggregate tier; each
table's declaration names its sweep: ``day_tables_kept``)."""
