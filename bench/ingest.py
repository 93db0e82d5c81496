"""End-to-end ingestion: 100,000 visits through a real worker, three ways, in one run.

1. the seeds' code, one Celery task per visit (``bench/seed_tasks.py``, the baseline);
2. ``record_visit.delay()`` and ``incr_ranking.delay()`` per visit (the worker batches
   ``record_visit`` messages itself);
2b. the same calls with ``COUNTERS_DELAY_BUFFER=1`` (they go to the process's shared recorder);
3. ``VisitRecorder`` (``record`` + ``incr_ranking`` per visit, sent as batches).

Each visit is a page view by one of several thousand visitors, of one of a few thousand
paths, with a session id, and a ranking bump of its path. One worker with 2 processes, the
counters Redis and the broker Redis (two private ``redis-server``s) on this machine. Prints,
for each: producer rate, end-to-end visits/s (first send to last write), Redis commands per
visit on the counters server (all, and top-level script calls), and the ratios to (1); then
checks the final counts are exact for every path (and fails if not).

For (2) and (2b) it also prints what one ``.delay()`` cost the app (p50 and p90 of every call).

    python -m bench.ingest [--visits 100000] [--only 3]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

import redis  # noqa: E402

from counters_tasks.local.redis_server import RedisServer  # noqa: E402


def make_visits(n: int, seed: int = 1) -> list[tuple[str, str, str, float]]:
    rng = random.Random(seed)
    ips = [f"10.{i // 65536}.{i // 256 % 256}.{i % 256}" for i in range(5000)]
    paths = [f"/post/{i}" for i in range(2000)]
    sessions = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(4000)]
    now = time.time()
    return [(rng.choice(ips), rng.choice(paths), rng.choice(sessions), now) for _ in range(n)]


def command_counts(conn: redis.Redis) -> tuple[int, int]:
    stats = conn.info("commandstats")
    total = sum(v["calls"] for k, v in stats.items() if not k.startswith(("cmdstat_info", "cmdstat_config")))
    scripts = sum(v["calls"] for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_eval"))
    return total, scripts


def wait_until(condition, timeout: float, poll: float = 0.02) -> float:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the worker did not finish in time")
        time.sleep(poll)
    return time.perf_counter()


def run_variant(label: str, data_conn, send, done, n: int) -> dict:
    data_conn.flushdb()
    data_conn.config_resetstat()
    data_conn.config_set("slowlog-log-slower-than", 5000)  # any call blocking Redis 5 ms or more
    data_conn.slowlog_reset()
    start = time.perf_counter()
    send()
    sent = time.perf_counter()
    end = wait_until(done, timeout=1800)
    commands, scripts = command_counts(data_conn)
    breakdown = sorted(((v["calls"] / n, k[len("cmdstat_"):]) for k, v in data_conn.info("commandstats").items()
                        if not k.startswith(("cmdstat_info", "cmdstat_config", "cmdstat_slowlog"))), reverse=True)
    slow = data_conn.slowlog_get(128)
    out = {"label": label, "producer": n / (sent - start), "e2e": n / (end - start),
           "commands": commands / n, "scripts": scripts / n, "slow": len(slow),
           "slowest_ms": max((entry["duration"] for entry in slow), default=0) / 1000}
    print(f"{label:<34} producer {out['producer']:>9,.0f}/s  end-to-end {out['e2e']:>9,.0f} visits/s  "
          f"{out['commands']:>6.1f} Redis commands/visit ({out['scripts']:.2f} script calls)  "
          f"calls over 5 ms: {out['slow']}" + (f" (slowest {out['slowest_ms']:.1f} ms)" if slow else ""), flush=True)
    print("    per visit: " + ", ".join(f"{name} {calls:.2f}" for calls, name in breakdown[:12]))
    for entry in sorted(slow, key=lambda e: -e["duration"])[:3]:
        print(f"    slow: {entry['duration'] / 1000:.1f} ms {entry['command'][:120]!r}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--visits", type=int, default=100_000)
    parser.add_argument("--only", choices=["1", "2", "2b", "3"], action="append")
    args = parser.parse_args()
    variants = args.only or ["1", "2", "2b", "3"]
    stream = make_visits(args.visits)
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp) / "data") as data, \
            RedisServer(Path(tmp) / "broker") as broker:
        env = dict(os.environ, COUNTERS_REDIS_URL=data.url, CELERY_BROKER_URL=broker.url,
                   COUNTERS_SECRET="bench-secret", PYTHONPATH=str(REPO))
        os.environ.update({k: env[k] for k in ("COUNTERS_REDIS_URL", "CELERY_BROKER_URL", "COUNTERS_SECRET")})
        log = open(Path(tmp) / "worker.log", "wb")
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "counters_tasks", "worker", "-I", "bench.seed_tasks", "-Q", "visits",
             "-c", "2", "--loglevel", "WARNING", "--without-mingle", "--without-gossip"],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            import bench.seed_tasks as seed
            from counters_tasks import ranking, sitestats, tasks
            from counters_tasks.app import app
            from counters_tasks.core.settings import reset_settings
            from counters_tasks.recorder import VisitRecorder, shared_recorder

            deadline = time.monotonic() + 60
            while not app.control.ping(timeout=0.5):
                if time.monotonic() > deadline:
                    raise TimeoutError("worker did not start")
            conn = redis.Redis.from_url(data.url)
            n = len(stream)
            results = {}
            per_path: dict[str, int] = {}
            for _ip, path, _s, _ts in stream:
                per_path[path] = per_path.get(path, 0) + 1

            if "1" in variants:
                def send1():
                    for ip, path, session, ts in stream:
                        seed.seed_visit.delay(ip, path, session, ts)
                results["1"] = run_variant("(1) seeds, one task per visit", conn, send1,
                                         lambda: int(conn.hget("visit_info", "pv") or 0) >= n, n)
                got = {p: int(conn.hget("visit_info", f"pv_{p}") or 0) for p in per_path}
                assert got == per_path, "seed variant: per-path PV is not exact"

            def ours_done():
                return sitestats.site_visit_info(conn).pv >= n and \
                    sum(t for _m, t in ranking.Ranking(conn, "pages").top(limit=10_000, withscores=True)) >= n

            def check_ours(label):
                for path, count in per_path.items():
                    info = sitestats.site_visit_info(conn, None, path)
                    assert info.pv == count, f"{label}: PV of {path} is {info.pv}, expected {count}"
                top = dict(ranking.Ranking(conn, "pages").top(limit=10_000, withscores=True))
                assert top == per_path, f"{label}: the ranking is not exact"

            def delay_each(buffered: bool):
                """(2) or (2b): two ``.delay()`` calls a visit, each timed."""
                os.environ["COUNTERS_DELAY_BUFFER"] = "1" if buffered else ""
                reset_settings()
                costs: list[float] = []

                def send():
                    clock = time.perf_counter
                    for ip, path, session, ts in stream:
                        started = clock()
                        tasks.record_visit.delay(ip, path, session, ts)
                        middle = clock()
                        tasks.incr_ranking.delay("pages", path, 1, ts)
                        costs.extend((middle - started, clock() - middle))
                    if buffered:
                        assert shared_recorder().flush(timeout=300)
                key, label = ("2b", "(2b) .delay(), COUNTERS_DELAY_BUFFER") if buffered else \
                    ("2", "(2) record_visit.delay() per visit")
                results[key] = run_variant(label, conn, send, ours_done, n)
                costs.sort()
                results[key]["delay_p50_us"] = costs[len(costs) // 2] * 1e6
                print(f"    one .delay() in the app: p50 {costs[len(costs) // 2] * 1e6:.0f} us, "
                      f"p90 {costs[int(len(costs) * 0.9)] * 1e6:.0f} us")
                check_ours(f"({key})")
                os.environ["COUNTERS_DELAY_BUFFER"] = ""
                reset_settings()

            if "2" in variants:
                delay_each(buffered=False)
            if "2b" in variants:
                delay_each(buffered=True)

            if "3" in variants:
                # the buffer holds the whole burst: a loop that only records starves the sending
                # thread of the GIL, which a web app serving requests between records does not
                recorder = VisitRecorder(max_batch=1000, max_delay=0.1, max_buffer=4 * n)

                def send3():
                    for ip, path, session, ts in stream:
                        recorder.record(ip, path, session, ts)
                        recorder.incr_ranking("pages", path, 1, ts)
                    recorder.flush(timeout=120)
                results["3"] = run_variant("(3) VisitRecorder", conn, send3, ours_done, n)
                assert recorder.stats()["dropped"] == 0, recorder.stats()
                check_ours("(3)")
                bench_record = VisitRecorder(max_batch=1000, max_delay=60, max_buffer=10 * n)
                start = time.perf_counter()
                for ip, path, session, ts in stream:
                    bench_record.record(ip, path, session, ts)
                calls = n / (time.perf_counter() - start)
                bench_record.close(timeout=120)
                print(f"VisitRecorder.record alone: {calls:,.0f} calls/s in the producer")
            print("all counts exact for every path")
            if "1" in results:
                base = results["1"]
                for key in sorted(results):
                    if key != "1":
                        r = results[key]
                        print(f"({key}) vs (1): end-to-end {r['e2e'] / base['e2e']:.1f}x, producer "
                              f"{r['producer'] / base['producer']:.1f}x, Redis commands/visit "
                              f"{r['commands']:.1f} vs {base['commands']:.1f}")
        finally:
            worker.terminate()
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
