"""Redis commands a visit costs, by the Lua script that sends them: a profile to read before and
after changing a script.

Watches a private Redis server (or ``COUNTERS_BENCH_REDIS_URL``) with ``MONITOR`` while it applies visits (each with a
ranking bump of its path) two ways: as one ``record_visits`` batch (what a ``VisitRecorder``
batch, or a batch of buffered ``.delay()`` calls, costs a worker) and one message a visit
(``record_visit`` + ``incr_ranking``, each with its own message id: what ``.delay()`` without
``COUNTERS_DELAY_BUFFER`` costs). Commands run inside a script are counted under its name;
the top-level calls under ``(top)``. Checks that every visit was applied.

Then, unwatched, the server's CPU a visit over ``--cpu-batches`` batches of a day filling up,
and the same batches again with every call in SLOWLOG: each script's time a visit and its calls'
median, 99th percentile and slowest (a script's time includes the commands it runs).

    python -m bench.commands [--visits 500] [--shape uniform] [--cpu-batches 20]
"""

from __future__ import annotations

import argparse
import collections
import sys
import threading
import uuid
from importlib import resources

import redis

from bench._common import bench_redis, redis_cpu
from bench.traffic import SHAPES

END = "bench-commands-end"


def script_names(conn: redis.Redis) -> dict[str, str]:
    """sha -> name of every script of the package (``store/lua/*.lua``)."""
    from counters_tasks.store.scripts import script

    lua = resources.files("counters_tasks.store").joinpath("lua")
    names = [entry.name.removesuffix(".lua") for entry in lua.iterdir() if entry.name.endswith(".lua")]
    return {script(conn, name).sha: name for name in names}


def watched(url: str, work) -> list[dict]:
    """The commands the server ran while ``work()`` ran (MONITOR, read by a thread until an
    ECHO of END sent after the work)."""
    seen: list[dict] = []
    ready = threading.Event()

    def read() -> None:
        with redis.Redis.from_url(url).monitor() as monitor:
            ready.set()
            for command in monitor.listen():
                if END in command["command"]:
                    return
                seen.append(command)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not ready.wait(10):
        raise TimeoutError("MONITOR did not start")
    marker = redis.Redis.from_url(url)
    marker.ping()  # MONITOR is on once its reply came: a command after this is seen
    work()
    marker.echo(END)
    reader.join(30)
    if reader.is_alive():
        raise TimeoutError("MONITOR did not see the end marker")
    return seen


def by_script(seen: list[dict], shas: dict[str, str]) -> dict[str, collections.Counter]:
    per: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    current = "(top)"
    for command in seen:
        words = command["command"].split()
        name = words[0].upper()
        if command.get("client_type") == "lua":
            per[current][name] += 1
            continue
        current = shas.get(words[1], words[1][:8]) if name in ("EVALSHA", "EVAL") and len(words) > 1 else "(top)"
        per["(top)"][name] += 1
    return per


def report(title: str, per: dict[str, collections.Counter], visits: int) -> float:
    print(f"\n{title}")
    total = 0
    for name, counts in sorted(per.items(), key=lambda item: -sum(item[1].values())):
        calls = sum(counts.values())
        total += calls
        shown = ", ".join(f"{command} {n / visits:.2f}" for command, n in counts.most_common(8))
        print(f"  {name:<16} {calls / visits:6.2f} a visit: {shown}")
    print(f"  {'total':<16} {total / visits:6.2f} a visit")
    return total / visits


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--visits", type=int, default=500)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="uniform")
    parser.add_argument(
        "--cpu-batches", type=int, default=20, help="batches of --visits visits for the Redis CPU a visit (no MONITOR)"
    )
    args = parser.parse_args()
    with bench_redis() as url:
        from counters_tasks import ranking, ranking_bumps, sitestats, visits

        conn = redis.Redis.from_url(url)
        shas = script_names(conn)
        stream = SHAPES[args.shape](args.visits, 3)
        items = [{"ip": ip, "path": path, "session_id": sid, "ts": ts} for ip, path, sid, ts in stream]
        bumps = [{"board": "pages", "member": item["path"], "ts": item["ts"]} for item in items]
        visits.apply_visits(conn, items[:20], message_id="warm-up")  # scripts loaded, the day's figure fixed
        conn.flushdb()

        def batch() -> None:
            visits.apply_visits(conn, items, message_id="batch")
            ranking_bumps.incr_bumps(conn, bumps, message_id="bumps")

        batch_cost = report(
            f"one batch of {len(items)} visits ({args.shape})", by_script(watched(url, batch), shas), len(items)
        )
        assert sitestats.site_visit_info(conn).pv == len(items), "the batch was not applied whole"
        conn.flushdb()
        board = ranking.Ranking(conn, "pages")

        def one_by_one() -> None:
            for item in items:
                visits.apply_visit(
                    conn, item["ip"], item["path"], item["session_id"], item["ts"], message_id=str(uuid.uuid4())
                )
                board.incr_many([(item["path"], 1, item["ts"])], message_id=str(uuid.uuid4()))

        message_cost = report(
            "one message a visit (record_visit + incr_ranking, each with its id)",
            by_script(watched(url, one_by_one), shas),
            len(items),
        )
        assert sitestats.site_visit_info(conn).pv == len(items), "a visit was not applied"
        cpu_us, cpu_commands = batch_redis_cpu(conn, args.shape, len(items), args.cpu_batches)
        conn.config_set("slowlog-log-slower-than", 0)
        conn.config_set("slowlog-max-len", 1_000_000)
        conn.slowlog_reset()
        batch_redis_cpu(conn, args.shape, len(items), args.cpu_batches)
        calls = conn.slowlog_get(1_000_000)
        conn.config_set("slowlog-log-slower-than", 10_000)
        conn.slowlog_reset()
    print(f"\ncommands per visit: batch {batch_cost:.1f}, per-visit messages {message_cost:.1f}")
    print(
        f"Redis CPU a visit, without MONITOR, {args.cpu_batches} batches of {len(items)} ({args.shape}, a day "
        f"filling up): {cpu_us:.1f} us, {cpu_commands:.1f} commands a visit"
    )
    print(  # (the warm-up batch included)
        "the same batches, each call timed (SLOWLOG): script, us a visit, calls, call p50 / p99 / slowest us"
    )
    for name, durations in script_durations(calls, shas):
        durations.sort()
        print(
            f"  {name:<16} {sum(durations) / ((args.cpu_batches + 1) * len(items)):6.1f} {len(durations):>7} "
            f"{durations[len(durations) // 2]:>7} {durations[int(len(durations) * 0.99)]:>7} {durations[-1]:>7}"
        )
    return 0


def script_durations(calls: list[dict], shas: dict[str, str]) -> list[tuple[str, list[int]]]:
    """Each script's call durations (us) in SLOWLOG entries, most time first (the commands a
    script runs are in SLOWLOG too, and in its own time: left out)."""
    per: dict[str, list[int]] = collections.defaultdict(list)
    for entry in calls:
        words = entry["command"].split()
        if words and words[0].upper() in (b"EVALSHA", b"EVAL") and len(words) > 1:
            per[shas.get(words[1].decode(), words[1].decode()[:8])].append(entry["duration"])
    return sorted(per.items(), key=lambda item: -sum(item[1]))


def batch_redis_cpu(conn: redis.Redis, shape: str, size: int, batches: int) -> tuple[float, float]:
    """The server's CPU (us) and commands a visit over ``batches`` batches of ``size`` visits of
    one stream (each with its ranking bump), unwatched (MONITOR costs the server more than the
    work): what a change to a script costs Redis, beside the commands it sends."""
    from counters_tasks import ranking_bumps, sitestats, visits

    conn.flushdb()
    stream = SHAPES[shape](size * (batches + 1), 5)
    items = [{"ip": ip, "path": path, "session_id": sid, "ts": ts} for ip, path, sid, ts in stream]
    visits.apply_visits(conn, items[:size], message_id="cpu-warm-up")
    measured = items[size:]
    conn.config_resetstat()
    before = redis_cpu(conn)
    for first in range(0, len(measured), size):
        part = measured[first : first + size]
        visits.apply_visits(conn, part, message_id=f"cpu-{first}")
        ranking_bumps.incr_bumps(
            conn, [{"board": "cpu", "member": v["path"], "ts": v["ts"]} for v in part], message_id=f"cpu-r-{first}"
        )
    used = redis_cpu(conn) - before
    calls = sum(v["calls"] for k, v in conn.info("commandstats").items() if k != "cmdstat_info")
    assert sitestats.site_visit_info(conn).pv == len(items), "a batch was not applied whole"
    return used / len(measured) * 1e6, calls / len(measured)


if __name__ == "__main__":
    sys.exit(main())
