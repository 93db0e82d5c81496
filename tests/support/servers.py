"""Clients of the test Redis (a private server, or the cluster of ``make test-cluster``)."""

from __future__ import annotations

import os

import pytest
import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from counters_tasks.core.settings import reset_settings

TEST_SECRET = "test-secret-not-for-production"
TEST_TAG_KEY = "7465737420746167206b6579206f6e6c"


def is_cluster_run() -> bool:
    return os.environ.get("COUNTERS_REDIS_CLUSTER", "") == "1"


def make_client(url: str, decode: bool = False):
    if is_cluster_run():
        return RedisCluster.from_url(url, decode_responses=decode)
    return redis.Redis.from_url(url, decode_responses=decode)


def dead_client() -> redis.Redis:
    """A client of a port nothing listens on, as a Redis that is down: its calls raise
    ConnectionError at once. No retries: redis-py 8's default retries a refused connection 10
    times with backoff (4 s a call), which proves nothing more about what the caller does then."""
    from counters_tasks.local.redis_server import free_port

    return redis.Redis(port=free_port(), socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))


def flush(client) -> None:
    if is_cluster_run():
        client.flushall(target_nodes="primaries")
    else:
        client.flushdb()


def empty(client) -> None:
    """Every key of the test Redis deleted but the deployment's (its tag key and marker, of every
    key prefix: ``DEPLOYMENT_KEYS``): a test that starts over with its clients and processes in
    use. A plain flush is a data loss: the tag key goes, a writer makes a new one, and a client
    or process that holds the old one reads zeros until its next check of the deployment (every
    ``store.deployment.CHECK_EVERY`` seconds)."""
    kept = [
        (key, client.dump(key))
        for key in client.scan_iter(count=1000)
        if (key if isinstance(key, bytes) else key.encode()).endswith(DEPLOYMENT_KEYS)
    ]
    flush(client)
    for key, value in kept:
        client.restore(key, 0, value, replace=True)


def use_settings(monkeypatch: pytest.MonkeyPatch, **env: object) -> None:
    """Set COUNTERS_* variables for this test and read the settings afresh."""
    for name, value in env.items():
        monkeypatch.setenv(name, str(value))
    reset_settings()


REFUSAL_KEYS = b":{refused}"
"""What the refusal counts' keys hold (``counters_tasks.refusals``): a refusal writes only those."""
THROUGHPUT_KEYS = b":{throughput}"
"""The metrics' totals (``counters_tasks.throughput``): a refused batch is still a batch seen."""
DEPLOYMENT_KEYS = (b":deployment", b":tagkey")
"""The deployment's marker and tag key (``store.deployment``; a pinned key is kept in Redis too):
written by a process's first write whatever it writes, and again after a flush (a test's own "data
loss") once its check is due."""


def dump_all(client) -> dict:
    """Every key with its type, value and TTL presence: to prove nothing was written. The
    refusal counts and the metrics' totals are left out (a refusal, and the batch it came in,
    are counted on purpose; tests read them through ``refusals.counts`` and ``throughput.totals``),
    and so are the deployment's marker and tag key."""
    out = {}
    for key in client.scan_iter(count=1000):
        name = key if isinstance(key, bytes) else key.encode()
        if REFUSAL_KEYS not in name and THROUGHPUT_KEYS not in name and not name.endswith(DEPLOYMENT_KEYS):
            out[key] = (client.type(key), client.dump(key), client.ttl(key) > 0)
    return out


def expires_at(client, key) -> int | None:
    """The time ``key`` expires (epoch seconds), None without a TTL: EXPIRETIME, which Redis 6.2
    lacks, made of the server's clock and PTTL read in one transaction (EXAT times are whole
    seconds, so rounding gives them exactly). A cluster (Redis 7 here) answers EXPIRETIME itself."""
    if is_cluster_run():
        at = client.expiretime(key)
        return None if at < 0 else at
    pipe = client.pipeline(transaction=True)
    pipe.time()
    pipe.pttl(key)
    (seconds, micros), left = pipe.execute()
    return None if left < 0 else round(seconds + micros / 1e6 + left / 1000)


TEST_COMMANDS = (b"INFO", b"CONFIG", b"SLOWLOG", b"FLUSHDB", b"FLUSHALL", b"MEMORY", b"DEBUG", b"SCAN")
"""Commands only the tests send (waiting for a lazy free, setting up): never the package's."""


def slow_calls(client, limit: int = 128) -> list[tuple[int, bytes]]:
    """The SLOWLOG entries of the package's own calls: (microseconds, the command's first 60 bytes)."""
    return [
        (e["duration"], e["command"][:60])
        for e in client.slowlog_get(limit)
        if not e["command"].upper().startswith(TEST_COMMANDS)
    ]
