"""The store layer: one lazy, bounded, fork-safe client per process, the key prefix, hash tags."""

from __future__ import annotations

import pytest
import redis
from redis.connection import HiredisRespSerializer
from redis.exceptions import DataError

from counters_tasks import counters
from counters_tasks.core.settings import get_settings, reset_settings
from counters_tasks.sitestats import page_all
from counters_tasks.store import client as store_client
from counters_tasks.store import keys
from tests.support.concurrency import true_in_forked_child


def test_prefix_applies_to_every_key(monkeypatch, raw_conn):
    monkeypatch.setenv("COUNTERS_KEY_PREFIX", "other:")
    reset_settings()
    counters.update_counter(raw_conn, "x", 1, now=1_700_000_000)
    assert all(key.startswith(b"other:") for key in raw_conn.scan_iter())
    assert get_settings().key_prefix == "other:"


def test_one_bounded_client_per_process_rebuilt_after_fork(monkeypatch):
    monkeypatch.setenv("COUNTERS_REDIS_POOL_SIZE", "3")
    reset_settings()
    client = store_client.get_redis()
    assert client is store_client.get_redis()
    pool = client.connection_pool
    assert isinstance(pool, redis.BlockingConnectionPool) and pool.max_connections == 3
    assert client.ping()
    # the child must not reuse the parent's client or sockets
    assert true_in_forked_child(lambda: store_client.get_redis() is not client and store_client.get_redis().ping())
    assert store_client.get_redis() is client and client.ping()


@pytest.mark.usefixtures("bound_deployment")
def test_tag_groups_spread():
    groups = {keys.counter_tag(f"counter-{i}") for i in range(5000)}
    assert len(groups) == keys.TAG_GROUPS
    assert len({page_all.path_tag(f"/p/{i}") for i in range(5000)}) == keys.TAG_GROUPS


@pytest.mark.usefixtures("bound_deployment")
def test_user_strings_never_pick_the_slot():
    for name in ["{evil}", "a}{b", "{", "}", "*", "x y\u00e9", "n" * 10_000]:
        key = keys.counter_hash(name)
        tag = key[key.index("{") + 1 : key.index("}")]
        assert tag == keys.counter_tag(name) and tag[0] == "c" and 0 <= int(tag[1:]) < keys.TAG_GROUPS
        assert "{" not in key[key.index("}") :] and " " not in key and "*" not in key


def test_the_packer_sends_what_redis_py_would_and_the_client_uses_it(redis_url, monkeypatch):
    """``ArgsPacker`` skips redis-py's pass over each argument: the bytes on the wire must be the
    stock serializer's for every kind of argument the package or a caller sends, and what it
    refuses the same (redis-py 6.4 refuses a memoryview, 8 converts it)."""

    def packed(packer: HiredisRespSerializer, command: tuple) -> object:
        try:
            return packer.pack(*command)
        except DataError:
            return DataError

    stock, ours = HiredisRespSerializer(), store_client.ArgsPacker()
    commands = [
        ("EVALSHA", "ab" * 20, 2, "k1", b"k2", 0, -7, 2**62, 1.5, 1e-300, "é", b"\xff"),
        ("SCRIPT LOAD", "return 1"),
        (b"CONFIG GET", b"maxmemory"),
        ("SET", memoryview(b"mv"), bytearray(b"ba")),
    ]
    for command in commands:
        assert packed(ours, command) == packed(stock, command), command
    assert packed(ours, ("SET", "k", None)) is DataError
    monkeypatch.setenv("COUNTERS_REDIS_URL", redis_url)
    reset_settings()
    conn = store_client.get_redis()
    assert isinstance(conn.connection_pool.connection_kwargs["command_packer"], store_client.ArgsPacker)
    assert conn.set("packed", "é") and conn.get("packed") == "é".encode()
    assert conn.script_load("return 1")
