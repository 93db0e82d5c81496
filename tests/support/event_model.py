"""The exact answer an event report must give for a list of events (one local day, one site): per
event its count and unique visitors (distinct IPs: a visitor id is an HMAC of the IP), and per
property value the same; and the same figures read back through ``events.event_report``."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from counters_tasks import events
from counters_tasks.core.events import NONE

Figures = dict[tuple[str, str | None, str | None], tuple[int, int]]
"""(event, property key or None, its value or None) -> (events, unique visitors)."""


@dataclass
class EventModel:
    """Events as sent: (name, ip, props as text)."""

    sent: list[tuple[str, str | None, dict[str, str]]] = field(default_factory=list)

    def add(self, name: str, ip: str | None, props: dict[str, Any] | None = None) -> None:
        self.sent.append((name, ip, {key: str(value) for key, value in (props or {}).items()}))

    def expected(self) -> Figures:
        counts: dict[tuple, int] = defaultdict(int)
        visitors: dict[tuple, set] = defaultdict(set)
        keys_of: dict[str, set[str]] = defaultdict(set)
        for name, _ip, props in self.sent:
            keys_of[name].update(props)
        for name, ip, props in self.sent:
            rows = [(name, None, None)] + [(name, key, props.get(key, NONE)) for key in keys_of[name]]
            for row in rows:
                counts[row] += 1
                if ip is not None:
                    visitors[row].add(ip)
        return {row: (n, len(visitors[row])) for row, n in counts.items()}

    def total(self) -> int:
        return len(self.sent)


def observed(conn, day: date, site: str | None = None) -> Figures:
    """The figures ``events.event_report`` gives for ``day``, in ``EventModel.expected``'s shape."""
    found: Figures = {}
    for row in events.event_report(conn, site=site, start=day, end=day).events:
        found[(row.name, None, None)] = (row.total, row.uv)
        for key, values in row.props.items():
            for value in values:
                found[(row.name, key, value.value)] = (value.total, value.uv)
    return found


def total_events(conn, day: date, site: str | None = None) -> int:
    """Every event of ``day`` the read counts."""
    return sum(row.total for row in events.event_report(conn, site=site, start=day, end=day).events)
