"""Worker-side batching of per-event messages (``record_visit``, ``incr_ranking``): what a batch
of them does (the buffering, acknowledgement and task events are ``worker.batches``).

Apps that call ``.delay()`` once per page view get most of the gain of batches: the worker
buffers up to ``COUNTERS_WORKER_BATCH`` messages (or ``COUNTERS_WORKER_BATCH_MS``) and applies
them in one pipeline, each message still at most once under its own task id.

Acks: the messages of a batch are acknowledged together after ``apply_batch`` returns
(``acks_late``). So it must not return before the events are in Redis: on a Redis connection or
timeout error (or BUSY, READONLY, OOM...) it waits and tries again (the messages stay
unacknowledged meanwhile, and the per-message dedupe makes any redelivery harmless); on any
other error its messages go one by one, and one that keeps failing is set aside (dead-lettered).
A message with bad input is refused (logged, counted, acknowledged, nothing written for it);
the others of its batch are applied. The result names the messages not applied (refused or set
aside) by their position in the batch, so each message is reported on its own (task events).
Each batch's size, and the events it applied or skipped as applied before, are added to the
metrics' totals (``throughput``) in one call.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from .. import ranking, refusals, throughput
from ..core.settings import get_settings
from ..core.validation import check_message_id
from ..errors import InvalidInput, MalformedMessage, SetAside
from ..store.client import is_transient
from ..visits import Visit, prepare_visit, write_groups
from .batches import FAILED

log = logging.getLogger(__name__)


def parse_arguments(request: Any, parse: Callable[..., Any], signature: str) -> Any:
    """The prepared item of one message: its arguments must be a list and a dict that fit the
    task's ``signature`` (a dict of arguments is never unpacked as positional names)."""
    args, kwargs = request.args or [], request.kwargs or {}
    if not isinstance(args, (list, tuple)) or not isinstance(kwargs, dict):
        raise MalformedMessage(f"arguments must be a list and a dict; takes {signature}")
    try:
        return parse(*args, **kwargs)
    except TypeError:
        raise MalformedMessage(f"takes {signature}") from None


Refusal = tuple[int, InvalidInput]
"""A message refused while written: its index in the items written, and why."""


def write_visits(conn: Any, items: list[tuple[Visit, str]], tally: throughput.Tally) -> list[Refusal]:
    """Each message's visit as its own group (deduped under its message id), one round trip."""
    write_groups(conn, [([visit], message_id) for visit, message_id in items], tally)
    return []


def write_ranking_events(conn: Any, items: list[tuple[ranking.RankingEvent, str]],
                         tally: throughput.Tally) -> list[Refusal]:
    """One script call per message, all in one pipeline; a message whose board exists with other
    settings is refused there (nothing written for it)."""
    results = ranking.write_events(conn, [([event], message_id) for event, message_id in items], tally)
    return [(index, result) for index, result in enumerate(results) if isinstance(result, InvalidInput)]


KINDS = {
    "record_visit": (prepare_visit, "ip, path, session_id=None, ts=None", write_visits),
    "incr_ranking": (ranking.prepare_event, "board, member, amount=1, ts=None, period_hours=24, interval_hours=1",
                     write_ranking_events),
}
EVENT_KIND = {"record_visit": "visit", "incr_ranking": "ranking"}
"""What each kind of message counts as in the throughput totals."""


def usable_id(value: Any) -> str | None:
    """A message id fit for dedupe and logs, or None when it is not one."""
    try:
        return check_message_id(value)
    except InvalidInput:
        return None


class Backoff:
    """Waits that double from ``initial`` up to ``maximum`` seconds."""

    def __init__(self, initial: float = 0.5, maximum: float = 30.0) -> None:
        self.next, self.maximum = initial, maximum

    def wait(self) -> float:
        waited = self.next
        time.sleep(waited)
        self.next = min(self.next * 2, self.maximum)
        return waited


def apply_batch(conn: Any, kind: str, requests: list[Any], *, max_backoff: float = 30.0,
                give_up: Callable[[str, Any, BaseException], None] | None = None) -> dict[str, Any]:
    """Apply a batch of ``kind`` requests; returns how many were applied, refused and given up,
    and under ``FAILED`` why each message not applied was not, by its position in ``requests``.

    It returns only once every message is applied or deliberately refused (the batch's messages
    are acknowledged when it returns): a Redis error after which the write can succeed (Redis
    away, BUSY, READONLY, OOM, LOADING, a cluster failing over) is waited out; any other error
    makes each message of the batch go alone, so one message that cannot be applied holds no
    other back, and a message still failing after ``COUNTERS_MAX_ATTEMPTS`` tries is handed to
    ``give_up`` (dead-lettered by the task) instead of being acknowledged as if applied.
    """
    parse, signature, write = KINDS[kind]
    eager = all((r.delivery_info or {}).get("is_eager") for r in requests)
    tally = throughput.Tally()
    items, refused = [], []  # (item, message id, position); (position, message id or None, error)
    for position, request in enumerate(requests):
        try:
            items.append((parse_arguments(request, parse, signature), check_message_id(request.id), position))
        except InvalidInput as exc:
            refused.append((position, usable_id(request.id), exc))
    outcome: dict[str, Any] = {"applied": 0, "refused": 0, "given_up": 0, FAILED: {}}

    def write_all(group: list[tuple[Any, str, int]]) -> None:
        attempts = 0
        backoff = Backoff(maximum=max_backoff)
        while True:
            try:
                late = write(conn, [(item, message_id) for item, message_id, _position in group], tally)
            except Exception as exc:  # noqa: BLE001  every failure is waited out, isolated or given up
                if eager:
                    raise
                if is_transient(exc):
                    log.warning("%s batch of %d waits for Redis (%s); next try in %.1fs", kind, len(group), exc,
                                backoff.next)
                    backoff.wait()
                    continue
                if len(group) > 1:
                    log.warning("%s batch of %d failed (%r); applying its messages one by one", kind, len(group), exc)
                    for one in group:
                        write_all([one])
                    return
                attempts += 1
                if attempts >= get_settings().max_attempts and give_up is not None:
                    log.error("%s %s failed %d times (%r): set aside", kind, group[0][1], attempts, exc)
                    give_up(kind, requests[group[0][2]], exc)
                    outcome["given_up"] += 1
                    outcome[FAILED][group[0][2]] = f"SetAside: {SetAside(attempts, exc)}"
                    return
                log.warning("%s %s failed (%r); try %d of %d in %.1fs", kind, group[0][1], exc, attempts,
                            get_settings().max_attempts, backoff.next)
                backoff.wait()
                continue
            refused.extend((group[index][2], group[index][1], error) for index, error in late)
            outcome["applied"] += len(group) - len(late)
            return

    if items:
        write_all(items)
    throughput.count(conn, EVENT_KIND[kind], tally, batch=(kind, len(requests)))  # for the metrics
    for position, message_id, error in refused:
        until_recorded(lambda m=message_id, e=error: refusals.record(conn, kind, m, [(None, e)]), max_backoff)
        outcome[FAILED][position] = f"{type(error).__name__}: {error.reason}: {error}"
    if eager and refused:  # applied in-process (an app's tests): the caller sees the refusal
        raise refused[0][2]
    outcome["refused"] = len(refused)
    return outcome


def until_recorded(record: Callable[[], None], max_backoff: float) -> None:
    """Run ``record`` (a refusal's count) until Redis takes it: a refused message is counted
    before it is acknowledged."""
    backoff = Backoff(maximum=max_backoff)
    while True:
        try:
            return record()
        except Exception as exc:  # noqa: BLE001  counted later is better than acknowledged uncounted
            if not is_transient(exc):
                raise
            log.warning("counting a refusal waits for Redis (%s)", exc)
            backoff.wait()
