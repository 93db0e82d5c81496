"""The Redis broker transport, made safe against a worker killed while it takes a message.

kombu's Redis transport takes messages with ``BRPOP``: the message leaves Redis when the server
sends the reply, and is recorded as unacknowledged (so that it can be restored after the
visibility timeout) only once the worker has read that reply. A worker killed (SIGKILL, OOM)
in between loses the message for good (celery/kombu#305, celery/celery#4354). Here a message is
taken by one Lua call that pops it and records it as unacknowledged at once (``broker_take``);
to wait for messages without taking any, the worker blocks on ``BLMOVE q q RIGHT RIGHT``, which
puts the message back where it was. A message the worker cannot decode, whose shape is wrong
or that is too large is set aside in the dead letters (``dead_letters``) instead of reaching
Celery, which would crash on it or restore it forever. Everything else (acks, restore sweeps,
publishing) is kombu's. ``worker.celery_defaults`` selects this transport for ``redis://`` and ``rediss://`` brokers.
"""

from __future__ import annotations

import logging
from time import monotonic
from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import loads

from ..core.settings import get_settings
from ..store import keys as store_keys
from ..store.scripts import lua_source
from . import dead_letters

log = logging.getLogger(__name__)


WAIT_SLICE = 0.02
"""Seconds one wait lasts when the worker consumes several queues. ``BLMOVE`` waits on one list,
so the worker waits on its queues in turn, and takes (from all of them) after every wait: a
message on any queue is noticed within one slice (kombu's ``BRPOP`` waits on all at once, but
takes the message before it is recorded, the loss this transport exists to prevent)."""


class Channel(kombu_redis.Channel):
    """Takes messages atomically (pop + record as unacknowledged), waits without taking."""

    _waiting = False  # the command in flight is the wait (BLMOVE), not the take
    _wait_turn = 0  # which queue the next wait is on
    _sync_client: Any = None  # the one client of the channel's pool (_create_client)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._no_ack_queues: set[str] = set()

    def _create_client(self, asynchronous: bool = False) -> Any:
        """kombu makes a new redis-py client for every publish (``conn_or_acquire``): its
        constructor alone was a fifth of a ``.delay()``'s cost. A client is its pool and its reply
        callbacks, safe to share between threads, so the channel keeps one per pool (a new one
        when kombu replaces the pool)."""
        if asynchronous:
            return super()._create_client(asynchronous=True)
        client = self._sync_client
        if client is None or client.connection_pool is not self.pool:
            client = self._sync_client = super()._create_client()
        return client

    def basic_consume(self, queue: str, no_ack: bool, *args: Any, **kwargs: Any) -> Any:
        """kombu's, remembering the queues consumed without acknowledgements: control replies
        (``celery inspect``, ``health``'s ping) and the worker's own control queue, not tasks."""
        (self._no_ack_queues.add if no_ack else self._no_ack_queues.discard)(queue)
        return super().basic_consume(queue, no_ack, *args, **kwargs)

    def _forget_unacked(self, tag: Any) -> None:
        """The take recorded a message of a queue consumed without acknowledgements: forget it
        (kombu's BRPOP path never records those), or the restore sweep would send it again and
        again after every visibility timeout."""
        if isinstance(tag, str):
            with self.conn_or_acquire() as client:
                client.pipeline().hdel(self.unacked_key, tag).zrem(self.unacked_index_key, tag).execute()

    def _queue_keys(self) -> list[str]:
        queues = self._queue_cycle.consume(len(self.active_queues))
        return [self._q_for_pri(queue, pri) for pri in self.priority_steps for queue in queues]

    def _brpop_start(self, timeout=None):
        if self.global_keyprefix:  # not used here; kombu's own path handles prefixes
            return super()._brpop_start(timeout)
        keys = self._queue_keys()
        if not keys:
            return
        self._in_poll = self.client.connection
        self._brpop_sent_at = monotonic()
        if self._waiting:
            queues = keys[:len(self.active_queues)]  # each queue's own list (the first priority step)
            wait = queues[self._wait_turn % len(queues)]
            self._wait_turn += 1
            longest = timeout or self.brpop_timeout or 1
            command = ["BLMOVE", wait, wait, "RIGHT", "RIGHT", longest if len(queues) == 1 else min(longest, WAIT_SLICE)]
        else:
            settings = get_settings()
            command = ["EVAL", lua_source("broker_take"), len(keys) + 4, self.unacked_key, self.unacked_index_key,
                       store_keys.dead_letters(), store_keys.dead_letter_reasons(), *keys,
                       settings.max_message_bytes, settings.dead_letter_max]
        self.client.connection.send_command(*command)

    def _brpop_read(self, **options):
        if self.global_keyprefix:
            return super()._brpop_read(**options)
        waiting = self._waiting
        try:
            try:
                reply = self.client.parse_response(self.client.connection, "BLMOVE" if waiting else "EVAL", **options)
            except self.connection_errors:
                self.client.connection.disconnect()
                raise
            if waiting:  # a message arrived (left in place) or the wait timed out: take next
                self._waiting = False
                raise kombu_redis.Empty()
            if not reply:
                self._waiting = True
                raise kombu_redis.Empty()
            dest, item = reply[0], reply[1]
            dest = bytes_to_str(dest).rsplit(self.sep, 1)[0]
            if len(reply) > 2:  # set aside unread by the take itself (larger than COUNTERS_MAX_MESSAGE_BYTES)
                log.warning("a message from %s was set aside: %s", dest, bytes_to_str(reply[2]))
                raise kombu_redis.Empty()
            if dest in self._no_ack_queues:  # control messages, not tasks: delivered as they are
                message = loads(bytes_to_str(item))
                self._forget_unacked(((message or {}).get("properties") or {}).get("delivery_tag"))
            else:
                reason, checked = dead_letters.message_problem(item)
                if reason is not None:  # Celery would crash on it, or restore it forever
                    with self.conn_or_acquire() as client:
                        dead_letters.set_aside_message(client, (self.unacked_key, self.unacked_index_key), dest,
                                                       item, reason, checked)
                    raise kombu_redis.Empty()
                message = loads(bytes_to_str(item))  # kombu's JSON (its own types)
            self._queue_cycle.rotate(dest)
            self.connection._deliver(message, dest)
            return True
        finally:
            self._in_poll = None
            self._flush_brpop_reauth()


class Transport(kombu_redis.Transport):
    Channel = Channel
