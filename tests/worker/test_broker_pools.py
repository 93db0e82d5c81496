"""``worker.broker`` under the worker's pools: the broker pools sized for its concurrency
(``size_broker_pools``, run by Celery's ``celeryd_init`` at a worker's start), on a Celery app of
its own (the figures each command line gives, and a channel of the test broker holding them),
and acknowledgements made together from several pool threads at once. The worker under
``--pool gevent -c 50`` itself: tests/system/test_pools.py."""

from __future__ import annotations

import os
import threading

import pytest
import redis
from celery import Celery
from kombu import Connection

from counters_tasks.core.settings import load_settings
from counters_tasks.worker.broker import POOL_MARGIN, acks_together, size_broker_pools
from tests.faults.test_broker import consume, publish_tasks
from tests.support.procs import purge_broker

TRANSPORT = "counters_tasks.worker.broker:Transport"


def app_for(broker_url: str, **conf: object) -> Celery:
    app = Celery("pools-test", set_as_current=False)
    transport = TRANSPORT if broker_url.startswith("redis") else None
    app.conf.update(broker_url=broker_url, broker_transport=transport, **conf)
    return app


@pytest.mark.parametrize(
    ("options", "worker_concurrency", "expected"),
    [
        ({"concurrency": 50, "pool": "gevent"}, None, 50),  # the worker
        ({"concurrency": "8"}, None, 8),
        ({"concurrency": None}, 12, 12),  # worker_concurrency in the configuration
        ({"concurrency": 4, "autoscale": (30, 3)}, None, 30),  # the top of --autoscale
        ({"concurrency": 4, "autoscale": "20,2"}, None, 20),
        ({"concurrency": "auto"}, None, os.cpu_count() or 2),
    ],
)
def test_the_pools_hold_every_task_at_once_plus_the_margin(options, worker_concurrency, expected):
    app = app_for(
        "redis://127.0.0.1:1/0",
        worker_concurrency=worker_concurrency,
        broker_transport_options={"visibility_timeout": 45},
    )
    size_broker_pools(conf=app.conf, options=options)
    assert app.conf.broker_transport_options == {"visibility_timeout": 45, "max_connections": expected + POOL_MARGIN}
    assert app.conf.broker_pool_limit == expected + POOL_MARGIN


def test_limits_of_the_configuration_are_kept():
    app = app_for("redis://127.0.0.1:1/0", broker_transport_options={"max_connections": 7}, broker_pool_limit=0)
    size_broker_pools(conf=app.conf, options={"concurrency": 50})
    assert app.conf.broker_transport_options == {"max_connections": 7}  # named by the operator
    assert app.conf.broker_pool_limit == 0  # no producer pool: stays so
    app = app_for("redis://127.0.0.1:1/0", broker_pool_limit=500)
    size_broker_pools(conf=app.conf, options={"concurrency": 50})
    assert app.conf.broker_pool_limit == 500  # raised, never lowered


def test_a_broker_that_is_not_a_redis_gets_no_redis_option():
    app = app_for("amqp://guest:guest@127.0.0.1:1//", broker_transport_options={})
    size_broker_pools(conf=app.conf, options={"concurrency": 50})
    assert "max_connections" not in app.conf.broker_transport_options
    assert app.conf.broker_pool_limit == 50 + POOL_MARGIN


def test_a_channel_of_the_broker_keeps_the_size(redis_url):
    app = app_for(load_settings({"COUNTERS_REDIS_URL": redis_url}).broker_url)
    size_broker_pools(conf=app.conf, options={"concurrency": 50})
    with app.connection_for_read() as connection:
        channel = connection.default_channel
        assert channel.max_connections == 50 + POOL_MARGIN
        assert channel.pool.max_connections == 50 + POOL_MARGIN


def test_acks_made_together_in_two_threads_at_once_each_leave_the_broker(redis_url):
    """With the threads pool each batch is acknowledged from the pool thread that ran it
    (``acks_together``), so two may overlap on the worker's one channel: each batch's records
    leave the broker (its tags were kept per channel, so the second batch's start dropped the
    first's and its messages came back after the visibility timeout)."""
    purge_broker(redis_url)  # a record another test's worker left would be counted below
    url = load_settings({"COUNTERS_REDIS_URL": redis_url}).broker_url
    raw = redis.Redis.from_url(url)
    first_acked, second_done = threading.Event(), threading.Event()
    with Connection(url, transport=TRANSPORT) as conn:
        publish_tasks(conn, 4)
        got = consume(conn, 4)
        assert raw.hlen("unacked") == 4

        def first() -> None:
            with acks_together(got[:2]):
                for message in got[:2]:
                    message.ack()
                first_acked.set()
                assert second_done.wait(10)

        def second() -> None:
            assert first_acked.wait(10)
            with acks_together(got[2:]):
                for message in got[2:]:
                    message.ack()
            second_done.set()

        threads = [threading.Thread(target=first), threading.Thread(target=second)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
        assert second_done.is_set() and all(message.acknowledged for message in got)
        assert (raw.hlen("unacked"), raw.zcard("unacked_index")) == (0, 0)
    raw.close()
