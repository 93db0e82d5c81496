"""Events with properties, goals and funnels (issue 43; docs/events.md): one module a stored
table, each with its declaration (``core.table``), its keys, its part of a write and its reads.

- ``definitions``: the goals and funnels defined (the rules of what matches: ``core.conversions``);
- ``report``: what the reads return (``EventReport``, ``GoalReport``, ``FunnelReport``);
- ``kind``: the event kind (``EVENT``: ``prepare_event``, ``app_event``, its write);
- ``event_day``: what a site's events count on a local day (its table, its write and reads);
- ``funnel_steps``: the table ``funnel``, fed by page views and events (each a step event of the
  steps it matches), and its read ``funnel_report``.
- ``goal_day``: each goal's conversions, converters and revenue of a day, fed by visits and
  events, and their read (``goal_report``);
- ``erase``: one visitor forgotten from the events' and the goals' day tables (their
  ``Erasure.forget``, installed in the slots they declare; ``worker.forget`` calls them).

What an event is (its caps) is ``core.events``. Modules here import ``core``, ``store`` and the
data modules of their own layer they write through (``counters``, ``payloads``, ``throughput``,
``refusals``) or read (``sitestats``: a range's unique visitors, a goal's rate), never the
worker's side, the tasks or the recorder (the layers: docs/architecture.md).
"""

from . import event_day, kind
from .definitions import define_funnel, define_goal, funnels, goals, remove_funnel, remove_goal
from .event_day import event_counter, event_report
from .funnel_steps import funnel_report
from .goal_day import GOAL_DAY, goal_report
from .report import EventReport, EventRow, FunnelReport, FunnelStep, GoalReport, GoalRow, ValueCount

__all__ = [
    "event_day",
    "kind",
    "EventReport",
    "EventRow",
    "FunnelReport",
    "FunnelStep",
    "GOAL_DAY",
    "GoalReport",
    "GoalRow",
    "ValueCount",
    "define_funnel",
    "event_counter",
    "event_report",
    "define_goal",
    "funnel_report",
    "funnels",
    "goal_report",
    "goals",
    "remove_funnel",
    "remove_goal",
]
