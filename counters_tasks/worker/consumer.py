"""The worker's consumer: every task message is checked before Celery handles it, on any broker.

Celery's consumer hands a delivered message to the task's strategy, which builds a request from
its headers and body. A message a foreign or broken producer made raises there, in the worker's
main loop: a body that is JSON but not ``[args, kwargs, embed]`` (``ValueError: not enough values
to unpack``) or a message without an ``id`` header made the main process exit, and the messages
behind it waited; a body that is not JSON was logged whole (CRITICAL "Can't decode message
body", with whatever IP it held) and acknowledged: lost without a count. The Redis transport
(``worker.broker``) checks each item it takes before kombu sees it; with any other broker
(RabbitMQ) this consumer does the same check (``dead_letters.task_problem``) on each message as
delivered, and a message of a task this worker does not know (Celery logged its body and
rejected it: dropped) is set aside too (``unknown_task``), whatever the broker. A message set
aside is kept in the dead letters with its reason (counted; in the counters' Redis with its IPs
masked when the broker is not a Redis), then acknowledged; the worker goes on. Should the dead
letters be out of reach, the message is left unacknowledged (logged): the broker gives it back
when this worker's connection closes.

``worker.celery_defaults`` names this class as Celery's ``worker_consumer``; the hook is
``create_task_handler``, the method Celery's event loops call for the handler of every task
message (``celery.worker.loops``), and ``on_decode_error``, which Celery calls when a message's
body cannot be decoded.

At a warm shutdown, ``on_close`` keeps the jobs a pool process is already taking, which Celery
drops (``worker.prefork_pool_adapter``): the worker waits for them and acknowledges their
messages, instead of stopping 30 seconds late with them unacknowledged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from celery.worker.consumer import Consumer as CeleryConsumer

from ..core.privacy import masked_text
from . import dead_letters, prefork_pool_adapter
from .batch_consumer import shutting_down
from .broker import Channel as RedisChannel

log = logging.getLogger(__name__)


class Consumer(CeleryConsumer):
    """Celery's consumer, setting aside what its task handler would raise on or drop."""

    def create_task_handler(self, *args: Any, **kwargs: Any) -> Callable[[Any], Any]:
        """Celery's handler, behind a check of each message: one that cannot be a task of this
        worker is set aside (``set_aside``) instead of reaching it."""
        handle = super().create_task_handler(*args, **kwargs)
        strategies = self.strategies

        def on_task_received(message: Any) -> Any:
            if isinstance(message.channel, RedisChannel):  # checked by the transport as it took it
                reason = None
            else:
                reason = dead_letters.task_problem(dead_letters.delivered_message(message))
            if reason is None and message.headers.get("task") not in strategies:
                reason = "unknown_task"
            if reason is not None:
                return self.set_aside(message, reason)
            return handle(message)

        return on_task_received

    def on_close(self) -> None:
        """Celery's, but at a warm shutdown the jobs written to a pool process that it has not yet
        said it took stay in the pool's cache: that process runs them whatever Celery decides, and
        the pool's join must wait for their results (``worker.prefork_pool_adapter``). On a lost
        connection Celery's rule stands: the broker gives those messages back."""
        kept = prefork_pool_adapter.jobs_being_taken(self.pool) if shutting_down() else {}
        super().on_close()
        prefork_pool_adapter.keep_jobs(self.pool, kept)

    def on_decode_error(self, message: Any, exc: BaseException) -> None:
        """Celery logged the body and acknowledged the message: set it aside instead."""
        self.set_aside(message, "not_json")

    def set_aside(self, message: Any, reason: str) -> None:
        """Keep ``message`` in the dead letters, then acknowledge it; left unacknowledged when it
        cannot be kept."""
        try:
            dead_letters.set_aside_delivered(message, reason)
        except Exception as exc:  # noqa: BLE001  the dead letters' Redis away, or refusing the write
            log.error(
                "a message (%s) could not be set aside, left unacknowledged until this worker's connection closes: %s",
                reason,
                masked_text(f"{type(exc).__name__}: {exc}"[:500]),
            )
            return
        message.ack_log_error(log, self.connection_errors)
