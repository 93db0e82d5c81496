"""The modules of the package's data and worker layers that declare a stored table (``core.table``),
imported here so that what walks every table from below the operator tools (the retention pass,
``worker.retention``; forgetting a visitor, ``worker.forget``) sees them all, with any table an
app's module registered. The operator tools' own tables (``ops``) hold nothing of a visitor and
nothing by day; ``ops.tables`` lists them after these."""

from __future__ import annotations

import importlib

from ..core import table

DATA_TABLE_MODULES = (
    "counters_tasks.store.deployment",
    "counters_tasks.store.tombstones",
    "counters_tasks.payloads",
    "counters_tasks.counters",
    "counters_tasks.sitestats",
    "counters_tasks.events",
    "counters_tasks.live",
    "counters_tasks.uniques",
    "counters_tasks.ranking",
    "counters_tasks.refusals",
    "counters_tasks.skips",
    "counters_tasks.throughput",
    "counters_tasks.worker.claims",
    "counters_tasks.worker.maintenance",
    "counters_tasks.worker.dead_letters",
    "counters_tasks.worker.forget",
    "counters_tasks.sitestats.erase",
    "counters_tasks.events.erase",
    "counters_tasks.worker.retention",
)
"""The modules below ``ops`` that declare the package's tables (each registers its own at import)."""


def data_tables() -> list[table.Table]:
    """Every table registered once ``DATA_TABLE_MODULES`` are imported (an app's too, when its
    module was imported), in the order they were."""
    for name in DATA_TABLE_MODULES:
        importlib.import_module(name)
    return table.registered()
