"""The reliability settings: visibility timeout, restore sweep, dedupe window, broker transport."""

from __future__ import annotations

import subprocess
import sys

import pytest

from counters_tasks.core.settings import DEFAULT_VISIBILITY_TIMEOUT, RETRY_BACKOFF_MAX, load_settings
from counters_tasks.errors import ConfigurationError
from tests.support.procs import REPO, celery_env

pytestmark = pytest.mark.processes


def test_defaults_redeliver_within_a_minute():
    settings = load_settings({})
    assert settings.visibility_timeout == DEFAULT_VISIBILITY_TIMEOUT == 45
    assert settings.visibility_timeout + settings.restore_interval < 55
    assert RETRY_BACKOFF_MAX < settings.visibility_timeout
    assert settings.dedupe_ttl > settings.visibility_timeout + settings.restore_interval + RETRY_BACKOFF_MAX


def test_dedupe_ttl_must_outlive_every_redelivery():
    with pytest.raises(ConfigurationError, match="COUNTERS_DEDUPE_TTL"):
        load_settings({"COUNTERS_DEDUPE_TTL": "60", "COUNTERS_VISIBILITY_TIMEOUT": "45"})  # < 45 + 4 + 30
    with pytest.raises(ConfigurationError, match="COUNTERS_DEDUPE_TTL"):
        load_settings({"COUNTERS_VISIBILITY_TIMEOUT": "3600"})  # the TTL must grow with it
    assert load_settings({"COUNTERS_VISIBILITY_TIMEOUT": "3600", "COUNTERS_DEDUPE_TTL": "7200"}).dedupe_ttl == 7200
    assert load_settings({"COUNTERS_VISIBILITY_TIMEOUT": "2"}).restore_interval == 1
    with pytest.raises(ConfigurationError):
        load_settings({"COUNTERS_VISIBILITY_TIMEOUT": "0"})


def test_celeryconfig_redelivery_and_transport(eager_app):
    conf = eager_app.conf
    options = conf.broker_transport_options
    assert options["visibility_timeout"] == 45 and options["unacked_restore_interval"] == 4
    assert options["unacked_restore_throttle"] == 1 and options["unacked_mutex_expire"] <= 45
    assert conf.broker_transport == "counters_tasks.worker.broker:Transport"


def test_rediss_broker_verifies_certificates():
    """celeryconfig in a child process (reloading it here would change this process's app)."""
    env = celery_env("redis://127.0.0.1:6379/0", CELERY_BROKER_URL="rediss://127.0.0.1:6380/1")
    code = (
        "import ssl, celeryconfig as c; "
        "print(c.broker_use_ssl == {'ssl_cert_reqs': ssl.CERT_REQUIRED}, c.broker_transport)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["True", "counters_tasks.worker.broker:Transport"]
