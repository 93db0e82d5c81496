"""End-to-end ingestion: 100,000 visits through a real worker, three ways, in one run.

1. the seeds' code, one Celery task per visit (``bench/seed_tasks.py``, the baseline);
2. ``record_visit.delay()`` and ``incr_ranking.delay()`` per visit (the worker batches
   ``record_visit`` messages itself);
2b. the same calls with ``COUNTERS_DELAY_BUFFER=1`` (they go to the process's shared recorder);
3. ``VisitRecorder`` (``record`` + ``incr_ranking`` per visit, sent as batches);
4. an event against a visit (issue 43): the same stream through ``VisitRecorder``, once as
   ``record`` alone (4v) and once as ``track_event`` alone (4e: an event of the visit's visitor,
   with two properties, ``plan`` and ``section``), one after the other; each process's CPU an
   item and the counters Redis's commands an item of 4e against 4v, which fails the run
   when an event costs more than a visit (by more than 20% of CPU, the noise of one run, or by
   any Redis command or script call; medians of ``--rounds``) in each of three measures.

Each visit is a page view with a session id, and a ranking bump of its path, in the traffic
shapes of ``bench/traffic.py`` (``--shape``, default ``uniform`` and ``zipf``: independent
draws, and a Zipf-popular site visited in sessions). One worker with 2 processes, the counters
Redis and the broker Redis (two private ``redis-server``s) on this machine. Prints, for each:
producer rate, end-to-end visits/s (first send to last write), Redis commands per visit on the
counters server (all, by command, and top-level script calls), CPU per visit of the counters
Redis, the broker Redis, the worker (its processes) and the producer, and the fraction of the
Redis-bound ceiling the run reached (the counters server's pipelined commands/s, measured at
the start with ``redis-benchmark -P 64``, divided by the variant's commands per visit; and, as
scripts cost more than plain commands, one core's worth of the counters Redis's CPU per visit);
then the ratios to (1). It checks the final counts are exact for every path (and fails if not).

For (2) and (2b) it also prints what one ``.delay()`` cost the app (p50 and p90 of every call).

``--reference check`` (``make bench``) compares each process's CPU a visit of (3), as a ratio to
(1)'s in the same round, and (3)'s Redis commands and script calls a visit, with
``bench/reference.json`` (``--reference record`` writes it), and fails when one grows past it by
more than 20% in each of three measures; ``--rounds`` runs the variants that many times, each
figure the median of the rounds.

    python -m bench.ingest [--visits 100000] [--only 3] [--shape zipf] [--rounds 3] [--reference check]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

import redis  # noqa: E402

from bench._common import redis_cpu  # noqa: E402
from bench.traffic import SHAPES, headers_of  # noqa: E402
from counters_tasks.local.redis_server import RedisServer  # noqa: E402


def process_cpu(pid: int) -> float:
    """CPU seconds process ``pid`` has used (every thread): /proc's schedstat, in nanoseconds
    (``stat``'s clock ticks, 10 ms each, are too coarse for a run of a few thousand visits)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_pids(pid: int) -> list[int]:
    """``pid`` and every living descendant (the worker and its pool), ``pid`` first."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    tree, grew = [pid], True
    while grew:
        more = sorted(child for child, parent in parents.items() if parent in tree and child not in tree)
        tree += more
        grew = bool(more)
    return tree


def tree_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of ``pid`` and of each living descendant, by pid."""
    out = {}
    for member in tree_pids(pid):
        with contextlib.suppress(OSError, ValueError, IndexError):
            out[member] = process_cpu(member)
    return out


def pipelined_ceiling(conn: redis.Redis, port: int) -> float:
    """Commands/s the server takes pipelined 64 deep: ``redis-benchmark`` when installed (SET,
    INCR, SADD, HSET; their mean), else redis-py pipelines of 64 HINCRBYs for a second."""
    tool = shutil.which("redis-benchmark")
    if tool:
        out = subprocess.run(
            [tool, "-p", str(port), "-P", "64", "-n", "400000", "-q", "-t", "set,incr,sadd,hset"],
            capture_output=True,
            text=True,
            timeout=300,
        ).stdout
        rates = [float(rate) for rate in re.findall(r"([\d.]+) requests per second", out)]
        if rates:
            conn.flushdb()
            return sum(rates) / len(rates)
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < 1:
        pipe = conn.pipeline(transaction=False)
        for n in range(64):
            pipe.hincrby("ceiling", str(n), 1)
        pipe.execute()
        done += 64
    conn.flushdb()
    return done / (time.perf_counter() - started)


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


class Meters:
    """What a variant costs beyond wall time: the servers', the worker's and this process's CPU."""

    def __init__(self, data: redis.Redis, broker: redis.Redis, worker_pid: int, ceiling: float) -> None:
        self.data, self.broker, self.worker_pid, self.ceiling = data, broker, worker_pid, ceiling

    def read(self) -> tuple[float, float, dict[int, float]]:
        return redis_cpu(self.data), redis_cpu(self.broker), tree_cpu(self.worker_pid)


def run_variant(label: str, data_conn, send, done, n: int, meters: Meters) -> dict:
    data_conn.flushdb()
    data_conn.config_resetstat()
    data_conn.config_set("slowlog-log-slower-than", 5000)  # any call blocking Redis 5 ms or more
    data_conn.slowlog_reset()
    before = meters.read()
    start, producer_before = time.perf_counter(), time.process_time()
    send()
    sent, producer_us = time.perf_counter(), (time.process_time() - producer_before) / n * 1e6
    end = wait_until(done, timeout=1800)
    after = meters.read()
    data_us, broker_us = ((a - b) / n * 1e6 for a, b in zip(after[:2], before[:2], strict=True))
    # a pool process that ended during the run (none should) counts from 0
    worker_each_us = {pid: (cpu - before[2].get(pid, 0.0)) / n * 1e6 for pid, cpu in after[2].items()}
    worker_us = sum(worker_each_us.values())
    commands, scripts = command_counts(data_conn)
    breakdown = sorted(
        (
            (v["calls"] / n, k[len("cmdstat_") :])
            for k, v in data_conn.info("commandstats").items()
            if not k.startswith(("cmdstat_info", "cmdstat_config", "cmdstat_slowlog"))
        ),
        reverse=True,
    )
    slow = data_conn.slowlog_get(128)
    out = {
        "label": label,
        "producer": n / (sent - start),
        "e2e": n / (end - start),
        "commands": commands / n,
        "scripts": scripts / n,
        "slow": len(slow),
        "slowest_ms": max((entry["duration"] for entry in slow), default=0) / 1000,
    }
    out["ceiling"] = meters.ceiling / out["commands"]
    out["of_ceiling"] = out["e2e"] / out["ceiling"]
    out["cpu_ceiling"] = 1e6 / data_us if data_us > 0 else float("inf")  # one Redis core busy with nothing else
    out.update(redis_us=data_us, broker_us=broker_us, worker_us=worker_us, producer_us=producer_us)
    out["worker_each_us"] = list(worker_each_us.values())
    print(
        f"{label:<34} producer {out['producer']:>9,.0f}/s  end-to-end {out['e2e']:>9,.0f} visits/s  "
        f"{out['commands']:>6.1f} Redis commands/visit ({out['scripts']:.2f} script calls)  "
        f"calls over 5 ms: {out['slow']}" + (f" (slowest {out['slowest_ms']:.1f} ms)" if slow else ""),
        flush=True,
    )
    print("    per visit: " + ", ".join(f"{name} {calls:.2f}" for calls, name in breakdown[:12]))
    print(
        f"    CPU per visit: counters Redis {data_us:.1f} us, broker Redis {broker_us:.1f} us, worker {worker_us:.1f} us "
        f"(main {' + pool '.join(f'{us:.1f}' for us in worker_each_us.values())}), producer {producer_us:.1f} us "
        "(its sending: records, packing, publishing)"
    )
    print(
        f"    Redis-bound ceiling: {out['ceiling']:,.0f} visits/s by commands (this run {out['of_ceiling']:.0%} of it), "
        f"{out['cpu_ceiling']:,.0f} visits/s by the counters Redis's CPU per visit "
        f"({out['e2e'] / out['cpu_ceiling']:.0%})"
    )
    for entry in sorted(slow, key=lambda e: -e["duration"])[:3]:
        print(f"    slow: {entry['duration'] / 1000:.1f} ms {entry['command'][:120]!r}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--visits", type=int, default=100_000)
    parser.add_argument("--only", choices=["1", "2", "2b", "3", "4"], action="append")
    parser.add_argument("--shape", choices=sorted(SHAPES), action="append")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the variants this many times, one after another; each process's CPU a visit is the least seen "
        "(what other load on the machine adds is never taken away)",
    )
    parser.add_argument(
        "--reference",
        choices=["check", "record"],
        help="compare each process's CPU a visit, (3) over (1), with bench/reference.json (fail past +20%%), or record it",
    )
    args = parser.parse_args()
    variants = args.only or ["1", "2", "2b", "3", "4"]
    if args.reference and not {"1", "3"} <= set(variants):
        parser.error("--reference needs the variants 1 and 3")
    ratios: dict[str, dict[str, float]] = {}
    event_over: list[str] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        RedisServer(Path(tmp) / "data") as data,
        RedisServer(Path(tmp) / "broker") as broker,
    ):
        env = dict(
            os.environ,
            COUNTERS_REDIS_URL=data.url,
            CELERY_BROKER_URL=broker.url,
            COUNTERS_SECRET="bench-secret",
            PYTHONPATH=str(REPO),
        )
        os.environ.update({k: env[k] for k in ("COUNTERS_REDIS_URL", "CELERY_BROKER_URL", "COUNTERS_SECRET")})
        conn = redis.Redis.from_url(data.url)
        server = server_of(conn)  # (read while it runs: the reference is written after it stops)
        ceiling = pipelined_ceiling(conn, data.port)
        print(f"counters Redis: {ceiling:,.0f} commands/s pipelined 64 deep (the ceiling's numerator)")
        log = open(Path(tmp) / "worker.log", "wb")
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "counters_tasks",
                "worker",
                "-I",
                "bench.seed_tasks",
                "-Q",
                "visits",
                "-c",
                "2",
                "--loglevel",
                "WARNING",
                "--without-mingle",
                "--without-gossip",
            ],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            from counters_tasks.app import app

            deadline = time.monotonic() + 60
            while not app.control.ping(timeout=0.5):
                if time.monotonic() > deadline:
                    raise TimeoutError("worker did not start")
            meters = Meters(conn, redis.Redis.from_url(broker.url), worker.pid, ceiling)
            shapes = args.shape or ["uniform", "zipf"]
            over: dict[str, str] = {}  # "shape figure" -> the line saying by how much, over in every measure so far
            for attempt in range(ATTEMPTS if args.reference == "check" else 1):
                for shape in shapes:
                    print(f"\n== traffic: {shape} ({SHAPES[shape].__doc__.splitlines()[0]})")
                    rounds = [run_shape(SHAPES[shape](args.visits), variants, conn, meters) for _ in range(args.rounds)]
                    if "4" in variants and attempt == 0:
                        event_over += [f"{shape} {line}" for line in event_against_visit(rounds)]
                    if args.reference:
                        ratios[shape] = median_ratios(rounds)
                if args.reference != "check":
                    break
                print(f"\n== against {REFERENCE.relative_to(REPO)} (+{MARGIN - 1:.0%} allowed), measure {attempt + 1}")
                found = {line.split(":")[0]: line for line in check_reference(ratios, server=server)}
                over = found if attempt == 0 else {name: line for name, line in found.items() if name in over}
                if not over:
                    break
                shapes = sorted({name.split()[0] for name in over})  # measure again what was over, only
                print("over in every measure so far: " + "; ".join(over.values()) + "; measured again")
            for _again in range(ATTEMPTS - 1):  # (4): as the reference, what is dearer every time
                if not event_over:
                    break
                print("an event dearer than a visit so far: " + "; ".join(event_over) + "; measured again")
                found = []
                for shape in sorted({line.split()[0] for line in event_over}):
                    rounds = [run_shape(SHAPES[shape](args.visits), ["4"], conn, meters) for _ in range(args.rounds)]
                    found += [f"{shape} {line}" for line in event_against_visit(rounds)]
                before = {line.split(":")[0] for line in event_over}
                event_over = [line for line in found if line.split(":")[0] in before]
        finally:
            worker.terminate()
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
    if event_over:
        print("an event costs more than a visit: " + "; ".join(event_over))
        return 1
    if args.reference == "record":
        record_reference(ratios, args.visits, args.rounds, server)
    elif args.reference == "check":
        if over:
            print(f"dearer than the reference in each of {ATTEMPTS} measures: " + "; ".join(over.values()))
            return 1
        print("every figure within the reference")
    return 0


def whole_ranking(board) -> dict[str, int]:
    """Every member of a board with its total, a page of 1,000 at a time."""
    out: dict[str, int] = {}
    while True:
        page = board.top(offset=len(out), limit=1000, withscores=True)
        out.update(page)
        if len(page) < 1000:
            return out


def run_shape(stream: list, variants: list[str], conn: redis.Redis, meters: Meters) -> dict[str, dict]:
    """Every variant on one traffic shape; the counts checked exact; the ratios to (1). Returns
    each variant's figures (``run_variant``)."""
    import bench.seed_tasks as seed
    from counters_tasks import ranking, sitestats, tasks
    from counters_tasks.core.settings import reset_settings
    from counters_tasks.recorder import VisitRecorder, shared_recorder

    n = len(stream)
    results = {}
    headers = {
        ip: headers_of(ip) for ip, _p, _s, _t in stream
    }  # each visitor's browser (ours only: the seeds know none)
    per_path: dict[str, int] = {}
    for _ip, path, _s, _ts in stream:
        per_path[path] = per_path.get(path, 0) + 1
    print(
        f"{n:,} visits of {len(per_path):,} paths by {len({v[0] for v in stream}):,} visitors "
        f"in {len({v[2] for v in stream}):,} sessions"
    )

    if "1" in variants:

        def send1():
            for ip, path, session, ts in stream:
                seed.seed_visit.delay(ip, path, session, ts)

        results["1"] = run_variant(
            "(1) seeds, one task per visit",
            conn,
            send1,
            lambda: int(conn.hget("visit_info", "pv") or 0) >= n,
            n,
            meters,
        )
        got = {p: int(conn.hget("visit_info", f"pv_{p}") or 0) for p in per_path}
        assert got == per_path, "seed variant: per-path PV is not exact"

    def ours_done():
        """The page views first (one small read), the whole board only once they are in: the
        polling costs the counters Redis and this process little next to the run's own work."""
        if sitestats.site_visit_info(conn).pv < n:
            return False
        return sum(whole_ranking(ranking.Ranking(conn, "pages")).values()) >= n

    def check_ours(label):
        for path, count in per_path.items():
            info = sitestats.site_visit_info(conn, None, path)
            assert info.pv == count, f"{label}: PV of {path} is {info.pv}, expected {count}"
        assert whole_ranking(ranking.Ranking(conn, "pages")) == per_path, f"{label}: the ranking is not exact"

    def delay_each(buffered: bool):
        """(2) or (2b): two ``.delay()`` calls a visit, each timed."""
        os.environ["COUNTERS_DELAY_BUFFER"] = "1" if buffered else ""
        reset_settings()
        costs: list[float] = []

        def send():
            clock = time.perf_counter
            for ip, path, session, ts in stream:
                agent, language = headers[ip]
                started = clock()
                tasks.record_visit.delay(ip, path, session, ts, user_agent=agent, language=language)
                middle = clock()
                tasks.incr_ranking.delay("pages", path, 1, ts)
                costs.extend((middle - started, clock() - middle))
            if buffered:
                assert shared_recorder().flush(timeout=300)

        key, label = (
            ("2b", "(2b) .delay(), COUNTERS_DELAY_BUFFER") if buffered else ("2", "(2) record_visit.delay() per visit")
        )
        results[key] = run_variant(label, conn, send, ours_done, n, meters)
        costs.sort()
        results[key]["delay_p50_us"] = costs[len(costs) // 2] * 1e6
        print(
            f"    one .delay() in the app: p50 {costs[len(costs) // 2] * 1e6:.0f} us, "
            f"p90 {costs[int(len(costs) * 0.9)] * 1e6:.0f} us"
        )
        check_ours(f"({key})")
        assert shared_recorder().stats()["dropped"] == 0, shared_recorder().stats()
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
                agent, language = headers[ip]
                recorder.record(ip, path, session, ts, user_agent=agent, language=language)
                recorder.incr_ranking("pages", path, 1, ts)
            recorder.flush(timeout=120)

        results["3"] = run_variant("(3) VisitRecorder", conn, send3, ours_done, n, meters)
        assert recorder.stats()["dropped"] == 0, recorder.stats()
        check_ours("(3)")
        recorder.close(timeout=10)
        bench_record = VisitRecorder(max_batch=1000, max_delay=60, max_buffer=10 * n)
        start = time.perf_counter()
        for ip, path, session, ts in stream:
            agent, language = headers[ip]
            bench_record.record(ip, path, session, ts, user_agent=agent, language=language)
        calls = n / (time.perf_counter() - start)
        bench_record.close(timeout=120)
        # applied before anything else is measured (the next shape's runs share the worker)
        wait_until(lambda: sitestats.site_visit_info(conn).pv >= 2 * n, timeout=1800)
        print(f"VisitRecorder.record alone: {calls:,.0f} calls/s in the producer")
    if "4" in variants:
        results.update(run_event_against_visit(stream, conn, meters, headers))
    print("all counts exact for every path")
    if "1" in results:
        base = results["1"]
        for key in sorted(results):
            if key != "1":
                r = results[key]
                print(
                    f"({key}) vs (1): end-to-end {r['e2e'] / base['e2e']:.1f}x, producer "
                    f"{r['producer'] / base['producer']:.1f}x, Redis commands/visit "
                    f"{r['commands']:.1f} vs {base['commands']:.1f}, {r['of_ceiling']:.0%} of its Redis-bound ceiling "
                    f"({r['e2e'] / r['cpu_ceiling']:.0%} by Redis CPU)"
                )
    return results


EVENT_PLANS = ("free", "pro", "team")


def event_props(path: str, ts: float) -> dict[str, str]:
    """The event of a visit in (4e): two properties, a plan (three values) and the site's section
    (the path's first part: a few values a shape)."""
    return {"plan": EVENT_PLANS[int(ts) % 3], "section": path.split("/")[1] or "home"}


def run_event_against_visit(stream: list, conn: redis.Redis, meters: Meters, headers: dict) -> dict[str, dict]:
    """(4): the stream as visits alone (4v: ``VisitRecorder.record``), then as events alone (4e:
    ``VisitRecorder.track_event``, an event of the visit's visitor), each measured by
    ``run_variant``; each run done when its read has every item (the site's PV; the events'
    report of the stream's days, whose polling the event's figures carry), then checked exact."""
    from collections import Counter
    from datetime import date

    from counters_tasks import events, sitestats
    from counters_tasks.core.days import local_day
    from counters_tasks.recorder import VisitRecorder

    n = len(stream)
    results = {}
    days: list[date] = sorted({local_day(ts) for _ip, _path, _session, ts in stream})

    def events_counted() -> int:
        return sum(row.total for row in events.event_report(conn, start=days[0], end=days[-1]).events)

    recorder = VisitRecorder(max_batch=1000, max_delay=0.1, max_buffer=4 * n)

    def send_visits():
        for ip, path, session, ts in stream:
            agent, language = headers[ip]
            recorder.record(ip, path, session, ts, user_agent=agent, language=language)
        recorder.flush(timeout=120)

    results["4v"] = run_variant(
        "(4v) VisitRecorder.record alone", conn, send_visits, lambda: sitestats.site_visit_info(conn).pv >= n, n, meters
    )
    assert sitestats.site_visit_info(conn).pv == n, "(4v): the site's PV is not exact"

    names = ("signup", "purchase", "download")

    def send_events():
        for number, (ip, path, session, ts) in enumerate(stream):
            recorder.track_event(names[number % 3], event_props(path, ts), ts, ip, session)
        recorder.flush(timeout=120)

    results["4e"] = run_variant(
        "(4e) VisitRecorder.track_event", conn, send_events, lambda: events_counted() >= n, n, meters
    )
    assert recorder.stats()["dropped"] == 0, recorder.stats()
    recorder.close(timeout=10)
    want = Counter(names[number % 3] for number in range(n))
    got: Counter[str] = Counter()
    for row in events.event_report(conn, start=days[0], end=days[-1]).events:
        got[row.name] += row.total
    assert got == want, f"(4e): the events' counts are {dict(got)}, expected {dict(want)}"
    return results


PROCESSES = {
    "counters_redis": "redis_us",
    "broker_redis": "broker_us",
    "worker": "worker_us",
    "producer": "producer_us",
}
"""The processes a visit costs CPU in, and the figure of ``run_variant`` that holds each."""

WORK = {"redis_commands": "commands", "script_calls": "scripts"}
"""(3)'s Redis work a visit on the counters server (its commands, Lua's included, and its script
calls): checked against the reference as they are, not as ratios."""

REFERENCE = REPO / "bench" / "reference.json"
"""Each process's CPU a visit of (3) as a ratio to (1)'s in the same run, and (3)'s Redis work a
visit, by traffic shape, as recorded (``--reference record``) from the code of a known commit;
``--reference check`` (``make bench``) fails when a figure grows past it by more than ``MARGIN``
in each of ``ATTEMPTS`` measures (a dearer hot path is dearer every time; a busy moment of the
machine is not)."""

MARGIN = 1.2
ATTEMPTS = 3


EVENT_MEASURES = {**PROCESSES, **WORK}
"""What (4) compares, an event's against a visit's: each process's CPU an item, and the counters
Redis's commands and script calls an item."""


def event_against_visit(rounds: list[dict[str, dict]]) -> list[str]:
    """(4e) against (4v), each figure the median of the rounds: the lines of the figures where an
    event costs more than a visit (CPU by more than ``MARGIN``, the noise of one run; commands and
    script calls, which the code alone sets, by anything), each figure's verdict printed."""
    over = []
    print("\n== an event against a visit (4e over 4v, medians of the rounds)")
    for name, field in EVENT_MEASURES.items():
        event = statistics.median(results["4e"][field] for results in rounds)
        visit = statistics.median(results["4v"][field] for results in rounds)
        limit = visit * (1.0 if name in WORK else MARGIN)
        verdict = "OVER" if event > limit + 1e-9 else "ok"
        print(
            f"    {name:<15} event {event:9.2f}, visit {visit:9.2f} ({event / visit if visit else 0:.2f}x): {verdict}"
        )
        if verdict == "OVER":
            over.append(f"{name}: an event {event:.2f}, a visit {visit:.2f}")
    return over


def cpu_ratios(results: dict[str, dict]) -> dict[str, float]:
    """(3)'s CPU a visit over (1)'s, process by process: the seeds' one task a visit is the
    yardstick run beside it, so the figure holds from one machine (and day) to the next; and
    (3)'s Redis commands and script calls a visit, which depend on the code alone."""
    ratios = {name: results["3"][field] / results["1"][field] for name, field in PROCESSES.items()}
    return ratios | {name: results["3"][field] for name, field in WORK.items()}


def median_ratios(rounds: list[dict[str, dict]]) -> dict[str, float]:
    """Each figure of ``cpu_ratios`` as the median of the rounds, each round's (1) and (3) run
    one after the other (so under the same load): on this 2-core machine the seeds' task cost
    the counters Redis 372-612 us a visit from one run to the next, for the same 44 commands."""
    each = [cpu_ratios(results) for results in rounds]
    return {name: statistics.median(ratios[name] for ratios in each) for name in each[0]}


def server_of(conn: redis.Redis) -> str:
    """The kind and major version of the server the figures come from (``valkey 8``, ``redis 7``):
    the ratios differ from one to another (Debian's Redis 7.0 and the embedded Valkey 8 give the
    same code's broker figures 35% apart), so a reference holds for the server it was recorded on."""
    info = conn.info("server")
    name, version = ("valkey", info["valkey_version"]) if "valkey_version" in info else ("redis", info["redis_version"])
    return f"{name} {str(version).split('.')[0]}"


def check_reference(
    ratios: dict[str, dict[str, float]], path: Path = REFERENCE, server: str | None = None
) -> list[str]:
    """The figures (of ``cpu_ratios``) grown past the recorded ones by more than MARGIN, as
    lines "<shape> <figure>: ..." (each figure's verdict printed). Measured on another ``server``
    than the one recorded (``server_of``), the figures cannot be compared: SystemExit says so."""
    kept = json.loads(path.read_text())
    if server is not None and kept.get("server", server) != server:
        raise SystemExit(
            f"{path.name} was recorded on {kept['server']}, this run is on {server}: compare on the same server "
            "(make bench runs the embedded one, COUNTERS_REDIS_SERVER=embedded), or record it (--reference record)"
        )
    recorded = kept["ratios"]
    over = []
    for shape, mine in ratios.items():
        if shape not in recorded:
            raise SystemExit(f"{path.name} records no {shape!r} traffic: record it (--reference record)")
        for name, ratio in mine.items():
            limit = recorded[shape][name] * MARGIN
            verdict = "OVER" if ratio > limit else "ok"
            what = "(3) a visit" if name in WORK else "(3)/(1) CPU a visit"
            print(
                f"    {shape:<8} {name:<15} {what:<20} {ratio:.4f}, recorded {recorded[shape][name]:.4f}, "
                f"limit {limit:.4f}: {verdict}"
            )
            if ratio > limit:
                over.append(f"{shape} {name}: {ratio:.4f} > {limit:.4f} ({ratio / recorded[shape][name] - 1:+.0%})")
    return over


def record_reference(
    ratios: dict[str, dict[str, float]], visits: int, rounds: int, server: str, path: Path = REFERENCE
) -> None:
    """Write the figures as the reference. Recorded again at the same commit, each figure keeps
    the higher of the two: record a few times, and the check's limit stands above the noise."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    kept = json.loads(path.read_text()) if path.exists() else {}
    if kept.get("commit") == commit and kept.get("server") == server:
        for shape, mine in kept.get("ratios", {}).items():
            for name, value in mine.items():
                if shape in ratios and name in ratios[shape]:
                    ratios[shape][name] = max(ratios[shape][name], value)
    again = kept.get("commit") == commit and kept.get("server") == server
    recordings = kept.get("recordings", 0) + 1 if again else 1
    path.write_text(
        json.dumps(
            {
                "what": "CPU a visit of (3) VisitRecorder over (1) the seeds' task, process by process, and (3)'s Redis "
                "commands and script calls a visit (bench/ingest.py: the medians of the rounds; the highest of the "
                "recordings at this commit)",
                "commit": commit,
                "server": server,
                "visits": visits,
                "rounds": rounds,
                "recordings": recordings,
                "ratios": {shape: {name: round(r, 4) for name, r in mine.items()} for shape, mine in ratios.items()},
            },
            indent=2,
        )
        + "\n"
    )
    print(f"recorded in {path.relative_to(REPO)} ({recordings} at {commit})")


if __name__ == "__main__":
    sys.exit(main())
