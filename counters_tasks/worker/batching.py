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

from .. import ranking
from ..errors import InvalidInput
from ..store.client import TRANSIENT_ERRORS
from ..visits import Visit, prepare_visit, write_groups

log = logging.getLogger(__name__)


def _arguments(request: Any, parse: Callable[..., Any], signature: str) -> Any:
    try:
        return parse(*(request.args or ()), **(request.kwargs or {}))
    except TypeError:
        raise InvalidInput(f"takes {signature}") from None


def write_visits(conn: Any, items: list[tuple[Visit, str]]) -> list[InvalidInput]:
    """Each message's visit as its own group (deduped under its message id), one round trip."""
    write_groups(conn, [([visit], message_id) for visit, message_id in items])
    return []


def write_ranking_events(conn: Any, items: list[tuple[ranking.RankingEvent, str]]) -> list[InvalidInput]:
    """One script call per message, all in one pipeline; a message whose board exists with other
    settings is refused there (nothing written for it): its error is returned."""
    results = ranking.write_events(conn, [([event], message_id) for event, message_id in items])
    return [result for result in results if isinstance(result, InvalidInput)]


KINDS = {
    "record_visit": (prepare_visit, "ip, path, session_id=None, ts=None", write_visits),
    "incr_ranking": (ranking.prepare_event, "board, member, amount=1, ts=None, period_hours=24, interval_hours=1",
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
