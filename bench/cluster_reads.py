"""The dashboard's reads over 90 days on a 3-master Redis Cluster and on one node, side by side (issue 42).

Starts a private 3-master cluster and a private single redis-server (as ``bench.cluster``),
writes the same traffic to each: ``--days`` days (time passed as each view's ``ts``) of
``--views-per-day`` views, three in four of 200 popular paths and one in four of a new path
each (the long tail), by ``--visitors`` visitors, each view with a referrer and campaign tags as
``bench.longhaul.source_of`` makes them and its visitor's user agent and Accept-Language
(``bench.traffic.headers_of``), with ``visits.apply_visits`` in chunks of 500; at each day's end
a cleaner pass and beat's ``make_day_tops`` an hour later (as ``bench.longhaul``). Past 256
visitors a day a referrer's or a browser's row keeps a HyperLogLog, which over several days one
server merges with one ``PFCOUNT`` and a cluster (days in several slots) reads with ``GET`` and
merges in the client (``store.page_sketch.hll_union``).

Then every dashboard read (``bench.longhaul.dashboard_reads``: stats, top pages, top sources,
browsers, a page, the counter) over 1, 30 and all the days, timed as ``bench.longhaul.timed_read``
times them (the first read, then 20 more: median and slowest), on one node and on the cluster.
It checks its own results first and exits non-zero when one is wrong: the site's all-time PV the
views written on both, and on both the same 90-day figures of the site, of a page, of the top
pages, the top sources and the browsers.

    python -m bench.cluster_reads [--days 90] [--views-per-day 2000] [--visitors 12000]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from bench.cluster import check, flush, use
from bench.longhaul import CHUNK, POPULAR, dashboard_reads, read_spans, source_of, timed_read
from bench.traffic import headers_of, ip_of
from counters_tasks import counters, sitestats, visits
from counters_tasks.core.days import day_end, local_day
from counters_tasks.core.settings import get_settings
from counters_tasks.local.redis_server import RedisServer
from counters_tasks.store.client import RedisClient, make_client
from tests.support.cluster import RedisClusterProcesses

TARGETS = ("one node", "cluster")


def day_views(rng: random.Random, ips: list[str], day_first: float, count: int, tail_from: int) -> list[dict]:
    """A day's views, in time order: three in four of a popular path, one in four of a new path
    (numbered from ``tail_from``), each with its visitor's referrer, tags and headers."""
    views = []
    for n in range(count):
        ip = rng.choice(ips)
        path = rng.choice(POPULAR) if n % 4 else f"/u/{tail_from + n // 4:x}/{rng.getrandbits(32):08x}"
        agent, language = headers_of(ip)
        views.append(
            {
                "ip": ip,
                "path": path,
                "ts": day_first + rng.uniform(0, 86000),
                "user_agent": agent,
                "language": language,
                **source_of(rng, [None], ip),
            }
        )
    views.sort(key=lambda view: view["ts"])
    return views


def write_day(conn: RedisClient, views: list[dict], end: float) -> None:
    """A day's views in chunks of CHUNK, then the day's cleaner pass and beat's day tops."""
    for first in range(0, len(views), CHUNK):
        visits.apply_visits(conn, views[first : first + CHUNK])
    counters.clean_counters(conn, end)
    sitestats.make_day_tops(conn, end + 3600)


def figures(conn: RedisClient, start, last) -> dict:
    """What both targets must give alike: the all-time PV and the range's figures."""
    return {
        "all-time PV": sitestats.site_visit_info(conn).pv,
        "site PV, UV": sitestats.site_visit_range(conn, start, last)[3:6],
        "page PV, UV": sitestats.site_visit_range(conn, start, last, POPULAR[0])[3:5],
        "top pages": sitestats.top_pages(conn, start, last, 10),
        "top sources": sitestats.top_sources(conn, start, last, "referrer", 10),
        "browsers": sitestats.top_clients(conn, start, last, "browser", 10),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--views-per-day", type=int, default=2000)
    parser.add_argument("--visitors", type=int, default=12000)
    options = parser.parse_args()
    os.environ.setdefault("COUNTERS_SECRET", "bench-secret")
    rng = random.Random(42)
    ips = [ip_of(n) for n in range(options.visitors)]
    first_day = local_day(time.time() - options.days * 86400)
    first_ts = day_end(first_day) - 86400 + 1
    last = first_day + timedelta(days=options.days - 1)
    with (
        tempfile.TemporaryDirectory() as tmp,
        RedisClusterProcesses(Path(tmp) / "cluster", masters=3) as cluster,
        RedisServer(Path(tmp) / "single") as single,
    ):
        urls = {"one node": (single.url, False), "cluster": (cluster.url, True)}
        conns = {}
        for name, (url, is_cluster) in urls.items():
            flush(url, is_cluster)
            use(url, is_cluster)
            conns[name] = make_client(get_settings())

        spent = dict.fromkeys(TARGETS, 0.0)
        total = 0
        for d in range(options.days):
            day_first = first_ts + d * 86400
            views = day_views(rng, ips, day_first, options.views_per_day, d * options.views_per_day)
            total += len(views)
            for name in TARGETS:
                use(*urls[name])
                began = time.perf_counter()
                write_day(conns[name], views, day_first + 86399)
                spent[name] += time.perf_counter() - began
        print(
            f"written: {total:,} views over {options.days} days by {options.visitors:,} visitors, "
            + ", ".join(f"{name} {spent[name]:.1f} s" for name in TARGETS)
            + " (views, cleaner passes and day tops)"
        )

        start = first_day
        seen = {}
        for name in TARGETS:
            use(*urls[name])
            seen[name] = figures(conns[name], start, last)
        check(seen["one node"]["all-time PV"] == total, f"all-time PV {seen['one node']['all-time PV']} != {total}")
        for what, value in seen["one node"].items():
            check(
                value == seen["cluster"][what], f"{what} over {options.days} days: {value} != {seen['cluster'][what]}"
            )
        one = seen["one node"]
        print(
            f"checked on both: all-time PV {total:,}; over {options.days} days the site's PV/UV "
            f"{one['site PV, UV'][:2]}, a page's {one['page PV, UV']}, "
            f"the top pages, {len(one['top sources'])} top sources and {len(one['browsers'])} browsers equal"
        )

        print(
            f"\n{'':>12} {'':>5} {'one node ms':^26} {'cluster ms':^26}\n"
            f"{'read':>12} {'days':>5} {'first':>8} {'p50':>8} {'max':>8} {'first':>8} {'p50':>8} {'max':>8}"
            f" {'max ratio':>9}"
        )
        reads = {name: dashboard_reads(conns[name], last) for name in TARGETS}
        for read in reads["one node"]:
            for span in read_spans(options.days):
                from_day = last - timedelta(days=span - 1)
                row = []
                for name in TARGETS:
                    use(*urls[name])
                    slowest, p50, first = timed_read(reads[name][read], from_day, [None])
                    row += [first, p50, slowest]
                print(f"{read:>12} {span:>5} " + " ".join(f"{ms:>8.1f}" for ms in row) + f" {row[5] / row[2]:>8.1f}x")
                sys.stdout.flush()
        print("cluster reads: every check passed")


if __name__ == "__main__":
    main()
