"""Visits per second: ``visits.apply_visit`` against a Python port of the seed's per-visit commands.

The seed (001, ``savevisitinfo``) reads two per-IP counts in separate round trips, sometimes
two more, then pipelines the rest. ``record_visit`` does more work per visit (site and path PV/UV
per day and all time, exact; the ``hits`` counters at 7 precisions; the daily unique) as one Lua
call per slot in one pipeline. Both run one visit at a time, single-threaded, on the same Redis.

    python -m bench.visits                 # starts a private redis-server
    python -m bench.visits --url redis://127.0.0.1:6379/15 --visits 20000 --rtt-ms 0,0.25,1

Prints visits/s of each and the ratio, directly on this host (a round trip of ~20 us, where
Python's own work per visit dominates) and through a proxy that adds a network round-trip
latency (``latency_proxy.py``), where round trips per visit dominate: the seed needs 3 to 5,
``record_visit`` 1. The database it uses is flushed.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
import uuid

import redis  # noqa: E402

from counters_tasks.core.settings import reset_settings  # noqa: E402
from counters_tasks.local.redis_server import RedisServer  # noqa: E402

SITE_VISIT_KEY = "visit_info"


def seed_save_visit_info(conn: redis.Redis, ip: str, path: str, day: str) -> None:
    """The seed's ``savevisitinfo`` command for command (its bugs included), as the baseline."""
    global_key = SITE_VISIT_KEY
    today_key = f"{global_key}_{day}"
    global_user_cnt = conn.hincrby(f"{global_key}_{ip}", "pv", 1)
    today_user_cnt = conn.hincrby(today_key, f"pv_{ip}", 1)
    pipe = conn.pipeline(transaction=False)
    if global_user_cnt == 1:
        pipe.hincrby(today_key, "uv", 1)
        pipe.hincrby(today_key, f"uv_{path}", 1)
        pipe.hincrby(global_key, "uv", 1)
        pipe.hincrby(global_key, f"uv_{path}", 1)
    elif today_user_cnt == 1:
        pipe.hincrby(today_key, "uv", 1)
        if conn.hincrby(today_key, f"pv_{path}_{ip}", 1) == 1:
            pipe.hincrby(today_key, f"uv_{path}", 1)
        if conn.hincrby(f"{global_key}_{ip}", f"pv_{path}", 1) == 1:
            pipe.hincrby(global_key, f"uv_{path}", 1)
    pipe.hincrby(today_key, "pv", 1)
    pipe.hincrby(today_key, f"pv_{path}", 1)
    if today_user_cnt > 1:
        pipe.hincrby(today_key, f"pv_{path}_{ip}", 1)
    pipe.hincrby(global_key, "pv", 1)
    pipe.hincrby(global_key, f"pv_{path}", 1)
    pipe.execute()


def make_visits(n: int, seed: int = 1) -> list[tuple[str, str, str]]:
    rng = random.Random(seed)
    ips = [f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}" for _ in range(max(1, n // 10))]
    sessions = {ip: str(uuid.UUID(int=rng.getrandbits(128))) for ip in ips}
    paths = [f"/article/{i}" for i in range(50)]
    out = []
    for _ in range(n):
        ip = rng.choice(ips)
        out.append((ip, rng.choice(paths), sessions[ip]))
    return out


def measure(conn: redis.Redis, stream: list[tuple[str, str, str]]) -> tuple[float, float, float]:
    """visits/s of record_visit, of sitestats.record_visit alone, of the seed port, over ``stream``."""
    from counters_tasks import sitestats, uniques, visits
    from counters_tasks.core.days import today

    day = today()
    conn.flushdb()
    visits.apply_visit(conn, "192.0.2.1", "/warmup", "0" * 32)  # scripts loaded, figure cached
    conn.flushdb()
    uniques.precompute_expected(conn, day)
    started = time.perf_counter()
    for ip, path, session in stream:
        visits.apply_visit(conn, ip, path, session)
    ours = len(stream) / (time.perf_counter() - started)
    assert sitestats.site_visit_info(conn).pv == len(stream), "a visit was not counted"

    conn.flushdb()
    started = time.perf_counter()
    for ip, path, _session in stream:
        sitestats.record_visit(conn, ip, path)
    site_only = len(stream) / (time.perf_counter() - started)
    assert sitestats.site_visit_info(conn).pv == len(stream), "a visit was not counted (site only)"

    conn.flushdb()
    seed_day = day.strftime("%Y%m%d")
    started = time.perf_counter()
    for ip, path, _session in stream:
        seed_save_visit_info(conn, ip, path, seed_day)
    seed = len(stream) / (time.perf_counter() - started)
    conn.flushdb()
    return ours, site_only, seed


def run(url: str, port: int | None, n: int, rtts: list[float]) -> None:
    from bench.latency_proxy import LatencyProxy

    stream = make_visits(n)
    print(f"one visit at a time, single thread; {len({v[0] for v in stream})} visitors, 50 paths")
    print("record_visit = visits.apply_visit (site+path PV/UV, hits counters, daily unique);")
    print("site only = sitestats.record_visit (site+path PV/UV: the seed's features, exact)")
    print(
        f"{'round trip':>14} {'visits':>7} {'seed port/s':>12} {'record_visit/s':>15} {'ratio':>6}"
        f" {'site only/s':>12} {'ratio':>6}"
    )
    for rtt in rtts:
        count = n if rtt == 0 else max(500, min(n, int(n / (1 + 4 * rtt))))
        if rtt == 0:
            conn = redis.Redis.from_url(url)
            ours, site_only, seed = measure(conn, stream[:count])
        else:
            if port is None:
                print(f"{rtt:>11} ms  (skipped: the latency proxy needs a TCP url)")
                continue
            with LatencyProxy(port, rtt) as proxy_port:
                conn = redis.Redis(
                    host="127.0.0.1", port=proxy_port, db=redis.Redis.from_url(url).get_connection_kwargs().get("db", 0)
                )
                ours, site_only, seed = measure(conn, stream[:count])
        conn.close()
        label = "local" if rtt == 0 else f"+{rtt} ms"
        print(
            f"{label:>14} {count:>7} {seed:>12.0f} {ours:>15.0f} {ours / seed:>5.2f}x"
            f" {site_only:>12.0f} {site_only / seed:>5.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="Redis to use (its database is flushed!); default: a private redis-server")
    parser.add_argument("--visits", type=int, default=20000)
    parser.add_argument(
        "--rtt-ms",
        default="0,0.25,1",
        help="round-trip latencies to emulate, comma-separated (0 = direct, on this host)",
    )
    options = parser.parse_args()
    rtts = [float(x) for x in options.rtt_ms.split(",")]
    os.environ.setdefault("COUNTERS_SECRET", "bench-secret")
    if options.url:
        os.environ["COUNTERS_REDIS_URL"] = options.url
        reset_settings()
        run(options.url, redis.Redis.from_url(options.url).get_connection_kwargs().get("port"), options.visits, rtts)
        return
    with tempfile.TemporaryDirectory() as tmp, RedisServer(tmp) as server:
        os.environ["COUNTERS_REDIS_URL"] = server.url
        reset_settings()
        run(server.url, server.port, options.visits, rtts)


if __name__ == "__main__":
    main()
