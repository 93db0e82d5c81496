"""Redis Cluster only (``make test-cluster``): maintenance on every node, the worker and beat on a
cluster with a separate single-Redis broker, and a master killed under load."""

from __future__ import annotations

import re
import threading
import time
import uuid
from datetime import datetime

import pytest
import redis
from redis.cluster import RedisCluster, key_slot

from counters_tasks import counters, ranking, sitestats, uniques
from counters_tasks.core import days
from counters_tasks.local.waiting import wait_until
from counters_tasks.store import keys
from counters_tasks.store.client import as_str
from counters_tasks.worker.maintenance import job_status
from tests.support.cluster import RedisClusterProcesses
from tests.support.procs import celery_env, start_beat, start_worker
from tests.support.servers import is_cluster_run
from tests.system.test_scaleout import broker_url  # noqa: F401  (the fixture)

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.processes,
    pytest.mark.skipif(not is_cluster_run(), reason="needs the Redis Cluster of make test-cluster"),
]


def node_clients(conn: RedisCluster) -> list[redis.Redis]:
    return [conn.get_redis_connection(node) for node in conn.get_primaries()]


def commandstats(client: redis.Redis) -> dict[str, int]:
    return {
        as_str(name).removeprefix("cmdstat_"): int(stats["calls"])
        for name, stats in client.info("commandstats").items()
    }


def test_the_layer_builds_a_cluster_client_with_its_retries():
    from counters_tasks.store.client import CLUSTER_RETRIES, get_redis

    conn = get_redis()
    assert isinstance(conn, RedisCluster)
    assert conn.retry.get_retries() == CLUSTER_RETRIES
    assert len(conn.get_primaries()) == 3


@pytest.mark.usefixtures("bound_deployment")  # (keys read by hand below)
def test_maintenance_reaches_every_node_through_the_registries(raw_conn):
    """The cleaner, the rotation and the precomputation find data on every master without KEYS or SCAN."""
    now = time.time()
    stale = [f"stale{i}" for i in range(150)]
    fresh = [f"fresh{i}" for i in range(150)]
    for name in stale:
        counters.update_counter(raw_conn, name, 1, now - 200 * 86400)
    for name in fresh:
        counters.update_counter(raw_conn, name, 1, now)
    boards = [f"board{i}" for i in range(30)]
    for board in boards:
        ranking.Ranking(raw_conn, board).incr("old", 5, now - 3 * 86400)
        ranking.Ranking(raw_conn, board).incr("new", 1, now)
    clients = node_clients(raw_conn)
    assert len(clients) == 3
    assert all(client.dbsize() > 50 for client in clients), [c.dbsize() for c in clients]
    for client in clients:
        client.config_resetstat()

    assert counters.clean_counters(raw_conn, now) == 150 * 7
    assert ranking.rotate_all(raw_conn, now) >= 30
    uniques.precompute_due(raw_conn, now)

    assert counters.known_counters(raw_conn) == sorted(fresh)
    for name in stale:
        assert not raw_conn.exists(keys.counter_hash(name)), name
    for board in boards:
        assert ranking.Ranking(raw_conn, board).top(withscores=True, now=now) == [("new", 1)]
        assert raw_conn.zcard(keys.ranking_slots(board)) == 1
    assert uniques.unique_visitors(raw_conn, days.local_day(now)) == 0
    assert raw_conn.get(keys.uniques_expected(days.local_day(now))) is not None
    for client in clients:
        stats = commandstats(client)
        assert not {"keys", "scan"} & set(stats), stats
        assert stats.get("eval", 0) + stats.get("evalsha", 0) > 0, stats  # each node's counters were cleaned


def test_worker_and_beat_on_the_cluster_with_a_single_redis_broker(redis_url, broker_url, raw_conn, tmp_path):  # noqa: F811
    from counters_tasks import tasks
    from counters_tasks.app import app

    redis.Redis.from_url(broker_url).flushdb()
    now = time.time()
    today = days.local_day(now)
    counters.update_counter(raw_conn, "stale", 1, now - 200 * 86400)
    env = celery_env(redis_url, CELERY_BROKER_URL=broker_url, COUNTERS_REDIS_CLUSTER="1", COUNTERS_CLEAN_EVERY="1")
    worker = start_worker(env, tmp_path / "worker.log")
    beat = start_beat(env, tmp_path, tmp_path / "beat.log")
    try:
        with app.connection_for_write(broker_url) as connection, connection.Producer() as producer:
            for i in range(20):
                tasks.update_counter.apply_async(("cluster-hits", 2, now), producer=producer)
                tasks.record_visit.apply_async(
                    (f"192.0.2.{i % 5 + 1}", f"/c{i % 4}", str(uuid.uuid4()), now), producer=producer
                )
                tasks.count_unique.apply_async((str(uuid.uuid4()), now), producer=producer)
                tasks.incr_ranking.apply_async(("cluster-board", f"m{i % 3}", 1, now), producer=producer)
        wait_until(
            lambda: counters.get_counter(raw_conn, "cluster-hits", 86400, now) == [(int(now // 86400) * 86400, 40)],
            timeout=60,
            what=f"the worker to count; log:\n{worker.output()[-3000:]}",
        )
        wait_until(lambda: sitestats.site_visit_info(raw_conn, today).pv == 20, timeout=30, what="the visits")
        wait_until(lambda: uniques.unique_visitors(raw_conn, today) == 40, timeout=30, what="the uniques")
        wait_until(
            lambda: (
                ranking.Ranking(raw_conn, "cluster-board").top(withscores=True, now=now)
                == [("m0", 7), ("m1", 7), ("m2", 6)]
            ),
            timeout=30,
            what="the ranking",
        )
        wait_until(
            lambda: "stale" not in counters.known_counters(raw_conn),
            timeout=60,
            what=f"beat to run the cleaner; beat log:\n{beat.output()[-3000:]}",
        )
        assert float(wait_until(lambda: job_status(raw_conn, "clean_counters"), timeout=10)["last_started"]) >= now - 5
    finally:
        beat.stop()
        assert worker.stop() == 0, worker.output()[-3000:]
    assert sitestats.site_visit_info(raw_conn, today).uv == 5
    assert sitestats.site_visit_info(raw_conn, today, "/c0").pv == 5
    assert {"hits", "hits:/c0", "cluster-hits"} <= set(counters.known_counters(raw_conn))


def test_a_worker_batch_goes_on_after_a_failover_of_its_clients_default_node(tmp_path, monkeypatch):
    """A worker's batch of visits is claimed and written as script calls on cluster pipelines.
    redis-py 8's pipeline asks the client's default node (COMMAND GETKEYS) where each EVAL goes.
    A call that failed on the dead master during the failover refreshed the slot map while it
    still named that master first, and the refresh made it the default node; a pipeline that
    cannot reach the default node refreshes nothing, so a pool process between two deployment
    checks (whose pipelines start with a script call) kept failing on it long after the failover
    (seen in a CI run: a batch waiting 0.5 s, 1 s, ... 30 s, the messages behind it held). The
    script calls name their node themselves."""
    from counters_tasks import throughput, visits
    from counters_tasks.core.settings import load_settings
    from counters_tasks.store import deployment
    from counters_tasks.store.client import make_client
    from counters_tasks.worker.batch_apply import write_claimed

    now = time.time()
    items = [(visits.prepare_visit({"ip": f"10.3.0.{n}", "path": f"/d{n}", "ts": now}), f"dn-{n}") for n in range(40)]
    with RedisClusterProcesses(tmp_path / "cluster", masters=3, replicas=1) as cluster:
        conn = make_client(load_settings({**celery_env(cluster.url), "COUNTERS_REDIS_CLUSTER": "1"}))
        assert write_claimed(conn, visits.VISIT, items[:20], throughput.Tally()) == []
        monkeypatch.setattr(deployment, "CHECK_EVERY", 3600.0)  # no check due: the writes alone
        first = conn.nodes_manager.get_node_from_slot(0)  # the first master a slot map names
        with keys.bound(conn):
            name = next(f"dn{n}" for n in range(1000) if master_port(conn, f"dn{n}") == first.port)
        victim = next(node for node in cluster.nodes if node.port == first.port)
        victim.kill()
        with pytest.raises(redis.ConnectionError):  # an update_counter task during the failover
            counters.update_counter(conn, name, 1, now)
        cluster.wait_failed_over(victim.port, 30)
        failures: list[str] = []

        def written() -> bool:
            try:
                return write_claimed(conn, visits.VISIT, items[20:], throughput.Tally()) == []
            except (redis.ConnectionError, redis.exceptions.ClusterDownError) as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
                return False

        try:
            wait_until(written, timeout=10, interval=0.25, what="the batch on the promoted replica")
        except TimeoutError:
            pytest.fail(
                f"the batch still fails 10 s after the failover: {len(failures)} failed tries, the last {failures[-1:]}"
            )
        assert len(failures) <= 1, failures  # the first try may meet the stale slot map
        assert sitestats.site_visit_info(conn, days.local_day(now)).pv == 40
        conn.close()


def test_a_master_killed_under_load_fails_over_and_counting_goes_on(broker_url, tmp_path):  # noqa: F811
    """3 masters + 3 replicas; tasks stream in through a worker; the master of the busiest
    counter is SIGKILLed. Its replica takes over (node timeout 2 s), the worker's tasks retry,
    and every task sent is counted, less at most what asynchronous replication had not copied."""
    from counters_tasks import tasks
    from counters_tasks.app import app

    redis.Redis.from_url(broker_url).flushdb()
    now = time.time()
    names = [f"fo{i}" for i in range(12)]
    with RedisClusterProcesses(tmp_path / "cluster", masters=3, replicas=1) as cluster:
        conn = RedisCluster.from_url(cluster.url)
        env = celery_env(cluster.url, CELERY_BROKER_URL=broker_url, COUNTERS_REDIS_CLUSTER="1")
        worker = start_worker(env, tmp_path / "worker.log", concurrency=2, queues="visits")
        sent = [0]
        stop = threading.Event()

        def produce() -> None:
            with app.connection_for_write(broker_url) as connection, connection.Producer() as producer:
                while not stop.is_set():
                    tasks.update_counter.apply_async((names[sent[0] % len(names)], 1, now), producer=producer)
                    if sent[0] % 4 == 0:  # per-visit messages, which the worker applies in batches
                        tasks.record_visit.apply_async(
                            (f"10.2.{sent[0] % 200}.1", f"/fo{sent[0] % 24}", None, now), producer=producer
                        )
                    sent[0] += 1
                    time.sleep(0.002)

        thread = threading.Thread(target=produce)
        try:
            counters.update_counter(conn, names[0], 0, now)  # scripts loaded, topology known
            thread.start()
            wait_until(
                lambda: total(conn, names, now) > 300, timeout=30, what=f"counting; log:\n{worker.output()[-2000:]}"
            )
            port = master_port(conn, names[0])
            victim = next(node for node in cluster.nodes if node.port == port)
            time.sleep(1)  # steady load
            replication = redis.Redis(port=port).info("replication")
            replica = redis.Redis(port=replication["slave0"]["port"]).info("replication")
            behind = max(0, replication["master_repl_offset"] - replica["slave_repl_offset"])  # bytes in flight
            victim.kill()
            killed = time.monotonic()
            time.sleep(6)
            stop.set()
            thread.join()
            stopped = time.time()
            cluster.wait_ok(30)
            # Tasks caught in the failover retry with jittered exponential backoff: wait until all
            # are counted, or until every retry the worker scheduled is well past due and the
            # broker holds no message (queued, or reserved by a process whose batch still waits).
            broker = redis.Redis.from_url(broker_url)
            wait_until(
                lambda: (
                    total_or_none(conn, names, now) == sent[0]
                    or (time.time() > max(stopped, last_retry_due(worker)) + 10 and not pending(broker))
                ),
                timeout=150,
                interval=0.5,
                what="the retried tasks",
            )
            stored = total(conn, names, now)
            views = (sent[0] + 3) // 4
            wait_until(
                lambda: sitestats.site_visit_info(conn, days.local_day(now)).pv == views,
                timeout=60,
                interval=0.5,
                what=f"{views} batched visits; log:\n{worker.output()[-3000:]}",
            )
            print(
                f"failover: {sent[0]} tasks sent, {stored} counted, {sent[0] - stored} lost, "
                f"{worker.output().count('Retry in')} retries, settled {time.monotonic() - killed:.1f}s after the kill;"
                f" the replica was {behind} bytes behind just before"
            )
            expected = {name: sent[0] // len(names) + (k < sent[0] % len(names)) for k, name in enumerate(names)}
            per_name = {name: (total(conn, [name], now), expected[name], master_port(conn, name)) for name in names}
            errors = [line for line in worker.output().splitlines() if "ERROR" in line or "WARNING" in line]
            assert 0 <= sent[0] - stored <= max(5, sent[0] // 100), (port, per_name, pending(broker), errors[-20:])
            assert "Retry in" in worker.output()
        finally:
            stop.set()
            if thread.is_alive():
                thread.join()
            worker.stop()
            conn.close()


def pending(broker: redis.Redis) -> dict[str, int]:
    """The messages the broker still holds: queued, and delivered but not acknowledged."""
    counts = {"queued": broker.llen("visits"), "unacked": broker.hlen("unacked")}
    return {name: n for name, n in counts.items() if n}


def last_retry_due(worker) -> float:
    """When the last retry the worker logged is due (epoch seconds; 0 when none)."""
    due = 0.0
    for stamp, countdown in re.findall(r"^\[([\d-]+ [\d:]+),\d+: .*Retry in (\d+)s", worker.output(), re.M):
        due = max(due, datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").timestamp() + 1 + int(countdown))
    return due


def master_port(conn, name: str) -> int:
    """The port of the master holding counter ``name`` (its key made within the deployment's binding)."""
    with keys.bound(conn):
        return conn.nodes_manager.get_node_from_slot(key_slot(keys.counter_hash(name).encode())).port


def total(conn, names, now) -> int:
    return sum(t for name in names for _, t in counters.get_counter(conn, name, 86400, now))


def total_or_none(conn, names, now) -> int | None:
    try:
        return total(conn, names, now)
    except redis.RedisError:
        return None
