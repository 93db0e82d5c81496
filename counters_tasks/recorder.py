"""VisitRecorder: buffer visits (and ranking bumps) in the app process and send them as
``record_visits`` (and ``incr_rankings``) batches.

``record()`` validates (without COUNTERS_SECRET, which only workers need), stamps ``ts`` and
appends to an in-memory buffer; it never waits for the broker. A background thread sends a batch
when the buffer holds ``max_batch`` visits or its oldest visit is ``max_delay`` seconds old,
whatever the traffic before it, and on ``flush()``, ``close()``, interpreter exit and SIGTERM.
Each batch gets its id once (the task id), so a batch re-sent after a broker error is applied
once. While the broker is down, batches wait and are retried with backoff; past ``max_buffer``
visits new ones are dropped, counted in ``stats()["dropped"]`` and logged, never silently.
A forked child starts with an empty buffer and its own thread. Under ``task_always_eager`` (an
app's own tests) every visit is applied in-process at once, as ``.delay()`` would be. What a
batch shows of its arguments (message headers, task events, Flower) has the IPs masked
(``core.privacy``), whichever Celery app sends it.
How to close it under gunicorn, uWSGI, Django and Celery: docs/producer.md.

``shared_recorder()`` is the process's own recorder (the middleware's). With
``COUNTERS_DELAY_BUFFER`` on, a plain ``record_visit.delay()`` / ``incr_ranking.delay()`` goes to it
too (``buffer_delay``): ``.delay()`` then costs the app a validation and an append, and the call
travels in the next batch.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
import time
import uuid
import weakref
from collections import Counter, deque
from collections.abc import Callable
from typing import Any, cast

from kombu import serialization
from kombu.exceptions import EncodeError
from kombu.utils import json as kombu_json

from .app import package_app
from .core.kind import Kind, by_task
from .core.privacy import masked_reprs
from .core.settings import get_settings
from .events.kind import EVENT
from .ranking_bumps import RANKING
from .skips import SKIPS
from .visits import VISIT

COMPACT_JSON = "counters-json"
"""The serializer of the batches ``VisitRecorder`` sends: kombu's JSON (its content type, read
by any worker as JSON) without the spaces after its separators, 8% fewer bytes on the broker
(two a field of every item). Registered as an encoder only: kombu's name for
``application/json`` stays ``json``."""


def _register_compact_json() -> None:
    registry = serialization.registry
    json_name = registry.type_to_name.get("application/json", "json")
    registry.register(
        COMPACT_JSON,
        lambda data: kombu_json.dumps(data, separators=(",", ":")),
        None,
        content_type="application/json",
        content_encoding="utf-8",
    )
    registry.type_to_name["application/json"] = json_name  # (register names the type after the newest)


_register_compact_json()

log = logging.getLogger(__name__)

SKIPS_TASK = cast(str, SKIPS.payload_task)


class VisitRecorder:
    """Thread-safe, fork-safe batching producer of ``counters_tasks.record_visits`` messages.

    ``flush_on_sigterm`` (default True): the first recorder made in the main thread installs a
    SIGTERM handler that flushes every live recorder (5 s at most) and then does what was there
    before: calls the app's own handler (the recorders stay open for the requests a draining
    server still finishes; closed at exit), or closes them and dies of SIGTERM as the default
    would. An ignored SIGTERM stays ignored.
    """

    def __init__(
        self,
        app: Any = None,
        *,
        max_batch: int = 500,
        max_delay: float = 0.2,
        max_buffer: int = 100_000,
        queue: str = "visits",
        retry_initial: float = 0.5,
        retry_max: float = 30.0,
        flush_on_sigterm: bool = True,
    ) -> None:
        if max_batch < 1 or max_buffer < max_batch or max_delay <= 0:
            raise ValueError("need max_batch >= 1, max_buffer >= max_batch and max_delay > 0")
        self._app = app
        self.max_batch = max_batch
        self.max_delay = max_delay
        self.max_buffer = max_buffer
        self.queue = queue
        self.retry_initial = retry_initial
        self.retry_max = retry_max
        self._init_state()
        _live.add(self)
        if flush_on_sigterm:
            _install_sigterm_flush()

    def _init_state(self) -> None:
        self._lock = threading.RLock()  # a SIGTERM handler may close the recorder inside record()
        self._wake = threading.Condition(self._lock)
        self._buffer: list[tuple[str, dict[str, Any]]] = []  # (task name, payload item)
        # (route, reason, site) -> requests, until the next batch
        self._skips: Counter[tuple[str, str, str | None]] = Counter()
        self._skip_times: dict[tuple[str, str, str | None], float] = {}  # when each was first seen since then
        self._oldest = 0.0
        # (task, batch id, items, the recorded items they carry: fewer items when merged, Kind.merge)
        self._outbox: deque[tuple[str, str, list[dict[str, Any]], int]] = deque()
        self._in_outbox = 0
        self._sending = 0  # visits of the batch being sent right now
        self._sending_skips = False  # a count_skips message is being sent right now
        self._thread: threading.Thread | None = None
        self._closed = False
        self._flush_requested = False
        self._stats = {"recorded": 0, "sent": 0, "batches": 0, "dropped": 0, "refused": 0, "send_errors": 0}

    @property
    def app(self) -> Any:
        """The Celery app batches are sent with (``counters_tasks.app`` unless one was given)."""
        return self._app if self._app is not None else package_app()

    def eager_task(self, name: str) -> Any:
        """Task ``name`` of the app, for eager mode (an app's tests), its task modules imported
        through the app's loader the first time (the package's tasks for the package's app): the
        recorder itself never imports the worker's side."""
        if name not in self.app.tasks:
            self.app.loader.import_default_modules()
        return self.app.tasks[name]

    def record(
        self,
        ip: str,
        path: str,
        session_id: str | None = None,
        ts: float | None = None,
        site: str | None = None,
        referrer: str | None = None,
        utm: dict[str, str] | None = None,
        user_agent: str | None = None,
        language: str | None = None,
    ) -> None:
        """Queue one visit (validated now: bad input raises InvalidInput here, not in a worker).
        ``site``: a site of ``COUNTERS_SITES`` (None: the default site); ``referrer`` (its
        Referer URL, reduced here to its domain: a full URL never reaches the broker) and ``utm``
        (its campaign tags): its source (``core.sources``); ``user_agent`` and ``language`` (its
        User-Agent and Accept-Language headers): who visits (``core.clients``: parsed by the
        worker, the country from the IP there)."""
        self.add(VISIT, ip, path, session_id, ts, site, referrer, utm, user_agent, language)

    def incr_ranking(
        self,
        board: str,
        member: str,
        amount: int = 1,
        ts: float | None = None,
        period_hours: int = 24,
        interval_hours: int = 1,
        site: str | None = None,
    ) -> None:
        """Queue one ranking bump (as ``incr_ranking`` would apply it), validated now."""
        self.add(RANKING, board, member, amount, ts, period_hours, interval_hours, site)

    def track_event(
        self,
        name: str,
        props: dict[str, Any] | None = None,
        ts: float | None = None,
        ip: str | None = None,
        session_id: str | None = None,
        site: str | None = None,
    ) -> None:
        """Queue one analytics event (as ``counters_tasks.track_event`` would apply it: its name,
        its properties, of the visitor of ``ip`` or else of ``session_id``, of ``site``),
        validated now (``events.kind.app_event``: bad input raises InvalidInput here), sent in a
        batch of ``track_events``, applied once however often it is delivered."""
        self.add(EVENT, name, props, ts, ip, session_id, site)

    def add(self, kind: Kind, *args: Any, **kwargs: Any) -> None:
        """Queue one item of ``kind`` (``core.kind``), given as its per-item task takes it: checked
        now (``kind.app_item``: bad input raises InvalidInput here, not in a worker; ``ts`` None is
        now), sent in a batch of its payload task. ``record`` and ``incr_ranking`` are this for the
        package's kinds; an app's own kind is queued the same way."""
        if kind.app_item is None or kind.payload_task is None:
            raise TypeError(f"kind {kind.name!r} declares no app_item and payload task: it is not buffered")
        # bound first: its shape (TypeError, as a call would raise) and every text in it
        # (InvalidInput for a string UTF-8 cannot encode) before the kind's own checks
        self._add(kind.payload_task, kind.app_item(kind.bind(args, kwargs)))

    def skipped(self, route: str, reason: str, count: int = 1, site: str | None = None) -> None:
        """Count ``count`` requests that were not page views (``route``: ``middleware``; ``reason``:
        ``core.pageviews``'s or ``app``; ``site``: the site they were for, None for the default
        one), sent as one ``count_skips`` message with the next batches (at most one a
        ``max_delay``), each reason with the time it was first seen since the last batch (the
        day it counts in); kept in memory until then, a few bytes a reason. Skips are not
        visits: they take no room in the buffer and are not in ``stats()``."""
        if self.app.conf.task_always_eager:
            item = {"route": route, "reason": reason, "count": count, "ts": time.time()}
            self.eager_task(SKIPS_TASK).apply(
                args=[[item | ({"site": site} if site else {})]], task_id=str(uuid.uuid4()), throw=None
            )
            return
        with self._lock:
            if self._closed:
                raise RuntimeError("this VisitRecorder is closed")
            if not self._buffer and not self._skips:
                self._oldest = time.monotonic()
                self._wake.notify_all()
            where = (route, reason, site)
            if where not in self._skips:
                self._skip_times[where] = time.time()
            self._skips[where] += count
            if self._thread is None:
                self._start_thread()

    def _add(self, task: str, item: dict[str, Any]) -> None:
        # an app's tests: applied here and now, like .delay(); asked only when the buffer is empty
        # (never otherwise under eager mode), as reading Celery's configuration costs microseconds
        if not self._buffer and self.app.conf.task_always_eager:
            self._apply_eagerly(task, item)
            return
        with self._lock:
            if self._closed:
                raise RuntimeError("this VisitRecorder is closed")
            if len(self._buffer) + self._in_outbox + self._sending >= self.max_buffer:
                self._stats["dropped"] += 1
                dropped = self._stats["dropped"]
                if dropped == 1 or dropped % 10_000 == 0:
                    log.warning(
                        "VisitRecorder buffer full (%d visits, broker unreachable?): %d visits dropped so far",
                        self.max_buffer,
                        dropped,
                    )
                return
            was_empty = not self._buffer
            if was_empty and not self._skips:
                self._oldest = time.monotonic()
            self._buffer.append((task, item))
            self._stats["recorded"] += 1
            if self._thread is None:
                self._start_thread()
            if was_empty or len(self._buffer) >= self.max_batch:
                self._wake.notify_all()  # the sender (not only a flush() waiter): it may wait with no deadline

    def _apply_eagerly(self, task: str, item: dict[str, Any]) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("this VisitRecorder is closed")
            self._stats["recorded"] += 1
        self.eager_task(task).apply(args=[[item]], task_id=str(uuid.uuid4()), throw=None)
        with self._lock:
            self._stats["sent"] += 1
            self._stats["batches"] += 1

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Send everything recorded so far; True when all of it reached the broker in time."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            if self._thread is None and (self._buffer or self._outbox or self._skips):
                self._start_thread()
            self._flush_requested = True
            self._wake.notify_all()
            while self._buffer or self._outbox or self._sending or self._skips or self._sending_skips:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._wake.wait(remaining if remaining is not None else 0.5)
            return True

    def close(self, timeout: float | None = 10.0) -> bool:
        """Flush, then stop the sender thread; later ``record()`` calls raise."""
        sent_all = self.flush(timeout)
        with self._lock:
            self._closed = True
            self._wake.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
        if not sent_all:
            with self._lock:
                lost = len(self._buffer) + self._in_outbox + self._sending
                self._stats["dropped"] += lost
            log.error("VisitRecorder closed with %d visits not sent (broker unreachable)", lost)
        return sent_all

    def stats(self) -> dict[str, int]:
        """Counts so far: recorded, sent, batches, dropped, refused (items the sender could not
        encode, each refused alone: ``record()``'s checks refuse such input before it is
        recorded), send_errors, and pending visits."""
        with self._lock:
            return {**self._stats, "pending": len(self._buffer) + self._in_outbox + self._sending}

    # -- the sender thread --------------------------------------------------------------------

    def _start_thread(self) -> None:
        self._thread = threading.Thread(target=self._run, name="VisitRecorder", daemon=True)
        self._thread.start()

    def _take_batches(self) -> None:
        """Move buffered items into id'd batches, one task per batch (called with the lock held)."""
        per_task: dict[str, list[dict[str, Any]]] = {}
        for task, item in self._buffer:
            per_task.setdefault(task, []).append(item)
        self._buffer = []
        for task, items in per_task.items():
            for first in range(0, len(items), self.max_batch):
                batch = items[first : first + self.max_batch]
                self._outbox.append((task, str(uuid.uuid4()), batch, len(batch)))
                self._in_outbox += len(batch)
        if self._skips:  # not visits: outside the buffer's and the stats' counts
            skip_items = [
                {"route": route, "reason": reason, "count": n, "ts": self._skip_times[(route, reason, site)]}
                | ({"site": site} if site else {})
                for (route, reason, site), n in self._skips.items()
            ]
            self._outbox.append((SKIPS_TASK, str(uuid.uuid4()), skip_items, 0))
            self._skips = Counter()
            self._skip_times = {}
        self._oldest = time.monotonic()

    def _run(self) -> None:
        backoff = self.retry_initial
        while True:
            with self._lock:
                while True:
                    due = (self._buffer or self._skips) and (
                        len(self._buffer) >= self.max_batch
                        or self._flush_requested
                        or self._closed
                        or time.monotonic() - self._oldest >= self.max_delay
                    )
                    if due:
                        self._take_batches()
                    if self._outbox:
                        break
                    self._flush_requested = False
                    self._wake.notify_all()  # flush() waiters: nothing left
                    if self._closed:
                        return
                    waiting = self._buffer or self._skips
                    wait = self.max_delay - (time.monotonic() - self._oldest) if waiting else None
                    self._wake.wait(wait)
                task, batch_id, items, visits = self._outbox.popleft()  # (skips: 0 visits)
                kind = by_task(task)
                self._sending = visits
                self._sending_skips = task == SKIPS_TASK
                self._in_outbox -= visits
            try:
                if kind is not None and kind.merge is not None:
                    # outside the lock (record() never waits for it); a batch sent again under its
                    # id after a failure is merged again, which leaves the same figures
                    try:
                        items = kind.merge(items)
                    except Exception as exc:  # noqa: BLE001  an item the app's checks let through
                        items, visits = self._without_unsendable(kind, task, items, visits, exc)
                try:
                    self._send(task, batch_id, items)
                except EncodeError as exc:  # not the broker: an item that cannot be encoded
                    items, visits = self._without_unsendable(kind, task, items, visits, exc)
                    self._send(task, batch_id, items)
            except Exception as exc:  # broker unreachable: keep the batch (same id) and retry later
                with self._lock:
                    self._outbox.appendleft((task, batch_id, items, visits))
                    self._in_outbox += visits
                    self._sending = 0
                    self._sending_skips = False
                    self._stats["send_errors"] += 1
                    closing = self._closed
                log.warning("VisitRecorder: sending %d items failed (%s); retrying in %.1fs", len(items), exc, backoff)
                if closing:
                    return
                time.sleep(backoff)
                backoff = min(backoff * 2, self.retry_max)
                continue
            backoff = self.retry_initial
            with self._lock:
                self._sending = 0
                self._sending_skips = False
                self._stats["sent"] += visits
                self._stats["batches"] += 1 if visits else 0
                self._wake.notify_all()

    def _send(self, task: str, batch_id: str, items: list[dict[str, Any]]) -> None:
        """Publish one batch under its id (nothing, when refusals left it empty)."""
        if not items:
            return
        shown_args, shown_kwargs = masked_reprs([items], {})
        self.app.send_task(
            task,
            args=[items],
            task_id=batch_id,
            queue=self.queue,
            retry=False,
            serializer=COMPACT_JSON,
            argsrepr=shown_args,
            kwargsrepr=shown_kwargs,
        )

    def _without_unsendable(
        self, kind: Kind | None, task: str, items: list[dict[str, Any]], visits: int, error: BaseException
    ) -> tuple[list[dict[str, Any]], int]:
        """A batch that could not be merged or encoded (``error``: an item ``record()``'s checks
        let through, e.g. an app's own kind with a check missing) without the items that cannot
        be, each tried alone: those are refused (``stats()["refused"]``, logged), never retried
        for ever nor holding the others back. Returns the items left, merged as the batch would
        have been, and the recorded items they carry."""
        kept: list[dict[str, Any]] = []
        refused = 0
        for item in items:
            try:
                one = kind.merge([item]) if kind is not None and kind.merge is not None else [item]
                kombu_json.dumps(one, separators=(",", ":")).encode("utf-8")
            except Exception as exc:  # noqa: BLE001  refused alone, whatever it is
                refused += 1
                log.error("VisitRecorder: a %s item cannot be sent (%r): refused", task, exc)
                continue
            kept += one
        refused_visits = min(refused, visits)  # (skips carry no visits)
        with self._lock:
            self._stats["refused"] += refused_visits
        log.error("VisitRecorder: %d of %d %s items refused as unsendable (%r)", refused, len(items), task, error)
        return kept, visits - refused_visits

    def _after_fork_in_child(self) -> None:
        self._init_state()


_live: weakref.WeakSet[VisitRecorder] = weakref.WeakSet()


def _reset_after_fork() -> None:
    for recorder in list(_live):
        recorder._after_fork_in_child()


def _flush_every_recorder(close: bool = True) -> None:
    """Send what every live recorder holds (5 s at most each), and close it unless ``close`` is
    False (SIGTERM handled by the app, which may still record)."""
    for recorder in list(_live):
        try:
            if close:
                recorder.close(timeout=5.0)
            else:
                recorder.flush(timeout=5.0)
        except Exception:  # exiting, or in a signal handler: report, do not raise
            log.exception("VisitRecorder: flush at exit or on SIGTERM failed")


_sigterm_installed = False


def _install_sigterm_flush() -> None:
    """On SIGTERM, send what every live recorder holds, then do what SIGTERM did before: the
    app's own handler (the recorders stay open for the requests it still finishes; the exit
    closes them), or the default (they are closed: atexit does not run when the process dies of
    SIGTERM). Only from the main thread (Python's rule for signal handlers), once, and never over
    an ignored SIGTERM."""
    global _sigterm_installed
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous in (signal.SIG_IGN, None):
        return

    def on_sigterm(signum: int, frame: Any) -> None:
        if callable(previous):
            # the app's own handler decides: a server (uvicorn, gunicorn's workers) drains the
            # requests in flight first, whose visits come after this; flushed now, closed at exit
            _flush_every_recorder(close=False)
            previous(signum, frame)
        else:  # SIG_DFL: die of the signal, as without this handler
            _flush_every_recorder()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)
    _sigterm_installed = True


os.register_at_fork(after_in_child=_reset_after_fork)
atexit.register(_flush_every_recorder)


_shared: VisitRecorder | None = None
_shared_lock = threading.Lock()


def shared_recorder() -> VisitRecorder:
    """The process's ``VisitRecorder``, made on first use with the default settings.

    One per process: gunicorn/uWSGI workers forked from a master that made it each start with an
    empty buffer and their own sender thread (``VisitRecorder`` is fork-safe), and it is flushed
    at interpreter exit and on SIGTERM (see docs/producer.md). Middleware use it unless given
    a ``recorder``, and so do buffered ``.delay()`` calls (``buffer_delay``).
    """
    global _shared
    if _shared is None:
        with _shared_lock:
            if _shared is None:
                _shared = VisitRecorder()
    return _shared


def renew_shared_recorder(closed: VisitRecorder) -> VisitRecorder:
    """A new shared recorder in place of ``closed`` (unless another thread renewed it already).

    A SIGTERM closes every recorder at once (``VisitRecorder``'s handler), but a server that drains
    gracefully (gunicorn, uvicorn) still finishes the requests in flight: their visits go to a new
    recorder, itself flushed when the process exits (interpreter exit, or the SIGTERM the server
    raises again once drained)."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared is closed:
            _shared = VisitRecorder()
        return _shared


def buffer_delay(task: Any, args: Any, kwargs: Any, options: dict[str, Any]) -> Any:
    """With ``COUNTERS_DELAY_BUFFER`` on, take a plain ``.delay()`` of ``record_visit`` or
    ``incr_ranking`` (no options: no countdown, queue, producer...) into the shared recorder and
    return an ``AsyncResult`` at once; None to publish the call as its own message (the setting
    off, eager mode, the app's own Celery app not the package's, or any option given).

    The call is validated here (InvalidInput, as ``VisitRecorder.record`` raises it) and sent in
    the recorder's next ``record_visits`` / ``incr_rankings`` batch (``max_delay`` 0.2 s). What a
    crash of the app's process can lose is what the recorder holds: at most those 0.2 s of calls,
    more while the broker is unreachable (docs/producer.md). The result's id names no message."""
    kind = by_task(task.name)
    if (
        not get_settings().delay_buffer
        or options
        or kind is None
        or kind.item_task != task.name
        or kind.app_item is None
        or task.app is not package_app()
        or task.app.conf.task_always_eager
    ):
        return None
    call_shared(shared_recorder(), lambda recorder: recorder.add(kind, *(args or ()), **(kwargs or {})))
    return task.AsyncResult(str(uuid.uuid4()))


def call_shared(recorder: VisitRecorder, call: Callable[[VisitRecorder], Any]) -> VisitRecorder:
    """``call(recorder)`` on the shared recorder (``recorder``, as taken before); when a SIGTERM
    closed it while the process drains (``RuntimeError``), once more on a renewed shared recorder.
    Returns the recorder that took the call (the middleware keeps it)."""
    try:
        call(recorder)
    except RuntimeError:
        recorder = renew_shared_recorder(recorder)
        call(recorder)
    return recorder
