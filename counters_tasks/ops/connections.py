"""The connection rules of ``counters-tasks serve``: idle and half-sent connections cannot shut it out.

uvicorn has no timeout for receiving a request: its keep-alive timer runs only between two
requests and stops at the first byte, so a connection that sends nothing, or half a request
head, or one byte a second, stays open for good (uvicorn issue #157, its request-start timeout
never made). And its ``limit_concurrency`` counts open connections, so 64 such connections made
it answer 503 to every real request for as long as they stayed open.

``GuardedH11Protocol`` (uvicorn's h11 protocol with two rules added) is what ``ops.web.run``
serves with instead, and the limit on work moves to the requests (``ops.web.RequestLimit``):
- a request must arrive whole (head and body) within ``COUNTERS_DASHBOARD_REQUEST_TIMEOUT``
  (10) seconds of the connection's opening or of the answer before it, else it is closed;
- at most ``MAX_CONNECTIONS`` are open: one more closes the connection that has waited longest
  for a request (idle or half-sent), never one whose request is being answered.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from ..core.settings import get_settings

MAX_CONNECTIONS = 256
"""Connections open at most; past it the one waiting longest for a request is closed."""

logger = logging.getLogger(__name__)
_NOT_WAITING = float("inf")


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request and a cap on open connections."""

    max_connections = MAX_CONNECTIONS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.request_timeout = get_settings().dashboard_request_timeout
        self._deadline: asyncio.TimerHandle | None = None
        self._cycle_when_armed: Any = None
        self.waiting_since = _NOT_WAITING
        """Loop time since which this connection waits for a request (inf while one is in hand)."""

    # --- uvicorn's callbacks --------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()
        if len(self.connections) > self.max_connections:
            self._close_longest_waiting()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._disarm_if_request_whole()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()
            self._disarm_if_request_whole()  # a pipelined request may be whole already

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def handle_websocket_upgrade(self, event: Any) -> None:
        self._disarm()  # the transport goes to the websocket protocol: no deadline of ours
        super().handle_websocket_upgrade(event)

    # --- the rules ------------------------------------------------------------------------

    def _arm(self) -> None:
        if self._deadline is None:
            self._cycle_when_armed = self.cycle
            self.waiting_since = self.loop.time()
            self._deadline = self.loop.call_later(self.request_timeout, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._cycle_when_armed = None
        self.waiting_since = _NOT_WAITING

    def _disarm_if_request_whole(self) -> None:
        """A request is whole once a cycle newer than the one of the arming has its body."""
        cycle = self.cycle
        if (
            self._deadline is not None
            and cycle is not None
            and cycle is not self._cycle_when_armed
            and not cycle.more_body
        ):
            self._disarm()

    def _expired(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            logger.info("closing a connection of %s: no whole request within %.0f s", self.client, self.request_timeout)
            self.transport.close()

    def _close_longest_waiting(self) -> None:
        waiting = [
            c
            for c in self.connections
            if isinstance(c, GuardedH11Protocol) and c.waiting_since != _NOT_WAITING and not c.transport.is_closing()
        ]
        victim = min(waiting, key=lambda c: c.waiting_since, default=self)
        logger.info(
            "%d connections open: closing the one of %s (waiting for a request the longest)",
            len(self.connections),
            victim.client,
        )
        victim.transport.close()
