"""The batch consumer: how the worker's main process buffers the messages of a ``WorkerBatches``
task (``worker.task_bases``) and applies them together, with Celery's acknowledgement rules and
task events for every message (what a batch does is ``worker.batch_apply``).

``record_visit`` and ``incr_ranking`` are sent one message per item (``.delay()`` once per
page view). A worker applying each alone pays a pool round trip and a Redis round trip per item;
a ``WorkerBatches`` task instead has its messages buffered by the worker's main process, up to
``COUNTERS_WORKER_BATCH`` messages or for ``COUNTERS_WORKER_BATCH_MS`` after the first (the first
message after a quiet spell, with no batch running, goes at once: an idle stack adds no wait), then
applied with one call of the task's function (``run(requests)``, a list of ``SimpleRequest``) in
a pool process (``apply_async`` on the pool, as Celery runs any task).

Acknowledgement (``acks_late``, docs/reliability.md): the messages of a batch are acknowledged
only after the batch function returned (it returns once each message is applied, refused or set
aside: ``worker.batch_apply``). Until then they stay unacknowledged on the broker, so:

- a warm shutdown (SIGTERM) applies nothing new: what is buffered is not sent to the pool and
  not acknowledged; the broker gets it back when the worker's channel closes (kombu restores a
  channel's unacknowledged messages) or, at the latest, after the visibility timeout. A batch
  already running is waited for and acknowledged, as Celery does for any running task;
- a pool process that dies during a batch (WorkerLostError) has the batch's messages rejected
  with requeue (``reject_on_worker_lost``), so they run again at once;
- a broker connection that is lost and made again drops what was buffered (those messages
  belong to the old channel, which gave them back) and starts an empty buffer;
- a batch function that raises (a bug: ``apply_batch`` itself waits out Redis errors and sets
  aside what keeps failing) gets its messages acknowledged and reported failed, with the error
  logged, as Celery does for a failing ``acks_late`` task: never retried forever.

Prefetch: buffered and running messages are unacknowledged, so they count against the
worker's prefetch limit (``worker_prefetch_multiplier`` x concurrency; the package's default
keeps it at twice the batch size per process). When the buffer and the running batches hold the
whole limit, no other message can arrive before one is acknowledged, so the buffer is applied at
once instead of waiting for its time limit (celery-batches waited for the interval then, and
documents that the limit must be above the batch size); a multiplier of 0 (no limit) is fine.

Task events (off by default; on with Flower connected, ``-E``, ``worker_send_task_events`` or
``celery control enable_events``),
sent by the worker's main process as Celery's own requests send them: ``task-received`` (with
its masked arguments: ``core.privacy``) when its batch is formed, ``task-started`` when the batch
starts in a pool process, then ``task-succeeded`` (with the batch's ``runtime``) or
``task-failed``. The received task events of a batch are sent together, up to
``COUNTERS_WORKER_BATCH_MS`` after the messages arrived, so the worker publishes them in a few
task-event messages: sent one by one as each message arrived, they cost a publish each and cut
``.delay()``-per-visit throughput by about a third. A message buffered when a shutdown begins is
never reported received: it was not applied, and the next worker reports it. A message refused as bad input, or set aside in the dead letters, is reported
``task-failed`` with the reason (``InvalidInput`` and its message, or the error that made it be
set aside): as a refused ``record_visits`` message is, so Flower's failed tasks show what was not
counted. The task events carry argument texts made from the arguments here, never the producer's.

``MaskedRequest`` (the ``Request`` class of the counting tasks too) gives every message's
``argsrepr`` / ``kwargsrepr`` that masked form on the worker, whatever a producer wrote.

Eager mode (``task_always_eager``, an app's tests): ``apply`` runs the function at once on a
batch of one message, as ``.delay()`` of a plain task would.

Adapted from celery-batches 0.11 (https://github.com/clokep/celery-batches; BSD-3-Clause:
Copyright (c) 2020- Patrick Cloke & contributors, (c) 2017-2020 Percipient Networks, (c)
2015-2016 Ask Solem & contributors, (c) 2012-2014 GoPivotal, Inc., (c) 2009-2012 Ask Solem and
individual contributors; all rights reserved; its licence text is at the end of this file): the
message handler's protocol conversion, ``SimpleRequest``, eager ``apply`` and running a batch
with the pool's ``apply_async``. New here: task events per message, acknowledgement after the
batch, warm shutdown, reconnection, worker loss and the flush at the prefetch limit.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from celery import Task, signals
from celery.utils.imports import symbol_by_name
from celery.utils.saferepr import saferepr
from celery.utils.time import timezone
from celery.worker import state as worker_state
from celery.worker.request import Request, create_request_cls
from celery.worker.strategy import hybrid_to_proto2, proto1_to_proto2
from kombu.asynchronous.timer import to_timestamp
from kombu.utils.uuid import uuid

from ..core.privacy import masked_reprs
from .broker import acks_together

log = logging.getLogger(__name__)


class MaskedRequest(Request):
    """A worker's request whose argument texts (task events, logs, ``celery inspect``) are made
    from its arguments with IP addresses masked, whatever the message's headers said.

    Celery's ``Request`` takes its argument texts from the message's ``argsrepr`` and
    ``kwargsrepr`` headers (task message protocol 2), read from its public ``headers`` parameter:
    the request is given the message's headers with those two made here from the arguments, read
    from the body as Celery reads them (``body`` when decoded, else the message's payload, which
    kombu decodes once). Nothing private of Celery is touched (checked in Celery 5.6.0 and 5.7.0);
    should a release read them elsewhere, ``tests/worker/test_masked_requests.py`` fails (raw IPs
    in a real worker's task events; marker ``workers``: ``make test-oldest`` and ``test-newest``).
    A body that is not ``(args, kwargs, embed)`` is left to Celery, which refuses it as for any task
    (the worker's consumer sets such messages aside before: ``worker.consumer``). Celery's own
    callers (its strategy and ``Batcher``) pass everything after the message by keyword."""

    def __init__(
        self, message: Any, *, body: Any = None, headers: Any = None, decoded: bool = False, **options: Any
    ) -> None:
        body = message.body if body is None else body
        headers = message.headers if headers is None else headers
        payload = body if decoded else message.payload
        if isinstance(payload, (list, tuple)) and len(payload) == 3:
            shown_args, shown_kwargs = masked_reprs(payload[0], payload[1])
            headers = {**headers, "argsrepr": shown_args, "kwargsrepr": shown_kwargs}
        super().__init__(message, body=body, headers=headers, decoded=decoded, **options)

    def info(self, safe: bool = False) -> dict[str, Any]:
        """What ``celery inspect active/reserved`` shows: never the raw arguments."""
        return super().info(safe=True)


@dataclass
class SimpleRequest:
    """One message of a batch as the batch function sees it: picklable (it goes to a pool
    process), with the fields of Celery's request that the function reads."""

    id: Any  # as the message has it (apply_batch refuses one that is not a usable id)
    name: str
    args: Any
    kwargs: Any
    delivery_info: dict[str, Any] = field(default_factory=dict)
    hostname: str | None = None

    @classmethod
    def from_request(cls, request: Request) -> SimpleRequest:
        return cls(
            request.id, request.name, request.args, request.kwargs, dict(request.delivery_info or {}), request.hostname
        )


FAILED = "failed"
"""Key of a batch function's result: ``{position in the batch: why}`` of the messages it did not
apply (refused or set aside); every other message of the batch was applied."""


def failures_of(result: Any) -> dict[int, str]:
    """The messages a batch function's result says it did not apply, by position."""
    if isinstance(result, dict) and isinstance(result.get(FAILED), dict):
        return result[FAILED]
    return {}


def run_batch(task: Task, batch_id: str, requests: list[SimpleRequest]) -> dict[str, Any]:
    """Run in a pool process: the batch function on ``requests``; returns its result (or the
    error it raised, as text) and its runtime. Sends ``task_prerun`` / ``task_postrun`` with the
    batch's own id, as celery-batches did."""
    started = time.monotonic()
    signals.task_prerun.send(sender=task, task_id=batch_id, task=task, args=(requests,), kwargs={})
    result: Any = None
    state = "FAILURE"
    try:
        result = task(requests)
        state = "SUCCESS"
        return {"result": result, "runtime": time.monotonic() - started}
    except Exception as exc:  # noqa: BLE001  reported for every message of the batch, then acknowledged
        log.error("%s batch %s of %d messages failed: %r", task.name, batch_id, len(requests), exc, exc_info=True)
        return {"error": saferepr(exc), "traceback": traceback.format_exc(), "runtime": time.monotonic() - started}
    finally:
        signals.task_postrun.send(
            sender=task, task_id=batch_id, task=task, args=(requests,), kwargs={}, retval=result, state=state
        )


def announce_received(request: Request) -> None:
    """The ``task-received`` task event of a message, as Celery's own strategy sends it."""
    request.send_event(
        "task-received",
        name=request.name,
        args=request.argsrepr,
        kwargs=request.kwargsrepr,
        root_id=request.root_id,
        parent_id=request.parent_id,
        retries=request.request_dict.get("retries", 0),
        eta=request.eta and request.eta.isoformat(),
        expires=request.expires and request.expires.isoformat(),
    )


def shutting_down() -> bool:
    """True once a warm or cold shutdown of this worker began."""
    return any(
        flag is not None and flag is not False for flag in (worker_state.should_stop, worker_state.should_terminate)
    )


class Batcher:
    """The buffer of one ``WorkerBatches`` task in a worker's main process, for one connection to
    the broker (a reconnection makes a new one): takes its messages, applies them in batches."""

    def __init__(self, task: Task, app: Any, consumer: Any) -> None:
        self.task, self.app, self.consumer = task, app, consumer
        self.pool, self.timer = consumer.pool, consumer.timer
        self.hostname, self.eventer = consumer.hostname, consumer.event_dispatcher
        self.Req = create_request_cls(
            symbol_by_name(task.Request), task, consumer.pool, consumer.hostname, self.eventer, app=app
        )
        self.buffer: list[Request] = []
        self.running = 0  # messages of batches sent to the pool, not acknowledged yet
        self.due: Any = None  # the timer entry of the buffer's time limit (never cancelled by itself)
        self.due_count = 0  # time limits set so far: tells an entry whether it is still the current one
        self.last_flush = 0.0  # monotonic time of the last batch sent to the pool
        self.retired = False
        self.lock = threading.RLock()  # timers run in another thread with the threads and solo pools

    # -- taking messages (the consumer's strategy) ----------------------------------------------

    def on_message(self, message: Any, body: Any, ack: Any, reject: Any, callbacks: Any, **_: Any) -> None:
        """Celery's task message handler for this task: like ``celery.worker.strategy.default``,
        but the request is buffered, not run."""
        if body is None and "args" not in message.payload:
            body, headers, decoded, utc = message.body, message.headers, False, self.app.uses_utc_timezone()
        elif "args" in message.payload:
            body, headers, decoded, utc = hybrid_to_proto2(message, message.payload)
        else:
            body, headers, decoded, utc = proto1_to_proto2(message, body)
        request = self.Req(
            message,
            on_ack=ack,
            on_reject=reject,
            app=self.app,
            hostname=self.hostname,
            eventer=self.eventer,
            task=self.task,
            connection_errors=self.consumer.connection_errors,
            body=body,
            headers=headers,
            decoded=decoded,
            utc=utc,
        )
        if (request.expires or request.id in worker_state.revoked) and request.revoked():
            return  # acknowledged and reported revoked by Celery
        signals.task_received.send(sender=self.consumer, request=request)
        if request.eta:
            announce_received(request)
            self.wait_for_eta(request)
        else:
            self.add(request)

    def wait_for_eta(self, request: Request) -> None:
        """A message with an ETA joins the buffer when it is due (it does not hold the prefetch
        meanwhile: the limit is raised for it, as Celery does for ETA tasks)."""
        try:
            eta = (
                to_timestamp(timezone.to_system(request.eta))
                if request.utc
                else to_timestamp(request.eta, self.app.timezone)
            )
        except (OverflowError, ValueError) as exc:
            log.error("%s[%s]: cannot convert its ETA %r (%r); rejected", request.name, request.id, request.eta, exc)
            request.reject(requeue=False)
            return
        self.consumer.qos.increment_eventually()

        def due() -> None:
            self.consumer.qos.decrement_eventually()
            if not self.retired:
                self.add(request)

        self.timer.call_at(eta, due, priority=6)

    def add(self, request: Request) -> None:
        with self.lock:
            if self.retired:
                return
            self.buffer.append(request)
            held = len(self.buffer)
            if held < self.task.flush_every and not self.at_prefetch_limit(held) and not self.idle(held):
                if self.due is None:
                    self.due_count += 1
                    self.due = self.timer.call_after(self.task.flush_interval, self.flush_when_due, (self.due_count,))
                return
        self.flush()

    def flush_when_due(self, which: int) -> None:
        """The buffer's time limit, run by its timer entry (the ``which``-th set): the entry is
        running, so it is forgotten, never cancelled. Under the gevent pool a timer entry is a
        greenlet, and cancelling it kills it: a flush that cancelled the entry running it died
        there, before it applied anything, and with ``due`` still set no time limit was set
        again, so the last messages of a stream waited for a full batch (issue 30). An entry
        that a flush cancelled too late (it had started in the timer's thread) applies nothing."""
        with self.lock:
            if which != self.due_count or self.due is None:
                return  # that time limit's buffer was applied already; a later one has its own entry
            self.due = None
        self.flush()

    def idle(self, held: int) -> bool:
        """True for the first message after a quiet spell (no batch running, none sent for a
        flush interval): it is applied at once, so a visit on an idle stack does not wait the
        interval; under steady traffic, messages still gather for the interval after a batch."""
        return held == 1 and not self.running and time.monotonic() - self.last_flush >= self.task.flush_interval

    def at_prefetch_limit(self, held: int) -> bool:
        """True when the buffered and running messages hold the whole prefetch limit: no other
        message can arrive before some are acknowledged, so waiting would only add latency."""
        limit = getattr(self.consumer.qos, "value", 0) or 0
        return bool(limit) and held + self.running >= limit

    # -- applying a batch -------------------------------------------------------------------------

    def flush(self) -> None:
        """Send the buffer to the pool as one batch (not once a shutdown began: then it stays
        unacknowledged and the broker gets it back)."""
        with self.lock:
            if self.due is not None:
                self.due.cancel()
                self.due = None
            if not self.buffer or self.retired or shutting_down():
                return
            requests, self.buffer = self.buffer, []
            self.running += len(requests)
            self.last_flush = time.monotonic()
        batch_id = uuid()
        log.debug("%s batch %s: %d messages", self.task.name, batch_id, len(requests))
        for request in requests:  # together, so the worker publishes them in a few messages, not one each
            if not request.eta:
                announce_received(request)
        try:
            self.pool.apply_async(
                run_batch,
                (self.task, batch_id, [SimpleRequest.from_request(r) for r in requests]),
                accept_callback=lambda pid, time_accepted: self.on_started(requests, pid),
                callback=lambda returned: self.on_returned(requests, batch_id, returned),
                error_callback=lambda exc_info: self.on_lost(requests, batch_id, exc_info),
                correlation_id=batch_id,
            )
        except Exception:  # noqa: BLE001  (the pool is closing): left unacknowledged, the broker restores them
            with self.lock:
                self.running -= len(requests)
            log.exception(
                "%s batch %s of %d messages could not be sent to the pool; left to the broker",
                self.task.name,
                batch_id,
                len(requests),
            )

    def on_started(self, requests: list[Request], pid: int) -> None:
        for request in requests:
            request.worker_pid = pid
            request.send_event("task-started")

    def on_returned(self, requests: list[Request], batch_id: str, returned: dict[str, Any]) -> None:
        """The batch function returned (or raised): acknowledge its messages, then report each."""
        with self.lock:
            self.running -= len(requests)
        runtime = returned.get("runtime")
        if "error" in returned:
            failures = dict.fromkeys(range(len(requests)), returned["error"])
        else:
            failures = failures_of(returned.get("result"))
        with acks_together([request.message for request in requests]):
            for request in requests:
                request.acknowledge()
        for position, request in enumerate(requests):
            if position in failures:
                request.send_event("task-failed", exception=failures[position], traceback=returned.get("traceback"))
            else:
                request.send_event("task-succeeded", result="'applied'", runtime=runtime)
        log.info(
            "%s batch %s of %d messages done in %.3fs: %d not applied",
            self.task.name,
            batch_id,
            len(requests),
            runtime or 0.0,
            len(failures),
        )

    def on_lost(self, requests: list[Request], batch_id: str, exc_info: Any) -> None:
        """The pool process died during the batch: its messages go back to the queue."""
        with self.lock:
            self.running -= len(requests)
        exc = getattr(exc_info, "exception", exc_info)
        log.error(
            "%s batch %s of %d messages lost with its pool process (%r): requeued",
            self.task.name,
            batch_id,
            len(requests),
            exc,
        )
        for request in requests:
            request.send_event("task-failed", exception=saferepr(exc), traceback=getattr(exc_info, "traceback", None))
            if self.task.reject_on_worker_lost:
                request.reject(requeue=True)
            else:
                request.acknowledge()

    def retire(self) -> None:
        """The connection this buffer belongs to is gone: drop what is buffered, unacknowledged
        (the broker hands it out again); running batches still report."""
        with self.lock:
            self.retired = True
            if self.due is not None:
                self.due.cancel()
                self.due = None
            dropped, self.buffer = len(self.buffer), []
        if dropped:
            log.info("%s: %d buffered messages left to the broker (reconnecting)", self.task.name, dropped)


# celery-batches' licence (for the parts adapted above):
#
# Copyright (c) 2020- Patrick Cloke & contributors.  All rights reserved.
# Copyright (c) 2017-2020 Percipient Networks.  All rights reserved.
# Copyright (c) 2015-2016 Ask Solem & contributors.  All rights reserved.
# Copyright (c) 2012-2014 GoPivotal, Inc.  All rights reserved.
# Copyright (c) 2009, 2010, 2011, 2012 Ask Solem, and individual contributors.  All rights reserved.
#
# Redistribution and use in source and binary forms, with or without modification, are permitted
# provided that the following conditions are met:
#     * Redistributions of source code must retain the above copyright notice, this list of
#       conditions and the following disclaimer.
#     * Redistributions in binary form must reproduce the above copyright notice, this list of
#       conditions and the following disclaimer in the documentation and/or other materials
#       provided with the distribution.
#     * Neither the name of Ask Solem, nor the names of its contributors may be used to endorse or
#       promote products derived from this software without specific prior written permission.
#
# THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS" AND ANY EXPRESS OR
# IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE IMPLIED WARRANTIES OF MERCHANTABILITY AND
# FITNESS FOR A PARTICULAR PURPOSE ARE DISCLAIMED. IN NO EVENT SHALL Ask Solem OR CONTRIBUTORS BE
# LIABLE FOR ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL, EXEMPLARY, OR CONSEQUENTIAL DAMAGES
# (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS OR SERVICES; LOSS OF USE, DATA,
# OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER CAUSED AND ON ANY THEORY OF LIABILITY, WHETHER IN
# CONTRACT, STRICT LIABILITY, OR TORT (INCLUDING NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY OUT OF
# THE USE OF THIS SOFTWARE, EVEN IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE.
