"""Batched ingestion: record_visits, VisitRecorder, and worker-side batches of record_visit."""

from __future__ import annotations

import logging
import threading
import time

import pytest
import redis

from counters_tasks import ranking_bumps, refusals, tasks, visits
from counters_tasks.core.settings import load_settings
from counters_tasks.errors import InvalidInput, MalformedMessage
from counters_tasks.local.waiting import wait_until
from counters_tasks.recorder import VisitRecorder
from counters_tasks.store import scripts
from tests.support.concurrency import true_in_forked_child
from tests.support.servers import dump_all
from tests.support.visit_model import model_of, random_visits

pytestmark = [pytest.mark.workers, pytest.mark.server_version]


def test_record_visits_equals_one_by_one_and_chunks(raw_conn):
    batch = random_visits(3 * visits.CHUNK + 17, seed=2)
    assert visits.apply_visits(raw_conn, batch, message_id="batch-1") == len(batch)
    assert model_of(batch).mismatches(raw_conn) == []


def test_record_visits_same_batch_id_counts_once(raw_conn):
    batch = random_visits(600, seed=3)
    for _ in range(3):
        visits.apply_visits(raw_conn, batch, message_id="same-batch")
    assert model_of(batch).mismatches(raw_conn) == []
    visits.apply_visits(raw_conn, batch, message_id="other-batch")
    assert model_of(batch + batch).mismatches(raw_conn) == []


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ([1], "malformed"),
        ([{"ip": "1.2.3.4"}], "malformed"),
        ([{"path": "/"}], "malformed"),
        ([{"ip": "x", "path": "/"}], "bad_input"),
        ([{"ip": "1.2.3.4", "path": "/", "extra": 1}], "malformed"),
        ([{"ip": "1.2.3.4", "path": "/", "ts": float("nan")}], "bad_input"),
        ([{"ip": "1.2.3.4", "path": "/", "session_id": "zz"}], "bad_input"),
        ([{"ip": "1.2.3.4", "path": "/", "ts": time.time() + 86400}], "future"),
    ],
)
def test_one_bad_visit_is_refused_alone_and_counted(raw_conn, bad, reason):
    good = random_visits(10, seed=4)
    visits.apply_visits(raw_conn, good, message_id="b")
    only_good = dump_all(raw_conn)
    raw_conn.flushdb()
    payload = good[:5] + bad + good[5:]
    assert visits.apply_visits(raw_conn, payload, message_id="b") == len(good)
    assert visits.apply_visits(raw_conn, payload, message_id="b") == len(good)  # redelivered
    assert dump_all(raw_conn) == only_good  # the bad item wrote nothing
    assert refusals.counts(raw_conn)[reason] == 1  # counted once, whatever the deliveries


def test_a_batch_that_is_not_a_list_is_refused_whole_and_counted(eager_app, raw_conn):
    with pytest.raises(MalformedMessage):
        tasks.record_visits.apply(args=["not a list"], task_id="b")
    with pytest.raises(MalformedMessage):
        tasks.incr_rankings.apply(args=[{"board": "b"}], task_id="e")
    assert dump_all(raw_conn) == {}
    assert refusals.counts(raw_conn)["malformed"] == 2


def test_batch_size_is_bounded(raw_conn):
    with pytest.raises(MalformedMessage):
        visits.apply_visits(raw_conn, random_visits(visits.MAX_BATCH + 1, seed=5))


def test_every_lua_call_of_a_full_batch_is_bounded(raw_conn, monkeypatch):
    """A full batch of one path and one day is cut so no call carries more than one chunk's
    items (the time bound itself, 5 ms, is checked with SLOWLOG in bench/ingest.py)."""
    sizes = []
    real = scripts.run_script

    def spy(conn, name, keys, args, client=None):
        sizes.append((name, len(keys) + len(args)))
        return real(conn, name, keys, args, client=client)

    monkeypatch.setattr(scripts, "run_script", spy)
    for module in ("counters", "sitestats.site_day", "uniques"):
        monkeypatch.setattr(f"counters_tasks.{module}.run_script", spy)
    batch = random_visits(visits.MAX_BATCH, seed=6, visitors=5000, paths=1, sessions=5000)
    visits.apply_visits(raw_conn, batch, message_id="big")
    assert model_of(batch).mismatches(raw_conn) == []
    assert len(sizes) >= visits.MAX_BATCH // visits.CHUNK
    per_call = {name: max(size for n, size in sizes if n == name) for name, _ in sizes}
    assert per_call["site_day"] <= 3 * visits.CHUNK + 20  # (visitor, path, digest) of one chunk
    assert per_call["site_all"] <= visits.CHUNK + 20 and per_call["path_all"] <= 2 * visits.CHUNK + 20
    assert per_call["unique_visit"] <= 4 * visits.UNIQUES_PER_CALL + 20  # (key, number, size, id) per id at most
    assert per_call["counter_update"] <= 2 * 7 * visits.CHUNK + 40


def test_eager_tasks(eager_app, raw_conn):
    batch = random_visits(50, seed=7)
    tasks.record_visits.apply(args=[batch], task_id="t1")
    tasks.record_visits.apply(args=[batch], task_id="t1")
    for n, v in enumerate(batch[:10]):
        for _ in range(2):
            tasks.record_visit.apply(args=[v["ip"], v["path"], v.get("session_id"), v["ts"]], task_id=f"v-{n}")
    assert model_of(batch + batch[:10]).mismatches(raw_conn) == []
    assert tasks.record_visits.apply(args=[[{"ip": "nope", "path": "/"}]]).get() == 0  # refused alone
    assert refusals.counts(raw_conn)["bad_input"] == 1
    with pytest.raises(InvalidInput):
        tasks.record_visit.apply(args=["1.2.3.4"])  # path missing


# --- through a real worker ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def worker(batching_worker):
    return batching_worker


@pytest.mark.processes
def test_worker_applies_per_visit_messages_in_batches_exactly(worker, raw_conn, redis_url):
    batch = random_visits(1500, seed=8)
    for v in batch:
        tasks.record_visit.delay(v["ip"], v["path"], v.get("session_id"), v["ts"])
    tasks.record_visit.delay("not an ip", "/")  # refused, alone: the rest of its batch counts
    model = model_of(batch)
    wait_until(
        lambda: model.visits_counted(raw_conn) >= len(batch),
        timeout=60,
        what=f"the worker; log:\n{worker.output()[-2000:]}",
    )
    assert model.mismatches(raw_conn) == []
    wait_until(lambda: "refused" in worker.output(), timeout=10, what="the bad message to be refused")
    # every message acknowledged on the broker too (a batch's acks leave its records in one round
    # trip: QoS.acks_together), so none comes back after the visibility timeout
    broker = redis.Redis.from_url(load_settings({"COUNTERS_REDIS_URL": redis_url}).broker_url)
    wait_until(
        lambda: broker.hlen("unacked") == 0 and broker.zcard("unacked_index") == 0,
        timeout=10,
        what="the broker's unacked records to be removed",
    )


@pytest.mark.processes
def test_recorder_from_many_threads_reaches_redis_exactly(worker, raw_conn):
    batch = random_visits(4000, seed=9)
    recorder = VisitRecorder(max_batch=300, max_delay=0.05)
    chunks = [batch[i::4] for i in range(4)]

    def produce(part):
        for v in part:
            recorder.record(v["ip"], v["path"], v.get("session_id"), v["ts"])

    threads = [threading.Thread(target=produce, args=(part,)) for part in chunks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert recorder.close(timeout=30)
    stats = recorder.stats()
    assert stats["recorded"] == stats["sent"] == len(batch) and stats["dropped"] == 0 and stats["pending"] == 0
    assert stats["batches"] >= len(batch) // 300
    model = model_of(batch)
    wait_until(lambda: model.visits_counted(raw_conn) >= len(batch), timeout=60, what="the worker")
    assert model.mismatches(raw_conn) == []


@pytest.mark.processes
def test_recorder_sends_on_time_without_flush(worker, raw_conn):
    recorder = VisitRecorder(max_batch=1000, max_delay=0.1)
    batch = random_visits(5, seed=10)
    for v in batch:
        recorder.record(v["ip"], v["path"], v.get("session_id"), v["ts"])
    wait_until(lambda: recorder.stats()["sent"] == 5, timeout=10, what="the time-based send")
    wait_until(lambda: model_of(batch).visits_counted(raw_conn) == 5, timeout=30, what="the worker")
    recorder.close()


def test_recorder_validates_at_record_time():
    recorder = VisitRecorder()
    with pytest.raises(InvalidInput):
        recorder.record("not an ip", "/")
    with pytest.raises(InvalidInput):
        recorder.record("1.2.3.4", "")
    assert recorder.stats()["recorded"] == 0
    recorder.close()


def test_recorder_never_blocks_on_a_dead_broker_and_counts_what_it_drops(caplog):
    from celery import Celery

    dead = Celery("dead", broker="redis://127.0.0.1:9/0", set_as_current=False)
    dead.conf.update(broker_connection_timeout=0.2, broker_connection_retry=False, task_serializer="json")
    recorder = VisitRecorder(app=dead, max_batch=100, max_buffer=500, max_delay=0.01, retry_initial=0.05, retry_max=0.1)
    batch = random_visits(800, seed=11)
    started = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="counters_tasks.recorder"):
        for v in batch:
            recorder.record(v["ip"], v["path"], v.get("session_id"), v["ts"])
        elapsed = time.perf_counter() - started
        wait_until(lambda: recorder.stats()["send_errors"] >= 2, timeout=10, what="send retries")
    stats = recorder.stats()
    assert elapsed < 2.0, f"record() must not wait for the broker ({elapsed:.2f}s for {len(batch)})"
    assert stats["pending"] == 500 and stats["dropped"] == 300 and stats["sent"] == 0
    assert any("dropped" in r.getMessage() for r in caplog.records)
    assert not recorder.close(timeout=0.5)
    assert recorder.stats()["dropped"] == 800


@pytest.mark.processes
def test_recorder_in_a_forked_child_starts_empty(worker):
    recorder = VisitRecorder(max_batch=1000, max_delay=60)
    recorder.record("192.0.2.1", "/fork")
    assert true_in_forked_child(lambda: recorder.stats()["pending"] == 0 and recorder.stats()["recorded"] == 0)
    assert recorder.stats()["pending"] == 1
    assert recorder.close(timeout=10)


# --- ranking bumps in batches ---------------------------------------------------------------


def _ranking_bumps(n: int, seed: int, now: float) -> list[dict]:
    import random

    rng = random.Random(seed)
    return [
        {
            "board": rng.choice(["posts", "pages"]),
            "member": f"m{rng.randint(0, 60)}",
            "amount": rng.randint(-1, 5),
            "ts": now - rng.uniform(0, 30 * 3600),
        }
        for _ in range(n)
    ]


def test_incr_bumps_equal_incr_one_by_one(conn):
    from counters_tasks import ranking

    now = 1_700_000_000
    bumps = _ranking_bumps(1200, seed=12, now=now)
    ranking_bumps.incr_bumps(conn, bumps, message_id="r1")
    ranking_bumps.incr_bumps(conn, bumps, message_id="r1")  # redelivered: nothing more
    for bump in bumps:
        ranking.Ranking(conn, bump["board"]).incr(bump["member"], bump["amount"], bump["ts"], message_id=None)
    for board in ("posts", "pages"):
        totals: dict[str, int] = {}
        for e in bumps:
            if e["board"] == board and ranking.slot_of(e["ts"], 1) > ranking.slot_of(now, 1) - 24:
                totals[e["member"]] = totals.get(e["member"], 0) + 2 * e["amount"]
        expected = sorted(((m, t) for m, t in totals.items() if t > 0), key=lambda mt: (-mt[1], mt[0]))
        assert ranking.Ranking(conn, board).top(limit=1000, withscores=True, now=now) == expected


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ([1], "malformed"),
        ([{"board": "b"}], "malformed"),
        ([{"member": "m"}], "malformed"),
        ([{"board": "b", "member": "m", "amount": 1.5}], "bad_input"),
        ([{"board": "b", "member": "m", "period_hours": 5}], "board_settings"),
        ([{"board": "c", "member": "m", "interval_hours": 5}], "bad_input"),
        ([{"board": "b", "member": "m", "x": 1}], "malformed"),
        ([{"board": "b", "member": "m", "period_hours": 48}], "board_settings"),  # b is fixed to (24, 1)
        ([{"board": "ok", "member": "m", "period_hours": 48}], "board_settings"),  # other settings in one batch
        ([{"board": "b", "member": "m", "ts": time.time() + 86400}], "future"),
    ],
)
def test_one_bad_ranking_bump_is_refused_alone_and_counted(raw_conn, bad, reason):
    from counters_tasks import ranking

    now = time.time()
    good = [{"board": "ok", "member": "m", "ts": now}, {"board": "b", "member": "n", "ts": now}]
    ranking.Ranking(raw_conn, "b").incr("seed", 1, now=now)
    ranking_bumps.incr_bumps(raw_conn, good, message_id="e")
    only_good = dump_all(raw_conn)
    raw_conn.flushdb()
    ranking.Ranking(raw_conn, "b").incr("seed", 1, now=now)
    payload = good[:1] + bad + good[1:]
    assert ranking_bumps.incr_bumps(raw_conn, payload, message_id="e") == 2
    assert ranking_bumps.incr_bumps(raw_conn, payload, message_id="e") == 2  # redelivered: nothing more
    assert dump_all(raw_conn) == only_good
    assert refusals.counts(raw_conn)[reason] == 1


def test_ranking_batch_that_is_not_a_list_or_too_long_is_refused_whole(raw_conn):

    with pytest.raises(MalformedMessage):
        ranking_bumps.incr_bumps(raw_conn, "x")
    with pytest.raises(MalformedMessage):
        ranking_bumps.incr_bumps(raw_conn, [{"board": "b", "member": "m"}] * (ranking_bumps.MAX_BUMPS + 1))
    assert dump_all(raw_conn) == {}


@pytest.mark.processes
def test_recorder_ranking_bumps_reach_the_board(worker, raw_conn):
    from counters_tasks import ranking

    now = time.time()
    recorder = VisitRecorder(max_batch=100, max_delay=0.05)
    for n in range(250):
        recorder.incr_ranking("recorded", f"post{n % 7}", 1, now)
    assert recorder.close(timeout=30)
    board = ranking.Ranking(raw_conn, "recorded")
    expected = sorted(((f"post{i}", len(range(i, 250, 7))) for i in range(7)), key=lambda mt: (-mt[1], mt[0]))
    wait_until(
        lambda: board.top(limit=10, withscores=True, now=now) == expected, timeout=30, what="the ranking batches"
    )


@pytest.mark.processes
def test_the_worker_keeps_who_visits_whatever_the_app_says(worker, raw_conn, monkeypatch):
    """The app's process set COUNTERS_CLIENT_TABLES=off, its worker keeps the tables (the default):
    the views still tell their browser (the producer sends the headers whatever its own setting),
    through ``VisitRecorder`` and ``.delay()`` alike, instead of a table of ``(unknown)``."""
    from counters_tasks import sitestats
    from counters_tasks.core.days import local_day
    from counters_tasks.core.settings import reset_settings

    monkeypatch.setenv("COUNTERS_CLIENT_TABLES", "off")
    reset_settings()
    agent = "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0"
    now = time.time()
    recorder = VisitRecorder(max_delay=0.05)
    for n in range(3):
        recorder.record(f"192.0.2.{n + 1}", "/app-off", ts=now, user_agent=agent, language="de-DE")
    assert recorder.close(timeout=10)
    tasks.record_visit.delay("192.0.2.9", "/app-off", ts=now, user_agent=agent, language="de-DE")
    day = local_day(now)
    wait_until(lambda: sitestats.site_visit_info(raw_conn, day).pv == 4, timeout=30, what="the four views")
    browsers = sitestats.top_clients(raw_conn, day, day, "browser")
    languages = sitestats.top_clients(raw_conn, day, day, "language")
    assert [(row.source, row.pv) for row in browsers] == [("Firefox", 4)]
    assert [(row.source, row.pv) for row in languages] == [("de-DE", 4)]
