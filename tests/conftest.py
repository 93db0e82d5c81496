"""Test setup: a real redis-server on a private port and data dir, started once per session.

Set COUNTERS_TEST_REDIS_URL to run the suite against an existing server (or, with
COUNTERS_REDIS_CLUSTER=1, a cluster) instead; it is flushed between tests.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator

import pytest
import redis

from counters_tasks.localredis import RedisServer
from counters_tasks.settings import reset_settings

TEST_SECRET = "test-secret-not-for-production"


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = os.environ.get("COUNTERS_TEST_REDIS_URL")
    if external:
        yield external
        return
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def is_cluster_run() -> bool:
    return os.environ.get("COUNTERS_REDIS_CLUSTER", "") == "1"


def make_client(url: str, decode: bool = False):
    if is_cluster_run():
        from redis.cluster import RedisCluster

        return RedisCluster.from_url(url, decode_responses=decode)
    return redis.Redis.from_url(url, decode_responses=decode)


def flush(client) -> None:
    if is_cluster_run():
        client.flushall(target_nodes="primaries")
    else:
        client.flushdb()


@pytest.fixture(autouse=True)
def counters_env(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test sees settings for the test server, read afresh."""
    monkeypatch.setenv("COUNTERS_REDIS_URL", redis_url)
    monkeypatch.setenv("COUNTERS_SECRET", TEST_SECRET)
    for name in ("COUNTERS_KEY_PREFIX", "COUNTERS_TIMEZONE", "COUNTERS_UV_MODE"):
        monkeypatch.delenv(name, raising=False)
    reset_settings()
    yield
    reset_settings()


@pytest.fixture(autouse=True)
def _fresh_expected_figures():
    """No test sees another's remembered expected-uniques figures (a per-process cache)."""
    from counters_tasks import uniques

    uniques.forget_expected()
    yield
    uniques.forget_expected()


def use_settings(monkeypatch: pytest.MonkeyPatch, **env: object) -> None:
    """Set COUNTERS_* variables for this test and read the settings afresh."""
    for name, value in env.items():
        monkeypatch.setenv(name, str(value))
    reset_settings()


@pytest.fixture(params=[False, True], ids=["bytes", "decoded"])
def conn(request: pytest.FixtureRequest, redis_url: str):
    """A flushed client, once not decoding responses and once decoding them."""
    client = make_client(redis_url, decode=request.param)
    flush(client)
    yield client
    client.close()


@pytest.fixture
def raw_conn(redis_url: str):
    """A flushed client that does not decode responses."""
    client = make_client(redis_url)
    flush(client)
    yield client
    client.close()


@pytest.fixture
def eager_app():
    """The Celery app running tasks in-process (eager), with exceptions propagated."""
    import counters_tasks.tasks  # noqa: F401  (registers the tasks)
    from counters_tasks.app import app

    app.conf.update(task_always_eager=True, task_eager_propagates=True)
    yield app
    app.conf.update(task_always_eager=False, task_eager_propagates=False)


def dump_all(client) -> dict:
    """Every key with its type, value and TTL presence: to prove nothing was written."""
    out = {}
    for key in client.scan_iter(count=1000):
        out[key] = (client.type(key), client.dump(key), client.ttl(key) > 0)
    return out


def true_in_forked_child(check: Callable[[], object]) -> bool:
    """Fork, run ``check`` in the child, and tell whether it returned something truthy there."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            ok = bool(check())
        except BaseException:
            ok = False
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.waitpid(pid, 0)
    os.close(read)
    return answer == b"1"


def run_threads(work: Callable[[int], object], count: int) -> list[BaseException]:
    """Run ``work(i)`` in ``count`` threads at once; returns the exceptions they raised."""
    import threading

    errors: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            work(i)
        except BaseException as exc:  # reported to the test
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def wait_for(condition: Callable[[], object], timeout: float = 30.0, interval: float = 0.05, what: str = "condition"):
    """Poll ``condition`` until it returns a truthy value, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
