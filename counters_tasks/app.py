"""The Celery app: ``celery -A counters_tasks worker`` (or ``counters_tasks.app:app``).

Its configuration is the package's own defaults (``counters_tasks.worker.celery_defaults``),
never a module that happens to be called ``celeryconfig`` on the path: an app of your own
with such a module keeps the package's broker, routes and serializer. A deployment names its
configuration module explicitly (``celery -A counters_tasks --config celeryconfig worker``,
which sets ``CELERY_CONFIG_MODULE``); such a module starts from the package's defaults
(``from counters_tasks.worker.celery_defaults import *``) and changes what it needs.
"""

from __future__ import annotations

from typing import Any

from celery import Celery, signals

from .core.settings import get_settings
from .errors import ConfigurationError

PACKAGE_DEFAULTS = "counters_tasks.worker.celery_defaults"

app = Celery("counters_tasks", include=["counters_tasks.tasks"])


@app.on_configure.connect
def _choose_configuration(sender: Celery, **_: Any) -> None:
    """When the configuration is first needed: the deployment's module, or the package's defaults."""
    sender.config_from_object(get_settings().celery_config_module or PACKAGE_DEFAULTS)


@signals.worker_init.connect
def _refuse_to_start_without_secret(**_: object) -> None:
    """A worker never starts without COUNTERS_SECRET (visitor ids are an HMAC under it)."""
    try:
        settings = get_settings()
        if not settings.secret:
            raise ConfigurationError("COUNTERS_SECRET is not set: workers refuse to start without it")
    except ConfigurationError as exc:
        # Celery logs and swallows exceptions from signal handlers; SystemExit stops the worker.
        raise SystemExit(f"counters-tasks: {exc}") from exc
