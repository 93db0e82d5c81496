"""counters_tasks.worker.broker: a message is popped and recorded as unacknowledged in one step, in the
very format kombu restores; waiting takes nothing."""

from __future__ import annotations

import json
import time

import pytest
import redis
from kombu import Connection, Exchange, Queue

from counters_tasks.store.client import as_str
from counters_tasks.store.scripts import lua_source

pytestmark = pytest.mark.processes


def test_take_records_what_kombu_restores(broker_server, monkeypatch):
    from counters_tasks.worker import broker

    sent = []
    send = broker.Channel._brpop_start
    monkeypatch.setattr(
        broker.Channel, "_brpop_start", lambda self, timeout=None: sent.append(self._waiting) or send(self, timeout)
    )
    url = broker_server.url.replace("/0", "/1")
    exchange = Exchange("visits", "direct")
    queue = Queue("visits", exchange, "visits")
    with Connection(url, transport="counters_tasks.worker.broker:Transport") as conn:
        conn.Producer().publish(
            [[1], {}, {}],
            exchange=exchange,
            routing_key="visits",
            declare=[queue],
            headers={"task": "counters_tasks.update_counter", "id": "t1"},
        )  # a task message
        got = []
        with conn.Consumer(queue, callbacks=[lambda body, message: got.append((body, message))]):
            conn.drain_events(timeout=5)
        [(body, message)] = got
        assert body == [[1], {}, {}] and False in sent  # taken by the Lua call
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
        assert again == [[[1], {}, {}]] and raw.hlen("unacked") == 0 and raw.zcard("unacked_index") == 0


TAKE = lua_source("broker_take")  # with the library functions it calls


def take(raw: redis.Redis, max_bytes: int = 1 << 20) -> object:
    return raw.eval(TAKE, 5, "unacked", "unacked_index", "dead", "dead:reasons", "q", max_bytes, 100)


def test_a_non_kombu_item_is_handed_over_not_kept(broker_server):
    """The take records only kombu messages; the worker sets anything else aside (test_poison_messages)."""
    raw = redis.Redis.from_url(broker_server.url.replace("/0", "/1"))
    raw.lpush("q", b"not json")
    assert take(raw) == [b"q", b"not json"]
    assert take(raw) is None
    assert raw.hlen("unacked") == 0


def test_an_oversize_item_is_set_aside_unread(broker_server):
    raw = redis.Redis.from_url(broker_server.url.replace("/0", "/1"))
    raw.lpush("q", json.dumps({"body": "x" * 5000, "properties": {"delivery_tag": "t", "delivery_info": {}}}))
    assert take(raw, max_bytes=4096) == [b"q", b"", b"oversize"]
    record = json.loads(raw.lindex("dead", 0))
    assert record["reason"] == "oversize" and record["size"] > 5000 and record["truncated"]
    assert raw.hget("dead:reasons", "oversize") == b"1" and raw.hlen("unacked") == 0 and raw.llen("q") == 0


def test_a_queue_consumed_without_acks_leaves_nothing_to_restore(broker_server):
    """Control replies (``celery inspect``, ``health``'s ping) are consumed without
    acknowledgements: the take must not leave them recorded as unacknowledged, or the restore
    sweep would send them again after every visibility timeout, forever."""
    url = broker_server.url.replace("/0", "/1")
    exchange = Exchange("replies", "direct")
    queue = Queue("x.reply.celery.pidbox", exchange, "r")
    with Connection(url, transport="counters_tasks.worker.broker:Transport") as conn:
        conn.Producer().publish({"pong": 1}, exchange=exchange, routing_key="r", declare=[queue])
        got = []
        with conn.Consumer(queue, no_ack=True, callbacks=[lambda body, message: got.append(body)]):
            conn.drain_events(timeout=5)
        raw = redis.Redis.from_url(url)
        assert got == [{"pong": 1}]  # delivered as it is: control messages are not tasks
        assert raw.hlen("unacked") == 0 and raw.zcard("unacked_index") == 0 and raw.llen("ct:dead") == 0


@pytest.mark.parametrize(
    ("junk", "reason"),
    [
        (b"not json", "not_json"),
        (b'{"no": "envelope"}', "not_a_message"),
        (
            b'{"headers": {}, "properties": {}, "body": {"__type__": "datetime", "__value__": "no"}}',
            "not_json",
        ),  # kombu refuses it
    ],
)
def test_junk_on_a_control_queue_is_set_aside_and_the_reply_behind_it_delivered(broker_server, junk, reason):
    """A reply queue (``celery inspect``, ``health``'s ping) is read without acknowledgements and
    was decoded with no check: an item that is not a kombu message raised in the poller (what a
    stock kombu does too), in the waiting CLI or health check. Now it is set aside like a task
    message of that kind (counted by reason) and the reply behind it is delivered."""
    url = broker_server.url.replace("/0", "/1")
    exchange = Exchange("replies", "direct")
    queue = Queue("y.reply.celery.pidbox", exchange, "r")
    raw = redis.Redis.from_url(url)
    with Connection(url, transport="counters_tasks.worker.broker:Transport") as conn:
        conn.Producer().publish({"pong": 1}, exchange=exchange, routing_key="r", declare=[queue])
        raw.rpush("y.reply.celery.pidbox", junk)  # taken first: kombu pushes left, the take pops right
        got = []
        with conn.Consumer(queue, no_ack=True, callbacks=[lambda body, message: got.append(body)]):
            deadline = time.monotonic() + 10
            while not got and time.monotonic() < deadline:
                try:
                    conn.drain_events(timeout=1)
                except TimeoutError:
                    pass
        assert got == [{"pong": 1}]
        [record] = [json.loads(item) for item in raw.lrange("ct:dead", 0, -1)]
        assert record["queue"] == "y.reply.celery.pidbox" and record["payload"] == junk.decode()
        assert record["reason"] == reason and raw.hget("ct:dead:reasons", reason) == b"1"
        assert raw.hlen("unacked") == 0 and raw.llen("y.reply.celery.pidbox") == 0


VISITS = Queue("visits", Exchange("visits", "direct"), "visits")


def publish_tasks(conn: Connection, count: int) -> None:
    """``count`` task messages on the visits queue."""
    producer = conn.Producer()
    for n in range(count):
        producer.publish(
            [[n], {}, {}],
            exchange=VISITS.exchange,
            routing_key="visits",
            declare=[VISITS],
            headers={"task": "counters_tasks.update_counter", "id": f"t{n}"},
        )


def consume(conn: Connection, count: int) -> list:
    """The next ``count`` messages of the visits queue, taken and not acknowledged."""
    got: list = []
    with conn.Consumer(VISITS, callbacks=[lambda body, message: got.append(message)]):
        while len(got) < count:
            conn.drain_events(timeout=5)
    return got


def test_a_taken_message_is_recorded_once_and_one_got_otherwise_still_is(broker_server):
    """kombu's QoS.append wrote every delivered message to the unacked hash again (a MULTI / EXEC
    with the message re-encoded) after the take had recorded it: a sixth of the worker's main
    process with one message a visit (issue 21). Taken messages are now recorded by the take
    alone, in what kombu restores; a message got with ``basic_get`` (no take) is still recorded."""
    url = broker_server.url.replace("/0", "/1")
    raw = redis.Redis.from_url(url)
    with Connection(url, transport="counters_tasks.worker.broker:Transport") as conn:
        publish_tasks(conn, 20)
        raw.config_resetstat()
        got = consume(conn, 20)
        stats = raw.info("commandstats")
        # one record a message, written by its take (20 before this change: 40 of each)
        assert (stats["cmdstat_hset"]["calls"], stats["cmdstat_zadd"]["calls"]) == (20, 20)
        assert raw.hlen("unacked") == 20
        for message in got:  # each record is kombu's, and restores the message
            stored, ex, rk = json.loads(as_str(raw.hget("unacked", message.delivery_tag)))
            assert (stored["properties"]["delivery_tag"], ex, rk) == (message.delivery_tag, "visits", "visits")
        got[0].channel.qos.restore_by_tag(got[0].delivery_tag)
        assert raw.llen("visits") == 1
        for message in got[1:]:
            message.ack()
        assert raw.hlen("unacked") == 0
        one = conn.default_channel.basic_get("visits", no_ack=False)  # kombu's own path: RPOP, then its record
        assert one is not None and raw.hexists("unacked", one.delivery_tag)


def test_acks_made_together_leave_the_broker_in_one_round_trip(broker_server):
    """kombu acknowledges a message with a MULTI / EXEC of its own; a worker batch's messages are
    acknowledged together (``acks_together``): one ZREM and one HDEL for all of them."""
    from counters_tasks.worker.broker import acks_together

    url = broker_server.url.replace("/0", "/1")
    raw = redis.Redis.from_url(url)
    with Connection(url, transport="counters_tasks.worker.broker:Transport") as conn:
        publish_tasks(conn, 20)
        got = consume(conn, 20)
        raw.config_resetstat()
        with acks_together(got):
            for message in got:
                message.ack()
            assert raw.hlen("unacked") == 20  # not yet: at the end, together
        stats = raw.info("commandstats")
        assert (stats["cmdstat_zrem"]["calls"], stats["cmdstat_hdel"]["calls"]) == (1, 1)
        assert raw.hlen("unacked") == 0 and raw.zcard("unacked_index") == 0
        assert all(message.acknowledged for message in got)


def test_a_task_body_is_decoded_once_and_refused_as_kombu_would(broker_server, monkeypatch):
    """The take's check decodes a task message's body (``worker.dead_letters``); the message
    kombu then delivers gives that very body, so Celery reading its payload in the worker's main
    process does not decode it a second time (9 us a visit of a 1,000-visit batch, issue 32). A
    consumer that does not accept JSON still refuses it, as kombu would."""
    import kombu.message
    from kombu.exceptions import ContentDisallowed

    decodes = []
    real = kombu.message.loads
    monkeypatch.setattr(kombu.message, "loads", lambda *a, **k: decodes.append(a[1]) or real(*a, **k))
    url = broker_server.url.replace("/0", "/1")
    exchange = Exchange("visits", "direct")
    queue = Queue("visits", exchange, "visits")
    sent = [[[{"ip": "192.0.2.1", "path": "/a", "ts": 1.5}] * 3], {}, {"callbacks": None}]
    with Connection(url, transport="counters_tasks.worker.broker:Transport") as conn:
        for n in range(2):
            conn.Producer().publish(
                sent,
                exchange=exchange,
                routing_key="visits",
                declare=[queue],
                headers={"task": "counters_tasks.record_visits", "id": f"t{n}"},
            )
        got = []
        with conn.Consumer(queue, callbacks=[lambda body, message: got.append(message.payload) or message.ack()]):
            conn.drain_events(timeout=5)
        assert got == [sent] and decodes == []  # decoded by the check only
        refused = []
        with conn.Consumer(
            queue, accept=["pickle"], callbacks=[got.append], on_decode_error=lambda m, exc: refused.append(exc)
        ):
            conn.drain_events(timeout=5)
        assert len(got) == 1 and [type(exc) for exc in refused] == [ContentDisallowed]
