"""Events with properties, goals and funnels (issue 43; docs/events.md): one module a stored
table, each with its declaration (``core.table``), its keys, its part of a write and its reads.

- ``definitions``: the goals and funnels defined (the rules of what matches: ``core.conversions``);
- ``report``: what the reads return (``EventReport``, ``GoalReport``, ``FunnelReport``);
- ``kind``: the event kind (``EVENT``: ``prepare_event``, ``app_event``, its write);
- ``event_day``: what a site's events count on a local day (its table, its write and reads).

What an event is (its caps) is ``core.events``. Modules here import ``core``, ``store`` and the
data modules of their own layer they write through (``counters``, ``payloads``, ``throughput``),
never the worker's side, the tasks or the recorder (the layers: docs/architecture.md).
"""

from . import event_day, kind
from .definitions import define_funnel, define_goal, funnels, goals, remove_funnel, remove_goal
from .event_day import event_counter, event_report
from .report import EventReport, EventRow, FunnelReport, FunnelStep, GoalReport, GoalRow, ValueCount

__all__ = [
    "event_day",
    "kind",
    "EventReport",
    "EventRow",
    "FunnelReport",
    "FunnelStep",
    "GoalReport",
    "GoalRow",
    "ValueCount",
    "define_funnel",
    "event_counter",
    "event_report",
    "define_goal",
    "funnels",
    "goals",
    "remove_funnel",
    "remove_goal",
]
