"""Events with properties, goals and funnels (issue 43; docs/events.md): one module a stored
table, each with its declaration (``core.table``), its keys, its part of a write and its reads.

- ``definitions``: the goals and funnels defined (the rules of what matches: ``core.conversions``);
- ``report``: what the reads return (``EventReport``, ``GoalReport``, ``FunnelReport``);
- ``funnels``: the table ``funnel``, fed by page views and events, and its read ``funnel_report``.

What an event is (its caps) is ``core.events``; the kind's declaration and the tables follow.
"""

from . import definitions
from .definitions import define_funnel, define_goal, goals, remove_funnel, remove_goal
from .funnels import funnel_report
from .report import EventReport, EventRow, FunnelReport, FunnelStep, GoalReport, GoalRow, ValueCount

funnels = definitions.funnels
"""The funnels defined (``definitions.funnels``): bound after the submodule ``funnels`` is imported,
which would otherwise take the package's attribute of that name."""

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
    "funnel_report",
    "funnels",
    "goals",
    "remove_funnel",
    "remove_goal",
]
