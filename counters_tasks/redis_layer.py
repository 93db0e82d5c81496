"""The shared Redis layer: one bounded connection pool per process, and the Lua scripts.

The client is made on first use (not at import) and made again in a forked child, so prefork
workers never share sockets. hiredis is used by redis-py when it is installed.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from importlib import resources
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import (
    BusyLoadingError,
    ClusterDownError,
    ConnectionError,
    NoScriptError,
    SlotNotCoveredError,
    TimeoutError,
    TryAgainError,
)

from .settings import Settings, get_settings

CLUSTER_RETRIES = 3
"""Extra tries of a command on a cluster after a connection error or CLUSTERDOWN (slot map refreshed)."""

TRANSIENT_ERRORS = (ConnectionError, TimeoutError, BusyLoadingError,
                    ClusterDownError, TryAgainError, SlotNotCoveredError)  # a cluster failing over
"""Errors after which the same write, tried again later, can succeed: tasks retry on them."""

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
        from redis.backoff import ExponentialWithJitterBackoff
        from redis.cluster import RedisCluster
        from redis.retry import Retry

        # A connection error, timeout or CLUSTERDOWN makes redis-py refresh the slot map and try
        # again, CLUSTER_RETRIES times (MOVED/ASK/TRYAGAIN are followed apart from these). Those
        # tries are immediate, so they ride through a slot migration or a stale map, not a
        # failover (node timeout + election, seconds): the tasks retry that with backoff.
        return RedisCluster.from_url(
            settings.redis_url, max_connections=settings.pool_size, reinitialize_steps=5,
            retry=Retry(ExponentialWithJitterBackoff(base=0.1, cap=2), CLUSTER_RETRIES), **options,
        )
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
_scripts: weakref.WeakKeyDictionary[Any, dict[str, Script]] = weakref.WeakKeyDictionary()


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

    Queued on a pipeline it goes as a bare EVALSHA (no SCRIPT EXISTS round trip first);
    ``execute_in_order`` loads the script and runs the command again on a NOSCRIPT reply. A
    cluster pipeline cannot do that, so there the source goes as EVAL.
    """
    registered = script(conn, name)
    if client is None or client is conn:
        try:
            return conn.evalsha(registered.sha, len(keys), *keys, *args)
        except NoScriptError:  # a restarted or failed-over server: load it once more
            conn.script_load(registered.script)
            return conn.evalsha(registered.sha, len(keys), *keys, *args)
    if _is_cluster_pipeline(client):
        return client.execute_command("EVAL", registered.script, len(keys), *keys, *args)
    return client.evalsha(registered.sha, len(keys), *keys, *args)


def _is_cluster_pipeline(client: Any) -> bool:
    from redis.cluster import ClusterPipeline

    return isinstance(client, ClusterPipeline)


def _execute(conn: Any, pipe: Any) -> list[Any]:
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


def execute_in_order(conn: Any, *stages: Callable[[Any], Any]) -> list[list[Any]]:
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
            out.append(replies[start:start + size])
            start += size
        return out
    out = []
    for stage in stages:
        pipe = conn.pipeline()
        stage(pipe)
        out.append(pipe.execute() if len(pipe) else [])
    return out


def as_str(value: Any) -> str:
    """A reply as ``str`` whether or not the client decodes responses."""
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else str(value)
