"""counters-tasks: Celery tasks that keep website analytics counters in Redis.

The package, by layer (each imports only the layers listed before it):

- ``errors`` and ``core/``: exceptions, settings from the environment, input checks, local days;
- ``store/``: the Redis client and pool, Lua scripts (``store/lua/``), the key schema;
- the data modules: ``counters``, ``sitestats``, ``uniques``, ``ranking``, ``live`` (visitors
  right now), and ``visits`` (what one page view counts, in all of them); ``refusals`` and ``throughput`` (what was refused, and
  applied, counted in Redis for the health report and the metrics);
- ``worker/``: the Celery side: the package's Celery defaults, worker-side batches, the broker
  transport, the beat jobs' lock and records;
- ``app`` (the Celery app), ``tasks`` (the Celery tasks) and ``recorder`` (``VisitRecorder``, the
  app-side batching producer);
- ``integrations/``: drop-in WSGI, ASGI and Django middleware that record each page view
  through one ``VisitRecorder`` per process (no web framework is a dependency);
- ``local/``: local processes: a private Redis server, a test cluster, the ``make run`` stack;
- ``ops/``: operator tools: the ``counters-tasks`` CLI, the web dashboard, health, Prometheus
  metrics, the demo.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from .app import app  # ``celery -A counters_tasks`` finds it here
from .errors import ConfigurationError, CountersError, InvalidInput
from .recorder import VisitRecorder

try:
    __version__ = version("counters-tasks")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["app", "ConfigurationError", "CountersError", "InvalidInput", "VisitRecorder", "__version__"]
