"""``COUNTERS_DELAY_BUFFER``: ``record_visit.delay()`` and ``incr_ranking.delay()`` as an app calls
them, buffered in the process's shared ``VisitRecorder`` and sent as batches (issue 21: the
app-side cost of a ``.delay()`` was ~380 us, a publish and a Redis round trip each).

Checked with real processes: an app that calls ``.delay()`` per page view and exits, its calls
reaching the broker as a few batch messages, applied exactly by a real worker; and in-process:
bad input refused at the call, a call with options published as its own message, eager mode
applied at once, the setting off publishing one message a call. And what a recorder's batch of
ranking bumps carries: one bump per board, member and slot (``Kind.merge``,
``ranking_bumps.merge_bumps``), with the same figures."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import textwrap
import time
import uuid

import pytest
import redis

from counters_tasks import sitestats, tasks, uniques, visits
from counters_tasks.core.days import local_day
from counters_tasks.core.settings import load_settings
from counters_tasks.core.validation import MAX_AMOUNT
from counters_tasks.errors import InvalidInput
from counters_tasks.local.waiting import wait_until
from counters_tasks.ranking import Ranking, slot_of
from counters_tasks.ranking_bumps import incr_bumps
from counters_tasks.recorder import VisitRecorder, shared_recorder
from tests.support.procs import REPO, celery_env, purge_broker, start_worker
from tests.support.servers import make_client, use_settings

APP = textwrap.dedent("""
    import sys, time
    from counters_tasks import tasks

    prefix, board, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    started = time.perf_counter()
    for i in range(n):  # one page view: a visit and a ranking bump, as an app counts them
        tasks.record_visit.delay(f"192.0.2.{i % 50 + 1}", f"{prefix}/{i % 7}", None, time.time())
        tasks.incr_ranking.delay(board, f"{prefix}/{i % 7}")
    print("calls", n, "us per .delay()", (time.perf_counter() - started) / (2 * n) * 1e6, flush=True)
""")  # and exits: the shared recorder is flushed at interpreter exit


def broker_messages(client: redis.Redis) -> list[tuple[str, list]]:
    """(task name, its items) of each message waiting on the ``visits`` queue (a per-item
    message: its arguments, as one item)."""
    out = []
    for raw in client.lrange("visits", 0, -1):
        message = json.loads(raw)
        name = message["headers"]["task"]
        args = json.loads(base64.b64decode(message["body"]))[0]
        out.append((name, args[0] if name.endswith(("record_visits", "incr_rankings")) else [args]))
    return out


@pytest.fixture
def broker(redis_url):
    purge_broker(redis_url)
    client = redis.Redis.from_url(load_settings({"COUNTERS_REDIS_URL": redis_url}).broker_url)
    yield client
    purge_broker(redis_url)
    client.close()


@pytest.mark.processes
def test_an_app_counting_with_delay_sends_batches_that_a_worker_applies_exactly(redis_url, broker, tmp_path):
    prefix, board, n = f"/buffered-{uuid.uuid4().hex[:8]}", f"buffered{uuid.uuid4().hex[:8]}", 600
    env = celery_env(redis_url, COUNTERS_DELAY_BUFFER="1")
    app = subprocess.run(
        [sys.executable, "-c", APP, prefix, board, str(n)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert app.returncode == 0, app.stderr
    messages = broker_messages(broker)
    assert {name for name, _ in messages} == {"counters_tasks.record_visits", "counters_tasks.incr_rankings"}
    assert sum(len(items) for name, items in messages if name.endswith("record_visits")) == n
    bumps = [bump for name, items in messages if name.endswith("incr_rankings") for bump in items]
    assert sum(bump.get("amount", 1) for bump in bumps) == n
    # a batch's bumps of one member in one slot travel as one bump (Kind.merge): 7 members, in
    # one hour's slot or two (the run may cross an hour)
    assert len(bumps) <= 2 * 7 * sum(name.endswith("incr_rankings") for name, _ in messages) < n
    assert len(messages) <= 8  # a few batches, not 1,200 messages

    worker = start_worker(env, tmp_path / "w.log").wait_ready()
    conn = make_client(redis_url)
    try:
        expected = {f"{prefix}/{k}": len(range(k, n, 7)) for k in range(7)}

        def applied() -> bool:  # the visits' and the rankings' batches are separate messages
            visits_done = sum(sitestats.site_visit_info(conn, None, path).pv for path in expected) == n
            return visits_done and sum(dict(Ranking(conn, board).top(limit=10, withscores=True)).values()) == n

        wait_until(applied, timeout=30, what="the worker applying the batches")
        assert {path: sitestats.site_visit_info(conn, None, path).pv for path in expected} == expected
        assert dict(Ranking(conn, board).top(limit=10, withscores=True)) == expected
    finally:
        worker.stop()
        conn.close()


def test_buffered_delay_validates_at_the_call_and_publishes_a_call_with_options(redis_url, broker, monkeypatch):
    use_settings(monkeypatch, COUNTERS_DELAY_BUFFER="1")
    recorder = shared_recorder()
    before = recorder.stats()["recorded"]
    with pytest.raises(InvalidInput):
        tasks.record_visit.delay("not an ip", "/x")
    with pytest.raises(InvalidInput):
        tasks.incr_ranking.delay("no spaces allowed", "/x", "one")
    assert recorder.stats()["recorded"] == before  # nothing taken for them

    result = tasks.record_visit.delay("192.0.2.7", "/buffered-call", None, time.time())
    assert result.id and recorder.stats()["recorded"] == before + 1
    assert recorder.flush(timeout=10)
    assert [name for name, _ in broker_messages(broker)] == ["counters_tasks.record_visits"]

    broker.delete("visits")
    tasks.record_visit.apply_async(("192.0.2.8", "/with-options", None, time.time()), countdown=0, task_id="given-id")
    [raw] = broker.lrange("visits", 0, -1)  # an option given: published at once, as its own message
    assert json.loads(raw)["headers"]["id"] == "given-id"


def test_buffered_delay_in_eager_mode_is_applied_at_once(redis_url, conn, eager_app, monkeypatch):
    use_settings(monkeypatch, COUNTERS_DELAY_BUFFER="1")
    path = f"/eager-{uuid.uuid4().hex[:8]}"
    tasks.record_visit.delay("192.0.2.9", path, None, time.time())
    assert sitestats.site_visit_info(conn, None, path).pv == 1  # applied in-process, at once


def test_without_the_setting_each_delay_is_its_own_message(redis_url, broker, monkeypatch):
    use_settings(monkeypatch, COUNTERS_DELAY_BUFFER="")
    result = tasks.record_visit.delay("192.0.2.7", "/unbuffered", None, time.time())
    [raw] = broker.lrange("visits", 0, -1)
    message = json.loads(raw)
    assert message["headers"]["task"] == "counters_tasks.record_visit" and message["headers"]["id"] == result.id


def test_a_batch_carries_one_bump_per_member_and_slot_with_the_same_figures(redis_url, broker, conn):
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
        recorder.incr_ranking(board, "/huge", 1, now)  # past the bound: its own bump
        for _ in range(4):  # another board, other settings: never merged with the first's
            recorder.incr_ranking(other, "/popular", 1, now, period_hours=48, interval_hours=2)
        assert recorder.flush(timeout=10)
        assert recorder.stats()["recorded"] == recorder.stats()["sent"] == 30 + 5 + 3 + 2 + 2 + 4
    finally:
        recorder.close(timeout=10)

    [bumps] = [items for name, items in broker_messages(broker) if name.endswith("incr_rankings")]
    seen = sorted(
        (e["board"], e["member"], slot_of(e["ts"], e.get("interval_hours", 1)), e.get("amount", 1)) for e in bumps
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
    assert sorted(e["ts"] for e in bumps) == [earlier] + [now] * (len(bumps) - 1)

    assert incr_bumps(conn, bumps, message_id=str(uuid.uuid4())) == len(bumps)  # as the worker applies it
    assert dict(Ranking(conn, board).top(limit=10, withscores=True)) == {
        "/huge": MAX_AMOUNT + 1,
        "/popular": 33,
        "/other": 5,
        "/amounts": 3,
    }
    assert dict(Ranking(conn, other, period_hours=48, interval_hours=2).top(limit=10, withscores=True)) == {
        "/popular": 4
    }


def test_a_recorders_visits_travel_as_compact_json_with_the_session_digits_that_count(redis_url, broker, conn):
    """What ``VisitRecorder`` puts on the broker (issue 33, the broker's bytes a visit): JSON
    without the spaces after its separators (``recorder.COMPACT_JSON``, read by a worker as any
    JSON) and each session id cut to the 15 hex digits its session number is made of
    (``uniques.short_session_id``): the same unique visitors as the full ids."""
    site_path = f"/compact-{uuid.uuid4().hex[:8]}"
    sessions = [str(uuid.uuid4()).upper() if n % 2 else str(uuid.uuid4()) for n in range(12)]
    now = time.time()
    recorder = VisitRecorder(max_batch=1000, max_delay=60)
    try:
        for n in range(60):
            recorder.record(f"192.0.2.{n % 9 + 1}", site_path, sessions[n % 12], now)
        with pytest.raises(InvalidInput, match="session id"):  # refused at the call, as before
            recorder.record("192.0.2.200", site_path, "not-a-session", now)
        assert recorder.flush(timeout=10)
    finally:
        recorder.close(timeout=10)

    [raw] = broker.lrange("visits", 0, -1)
    body = base64.b64decode(json.loads(raw)["body"])
    decoded = json.loads(body)
    assert body == json.dumps(decoded, separators=(",", ":")).encode()  # no byte of padding
    [items] = [items for name, items in broker_messages(broker) if name.endswith("record_visits")]
    full = {session.replace("-", "")[:15].lower(): session for session in sessions}
    sent = [item["session_id"] for item in items]
    assert {s.lower() for s in sent} == set(full) and all(len(s) == 15 for s in sent)

    day = local_day(now)
    before = uniques.unique_visitors(conn, day)
    assert visits.apply_visits(conn, items, message_id=str(uuid.uuid4())) == 60
    assert uniques.unique_visitors(conn, day) - before == len(sessions)
    assert {uniques.session_number(s) for s in sent} == {uniques.session_number(s) for s in sessions}
