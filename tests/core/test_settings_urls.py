"""The URL forms of ``core.settings``: a password hidden wherever a URL is shown (``redact_url``),
the broker in kombu's spelling (``kombu_url``: a unix socket is ``redis+socket://``) and back in
redis-py's for a client of it (``redis_py_url``), and the broker URLs refused with the form to use."""

from __future__ import annotations

import pytest
import redis

from counters_tasks.core.settings import is_redis_url, kombu_url, load_settings, redact_url, redis_py_url
from counters_tasks.errors import ConfigurationError


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw-1@host:6379/0", "redis://:***@host:6379/0"),
        ("redis://user:pw-1@host:6379/0", "redis://user:***@host:6379/0"),
        ("rediss://user:pw-1@host:6380/0?ssl_ca_certs=/ca.pem", "rediss://user:***@host:6380/0?ssl_ca_certs=/ca.pem"),
        ("redis://pw-1@host/0", "redis://***@host/0"),  # a lone user part, which some clients read as a password
        ("redis://:p/w#1@x@host/0", "redis://:***@host/0"),  # unescaped / # @ in the password
        ("unix:///run/redis.sock?db=0&password=pw-1", "unix:///run/redis.sock?db=0&password=***"),
        ("unix://user:pw-1@/run/redis.sock?db=0", "unix://user:***@/run/redis.sock?db=0"),
        ("redis+socket://:pw-1@/run/redis.sock?virtual_host=1", "redis+socket://:***@/run/redis.sock?virtual_host=1"),
        ("amqp://guest:pw-1@rabbit:5672//", "amqp://guest:***@rabbit:5672//"),
        (
            "sentinel://:pw-1@s1:26379/1;sentinel://:pw-1@s2:26379/1",
            "sentinel://:***@s1:26379/1;sentinel://:***@s2:26379/1",
        ),
        ("redis://:pw;1@host/0", "redis://:***@host/0"),  # a ; in a password is no list separator
        ("redis://host:6379/0?token=pw-1&x=1", "redis://host:6379/0?token=***&x=1"),
        ("redis://localhost:6379/0", "redis://localhost:6379/0"),
        ("not a url: pw-1", "not a url: pw-1"),
    ],
)
def test_redact_url_hides_every_password_and_keeps_the_rest(url, shown):
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    ("url", "broker", "client"),
    [
        ("unix:///run/redis.sock?db=1", "redis+socket:///run/redis.sock?virtual_host=1", "unix:///run/redis.sock?db=1"),
        ("unix:///run/redis.sock", "redis+socket:///run/redis.sock", "unix:///run/redis.sock"),
        (
            "unix://:p%40w@/run/redis.sock?db=2",
            "redis+socket://:p%40w@/run/redis.sock?virtual_host=2",
            "unix://:p%40w@/run/redis.sock?db=2",
        ),
        # kombu reads the user and password in front of the path only
        (
            "unix:///run/redis.sock?db=1&username=u&password=p%40w",
            "redis+socket://u:p%40w@/run/redis.sock?virtual_host=1",
            "unix://u:p%40w@/run/redis.sock?db=1",
        ),
        ("redis://h:6379/1", "redis://h:6379/1", "redis://h:6379/1"),
        (
            "rediss://h:6380/1?ssl_ca_certs=/ca.pem",
            "rediss://h:6380/1?ssl_ca_certs=/ca.pem",
            "rediss://h:6380/1?ssl_ca_certs=/ca.pem",
        ),
        ("amqp://guest@rabbit//", "amqp://guest@rabbit//", "amqp://guest@rabbit//"),
    ],
)
def test_kombu_and_redis_py_spell_the_same_server(url, broker, client):
    assert kombu_url(url) == broker
    assert redis_py_url(broker) == client
    if client.startswith(("redis", "unix")):  # what redis-py opens: the same socket or host, database, password
        assert _where(client) == _where(url)


def _where(url: str) -> tuple:
    kwargs = redis.ConnectionPool.from_url(url).connection_kwargs
    return tuple(kwargs.get(name) for name in ("path", "host", "port", "db", "username", "password"))


def test_a_unix_socket_redis_gives_a_broker_kombu_knows():
    settings = load_settings({"COUNTERS_REDIS_URL": "unix:///run/redis.sock?db=0"})
    assert settings.broker_url == "redis+socket:///run/redis.sock?virtual_host=1"
    assert is_redis_url(settings.broker_url) and redis_py_url(settings.broker_url) == "unix:///run/redis.sock?db=1"
    given = load_settings({"CELERY_BROKER_URL": "unix:///run/broker.sock?db=3"})  # redis-py's spelling, given
    assert given.broker_url == "redis+socket:///run/broker.sock?virtual_host=3"
    assert not is_redis_url("sentinel://s1:26379/1") and not is_redis_url("amqp://rabbit//")


@pytest.mark.parametrize(
    ("broker", "said"),
    [
        ("redis+socket://:pw-1@/run/redis.sock?db=1", "?virtual_host=N"),  # kombu would use database 0
        ("redis+sentinel://:pw-1@s1:26379/1", "Sentinel is sentinel://"),  # kombu would use localhost:6379
    ],
)
def test_broker_urls_kombu_misreads_are_refused_without_their_password(broker, said):
    with pytest.raises(ConfigurationError, match="CELERY_BROKER_URL") as refused:
        load_settings({"CELERY_BROKER_URL": broker})
    assert said in str(refused.value) and "pw-1" not in str(refused.value)


def test_a_wrong_scheme_is_named_without_the_password():
    with pytest.raises(ConfigurationError, match="COUNTERS_REDIS_URL must be") as refused:
        load_settings({"COUNTERS_REDIS_URL": "http://:pw-1@host:6379/0"})
    assert "http://:***@host:6379/0" in str(refused.value) and "pw-1" not in str(refused.value)
