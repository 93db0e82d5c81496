"""Site PV/UV (docs/design.md): all-time and per-day page views and unique visitors, site and
path, their sources and who visits. One module a stored table, each with its declaration
(``core.table``), its keys, its part of a visit's write and its reads:

- ``site_day``: the site's day (totals, visitors, the range HLL) and the write of a visit to
  every table (``queue_views``, one ``site_day`` call a day's part, then ``site_all`` and
  ``page_all``; ``record_visit``);
- ``page_day``: each path's figures of a day (the pages HASH); ``pairs``: who viewed which path
  (each path's exact UV of the day); ``sources``: the day's sources tables; ``who_visits``: the
  who-visits tables and sketches (COUNTERS_CLIENT_TABLES, COUNTERS_CLIENT_PAGES); ``day_tops``: a
  day's top pages for range reads (``top_pages``, beat's ``make_day_tops``);
- ``site_all``: the site's all-time figures (16 shards); ``page_all``: a path's all-time figures;
- ``views``: a page view validated (``SiteView``, ``view_on``); ``reads``: ``site_visit_info``
  and ``site_visit_range``; ``slots``: the slots their keys are in;
- ``erase``: one visitor forgotten from the day tables and the all-time ones (their
  ``Erasure.forget``, installed in ``slots``' forgetter slots; ``worker.forget`` calls them);
- ``upgrade``: exactly-once across the upgrade of key layout 1 to 2 (layout 1's cut of a
  message's views recomputed, its markers read, for the layout-1 workers' dedupe TTL).

A visit's write goes down: ``visits`` -> ``site_day`` -> the table modules -> ``store``. Visitor
ids are made in ``core.visitors``. This module re-exports the names the package's other modules,
its users (the contract: ``record_visit``, ``site_visit_info``, ``SiteCount``) and its tests read;
modules inside the package import from the module itself.
"""

from .day_tops import DAY_TOP_KEPT, RESOLVE_LIMIT, TOP_DAYS_BACK, DayTop, make_day_tops, top_pages
from .page_day import OTHER, PAGES_PER_CALL, TABLES_PER_ROUND, TableTotals, page_totals
from .reads import SiteCount, SiteRange, day_uv_error, site_visit_info, site_visit_range
from .site_day import (
    DAY_HEADERS_PER_CALL,
    DAY_VIEWS_PER_CALL,
    applied_views,
    closed_views,
    queue_views,
    record_visit,
    sent_calls,
    totals_expire_at,
)
from .sources import SOURCE_KINDS, SOURCES_LIMIT, SourceCount, source_totals, top_sources
from .views import VIEW_FIELDS, SiteView, normalize_path, view_on
from .who_visits import (
    CLIENT_VIEWS,
    CLIENTS_LIMIT,
    check_client_page,
    client_pages,
    client_tables_said,
    client_tables_status,
    client_totals,
    folded_client_views,
    top_clients,
    who_digest,
)

__all__ = [
    "CLIENTS_LIMIT",
    "CLIENT_VIEWS",
    "DAY_TOP_KEPT",
    "DAY_HEADERS_PER_CALL",
    "DAY_VIEWS_PER_CALL",
    "OTHER",
    "PAGES_PER_CALL",
    "RESOLVE_LIMIT",
    "SOURCES_LIMIT",
    "SOURCE_KINDS",
    "TABLES_PER_ROUND",
    "TOP_DAYS_BACK",
    "DayTop",
    "SiteCount",
    "SiteRange",
    "SiteView",
    "VIEW_FIELDS",
    "SourceCount",
    "TableTotals",
    "applied_views",
    "check_client_page",
    "client_pages",
    "client_tables_said",
    "client_tables_status",
    "client_totals",
    "closed_views",
    "day_uv_error",
    "folded_client_views",
    "make_day_tops",
    "normalize_path",
    "page_totals",
    "queue_views",
    "record_visit",
    "sent_calls",
    "site_visit_info",
    "site_visit_range",
    "source_totals",
    "top_clients",
    "top_pages",
    "top_sources",
    "totals_expire_at",
    "view_on",
    "who_digest",
]
