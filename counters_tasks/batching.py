"""Worker-side batching of per-event messages (``record_visit``, ``incr_ranking``) with
celery-batches.

Apps that call ``.delay()`` once per page view get most of the gain of batches: the worker
buffers up to ``COUNTERS_WORKER_BATCH`` messages (or ``COUNTERS_WORKER_BATCH_MS``) and applies
them in one pipeline, each message still at most once under its own task id.

Acks: the messages of a batch are acknowledged together after ``apply_batch`` returns
(``acks_late``). So it must not return before the events are in Redis: on a Redis connection or
timeout error it waits and tries again (the messages stay unacknowledged meanwhile, and the
per-message dedupe makes any redelivery harmless). A message with bad input is refused (logged,
acknowledged, nothing written for it); the others of its batch are applied.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from . import ranking
from .errors import InvalidInput
from .redis_layer import TRANSIENT_ERRORS, execute_in_order, run_script
from .validation import check_amount, check_now, check_text
from .visits import prepare_visit, write_groups

log = logging.getLogger(__name__)



def _visit(ip: Any, path: Any, session_id: Any = None, ts: Any = None) -> Any:
    return prepare_visit(ip, path, session_id, ts)


def _ranking_event(board: Any, member: Any, amount: Any = 1, ts: Any = None, period_hours: Any = 24,
                   interval_hours: Any = 1) -> tuple[ranking.Ranking, str, int, int]:
    target = ranking.Ranking(None, board, period_hours, interval_hours)
    return target, check_text(member, "member"), check_amount(amount, "amount"), target.slot_of(check_now(ts))


def _arguments(request: Any, parse: Callable[..., Any], signature: str) -> Any:
    try:
        return parse(*(request.args or ()), **(request.kwargs or {}))
    except TypeError:
        raise InvalidInput(f"takes {signature}") from None


def write_visits(conn: Any, items: list[tuple[Any, str]]) -> list[InvalidInput]:
    write_groups(conn, [([visit], message_id) for visit, message_id in items])
    return []


def write_ranking_events(conn: Any, items: list[tuple[tuple[ranking.Ranking, str, int, int], str]]) -> list[InvalidInput]:
    """One script call per message, all in one pipeline; a message whose board exists with other
    settings is refused there (nothing written for it): its error is returned."""
    boards: dict[tuple[str, int, int], ranking.Ranking] = {}
    for (target, _m, _a, _s), _message_id in items:  # one board object per board, not per message
        key = (target.name, target.period_hours, target.interval_hours)
        if key not in boards:
            boards[key] = ranking.Ranking(conn, *key)

    def queue(pipe: Any) -> None:
        for (target, member, amount, slot), message_id in items:
            board = boards[(target.name, target.period_hours, target.interval_hours)]
            script_keys, args = board._incr_call([(member, amount, slot)], message_id)
            run_script(conn, "ranking_incr", script_keys, args, client=pipe)

    [replies] = execute_in_order(conn, queue)
    registered = set()
    refused = []
    for ((target, _m, _a, _s), _message_id), (status, unregistered, _late) in zip(items, replies, strict=True):
        board = boards[(target.name, target.period_hours, target.interval_hours)]
        if int(status) == -1:
            refused.append(board._settings_mismatch())
        elif int(unregistered) and target.name not in registered:
            registered.add(target.name)
            board._register()
    return refused


KINDS = {
    "record_visit": (_visit, "ip, path, session_id=None, ts=None", write_visits),
    "incr_ranking": (_ranking_event, "board, member, amount=1, ts=None, period_hours=24, interval_hours=1",
                     write_ranking_events),
}


def apply_batch(conn: Any, kind: str, requests: list[Any], *, max_backoff: float = 30.0) -> dict[str, int]:
    """Apply a batch of ``kind`` requests; returns how many were applied and refused."""
    parse, signature, write = KINDS[kind]
    eager = all((r.delivery_info or {}).get("is_eager") for r in requests)
    items = []
    refused = 0
    for request in requests:
        try:
            items.append((_arguments(request, parse, signature), request.id))
        except InvalidInput as exc:
            if eager:
                raise
            refused += 1
            log.warning("%s %s refused: %s", kind, request.id, exc)
    backoff = 0.5
    while True:
        try:
            late_refusals = write(conn, items) if items else []
            for exc in late_refusals:
                if eager:
                    raise exc
                log.warning("%s refused: %s", kind, exc)
            return {"applied": len(items) - len(late_refusals), "refused": refused + len(late_refusals)}
        except TRANSIENT_ERRORS as exc:
            if eager:
                raise
            log.warning("%s batch of %d waits for Redis (%s); next try in %.1fs", kind, len(items), exc, backoff)
            time.sleep(backoff)
            backoff = min(backoff * 2, max_backoff)
