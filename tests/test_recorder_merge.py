"""A ``VisitRecorder`` batch of ranking bumps carries one event per board, member and slot
(``Kind.merge``, ``ranking_events.merge_events``): a popular page's hundred bumps cross the broker,
the worker's checks and Redis as one event of amount 100, and the board's figures are the same.
Read from the real broker's queue (no worker runs), then applied as a worker applies a payload."""

from __future__ import annotations

import base64
import json
import time
import uuid

import pytest
import redis

from counters_tasks import VisitRecorder
from counters_tasks.core.settings import load_settings
from counters_tasks.core.validation import MAX_AMOUNT
from counters_tasks.ranking import Ranking, slot_of
from counters_tasks.ranking_events import incr_events
from tests.support.procs import purge_broker


@pytest.fixture
def broker(redis_url):
    purge_broker(redis_url)
    client = redis.Redis.from_url(load_settings({"COUNTERS_REDIS_URL": redis_url}).broker_url)
    yield client
    purge_broker(redis_url)
    client.close()


def ranking_batches(client: redis.Redis) -> list[list[dict]]:
    """The events of each ``incr_rankings`` message waiting on the broker."""
    out = []
    for raw in client.lrange("visits", 0, -1):
        message = json.loads(raw)
        if message["headers"]["task"] == "counters_tasks.incr_rankings":
            out.append(json.loads(base64.b64decode(message["body"]))[0][0])
    return out


def test_a_batch_carries_one_event_per_member_and_slot_with_the_same_figures(redis_url, broker, conn):
    board, other = f"merge{uuid.uuid4().hex[:8]}", f"merge2{uuid.uuid4().hex[:8]}"
    now = time.time()
    earlier = now - 2 * 3600  # two hours back: another slot of a 1-hour board, still in its window
    recorder = VisitRecorder(max_batch=1000, max_delay=60)
    try:
        for _ in range(30):
            recorder.incr_ranking(board, "/popular", 1, now)
        for _ in range(5):
            recorder.incr_ranking(board, "/other", 1, now)
        for _ in range(3):
            recorder.incr_ranking(board, "/popular", 1, earlier)
        recorder.incr_ranking(board, "/amounts", 5, now)
        recorder.incr_ranking(board, "/amounts", -2, now)
        recorder.incr_ranking(board, "/huge", MAX_AMOUNT, now)
        recorder.incr_ranking(board, "/huge", 1, now)  # past the bound: its own event
        for _ in range(4):  # another board, other settings: never merged with the first's
            recorder.incr_ranking(other, "/popular", 1, now, period_hours=48, interval_hours=2)
        assert recorder.flush(timeout=10)
        assert recorder.stats()["recorded"] == recorder.stats()["sent"] == 30 + 5 + 3 + 2 + 2 + 4
    finally:
        recorder.close(timeout=10)

    [events] = ranking_batches(broker)
    seen = sorted(
        (e["board"], e["member"], slot_of(e["ts"], e.get("interval_hours", 1)), e.get("amount", 1)) for e in events
    )
    slot, slot_before, slot_other = slot_of(now, 1), slot_of(earlier, 1), slot_of(now, 2)
    assert seen == sorted(
        [
            (board, "/popular", slot, 30),
            (board, "/other", slot, 5),
            (board, "/popular", slot_before, 3),
            (board, "/amounts", slot, 3),
            (board, "/huge", slot, MAX_AMOUNT),
            (board, "/huge", slot, 1),
            (other, "/popular", slot_other, 4),
        ]
    )
    # each keeps the latest time of the bumps merged into it (in their slot)
    assert sorted(e["ts"] for e in events) == [earlier] + [now] * (len(events) - 1)

    assert incr_events(conn, events, message_id=str(uuid.uuid4())) == len(events)  # as the worker applies it
    assert dict(Ranking(conn, board).top(limit=10, withscores=True)) == {
        "/huge": MAX_AMOUNT + 1,
        "/popular": 33,
        "/other": 5,
        "/amounts": 3,
    }
    assert dict(Ranking(conn, other, period_hours=48, interval_hours=2).top(limit=10, withscores=True)) == {
        "/popular": 4
    }
