"""Events with properties, goals and funnels (issue 43; docs/events.md): one module a stored
table, each with its declaration (``core.table``), its keys, its part of a write and its reads.

- ``definitions``: the goals and funnels defined (the rules of what matches: ``core.conversions``);
- ``goal_day``: each goal's conversions, converters and revenue of a day, fed by visits and
  events, and their read (``goal_report``);
- ``report``: what the reads return (``EventReport``, ``GoalReport``, ``FunnelReport``).

What an event is (its caps) is ``core.events``; the kind's declaration and the tables follow.
It imports ``core``, ``store`` and, beside it in layer 4, ``sitestats`` (a range's unique
visitors, a goal's rate) and ``refusals``; nothing above.
"""

from .definitions import define_funnel, define_goal, funnels, goals, remove_funnel, remove_goal
from .goal_day import GOAL_DAY, goal_report
from .report import EventReport, EventRow, FunnelReport, FunnelStep, GoalReport, GoalRow, ValueCount

__all__ = [
    "EventReport",
    "EventRow",
    "FunnelReport",
    "FunnelStep",
    "GOAL_DAY",
    "GoalReport",
    "GoalRow",
    "ValueCount",
    "define_funnel",
    "define_goal",
    "funnels",
    "goal_report",
    "goals",
    "remove_funnel",
    "remove_goal",
]
