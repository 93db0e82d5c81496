"""Scale-out: the key schema on Redis Cluster, several workers, one beat or an HA beat (redbeat).

Runs in ``make test`` (one server) and in ``make test-cluster`` (a 3-master cluster; then the
broker is a separate single redis-server, as Celery's Redis broker cannot be a cluster).
"""

from __future__ import annotations

import collections
import importlib
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis
from redis.cluster import key_slot

from counters_tasks import counters, ranking, ranking_bumps, sitestats, uniques, visits
from counters_tasks.core import days
from counters_tasks.core.settings import reset_settings, url_with_db
from counters_tasks.local.redis_server import RedisServer
from counters_tasks.local.waiting import wait_until
from counters_tasks.store import scripts
from counters_tasks.store.client import as_str
from tests.support.procs import REPO, celery_env, start_beat, start_worker
from tests.support.servers import flush, is_cluster_run

DOCS = Path(__file__).resolve().parents[2] / "docs" / "keys.md"
pytestmark = pytest.mark.cluster

SCRIPTED = ("counters", "sitestats.site_day", "uniques", "ranking", "visits")
TAG = re.compile(r"\{([^}]*)\}")


def realistic_load(conn, now: float) -> None:
    """Visits over two days (sessions, many paths and visitors), counters, boards, every beat job.

    User strings include braces, spaces and stars: they must never choose a slot.
    """
    paths = [f"/article/{i}" for i in range(60)] + ["/{evil}", "/a b*", "/{}"]
    for i in range(400):
        ts = now - 86400 * (i % 2) - i
        ip = f"10.0.{i % 7}.{i % 97 + 1}"
        visits.apply_visit(
            conn,
            ip,
            paths[i % len(paths)],
            str(uuid.UUID(int=(i * 7919 + 1) << 80)),
            ts,
            message_id=f"m{i}" if i % 3 == 0 else None,
        )
    batch = [
        {
            "ip": f"10.9.{i % 5}.{i % 31 + 1}",
            "path": paths[i % 17],
            "session_id": str(uuid.UUID(int=(i + 7) << 80)),
            "ts": now - i,
        }
        for i in range(300)
    ]
    visits.apply_visits(conn, batch, message_id="batch-1")
    visits.apply_visits(conn, batch[:50])
    ranking_bumps.incr_bumps(
        conn,
        [{"board": f"batch board {{x}}{i % 6}", "member": f"m{i % 9}", "amount": 1, "ts": now} for i in range(120)],
        message_id="rb-1",
    )
    for i in range(40):
        counters.update_counter(conn, f"signups:{{plan}}{i}", i + 1, now - 3600 * (i % 5), message_id=f"c{i}")
        counters.update_counter(conn, f"old{i}", 1, now - 200 * 86400)
    for b in range(12):
        board = ranking.Ranking(conn, f"likes {{b}}{b}", 24, 1)
        for m in range(8):
            board.incr(f"post{m}", m + 1, now - 3600 * (m % 3), message_id=f"r{b}.{m}" if m % 2 else None)
        board.top(0, 5, withscores=True, now=now)
    ranking.Ranking(conn, "weekly", 24 * 7, 24).incr("x", 1, now)
    counters.clean_counters(conn, now)
    ranking.rotate_all(conn, now + 86400)
    uniques.precompute_due(conn, now)
    uniques.precompute_expected(conn, days.local_day(now + 86400))
    sitestats.site_visit_info(conn)
    sitestats.site_visit_info(conn, days.local_day(now), "/article/1")
    visits.apply_visits(
        conn, [{"ip": "192.0.2.1", "path": "/a", "ts": now}, {"ip": "nope", "path": "/a"}], message_id="with-a-refusal"
    )


@pytest.fixture
def script_calls(monkeypatch):
    """Every script call as (name, keys, the key names passed as arguments)."""
    calls: list[tuple[str, list[str], list[str]]] = []
    real = scripts.run_script

    def spy(conn, name, keys_, args, client=None):
        as_text = [as_str(k) for k in keys_]
        named = [a for a in args if isinstance(a, str) and a.startswith("ct:") and "{" in a]
        calls.append((name, as_text, named))
        return real(conn, name, keys_, args, client=client)

    for module in SCRIPTED:
        target = importlib.import_module(f"counters_tasks.{module}")
        if hasattr(target, "run_script"):
            monkeypatch.setattr(target, "run_script", spy)
    monkeypatch.setattr(scripts, "run_script", spy)
    return calls


def all_keys(conn) -> list[str]:
    return sorted(as_str(k) for k in conn.scan_iter(count=1000))


def test_every_script_call_stays_in_one_slot_and_load_spreads(raw_conn, script_calls):
    uniques.forget_expected()
    realistic_load(raw_conn, time.time())
    names = collections.Counter(name for name, _, _ in script_calls)
    assert set(names) >= {
        "counter_update",
        "counter_clean",
        "site_day",
        "site_all",
        "path_all",
        "unique_visit",
        "unique_expected",
        "ranking_incr",
        "ranking_top",
        "ranking_rotate",
    }, names
    slots_of_calls = []
    for name, keys_, named in script_calls:
        slots = {key_slot(k.encode()) for k in keys_ + named}
        assert len(slots) == 1, (name, keys_, named)
        slots_of_calls.append(slots.pop())
    # Keys spread: many slots, and each third of the slot space (a 3-master cluster's nodes) holds
    # a fair share of them. Counted in slots, not keys: the keys of one day (its uniques shards,
    # hundreds under a realistic load) share one slot by design, so a count of keys would hang on
    # where today's tag falls (it failed on 2026-11-24 with 971, 793 and 305 keys a third).
    stored = all_keys(raw_conn)
    key_slots = collections.Counter(key_slot(k.encode()) for k in stored)
    assert len(key_slots) > 100, len(key_slots)
    thirds = collections.Counter(s * 3 // 16384 for s in key_slots)
    assert min(thirds.values()) > len(key_slots) / 6, thirds
    assert len(set(slots_of_calls)) > 100
    # User strings never pick a slot: every tag is one the package makes (a hash, a group, or the
    # refusal counts' constant tag, the day registry's, the tombstones'); untagged keys are the beat
    # jobs' own and the erasures' audit (no user string in them).
    for key in stored:
        found = TAG.search(key)
        if found is None:
            assert re.fullmatch(r"ct:(tagkey|deployment|job:\w+|lock:\w+|retention|forget:audit)", key), key
        else:
            assert re.fullmatch(r"[0-9a-f]{16}|[rbcp]\d+|refused|imports|throughput|days|forgotten", found.group(1)), (
                key
            )


def documented_patterns() -> list[tuple[re.Pattern, str]]:
    """(regex, TTL cell) of every key in the tables of docs/keys.md."""
    out = []
    for line in DOCS.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("| `ct:") or len(cells) < 6:
            continue
        for pattern in re.findall(r"`(ct:[^`]+)`", cells[0]):
            regex = re.escape(pattern)
            regex = re.sub(r"\\\{(tag|group|r|b|c|p)[^}]*\\\}", r"\\{[0-9a-zA-Z]+\\}", regex)
            # <D>: a day of the default site, or of a page's scope (COUNTERS_CLIENT_PAGES: "A page's who visits")
            regex = regex.replace("<kind>", "(vis|hll)").replace("<D>", r"(%1E[\w-]{8}%1F)?\d{4}-\d\d-\d\d")
            regex = re.sub(r"<(precision|slot|shard|n)>", r"-?\\d+", regex)
            regex = regex.replace("<source\\ letter>", "[rsmc]").replace("<client\\ letter>", "[bodgl]")
            regex = re.sub(r"<[^>]+>", ".+", regex)
            out.append((re.compile(regex), cells[3]))
    return out


@pytest.mark.parametrize("mode", ["exact", "hll"])
def test_keys_md_documents_every_key_with_its_ttl(raw_conn, mode, monkeypatch):
    """Every key a realistic load leaves is in docs/keys.md, with the TTL (or none) it says."""
    monkeypatch.setenv("COUNTERS_UV_MODE", mode)
    reset_settings()
    uniques.forget_expected()
    realistic_load(raw_conn, time.time())
    patterns = documented_patterns()
    assert len(patterns) >= 25
    for key in all_keys(raw_conn):
        found = [ttl_doc for regex, ttl_doc in patterns if regex.fullmatch(key)]
        assert len(found) == 1, f"{key} is in docs/keys.md {len(found)} times"
        has_ttl = raw_conn.ttl(key) > 0
        assert has_ttl == (not found[0].startswith("none")), (key, found[0])


# --- several workers, and beat ----------------------------------------------------------------


@pytest.fixture(scope="module")
def broker_url(redis_url, tmp_path_factory):
    """The broker: a separate single redis-server on a cluster run, else db 1 of the test server."""
    if not is_cluster_run():
        yield url_with_db(redis_url, 1)
        return
    server = RedisServer(tmp_path_factory.mktemp("broker")).start()
    try:
        yield server.url
    finally:
        server.stop()


def cluster_env(redis_url: str, broker: str, **extra: str) -> dict[str, str]:
    return celery_env(
        redis_url, CELERY_BROKER_URL=broker, COUNTERS_REDIS_CLUSTER="1" if is_cluster_run() else "", **extra
    )


def clear_broker(url: str) -> None:
    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()


@pytest.mark.processes
def test_two_workers_give_exact_totals(redis_url, broker_url, raw_conn, tmp_path):
    from counters_tasks import tasks
    from counters_tasks.app import app

    clear_broker(broker_url)
    now = time.time()
    today = days.local_day(now)
    env = cluster_env(redis_url, broker_url)
    workers = [start_worker(env, tmp_path / f"w{i}.log", concurrency=2, name=f"w{i}", queues="visits") for i in (1, 2)]
    sent = 600
    try:
        with app.connection_for_write(broker_url) as connection, connection.Producer() as producer:
            for i in range(sent):
                tasks.update_counter.apply_async(("two-workers", 1, now), producer=producer)
                if i % 3 == 0:
                    tasks.record_visit.apply_async(
                        (f"10.1.{i % 50}.{i % 200 + 1}", f"/p{i % 30}", str(uuid.UUID(int=(i % 150 + 1) << 80)), now),
                        producer=producer,
                    )
                if i % 2 == 0:
                    tasks.incr_ranking.apply_async(("two-workers", f"m{i % 10}", 1, now), producer=producer)
        day_bucket = int(now // 86400) * 86400
        wait_until(
            lambda: counters.get_counter(raw_conn, "two-workers", 86400, now) == [(day_bucket, sent)],
            timeout=90,
            what=f"600 counts; got {counters.get_counter(raw_conn, 'two-workers', 86400, now)}",
        )
        wait_until(lambda: sitestats.site_visit_info(raw_conn, today).pv == sent // 3, timeout=60, what="the visits")
        wait_until(
            lambda: sum(s for _, s in ranking.Ranking(raw_conn, "two-workers").top(0, 10, True, now)) == sent // 2,
            timeout=60,
            what="the ranking",
        )
    finally:
        codes = [w.stop() for w in workers]
    assert codes == [0, 0], [w.output()[-2000:] for w in workers]
    visitors = {(f"10.1.{i % 50}.{i % 200 + 1}") for i in range(0, sent, 3)}
    assert sitestats.site_visit_info(raw_conn, today).uv == len(visitors)
    assert uniques.unique_visitors(raw_conn, today) == len({i % 150 for i in range(0, sent, 3)})
    assert sorted(ranking.Ranking(raw_conn, "two-workers").top(0, 10, True, now)) == [
        (f"m{k}", sent // 10) for k in range(0, 10, 2)
    ]
    done = [w.output().count("succeeded in") for w in workers]
    assert min(done) > 0, done  # both workers took part


def beat_sends(beat) -> int:
    return beat.output().count("Sending due task clean-counters")


@pytest.mark.skipif(is_cluster_run(), reason="the beat lock lives in the broker, a single Redis either way")
@pytest.mark.processes
def test_two_redbeat_beats_send_each_job_once_and_fail_over(redis_url, tmp_path):
    pytest.importorskip("redbeat")
    broker = url_with_db(redis_url, 3)
    clear_broker(broker)
    env = celery_env(
        redis_url,
        CELERY_BROKER_URL=broker,
        COUNTERS_CLEAN_EVERY="1",
        COUNTERS_BEAT_SCHEDULER="redbeat",
        COUNTERS_BEAT_LOCK_TIMEOUT="3",
        COUNTERS_BEAT_MAX_INTERVAL="1",
    )
    beats = []
    for i in (1, 2):
        (tmp_path / f"b{i}").mkdir()
        beats.append(start_beat(env, tmp_path / f"b{i}", tmp_path / f"b{i}.log"))
    try:
        holder = wait_until(
            lambda: next((b for b in beats if "Acquired lock" in b.output()), None),
            timeout=30,
            what="a beat to take the lock",
        )
        standby = beats[1 - beats.index(holder)]
        wait_until(lambda: beat_sends(holder) >= 1, timeout=15, what="the first send")
        before = beat_sends(holder)
        time.sleep(6)
        sent = beat_sends(holder) - before
        # once a second by one beat: never more (a second sender would double it); fewer only if
        # the machine starves the beat, so the lower bound is loose
        assert 2 <= sent <= 8, sent
        assert beat_sends(standby) == 0 and "Acquired lock" not in standby.output()
        holder.kill()
        killed = time.monotonic()
        wait_until(
            lambda: beat_sends(standby) >= 1, timeout=20, what=f"the standby to take over:\n{standby.output()[-2000:]}"
        )
        took = time.monotonic() - killed
        assert took < 3 + 1 + 10, took  # lock timeout + one tick + slack for a busy machine
        before = beat_sends(standby)
        time.sleep(3)
        assert 1 <= beat_sends(standby) - before <= 5
    finally:
        for beat in beats:
            beat.stop()
        clear_broker(broker)


@pytest.mark.skipif(is_cluster_run(), reason="beat on a cluster is exercised by test_cluster.py")
@pytest.mark.processes
def test_one_default_beat_sends_each_job_once(redis_url, tmp_path):
    """Without redbeat, one beat process: the cleaner is sent once per interval, not more."""
    broker = url_with_db(redis_url, 4)
    clear_broker(broker)
    env = celery_env(redis_url, CELERY_BROKER_URL=broker, COUNTERS_CLEAN_EVERY="1")
    beat = start_beat(env, tmp_path, tmp_path / "beat.log")
    try:
        wait_until(lambda: beat_sends(beat) >= 1, timeout=20, what="the first send")
        before = beat_sends(beat)
        time.sleep(4)
        assert 1 <= beat_sends(beat) - before <= 5  # once a second at most: one send per tick
    finally:
        beat.stop()
        clear_broker(broker)


@pytest.mark.processes
def test_redbeat_setting_configures_the_scheduler(redis_url):
    probe = (
        "import celeryconfig as c; print(getattr(c, 'beat_scheduler', None), getattr(c, 'redbeat_lock_timeout', None),"
        " getattr(c, 'redbeat_redis_url', None) == c.broker_url)"
    )
    env = celery_env(redis_url, CELERY_BROKER_URL=url_with_db(redis_url, 5), COUNTERS_BEAT_LOCK_TIMEOUT="12")
    on = subprocess.run(
        [sys.executable, "-c", probe],
        env=dict(env, COUNTERS_BEAT_SCHEDULER="redbeat"),
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert on == ["redbeat.RedBeatScheduler", "12.0", "True"]
    off = subprocess.run([sys.executable, "-c", probe], env=env, cwd=REPO, capture_output=True, text=True, check=True)
    assert off.stdout.split() == ["None", "None", "False"]


def test_flush_helper_reaches_every_node(raw_conn):
    """The fixtures' flush empties every master (so the tests above start clean on a cluster)."""
    counters.update_counter(raw_conn, "a", 1)
    flush(raw_conn)
    assert all_keys(raw_conn) == []
