"""A toy table, declared in the test tree alone (no edit to the package, no edit to the toy kind),
as docs/architecture.md "Adding a table" says an app would: the toy kind's likes by hour, fed by
every write of ``tests.support.toy_kind``'s likes (its ``.delay()``, its batch task, a worker's
claimed batch) in the same round trip as the kind's own totals, listed by ``counters-tasks tables
--import tests.support.toy_table`` and read by ``counters-tasks table toy_hours --import ...``.

Importing this module registers the table (and the toy kind it is fed by).
"""

from __future__ import annotations

from typing import Any

from counters_tasks.core import table
from tests.support import toy_kind

HOURS = "toy:{likes}:hours"
"""HASH hour (epoch seconds of its start) -> likes in it (the toy kind's tag: one slot)."""
SEEN = "toy:{likes}:hours-seen:"
"""Prefix of a call's dedupe marker in this table (a call fed at most once per its id)."""

FEED = """
-- KEYS[1] the hours hash, KEYS[2] the call's marker (KEYS[1] again: no dedupe)
-- ARGV[1] the marker's ttl, ARGV[2..] the hour of each like
-- returns 1 when written, 0 when the call was fed before
if KEYS[2] ~= KEYS[1] and not redis.call('SET', KEYS[2], 1, 'NX', 'EX', ARGV[1]) then return 0 end
for i = 2, #ARGV do redis.call('HINCRBY', KEYS[1], ARGV[i], 1) end
return 1
"""


def feed_likes(plan: Any, calls: list[tuple[list[list[Any]], str | None]]) -> None:
    """Each call's likes counted in their hours, queued on the kind's write plan (``core.table.Feeder``)."""
    script = plan.conn.register_script(FEED)

    def queue(pipe: Any) -> None:
        for likes, call_id in calls:
            marker = HOURS if call_id is None else SEEN + call_id
            script(keys=[HOURS, marker], args=[3600, *(int(ts // 3600) * 3600 for _post, ts in likes)], client=pipe)

    plan.add(queue)


def read_hours(conn: Any) -> list[dict[str, Any]]:
    """Likes by hour, oldest first."""
    stored = {int(hour): int(likes) for hour, likes in conn.hgetall(HOURS).items()}
    return [{"hour": hour, "likes": stored[hour]} for hour in sorted(stored)]


TOY_HOURS = table.register(
    table.Table(
        name="toy_hours",
        what="the toy kind's likes by hour",
        module=__name__,
        keys=(table.StoredKey(HOURS, "HASH"),),
        tag="{likes}",
        fed_by=(toy_kind.TOY.name,),
        writers=("feed_likes, with every write of the toy kind",),
        readers=("counters-tasks table toy_hours",),
        retention=table.Retention("never deleted (a toy)"),
        erasure=table.Erasure("nothing of a visitor", False, "likes by hour only"),
        feeds={toy_kind.TOY.name: feed_likes},
        read=read_hours,
    )
)
