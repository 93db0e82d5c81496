"""Fault tests: real ``redis-server`` and ``celery worker`` processes, faults injected for real.

Each test gets its own broker server (so the queue is private and survives a counters outage)
and its own counters server (AOF on, ``appendfsync always``), and points the settings there. This
process's Celery app keeps the session's configuration (``tests/support/isolation.py``): a test
reaches its private broker through ``publisher`` and its workers' environment.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from counters_tasks.core.settings import reset_settings
from counters_tasks.local.redis_server import RedisServer


@pytest.fixture
def broker_server(tmp_path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "broker").start()
    yield server
    server.stop()


@pytest.fixture
def counters_server(tmp_path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "counters", appendonly=True, extra_args=["--appendfsync", "always"]).start()
    yield server
    server.stop()


@pytest.fixture
def fault_env(broker_server, counters_server, monkeypatch) -> dict[str, str]:
    """This process's settings point at the private servers; returns the env for workers."""
    env = {
        "COUNTERS_REDIS_URL": counters_server.url,
        "CELERY_BROKER_URL": broker_server.url.replace("/0", "/1"),
        "COUNTERS_REDIS_CLUSTER": "",
    }  # private single servers, also in a cluster run of the suite
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    reset_settings()
    return env


@pytest.fixture
def counters_conn(counters_server) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(counters_server.url, socket_timeout=5)
    yield client
    client.close()


@pytest.fixture
def broker_conn(fault_env) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(fault_env["CELERY_BROKER_URL"], socket_timeout=5)
    yield client
    client.close()


@pytest.fixture
def publisher(fault_env):
    """A producer on the private broker (this process's app may already be bound to another)."""
    from counters_tasks.app import app

    connection = app.connection_for_write(fault_env["CELERY_BROKER_URL"])
    producer = app.amqp.Producer(connection)
    yield producer
    producer.release()
    connection.release()
