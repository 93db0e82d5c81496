"""What an *event* is (an analytics event: a name and its properties, issue 43), the one rule
every route applies to it before anything is written: the task ``counters_tasks.track_event``,
``VisitRecorder.track_event``, the middleware's helper and the importer's path rule all call
``check_event_name`` and ``check_props``.

Caps (docs/events.md has them as a table):

- a name is a ``str`` of 1 to ``MAX_NAME`` characters without control characters or lone
  surrogates (``core.validation.check_text``), and not ``(none)`` or ``(other)`` (``RESERVED``),
  else InvalidInput;
- ``props`` is None or a dict whose keys are such texts of at most ``MAX_KEY`` characters and
  whose values are scalars: ``str`` (at most ``MAX_VALUE`` characters, no control character),
  ``int``, finite ``float`` or ``bool``, a text not one of ``RESERVED``; a ``None`` value is a property left out; anything else
  (a list, a dict, NaN, a key too long) refuses the event with InvalidInput;
- past the ``MAX_PROPS``-th property (in the order given) the rest are dropped, and counted
  (``Event.dropped``, shown where the event's figures are): never silently.

A property's value is kept as text (``prop_text``): ``true``/``false``, an int's digits, a
float's ``repr``; ``NONE`` names a property an event did not have, ``OTHER`` the values past a
day's cap.
"""

from __future__ import annotations

import math
from datetime import date
from typing import Any, NamedTuple

from ..errors import InvalidInput
from .validation import check_text

MAX_NAME = 100
"""Longest event name, in characters."""

MAX_PROPS = 30
"""Most properties an event keeps; those past it are dropped and counted."""

MAX_KEY = 100
"""Longest property key, in characters."""

MAX_VALUE = 500
"""Longest property value (text), in characters."""

NONE = "(none)"
"""The value shown for an event that did not have the property."""

OTHER = "(other)"
"""The value (or event name) standing for those past a day's cap, its counts shown."""

Props = tuple[tuple[str, str], ...]
"""An event's properties as kept: (key, value as text) pairs, in the order given."""


class Event(NamedTuple):
    """One event validated for writing (a worker's ``events.prepare_event``): its name, its
    properties as text (at most ``MAX_PROPS``), how many were dropped past the cap, its time, its
    local day in its site's zone, its site (``""`` the default one) and its visitor id
    (``core.visitors.visitor_id`` of its IP, as a visit's; with no IP, ``session_visitor_id`` of
    its session id; None when neither was given: counted, in no unique figure or funnel)."""

    name: str
    props: Props
    dropped: int
    ts: float
    day: date
    site: str
    visitor: str | None


RESERVED = frozenset((NONE, OTHER))
"""Texts the tables show for what no event sent (``(none)``, ``(other)``): refused as an event's
name or a property's value, which would otherwise be counted in those rows."""


def check_event_name(value: Any) -> str:
    """An event's name checked (InvalidInput): a text of at most ``MAX_NAME`` characters, not one
    of ``RESERVED``."""
    name = check_text(value, "event name", MAX_NAME)
    if name in RESERVED:
        raise InvalidInput(f"event name {name!r} is reserved (the tables' row of what no event sent)")
    return name


def prop_text(value: Any, key: str) -> str | None:
    """A property value as kept (text), None for a None value (the property left out);
    InvalidInput for anything that is not a scalar."""
    if value is None:
        return None
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInput(f"property {key!r} must be a finite number, got {value!r}")
        return repr(value)
    if isinstance(value, str):
        text = check_text(value, f"property {key!r}", MAX_VALUE)
        if text in RESERVED:
            raise InvalidInput(
                f"property {key!r}: the value {text!r} is reserved (the tables' row of what no event sent)"
            )
        return text
    raise InvalidInput(f"property {key!r} must be a str, int, float or bool, got {type(value).__name__}")


def _plain(value: Any, max_length: int) -> bool:
    """The common case, checked at once (every event's keys and values in the app and the worker):
    a non-empty ASCII ``str`` of at most ``max_length`` printable characters, which ``check_text``
    accepts as it is; anything else goes through the full checks."""
    return type(value) is str and 0 < len(value) <= max_length and value.isascii() and value.isprintable()


def check_props(props: Any) -> tuple[Props, int]:
    """An event's properties checked (InvalidInput when one is not allowed, nothing written):
    the kept (key, text) pairs, at most ``MAX_PROPS`` in the order given, and how many were
    dropped past the cap."""
    if props is None:
        return (), 0
    if not isinstance(props, dict):
        raise InvalidInput(f"props must be a dict or None, got {type(props).__name__}")
    kept: list[tuple[str, str]] = []
    dropped = 0
    for key, value in props.items():
        if not _plain(key, MAX_KEY):
            check_text(key, "property key", MAX_KEY)
        text = value if _plain(value, MAX_VALUE) and value not in RESERVED else prop_text(value, key)
        if text is None:
            continue
        if len(kept) < MAX_PROPS:
            kept.append((key, text))
        else:
            dropped += 1
    return tuple(kept), dropped


def number_of(text: str | None) -> float | None:
    """A property's text as a number (a goal's revenue), None when it is not one."""
    if text is None or text in ("true", "false"):
        return None
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None
