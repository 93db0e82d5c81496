"""Exactly-once across the upgrade of key layout 1 to 2 (``store.deployment.Upgrade``): a message
applied in part by a layout-1 worker (some of its ``site_day`` calls done, each marked
``<id>/d<n>`` under layout 1's cut) and delivered again to a layout-2 worker counts nothing twice.

Layout 2 cuts a day's views of a message in fixed parts named ``<id>/v<n>`` (``site_day._parts``),
so a layout-1 marker says nothing to a layout-2 call by its name. For the layout-1 workers'
COUNTERS_DEDUPE_TTL after ``counters-tasks migrate``, a write of a message with an id recomputes
layout 1's cut of each day's views (``layout1_parts``, with the layout-1 workers'
COUNTERS_CLIENT_TABLES the migration recorded), reads which of its markers exist (one round trip,
only then), and the views under one are left out of the layout-2 calls, counted as applied
before. Layout-1 processes refuse a layout-2 deployment (``LayoutMismatch``), so once migrated no
layout-1 marker is made: the read and the write need not be atomic.

What cannot be recomputed: layout 1's cut of a message whose views this worker has no who-visits
values for (COUNTERS_CLIENT_TABLES off here, on for the layout-1 workers) is taken as if the
tables were off there too, and who-visits values from another ua-parser or iptocc version than
the layout-1 workers' may cut it elsewhere: keep both as they were across the upgrade.
"""

from __future__ import annotations

from datetime import date

from ..store import deployment, keys
from ..store.client import RedisClient, read_pipeline
from . import slots, who_visits
from .views import SiteView

LAYOUT1_VIEWS_PER_CALL = 100
LAYOUT1_WHO_VALUES_PER_CALL = 64


def layout1_parts(views: list[SiteView], message_id: str, client_tables: bool) -> list[tuple[list[SiteView], str]]:
    """Key layout 1's cut of a day's views of one message, with its dedupe ids (``<id>/d<n>``):
    parts of 100 views, fewer when their who-visits values passed 64 (when ``client_tables``, the
    layout-1 workers' COUNTERS_CLIENT_TABLES). Used only to find which views of a message a
    layout-1 worker applied before the upgrade (``applied_by_layout1``)."""
    if not client_tables or all(view.who is None for view in views):
        parts = [
            views[first : first + LAYOUT1_VIEWS_PER_CALL] for first in range(0, len(views), LAYOUT1_VIEWS_PER_CALL)
        ]
    else:
        parts = []
        part: list[SiteView] = []
        values: set[tuple[str, str]] = set()  # (letter, value) of the part's views
        for view in views:
            pairs = list(zip(who_visits.CLIENT_LETTERS, view.who or (), strict=False))
            new = [pair for pair in pairs if pair not in values]
            if part and (len(part) == LAYOUT1_VIEWS_PER_CALL or len(values) + len(new) > LAYOUT1_WHO_VALUES_PER_CALL):
                parts.append(part)
                part, values, new = [], set(), pairs  # (each of its values new to the new part)
            part.append(view)
            values.update(new)
        if part:
            parts.append(part)
    return [(part, f"{message_id}/d{n}") for n, part in enumerate(parts)]


def applied_by_layout1(
    conn: RedisClient, groups: list[tuple[str, date, list[SiteView]]], message_id: str | None
) -> list[list[bool]] | None:
    """For each ``(scope, day, views)`` of one message's write (a ``site_day`` scope: the site's,
    or a page's of COUNTERS_CLIENT_PAGES), which of its views a layout-1 worker applied (under one
    of layout 1's markers of the message, in the day's slot); None outside the upgrade's window
    (``deployment.upgrade``) or for a message without an id (no dedupe)."""
    upgrade = deployment.upgrade(conn)
    if upgrade is None or message_id is None or not groups:
        return None
    with keys.bound(conn, write=True):  # (the markers are keys of the deployment queue_views writes to)
        names: list[str] = []
        spans: list[tuple[int, int, int]] = []  # (group, first view, past its last) of each marker
        for number, (scope, day, views) in enumerate(groups):
            tag, first = slots.site_day_tag(day, scope), 0
            for part, part_id in layout1_parts(views, message_id, upgrade.client_tables):
                names.append(keys.site_seen(part_id, tag=tag))
                spans.append((number, first, first + len(part)))
                first += len(part)
        pipe = read_pipeline(conn)
        for name in names:
            pipe.exists(name)
        applied = [[False] * len(views) for _scope, _day, views in groups]
        for (number, first, last), found in zip(spans, pipe.execute(), strict=True):
            if int(found):
                applied[number][first:last] = [True] * (last - first)
        return applied
