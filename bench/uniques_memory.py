"""Memory of 1,000,000 daily unique visitors: the package's sharded intsets against the reference
design's (seed 002: the same 15-hex-digit ids, sharded by CRC32 into SETs sized for the intset
encoding, ``bench/seed_tasks.py``'s port), and, for scale, one plain SET (what that sharding
avoids) and one HyperLogLog.

Also the all-time exact UV of ``sitestats`` (visitor ids ever seen, in 16 plain SETs), per
visitor. Measured with Redis's own ``MEMORY USAGE`` (per key, all elements sampled) and the
``INFO memory`` used_memory delta (which also counts the keyspace and expires dict entries).

    python -m bench.uniques_memory              # starts a private redis-server
    python -m bench.uniques_memory --url redis://127.0.0.1:6379/15 --visitors 1000000

The database it uses is flushed. Target: sharded <= 12 MB per million. Every layout's count is
checked (the exact ones exact, the HyperLogLog within 5%) and every shard must be an intset; a
wrong one exits non-zero.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import tempfile
import time
import uuid
from datetime import timedelta

import redis  # noqa: E402

from counters_tasks.core.settings import reset_settings  # noqa: E402
from counters_tasks.local.redis_server import RedisServer  # noqa: E402
from counters_tasks.sitestats import page_all, site_all

BATCH = 20_000


def check(ok: bool, what: str) -> None:
    """A result of the benchmark itself that must hold: exit non-zero naming it when it does not."""
    if not ok:
        raise SystemExit(f"bench.uniques_memory: check failed: {what}")


def used_memory(conn: redis.Redis) -> int:
    return int(conn.info("memory")["used_memory"])


def usage(conn: redis.Redis, keys: list) -> int:
    pipe = conn.pipeline(transaction=False)
    for key in keys:
        pipe.memory_usage(key, samples=0)
    return sum(int(n or 0) for n in pipe.execute())


def report(label: str, n: int, by_keys: int, by_info: int | None, nkeys: int) -> None:
    info = "" if by_info is None else f"   INFO delta {by_info / 1e6:7.2f} MB = {by_info / n:6.2f} B/visitor"
    print(f"{label}\n    {nkeys:>6} keys  MEMORY USAGE {by_keys / 1e6:7.2f} MB = {by_keys / n:6.2f} B/visitor{info}")


def session_ids(n: int, seed: int = 2) -> list[str]:
    rng = random.Random(seed)
    return [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(n)]


def sharded(conn: redis.Redis, numbers: list[int], yesterday: int | None) -> int:
    """Load through the package: ``uniques.queue_ids`` in pipelines of BATCH ids."""
    from counters_tasks import uniques
    from counters_tasks.core.days import today
    from counters_tasks.store import keys
    from counters_tasks.store.scripts import execute_in_order

    day = today()
    conn.flushdb()
    if yesterday is not None:
        with keys.bound(conn, write=True):
            conn.set(keys.uniques_count(day - timedelta(days=1)), yesterday)
    uniques.forget_expected()
    expected = uniques.precompute_expected(conn, day)
    base = used_memory(conn)
    started = time.perf_counter()
    for start in range(0, len(numbers), BATCH):
        chunk = numbers[start : start + BATCH]
        [[reply]] = execute_in_order(
            conn, lambda pipe, chunk=chunk: uniques.queue_ids(conn, pipe, day, chunk, expected, None)
        )
        assert int(reply) >= 0
    took = time.perf_counter() - started
    check(uniques.unique_visitors(conn, day) == len(set(numbers)), "the day's unique visitors are exact")
    with keys.bound(conn):
        shard_keys = [keys.uniques_shard(day, s) for s in range(uniques.shard_count(expected))]
        figure_keys = [keys.uniques_count(day), keys.uniques_expected(day)]
    pipe = conn.pipeline(transaction=False)
    for key in shard_keys:
        pipe.object("encoding", key)
    encodings = {e.decode() if isinstance(e, bytes) else str(e) for e in pipe.execute() if e is not None}
    check(encodings == {"intset"}, f"every shard is an intset (found {sorted(encodings)})")  # (few visitors: some none)
    by_keys = usage(conn, [*shard_keys, *figure_keys])
    history = "no history" if yesterday is None else f"{yesterday:,} yesterday"
    report(
        f"sharded intsets (figure {expected:,}: {history})",
        len(numbers),
        by_keys,
        used_memory(conn) - base,
        len(shard_keys) + 2,
    )
    print(f"    shard encodings {sorted(encodings)}, loaded in {took:.1f} s")
    return by_keys


def reference_sharded(conn: redis.Redis, numbers: list[int]) -> int:
    """The reference design (seed 002's ``count_visit``, no history: its expected figure 2**21 for
    1,000,000 visitors): each id SADDed to ``shard_key(day, 'x' + id, expected, 512)``, the day's
    count INCRed for each new one (here once, by the number added: the same key). Returns its bytes."""
    from bench.seed_tasks import DAILY_EXPECTED, SHARD_SIZE, shard_key

    conn.flushdb()
    base_key = "unique:bench-day"
    expected = 2 ** int(math.ceil(math.log(DAILY_EXPECTED * 1.5, 2)))
    conn.set(base_key + ":expected", expected)
    base = used_memory(conn)
    shards: set[str] = set()
    added = 0
    for start in range(0, len(numbers), BATCH):
        pipe = conn.pipeline(transaction=False)
        for number in numbers[start : start + BATCH]:
            shard = shard_key(base_key, "x" + str(number), expected, SHARD_SIZE)
            shards.add(shard)
            pipe.sadd(shard, number)
        added += sum(pipe.execute())
    conn.incrby(base_key, added)
    pipe = conn.pipeline(transaction=False)
    for key in shards:
        pipe.scard(key)
        pipe.object("encoding", key)
    replies = pipe.execute()
    check(sum(replies[0::2]) == added == len(set(numbers)), "the reference's shards hold every distinct id once")
    encodings = {e.decode() if isinstance(e, bytes) else str(e) for e in replies[1::2]}
    check(encodings == {"intset"}, f"the reference's shards are intsets (found {sorted(encodings)})")
    by_keys = usage(conn, [*shards, base_key, base_key + ":expected"])
    report(
        f"the reference design (seed 002): sharded intsets (figure {expected:,}, no history)",
        len(numbers),
        by_keys,
        used_memory(conn) - base,
        len(shards) + 2,
    )
    return by_keys


def plain_set(conn: redis.Redis, numbers: list[int]) -> None:
    conn.flushdb()
    base = used_memory(conn)
    for start in range(0, len(numbers), BATCH):
        conn.sadd("bench:plain", *numbers[start : start + BATCH])
    check(conn.scard("bench:plain") == len(set(numbers)), "the plain SET holds every distinct id")
    report(
        "for scale: one plain SET of the same integer ids (what the sharding avoids)",
        len(numbers),
        usage(conn, ["bench:plain"]),
        used_memory(conn) - base,
        1,
    )


def one_hll(conn: redis.Redis, numbers: list[int]) -> None:
    conn.flushdb()
    base = used_memory(conn)
    for start in range(0, len(numbers), BATCH):
        conn.pfadd("bench:hll", *numbers[start : start + BATCH])
    estimate = conn.pfcount("bench:hll")
    distinct = len(set(numbers))
    check(
        abs(estimate - distinct) <= 0.05 * distinct,
        f"the HyperLogLog's estimate {estimate:,} within 5% of {distinct:,}",
    )
    report(
        f"for scale: one HyperLogLog (PFCOUNT {estimate:,})",
        len(numbers),
        usage(conn, ["bench:hll"]),
        used_memory(conn) - base,
        1,
    )


def all_time_site(conn: redis.Redis, n: int) -> None:
    """``sitestats``' all-time exact UV: every visitor id ever seen, in SITE_SHARDS plain SETs."""
    from counters_tasks import sitestats
    from counters_tasks.core.days import today
    from counters_tasks.store import keys
    from counters_tasks.store.scripts import execute_in_order

    conn.flushdb()
    day = today()
    rng = random.Random(3)
    base = used_memory(conn)
    for start in range(0, n, BATCH):
        views = [sitestats.SiteView(str(rng.getrandbits(64) - 2**63), "/", day) for _ in range(min(BATCH, n - start))]
        execute_in_order(conn, lambda pipe, v=views: sitestats.queue_views(conn, pipe, v, None))
    with keys.bound(conn):
        shard_sets = [site_all.site_all_visitors(s, "exact") for s in range(site_all.SITE_SHARDS)]
        path_hash = [page_all.path_totals("/")]
    report("all-time exact site UV (16 plain SETs)", n, usage(conn, shard_sets), None, len(shard_sets))
    report("the same visitors in one path's all-time HASH", n, usage(conn, path_hash), None, 1)
    print(
        f"    (INFO delta of that whole load, the day's and the path's sets included: "
        f"{(used_memory(conn) - base) / 1e6:.1f} MB; site_visit_info: {sitestats.site_visit_info(conn)})"
    )


def run(url: str, n: int, all_time: bool) -> None:
    conn = redis.Redis.from_url(url)
    print(
        f"redis {conn.info('server')['redis_version']}, set-max-intset-entries "
        f"{conn.config_get('set-max-intset-entries')['set-max-intset-entries']}; {n:,} distinct visitors"
    )
    from counters_tasks import uniques

    numbers = [uniques.session_number(s) for s in session_ids(n)]
    started = time.perf_counter()
    reference = reference_sharded(conn, numbers)
    ours = sharded(conn, numbers, None)
    print(f"    against the reference design: {ours / reference:.2f}x its bytes (MEMORY USAGE)")
    ours = sharded(conn, numbers, n)
    print(f"    against the reference design: {ours / reference:.2f}x its bytes (MEMORY USAGE)")
    plain_set(conn, numbers)
    one_hll(conn, numbers)
    if all_time:
        all_time_site(conn, n)
    conn.flushdb()
    print(f"done in {time.perf_counter() - started:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="Redis to use (its database is flushed!); default: a private redis-server")
    parser.add_argument("--visitors", type=int, default=1_000_000)
    parser.add_argument("--no-all-time", action="store_true", help="skip the all-time site UV measurement")
    options = parser.parse_args()
    os.environ.setdefault("COUNTERS_SECRET", "bench-secret")
    if options.url:
        os.environ["COUNTERS_REDIS_URL"] = options.url
        reset_settings()
        run(options.url, options.visitors, not options.no_all_time)
        return
    with tempfile.TemporaryDirectory() as tmp, RedisServer(tmp) as server:
        os.environ["COUNTERS_REDIS_URL"] = server.url
        reset_settings()
        run(server.url, options.visitors, not options.no_all_time)


if __name__ == "__main__":
    main()
