"""The Celery tasks of a kind (``core.kind.Kind``), made from its declaration: the per-item task
whose messages the worker applies in claimed batches (``WorkerBatches``, ``batch_apply``), and the
task that carries many items in one message (``CountingTask``, ``payloads.apply_payload``). Both
are thin: they hand the message to the one path of every kind. ``counters_tasks.tasks`` makes the
package's this way; an app makes its own kind's with ``define_tasks`` (docs/architecture.md,
"Adding a kind").
"""

from __future__ import annotations

import inspect
from typing import Any

from .. import payloads
from ..core.kind import Kind, short_name
from ..store.client import get_redis
from . import batch_apply
from .task_bases import CountingTask, WorkerBatches, counting, set_aside_request


def define_tasks(app: Any, kind: Kind, item_base: type[WorkerBatches] = WorkerBatches) -> tuple[Any, Any]:
    """Register ``kind``'s tasks on ``app``: ``(its per-item task, its payload task)``, each None
    when the kind declares none (or no ``write``, for a kind written its own way).
    ``item_base``: the per-item task's base (a ``WorkerBatches``; the package's app side gives
    one that buffers ``.delay()``, ``tasks.DelayBuffered``)."""
    item_task = payload_task = None
    if kind.item_task is not None and kind.worker_batches:
        item_task = app.task(name=kind.item_task, base=item_base, bind=True)(_item_runner(kind))
    if kind.payload_task is not None and kind.write is not None:
        payload_task = app.task(name=kind.payload_task, base=CountingTask, bind=True)(counting(_payload_runner(kind)))
    return item_task, payload_task


def _item_runner(kind: Kind) -> Any:
    def run(self: WorkerBatches, requests: list[Any]) -> dict[str, Any]:
        return batch_apply.apply_batch(get_redis(), kind, requests, give_up=set_aside_request)

    run.__name__ = run.__qualname__ = short_name(kind.item_task or kind.name)
    run.__doc__ = (
        f"Called as ``{run.__name__}.delay({kind.signature})``; the worker applies such messages "
        f"in batches (``worker.batch_apply``)."
    )
    return run


def _payload_runner(kind: Kind) -> Any:
    argument = kind.items_argument
    parameter = inspect.Parameter
    signature = inspect.Signature(
        [parameter("self", parameter.POSITIONAL_OR_KEYWORD), parameter(argument, parameter.POSITIONAL_OR_KEYWORD)]
    )

    def run(self: CountingTask, *args: Any, **kwargs: Any) -> int:
        items = signature.bind(self, *args, **kwargs).arguments[argument]  # TypeError when the call does not fit
        return payloads.apply_payload(get_redis(), kind, items, message_id=self.message_id)

    run.__signature__ = signature  # type: ignore[attr-defined]  # what Celery checks a call against
    run.__name__ = run.__qualname__ = short_name(kind.payload_task or kind.name)
    run.__doc__ = (
        f"Many {kind.items_argument} in one message (``{argument}``: a list of dicts of "
        f"{', '.join(kind.fields)}); the task id is the batch id."
    )
    return run
