"""The Lua scripts (``lua/<name>.lua``): loaded from the package once, registered once per client,
and run alone or queued on pipelines; ``execute_in_order`` runs stages of queued commands.
"""

from __future__ import annotations

import functools
import re
import weakref
from collections.abc import Callable
from importlib import resources
from typing import Any, TypeVar

from redis.cluster import ClusterPipeline
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from . import keys
from .client import RedisClient, as_str, is_cluster

_scripts: weakref.WeakKeyDictionary[Any, dict[str, Script]] = weakref.WeakKeyDictionary()


LIBRARIES = ("wrong_type", "dedupe_marker", "hash_total", "page_sketch", "day_open")
"""Functions of ``lua/lib/<name>.lua`` that a script gets prepended when it (or a library it
gets) calls them, in this order: a library only calls those before it."""


@functools.cache
def lua_source(name: str) -> str:
    """The text of ``lua/<name>.lua``, read from the package once, after the libraries it
    calls (``LIBRARIES``; scripts cannot load one another)."""
    lua = resources.files(__package__).joinpath("lua")
    body = lua.joinpath(f"{name}.lua").read_text()
    texts = {lib: lua.joinpath("lib").joinpath(f"{lib}.lua").read_text() for lib in LIBRARIES}
    used: list[str] = []
    for lib in reversed(LIBRARIES):  # a library's functions share its name; it calls only those before it
        if re.search(rf"\b{lib}\w*\(", body + "".join(texts[u] for u in used)):
            used.append(lib)
    return "".join(texts[lib] for lib in reversed(used)) + body


def script(conn: RedisClient, name: str) -> Script:
    """The Lua script ``lua/<name>.lua`` registered once for ``conn``."""
    per_client = _scripts.get(conn)
    if per_client is None:
        per_client = _scripts.setdefault(conn, {})
    found = per_client.get(name)
    if found is None:
        found = per_client[name] = conn.register_script(lua_source(name))
    return found


def run_script(conn: RedisClient, name: str, keys: list, args: list, client: Any = None) -> Any:
    """Run script ``name`` on ``client`` (default ``conn``; may be a pipeline of ``conn``).

    Queued on a pipeline it goes as a bare EVALSHA (no SCRIPT EXISTS round trip first);
    ``execute_in_order`` loads the script and runs the command again on a NOSCRIPT reply. A
    cluster pipeline cannot do that, so there the source goes as EVAL, to the node that serves
    its keys' slot (``script_node``).
    """
    registered = script(conn, name)
    if client is None or client is conn:
        try:
            return conn.evalsha(registered.sha, len(keys), *keys, *args)
        except NoScriptError:  # a restarted or failed-over server: load it once more
            conn.script_load(registered.script)
            return conn.evalsha(registered.sha, len(keys), *keys, *args)
    if is_cluster(conn):  # then ``client`` is a ClusterPipeline of it
        return client.execute_command(
            "EVAL", registered.script, len(keys), *keys, *args, target_nodes=script_node(client, keys)
        )
    return client.execute_command("EVALSHA", registered.sha, len(keys), *keys, *args)


def script_node(pipe: ClusterPipeline, keys: list) -> Any:
    """The node serving the slot of a script call's keys (they share one hash tag), for a cluster
    pipeline. Left to itself, redis-py 8's pipeline asks the client's default node where each
    EVAL goes (``COMMAND GETKEYS``, a round trip a call) and never replaces that node when it
    dies: a process whose default node was a killed master kept failing on it after the
    failover. A stale slot map still fails the call on its dead master, and that failure makes
    redis-py refresh the map, as for any command."""
    return pipe.nodes_manager.get_node_from_slot(pipe.keyslot(keys[0])) if keys else None


def _execute(conn: RedisClient, pipe: Any) -> list[Any]:
    """Execute ``pipe``; commands refused with NOSCRIPT (never run) run again once loaded."""
    stack = [args for args, _options in pipe.command_stack]
    replies = pipe.execute(raise_on_error=False)
    missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if missing:
        by_sha = {s.sha: s.script for per in _scripts.values() for s in per.values()}
        for sha in {stack[i][1] for i in missing}:
            conn.script_load(by_sha[as_str(sha)])
        retry = conn.pipeline(transaction=False)
        for i in missing:
            retry.execute_command(*stack[i])
        for i, reply in zip(missing, retry.execute(raise_on_error=False), strict=True):
            replies[i] = reply
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def execute_in_order(conn: RedisClient, *stages: Callable[[Any], Any]) -> list[list[Any]]:
    """Run stages of queued commands, each stage after the one before has been applied.

    ``stages`` are callables that queue commands on a pipeline. On one server a single
    non-transactional pipeline keeps order (one round trip); a cluster pipeline sends to all
    nodes at once, so there each stage gets its own pipeline. Returns each stage's replies.
    """
    if not is_cluster(conn):
        pipe = conn.pipeline(transaction=False)
        sizes = []
        for stage in stages:
            before = len(pipe)
            stage(pipe)
            sizes.append(len(pipe) - before)
        replies = _execute(conn, pipe)
        out, start = [], 0
        for size in sizes:
            out.append(replies[start : start + size])
            start += size
        return out
    out = []
    for stage in stages:
        pipe = conn.pipeline()
        stage(pipe)
        out.append(pipe.execute() if len(pipe) else [])
    return out


T = TypeVar("T")


class WritePlan:
    """What one write sends in one round trip, each part with the reader of its own replies: a
    data module adds a part (``add``: a function that queues commands on the pipeline, and one
    that reads their replies, in order), ``run`` sends every part and hands each reader its
    replies. No caller keeps track of which replies are whose. Every kind's write is one plan
    (``core.kind.Kind.write`` queues on it; ``write_through``), with the tables a feeder adds to
    that kind's writes (``core.table``) on the same plan."""

    def __init__(self, conn: RedisClient) -> None:
        self.conn = conn
        self._parts: list[tuple[Callable[[Any], Any], Callable[[list[Any]], None] | None]] = []

    def add(self, queue: Callable[[Any], Any], read: Callable[[list[Any]], None] | None = None) -> None:
        """Queue ``queue(pipe)``'s commands with the others; ``read`` gets their replies after ``run``."""
        self._parts.append((queue, read))

    def run(self) -> None:
        """Send every part (one round trip on one server), then call each part's reader."""
        spans: list[tuple[int, int]] = []

        def stage(pipe: Any) -> None:
            for queue, _read in self._parts:
                start = len(pipe)
                queue(pipe)
                spans.append((start, len(pipe)))

        [replies] = execute_in_order(self.conn, stage)
        for (_queue, read), (start, end) in zip(self._parts, spans, strict=True):
            if read is not None:
                read(replies[start:end])


def write_through(conn: RedisClient, queue: Callable[[WritePlan], Callable[[], T]]) -> T:
    """One write: ``queue(plan)`` adds its parts to a new ``WritePlan`` and returns how to read
    its outcome; the plan is sent (one round trip on one server) under the binding of ``conn``'s
    deployment (``keys.bound``: every key made with its tag key, confirmed once the write is made,
    ``TagKeyChanged`` when another won), then the outcome is read, still bound (a reader that
    sends again, as a ranking board being rebuilt does, makes its keys with the same tag key)."""
    with keys.bound(conn, write=True) as used:
        plan = WritePlan(conn)
        outcome = queue(plan)
        plan.run()
        keys.confirm_written(conn, used)
        return outcome()
