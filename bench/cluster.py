"""Redis Cluster: how keys and operations spread over 3 masters, and ingest visits/s, cluster vs one node.

Starts a private 3-master cluster and a private single redis-server (loopback ports, temp
folders), then in the same run:

1. spread: a realistic load (visits of many visitors over many paths with sessions, named
   counters, ranking boards, then the beat jobs) on the cluster; per master: keys (DBSIZE),
   commands processed and script calls (INFO stats / commandstats, reset before the load);
2. ingest: ``visits.apply_visit`` one visit at a time, and ``visits.apply_visits`` (the
   function behind the ``record_visits`` task) in batches, from P client processes at once, on
   one node and on the cluster.

    python -m bench.cluster                         # 20,000 visits, 1 and 4 client processes
    python -m bench.cluster --visits 50000 --procs 1,2,4,8
    python -m bench.cluster --failover 12           # and a master killed under direct writes

Figures depend on the host (this one: 2 cores, so 3 masters and the clients share them). The
results are checked before they are printed, and a wrong one exits non-zero: every visit of the
spread load and of each ingest run counted (the site's PV), every counter and ranking bump
stored, every master holding keys, every client process done; after a failover, nothing stored
twice (a write retried with its message id).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time
import uuid
from pathlib import Path

import redis  # noqa: E402
from redis.cluster import RedisCluster  # noqa: E402

from counters_tasks.core.settings import reset_settings  # noqa: E402
from counters_tasks.local.redis_server import RedisServer  # noqa: E402
from tests.support.cluster import RedisClusterProcesses  # noqa: E402


def check(ok: bool, what: str) -> None:
    """A result of the benchmark itself that must hold: exit non-zero naming it when it does not."""
    if not ok:
        raise SystemExit(f"bench.cluster: check failed: {what}")


def site_pv(url: str, cluster: bool) -> int:
    """The site's all-time page views on ``url``."""
    from counters_tasks import sitestats
    from counters_tasks.store.client import get_redis

    use(url, cluster)
    return sitestats.site_visit_info(get_redis()).pv


def make_visits(n: int, seed: int, start: float) -> list[tuple[str, str, str, float]]:
    import random

    rng = random.Random(seed)
    ips = [f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}" for _ in range(max(1, n // 5))]
    sessions = {ip: str(uuid.UUID(int=rng.getrandbits(128))) for ip in ips}
    paths = [f"/article/{i}" for i in range(500)]
    return [
        (ip, rng.choice(paths), sessions[ip], start + i * 0.01)
        for i, ip in enumerate(rng.choice(ips) for _ in range(n))
    ]


def use(url: str, cluster: bool) -> None:
    os.environ["COUNTERS_REDIS_URL"] = url
    os.environ["COUNTERS_REDIS_CLUSTER"] = "1" if cluster else ""
    reset_settings()


def ingest_worker(url: str, cluster: bool, seed: int, count: int, batch: int, ready, go, out) -> None:
    from counters_tasks import uniques, visits
    from counters_tasks.store.client import get_redis

    use(url, cluster)
    conn = get_redis()
    stream = make_visits(count, seed, time.time())
    record_many = visits.apply_visits if batch > 1 else None
    visits.apply_visit(conn, "192.0.2.1", "/warmup", "f" * 32)  # scripts, topology, the day's figure
    uniques.expected_for(conn, visits.prepare_visit({"ip": "192.0.2.1", "path": "/"}).view.day)
    ready.release()
    go.wait()
    started = time.perf_counter()
    if record_many is not None:
        for i in range(0, count, batch):
            record_many(
                conn, [{"ip": ip, "path": p, "session_id": s, "ts": ts} for ip, p, s, ts in stream[i : i + batch]]
            )
    else:
        for ip, path, session, ts in stream:
            visits.apply_visit(conn, ip, path, session, ts)
    out.put(time.perf_counter() - started)


def ingest(url: str, cluster: bool, procs: int, per_proc: int, batch: int) -> float:
    """visits/s of ``procs`` client processes each recording ``per_proc`` visits at once."""
    ctx = multiprocessing.get_context("fork")
    ready, go, out = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    children = [
        ctx.Process(target=ingest_worker, args=(url, cluster, 1000 + i, per_proc, batch, ready, go, out))
        for i in range(procs)
    ]
    for child in children:
        child.start()
    for _ in children:
        ready.acquire()
    started = time.perf_counter()
    go.set()
    for _ in children:
        out.get(timeout=600)
    elapsed = time.perf_counter() - started
    for child in children:
        child.join()
    check(all(child.exitcode == 0 for child in children), "every client process finished")
    counted = site_pv(url, cluster)  # each client's warm-up visit and its own
    check(
        counted == procs * (per_proc + 1),
        f"{procs} x ({per_proc} + 1) visits counted on {'the cluster' if cluster else 'one node'}: {counted}",
    )
    return procs * per_proc / elapsed


def flush(url: str, cluster: bool) -> None:
    if cluster:
        RedisCluster.from_url(url).flushall(target_nodes="primaries")
    else:
        redis.Redis.from_url(url).flushdb()


def realistic_load(conn, visits_count: int) -> None:
    from counters_tasks import counters, ranking, uniques, visits

    now = time.time()
    for ip, path, session, ts in make_visits(visits_count, 7, now - visits_count * 0.01):
        visits.apply_visit(conn, ip, path, session, ts)
    for i in range(500):
        counters.update_counter(conn, f"signups:{i}", 1, now)
    for b in range(50):
        board = ranking.Ranking(conn, f"likes:{b}")
        for m in range(20):
            board.incr(f"post{m}", 1, now)
    counters.clean_counters(conn, now)
    ranking.rotate_all(conn, now)
    uniques.precompute_due(conn, now)


def check_spread_load(conn, visits_count: int) -> None:
    """What ``realistic_load`` wrote, read back: every visit, counter and ranking bump."""
    from counters_tasks import counters, ranking, sitestats

    now = time.time()
    check(sitestats.site_visit_info(conn).pv == visits_count, f"{visits_count} visits counted")
    signups = [sum(t for _b, t in counters.get_counter(conn, f"signups:{i}", 86400, now)) for i in range(500)]
    check(signups == [1] * 500, "500 counters at 1")
    boards = [dict(ranking.Ranking(conn, f"likes:{b}").top(0, 50, withscores=True, now=now)) for b in range(50)]
    check(boards == [{f"post{m}": 1 for m in range(20)}] * 50, "50 boards of 20 members at 1")


def cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def spread(cluster: RedisClusterProcesses, visits_count: int) -> None:
    from counters_tasks.store.client import get_redis

    use(cluster.url, True)
    conn = get_redis()
    primaries = conn.get_primaries()
    clients = {node.name: conn.get_redis_connection(node) for node in primaries}
    for client in clients.values():
        client.config_resetstat()
    cpu_before = {name: cpu(client) for name, client in clients.items()}
    slots: dict[str, int] = {}
    for (start, end), info in conn.cluster_slots(target_nodes=RedisCluster.RANDOM).items():
        name = f"{info['primary'][0]}:{info['primary'][1]}"
        slots[name] = slots.get(name, 0) + end - start + 1
    started = time.perf_counter()
    realistic_load(conn, visits_count)
    elapsed = time.perf_counter() - started
    check_spread_load(conn, visits_count)
    rows = []
    for name, client in clients.items():
        stats = client.info("stats")
        commands = client.info("commandstats")
        scripts = sum(int(commands.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("eval", "evalsha"))
        rows.append(
            (
                name,
                slots.get(name, 0),
                client.dbsize(),
                int(stats["total_commands_processed"]),
                scripts,
                cpu(client) - cpu_before[name],
            )
        )
    check(all(r[2] > 0 for r in rows), f"every master holds keys: {[(r[0], r[2]) for r in rows]}")
    keys_total = sum(r[2] for r in rows) or 1
    cmds_total = sum(r[3] for r in rows) or 1
    scripts_total = sum(r[4] for r in rows) or 1
    print(
        f"spread: {visits_count} visits + 500 counters + 50 boards x 20 members + beat jobs, on 3 masters"
        f" ({elapsed:.1f} s, one client)"
    )
    cpu_total = sum(r[5] for r in rows) or 1
    print(
        f"{'master':>16} {'slots':>6} {'keys':>8} {'share':>6} {'commands*':>9} {'share':>6} {'scripts':>8} {'share':>6}"
        f" {'cpu s':>6} {'share':>6}"
    )
    for name, slot_count, keys_, cmds, scripts, used in rows:
        print(
            f"{name:>16} {slot_count:>6} {keys_:>8} {keys_ / keys_total:>6.1%} {cmds:>9} {cmds / cmds_total:>6.1%}"
            f" {scripts:>8} {scripts / scripts_total:>6.1%} {used:>6.2f} {used / cpu_total:>6.1%}"
        )
    print("* commands processed, those run inside Lua scripts included (INFO stats)")


def failover(base: Path, seconds: float, threads: int) -> None:
    """Direct writes (no Celery) from ``threads`` threads to 3 masters + 3 replicas; SIGKILL the
    master of one counter. Prints acknowledged vs stored (what asynchronous replication lost) and
    how long writes to the dead master's slots failed."""
    import threading

    from redis.cluster import key_slot

    from counters_tasks import counters
    from counters_tasks.store import keys
    from counters_tasks.store.client import get_redis

    with RedisClusterProcesses(base / "failover", masters=3, replicas=1) as cluster:
        use(cluster.url, True)
        conn = get_redis()
        names = [f"fo{i}" for i in range(30)]
        now = time.time()
        acked = [0] * threads
        failed_at: list[float] = []
        stop = threading.Event()
        with keys.bound(conn):
            victim_slot = key_slot(keys.counter_hash(names[0]).encode())

        def load(k: int) -> None:
            i = 0
            while not stop.is_set():
                name = names[(i * threads + k) % len(names)]
                try:
                    counters.update_counter(conn, name, 1, now, message_id=f"{k}.{i}")
                    acked[k] += 1
                    i += 1
                # The same message later, as a task retry would. Not only RedisError: a RedisCluster
                # shared by threads can also raise RedisClusterException or an AttributeError from
                # its parser while another thread refreshes the topology (prefork workers have one
                # thread per process).
                except Exception:
                    failed_at.append(time.monotonic())
                    time.sleep(0.05)

        workers = [threading.Thread(target=load, args=(k,)) for k in range(threads)]
        for thread in workers:
            thread.start()
        time.sleep(seconds / 3)
        port = conn.nodes_manager.get_node_from_slot(victim_slot).port
        next(node for node in cluster.nodes if node.port == port).kill()
        killed = time.monotonic()
        time.sleep(seconds * 2 / 3)
        stop.set()
        for thread in workers:
            thread.join()
        stored = sum(t for name in names for _, t in counters.get_counter(conn, name, 86400, now))
        window = (max(failed_at) - killed) if failed_at else 0.0
        check(
            sum(acked) > 0 and stored <= sum(acked) + threads,
            f"nothing stored twice: {stored} stored for {sum(acked)} acknowledged",
        )  # + a last try each thread
        print(f"\nfailover (3 masters + 3 replicas, node timeout 2 s, {threads} writer threads, direct calls):")
        print(
            f"  acknowledged {sum(acked)}, stored {stored}, lost {max(0, sum(acked) - stored)}"
            f" (stored but never acknowledged: {max(0, stored - sum(acked))});"
            f" writes failed for {window:.1f} s after the kill ({len(failed_at)} failed tries, retried)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--visits", type=int, default=20000, help="visits of the spread load and of each ingest run")
    parser.add_argument("--procs", default="1,4", help="client process counts to measure, comma-separated")
    parser.add_argument(
        "--failover",
        type=float,
        default=0,
        metavar="SECONDS",
        help="also kill a master under direct writes for this long (3 masters + 3 replicas)",
    )
    parser.add_argument("--batch", type=int, default=100, help="visits per record_visits call in the batched runs")
    options = parser.parse_args()
    os.environ.setdefault("COUNTERS_SECRET", "bench-secret")
    with (
        tempfile.TemporaryDirectory() as tmp,
        RedisClusterProcesses(Path(tmp) / "cluster", masters=3) as cluster,
        RedisServer(Path(tmp) / "single") as single,
    ):
        spread(cluster, options.visits)
        print(
            f"\ningest: {options.visits} visits a run, split over the client processes; one by one"
            f" (visits.apply_visit) and in batches of {options.batch} (visits.apply_visits)"
        )
        print(
            f"{'clients':>8} {'one node/s':>11} {'cluster/s':>10} {'ratio':>6}"
            f" {'batched one node/s':>19} {'batched cluster/s':>18} {'ratio':>6}"
        )
        for procs in (int(p) for p in options.procs.split(",")):
            per = max(1, options.visits // procs)
            figures = []
            for batch in (1, options.batch):
                flush(single.url, False)
                one = ingest(single.url, False, procs, per, batch)
                flush(cluster.url, True)
                figures += [one, ingest(cluster.url, True, procs, per, batch)]
            one, many, one_b, many_b = figures
            print(
                f"{procs:>8} {one:>11,.0f} {many:>10,.0f} {many / one:>5.2f}x"
                f" {one_b:>19,.0f} {many_b:>18,.0f} {many_b / one_b:>5.2f}x"
            )
        if options.failover:
            failover(Path(tmp), options.failover, 4)


if __name__ == "__main__":
    main()
