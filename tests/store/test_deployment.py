"""One deployment, one tag key, whatever happens to Redis (``store.deployment``): a Redis restarted
without persistence under a running worker, a tag key deleted by hand, a FLUSHALL with a pinned
key, and a key layout that is not the package's. Real servers, a real worker, new reader processes."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
import uuid

import pytest

from counters_tasks import counters, ranking, sitestats, uniques, visits
from counters_tasks.core.days import local_day
from counters_tasks.core.settings import load_settings
from counters_tasks.errors import TagKeyChanged
from counters_tasks.local.redis_server import RedisServer
from counters_tasks.local.waiting import wait_until
from counters_tasks.store import deployment, keys
from counters_tasks.store.client import is_transient
from tests.support.procs import REPO, celery_env, cli, start_worker
from tests.support.servers import flush, make_client, use_settings

pytestmark = pytest.mark.server_version

PATH = "/after-the-loss"


def page_views(env: dict[str, str], path: str) -> int:
    out = cli(env, "stats", "--day", "today", "--path", path, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["pv"]


def send_visits(server: RedisServer, path: str, count: int, first_ip: int = 0) -> None:
    """``count`` visits by ``.delay()``-like publishes to the broker of ``server``, from an app of
    their own (as a web process would). Neither this process's app nor the package's Celery
    defaults (a module that reads the settings once) are configured for ``server`` here."""
    from celery import Celery

    broker = load_settings({"COUNTERS_REDIS_URL": server.url}).broker_url
    sender = Celery("sender", broker=broker, amqp="counters_tasks.app:MaskingAMQP", set_as_current=False)
    now = time.time()
    try:
        with sender.producer_or_acquire() as producer:
            for n in range(count):
                sender.send_task(
                    "counters_tasks.record_visit",
                    (f"198.51.100.{(first_ip + n) % 250 + 1}", path, None, now),
                    queue="visits",
                    serializer="json",
                    producer=producer,
                )
    finally:
        sender.close()


@pytest.fixture(scope="module")
def own_server(tmp_path_factory):
    """A Redis of this module's own (a test restarts it), without persistence."""
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture
def own_redis(own_server, monkeypatch):
    """``own_server`` emptied, and the test process pointed at it with no pinned tag key (the
    suite's default): the key is generated and kept in Redis."""
    make_client(own_server.url).flushall()
    use_settings(monkeypatch, COUNTERS_REDIS_URL=own_server.url)
    return own_server


@pytest.mark.processes
def test_a_redis_restarted_without_persistence_under_a_running_worker(own_redis, tmp_path):
    env = celery_env(own_redis.url)
    worker = start_worker(env, tmp_path / "worker.log").wait_ready()
    try:
        send_visits(own_redis, "/before", 20)
        wait_until(lambda: page_views(env, "/before") == 20, timeout=30, what="the first visits to count")
        own_redis.stop()
        own_redis.start()  # on the same port, empty: what a restart without persistence leaves
        # a new process reads first: it finds no tag key and must not make one
        assert page_views(env, PATH) == 0
        conn = make_client(own_redis.url)
        assert conn.get(deployment.tag_key_name()) is None
        send_visits(own_redis, PATH, 100)
        # every new reader sees what the running worker writes
        wait_until(lambda: page_views(env, PATH) == 100, timeout=30, what="100 visits after the restart")
        health = cli(env, "health", "--json", "--timeout", "3")
        report = json.loads(health.stdout)
        assert health.returncode == 1 and report["deployment"]["ok"] is False
        assert report["deployment"]["lost_at"] is not None and report["deployment"]["recent_loss"]
        assert "LOST ITS DATA" in cli(env, "health").stdout
        assert "Redis lost the deployment's data" in worker.output()
    finally:
        worker.stop()


@pytest.mark.processes
def test_a_deleted_tag_key_is_put_back_by_the_worker(own_redis, tmp_path):
    env = celery_env(own_redis.url)
    worker = start_worker(env, tmp_path / "worker.log").wait_ready()
    conn = make_client(own_redis.url)
    try:
        send_visits(own_redis, PATH, 10)
        wait_until(lambda: page_views(env, PATH) == 10, timeout=30, what="the first visits to count")
        kept = conn.get(deployment.tag_key_name())
        conn.delete(deployment.tag_key_name())  # evicted, or deleted by hand
        assert page_views(env, PATH) == 0  # a reader without the key sees nothing, and makes none
        assert conn.get(deployment.tag_key_name()) is None
        deadline = time.monotonic() + 30
        sent = 10
        while conn.get(deployment.tag_key_name()) is None:  # the worker's next writes put it back
            assert time.monotonic() < deadline, "the worker did not put the tag key back"
            send_visits(own_redis, PATH, 5, first_ip=sent)
            sent += 5
            time.sleep(0.5)
        assert conn.get(deployment.tag_key_name()) == kept
        wait_until(lambda: page_views(env, PATH) == sent, timeout=30, what="every visit, before and after")
        assert "the tag key" in worker.output() and "putting back" in worker.output()
    finally:
        worker.stop()


def test_a_flushall_is_reported_with_a_pinned_tag_key(pinned_tag_key, raw_conn, caplog):
    """A pinned key is never lost, but the data still is: the marker tells every process."""
    day = local_day(time.time())
    sitestats.record_visit(raw_conn, "192.0.2.1", "/", time.time())
    first = deployment.status(raw_conn)
    assert first["id"] and first["layout"] == deployment.LAYOUT and first["lost_at"] is None and first["ok"]
    raw_conn.flushdb()
    with caplog.at_level(logging.ERROR, logger="counters_tasks.store.deployment"):
        time.sleep(deployment.CHECK_EVERY)  # the writer checks at most every CHECK_EVERY seconds
        sitestats.record_visit(raw_conn, "192.0.2.1", "/", time.time())
    after = deployment.status(raw_conn)
    assert after["id"] != first["id"] and after["lost_at"] is not None and not after["ok"]
    assert any("lost the deployment's data" in r.getMessage() for r in caplog.records)
    assert sitestats.site_visit_info(raw_conn, day).pv == 1


def test_readers_never_make_the_tag_key(raw_conn):
    assert sitestats.site_visit_info(raw_conn, None, "/x").pv == 0
    assert raw_conn.get(deployment.tag_key_name()) is None and not raw_conn.exists(deployment.marker_name())
    sitestats.record_visit(raw_conn, "192.0.2.1", "/x", time.time())
    assert raw_conn.get(deployment.tag_key_name()) is not None
    assert sitestats.site_visit_info(raw_conn, None, "/x").pv == 1


def test_another_layout_is_refused_for_reads_and_writes(raw_conn):
    raw_conn.hset(deployment.marker_name(), mapping={"id": "abc", "layout": deployment.LAYOUT + 1})
    before = sorted(raw_conn.scan_iter())
    with pytest.raises(deployment.LayoutMismatch, match="upgrade counters-tasks"):
        sitestats.record_visit(raw_conn, "192.0.2.1", "/", time.time())
    with pytest.raises(deployment.LayoutMismatch):
        sitestats.site_visit_info(raw_conn, None)
    assert sorted(raw_conn.scan_iter()) == before  # nothing written
    with pytest.raises(deployment.LayoutMismatch, match="newer"):
        deployment.migrate(raw_conn)
    assert not deployment.status(raw_conn)["ok"]


def test_migrate_runs_each_step_in_order(raw_conn, monkeypatch):
    done = []
    monkeypatch.setattr(deployment, "LAYOUT", 3)
    monkeypatch.setattr(deployment, "MIGRATIONS", {1: lambda conn: done.append(1), 2: lambda conn: done.append(2)})
    raw_conn.hset(deployment.marker_name(), mapping={"id": "abc", "layout": 1})
    with pytest.raises(deployment.LayoutMismatch, match="migrate"):
        sitestats.record_visit(raw_conn, "192.0.2.1", "/", time.time())
    assert deployment.migrate(raw_conn) == "migrated the key layout 1 -> 2, 2 -> 3" and done == [1, 2]
    assert deployment.status(raw_conn)["layout"] == 3
    assert deployment.migrate(raw_conn) == "the deployment is at layout 3: nothing to migrate"


def test_a_deployment_of_before_the_marker_is_adopted(raw_conn):
    raw_conn.set(deployment.tag_key_name(), "0123456789abcdef0123456789abcdef")  # what 0.1 made
    assert "marker written" in deployment.migrate(raw_conn)
    with keys.bound(raw_conn) as key:
        assert key == keys.tag_key() == b"0123456789abcdef0123456789abcdef"
    assert deployment.status(raw_conn)["layout"] == deployment.LAYOUT


@pytest.mark.processes
def test_a_worker_refuses_to_start_on_another_layout(raw_conn, redis_url, tmp_path):
    raw_conn.hset(deployment.marker_name(), mapping={"id": "abc", "layout": deployment.LAYOUT + 1})
    worker = start_worker(celery_env(redis_url), tmp_path / "worker.log")
    try:
        assert worker.process.wait(60) != 0
        assert f"key layout {deployment.LAYOUT + 1}" in worker.output() and "upgrade counters-tasks" in worker.output()
    finally:
        worker.stop()
    out = cli(celery_env(redis_url), "migrate")
    assert out.returncode == 1 and "newer" in out.stderr


WRITE_AND_SAY_KEY = """
import sys, time
from counters_tasks import sitestats
from counters_tasks.store import keys
from counters_tasks.store.client import get_redis
conn = get_redis()
sys.stdin.readline()  # every process is up: write together
sitestats.record_visit(conn, sys.argv[1], sys.argv[2], time.time())
with keys.bound(conn) as held:  # the key this process holds now
    print(held.decode())
"""


def writers(env: dict[str, str], count: int, path: str) -> list[str]:
    """``count`` new processes that each record one visit to ``path`` at the same moment (each
    its own visitor); the tag key each ended on."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITE_AND_SAY_KEY, f"192.0.2.{n + 1}", path],
            env=env,
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(count)
    ]
    outs = [p.communicate("go\n", timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    return [out.strip() for out, _ in outs]


@pytest.mark.processes
def test_processes_writing_together_on_an_empty_redis_end_on_one_key(own_redis):
    env = celery_env(own_redis.url)
    held = writers(env, 6, PATH)
    kept = make_client(own_redis.url).get(deployment.tag_key_name()).decode()
    assert held == [kept] * 6  # SET NX: one maker wins, the others take its key
    assert page_views(env, PATH) == 6


@pytest.mark.processes
def test_a_new_writer_first_after_a_loss_and_the_running_worker_converge(own_redis, tmp_path):
    """After the loss a new process writes first (it makes a new key); the running worker, which
    holds the old one and has not checked since, writes under it at once: each such write is
    confirmed, found under a key that lost, and made again under Redis's, so every visit after
    the loss lands under one key."""
    env = celery_env(own_redis.url)
    worker = start_worker(env, tmp_path / "worker.log").wait_ready()
    conn = make_client(own_redis.url)
    try:
        send_visits(own_redis, "/before", 10)
        wait_until(lambda: page_views(env, "/before") == 10, timeout=30, what="the first visits to count")
        old = conn.get(deployment.tag_key_name())
        conn.flushall()
        [new] = set(writers(env, 2, PATH))
        assert new.encode() == conn.get(deployment.tag_key_name()) != old
        send_visits(own_redis, PATH, 100, first_ip=2)  # within CHECK_EVERY of the worker's last check
        wait_until(lambda: page_views(env, PATH) == 102, timeout=30, what="every visit under one key")
        assert conn.get(deployment.tag_key_name()) == new.encode()
        assert "another deployment than before" in worker.output() or "tag key changed" in worker.output()
    finally:
        worker.stop()


@pytest.fixture
def unpinned(redis_url, raw_conn):
    """The session's Redis, emptied, and this process with no pinned tag key (the suite's
    default, tests/conftest.py): its URL."""
    return redis_url


NOW = time.time()
WRITES_AND_FIGURES = {  # a write of visitor n, and the figure it adds 1 to
    "sitestats.record_visit": (
        lambda conn, n: sitestats.record_visit(conn, f"192.0.2.{n}", "/p", NOW, message_id=f"sv{n}"),
        lambda conn: sitestats.site_visit_info(conn, local_day(NOW), "/p").pv,
    ),
    "visits.apply_visits": (
        lambda conn, n: visits.apply_visits(
            conn, [{"ip": f"192.0.2.{n}", "path": "/v", "ts": NOW}], message_id=f"rv{n}"
        ),
        lambda conn: sitestats.site_visit_info(conn, local_day(NOW), "/v").pv,
    ),
    "counters.update_counter": (
        lambda conn, n: counters.update_counter(conn, "c", 1, NOW, message_id=f"uc{n}"),
        lambda conn: counters.get_counter(conn, "c", 86400, NOW)[-1][1],
    ),
    "uniques.count_visit": (
        lambda conn, n: uniques.count_visit(conn, str(uuid.UUID(int=n << 100)), NOW, message_id=f"cv{n}"),
        lambda conn: uniques.unique_visitors(conn, local_day(NOW)),
    ),
    "ranking.incr": (
        lambda conn, n: ranking.Ranking(conn, "likes").incr("post", 1, NOW),
        lambda conn: dict(ranking.Ranking(conn, "likes").top(0, 1, withscores=True, now=NOW))["post"],
    ),
}


@pytest.mark.parametrize("kind", WRITES_AND_FIGURES)
def test_a_write_under_a_tag_key_that_lost_is_made_again(unpinned, kind):
    """Two processes (two clients, each with its own view of the deployment): the first writes,
    Redis loses its data, the second (which never held a key) writes first and makes a new tag
    key; the first then writes with the key it holds, before its next check. That write is
    refused as ``TagKeyChanged`` (transient: the tasks make it again) and, made again, counts
    under the new key: readers see both writes after the loss, once each."""
    write, figure = WRITES_AND_FIGURES[kind]
    holder, newcomer, reader = (make_client(unpinned) for _ in range(3))
    write(holder, 1)
    old = holder.get(deployment.tag_key_name())
    flush(holder)
    write(newcomer, 2)
    assert newcomer.get(deployment.tag_key_name()) not in (None, old)
    with pytest.raises(TagKeyChanged) as refused:  # within CHECK_EVERY of the holder's last check
        write(holder, 3)
    assert is_transient(refused.value)
    write(holder, 3)  # what a task's retry does
    assert figure(reader) == 2


def test_a_write_after_the_tag_key_alone_went_puts_it_back_and_stands(unpinned):
    """No other process made a key meanwhile: the holder's write stands (its key is put back),
    nothing is made again, and the figure counts it once."""
    holder, reader = make_client(unpinned), make_client(unpinned)
    now = time.time()
    sitestats.record_visit(holder, "192.0.2.1", "/q", now)
    holder.delete(deployment.tag_key_name())
    sitestats.record_visit(holder, "192.0.2.2", "/q", now)  # no TagKeyChanged: the key it used is back
    assert sitestats.site_visit_info(reader, local_day(now), "/q").pv == 2


# --- a pinned tag key (what `make run` and compose set) and the processes that lack the pin ------

OTHER_TAG_KEY = "0f" * 16


@pytest.mark.processes
def test_a_reader_without_the_pin_sees_what_a_pinned_worker_wrote(own_redis, tmp_path):
    """The stack pins COUNTERS_TAG_KEY (``make run``'s env file, compose); a shell that did not
    source it, the README's read snippet or an app outside compose reads without it. It must see
    the same figures, and ``health`` must say the data is visible."""
    pinned = celery_env(own_redis.url)
    pinned["COUNTERS_TAG_KEY"] = OTHER_TAG_KEY
    worker = start_worker(pinned, tmp_path / "worker.log").wait_ready()
    try:
        send_visits(own_redis, PATH, 12)
        wait_until(lambda: page_views(pinned, PATH) == 12, timeout=30, what="the visits to count")
    finally:
        worker.stop()
    bare = celery_env(own_redis.url)
    assert page_views(bare, PATH) == 12
    report = json.loads(cli(bare, "health", "--json", "--timeout", "1").stdout)
    assert report["deployment"]["visible"] is True and report["deployment"]["ok"] is True


def test_a_pinned_writer_keeps_its_key_in_redis(unpinned, monkeypatch):
    monkeypatch.setenv("COUNTERS_TAG_KEY", OTHER_TAG_KEY)
    use_settings(monkeypatch)
    conn = make_client(unpinned)
    sitestats.record_visit(conn, "192.0.2.1", "/pin", time.time())
    assert conn.get(deployment.tag_key_name()) == OTHER_TAG_KEY.encode()


def test_a_pin_that_differs_from_the_deployments_key_is_refused_loudly(unpinned, monkeypatch):
    """The data was written under one key; a process pinned to another would read zeros and
    write where no reader looks: it refuses both, with a message that says what to do."""
    conn = make_client(unpinned)
    sitestats.record_visit(conn, "192.0.2.1", "/pin", time.time())  # the deployment's own key
    made = conn.get(deployment.tag_key_name())
    monkeypatch.setenv("COUNTERS_TAG_KEY", OTHER_TAG_KEY)
    use_settings(monkeypatch)
    other = make_client(unpinned)
    before = sorted(conn.scan_iter())
    with pytest.raises(deployment.TagKeyMismatch, match="COUNTERS_TAG_KEY"):
        sitestats.record_visit(other, "192.0.2.2", "/pin", time.time())
    with pytest.raises(deployment.TagKeyMismatch):
        sitestats.site_visit_info(other, None, "/pin")
    assert sorted(conn.scan_iter()) == before and conn.get(deployment.tag_key_name()) == made
    status = deployment.status(other)
    assert status["ok"] is False and status["visible"] is False and "COUNTERS_TAG_KEY" in status["problem"]


@pytest.mark.processes
def test_health_fails_when_this_process_cannot_see_the_data(unpinned, monkeypatch):
    """A deployment written before pinned keys were kept in Redis: a marker and data, no
    ``ct:tagkey``. A process without the pin reads zeros: its ``health`` must fail and say why."""
    monkeypatch.setenv("COUNTERS_TAG_KEY", OTHER_TAG_KEY)
    use_settings(monkeypatch)
    conn = make_client(unpinned)
    sitestats.record_visit(conn, "192.0.2.1", "/old", time.time())
    conn.delete(deployment.tag_key_name())  # as a pinned writer of before left it
    env = celery_env(unpinned)
    env.pop("COUNTERS_TAG_KEY")  # (this process's pin, which the environment passed on)
    out = cli(env, "health", "--json", "--timeout", "1")
    report = json.loads(out.stdout)
    assert out.returncode == 1 and report["deployment"]["ok"] is False and report["deployment"]["visible"] is False
    assert "COUNTERS_TAG_KEY" in report["deployment"]["problem"]
    assert "COUNTERS_TAG_KEY" in cli(env, "health", "--timeout", "1").stdout
