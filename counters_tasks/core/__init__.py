"""The foundation: settings from the environment, input checks, and what "a day" is.

Modules here import nothing of the package but ``counters_tasks.errors`` (and each other:
``days`` uses ``settings`` and ``validation``). Every other layer builds on them.
"""
