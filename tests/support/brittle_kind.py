"""A kind whose check breaks (raises something that is not InvalidInput) on one value, declared
in the test tree alone: what a worker does with a message it cannot even read, when the others of
its batch can be applied. Like ``toy_kind``, but its per-item task's check raises RuntimeError
for the post ``BREAKS``, and its app-side item carries whatever ``extra`` it is given unchecked
(an app's own kind with a check missing: what ``VisitRecorder`` then cannot encode).

A worker runs its tasks with ``celery worker -I tests.support.brittle_kind``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from counters_tasks import tasks
from counters_tasks.core.kind import Kind, register
from counters_tasks.core.validation import check_item_time, check_text
from tests.support import toy_kind

BREAKS = "breaks-the-check"
"""The post whose check raises RuntimeError (a bug of the check, not bad input)."""


def prepare_like(fields: Mapping[str, Any]) -> list[Any]:
    """One like checked, as ``toy_kind``'s, but broken on ``BREAKS``."""
    if fields["post"] == BREAKS:
        raise RuntimeError("the check itself broke")
    return toy_kind.prepare_like(fields)


def app_like(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The item as the app sends it, ``extra`` passed on unchecked (any object)."""
    item = {"post": check_text(fields["post"], "post"), "ts": check_item_time(fields.get("ts"))}
    if fields.get("extra") is not None:
        item["extra"] = fields["extra"]
    return item


BRITTLE = register(
    Kind(
        name="brittle_like",
        fields=("post", "ts", "extra"),
        required=1,
        item_task="tests.brittle.like",
        worker_batches=True,
        payload_task="tests.brittle.likes",
        items_argument="likes",
        max_items=1000,
        prepare=prepare_like,
        app_item=app_like,
        to_entry=list,
        from_entry=list,
        write=toy_kind.write_likes,
        per_call=50,
    )
)

like, likes = tasks.define_kind_tasks(BRITTLE)
