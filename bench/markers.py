"""What the dedupe markers cost: bytes per marker and per visit, measured on a real Redis.

The same visits are recorded twice on an empty database, once without message ids (no markers)
and once with a fresh task id (a UUID, as Celery makes) per visit; the difference in
``used_memory`` is the markers' cost. Also measured: ``record_visits`` batches (one marker per
slot per chunk of visits, not per visit).

    python -m bench.markers [--visits N]
"""

from __future__ import annotations

import argparse
import time
import uuid

from bench._common import bench_redis, client  # noqa: E402
from counters_tasks import sitestats, visits  # noqa: E402
from counters_tasks.store import keys


def used(conn) -> int:
    return int(conn.info("memory")["used_memory"])


def markers(conn) -> list[bytes]:
    return [k for k in conn.scan_iter(match=f"{keys.prefix()}*:seen:*", count=10_000)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--visits", type=int, default=20_000)
    n = parser.parse_args().visits
    now = float(int(time.time()))
    batch = [
        {
            "ip": f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}",
            "path": f"/page/{i % 200}",
            "session_id": str(uuid.UUID(int=i + 1)),
            "ts": now,
        }
        for i in range(n)
    ]
    with bench_redis() as url:
        conn = client(url)
        results = {}
        for label, ids in (("none", None), ("per visit", "task"), ("batches", "batch")):
            conn.flushdb()
            conn.memory_purge()
            before = used(conn)
            if ids == "batch":
                for first in range(0, n, 1000):
                    visits.apply_visits(conn, batch[first : first + 1000], message_id=str(uuid.uuid4()))
            else:
                for v in batch:
                    visits.apply_visit(
                        conn,
                        v["ip"],
                        v["path"],
                        v["session_id"],
                        v["ts"],
                        message_id=None if ids is None else str(uuid.uuid4()),
                    )
            assert sitestats.site_visit_info(conn).pv == n, f"{label}: a visit was not counted"
            found = markers(conn)
            pipe = conn.pipeline(transaction=False)
            for key in found:
                pipe.memory_usage(key, samples=0)
            usage = sum(pipe.execute()) if found else 0
            results[label] = (used(conn) - before, len(found), usage)
            print(
                f"{label:<10} used_memory +{results[label][0]:>12,} B   markers {len(found):>8,}   "
                f"their MEMORY USAGE {usage:,} B"
            )
        assert results["none"][1] == 0 and results["per visit"][1] >= n, "markers: none without ids, one a visit"
        base = results["none"][0]
        for label in ("per visit", "batches"):
            extra, count, usage = results[label][0] - base, results[label][1], results[label][2]
            print(
                f"{label}: {count / n:.3f} markers a visit; MEMORY USAGE {usage / max(count, 1):.0f} B a marker, "
                f"{usage / n:.1f} B a visit; used_memory delta {extra / max(count, 1):.0f} B a marker "
                f"(with the expiry entry; noisy for few markers)"
            )


if __name__ == "__main__":
    main()
