"""counters_tasks.worker.broker: a message is popped and recorded as unacknowledged in one step, in the
very format kombu restores; waiting takes nothing."""

from __future__ import annotations

import json

import pytest
import redis
from kombu import Connection, Exchange, Queue

from counters_tasks.store.client import as_str

pytestmark = pytest.mark.processes


def test_take_records_what_kombu_restores(broker_server, monkeypatch):
    from counters_tasks.worker import broker

    sent = []
    send = broker.Channel._brpop_start
    monkeypatch.setattr(broker.Channel, "_brpop_start", lambda self, timeout=None: sent.append(self._waiting) or send(self, timeout))
    url = broker_server.url.replace("/0", "/1")
    exchange = Exchange("visits", "direct")
    queue = Queue("visits", exchange, "visits")
    with Connection(url, transport="counters_tasks.worker.broker:Transport") as conn:
        conn.Producer().publish({"n": 1}, exchange=exchange, routing_key="visits", declare=[queue])
        got = []
        with conn.Consumer(queue, callbacks=[lambda body, message: got.append((body, message))]):
            conn.drain_events(timeout=5)
        [(body, message)] = got
        assert body == {"n": 1} and False in sent  # taken by the Lua call
        raw = redis.Redis.from_url(url)
        tag = message.delivery_tag
        assert raw.zscore("unacked_index", tag) is not None
        stored, ex, rk = json.loads(as_str(raw.hget("unacked", tag)))
        assert (ex, rk) == ("visits", "visits") and stored["properties"]["delivery_tag"] == tag
        assert raw.llen("visits") == 0
        message.channel.qos.restore_by_tag(tag)  # what the restore sweep does after the visibility timeout
        assert raw.llen("visits") == 1 and raw.hlen("unacked") == 0
        again = []
        with conn.Consumer(queue, callbacks=[lambda body, message: again.append(body) or message.ack()]):
            conn.drain_events(timeout=5)
        assert again == [{"n": 1}] and raw.hlen("unacked") == 0 and raw.zcard("unacked_index") == 0


def test_a_non_kombu_item_is_handed_over_not_kept(broker_server):
    url = broker_server.url.replace("/0", "/1")
    raw = redis.Redis.from_url(url)
    raw.lpush("q", b"not json")
    from importlib import resources

    source = resources.files("counters_tasks").joinpath("store", "lua", "broker_take.lua").read_text()
    assert raw.eval(source, 3, "unacked", "unacked_index", "q") == [b"q", b"not json"]
    assert raw.eval(source, 3, "unacked", "unacked_index", "q") is None
    assert raw.hlen("unacked") == 0
