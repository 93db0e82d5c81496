"""Goals and funnels as defined (issue 43): what a page view or an event must be to count as a
goal's conversion or a funnel's step. The one rule both routes call (``Match.hits_view`` for a
page view, ``Match.hits_event`` for an event), tested once on every route: a worker applying
visits and one applying events judge with the same functions, so a site never gets two answers.

A ``Match`` is either a page (``page`` with ``page_match``: ``exact``, ``prefix`` or
``pattern``, where ``*`` is any run of characters but ``/`` and ``**`` any run at all) or an
event (``event``, its name), optionally with a property's value (``prop`` = ``value``: an
event's property; a page view has none, so a page match takes no property).

Definitions are stored in Redis (``events.definitions``) as the JSON ``to_json`` gives and read
back by ``from_json``; ``since`` is the time from which a definition counts (events before it are
not judged: a funnel defined after the events happened says so).
"""

from __future__ import annotations

import functools
import re
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import InvalidInput
from .events import Props, check_event_name
from .paths import canonical_path
from .validation import check_text

PAGE_MATCHES = ("exact", "prefix", "pattern")
"""How a page step or goal compares a view's path."""

MIN_STEPS, MAX_STEPS = 2, 8
"""A funnel's number of steps."""

MIN_WINDOW, MAX_WINDOW = 60, 90 * 86400
"""A conversion window, in seconds: a minute to 90 days."""

MAX_DEFINITION_NAME = 100
"""Longest goal or funnel name."""

MAX_DEFINITIONS = 100
"""Most goals, and most funnels, a site may have: each is judged against every view and event."""


@dataclass(frozen=True)
class Match:
    """What a goal or a funnel step matches: a page or an event, optionally with a property value."""

    page: str | None = None
    page_match: str = "exact"
    event: str | None = None
    prop: str | None = None
    value: str | None = None

    def __post_init__(self) -> None:
        if (self.page is None) == (self.event is None):
            raise InvalidInput("a goal or step names either a page or an event")
        if self.page_match not in PAGE_MATCHES:
            raise InvalidInput(f"page match must be one of {', '.join(PAGE_MATCHES)}")
        if self.page is not None:
            check_text(self.page, "page")
            if self.prop is not None:
                raise InvalidInput("a page view has no properties: a property filter needs an event")
        else:
            check_event_name(self.event)
        if (self.prop is None) != (self.value is None):
            raise InvalidInput("a property filter needs both prop and value")
        if self.prop is not None:
            check_text(self.prop, "prop")
            check_text(self.value, "value")

    def hits_view(self, path: str) -> bool:
        """Whether a page view of ``path`` (its canonical name) matches."""
        if self.page is None:
            return False
        if self.page_match == "exact":
            return path == _page_name(self.page)
        if self.page_match == "prefix":
            return path.startswith(_page_name(self.page))
        return _pattern(self.page).fullmatch(path) is not None

    def hits_event(self, name: str, props: Props) -> bool:
        """Whether an event named ``name`` with ``props`` (as kept: ``core.events.check_props``) matches."""
        if self.event is None or name != self.event:
            return False
        return self.prop is None or (self.prop, self.value) in props

    def label(self) -> str:
        """How tables show it: ``page /a``, ``page /blog/*`` (pattern), ``event signup[plan=pro]``."""
        if self.page is not None:
            text = f"page {self.page}" + ("" if self.page_match == "exact" else f" ({self.page_match})")
        else:
            text = f"event {self.event}"
        return text + ("" if self.prop is None else f"[{self.prop}={self.value}]")


@functools.lru_cache(maxsize=1024)
def _page_name(page: str) -> str:
    return canonical_path(page)


@functools.lru_cache(maxsize=1024)
def _pattern(page: str) -> re.Pattern[str]:
    parts = re.split(r"(\*\*|\*)", _page_name(page))
    regex = "".join(".*" if p == "**" else "[^/]*" if p == "*" else re.escape(p) for p in parts)
    return re.compile(regex)


@dataclass(frozen=True)
class Goal:
    """A goal: ``match`` counted as conversions (each view or event), unique converters (a
    visitor once a goal a day, and once over a range), and, when ``revenue`` names a numeric
    property of the event, that property summed. Counts from ``since`` (epoch seconds)."""

    name: str
    match: Match
    revenue: str | None = None
    site: str = ""
    since: float = 0.0

    def __post_init__(self) -> None:
        check_text(self.name, "goal name", MAX_DEFINITION_NAME)
        if self.revenue is not None:
            check_text(self.revenue, "revenue property")
            if self.match.event is None:
                raise InvalidInput("revenue is an event's numeric property: a page goal has none")


@dataclass(frozen=True)
class Step:
    """A funnel's step: its match, and its own window from the step before (seconds; None: only
    the funnel's window applies)."""

    match: Match
    window: int | None = None

    def __post_init__(self) -> None:
        if self.window is not None:
            check_window(self.window)


@dataclass(frozen=True)
class Funnel:
    """A funnel: 2-8 ordered steps and a conversion window (seconds, from entering the funnel to
    its last step). Counts from ``since`` (epoch seconds)."""

    name: str
    steps: tuple[Step, ...]
    window: int
    site: str = ""
    since: float = 0.0

    def __post_init__(self) -> None:
        check_text(self.name, "funnel name", MAX_DEFINITION_NAME)
        if not MIN_STEPS <= len(self.steps) <= MAX_STEPS:
            raise InvalidInput(f"a funnel has {MIN_STEPS} to {MAX_STEPS} steps, got {len(self.steps)}")
        check_window(self.window)


def check_window(value: Any) -> int:
    """A conversion window in seconds (InvalidInput outside a minute to 90 days)."""
    if isinstance(value, bool) or not isinstance(value, int) or not MIN_WINDOW <= value <= MAX_WINDOW:
        raise InvalidInput(f"a window is whole seconds from {MIN_WINDOW} to {MAX_WINDOW}, got {value!r}")
    return value


_DURATION = re.compile(r"^(\d+)([smhd]?)$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_window(text: str) -> int:
    """``30m``, ``2h``, ``7d``, ``90s`` or plain seconds, as seconds (InvalidInput otherwise)."""
    found = _DURATION.match(text.strip()) if isinstance(text, str) else None
    if found is None:
        raise InvalidInput(f"a window is a number with s, m, h or d (30m, 7d), got {text!r}")
    return check_window(int(found.group(1)) * _UNITS[found.group(2)])


def match_of(data: dict[str, Any]) -> Match:
    """A ``Match`` from its dict (``page``/``match`` or ``event``, ``prop``, ``value``), InvalidInput when wrong."""
    if not isinstance(data, dict):
        raise InvalidInput("a step or goal is a dict")
    unknown = set(data) - {"page", "match", "event", "prop", "value", "window", "revenue"}
    if unknown:
        raise InvalidInput(f"unknown keys: {', '.join(sorted(unknown))}")
    return Match(data.get("page"), data.get("match", "exact"), data.get("event"), data.get("prop"), data.get("value"))


def to_json(definition: Goal | Funnel) -> dict[str, Any]:
    """A definition as the JSON it is stored as (``from_json`` reads it back)."""
    return asdict(definition)


def goal_from_json(data: dict[str, Any]) -> Goal:
    """A goal from ``to_json``'s dict."""
    return Goal(data["name"], Match(**data["match"]), data.get("revenue"), data.get("site", ""), data.get("since", 0.0))


def funnel_from_json(data: dict[str, Any]) -> Funnel:
    """A funnel from ``to_json``'s dict."""
    steps = tuple(Step(Match(**step["match"]), step.get("window")) for step in data["steps"])
    return Funnel(data["name"], steps, data["window"], data.get("site", ""), data.get("since", 0.0))
