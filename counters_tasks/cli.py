"""The ``counters-tasks`` command: ``run`` (the local stack) and ``demo``."""

from __future__ import annotations

import argparse
import random
import sys
import time

from . import __version__


def progress(done: int, total: int, label: str, width: int = 40) -> None:
    filled = int(width * done / total) if total else width
    sys.stderr.write(f"\r{label:<10} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def cmd_run(args: argparse.Namespace) -> int:
    from .localstack import Stack

    stack = Stack(flower=not args.no_flower, concurrency=args.concurrency)
    try:
        stack.start()
        stack.wait_worker_ready()
    except BaseException:
        stack.stop()
        raise
    return stack.run_forever()


DEMO_PATHS = ["/", "/about", "/blog", "/blog/redis-counters", "/pricing", "/docs", "/docs/api", "/contact"]


def _total(conn, name: str) -> int:
    from .counters import get_counter

    return sum(total for _bucket, total in get_counter(conn, name, 86400))


def cmd_demo(args: argparse.Namespace) -> int:
    from . import counters
    from .localstack import Stack
    from .redis_layer import get_redis

    stack = Stack(flower=False, concurrency=args.concurrency)
    try:
        stack.start()
        stack.wait_worker_ready()
        from . import tasks

        conn = get_redis()
        rng = random.Random(args.seed)
        names = ["demo:hits"] + [f"demo:hits:{p}" for p in DEMO_PATHS]
        before = {name: _total(conn, name) for name in names}
        expected = dict.fromkeys(names, 0)
        now = time.time()
        for i in range(args.visits):
            path = rng.choices(DEMO_PATHS, weights=[8, 2, 4, 3, 2, 3, 1, 1])[0]
            ts = now - rng.uniform(0, 600)  # visits over the last ten minutes
            for name in ("demo:hits", f"demo:hits:{path}"):
                tasks.update_counter.delay(name, 1, ts)
                expected[name] += 1
            if i % 200 == 0 or i == args.visits - 1:
                progress(i + 1, args.visits, "sent")
        deadline = time.monotonic() + args.timeout
        while True:
            applied = _total(conn, "demo:hits") - before["demo:hits"]
            progress(min(applied, args.visits), args.visits, "counted")
            if applied >= args.visits:
                break
            stack.check_alive()
            if time.monotonic() > deadline:
                print(f"\ndemo: only {applied} of {args.visits} visits counted after {args.timeout}s", file=sys.stderr)
                return 1
            time.sleep(0.2)
        print()
        print(f"Counters after {args.visits} simulated visits (delta = counted by this demo):")
        print(f"{'counter':<28}{'delta':>8}{'all kept':>10}   last 10 minutes per minute")
        exact = True
        for name in names:
            total = _total(conn, name)
            delta = total - before[name]
            exact &= delta == expected[name]
            series = [t for _b, t in counters.get_counter(conn, name, 60)][-10:]
            print(f"{name:<28}{delta:>8}{total:>10}   {' '.join(map(str, series))}")
        print(f"known counters: {len(counters.known_counters(conn))}; exact: {'yes' if exact else 'NO'}")
        return 0 if exact else 1
    finally:
        stack.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="counters-tasks", description=__doc__)
    parser.add_argument("--version", action="version", version=__version__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="the local stack: Redis (if none configured), worker, beat, Flower; Ctrl-C stops")
    run.add_argument("--concurrency", type=int, default=2)
    run.add_argument("--no-flower", action="store_true")
    run.set_defaults(func=cmd_run)
    demo = sub.add_parser("demo", help="the local stack, a burst of simulated visits, a report, then exit")
    demo.add_argument("--visits", type=int, default=5000)
    demo.add_argument("--concurrency", type=int, default=2)
    demo.add_argument("--seed", type=int, default=1)
    demo.add_argument("--timeout", type=float, default=300)
    demo.set_defaults(func=cmd_demo)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
