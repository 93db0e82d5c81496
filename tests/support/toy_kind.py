"""A toy kind of thing counted, declared in the test tree alone (no edit to the package), as
docs/architecture.md "Adding a kind" says an app would: likes of a post, a total per post.

Importing this module registers the kind and its two tasks on the package's app:
``tests.toy.like`` (one like a message, the worker applies such messages in claimed batches) and
``tests.toy.likes`` (many in one message, what ``VisitRecorder.add`` sends). A worker runs them
with ``celery worker -I tests.support.toy_kind``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from counters_tasks import tasks
from counters_tasks.core.kind import Kind, register
from counters_tasks.core.validation import check_item_time, check_text

TOTALS = "toy:{likes}:totals"
"""HASH post -> likes (one hash tag: every key of a call in one slot)."""
SEEN = "toy:{likes}:seen:"
"""Prefix of a call's dedupe marker (a call applied once per its id)."""

WRITE = """
-- KEYS[1] the totals hash, KEYS[2] the call's marker ('' key name: no dedupe)
-- ARGV[1] the marker's ttl, ARGV[2..] the posts liked, one a like
-- returns 1 when written, 0 when the call was applied before
if KEYS[2] ~= KEYS[1] and not redis.call('SET', KEYS[2], 1, 'NX', 'EX', ARGV[1]) then return 0 end
for i = 2, #ARGV do redis.call('HINCRBY', KEYS[1], ARGV[i], 1) end
return 1
"""


def prepare_like(fields: Mapping[str, Any]) -> list[Any]:
    """One like (its fields as ``Kind.bind`` returns them) checked (InvalidInput) and prepared:
    ``[post, ts]``, JSON-able as it is."""
    return [check_text(fields["post"], "post"), check_item_time(fields.get("ts"))]


def app_like(fields: Mapping[str, Any]) -> dict[str, Any]:
    """One like checked in the app's process and written as an item of a ``tests.toy.likes`` message."""
    post, ts = prepare_like(fields)
    return {"post": post, "ts": ts}


def write_likes(plan: Any, calls: list[tuple[list[list[Any]], str | None]], tally: Any) -> Any:
    """Each call's likes added to the totals, at most once per its id, queued on the write's plan;
    once sent, the tally filled in from the replies (written now, or applied before)."""
    script = plan.conn.register_script(WRITE)
    written: list[Any] = []

    def queue(pipe: Any) -> None:
        for likes, call_id in calls:
            marker = TOTALS if call_id is None else SEEN + call_id
            script(keys=[TOTALS, marker], args=[3600, *(post for post, _ts in likes)], client=pipe)

    def outcome() -> list[None]:
        for (likes, _call_id), reply in zip(calls, written, strict=True):
            tally.add(len(likes), 0) if reply else tally.add(0, len(likes))
        return [None] * len(calls)

    plan.add(queue, written.extend)
    return outcome


TOY = register(
    Kind(
        name="toy_like",
        fields=("post", "ts"),
        required=1,
        item_task="tests.toy.like",
        worker_batches=True,
        payload_task="tests.toy.likes",
        items_argument="likes",
        max_items=1000,
        prepare=prepare_like,
        app_item=app_like,
        to_entry=list,
        from_entry=list,
        write=write_likes,
        per_call=50,
    )
)

like, likes = tasks.define_kind_tasks(TOY)


def totals(conn: Any) -> dict[str, int]:
    """Likes per post, as written."""
    return {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in conn.hgetall(TOTALS).items()}
