"""counters-tasks: Celery tasks that keep website analytics counters in Redis.

What apps import from here: ``app`` (the Celery app, made on first use), ``VisitRecorder``
and the errors. Importing the package, or any module of it, loads no part of Celery's worker
side (a web process that only counts through the middleware runs none of it). The package's
rooms and layers: docs/architecture.md.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from . import app as app_module
from .errors import ConfigurationError, CountersError, InvalidInput
from .recorder import VisitRecorder

# importing the submodule bound its name here; ``counters_tasks.app`` is the Celery app instead
# (``__getattr__``), made on first use
del globals()["app"]

try:
    __version__ = version("counters-tasks")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"


def __getattr__(name: str) -> Any:
    """``app``: the package's Celery app (``celery -A counters_tasks`` finds it here), made when
    first asked for, so importing the package (a web process's middleware, ``store``) loads no
    part of Celery's worker side; ``forget_visitor``: ``worker.forget.forget_visitor``, loaded
    when first asked for too."""
    if name == "app":
        return app_module.package_app()
    if name == "forget_visitor":  # (the worker layer's, loaded when first asked for)
        return importlib.import_module(".worker.forget", __name__).forget_visitor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "app",
    "forget_visitor",
    "ConfigurationError",
    "CountersError",
    "InvalidInput",
    "VisitRecorder",
    "__version__",
]
