"""Events with properties, goals and funnels (issue 43; docs/events.md): one module a stored
table, each with its declaration (``core.table``), its keys, its part of a write and its reads.

- ``definitions``: the goals and funnels defined (the rules of what matches: ``core.conversions``);
- ``report``: what the reads return (``EventReport``, ``GoalReport``, ``FunnelReport``).

What an event is (its caps) is ``core.events``. Modules here import ``core``, ``store`` and the
other data modules of their layer (``sitestats`` for a range's visitors), nothing above.
"""

from .definitions import define_funnel, define_goal, funnels, goals, remove_funnel, remove_goal
from .report import EventReport, EventRow, FunnelReport, FunnelStep, GoalReport, GoalRow, ValueCount

__all__ = [
    "EventReport",
    "EventRow",
    "FunnelReport",
    "FunnelStep",
    "GoalReport",
    "GoalRow",
    "ValueCount",
    "define_funnel",
    "define_goal",
    "funnels",
    "goals",
    "remove_funnel",
    "remove_goal",
]
