"""Settings are read at first use; the Redis layer is one lazy, bounded, fork-safe pool."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import redis

from counters_tasks import keys, redis_layer
from counters_tasks.errors import ConfigurationError
from counters_tasks.settings import get_settings, load_settings, reset_settings, url_with_db
from tests.conftest import true_in_forked_child
from tests.procs import REPO


def test_import_reads_no_setting():
    env = dict(os.environ, COUNTERS_TIMEZONE="Not/AZone", COUNTERS_KEY_PREFIX="bad{prefix")
    code = "import counters_tasks, counters_tasks.tasks, counters_tasks.counters; print('imported')"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    assert result.returncode == 0 and "imported" in result.stdout, result.stderr


@pytest.mark.parametrize(
    "env",
    [
        {"COUNTERS_TIMEZONE": "Not/AZone"},
        {"COUNTERS_KEY_PREFIX": "a{b}"},
        {"COUNTERS_UV_MODE": "approx"},
        {"COUNTERS_REDIS_URL": "http://x"},
        {"COUNTERS_REDIS_POOL_SIZE": "zero"},
        {"COUNTERS_REDIS_POOL_SIZE": "0"},
    ],
)
def test_bad_settings_raise_configuration_error(env):
    with pytest.raises(ConfigurationError):
        load_settings(env)


def test_defaults():
    settings = load_settings({})
    assert settings.redis_url == "redis://localhost:6379/0"
    assert settings.broker_url == "redis://localhost:6379/1"
    assert settings.key_prefix == "ct:" and settings.timezone == "UTC" and settings.uv_mode == "exact"
    assert settings.secret is None


def test_broker_defaults_to_db_1_of_the_same_server():
    assert url_with_db("rediss://user:pw@host:6380/0", 1) == "rediss://user:pw@host:6380/1"
    assert url_with_db("unix:///run/redis.sock?db=0", 1) == "unix:///run/redis.sock?db=1"


def test_prefix_applies_to_every_key(monkeypatch, raw_conn):
    from counters_tasks import counters

    monkeypatch.setenv("COUNTERS_KEY_PREFIX", "other:")
    reset_settings()
    counters.update_counter(raw_conn, "x", 1, now=1_700_000_000)
    assert all(key.startswith(b"other:") for key in raw_conn.scan_iter())
    assert get_settings().key_prefix == "other:"


def test_one_bounded_client_per_process_rebuilt_after_fork(monkeypatch):
    monkeypatch.setenv("COUNTERS_REDIS_POOL_SIZE", "3")
    reset_settings()
    client = redis_layer.get_redis()
    assert client is redis_layer.get_redis()
    pool = client.connection_pool
    assert isinstance(pool, redis.BlockingConnectionPool) and pool.max_connections == 3
    assert client.ping()
    # the child must not reuse the parent's client or sockets
    assert true_in_forked_child(lambda: redis_layer.get_redis() is not client and redis_layer.get_redis().ping())
    assert redis_layer.get_redis() is client and client.ping()


def test_tag_groups_spread():
    groups = {keys.counter_tag(f"counter-{i}") for i in range(5000)}
    assert len(groups) == keys.TAG_GROUPS
    assert len({keys.path_tag(f"/p/{i}") for i in range(5000)}) == keys.TAG_GROUPS


def test_user_strings_never_pick_the_slot():
    for name in ["{evil}", "a}{b", "{", "}", "*", "x y\u00e9", "n" * 10_000]:
        key = keys.counter_keys(name)[0]
        tag = key[key.index("{") + 1:key.index("}")]
        assert tag == keys.counter_tag(name) and tag[0] == "c" and 0 <= int(tag[1:]) < keys.TAG_GROUPS
        assert "{" not in key[key.index("}"):] and " " not in key and "*" not in key
