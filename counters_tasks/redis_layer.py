"""The shared Redis layer: one bounded connection pool per process, and the Lua scripts.

The client is made on first use (not at import) and made again in a forked child, so prefork
workers never share sockets. hiredis is used by redis-py when it is installed.
"""

from __future__ import annotations

import os
import threading
import weakref
from importlib import resources
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from .settings import Settings, get_settings

_lock = threading.Lock()
_client: Any = None
_client_pid: int | None = None


def _make_client(settings: Settings) -> Any:
    options: dict[str, Any] = {
        "socket_timeout": settings.socket_timeout,
        "socket_connect_timeout": settings.socket_timeout,
        "health_check_interval": 30,
    }
    if settings.redis_cluster:
        from redis.cluster import RedisCluster

        return RedisCluster.from_url(settings.redis_url, max_connections=settings.pool_size, **options)
    pool = redis.BlockingConnectionPool.from_url(
        settings.redis_url, max_connections=settings.pool_size, timeout=settings.socket_timeout, **options
    )
    return redis.Redis(connection_pool=pool)


def get_redis() -> Any:
    """The process-wide client for the counters data (``redis.Redis`` or ``RedisCluster``)."""
    global _client, _client_pid
    pid = os.getpid()
    if _client is None or _client_pid != pid:
        with _lock:
            if _client is None or _client_pid != pid:
                _client = _make_client(get_settings())
                _client_pid = pid
    return _client


def reset() -> None:
    """Drop the client (its pool is closed if it belongs to this process)."""
    global _client, _client_pid
    with _lock:
        if _client is not None and _client_pid == os.getpid():
            try:
                _client.close()
            except Exception:  # closing is best effort
                pass
        _client, _client_pid = None, None


def is_cluster(conn: Any) -> bool:
    from redis.cluster import RedisCluster

    return isinstance(conn, RedisCluster)


_sources: dict[str, str] = {}
_scripts: "weakref.WeakKeyDictionary[Any, dict[str, Script]]" = weakref.WeakKeyDictionary()


def script(conn: Any, name: str) -> Script:
    """The Lua script ``lua/<name>.lua`` registered once for ``conn``."""
    per_client = _scripts.get(conn)
    if per_client is None:
        per_client = _scripts.setdefault(conn, {})
    found = per_client.get(name)
    if found is None:
        source = _sources.get(name)
        if source is None:
            source = _sources[name] = resources.files(__package__).joinpath("lua", f"{name}.lua").read_text()
        found = per_client[name] = conn.register_script(source)
    return found


def run_script(conn: Any, name: str, keys: list, args: list, client: Any = None) -> Any:
    """Run script ``name`` on ``client`` (default ``conn``; may be a pipeline of ``conn``).

    A cluster pipeline cannot load scripts on a miss, so there the source goes as EVAL.
    """
    registered = script(conn, name)
    client = conn if client is None else client
    if _is_cluster_pipeline(client):
        # ClusterPipeline.eval() takes no arguments (redis-py 6): queue the command itself
        return client.execute_command("EVAL", registered.script, len(keys), *keys, *args)
    queued = getattr(client, _QUEUED_SCRIPTS, None)
    if queued is not None:
        # a pipeline of execute_in_order: plain EVALSHA, so redis-py sends no SCRIPT EXISTS
        # round trip first; execute_in_order re-sends any NOSCRIPT reply as EVAL
        queued[len(client)] = (registered.script, keys, args)
        return client.execute_command("EVALSHA", registered.sha, len(keys), *keys, *args)
    return registered(keys=keys, args=args, client=client)


_QUEUED_SCRIPTS = "_counters_queued_scripts"


def _is_cluster_pipeline(client: Any) -> bool:
    from redis.cluster import ClusterPipeline

    return isinstance(client, ClusterPipeline)


def execute_in_order(conn: Any, *stages: Any) -> list[list[Any]]:
    """Run stages of queued commands, each stage after the one before has been applied.

    ``stages`` are callables that queue commands on a pipeline. On one server a single
    non-transactional pipeline keeps order (one round trip); a cluster pipeline sends to all
    nodes at once, so there each stage gets its own pipeline. Returns each stage's replies.
    """
    if not is_cluster(conn):
        pipe = conn.pipeline(transaction=False)
        queued: dict[int, tuple[str, list, list]] = {}
        setattr(pipe, _QUEUED_SCRIPTS, queued)
        sizes = []
        for stage in stages:
            before = len(pipe)
            stage(pipe)
            sizes.append(len(pipe) - before)
        replies = _execute_resending_noscript(conn, pipe, queued)
        out, start = [], 0
        for size in sizes:
            out.append(replies[start:start + size])
            start += size
        return out
    out = []
    for stage in stages:
        pipe = conn.pipeline()
        stage(pipe)
        out.append(pipe.execute() if len(pipe) else [])
    return out


def _execute_resending_noscript(conn: Any, pipe: Any, queued: dict[int, tuple[str, list, list]]) -> list[Any]:
    """Execute ``pipe`` (one round trip); scripts the server did not know (first use, restart,
    SCRIPT FLUSH) did nothing, so only they are sent again, as EVAL, in their order.

    Such a re-sent script lands after the pipeline's later commands (e.g. a registry ZADD after
    its counter's data): only on a script-cache miss, and harmless for this package's stages.
    """
    replies = pipe.execute(raise_on_error=False)
    missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError) and i in queued]
    if missing:
        again = conn.pipeline(transaction=False)
        for i in missing:
            source, keys, args = queued[i]
            again.eval(source, len(keys), *keys, *args)
        for i, reply in zip(missing, again.execute(raise_on_error=False), strict=True):
            replies[i] = reply
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def as_str(value: Any) -> str:
    """A reply as ``str`` whether or not the client decodes responses."""
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else str(value)
