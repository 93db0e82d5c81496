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
    'to know a call was applied, read the figures it changes (docs/tasks.md, "What .delay() returns")'
)


class ResultsNotKept(NotImplementedError):
    """Asked an ``AsyncResult`` of the package's tasks for what is not kept (its state or value)."""


class NoResults(DisabledBackend):
    """Celery's disabled backend, answering every question about a result with ``ResultsNotKept``.

    Only public methods are overridden: those ``AsyncResult`` calls (``state``, ``ready``, ``info``,
    ``forget``, Celery 5.7's ``exists``: ``task_result_exists``) and those of
    ``BaseBackend`` that lead to the private hooks ``_get_task_meta_for`` and ``_forget``, which
    therefore stay unreached and need no override (checked in Celery 5.6.0, the floor of
    constraints/oldest.txt, and 5.7.0, that of the venv). The one other caller of
    ``_get_task_meta_for``, Celery 5.7's worker deciding whether a lost task had succeeded, asks
    only for a task that keeps its result and treats any error as "no" (the ``AttributeError``
    here, as it treated ``ResultsNotKept``). Should a Celery release call a hook from a new public
    method, ``tests/worker/test_results.py`` fails once it asks that method (as it does ``exists``).
    """

    def _not_kept(self, *args: Any, **kwargs: Any) -> Any:
        raise ResultsNotKept(RESULTS_NOT_KEPT)

    get_state = get_status = get_result = get_traceback = _not_kept
    get_task_meta = get_task_meta_for = _not_kept
    wait_for = wait_for_pending = get_many = iter_native = task_result_exists = _not_kept
    forget = _not_kept
