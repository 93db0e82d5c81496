"""Range reads at scale (issue 32): ``top_pages`` over 1, 7, 30 (and more) days of a site whose
days each hold ``--paths`` distinct paths (the day's cap is 10,000), against reading every page
of every day, the way ``top_pages`` did before the days' tops, in the same process.

Per day: ``--views`` page views, a few hundred popular paths (zipf weights) and a tail of paths
viewed once, by ``--visitors`` visitors, written with ``visits.apply_visits`` in batches of 500.
Then for each span: the first read (it makes the days' tops), then ``--repeat`` reads (the median
and the slowest), and the read of every page of every day (median), each checked against a
plain count of the visits written: exits non-zero on a wrong figure.

Each span's site stats too (``site_visit_range``: its unique visitors the union of the days'
HyperLogLogs, dense at these days' thousands of visitors, merged in the process: ``store.hll``),
their median time, the UV checked within 3% of the exact count.

Then the longest span under traffic: ``--traffic`` views of the popular paths land on the last
day before each of ``--repeat`` reads (that day's top is then behind its pages: the read takes it
with those views as slack), against the same reads when that day's top is made again from its
pages at each read (deleted before it: what a read did while a top held only until its day's
next view).

    python -m bench.reads [--days 30] [--paths 10000] [--views 20000] [--spans 1,7,30]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import Counter
from datetime import timedelta

from bench._common import bench_redis, client
from counters_tasks import sitestats, visits
from counters_tasks.core.days import local_day
from counters_tasks.sitestats import day_tops, page_day
from counters_tasks.store import keys


def every_page(conn, first, last) -> list[tuple[str, int]]:
    """The top 10 read from every page of every day: the read before the days' tops."""
    totals: Counter[str] = Counter()
    with keys.bound(conn):
        day = first
        while day <= last:
            for field, value in conn.hscan_iter(page_day.site_day_pages(day), count=sitestats.PAGES_PER_CALL):
                totals[field.decode() or sitestats.OTHER] += int(value.split(b" ", 1)[0])
            day += timedelta(days=1)
    return sorted(totals.items(), key=lambda item: (-item[1], item[0]))[:10]


def timed(call) -> tuple[float, object]:
    started = time.perf_counter()
    result = call()
    return (time.perf_counter() - started) * 1000, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--paths", type=int, default=10_000, help="distinct paths a day")
    parser.add_argument("--views", type=int, default=20_000, help="page views a day")
    parser.add_argument("--visitors", type=int, default=5_000)
    parser.add_argument("--spans", default="1,7,30", help="days of the ranges read, comma-separated")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--traffic", type=int, default=50, help="views landing on the last day between reads")
    args = parser.parse_args()
    spans = [int(s) for s in args.spans.split(",")]
    rng = random.Random(7)
    popular = [f"/post/{n}" for n in range(300)]
    weights = [1 / (n + 1) for n in range(len(popular))]
    ips = [f"10.{n // 65536 % 256}.{n // 256 % 256}.{n % 256}" for n in range(args.visitors)]
    last = local_day(time.time()) - timedelta(days=2)
    first = last - timedelta(days=args.days - 1)
    truth: dict = {}
    seen: dict = {}  # day -> the IPs of its views
    with bench_redis() as url:
        conn = client(url)
        conn.flushdb()
        started = time.monotonic()
        for d in range(args.days):
            day = first + timedelta(days=d)
            noon = time.mktime(day.timetuple()) + 43_200
            tail = args.paths - len(popular)
            paths = [f"/d{d}/{n}" for n in range(tail)]
            paths += rng.choices(popular, weights, k=max(0, args.views - tail))
            rng.shuffle(paths)
            truth[day] = Counter(paths)
            batch = [{"ip": rng.choice(ips), "path": p, "ts": noon + rng.uniform(-3, 3) * 3600} for p in paths]
            seen[day] = {visit["ip"] for visit in batch}
            for at in range(0, len(batch), 500):
                visits.apply_visits(conn, batch[at : at + 500])
        print(
            f"wrote {args.days} days x {args.views} views ({args.paths} paths a day) in {time.monotonic() - started:.0f} s"
        )
        print(f"{'days':>5} {'first read ms':>14} {'read ms p50':>12} {'max':>8} {'every page ms':>14} {'ratio':>7}")
        wrong = 0
        for span in spans:
            start = last - timedelta(days=span - 1)
            model: Counter[str] = Counter()
            for day in truth:
                if start <= day <= last:
                    model.update(truth[day])
            expected = sorted(model.items(), key=lambda item: (-item[1], item[0]))[:10]
            first_ms, got = timed(lambda: sitestats.top_pages(conn, start, last, 10))  # noqa: B023
            runs = [timed(lambda: sitestats.top_pages(conn, start, last, 10)) for _ in range(args.repeat)]  # noqa: B023
            scans = [timed(lambda: every_page(conn, start, last)) for _ in range(max(1, args.repeat // 2))]  # noqa: B023
            for result in [got, *(r for _ms, r in runs), *(r for _ms, r in scans)]:
                wrong += result != expected
            p50 = statistics.median(ms for ms, _r in runs)
            scan = statistics.median(ms for ms, _r in scans)
            stats = [timed(lambda: sitestats.site_visit_range(conn, start, last)) for _ in range(args.repeat)]  # noqa: B023
            visitors = len(set().union(*(ips_of for day, ips_of in seen.items() if start <= day <= last)))
            wrong += any(abs(info.uv - visitors) > 0.03 * visitors for _ms, info in stats)
            print(
                f"{span:>5} {first_ms:>14.1f} {p50:>12.1f} {max(ms for ms, _r in runs):>8.1f} {scan:>14.1f} {scan / p50:>6.1f}x"
                f"   stats {statistics.median(ms for ms, _r in stats):.1f} ms (UV {stats[0][1].uv:,} of {visitors:,})"
            )
        span = max(spans)
        start = last - timedelta(days=span - 1)
        noon = time.mktime(last.timetuple()) + 43_200
        timings: dict[str, list[float]] = {"behind": [], "made again": []}
        for _round in range(args.repeat):
            for how, runs in timings.items():
                paths = rng.choices(popular, weights, k=args.traffic)
                truth[last].update(paths)
                batch = [{"ip": rng.choice(ips), "path": p, "ts": noon} for p in paths]
                visits.apply_visits(conn, batch)
                if how == "made again":
                    with keys.bound(conn):
                        conn.delete(day_tops.site_day_pages_top(last))
                ms, got = timed(lambda: sitestats.top_pages(conn, start, last, 10))  # noqa: B023
                model = Counter()
                for day in truth:
                    if start <= day <= last:
                        model.update(truth[day])
                wrong += got != sorted(model.items(), key=lambda item: (-item[1], item[0]))[:10]
                runs.append(ms)
        behind, again = (statistics.median(runs) for runs in timings.values())
        print(
            f"{span} days, {args.traffic} views on the last day before each read: top behind its pages "
            f"{behind:.1f} ms p50, made again at each read {again:.1f} ms p50 ({again / behind:.1f}x)"
        )
        if wrong:
            print(f"FAILED: {wrong} reads differ from the count of the visits written")
            sys.exit(1)
        print("every read equals the count of the visits written")


if __name__ == "__main__":
    main()
