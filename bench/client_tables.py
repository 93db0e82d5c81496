"""What the who-visits tables (``COUNTERS_CLIENT_TABLES``, on by default) cost a visit, each
process measured in one process against the same code without them, the two alternated so that
the machine's other load falls on both alike (docs/figures.md, "Issue 40"):

- the producer: ``VisitRecorder.record()`` of every visit with its User-Agent and
  Accept-Language, and a ranking bump of its page, as ``bench.ingest``'s (3) sends them, against
  the same visits sent without those headers (an app that sends none); the broker stubbed, each
  batch encoded as it would be sent (its bytes a visit printed): CPU a visit of this process;
- the worker and the counters Redis: the same packed visits applied (``visits.apply_visits``, in
  chunks as a worker's batches) with the tables on and off, each on a flushed server: this
  process's CPU a visit (what a worker's pool process spends applying them) and the server's
  (INFO cpu). The figures read back are checked: every page view counted, the browser table
  holding every view with the tables on, none with them off.

    python -m bench.client_tables [--visits 30000] [--shape zipf] [--shape log2015] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench._common import bench_redis, client, redis_cpu  # noqa: E402
from bench.traffic import SHAPES, headers_of  # noqa: E402


def producer_cpu(stream: list, headers: dict[str, tuple[str, str]] | None) -> tuple[float, float]:
    """CPU a visit of ``record()`` + ``incr_ranking()`` of ``stream`` through a ``VisitRecorder``
    whose sends are encoded but not published, and the bytes a visit they make."""
    from kombu.utils import json as kombu_json

    from counters_tasks.app import package_app
    from counters_tasks.recorder import VisitRecorder

    app = package_app()
    sent: list[int] = []
    real_send = app.send_task
    app.send_task = lambda name, args=None, **_options: sent.append(len(kombu_json.dumps(args, separators=(",", ":"))))
    try:
        recorder = VisitRecorder(
            app=app, max_batch=1000, max_delay=0.1, max_buffer=10 * len(stream), flush_on_sigterm=False
        )
        started = time.process_time()
        for ip, path, session, ts in stream:
            agent, language = headers[ip] if headers else (None, None)
            recorder.record(ip, path, session, ts, user_agent=agent, language=language)
            recorder.incr_ranking("pages", path, 1, ts)
        assert recorder.flush(timeout=120), recorder.stats()
        spent = time.process_time() - started
        assert recorder.stats()["sent"] == 2 * len(stream), recorder.stats()  # a visit and its bump
        recorder.close()
    finally:
        app.send_task = real_send
    return spent / len(stream) * 1e6, sum(sent) / len(stream)


def apply_cpu(conn: Any, packed: list[dict], label: str) -> tuple[float, float]:
    """This process's and the counters Redis's CPU a visit applying ``packed`` in worker-sized chunks."""
    from counters_tasks import visits

    server_before, started = redis_cpu(conn), time.process_time()
    for first in range(0, len(packed), 500):
        visits.apply_visits(conn, packed[first : first + 500], message_id=f"{label}-{first}")
    return (time.process_time() - started) / len(packed) * 1e6, (redis_cpu(conn) - server_before) / len(packed) * 1e6


def figures(conn: Any) -> tuple[int, int]:
    """The site's page views of all time, and those the browser tables of the last days hold."""
    from counters_tasks import sitestats
    from counters_tasks.core import days

    today = days.today()
    span_start = today.fromordinal(today.toordinal() - 3)  # (the shapes' visits are of the last hours)
    held = sum(row.pv for row in sitestats.top_clients(conn, span_start, today, "browser", limit=1000))
    return sitestats.site_visit_info(conn).pv, held


def set_tables(on: bool) -> None:
    from counters_tasks.core.settings import reset_settings

    os.environ["COUNTERS_CLIENT_TABLES"] = "on" if on else "off"
    reset_settings()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--visits", type=int, default=30_000)
    parser.add_argument("--shape", action="append", choices=sorted(SHAPES))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("COUNTERS_SECRET", "bench-secret")
    with bench_redis() as url:
        os.environ["COUNTERS_REDIS_URL"] = url
        conn = client(url)
        for shape in args.shape or ["zipf", "log2015"]:
            stream = SHAPES[shape](args.visits, 1)
            headers = {ip: headers_of(ip) for ip, _p, _s, _t in stream}
            from counters_tasks.core.clients import client_of
            from counters_tasks.visits import pack_visits

            client_of(next(iter(headers.values()))[0])  # ua-parser loaded once a process, not a visit's cost
            packed = pack_visits(
                [
                    {
                        "ip": ip,
                        "path": p,
                        "session_id": s,
                        "ts": ts,
                        "user_agent": headers[ip][0],
                        "language": headers[ip][1],
                    }
                    for ip, p, s, ts in stream
                ]
            )
            seen: dict[str, list[tuple[float, ...]]] = {"off": [], "on": []}
            for n in range(args.rounds):
                for mode in ("off", "on"):
                    set_tables(mode == "on")
                    producer, sent_bytes = producer_cpu(stream, headers if mode == "on" else None)
                    pv, held = figures(conn)  # (each round adds to the last: flushing would look like a data loss)
                    worker, server = apply_cpu(conn, [dict(item) for item in packed], f"{shape}-{mode}-{n}")
                    pv_now, held_now = figures(conn)
                    assert pv_now - pv == len(stream), (pv_now, pv)  # every view counted
                    assert held_now - held == (len(stream) if mode == "on" else 0), (held_now, held, mode)
                    seen[mode].append((producer, sent_bytes, worker, server))
            print(
                f"== {shape}: {len(stream):,} visits, medians of {args.rounds} alternated rounds "
                "(producer: headers sent or not; worker and Redis: the tables on or off)"
            )
            names = (
                "producer CPU a visit (us)",
                "bytes a visit sent",
                "worker CPU a visit, applying (us)",
                "counters Redis CPU a visit (us)",
            )
            for k, name in enumerate(names):
                off = statistics.median(figures[k] for figures in seen["off"])
                on = statistics.median(figures[k] for figures in seen["on"])
                print(f"    {name:<36} off {off:8.1f}   on {on:8.1f}   {on / off - 1:+.0%}")
    set_tables(True)
    print("client tables: every count checked")


if __name__ == "__main__":
    main()
