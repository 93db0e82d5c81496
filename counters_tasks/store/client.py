"""The Redis client of the counters: one bounded connection pool per process.

The client is made on first use (not at import), made again in a forked child (prefork workers
never share sockets) and when the settings are read afresh (``reset_settings``). hiredis is used
by redis-py when it is installed, and its commands are packed by ``ArgsPacker``.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import TYPE_CHECKING, Any, TypeAlias

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.cluster import RedisCluster
from redis.connection import HIREDIS_AVAILABLE, HiredisRespSerializer
from redis.exceptions import (
    BusyLoadingError,
    ClusterDownError,
    ConnectionError,
    MasterDownError,
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
    SlotNotCoveredError,
    TimeoutError,
    TryAgainError,
)
from redis.retry import Retry

if HIREDIS_AVAILABLE:
    import hiredis

if TYPE_CHECKING:
    from typing_extensions import TypeIs  # typing.TypeIs from Python 3.13

from ..core.settings import Settings, get_settings
from ..errors import TransientError

RedisClient: TypeAlias = "redis.Redis | RedisCluster"
"""A client of the counters' Redis: ``redis.Redis`` on one server, ``RedisCluster`` on a cluster
(what ``get_redis`` returns). A string alias: annotations under ``from __future__ import
annotations`` may name it at run time on any supported Python."""

CLUSTER_RETRIES = 3
"""Extra tries of a command on a cluster after a connection error or CLUSTERDOWN (slot map refreshed)."""

TRANSIENT_ERRORS = (
    ConnectionError,
    TimeoutError,
    BusyLoadingError,  # away, slow, LOADING
    ClusterDownError,
    TryAgainError,
    SlotNotCoveredError,  # a cluster failing over
    ReadOnlyError,
    MasterDownError,  # a replica promoted, or its master gone
    OutOfMemoryError,  # OOM under maxmemory + noeviction: frees up when consumers catch up
    NoScriptError,
)  # a restarted server lost its scripts: they are loaded again
"""Errors after which the same write, tried again later, can succeed: tasks retry on them."""

TRANSIENT_REPLIES = ("BUSY", "LOADING", "READONLY", "OOM", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "NOSCRIPT")
"""Error replies (their first word) of the same kind, which redis-py may raise as a plain ResponseError
(BUSY, a long script running, has no class of its own)."""


def is_transient(exc: BaseException) -> bool:
    """Whether the write that raised ``exc`` can succeed when tried again later: Redis away or
    busy, a write made under a lost tag key (``TransientError``), not bad input or a bug."""
    if isinstance(exc, (*TRANSIENT_ERRORS, TransientError)):
        return True
    return isinstance(exc, ResponseError) and str(exc).split(" ", 1)[0] in TRANSIENT_REPLIES


_lock = threading.Lock()
_client: RedisClient | None = None
_client_pid: int | None = None
_client_settings: Settings | None = None


class ArgsPacker(HiredisRespSerializer):
    """redis-py's hiredis packer without its pass over every argument in Python: the package's
    arguments are str, bytes and numbers, which hiredis packs as they are (a script call of a
    batch carries hundreds; that pass was a tenth of a worker's CPU a visit). A command whose
    name holds a space (``SCRIPT LOAD``), or an argument hiredis refuses (a memoryview), goes the
    stock way."""

    def pack(self, *args: Any) -> list[bytes]:
        head = args[0]
        if (b" " if isinstance(head, bytes) else " ") not in head:
            try:
                return [hiredis.pack_command(args)]
            except TypeError:
                pass
        return super().pack(*args)


def make_client(settings: Settings) -> RedisClient:
    """A new client for ``settings`` (``redis.Redis`` on a blocking pool, or ``RedisCluster``)."""
    options: dict[str, Any] = {
        "socket_timeout": settings.socket_timeout,
        "socket_connect_timeout": settings.socket_timeout,
        "health_check_interval": 30,
    }
    if settings.redis_cluster:
        # A connection error, timeout or CLUSTERDOWN makes redis-py refresh the slot map and try
        # again, CLUSTER_RETRIES times (MOVED/ASK/TRYAGAIN are followed apart from these). Those
        # tries are immediate, so they ride through a slot migration or a stale map, not a
        # failover (node timeout + election, seconds): the tasks retry that with backoff.
        return RedisCluster.from_url(
            settings.redis_url,
            max_connections=settings.pool_size,
            reinitialize_steps=5,
            retry=Retry(ExponentialWithJitterBackoff(base=0.1, cap=2), CLUSTER_RETRIES),
            **options,
        )
    if HIREDIS_AVAILABLE:
        options["command_packer"] = ArgsPacker()
    pool = redis.BlockingConnectionPool.from_url(
        settings.redis_url, max_connections=settings.pool_size, timeout=settings.socket_timeout, **options
    )
    return redis.Redis(connection_pool=pool)


def get_redis() -> RedisClient:
    """The process-wide client for the counters data (``redis.Redis`` or ``RedisCluster``)."""
    global _client, _client_pid, _client_settings
    pid = os.getpid()
    settings = get_settings()
    if _client is None or _client_pid != pid or _client_settings is not settings:
        with _lock:
            if _client is None or _client_pid != pid or _client_settings is not settings:
                _close_own_client()
                _client, _client_pid, _client_settings = make_client(settings), pid, settings
    return _client


def reset() -> None:
    """Drop the client (its pool is closed if it belongs to this process)."""
    global _client, _client_pid, _client_settings
    with _lock:
        _close_own_client()
        _client, _client_pid, _client_settings = None, None, None


def _close_own_client() -> None:
    """Close the current client if this process made it (a forked child leaves its parent's alone)."""
    if _client is not None and _client_pid == os.getpid():
        try:
            _client.close()
        except Exception:  # closing is best effort
            pass


def is_cluster(conn: RedisClient) -> TypeIs[RedisCluster]:
    """Whether ``conn`` is a cluster client (for the type checker: narrows ``conn`` both ways)."""
    return _is_cluster_type(type(conn))


@functools.cache
def _is_cluster_type(kind: type) -> bool:
    # redis-py's client classes are typing Protocols, whose isinstance costs ~1 us: a script call
    # of a batch asks this (hundreds a batch), so the answer is kept per class
    return issubclass(kind, RedisCluster)


def read_pipeline(conn: RedisClient) -> Any:
    """A pipeline for reads that may span slots: a cluster pipeline sends to every node at once;
    on one server a plain (non-transactional) pipeline."""
    return conn.pipeline() if is_cluster(conn) else conn.pipeline(transaction=False)


def as_str(value: Any) -> str:
    """A reply as ``str`` whether or not the client decodes responses."""
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else str(value)
