"""counters-tasks: Celery tasks that keep website analytics counters in Redis."""

from __future__ import annotations

__version__ = "0.1.0"

from .app import app  # noqa: E402  (``celery -A counters_tasks`` finds it here)
from .errors import ConfigurationError, CountersError, InvalidInput  # noqa: E402

__all__ = ["app", "ConfigurationError", "CountersError", "InvalidInput", "VisitRecorder", "__version__"]


def __getattr__(name: str):
    if name == "VisitRecorder":  # imported on first use: it registers fork and exit hooks
        from .recorder import VisitRecorder

        return VisitRecorder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
