"""Shared bench plumbing: a private redis-server unless COUNTERS_REDIS_URL is given."""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator

import redis

from counters_tasks.core.settings import reset_settings
from counters_tasks.local.redis_server import RedisServer


@contextlib.contextmanager
def bench_redis() -> Iterator[str]:
    """A Redis URL for the benchmark: COUNTERS_REDIS_URL, or a private server in a temp dir."""
    url = os.environ.get("COUNTERS_BENCH_REDIS_URL")
    if url:
        yield url
        return
    with tempfile.TemporaryDirectory() as tmp, RedisServer(tmp) as server:
        os.environ["COUNTERS_REDIS_URL"] = server.url
        os.environ.setdefault("COUNTERS_SECRET", "bench-secret")
        reset_settings()
        yield server.url


def rates(
    count: int, contenders: dict[str, Callable[[], None]], rounds: int = 3, between: Callable[[], None] | None = None
) -> dict[str, float]:
    """Run each contender (doing ``count`` operations) ``rounds`` times, interleaved so that
    load from elsewhere hits all alike; print and return each one's median rate per second."""
    seen: dict[str, list[float]] = {label: [] for label in contenders}
    for _ in range(rounds):
        for label, work in contenders.items():
            if between:
                between()
            start = time.perf_counter()
            work()
            seen[label].append(count / (time.perf_counter() - start))
    out = {}
    for label, values in seen.items():
        out[label] = statistics.median(values)
        print(f"{label:<50} {out[label]:>12,.0f} /s   (median of {rounds} runs of {count})")
    return out


def client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url)


def redis_cpu(conn: redis.Redis) -> float:
    """CPU seconds the server has used (user + system)."""
    info = conn.info("cpu")
    return info["used_cpu_user"] + info["used_cpu_sys"]
