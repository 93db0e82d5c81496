"""update_counter throughput: counters-tasks vs the seed's MULTI pipeline of 14 commands.

Both run on the same Redis in one run, from one client, one call at a time (the way a task
calls it), so the ratio compares the per-update cost. Target: at least 2x the seed.

    python -m bench.counters [--updates N]
"""

from __future__ import annotations

import argparse
import random
import time

from bench._common import bench_redis, client, rates  # noqa: E402
from counters_tasks import counters  # noqa: E402

PRECISION = (1, 5, 60, 300, 3600, 18000, 86400)


def seed_update_counter(conn, name, count=1, now=None):
    """Seed 000/003, as published: a transactional pipeline of 7 ZADD + 7 HINCRBY."""
    now = now or time.time()
    pipe = conn.pipeline()
    for prec in PRECISION:
        pnow = int(now / prec) * prec
        hash_ = f"{prec}:{name}"
        pipe.zadd("known:", {hash_: 0})
        pipe.hincrby("count:" + hash_, pnow, count)
    pipe.execute()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=20000)
    args = parser.parse_args()
    names = [f"page:{i}" for i in range(100)]
    with bench_redis() as url:
        conn = client(url)
        conn.flushdb()
        rng = random.Random(1)
        picks = [rng.choice(names) for _ in range(args.updates)]
        now = time.time()

        def seed():
            for name in picks:
                seed_update_counter(conn, name, 1, now)

        def ours():
            for name in picks:
                counters.update_counter(conn, name, 1, now)

        rounds = iter(range(10**9))

        def ours_dedupe():
            run = next(rounds)
            for i, name in enumerate(picks):
                counters.update_counter(conn, name, 1, now, message_id=f"task-{run}-{i}")

        ours()  # warm up: scripts loaded
        conn.flushdb()
        got = rates(
            args.updates,
            {
                "seed: MULTI + 7 ZADD + 7 HINCRBY + EXEC": seed,
                "counters-tasks: update_counter": ours,
                "counters-tasks: update_counter with message id": ours_dedupe,
            },
        )
        total = sum(t for _b, t in counters.get_counter(conn, names[0], 86400, now=now))
        assert total == 6 * picks.count(names[0]), "the benchmark's own writes must add up"
        seed_rate, ours_rate, dedupe_rate = got.values()
        print(
            f"ratio counters-tasks / seed: {ours_rate / seed_rate:.2f}x  (with dedupe: {dedupe_rate / seed_rate:.2f}x)"
        )


if __name__ == "__main__":
    main()
