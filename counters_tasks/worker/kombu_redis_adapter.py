"""kombu's Redis transport as ``worker.broker`` builds on it: the one module of the package that
reaches kombu's private names (and the socket of a redis-py connection, which kombu's poller
watches).

kombu has no public way to do what ``worker.broker`` does. Its Redis channel consumes with a
``BRPOP`` sent and read by private methods (``_brpop_start``, ``_brpop_read``), with no hook to
send another command; its poller (``MultiChannelPoller``) watches the channel's own connections
only, with no public way to watch another. (Checked in kombu 5.7.0's ``kombu.transport.redis``,
its reference docs and its issues.) So each private name needed gets a public one here, saying
what it is for:

- ``Channel``: kombu's Redis channel, whose private methods that kombu calls hand over to public
  hooks a subclass overrides (``create_client``, ``start_consume``, ``read_consume``,
  ``read_poll_error``), with the state kombu keeps privately that those hooks must keep as kombu
  does (``consume_sent``, ``consume_in_flight``, ``reply_read``, ``queues_in_turn``,
  ``queue_key``, ``deliver``);
- ``DecodedMessage``: kombu's message of such a channel, whose body ``deliver`` may give already
  decoded (kombu's ``Message._decode``), so Celery's worker does not decode it a second time;
- ``register_wait``, ``unregister_wait``, ``registered_event``: one more connection watched by
  the transport's poller;
- ``socket_of``: the socket of a redis-py connection (redis-py 6.4 to 8.1).

``KOMBU_CHECKED``: the kombu releases each name was checked against. pyproject.toml's range
(``kombu>=5.7,<6``) has one release today, 5.7.0, both its floor (``make test-oldest``) and its
newest (``make test-newest``); both targets run the real workers' tests (marker ``workers``) on
it. A release that renames one of these names, or changes what it means, breaks what its
docstring says, and the tests named there fail: ``tests/faults/test_broker.py`` (the take and
what kombu restores), ``tests/faults/test_latency.py`` (the waits on several queues), the
``workers`` marker (real workers counting). ``tests/repo/test_private_names.py`` keeps every other
module off other packages' private names.
"""

from __future__ import annotations

from time import monotonic
from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual

KOMBU_CHECKED = ("5.7.0",)
"""The kombu releases this module was checked against (the whole of pyproject.toml's range today)."""


class DecodedMessage(virtual.Message):
    """kombu's message of a Redis channel, its body given already decoded when the channel's
    ``deliver`` had it (the worker's check of each message decodes it: ``worker.dead_letters``).
    Celery's worker reads a task message's ``payload`` in its main process (to tell protocol 1
    from 2), which decodes the whole body once more: 9 us a visit of a 1,000-visit batch (issue
    32). kombu decodes in ``_decode`` (what ``decode`` memoizes); the body given is used there
    only for a content type the consumer accepts (``accept``, set after the message is made),
    else kombu decodes and refuses it as it would. Should kombu rename ``_decode``, the body is
    decoded twice again, as before (``tests/faults/test_broker.py`` fails)."""

    def __init__(self, payload: Any, channel: Any = None, **kwargs: Any) -> None:
        super().__init__(payload, channel=channel, **kwargs)
        held = getattr(channel, "_delivering", None)
        self.decoded_body: Any = held[1] if held is not None and held[0] is payload else None

    def _decode(self) -> Any:
        body, self.decoded_body = self.decoded_body, None
        if body is not None and (self.accept is None or self.content_type in self.accept):
            return body
        return super()._decode()


class Channel(kombu_redis.Channel):
    """kombu's Redis channel with public hooks for the private methods kombu calls on it.

    kombu calls ``_create_client``, ``_brpop_start``, ``_brpop_read`` and ``_poll_error`` (kombu
    5.7.0: its poller, its ``client`` and ``conn_or_acquire``); each hands over to the hook of the
    same purpose here, which does what kombu's does until a subclass overrides it. Were kombu to
    rename one, kombu's own would run instead of the subclass's: the worker would consume with
    ``BRPOP`` again, losing what a killed worker was taking (``tests/faults/test_broker.py``
    fails: nothing recorded by the take)."""

    # kombu's own, declared False and None there: what the channel stores in them (mypy)
    _in_poll: Any = None  # the connection a consume command is in flight on, or a false value
    _brpop_sent_at: Any = None  # the monotonic time that command was sent
    _queue_cycle: Any  # the round-robin order of the active queues (kombu's ``cycle_by_name``)
    _delivering: tuple[dict[str, Any], Any] | None = None  # (message, its decoded body) in ``deliver``
    Message = DecodedMessage

    def _create_client(self, asynchronous=False):
        return self.create_client(asynchronous)

    def _brpop_start(self, timeout=None):
        self.start_consume(timeout)

    def _brpop_read(self, **options):
        return self.read_consume(**options)

    def _poll_error(self, type, **options):
        return self.read_poll_error(type, **options)

    # -- the hooks: kombu's behaviour until overridden ---------------------------------------------

    def create_client(self, asynchronous: bool = False) -> Any:
        """The redis-py client kombu asks for whenever it needs one (its ``client``, a publish's
        ``conn_or_acquire``): a new one of the channel's pool, or with ``asynchronous`` of the
        pool of the connections the poller watches."""
        return super()._create_client(asynchronous=asynchronous)

    def start_consume(self, timeout: Any = None) -> None:
        """Send the command that consumes the active queues on the channel's connection, without
        reading its reply (kombu's ``_brpop_start``: ``BRPOP``); called by the poller when no
        such command is in flight (``consume_in_flight``) and the prefetch allows a message."""
        super()._brpop_start(timeout)

    def read_consume(self, **options: Any) -> Any:
        """Read that command's reply once its socket is readable, and deliver what it took
        (kombu's ``_brpop_read``): True when a message was delivered, else raise ``Empty``.
        An override ends with ``reply_read``, as kombu's does."""
        return super()._brpop_read(**options)

    def read_poll_error(self, type: str, **options: Any) -> Any:
        """The poller saw an error on the socket it watches for ``type`` (kombu's ``_poll_error``:
        read the reply, which raises the error)."""
        return super()._poll_error(type, **options)

    # -- kombu's private state, as the hooks must keep it --------------------------------------------

    def consume_sent(self) -> None:
        """The consume command was just sent on the channel's connection: kombu's poller sends no
        other until its reply is read, and its health check of that connection counts from now
        (``_in_poll``, ``_brpop_sent_at``). Without it the poller would send a second command
        over the first (replies read out of turn)."""
        self._in_poll = self.client.connection
        self._brpop_sent_at = monotonic()

    @property
    def consume_in_flight(self) -> bool:
        """Whether a consume command's reply is awaited on the channel's connection (``_in_poll``)."""
        return bool(self._in_poll)

    def reply_read(self) -> None:
        """The consume command's reply was read (or its read failed), as kombu's ``_brpop_read``
        ends: nothing is in flight any more, so the poller sends the next command (``_in_poll``),
        and a streaming credential's re-auth token waiting for the connection to be idle is sent
        now (``_flush_brpop_reauth``, from kombu 5.7). Without it the channel would never consume
        again after its first reply (every ``workers`` test fails)."""
        self._in_poll = None
        self._flush_brpop_reauth()

    def queues_in_turn(self) -> list[str]:
        """The active queues in kombu's round-robin order (``_queue_cycle.consume``): the order a
        consume command lists them in, so that a busy queue does not starve the others."""
        return self._queue_cycle.consume(len(self.active_queues))

    def queue_key(self, queue: str, priority: int) -> str:
        """The Redis list of ``queue`` that holds messages of ``priority`` (``_q_for_pri``: the
        queue's own name for the first step, ``queue`` + ``sep`` + step for the others)."""
        return self._q_for_pri(queue, priority)

    def deliver(self, message: dict[str, Any], queue: str, body: Any = None) -> None:
        """Hand a message taken from ``queue`` to its consumer, as kombu's ``_brpop_read`` does:
        ``queue`` goes last in the round-robin order (``_queue_cycle.rotate``), then the
        transport calls the consumer's callback (``connection._deliver``; a message of a queue
        nobody consumes is rejected there). ``body``: the message's body already decoded (by
        kombu's JSON), which its ``DecodedMessage`` then gives instead of decoding it again."""
        self._queue_cycle.rotate(queue)
        self._delivering = None if body is None else (message, body)
        try:
            self.connection._deliver(message, queue)
        finally:
            self._delivering = None


def register_wait(cycle: Any, channel: Any, client: Any, event_type: str) -> None:
    """Have the transport's poller (``cycle``, kombu's ``MultiChannelPoller``) watch ``client``'s
    connection and call ``channel.handlers[event_type]`` when it is readable, as kombu does for its
    own ``BRPOP`` and ``LISTEN`` connections: ``_client_registered`` (which gives ``client`` a
    connection of its pool when it has none), then ``_register`` (which connects it). Nothing when
    the poller already watches that connection. Should kombu change them, a worker consuming
    several queues would notice a message on its second queue only when its first wait ends
    (``tests/faults/test_latency.py`` fails)."""
    if not cycle._client_registered(channel, client, event_type):
        cycle._register(channel, client, event_type)


def unregister_wait(cycle: Any, channel: Any, client: Any, event_type: str) -> None:
    """Stop watching what ``register_wait`` watched: forget it in kombu's maps (``_chan_to_sock``,
    ``_fd_to_chan``) and take its socket out of the poll (``_unregister_from_poll``; a socket
    already closed or out of it is ignored). kombu has no such method: a channel's connections
    leave the poller only when the poller closes. Should kombu change them, a queue no longer
    consumed would stay watched (a readable socket nobody reads: a busy loop)."""
    sock = cycle._chan_to_sock.pop((channel, client, event_type), None)
    if sock is None:
        return
    fd = sock.fileno()
    if cycle._fd_to_chan.get(fd) == (channel, event_type):
        del cycle._fd_to_chan[fd]
    try:
        cycle._unregister_from_poll(fd)
    except (KeyError, ValueError, OSError):
        pass


def registered_event(cycle: Any, fileno: int) -> tuple[Any, str] | None:
    """The (channel, event type) the poller watches ``fileno`` for (kombu's ``_fd_to_chan``), or
    None. A poller's ``on_readable`` (public) receives only the file descriptor."""
    return cycle._fd_to_chan.get(fileno)


def socket_of(connection: Any) -> Any:
    """The socket of a redis-py connection, None while it is not connected (redis-py's
    ``Connection._sock``, the socket kombu's poller watches; redis-py 6.4 to 8.1: nothing public
    says whether a connection is connected, or whether it reconnected since). Should redis-py
    rename it: ``AttributeError`` at a worker's first wait on several queues."""
    return connection._sock
