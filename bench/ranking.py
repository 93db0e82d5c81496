"""Benchmark: ``counters_tasks.ranking`` against the reference design's DyStats, same Redis, same data.

    python -m bench.ranking                 # starts a private redis-server (1,000,000 members)
    python -m bench.ranking --url redis://127.0.0.1:6379/0 --members 200000

Measures, with a 24 h window of 1 h slots holding ``--members`` members (each in one random
slot, so ~members/24 a slot) plus ``--filler`` unrelated keys (a real keyspace is not empty, and
the seed lists its slots with KEYS):

- ``top(limit=10)`` latency (median and p99 of single calls);
- ``incr`` throughput (sequential single calls, one client: the cost a task pays);
- one hourly rotation: dropping the oldest slot from the result.

The baseline is the seed's class, ported as is (KEYS, one ZINCRBY round trip per member, the
race its own comments admit) except that the client and the clock are parameters and ZINCRBY
takes redis-py 3+'s argument order (the seed was written for redis-py 2). Note that
the seed keeps two slots more than its window (it drops a slot only when it is older than
``period + interval`` hours before the current hour), so its run that drops the same slot comes two
hours later; the benchmark runs each at the moment it drops that slot.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import redis

from counters_tasks import ranking  # noqa: E402
from counters_tasks.local.redis_server import RedisServer  # noqa: E402
from counters_tasks.store import keys

# --- the seed's DyStats, ported: same keys, same commands; client and clock are parameters ------

TIME_SLOT = "slot_{name}_{timestamp}"
STATS_RESULTS = "stats_{name}"
LAST_SLOT = "last_slot_{name}"


class DyStats:
    def __init__(self, client, stats_name, period, interval, clock=datetime.now):
        assert interval in [1, 2, 3, 4, 6, 8, 12] or (interval >= 24 and interval % 24 == 0)
        assert period >= interval and period % interval == 0
        self.redis_client = client
        self.clock = clock
        self.stats_name = stats_name
        self.period = period
        self.interval = interval

    def incr_stats(self, target_id, amount=1):
        last_slot = self._last_slot
        self.redis_client.hincrby(TIME_SLOT.format(name=self.stats_name, timestamp=last_slot), target_id, amount)
        self.redis_client.zincrby(STATS_RESULTS.format(name=self.stats_name), amount, target_id)

    def get_stats_list(self, offset, limit, withscores=False):
        # the seed's slice is offset..offset+limit inclusive (limit + 1 items); kept as is
        rows = self.redis_client.zrevrange(
            STATS_RESULTS.format(name=self.stats_name), offset, offset + limit, withscores
        )
        if withscores:
            return [(i.decode(), s) for i, s in rows]
        return [i.decode() for i in rows]

    def remove_all_expired_slots(self):
        slot_keys = self.redis_client.keys(TIME_SLOT[:11].format(name=self.stats_name) + "_*")
        now = self.clock()
        for key in slot_keys:
            key = int(key.decode()[(6 + len(self.stats_name)) :])
            if (
                key
                < (
                    datetime(year=now.year, month=now.month, day=now.day, hour=now.hour)
                    - timedelta(hours=self.period + self.interval)
                ).timestamp()
            ):
                self.remove_expired_slot(key)

    def remove_expired_slot(self, timestamp):
        slot_values = self.redis_client.hgetall(TIME_SLOT.format(name=self.stats_name, timestamp=timestamp))
        deleted = self.redis_client.delete(TIME_SLOT.format(name=self.stats_name, timestamp=timestamp))
        if deleted:
            for key in slot_values.keys():
                value = self.redis_client.zincrby(
                    STATS_RESULTS.format(name=self.stats_name), -int(slot_values[key].decode()), key.decode()
                )
                if value <= 0:
                    self.redis_client.zrem(STATS_RESULTS.format(name=self.stats_name), key.decode())

    @property
    def _last_slot(self):
        last_slot = self.redis_client.get(LAST_SLOT.format(name=self.stats_name))
        last_slot = int(last_slot.decode()) if last_slot is not None else None
        if last_slot is None:
            last_slot = self._set_first_slot()
        if datetime.fromtimestamp(last_slot) + timedelta(hours=self.interval) <= self.clock():
            self.remove_all_expired_slots()
        while datetime.fromtimestamp(last_slot) + timedelta(hours=self.interval) <= self.clock():
            last_slot = (datetime.fromtimestamp(last_slot) + timedelta(hours=self.interval)).timestamp()
            self.redis_client.set(LAST_SLOT.format(name=self.stats_name), int(last_slot))
        return int(last_slot)

    def _set_first_slot(self):
        now = self.clock()
        first_slot = datetime(year=now.year, month=now.month, day=now.day, hour=now.hour).timestamp()
        self.redis_client.set(LAST_SLOT.format(name=self.stats_name), int(first_slot))
        return int(first_slot)


# --- the benchmark ------------------------------------------------------------------------------

HOUR = 3600
BATCH = 2000


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return time.perf_counter() - start, result


def latencies(fn, calls: int) -> tuple[float, float]:
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99) - 1]


def load_ours(conn, board: ranking.Ranking, data: list[tuple[str, int, int]]) -> None:
    for first in range(0, len(data), BATCH):
        board.incr_many([(member, amount, hour_start) for member, hour_start, amount in data[first : first + BATCH]])
    ranking.register_board(conn, board.name)


def load_seed(conn, name: str, data: list[tuple[str, int, int]], last_hour: int) -> None:
    results = STATS_RESULTS.format(name=name)
    for first in range(0, len(data), BATCH):
        pipe = conn.pipeline(transaction=False)
        for member, hour_start, amount in data[first : first + BATCH]:
            pipe.hincrby(TIME_SLOT.format(name=name, timestamp=hour_start), member, amount)
            pipe.zincrby(results, amount, member)
        pipe.execute()
    conn.set(LAST_SLOT.format(name=name), last_hour)


def load_filler(conn, count: int) -> None:
    for first in range(0, count, 10_000):
        pipe = conn.pipeline(transaction=False)
        for i in range(first, min(count, first + 10_000)):
            pipe.set(f"filler:{i}", "x")
        pipe.execute()


def run(conn, members: int, filler: int, incr_ops: int, top_calls: int) -> dict[str, float]:
    rng = random.Random(4)
    hour = (int(time.time()) // HOUR - 48) * HOUR  # H: the current hour of the benchmark's clock
    hours = [hour - h * HOUR for h in range(24)]  # the 24 slots of the window H-23h .. H
    data = [(f"post:{i}", rng.choice(hours), rng.randint(1, 100)) for i in range(members)]
    oldest = min(hours)
    in_oldest = sum(1 for _, h, _ in data if h == oldest)
    out: dict[str, float] = {}

    print(f"loading {members:,} members over 24 hourly slots (~{in_oldest:,} in the oldest) and {filler:,} filler keys")
    load_filler(conn, filler)
    board = ranking.Ranking(conn, "bench", 24, 1)
    out["load_ours_s"], _ = timed(load_ours, conn, board, data)
    out["load_seed_s"], _ = timed(load_seed, conn, "bench", data, hour)
    print(
        f"  loaded: ours {out['load_ours_s']:.1f} s (one Lua call per bump, pipelined), "
        f"seed {out['load_seed_s']:.1f} s (HINCRBY + ZINCRBY, pipelined)"
    )

    clock = {"now": datetime.fromtimestamp(hour + 1800)}
    seed = DyStats(conn, "bench", 24, 1, clock=lambda: clock["now"])
    now = hour + 1800

    ours_top = board.top(0, 10, True, now=now)
    seed_top = seed.get_stats_list(0, 10, True)
    assert [t for _, t in ours_top] == [int(t) for _, t in seed_top[:10]]  # same data, same totals
    out["top_ours_med"], out["top_ours_p99"] = latencies(lambda: board.top(0, 10, now=now), top_calls)
    out["top_seed_med"], out["top_seed_p99"] = latencies(lambda: seed.get_stats_list(0, 10), top_calls)

    picks = [f"post:{rng.randrange(members)}" for _ in range(incr_ops)]
    elapsed, _ = timed(lambda: [board.incr(m, 1, now=now) for m in picks])
    out["incr_ours_per_s"] = incr_ops / elapsed
    elapsed, _ = timed(lambda: [seed.incr_stats(m, 1) for m in picks])
    out["incr_seed_per_s"] = incr_ops / elapsed

    # beat is late: a read whose window already excludes the oldest slot, before any rotation; past
    # ranking.CORRECT_AT_MOST members of such slots the read does the rotation first (in calls of
    # ranking.ROTATE_BUDGET members), so the first read pays for it and the next ones are plain
    late_now = hour + HOUR + 60
    out["rotate_ours_s"], _ = timed(lambda: board.top(0, 10, now=late_now))
    out["top_late_ours_med"], _ = latencies(lambda: board.top(0, 10, now=late_now), max(5, top_calls // 50))
    board.rotate(late_now)  # nothing left when the read rotated (a big slot), else beat's rotation
    assert board.stats()["rotated_slot"] == ranking.slot_of(late_now, 1) - 23, board.stats()
    clock["now"] = datetime.fromtimestamp(hour + 3 * HOUR + 60)
    seed_slots = len(conn.keys("slot_bench_*"))
    out["rotate_seed_s"], _ = timed(seed.remove_all_expired_slots)
    assert len(conn.keys("slot_bench_*")) == seed_slots - 1
    out["rotate_again_ours_s"], again = timed(board.rotate, now=late_now)
    assert again == 0
    out["members_in_rotated_slot"] = in_oldest
    with keys.bound(conn):
        out["top_zset_bytes"] = conn.memory_usage(keys.ranking_top("bench")) or 0
    out["seed_zset_bytes"] = conn.memory_usage(STATS_RESULTS.format(name="bench")) or 0
    return out


def report(out: dict[str, float], members: int, filler: int) -> None:
    ms = 1000.0
    print(f"\nresults ({members:,} members, {filler:,} other keys in the keyspace)")
    print(
        f"  top(limit=10) median   ours {out['top_ours_med'] * ms:8.3f} ms   seed {out['top_seed_med'] * ms:8.3f} ms"
        f"   ours/seed {out['top_ours_med'] / out['top_seed_med']:.2f}x"
    )
    print(f"  top(limit=10) p99      ours {out['top_ours_p99'] * ms:8.3f} ms   seed {out['top_seed_p99'] * ms:8.3f} ms")
    print(
        f"  top, beat late 1 slot  ours {out['top_late_ours_med'] * ms:8.3f} ms   (after the first such read, which"
        " did the rotation: below; the seed's answer is stale)"
    )
    print(
        f"  incr throughput        ours {out['incr_ours_per_s']:8.0f} /s   seed {out['incr_seed_per_s']:8.0f} /s"
        f"   ours/seed {out['incr_ours_per_s'] / out['incr_seed_per_s']:.2f}x"
    )
    print(
        f"  hourly rotation        ours {out['rotate_ours_s'] * ms:8.1f} ms   seed {out['rotate_seed_s'] * ms:8.1f} ms"
        f"   seed/ours {out['rotate_seed_s'] / out['rotate_ours_s']:.1f}x  "
        f"({out['members_in_rotated_slot']:,.0f} members in the slot)"
    )
    print(f"  repeated rotation      ours {out['rotate_again_ours_s'] * ms:8.3f} ms (nothing left to subtract)")
    print(
        f"  result zset memory     ours {out['top_zset_bytes'] / 2**20:8.1f} MiB   seed {out['seed_zset_bytes'] / 2**20:8.1f} MiB"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an EMPTY Redis database to use (default: start a private redis-server)")
    parser.add_argument("--members", type=int, default=1_000_000)
    parser.add_argument("--filler", type=int, default=100_000, help="unrelated keys in the keyspace")
    parser.add_argument("--incr-ops", type=int, default=20_000)
    parser.add_argument("--top-calls", type=int, default=2_000)
    args = parser.parse_args(argv)
    os.environ.setdefault("COUNTERS_SECRET", "bench-only")
    with tempfile.TemporaryDirectory(prefix="ranking-bench-") as tmp:
        server = None
        url = args.url
        if not url:
            server = RedisServer(Path(tmp) / "redis").start()
            url = server.url
        try:
            conn = redis.Redis.from_url(url)
            if conn.dbsize():
                print(f"refusing to run: {url} is not empty", file=sys.stderr)
                return 2
            print(f"redis {conn.info('server')['redis_version']} at {url}")
            out = run(conn, args.members, args.filler, args.incr_ops, args.top_calls)
            report(out, args.members, args.filler)
            if server is None:
                conn.flushdb()
        finally:
            if server is not None:
                server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
