"""What COUNTERS_VISITOR_KEY=daily costs (docs/privacy.md, "What the daily mode costs"): the same
generated month of visits applied in each privacy mode, then the figures over 1, 7 and 30 days
and all time against the true distinct visitors and visitor-days, the memory of the all-time
visitor sets per visitor, and the CPU a visit costs (this process, preparing and writing).

The workload (seeded, the same in both modes): ``--visitors`` visitors over the 30 days up to
yesterday, 60% of them on one day, 30% on 2-5 days, 10% on 10-25 days, each visit-day 1-3 page
views of 50 paths (Zipf-like) with the visitor's session cookie, applied as the workers apply ``record_visits`` messages
(``visits.apply_visits``, 1,000 a call).

    python -m bench.privacy_modes                   # starts a private redis-server
    python -m bench.privacy_modes --visitors 5000   # smaller, faster

Each mode's figures are checked (a day's UV equal in both modes and to the truth; the daily
mode's range and all-time UV equal to the true visitor-days); a wrong one exits non-zero.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from datetime import date, timedelta

import redis

from counters_tasks.core.settings import reset_settings
from counters_tasks.local.redis_server import RedisServer

DAYS = 30
PATHS = [f"/p{n}" for n in range(50)]
CHUNK = 1000


def check(ok: bool, what: str) -> None:
    if not ok:
        raise SystemExit(f"FAILED: {what}")


def workload(visitors: int, last: date, seed: int = 44) -> list[tuple[str, str, float, date, str]]:
    """(ip, path, ts, day, session id) of every page view, in time order (a visitor keeps its
    session cookie for the month, as the middleware's lasts a year)."""
    rng = random.Random(seed)
    weights = [1 / (rank + 1) for rank in range(len(PATHS))]
    views = []
    for n in range(visitors):
        ip = f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}"
        session = f"{rng.getrandbits(128):032x}"
        kind = rng.random()
        count = 1 if kind < 0.6 else rng.randint(2, 5) if kind < 0.9 else rng.randint(10, 25)
        for back in rng.sample(range(DAYS), count):
            day = last - timedelta(days=back)
            start = (day - date(1970, 1, 1)).days * 86400
            for _ in range(rng.randint(1, 3)):
                views.append((ip, rng.choices(PATHS, weights)[0], start + rng.uniform(0, 86399), day, session))
    views.sort(key=lambda v: v[2])
    return views


def truth(views: list[tuple[str, str, float, date]], last: date) -> dict[str, tuple[int, int]]:
    """Per span: (distinct visitors, visitor-days)."""
    out = {}
    for label, span in (("1 day", 1), ("7 days", 7), ("30 days", 30), ("all time", None)):
        first = last - timedelta(days=(span or DAYS) - 1)
        inside = [(ip, day) for ip, _path, _ts, day, _session in views if first <= day <= last]
        out[label] = (len({ip for ip, _ in inside}), len(set(inside)))
    return out


def run_mode(url: str, mode: str, views: list, last: date) -> dict:
    from counters_tasks import sitestats, uniques, visits
    from counters_tasks.sitestats import page_all, site_all
    from counters_tasks.store import keys

    os.environ["COUNTERS_VISITOR_KEY"] = mode
    reset_settings()
    conn = redis.Redis.from_url(url)
    conn.flushdb()
    items = [{"ip": ip, "path": path, "ts": ts, "session_id": session} for ip, path, ts, _day, session in views]
    cpu_server = sum(conn.info("cpu")[k] for k in ("used_cpu_sys", "used_cpu_user"))
    started = time.process_time()
    for at in range(0, len(items), CHUNK):
        visits.apply_visits(conn, items[at : at + CHUNK])
    cpu = (time.process_time() - started) / len(items)
    server = (sum(conn.info("cpu")[k] for k in ("used_cpu_sys", "used_cpu_user")) - cpu_server) / len(items)
    figures = {}
    for label, span in (("1 day", 1), ("7 days", 7), ("30 days", 30)):
        got = sitestats.site_visit_range(conn, last - timedelta(days=span - 1), last)
        figures[label] = (got.uv, got.uv_error, got.uv_counts)
    whole = sitestats.site_visit_info(conn)
    figures["all time"] = (whole.uv, 0.0, whole.uv_counts)
    page = sitestats.site_visit_range(conn, last - timedelta(days=DAYS - 1), last, PATHS[0])
    with keys.bound(conn):
        shard_sets = [site_all.site_all_visitors(s, "exact") for s in range(site_all.SITE_SHARDS)]
        hashes = [page_all.path_totals(path) for path in PATHS]
    pipe = conn.pipeline(transaction=False)
    for key in shard_sets + hashes:
        pipe.memory_usage(key, samples=0)
    sizes = [int(n or 0) for n in pipe.execute()]
    return {
        "figures": figures,
        "page": (page.uv, page.uv_counts),
        "site_all": sum(sizes[: len(shard_sets)]),
        "page_all": sum(sizes[len(shard_sets) :]),
        "memory": int(conn.info("memory")["used_memory"]),
        "cpu": cpu,
        "server": server,
        "days": [sitestats.site_visit_info(conn, last - timedelta(days=b)).uv for b in range(DAYS)],
        "sessions": [uniques.unique_visitors(conn, last - timedelta(days=b)) for b in range(DAYS)],
        "sessions_week": uniques.unique_visitors_range(conn, last - timedelta(days=6), last).visitors,
    }


def run(url: str, visitors: int, rounds: int = 2) -> None:
    from counters_tasks.core.days import today

    last = today() - timedelta(days=1)
    views = workload(visitors, last)
    real = truth(views, last)
    print(f"{visitors:,} visitors, {len(views):,} page views over {DAYS} days up to {last}")
    results: dict[str, dict] = {}
    for _round in range(rounds):  # alternately; each mode's CPU the least seen (the first pays for warming up)
        for mode in ("standard", "daily"):
            got = run_mode(url, mode, views, last)
            if mode in results:
                got["cpu"] = min(got["cpu"], results[mode]["cpu"])
                got["server"] = min(got["server"], results[mode]["server"])
            results[mode] = got
    standard, daily = results["standard"], results["daily"]
    check(standard["days"] == daily["days"], "a day's UV differs between the modes")
    check(standard["sessions"] == daily["sessions"] == standard["days"], "a day's daily uniques differ")
    print(
        f"daily uniques (session ids) over 7 days: standard {standard['sessions_week']} (distinct), "
        f"daily {daily['sessions_week']} (session-days; true {real['7 days'][1]})"
    )
    check(daily["sessions_week"] == real["7 days"][1], "daily mode: the week's uniques are not its session-days")
    print(f"\n{'UV over':<10}{'distinct':>10}{'visitor-days':>14}{'standard':>16} {'daily':>22}")
    for label, (distinct, visitor_days) in real.items():
        s_uv, s_err, _ = standard["figures"][label]
        d_uv, d_err, d_counts = daily["figures"][label]
        shown_s = f"{s_uv} ({(s_uv - distinct) / distinct:+.2%})" if s_err else f"{s_uv} (exact)"
        shown_d = f"{d_uv} ({d_uv / distinct:.2f}x distinct)"
        print(f"{label:<10}{distinct:>10}{visitor_days:>14}{shown_s:>16} {shown_d:>22}")
        if label != "1 day":
            check(d_uv == visitor_days and d_counts == "visitor-days", f"daily {label}: {d_uv} != {visitor_days}")
        else:
            check(s_uv == d_uv == distinct, f"one day's UV: {s_uv}, {d_uv}, truth {distinct}")
    distinct = real["all time"][0]
    print(f"\n{'':<40}{'standard':>12}{'daily':>12}{'ratio':>8}")
    for name, what in (("site_all", "site's all-time visitor sets"), ("page_all", "pages' all-time HASHes")):
        s, d = standard[name], daily[name]
        print(f"{what + ' B/visitor':<40}{s / distinct:>12.1f}{d / distinct:>12.1f}{d / s:>8.2f}")
    s, d = standard["memory"], daily["memory"]
    print(f"{'used_memory MB (everything)':<40}{s / 1e6:>12.2f}{d / 1e6:>12.2f}{d / s:>8.2f}")
    s, d = standard["cpu"] * 1e6, daily["cpu"] * 1e6
    print(f"{'this process us/visit':<40}{s:>12.1f}{d:>12.1f}{d / s:>8.2f}")
    s, d = standard["server"] * 1e6, daily["server"] * 1e6
    print(f"{'Redis server CPU us/visit':<40}{s:>12.1f}{d:>12.1f}{d / s:>8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="Redis to use (its database is flushed!); default: a private redis-server")
    parser.add_argument("--visitors", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2, help="runs of each mode, alternately (CPU: the least)")
    options = parser.parse_args()
    os.environ.setdefault("COUNTERS_SECRET", "bench-secret")
    if options.url:
        os.environ["COUNTERS_REDIS_URL"] = options.url
        reset_settings()
        run(options.url, options.visitors, options.rounds)
        return
    with tempfile.TemporaryDirectory() as tmp, RedisServer(tmp) as server:
        os.environ["COUNTERS_REDIS_URL"] = server.url
        reset_settings()
        run(server.url, options.visitors, options.rounds)


if __name__ == "__main__":
    main()
