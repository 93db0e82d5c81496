"""The task bases: the delivery rules every counting task follows, the beat jobs' base, and the
base whose messages the worker applies in batches (its consumer is ``worker.batch_consumer``).

- ``CountingTask`` with ``counting`` around its body: applied at most once per message
  (the message id goes down to the Lua calls), acknowledged only after it ran or was deliberately
  refused; bad input (InvalidInput) fails at once and is counted; a Redis error after which the
  write can succeed is retried with backoff and jitter for as long as it lasts; any other error
  is retried COUNTERS_MAX_ATTEMPTS times, then set aside in the dead letters.
- ``MaintenanceTask``: a beat job, one run at a time, bounded by a time limit.
- ``WorkerBatches``: a per-item task (``record_visit``, ``incr_ranking``) whose messages the
  worker buffers and applies in batches; its ``buffer_call`` lets the app side buffer a plain
  ``.delay()`` (``recorder.buffer_delay``, in the subclass ``tasks.DelayBuffered``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from celery import Task
from celery.exceptions import Retry
from celery.utils.nodenames import gethostname
from celery.utils.time import get_exponential_backoff_interval
from kombu.utils.uuid import uuid

from .. import refusals
from ..core.settings import RETRY_BACKOFF_MAX, get_settings
from ..errors import ConfigurationError, InvalidInput, SetAside
from ..store.client import get_redis, is_transient
from . import dead_letters
from .batch_consumer import Batcher, MaskedRequest, SimpleRequest


class CountingTask(Task):
    """Applied at most once per message; acknowledged only after it ran or was deliberately
    refused. Bad input (InvalidInput) fails at once, without retry; a Redis error after which the
    write can succeed (Redis away, BUSY, READONLY, OOM, LOADING, a failover) is retried with
    backoff for as long as it lasts; any other error is retried COUNTERS_MAX_ATTEMPTS times,
    then the message is set aside (dead-lettered), never dropped. Its task events show its
    arguments with IP addresses masked (``MaskedRequest``)."""

    Request = MaskedRequest
    acks_late = True
    reject_on_worker_lost = True
    max_retries = None  # retries are bounded by ``counting`` (never for Redis being away)
    throws = (InvalidInput, SetAside)  # expected failures: logged without a traceback
    ignore_result = True

    @property
    def message_id(self) -> str | None:
        return self.request.id

    def apply(self, *args: Any, **options: Any) -> Any:
        """Celery's eager run, raising a ConfigurationError (``eager_result``)."""
        return eager_result(super().apply(*args, **options))

    def set_aside(self, exc: BaseException, attempts: int) -> None:
        """Keep this call in the dead letters (it is then acknowledged, not lost)."""
        dead_letters.set_aside_call(
            self.name,
            self.request.id,
            list(self.request.args or ()),
            dict(self.request.kwargs or {}),
            (self.request.delivery_info or {}).get("routing_key"),
            exc,
            attempts,
        )


def counting(body: Callable[..., Any]) -> Callable[..., Any]:
    """The delivery rules of a counting task, around its body (the way Celery's own autoretry
    wraps ``run``): bad input is counted and fails at once; a Redis error that passes is retried
    with backoff for as long as it lasts; any other error is retried COUNTERS_MAX_ATTEMPTS times,
    then the call is set aside in the dead letters and its message acknowledged, reported
    failed (``SetAside``)."""

    @functools.wraps(body)
    def run(self: CountingTask, *args: Any, **kwargs: Any) -> Any:
        try:
            return body(self, *args, **kwargs)
        except InvalidInput as refused:  # the whole message (a batch counts its refused items itself)
            refusals.count_refused(get_redis(), self.name, self.message_id, [(None, refused)])
            raise
        except Retry:
            raise
        except Exception as exc:
            if self.request.is_eager or self.request.called_directly:
                raise
            attempt = self.request.retries + 1
            if not is_transient(exc) and attempt >= get_settings().max_attempts:
                self.set_aside(exc, attempt)
                raise SetAside(attempt, exc) from exc  # acknowledged (acks_late acks a failure), reported failed
            countdown = get_exponential_backoff_interval(1, self.request.retries, RETRY_BACKOFF_MAX, full_jitter=True)
            raise self.retry(exc=exc, countdown=countdown) from exc

    return run


def set_aside_request(task: str, request: Any, exc: BaseException) -> None:
    """Keep a message of a worker-side batch (of the task named ``task``) that kept failing in the
    dead letters."""
    dead_letters.set_aside_call(
        task,
        request.id,
        list(request.args or ()),
        dict(request.kwargs or {}),
        (request.delivery_info or {}).get("routing_key"),
        exc,
        get_settings().max_attempts,
    )


class MaintenanceTask(Task):
    """A beat job: one run at a time (Redis lock), bounded by a time limit."""

    acks_late = False
    autoretry_for = ()
    ignore_result = True
    soft_time_limit = 240
    time_limit = 270
    lock_seconds = 300


class WorkerBatches(Task):
    """Base of a task whose messages the worker applies in batches: its function takes a list of
    ``SimpleRequest`` (one per message; called as ``task.delay(*args)`` with the message's own
    arguments) and may return ``{FAILED: {position: why}}`` for messages it did not apply."""

    abstract = True
    typing = False  # called with a message's arguments, run with a list of requests
    acks_late = True
    reject_on_worker_lost = True
    ignore_result = True
    Request = MaskedRequest

    buffer_call: Callable[[Any, Any, Any, dict[str, Any]], Any] | None = None
    """Offered every ``apply_async`` call first when set (``recorder.buffer_delay``, by the app
    side's subclass ``tasks.DelayBuffered``): it returns the call's AsyncResult when it buffered
    it (``COUNTERS_DELAY_BUFFER``), None when the call is to be published as its own message."""

    def apply_async(self, args: Any = None, kwargs: Any = None, *rest: Any, **options: Any) -> Any:
        """Celery's, unless ``buffer_call`` takes the call (a plain ``.delay()`` when buffering is on)."""
        if self.buffer_call is not None and not rest:
            result = self.buffer_call(self, args, kwargs, options)
            if result is not None:
                return result
        return super().apply_async(args, kwargs, *rest, **options)

    @property
    def flush_every(self) -> int:
        return get_settings().worker_batch

    @property
    def flush_interval(self) -> float:
        return get_settings().worker_batch_ms / 1000

    def Strategy(self, task: WorkerBatches, app: Any, consumer: Any) -> Any:  # noqa: N802  (Celery's name)
        """Celery asks for it each time the consumer (re)connects: a new buffer for the new
        connection, the old one retired."""
        previous = getattr(self, "_batcher", None)
        if previous is not None:
            previous.retire()
        self._batcher = Batcher(task, app, consumer)
        return self._batcher.on_message

    def apply(self, args: Any = None, kwargs: Any = None, *rest: Any, **options: Any) -> Any:
        """Run at once, in this process, on a batch of this one message (eager mode)."""
        request = SimpleRequest(
            id=options.get("task_id") or uuid(),
            name=self.name,
            args=args or (),
            kwargs=kwargs or {},
            delivery_info={
                "is_eager": True,
                "exchange": options.get("exchange"),
                "routing_key": options.get("routing_key"),
                "priority": options.get("priority"),
            },
            hostname=gethostname(),
        )
        return eager_result(super().apply(([request],), {}, *rest, **options))


def eager_result(result: Any) -> Any:
    """The result of a task run eagerly (an app's tests: ``task_always_eager``), raising the
    ConfigurationError it failed with (COUNTERS_SECRET missing, a malformed setting) whatever
    ``task_eager_propagates`` says: a worker would refuse to start, and kept in the result the
    test would read zeros with the cause only in a log. Bad input stays Celery's to propagate
    or keep (a worker refuses it and goes on)."""
    if isinstance(result.result, ConfigurationError):
        raise result.result
    return result
