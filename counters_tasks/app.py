"""The Celery app: ``celery -A counters_tasks worker`` (or ``counters_tasks.app:app``)."""

from __future__ import annotations

from celery import Celery, signals

app = Celery("counters_tasks", include=["counters_tasks.tasks"])
app.config_from_object("celeryconfig")


@signals.worker_init.connect
def _refuse_to_start_without_secret(**_: object) -> None:
    """A worker never starts without COUNTERS_SECRET (visitor ids are an HMAC under it)."""
    from .errors import ConfigurationError
    from .settings import get_settings


    try:
        settings = get_settings()
        if not settings.secret:
            raise ConfigurationError("COUNTERS_SECRET is not set: workers refuse to start without it")
    except ConfigurationError as exc:
        # Celery logs and swallows exceptions from signal handlers; SystemExit stops the worker.
        raise SystemExit(f"counters-tasks: {exc}") from exc
