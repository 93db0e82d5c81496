"""The fault tests' helpers: broker idleness, and the exact model of a burst of visits (one local
day) with the messages that carry it and the figures read back."""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import date

import redis

from counters_tasks import counters, sitestats, tasks, uniques
from counters_tasks.core.days import local_day


def broker_idle(broker: redis.Redis, queues: tuple[str, ...] = ("visits",)) -> bool:
    """Nothing waiting in the queues and nothing delivered but unacknowledged."""
    return sum(broker.llen(q) for q in queues) == 0 and broker.zcard("unacked_index") == 0


def wait_idle(
    broker: redis.Redis, timeout: float = 60.0, settle: float = 1.0, queues: tuple[str, ...] = ("visits",)
) -> None:
    """Wait until the broker has stayed idle for ``settle`` seconds (a message being moved from
    the queue to the unacked index is briefly in neither)."""
    deadline = time.monotonic() + timeout
    idle_since = None
    while time.monotonic() < deadline:
        if broker_idle(broker, queues):
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since >= settle:
                return
        else:
            idle_since = None
        time.sleep(0.05)
    raise AssertionError(f"the broker is still busy after {timeout}s")


def drain_and_stop(env: dict[str, str], worker, timeout: float = 30.0) -> None:
    """Wait until the broker of ``env``'s settings is idle (every message taken and acknowledged,
    so applied), then stop ``worker``, which must exit cleanly."""
    from counters_tasks.core.settings import load_settings

    broker = redis.Redis.from_url(load_settings(env).broker_url)
    try:
        wait_idle(broker, timeout=timeout)
    finally:
        broker.close()
        assert worker.stop() == 0, worker.output()[-3000:]


@dataclass
class VisitModel:
    """The exact answer every total must give for a list of visits (one local day)."""

    visits: list[tuple[str, str, str | None, float]] = field(default_factory=list)

    @classmethod
    def random(
        cls, n: int, ts: float, visitors: int = 300, paths: int = 200, sessions: int = 250, seed: int = 6
    ) -> VisitModel:
        rnd = random.Random(seed)
        ips = [f"10.{i // 65536}.{i // 256 % 256}.{i % 256}" for i in range(1, visitors + 1)]
        pages = [f"/page/{j}" for j in range(paths)]
        ids = [str(uuid.UUID(int=rnd.getrandbits(128))) for _ in range(sessions)]
        return cls([(rnd.choice(ips), rnd.choice(pages), rnd.choice(ids), ts) for _ in range(n)])

    def expected(self) -> dict:
        ts = self.visits[0][3]
        day = local_day(ts)
        pv_path: Counter = Counter()
        uv_path: dict[str, set] = defaultdict(set)
        for ip, path, _sid, _ts in self.visits:
            pv_path[path] += 1
            uv_path[path].add(ip)
        n = len(self.visits)
        site = (n, len({v[0] for v in self.visits}))
        out = {
            "site_day": site,
            "site_all": site,
            "paths": {p: ((pv_path[p], len(uv_path[p])), (pv_path[p], len(uv_path[p]))) for p in sorted(pv_path)},
            "uniques": len({uuid.UUID(v[2]).hex[:15] for v in self.visits if v[2]}),
            "hits": [(counters.bucket_start(ts, p), n) for p in counters.PRECISIONS],
            "hits_path": {p: [(counters.bucket_start(ts, 60), pv_path[p])] for p in sorted(pv_path)},
        }
        out["day"] = day.isoformat()
        return out


BATCH = 100


def messages(model: VisitModel, sending: str) -> list[tuple]:
    """The task and arguments of every message: one ``record_visit`` a visit, or ``record_visits``
    batches of BATCH visits (each batch id deduplicates its chunks)."""
    if sending == "per-visit":
        return [(tasks.record_visit, visit) for visit in model.visits]
    dicts = [{"ip": ip, "path": path, "session_id": sid, "ts": ts} for ip, path, sid, ts in model.visits]
    return [(tasks.record_visits, (dicts[i : i + BATCH],)) for i in range(0, len(dicts), BATCH)]


def observed(conn, model: VisitModel) -> dict:
    """The same figures read back through the public functions."""
    ts = model.visits[0][3]
    return {**figures_of(conn, ts, sorted({v[1] for v in model.visits})), "day": local_day(ts).isoformat()}


def figures_of(conn, ts: float, paths: list[str]) -> dict:
    """The figures of the day of ``ts`` and of ``paths`` (each path's of that day and all-time),
    the daily uniques and the ``hits`` counters, read through the public functions."""
    day: date = local_day(ts)
    return {
        "site_day": tuple(sitestats.site_visit_info(conn, day)[1:]),
        "site_all": tuple(sitestats.site_visit_info(conn)[1:]),
        "paths": {
            p: (tuple(sitestats.site_visit_info(conn, day, p)[1:]), tuple(sitestats.site_visit_info(conn, None, p)[1:]))
            for p in paths
        },
        "uniques": uniques.unique_visitors(conn, day),
        "hits": [pair for p in counters.PRECISIONS for pair in counters.get_counter(conn, "hits", p, now=ts)],
        "hits_path": {p: counters.get_counter(conn, f"hits:{p}", 60, now=ts) for p in paths},
    }


def site_pv(conn, ts: float) -> int:
    return sitestats.site_visit_info(conn, local_day(ts)).pv
