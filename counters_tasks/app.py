"""The Celery app: ``celery -A counters_tasks worker`` (or ``counters_tasks.app:app``).

Its configuration is the package's own defaults (``counters_tasks.worker.celery_defaults``),
never a module that happens to be called ``celeryconfig`` on the path: an app of your own
with such a module keeps the package's broker, routes and serializer. A deployment names its
configuration module explicitly (``celery -A counters_tasks --config celeryconfig worker``,
which sets ``CELERY_CONFIG_MODULE``); such a module starts from the package's defaults
(``from counters_tasks.worker.celery_defaults import *``) and changes what it needs.

Every task message this app sends shows its arguments with IP addresses masked (``MaskingAMQP``):
``.delay()``, ``apply_async``, ``send_task``, retries and dead-letter requeues alike; and it
carries the time it was sent (``SENT_AT_HEADER``): how old a waiting item is when the call gave
no ``ts`` (the metrics' lag).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

import redis
from celery import Celery, signals
from celery.app.amqp import AMQP
from redis.exceptions import RedisError

from .core.privacy import masked_reprs
from .core.settings import get_settings, is_redis_url, redis_py_url
from .errors import ConfigurationError
from .store import deployment, server
from .store.client import RedisClient, get_redis

log = logging.getLogger(__name__)
PACKAGE_DEFAULTS = "counters_tasks.worker.celery_defaults"
SENT_AT_HEADER = "ct_sent_at"
"""Message header: when the producer made the message (epoch seconds, its clock). Read only for
the lag of a waiting message that carries no ``ts``; never as an item time."""


class MaskingAMQP(AMQP):
    """Celery's message maker, with the arguments' text form (``argsrepr`` / ``kwargsrepr``: the
    message headers, the ``task-sent`` and ``task-received`` items, Flower) made by
    ``core.privacy`` with IP addresses masked, unless the caller gave its own; and the time it
    was made in ``SENT_AT_HEADER``."""

    ARGSREPR_POSITION = 21  # of ``as_task_v2``'s arguments after ``kwargs``; given by keyword in practice

    def as_task_v2(
        self, task_id: str, name: str, args: Any = None, kwargs: Any = None, *rest: Any, **options: Any
    ) -> Any:
        if len(rest) <= self.ARGSREPR_POSITION and options.get("argsrepr") is None:
            shown_args, shown_kwargs = masked_reprs(args or (), kwargs or {})
            options["argsrepr"] = shown_args
            if options.get("kwargsrepr") is None:
                options["kwargsrepr"] = shown_kwargs
        message = super().as_task_v2(task_id, name, args, kwargs, *rest, **options)
        message.headers.setdefault(SENT_AT_HEADER, time.time())
        return message


_made: list[Celery] = []
_making = threading.Lock()


def package_app() -> Celery:
    """The package's Celery app (``app``), made on first use: creating a Celery app loads parts of
    Celery's worker side, which a web process that only counts through the middleware and
    ``VisitRecorder`` then loads when it first sends, not when it imports the package."""
    if not _made:
        with _making:
            if not _made:
                made = Celery("counters_tasks", include=["counters_tasks.tasks"], amqp="counters_tasks.app:MaskingAMQP")
                made.on_configure.connect(choose_configuration, weak=False)
                _made.append(made)
    return _made[0]


def choose_configuration(sender: Celery, **_: Any) -> None:
    """When the configuration is first needed: the deployment's module, or the package's defaults."""
    sender.config_from_object(get_settings().celery_config_module or PACKAGE_DEFAULTS)


def configuration_source() -> str:
    """Which Celery configuration this process loads: the module ``celery --config`` named
    (``CELERY_CONFIG_MODULE``) or the package's defaults, with the file it was read from once
    imported (a ``celeryconfig`` is whichever one the path finds first: this says which)."""
    name = get_settings().celery_config_module or PACKAGE_DEFAULTS
    where = getattr(sys.modules.get(name), "__file__", None)
    return f"{name} ({where})" if where else name


def __getattr__(name: str) -> Any:
    """``app``: the package's Celery app (``package_app``; ``counters_tasks.app:app``)."""
    if name == "app":
        return package_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


@signals.worker_init.connect
def _refuse_servers_too_old(**_: object) -> None:
    """A worker never runs on a Redis older than ``store.server.MIN_VERSION`` (the counters'
    Redis, and the broker when it is a Redis): it exits naming both versions, before it takes
    a message (on 6.0 it died on BLMOVE naming none). A server that is away now is not a
    refusal: the tasks wait for it."""
    _check_servers(log_problems=False)


@signals.celeryd_after_setup.connect
def _log_server_problems(**_: object) -> None:
    """An evicting memory policy: ERROR in the worker's log (WARNING with COUNTERS_ALLOW_EVICTION),
    once its logging is set up; and which configuration the worker loaded."""
    log.info("counters-tasks: Celery configuration %s", configuration_source())
    _check_servers(log_problems=True)


@signals.beat_init.connect
def _check_servers_for_beat(**_: object) -> None:
    """Beat: both checks (its logging is set up by then), and which configuration it loaded."""
    log.info("counters-tasks: Celery configuration %s", configuration_source())
    _check_servers(log_problems=True)


def _check_servers(log_problems: bool) -> None:
    _check_server(get_redis(), "the counters' Redis", log_problems)
    broker_url = get_settings().broker_url
    if is_redis_url(broker_url):
        broker = redis.Redis.from_url(redis_py_url(broker_url), socket_timeout=5, socket_connect_timeout=5)
        try:
            _check_server(broker, "the broker's Redis", log_problems)
        finally:
            broker.close()


def _check_server(conn: RedisClient, role: str, log_problems: bool) -> None:
    try:
        errors, warnings = server.start_check(conn, role)
    except server.ServerTooOld as exc:
        raise SystemExit(f"counters-tasks: {exc}") from exc
    except RedisError as exc:
        log.warning("counters-tasks: %s could not be checked at start (%s)", role, exc)
        return
    if log_problems:
        for line in errors:
            log.error("counters-tasks: %s", line)
        for line in warnings:
            log.warning("counters-tasks: %s", line)


@signals.worker_init.connect
def _refuse_to_start_on_another_layout(**_: object) -> None:
    """A worker never writes a key layout other than Redis's (``store.deployment``): it checks
    the deployment's marker (making it in a new deployment) before taking any message. A Redis
    that is away now is not a refusal: the tasks wait for it, and check on their first write."""
    try:
        deployment.ensure(get_redis())
    except deployment.DeploymentMismatch as exc:
        raise SystemExit(f"counters-tasks: {exc}") from exc
    except RedisError as exc:
        log.warning(
            "counters-tasks: the deployment's marker could not be checked at start (%s); the first write checks it", exc
        )
