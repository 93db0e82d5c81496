"""Worker-side batching of per-visit ``record_visit`` messages (celery-batches).

Apps that call ``record_visit.delay()`` once per page view get most of the gain of batches:
the worker buffers up to ``COUNTERS_WORKER_BATCH`` messages (or ``COUNTERS_WORKER_BATCH_MS``)
and applies them in one pipeline, each message still at most once under its own task id.

Acks: the messages of a batch are acknowledged together after ``apply_requests`` returns
(``acks_late``). So it must not return before the visits are in Redis: on a Redis connection or
timeout error it waits and tries again (the messages stay unacknowledged meanwhile, and the
per-message dedupe makes any redelivery harmless). A message with bad input is refused (logged,
acknowledged, nothing written for it); the others of its batch are applied.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from redis.exceptions import BusyLoadingError, ConnectionError, TimeoutError

from .errors import InvalidInput
from .visits import Visit, prepare_visit, write_groups

log = logging.getLogger(__name__)

REDIS_TRANSIENT = (ConnectionError, TimeoutError, BusyLoadingError)


def _visit(ip: Any, path: Any, session_id: Any = None, ts: Any = None) -> Visit:
    return prepare_visit(ip, path, session_id, ts)


def visit_of(request: Any) -> Visit:
    """The validated visit of one ``record_visit`` message (InvalidInput when its arguments are bad)."""
    try:
        return _visit(*(request.args or ()), **(request.kwargs or {}))
    except TypeError:
        raise InvalidInput("record_visit takes ip, path, session_id=None, ts=None") from None


def apply_requests(conn: Any, requests: list[Any], *, max_backoff: float = 30.0) -> dict[str, int]:
    """Apply a batch of ``record_visit`` requests; returns how many were applied and refused."""
    eager = all((r.delivery_info or {}).get("is_eager") for r in requests)
    groups = []
    refused = 0
    for request in requests:
        try:
            groups.append(([visit_of(request)], request.id))
        except InvalidInput as exc:
            if eager:
                raise
            refused += 1
            log.warning("record_visit %s refused: %s", request.id, exc)
    backoff = 0.5
    while True:
        try:
            write_groups(conn, groups)
            return {"applied": len(groups), "refused": refused}
        except REDIS_TRANSIENT as exc:
            if eager:
                raise
            log.warning("record_visit batch of %d waits for Redis (%s); next try in %.1fs", len(groups), exc, backoff)
            time.sleep(backoff)
            backoff = min(backoff * 2, max_backoff)
