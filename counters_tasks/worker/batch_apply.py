"""What a batch of per-event messages (``record_visit``, ``incr_ranking``) does when the worker
applies it (the buffering, acknowledgement and task events are ``worker.batch_consumer``).

Apps that call ``.delay()`` once per page view get most of the gain of batches: the worker
buffers up to ``COUNTERS_WORKER_BATCH`` messages (or ``COUNTERS_WORKER_BATCH_MS``), claims them
for a batch and applies that as one group, as a ``record_visits`` chunk (``worker.claims``: each
message at most once, the batch finished by whichever of its messages comes back first if the
worker died half way).

Acks: the messages of a batch are acknowledged together after ``apply_batch`` returns
(``acks_late``). So it must not return before the events are in Redis: on a Redis connection or
timeout error (or BUSY, READONLY, OOM...) it waits and tries again (the messages stay
unacknowledged meanwhile, and the claims make any redelivery harmless); on any
other error its messages go one by one, and one that keeps failing is set aside (dead-lettered).
(A message alone applies the whole batch it was claimed by, so a write that keeps failing sets
aside every message of that batch; requeued from the dead letters once the cause is mended, the
first of them applies the batch and the others find it applied.)
A message with bad input is refused (logged, counted, acknowledged, nothing written for it);
the others of its batch are applied. The result names the messages not applied (refused or set
aside) by their position in the batch, so each message is reported on its own (task events).
Each batch's size, and the events it applied or skipped as applied before, are added to the
metrics' totals (``throughput``) in one call.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from .. import ranking, ranking_events, refusals, throughput
from ..core.settings import get_settings
from ..core.validation import check_message_id
from ..errors import InvalidInput, MalformedMessage, SetAside
from ..store.client import RedisClient, is_transient
from ..store.keys import chunk_ids
from ..visits import CHUNK, Visit, prepare_visit, visit_entry, visit_from_entry, write_groups
from . import claims
from .batch_consumer import FAILED

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


def write_visit_batch(conn: RedisClient, items: list[tuple[Visit, str]], tally: throughput.Tally) -> list[Refusal]:
    """The messages' visits claimed for a batch and applied as one group (``claims``: each message
    at most once, in chunks of CHUNK visits under ids made from the batch id), with any earlier
    batch a message was claimed by; one round trip to claim, one to apply."""
    found, applied_before = claims.batches(conn, "visit", [(message_id, visit_entry(visit)) for visit, message_id in items])
    groups: list[tuple[list[Visit], str | None]] = []
    for batch_id, entries in found:
        visits = [visit_from_entry(item) for _message_id, item in entries]
        starts = range(0, len(visits), CHUNK)
        groups += [(visits[first:first + CHUNK], chunk_id)
                   for first, chunk_id in zip(starts, chunk_ids(batch_id, len(starts)), strict=True)]
    write_groups(conn, groups, tally)
    claims.done(conn, [batch_id for batch_id, _entries in found])
    tally.add(0, applied_before)  # once written: a write tried again counts them once
    return []


def write_event_batch(conn: RedisClient, items: list[tuple[ranking.RankingEvent, str]],
                         tally: throughput.Tally) -> list[Refusal]:
    """The messages' events claimed for a batch and applied as one (``claims``), with any earlier
    batch a message was claimed by: a call per board and EVENTS_PER_CALL events, each under its
    own id made from the batch id. A message whose board exists with other settings is refused
    (nothing written for it)."""
    found, applied_before = claims.batches(conn, "ranking", [(message_id, ranking_events.event_entry(event))
                                                             for event, message_id in items])
    calls: list[tuple[list[ranking.RankingEvent], str | None]] = []
    senders: list[list[str]] = []  # the message ids of each call's events
    for batch_id, entries in found:
        per_call: dict[tuple[int, ranking.Board], list[tuple[str, ranking.RankingEvent]]] = {}
        for n, (message_id, item) in enumerate(entries):
            event = ranking_events.event_from_entry(item)
            per_call.setdefault((n // ranking_events.EVENTS_PER_CALL, event.board), []).append((message_id, event))
        for call, call_id in zip(per_call.values(), chunk_ids(batch_id, len(per_call)), strict=True):
            calls.append(([event for _m, event in call], call_id))
            senders.append([message_id for message_id, _e in call])
    results = ranking.write_events(conn, calls, tally)
    claims.done(conn, [batch_id for batch_id, _entries in found])
    tally.add(0, applied_before)  # once written: a write tried again counts them once
    refused = {message_id: result for ids, result in zip(senders, results, strict=True)
               if isinstance(result, InvalidInput) for message_id in ids}
    return [(index, refused[message_id]) for index, (_event, message_id) in enumerate(items) if message_id in refused]


KINDS: dict[str, tuple[Callable[..., Any], str, Callable[..., list[Refusal]]]] = {
    "record_visit": (prepare_visit, "ip, path, session_id=None, ts=None, site=None, referrer=None, utm=None",
                     write_visit_batch),
    "incr_ranking": (ranking_events.prepare_event,
                     "board, member, amount=1, ts=None, period_hours=24, interval_hours=1, site=None",
                     write_event_batch),
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


def apply_batch(conn: RedisClient, kind: str, requests: list[Any], *, max_backoff: float = 30.0,
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

    def write_all(group: list[tuple[Any, str | None, int]]) -> None:
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
        until_recorded(functools.partial(refusals.record, conn, kind, message_id, [(None, error)]), max_backoff)
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
