"""One visit, everything it counts: site PV/UV, the ``hits`` counters, the daily unique visitor.

Every input is validated first (InvalidInput, nothing written), then all writes are queued on
one pipeline: one Lua call per slot (uniques day, site day, visitor shard, path, each counter),
then the counter registry, in one round trip. Writes are grouped per slot, so a batch of visits
(``record_visits``, later) costs the same number of calls as one visit per distinct slot, and
one message id dedupes the whole batch.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from . import counters, sitestats, uniques
from .redis_layer import execute_in_order
from .validation import check_message_id, check_now


@dataclass(frozen=True)
class Visit:
    """One validated visit: the page view, its time, and the session's (day, id) when given."""

    view: sitestats.SiteView
    ts: float
    session: tuple[date, int] | None


def prepare_visit(ip: Any, path: Any, session_id: Any = None, now: Any = None) -> Visit:
    """Validate one visit (raises InvalidInput; writes nothing)."""
    ts = check_now(now)
    view = sitestats.prepare_view(ip, path, ts)
    session = uniques.prepare_id(session_id, ts) if session_id is not None else None
    return Visit(view, ts, session)


def hits_names(path: str) -> tuple[str, str]:
    """The counters a view of ``path`` adds to."""
    return "hits", f"hits:{path}"


def write_visits(conn: Any, visits: Sequence[Visit], message_id: str | None) -> None:
    """Apply already-validated visits in one round trip (at most once per ``message_id``)."""
    if not visits:
        return
    sessions: dict[date, list[int]] = defaultdict(list)
    per_counter: dict[str, counters.Buckets] = {}  # written last: their replies end the stage
    for visit in visits:
        if visit.session is not None:
            sessions[visit.session[0]].append(visit.session[1])
        for name in hits_names(visit.view.path):
            counters.add_to_buckets(per_counter.setdefault(name, {}), visit.ts, 1)
    expected = {day: uniques.expected_for(conn, day) for day in sessions}

    def data(pipe: Any) -> None:
        for day, numbers in sessions.items():  # first, so their replies lead the stage's replies
            uniques.queue_ids(conn, pipe, day, numbers, expected[day], message_id)
        sitestats.queue_views(conn, pipe, [visit.view for visit in visits], message_id)
        for name, buckets in per_counter.items():
            counters.queue_counter_write(conn, pipe, name, buckets, message_id)

    [replies] = execute_in_order(conn, data)
    counters.register_counters(conn, counters.unregistered(per_counter, replies[len(replies) - len(per_counter):]))
    for (day, numbers), reply in zip(sessions.items(), replies, strict=False):
        uniques.apply_ids(conn, day, numbers, message_id, reply)  # re-sends only if the figure moved


def record_visit(conn: Any, ip: str, path: str, session_id: str | None = None, now: float | None = None, *,
                 message_id: str | None = None) -> None:
    """One visit: site PV/UV, counters ``hits`` and ``hits:<path>``, and the session's daily unique."""
    check_message_id(message_id)
    write_visits(conn, [prepare_visit(ip, path, session_id, now)], message_id)
