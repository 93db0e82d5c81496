"""The result backend of the package's Celery app (``result_backend`` in ``celery_defaults``):
none is kept, and it says so.

Counting is fire-and-forget: a counting task's message is acknowledged once its writes are in
Redis, and what it returns is worth nothing to its caller, so no result is stored anywhere
(``task_ignore_result``: no backend to run, no round trip a call). ``.delay()`` still returns an
``AsyncResult`` holding the message's id; asking it for a state, a value, readiness or to forget
raises ``ResultsNotKept`` at once. That is a ``NotImplementedError``, the kind Celery's own
disabled backend raises, so code written for it still catches it; but Celery's answer was an
``AttributeError`` about ``_get_task_meta_for`` for ``.state``, or "No result backend is
configured", which reads as a setting to fix. How to know a call was applied: docs/tasks.md.
"""

from __future__ import annotations

from typing import Any

from celery.backends.base import DisabledBackend

RESULTS_NOT_KEPT = (
    "counters_tasks keeps no task results: counting is fire-and-forget, each message acknowledged once its "
    "writes are in Redis. The AsyncResult of .delay() holds the message's id only (no state, no value); "
    "to know a call was applied, read the figures it changes (docs/tasks.md, \"What .delay() returns\")")


class ResultsNotKept(NotImplementedError):
    """Asked an ``AsyncResult`` of the package's tasks for what is not kept (its state or value)."""


class NoResults(DisabledBackend):
    """Celery's disabled backend, answering every question about a result with ``ResultsNotKept``."""

    def _not_kept(self, *args: Any, **kwargs: Any) -> Any:
        raise ResultsNotKept(RESULTS_NOT_KEPT)

    get_state = get_status = get_result = get_traceback = _not_kept
    get_task_meta = _get_task_meta_for = get_task_meta_for = _not_kept
    wait_for = wait_for_pending = get_many = iter_native = _not_kept
    forget = _forget = _not_kept
