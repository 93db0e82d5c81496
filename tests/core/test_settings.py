"""Settings: read at first use (never at import), checked, with their defaults."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from counters_tasks.core.settings import load_settings, url_with_db
from counters_tasks.errors import ConfigurationError
from tests.support.procs import REPO


@pytest.mark.processes
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
