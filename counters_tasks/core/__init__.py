"""The foundation: settings from the environment, input checks, what "a day" is, and how task
arguments are shown without raw visitor IPs.

- ``settings``: every setting, read from the environment once and checked;
- ``validation``: input checks and bounds (names, IPs, times, message ids);
- ``days``: local days, their boundaries and retention;
- ``privacy``: the text form of task arguments (Flower, task events) with IP addresses masked.

Modules here import nothing of the package but ``counters_tasks.errors`` (and each other:
``days`` uses ``settings`` and ``validation``). Every other layer builds on them.
"""
