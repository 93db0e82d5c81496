"""What a batch of per-item messages (``record_visit``, ``incr_ranking``) does when the worker
applies it (the buffering, acknowledgement and task items are ``worker.batch_consumer``).

Apps that call ``.delay()`` once per page view get most of the gain of batches: the worker
buffers up to ``COUNTERS_WORKER_BATCH`` messages (or ``COUNTERS_WORKER_BATCH_MS``), claims them
for a batch and applies that as one group, as a ``record_visits`` chunk (``worker.claims``: each
message at most once, the batch finished by whichever of its messages comes back first if the
worker died half way).

Acks: the messages of a batch are acknowledged together after ``apply_batch`` returns
(``acks_late``). So it must not return before the items are in Redis: on a Redis connection or
timeout error (or BUSY, READONLY, OOM...) it waits and tries again (the messages stay
unacknowledged meanwhile, and the claims make any redelivery harmless); on any
other error its messages go one by one, and one that keeps failing is set aside (dead-lettered).
(A message alone applies the whole batch it was claimed by, so a write that keeps failing sets
aside every message of that batch; requeued from the dead letters once the cause is mended, the
first of them applies the batch and the others find it applied.)
A message with bad input is refused (logged, counted, acknowledged, nothing written for it);
the others of its batch are applied. The result names the messages not applied (refused or set
aside) by their position in the batch, so each message is reported on its own (task items).
Each batch's size, and the items it applied or skipped as applied before, are added to the
metrics' totals (``throughput``) in one call.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

from .. import payloads, refusals, throughput
from ..core.kind import Kind, short_name
from ..core.settings import get_settings
from ..core.validation import check_message_id
from ..errors import InvalidInput, MalformedMessage, SetAside
from ..store.client import RedisClient, is_transient
from . import claims
from .batch_consumer import FAILED

log = logging.getLogger(__name__)
T = TypeVar("T")


def parse_arguments(request: Any, kind: Kind) -> Any:
    """The prepared item of one message: its arguments must be a list and a dict that fit the
    kind's fields (a dict of arguments is never unpacked as positional names)."""
    args, kwargs = request.args or [], request.kwargs or {}
    if not isinstance(args, (list, tuple)) or not isinstance(kwargs, dict):
        raise MalformedMessage(f"arguments must be a list and a dict; takes {kind.signature}")
    try:
        fields = kind.bind(args, kwargs)
    except TypeError:
        raise MalformedMessage(f"takes {kind.signature}") from None
    assert kind.prepare is not None  # a kind with worker batches declares it
    return kind.prepare(fields)


def read_waiting(request: Any, kind: Kind, eager: bool, max_backoff: float) -> Any:
    """``parse_arguments`` of one message, a Redis error that passes waited out as a write's is
    (its check reads Redis too: the forgotten visitors' copy, ``store.tombstones``): a message
    is set aside for what it holds, never for a moment Redis was busy, read-only or away."""
    if eager:
        return parse_arguments(request, kind)
    read = functools.partial(parse_arguments, request, kind)
    return until_written(read, max_backoff, f"reading {kind.name} {request.id}")


Refusal = tuple[int, InvalidInput]
"""A message refused while written: its index in the items written, and why."""


def write_claimed(
    conn: RedisClient, kind: Kind, items: list[tuple[Any, str]], tally: throughput.Tally
) -> list[Refusal]:
    """The messages' prepared items claimed for a batch and written as one (``claims``: each
    message at most once), with any earlier batch a message was claimed by: cut into calls as a
    payload is (``payloads.plan_calls``: the kind's ``per_call`` positions, one call per
    ``call_key``), each under its id made from the batch id; one round trip to claim, one to
    write. A message whose call was refused as written (a board fixed to other settings) is
    refused, nothing written for it. Each item of an earlier batch, left journaled by a dead
    worker, is checked again first (``Kind.recheck``: its visitor forgotten since it was
    prepared) and refused alone; one whose message is not among ``items`` is counted here, as its
    message, when it comes back, finds its batch applied."""
    assert kind.to_entry is not None and kind.from_entry is not None  # a kind with worker batches declares them
    new, earlier, applied_before = claims.batches(
        conn, kind.name, [(message_id, kind.to_entry(item)) for item, message_id in items]
    )
    calls: list[tuple[list[payloads.Positioned], str | None]] = []
    senders: list[str] = []  # the message id of each item planned, by its index here
    rechecked: list[Refusal] = []
    journaled_ids = {batch_id for batch_id, _entries in earlier}
    for batch_id, entries in new + earlier:
        positioned = [(n, kind.from_entry(entry)) for n, (_message_id, entry) in enumerate(entries)]
        first = len(senders)
        senders += [message_id for message_id, _entry in entries]
        if kind.recheck is not None and batch_id in journaled_ids:
            positioned, late = _recheck(kind.recheck, positioned)
            rechecked += [(first + n, error) for n, error in late]
        calls += [
            ([(first + n, item) for n, item in call], call_id)
            for call, call_id in payloads.plan_calls(kind, positioned, batch_id, len(entries))
        ]
    mine = {message_id for _item, message_id in items}
    for n, error in rechecked:  # counted once per message (a write tried again counts it once)
        if senders[n] not in mine:
            refusals.count_refused(conn, short_name(kind.item_task or kind.name), senders[n], [(None, error)])
    refused = rechecked + payloads.write_planned(conn, kind, calls, tally)
    claims.done(conn, [batch_id for batch_id, _entries in new + earlier])
    tally.add(0, applied_before)  # once written: a write tried again counts them once
    refused_by_message = {senders[n]: error for n, error in refused}
    return [
        (index, refused_by_message[message_id])
        for index, (_item, message_id) in enumerate(items)
        if message_id in refused_by_message
    ]


def _recheck(
    recheck: Callable[[Any], None], positioned: list[payloads.Positioned]
) -> tuple[list[payloads.Positioned], list[tuple[int, InvalidInput]]]:
    """A journaled batch's items that still pass ``recheck``, and the others with why, by position."""
    kept, late = [], []
    for n, item in positioned:
        try:
            recheck(item)
        except InvalidInput as error:
            late.append((n, error))
        else:
            kept.append((n, item))
    return kept, late


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


def apply_batch(
    conn: RedisClient,
    kind: Kind,
    requests: list[Any],
    *,
    max_backoff: float = 30.0,
    give_up: Callable[[str, Any, BaseException], None] | None = None,
) -> dict[str, Any]:
    """Apply a batch of requests of ``kind``'s per-item task; returns how many were applied, refused and given up,
    and under ``FAILED`` why each message not applied was not, by its position in ``requests``.

    It returns only once every message is applied or deliberately refused (the batch's messages
    are acknowledged when it returns): a Redis error after which the write (or a message's
    check, which reads Redis too: ``read_waiting``) can succeed (Redis
    away, BUSY, READONLY, OOM, LOADING, a cluster failing over) is waited out; any other error
    makes each message of the batch go alone, so one message that cannot be applied holds no
    other back, and a message still failing after ``COUNTERS_MAX_ATTEMPTS`` tries is handed to
    ``give_up`` (dead-lettered by the task) instead of being acknowledged as if applied. A
    message whose reading itself breaks (not bad input: a check that raised something else) is
    set aside alone at once; and should anything else of the batch raise (a bug), every message
    is set aside rather than acknowledged unapplied (the claims make a requeued message that was
    applied count once).
    """
    eager = all((r.delivery_info or {}).get("is_eager") for r in requests)
    try:
        return _apply_batch(conn, kind, requests, eager, max_backoff, give_up)
    except Exception as exc:
        if eager or give_up is None:
            raise
        task = short_name(kind.item_task or kind.name)
        log.error("%s batch of %d failed (%r): every message set aside", task, len(requests), exc, exc_info=True)
        failed = {n: set_aside_now(give_up, kind, request, exc, max_backoff) for n, request in enumerate(requests)}
        return {"applied": 0, "refused": 0, "given_up": len(requests), FAILED: failed}


def set_aside_now(
    give_up: Callable[[str, Any, BaseException], None], kind: Kind, request: Any, exc: BaseException, max_backoff: float
) -> str:
    """One message of ``kind`` handed to ``give_up`` (the dead letters) at its first failure, until
    Redis takes it; returns why it was not applied (its batch result's ``FAILED`` text)."""
    until_written(
        functools.partial(give_up, kind.item_task or kind.name, request, exc), max_backoff, "setting a message aside"
    )
    return f"SetAside: {SetAside(1, exc)}"


def _apply_batch(
    conn: RedisClient,
    kind: Kind,
    requests: list[Any],
    eager: bool,
    max_backoff: float,
    give_up: Callable[[str, Any, BaseException], None] | None,
) -> dict[str, Any]:
    task = short_name(kind.item_task or kind.name)
    tally = throughput.Tally()
    items, refused = [], []  # (item, message id, position); (position, message id or None, error)
    outcome: dict[str, Any] = {"applied": 0, "refused": 0, "given_up": 0, FAILED: {}}
    for position, request in enumerate(requests):
        try:
            items.append((read_waiting(request, kind, eager, max_backoff), check_message_id(request.id), position))
        except InvalidInput as exc:
            refused.append((position, usable_id(request.id), exc))
        except Exception as exc:  # noqa: BLE001  a check that broke on this message: it alone is set aside
            if eager or give_up is None:
                raise
            log.error("%s %s could not be read (%r): set aside", task, usable_id(request.id), exc, exc_info=True)
            outcome["given_up"] += 1
            outcome[FAILED][position] = set_aside_now(give_up, kind, request, exc, max_backoff)

    def write_all(group: list[tuple[Any, str | None, int]]) -> None:
        attempts = 0
        backoff = Backoff(maximum=max_backoff)
        while True:
            try:
                late = write_claimed(
                    conn, kind, [(item, cast(str, message_id)) for item, message_id, _position in group], tally
                )
            except Exception as exc:  # noqa: BLE001  every failure is waited out, isolated or given up
                if eager:
                    raise
                if is_transient(exc):
                    log.warning(
                        "%s batch of %d waits for Redis (%s); next try in %.1fs", task, len(group), exc, backoff.next
                    )
                    backoff.wait()
                    continue
                if len(group) > 1:
                    log.warning("%s batch of %d failed (%r); applying its messages one by one", task, len(group), exc)
                    for one in group:
                        write_all([one])
                    return
                attempts += 1
                if attempts >= get_settings().max_attempts and give_up is not None:
                    log.error("%s %s failed %d times (%r): set aside", task, group[0][1], attempts, exc)
                    give_up(kind.item_task or task, requests[group[0][2]], exc)
                    outcome["given_up"] += 1
                    outcome[FAILED][group[0][2]] = f"SetAside: {SetAside(attempts, exc)}"
                    return
                log.warning(
                    "%s %s failed (%r); try %d of %d in %.1fs",
                    task,
                    group[0][1],
                    exc,
                    attempts,
                    get_settings().max_attempts,
                    backoff.next,
                )
                backoff.wait()
                continue
            refused.extend((group[index][2], group[index][1], error) for index, error in late)
            outcome["applied"] += len(group) - len(late)
            return

    if items:
        write_all(items)
    throughput.count(conn, kind.name, tally, batch=(task, len(requests)))  # for the metrics
    for position, message_id, error in refused:
        until_written(functools.partial(refusals.count_refused, conn, task, message_id, [(None, error)]), max_backoff)
        outcome[FAILED][position] = f"{type(error).__name__}: {error.reason}: {error}"
    if eager and refused:  # applied in-process (an app's tests): the caller sees the refusal
        raise refused[0][2]
    outcome["refused"] = len(refused)
    return outcome


def until_written(call: Callable[[], T], max_backoff: float, what: str = "counting a refusal") -> T:
    """Run ``call`` until Redis answers it, a Redis error that passes waited out (any other, and
    bad input, raised): a refused message is counted, or set aside, before it is acknowledged,
    and a message's check that reads Redis (``read_waiting``) is made, whatever the moment."""
    backoff = Backoff(maximum=max_backoff)
    while True:
        try:
            return call()
        except Exception as exc:  # noqa: BLE001  counted later is better than acknowledged uncounted
            if not is_transient(exc):
                raise
            log.warning("%s waits for Redis (%s); next try in %.1fs", what, exc, backoff.next)
            backoff.wait()
