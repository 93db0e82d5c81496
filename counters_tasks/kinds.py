"""The kinds of things the package counts, one declaration each (``core.kind.Kind``), declared
beside the code that writes them and listed here: import this module to know them all (the
worker, the recorder and the metrics do). docs/architecture.md "Adding a kind" says how a new
kind (an app's own, or the package's next one) is declared, given its tasks and counted.
"""

from __future__ import annotations

from .core.kind import Kind, by_task
from .counters import COUNTER_UPDATE
from .events.kind import EVENT
from .ranking_bumps import RANKING
from .skips import SKIPS
from .uniques import UNIQUE
from .visits import VISIT

PACKAGE_KINDS: tuple[Kind, ...] = (VISIT, RANKING, COUNTER_UPDATE, UNIQUE, SKIPS, EVENT)
"""Every kind the package itself declares (an app may register more: ``core.kind.register``)."""


def of_task(task: str) -> Kind | None:
    """The kind whose per-item or payload task is named ``task``: the package's kinds (declared by
    importing this module) and any an app registered."""
    return by_task(task)


__all__ = ["of_task", "COUNTER_UPDATE", "EVENT", "PACKAGE_KINDS", "RANKING", "SKIPS", "UNIQUE", "VISIT"]
