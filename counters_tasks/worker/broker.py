"""The Redis broker transport, made safe against a worker killed while it takes a message.

kombu's Redis transport takes messages with ``BRPOP``: the message leaves Redis when the server
sends the reply, and is recorded as unacknowledged (so that it can be restored after the
visibility timeout) only once the worker has read that reply. A worker killed (SIGKILL, OOM)
in between loses the message for good (celery/kombu#305, celery/celery#4354). Here a message is
taken by one Lua call that pops it and marks it unacknowledged at once (``broker_take``);
to wait for messages without taking any, the worker blocks on ``BLMOVE q q RIGHT RIGHT``, which
puts the message back where it was. ``BLMOVE`` waits on one list, so a worker consuming several
queues waits on each on a connection of its own (``QueueWait``): the channel's own connection
waits on the first queue, and a message arriving on another ends that wait at once
(``CLIENT UNBLOCK``), so it is taken without delay whichever queue it is on. A message the worker cannot decode, whose shape is wrong
or that is too large is set aside in the dead letters (``dead_letters``) instead of reaching
Celery, which would crash on it or restore it forever. Everything else (acks, restore sweeps,
publishing) is kombu's. ``worker.celery_defaults`` selects this transport for ``redis://`` and ``rediss://`` brokers.
It builds on kombu's Redis transport through ``worker.kombu_redis_adapter``, the one module that
reaches kombu's private names (kombu has no public hook for the consume command or the poller).

A worker's broker connection pools are sized for its concurrency (``size_broker_pools``, at the
worker's start): kombu's Redis channel keeps at most ``max_connections`` (10) connections and
raises ``MaxConnectionsError`` past them, and with the threads, gevent or eventlet pool each task
that finishes acknowledges its message from its own thread or greenlet, holding one of them while
Redis answers (issue 30: ``Couldn't ack`` under ``--pool gevent -c 50``).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from celery import signals
from kombu import Connection
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from kombu.utils.encoding import bytes_to_str
from kombu.utils.url import maybe_sanitize_url

from ..core.settings import get_settings
from ..store import keys as store_keys
from ..store.scripts import lua_source
from . import dead_letters
from .kombu_redis_adapter import Channel as AdaptedChannel
from .kombu_redis_adapter import register_wait, registered_event, socket_of, unregister_wait

log = logging.getLogger(__name__)


WAIT_SLICE = 0.02
"""Seconds one wait lasts when the worker consumes several queues and the broker refuses
``CLIENT ID`` / ``CLIENT UNBLOCK`` (an ACL user without them): then the worker waits on its
queues in turn and takes (from all of them) after every wait. Redis ends a blocking command's
timeout on its ``hz`` tick (100 ms by default), so a message can wait that long to be noticed."""

WAIT = "WAIT "
"""Prefix of the poller's event type of a queue's own wait (``QueueWait``)."""


POOL_MARGIN = 10
"""Connections of a broker pool beyond the worker's concurrency: kombu's own ``max_connections``
default, for what the worker's main process does with them besides acknowledging tasks (restore
sweeps, control replies, waking its own wait, task events)."""


def _number(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def task_concurrency(conf: Any, options: dict[str, Any]) -> int:
    """The most tasks a worker may run at once: the top of ``--autoscale`` when given, else ``-c``
    or ``worker_concurrency`` (the CPU count when neither is a number, as Celery does)."""
    autoscale = options.get("autoscale")
    if autoscale:
        bounds = autoscale if isinstance(autoscale, (list, tuple)) else str(autoscale).split(",")
        top = max((_number(bound) or 0 for bound in bounds), default=0)
        if top:
            return top
    return _number(options.get("concurrency")) or _number(conf.worker_concurrency) or os.cpu_count() or 2


def redis_broker(conf: Any) -> bool:
    """Whether the configured broker's transport is kombu's Redis one or derived from it (this
    module's, Sentinel's): channels that keep a redis-py connection pool of ``max_connections``."""
    connection = Connection(conf.broker_read_url or conf.broker_url, transport=conf.broker_transport)
    try:
        return issubclass(connection.get_transport_cls(), kombu_redis.Transport)
    finally:
        connection.release()


@signals.celeryd_init.connect
def size_broker_pools(conf: Any = None, options: dict[str, Any] | None = None, **_: Any) -> None:
    """At a worker's start (``celeryd_init``: its configuration is final, its connections not
    made yet), make its broker pools hold a connection for every task it may run at once, plus
    ``POOL_MARGIN``, as Celery's ``broker_pool_limit`` and kombu's ``max_connections`` documents
    advise for threads and green threads:

    - ``broker_transport_options["max_connections"]``, the connection pool of each Redis channel:
      a plain redis-py pool, which raises ``MaxConnectionsError`` when it is exhausted, so an
      acknowledgement failed (``Couldn't ack``) and its message stayed unacknowledged until the
      visibility timeout gave it back; unless the configuration names its own;
    - ``broker_pool_limit``, Celery's pool of producer connections (tasks that publish, retries),
      which makes publishers wait when it is exhausted; raised, never lowered (0 or None, no
      pool, stays).

    Connections are made only when used at once, so a larger limit costs nothing at rest. This
    handler is connected when the worker imports its tasks (``tasks`` -> ``worker.task_bases``
    -> ``worker.batch_consumer`` -> here), before Celery sends ``celeryd_init``."""
    if conf is None:
        return
    needed = task_concurrency(conf, options or {}) + POOL_MARGIN
    if redis_broker(conf):
        transport_options = dict(conf.broker_transport_options or {})
        if "max_connections" not in transport_options:
            conf.broker_transport_options = {**transport_options, "max_connections": needed}
    if conf.broker_pool_limit and conf.broker_pool_limit < needed:
        conf.broker_pool_limit = needed


@dataclass
class QueueWait:
    """A wait on one more queue: ``BLMOVE q q RIGHT RIGHT`` on a connection of its own. When it
    sees a message it ends the channel's own wait (``CLIENT UNBLOCK``), whose next take then
    takes from every queue; it waits again from the channel's next wait on."""

    queue: str
    client: Any  # a redis-py client holding one connection of the channel's async pool
    armed: bool = False  # its BLMOVE is in flight

    @property
    def event_type(self) -> str:
        return WAIT + self.queue


def recorded_tag(message: dict[str, Any]) -> str | None:
    """The delivery tag under which ``broker_take`` recorded a message it took (a string tag and
    a ``delivery_info`` object, as the script checks), else None."""
    properties = message["properties"]
    tag = properties.get("delivery_tag")
    return tag if isinstance(tag, str) and isinstance(properties.get("delivery_info"), dict) else None


class QoS(kombu_redis.QoS):
    """kombu's acknowledgement emulation, without recording again a message the take recorded:
    kombu's ``append`` writes every delivered message to the unacked hash and index (a
    ``MULTI`` / ``EXEC`` with the message encoded once more), which ``broker_take`` has already
    done in the same step as the pop; it was a sixth of the worker's main process with one
    message a visit (issue 21). A message delivered any other way (``basic_get``, a key prefix)
    is recorded by kombu as before."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # inside acks_together: the tags acknowledged so far, per thread (a greenlet under gevent
        # and eventlet, whose monkey-patching makes threading.local theirs): with the threads pool
        # each batch is acknowledged from the thread that ran it, and two may overlap (issue 30)
        self._together = threading.local()

    @property
    def _acks(self) -> list[Any] | None:
        return getattr(self._together, "acks", None)

    @_acks.setter
    def _acks(self, tags: list[Any] | None) -> None:
        self._together.acks = tags

    def append(self, message: Any, delivery_tag: Any) -> None:
        if delivery_tag is not None and delivery_tag == self.channel._recorded_by_take:
            virtual.QoS.append(self, message, delivery_tag)  # the in-memory part only
        else:
            super().append(message, delivery_tag)

    def ack(self, delivery_tag: Any) -> None:
        if self._acks is None:
            super().ack(delivery_tag)
        else:  # removed from the unacked entries when acks_together ends
            self._acks.append(delivery_tag)
            virtual.QoS.ack(self, delivery_tag)

    @contextmanager
    def acks_together(self) -> Iterator[None]:
        """Acknowledgements made inside (by this thread) leave the broker's unacked entries in one
        round trip at the end (kombu's ``ack`` sends a ``MULTI`` / ``EXEC`` a message: a sixth of the worker's
        main process with one message a visit). Should that round trip fail, the entries stay and
        the messages come back after the visibility timeout, as after a failed ``ack``; their
        items are applied at most once (dedupe)."""
        self._acks = []
        try:
            yield
        finally:
            tags, self._acks = self._acks, None
            if tags:
                with self.pipe_or_acquire() as pipe:
                    pipe.zrem(self.unacked_index_key, *tags).hdel(self.unacked_key, *tags).execute()


@contextmanager
def acks_together(messages: list[Any]) -> Iterator[None]:
    """Acknowledge ``messages`` (kombu messages) inside in as few round trips as their channels
    allow: one per channel of this transport (``QoS.acks_together``), one a message elsewhere
    (another broker, or a transport without it)."""
    with ExitStack() as stack:
        for qos in {id(q): q for q in (getattr(getattr(m, "channel", None), "qos", None) for m in messages)}.values():
            if isinstance(qos, QoS):
                stack.enter_context(qos.acks_together())
        yield


class Channel(AdaptedChannel):
    """Takes messages atomically (pop + mark unacknowledged), waits without taking: kombu's
    Redis channel with its consume command (``start_consume``, ``read_consume``) replaced."""

    QoS = QoS
    _recorded_by_take: Any = None  # delivery tag of the message being delivered, recorded by the take

    _waiting = False  # the command in flight is the wait (BLMOVE), not the take
    _wait_turn = 0  # which queue the next wait is on
    _sync_client: Any = None  # the one client of the channel's pool (create_client)

    _own_id: tuple[Any, int] | None = None  # (socket, CLIENT ID) of the channel's own connection
    _unblock_refused = False  # the broker refused CLIENT ID or CLIENT UNBLOCK: wait in slices

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._no_ack_queues: set[str] = set()
        self._queue_waits: dict[str, QueueWait] = {}

    def create_client(self, asynchronous: bool = False) -> Any:
        """kombu makes a new redis-py client for every publish (``conn_or_acquire``): its
        constructor alone was a fifth of a ``.delay()``'s cost. A client is its pool and its reply
        callbacks, safe to share between threads, so the channel keeps one per pool (a new one
        when kombu replaces the pool)."""
        if asynchronous:
            return super().create_client(asynchronous=True)
        client = self._sync_client
        if client is None or client.connection_pool is not self.pool:
            client = self._sync_client = super().create_client()
        return client

    def basic_consume(self, queue: str, no_ack: bool, *args: Any, **kwargs: Any) -> Any:
        """kombu's, remembering the queues consumed without acknowledgements: control replies
        (``celery inspect``, ``health``'s ping) and the worker's own control queue, not tasks."""
        (self._no_ack_queues.add if no_ack else self._no_ack_queues.discard)(queue)
        return super().basic_consume(queue, no_ack, *args, **kwargs)

    def _forget_unacked(self, tag: Any) -> None:
        """The take recorded a message of a queue consumed without acknowledgements: forget it
        (kombu's BRPOP path never marks those), or the restore sweep would send it again and
        again after every visibility timeout."""
        if isinstance(tag, str):
            with self.conn_or_acquire() as client:
                client.pipeline().hdel(self.unacked_key, tag).zrem(self.unacked_index_key, tag).execute()

    def _queue_keys(self) -> list[str]:
        queues = self.queues_in_turn()
        return [self.queue_key(queue, pri) for pri in self.priority_steps for queue in queues]

    def start_consume(self, timeout: Any = None) -> None:
        """Send the take (``broker_take``), or after a take that found nothing the wait, on the
        channel's connection; kombu's ``BRPOP`` with a key prefix (not used here)."""
        if self.global_keyprefix:  # not used here; kombu's own path handles prefixes
            super().start_consume(timeout)
            return
        keys = self._queue_keys()
        if not keys:
            return
        self.consume_sent()
        if self._waiting:
            # each queue's own list (the first priority step), the worker's first queue first
            queues = [self.queue_key(queue, self.priority_steps[0]) for queue in self.active_queues]
            longest = timeout or self.brpop_timeout or 1
            if len(queues) == 1 or self._know_own_id():
                self.client.connection.send_command("BLMOVE", queues[0], queues[0], "RIGHT", "RIGHT", longest)
                self._arm_queue_waits(queues[1:], longest)
                return
            wait = queues[self._wait_turn % len(queues)]
            self._wait_turn += 1
            command = ["BLMOVE", wait, wait, "RIGHT", "RIGHT", min(longest, WAIT_SLICE)]
        else:
            settings = get_settings()
            command = [
                "EVAL",
                lua_source("broker_take"),
                len(keys) + 4,
                self.unacked_key,
                self.unacked_index_key,
                store_keys.dead_letters(),
                store_keys.dead_letter_reasons(),
                *keys,
                settings.max_message_bytes,
                settings.dead_letter_max,
            ]
        self.client.connection.send_command(*command)

    # -- waiting on several queues at once --------------------------------------------------------

    def _know_own_id(self) -> bool:
        """Whether the channel's own connection's ``CLIENT ID`` is known (asked once per
        connection, when nothing is in flight on it), so another queue's wait can end its wait."""
        if self._unblock_refused:
            return False
        connection = self.client.connection
        connection.connect()  # when not connected (redis-py's connect does nothing when it is)
        if self._own_id is None or self._own_id[0] is not socket_of(connection):
            connection.send_command("CLIENT", "ID")
            try:
                self._own_id = (socket_of(connection), int(connection.read_response()))
            except self.ResponseError as exc:
                self._refuse_unblock(exc)
                return False
        return True

    def _refuse_unblock(self, exc: Exception) -> None:
        self._unblock_refused = True
        log.warning(
            "the broker refused CLIENT ID / CLIENT UNBLOCK (%s): a worker consuming several queues "
            "waits on them in turn, so a message may wait up to 100 ms to be noticed",
            exc,
        )

    def _arm_queue_waits(self, queues: list[str], timeout: float) -> None:
        """Make every queue in ``queues`` waited on by its own connection (a wait that saw a
        message, or failed, is sent again here); forget the waits of queues no longer consumed."""
        for gone in set(self._queue_waits) - set(queues):
            self._drop_queue_wait(self._queue_waits.pop(gone))
        cycle = self.connection.cycle
        for queue in queues:
            wait = self._queue_waits.get(queue)
            if wait is None:
                wait = self._queue_waits[queue] = QueueWait(queue, self.create_client(asynchronous=True))
                self.handlers[wait.event_type] = functools.partial(self._queue_wait_read, wait)
            connection = getattr(wait.client, "connection", None)
            if wait.armed and connection is not None and socket_of(connection) is not None:
                continue  # still waiting (a connection dropped meanwhile is connected and armed again)
            register_wait(cycle, self, wait.client, wait.event_type)
            wait.client.connection.send_command("BLMOVE", queue, queue, "RIGHT", "RIGHT", timeout)
            wait.armed = True

    def _queue_wait_read(self, wait: QueueWait) -> None:
        """A queue's own wait answered: a message is there (end the channel's own wait, whose
        next take takes it), or it timed out (wait again while the channel waits)."""
        wait.armed = False
        try:
            reply = self.client.parse_response(wait.client.connection, "BLMOVE")
        except self.connection_errors:
            wait.client.connection.disconnect()  # connected again at the next wait
            return
        own_wait_in_flight = self._waiting and self.consume_in_flight
        if reply is None:
            if own_wait_in_flight:
                self._arm_queue_waits(list(self._queue_waits), self.brpop_timeout or 1)
            return
        if own_wait_in_flight and self._own_id is not None:
            try:
                with self.conn_or_acquire() as client:
                    client.execute_command("CLIENT", "UNBLOCK", self._own_id[1])
            except self.ResponseError as exc:
                self._refuse_unblock(exc)

    def _drop_queue_wait(self, wait: QueueWait) -> None:
        unregister_wait(self.connection.cycle, self, wait.client, wait.event_type)
        self.handlers.pop(wait.event_type, None)
        connection = getattr(wait.client, "connection", None)
        if connection is not None:
            connection.disconnect()

    def read_poll_error(self, type: str, **options: Any) -> Any:
        """An error on a queue's own wait is read by that wait (which drops its connection)."""
        wait = self._queue_waits.get(type[len(WAIT) :]) if type.startswith(WAIT) else None
        if wait is not None:
            return self._queue_wait_read(wait)
        return super().read_poll_error(type, **options)

    def close(self) -> None:
        for wait in list(self._queue_waits.values()):
            self._drop_queue_wait(wait)
        self._queue_waits.clear()
        super().close()

    def read_consume(self, **options: Any) -> Any:
        """Read the take's reply (deliver the message it took, or set it aside) or the wait's
        (take next); kombu's ``BRPOP`` read with a key prefix."""
        if self.global_keyprefix:
            return super().read_consume(**options)
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
            control = dest in self._no_ack_queues  # control messages, not tasks: delivered as they are
            if control:
                (reason, checked), body = dead_letters.envelope_problem(item), None
            else:
                reason, checked, body = dead_letters.message_check(item)
            if reason is not None:  # kombu or Celery would raise on it in the loop, or restore it forever
                with self.conn_or_acquire() as client:
                    dead_letters.set_aside_message(
                        client, (self.unacked_key, self.unacked_index_key), dest, item, reason, checked
                    )
                raise kombu_redis.Empty()
            assert checked is not None  # no reason to refuse it: decoded
            message = checked  # decoded once, by kombu's JSON (its own types)
            if control:
                self._forget_unacked(message["properties"].get("delivery_tag"))
            else:
                self._recorded_by_take = recorded_tag(message)
            try:
                self.deliver(message, dest, body)
            finally:
                self._recorded_by_take = None
            return True
        finally:
            self.reply_read()


class Poller(kombu_redis.MultiChannelPoller):
    """kombu's poller, reading a queue's own wait (``QueueWait``) whatever the prefetch: its reply
    takes no message, and left unread it would keep the socket readable and the loop spinning."""

    def on_readable(self, fileno: int) -> None:
        chan_type = registered_event(self, fileno)
        if chan_type is not None and chan_type[1].startswith(WAIT):
            chan_type[0].handlers[chan_type[1]]()
            return
        super().on_readable(fileno)


class Transport(kombu_redis.Transport):
    Channel = Channel

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cycle: Any = Poller()


class SocketTransport(Transport):
    """The same transport for a broker on a unix socket. kombu takes its own Redis transport for
    any ``redis+socket://`` URL, whatever the configuration names, so ``worker.celery_defaults``
    gives this one the URL without ``redis+`` (``socket:///path?virtual_host=N``): kept whole as
    the host (``can_parse_url``), it is opened by kombu's Redis channel as the socket it names,
    as kombu does for ``redis+socket://``."""

    can_parse_url = True

    def as_uri(self, uri: str, include_password: bool = False, mask: str = "**") -> str:
        """The URL as kombu spells it (``redis+socket://``), for Celery's banner and for Flower,
        which reads the broker's queues by it; the password masked unless asked for."""
        uri = "redis+" + uri
        return uri if include_password else maybe_sanitize_url(uri, mask)
