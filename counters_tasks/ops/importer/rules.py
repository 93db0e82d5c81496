"""The import's event rules (``counters-tasks import --event PATH=NAME``): page views of a path
counted as an event too, so a log's signups or checkouts (``/signup/done=signup``) become the
events a goal or funnel judges, with the view's own time, client address, session id and site.

``PATH`` is a page's exact name, or a prefix when it ends with ``*`` (``/checkout/*=checkout``:
every view whose page starts with ``/checkout/``). Whether a view's page matches is
``core.conversions.Match.hits_view``, the one rule a goal's or a funnel's page step is judged by.
Pure functions: the import (``run``) applies what ``events_of`` returns.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ...core.conversions import Match
from ...core.events import check_event_name
from ...errors import InvalidInput

EVENT_FIELDS = ("ts", "ip", "session_id", "site")
"""What an event made of a page view takes from the view's dict (the rest is the view's own)."""


@dataclass(frozen=True)
class EventRule:
    """Views whose page ``match`` hits also count as the event ``name``."""

    match: Match
    name: str

    def __str__(self) -> str:
        star = "*" if self.match.page_match == "prefix" else ""
        return f"{self.match.page}{star}={self.name}"


def parse_rule(spec: str) -> EventRule:
    """``PATH=NAME`` as a rule (InvalidInput for one that is not: no ``=``, an empty path or a
    path not starting with ``/``, a name the event caps refuse). The last ``=`` splits it, so a
    path may hold one (``/a=b=name``)."""
    path, sep, name = spec.rpartition("=")
    if not sep or not path:
        raise InvalidInput(f"--event takes PATH=NAME (PATH exact, or a prefix ending with *), got {spec!r}")
    prefix = path.endswith("*")
    page = path[:-1] if prefix else path
    if not page.startswith("/") or "*" in page:
        raise InvalidInput(f"--event's PATH is a page (/...), its only * a last one, got {path!r}")
    check_event_name(name)
    return EventRule(Match(page=page, page_match="prefix" if prefix else "exact"), name)


def parse_rules(specs: Iterable[str]) -> tuple[EventRule, ...]:
    """Every ``--event`` given, checked before anything is read or written."""
    return tuple(parse_rule(spec) for spec in specs)


def events_of(visit: dict[str, Any], rules: tuple[EventRule, ...]) -> list[dict[str, Any]]:
    """The events a view dict (a line's, as the import applies it) counts as: one a rule its page
    matches, as ``counters_tasks.track_event``'s fields, with the view's time, address, session
    id and site."""
    path = visit["path"]
    found = []
    for rule in rules:
        if rule.match.hits_view(path):
            event = {"name": rule.name}
            event.update((key, visit[key]) for key in EVENT_FIELDS if visit.get(key) is not None)
            found.append(event)
    return found
