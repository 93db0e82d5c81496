"""Fault tests: real ``redis-server`` and ``celery worker`` processes, faults injected for real.

Each test gets its own broker server (so the queue is private and survives a counters outage)
and its own counters server (AOF on, ``appendfsync always``), and points the settings there.
"""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date

import pytest
import redis

from counters_tasks import counters, sitestats, tasks, uniques
from counters_tasks.days import local_day
from counters_tasks.localredis import RedisServer
from counters_tasks.settings import reset_settings


@pytest.fixture(autouse=True)
def app_config_from_the_session(counters_env) -> None:
    """This process's Celery app reads celeryconfig once, and makes its producer pool once from
    ``CELERY_BROKER_URL`` as it is then: let both happen with the session's settings, never with
    a fault test's private servers (later tests publish through the app's pool)."""
    from counters_tasks.app import app

    assert app.conf.broker_url and app.producer_pool


@pytest.fixture
def broker_server(tmp_path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "broker").start()
    yield server
    server.stop()


@pytest.fixture
def counters_server(tmp_path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "counters", appendonly=True, extra_args=["--appendfsync", "always"]).start()
    yield server
    server.stop()


@pytest.fixture
def fault_env(broker_server, counters_server, monkeypatch) -> dict[str, str]:
    """This process's settings point at the private servers; returns the env for workers."""
    env = {"COUNTERS_REDIS_URL": counters_server.url, "CELERY_BROKER_URL": broker_server.url.replace("/0", "/1"),
           "COUNTERS_REDIS_CLUSTER": ""}  # private single servers, also in a cluster run of the suite
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    reset_settings()
    return env


@pytest.fixture
def counters_conn(counters_server) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(counters_server.url, socket_timeout=5)
    yield client
    client.close()


@pytest.fixture
def broker_conn(fault_env) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(fault_env["CELERY_BROKER_URL"], socket_timeout=5)
    yield client
    client.close()


@pytest.fixture
def publisher(fault_env):
    """A producer on the private broker (this process's app may already be bound to another)."""
    from counters_tasks.app import app

    connection = app.connection_for_write(fault_env["CELERY_BROKER_URL"])
    producer = app.amqp.Producer(connection)
    yield producer
    producer.release()
    connection.release()


def broker_idle(broker: redis.Redis, queues: tuple[str, ...] = ("visits",)) -> bool:
    """Nothing waiting in the queues and nothing delivered but unacknowledged."""
    return sum(broker.llen(q) for q in queues) == 0 and broker.zcard("unacked_index") == 0


def wait_idle(broker: redis.Redis, timeout: float = 60.0, settle: float = 1.0, queues: tuple[str, ...] = ("visits",)) -> None:
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


@dataclass
class VisitModel:
    """The exact answer every total must give for a list of visits (one local day)."""

    visits: list[tuple[str, str, str | None, float]] = field(default_factory=list)

    @classmethod
    def random(cls, n: int, ts: float, visitors: int = 300, paths: int = 200, sessions: int = 250,
               seed: int = 6) -> VisitModel:
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
            "hits_path": {p: [(counters.bucket_start(ts, 1), pv_path[p])] for p in sorted(pv_path)},
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
    return [(tasks.record_visits, (dicts[i:i + BATCH],)) for i in range(0, len(dicts), BATCH)]


def observed(conn, model: VisitModel) -> dict:
    """The same figures read back through the public functions."""
    ts = model.visits[0][3]
    day: date = local_day(ts)
    paths = sorted({v[1] for v in model.visits})
    return {
        "site_day": tuple(sitestats.site_visit_info(conn, day)[1:]),
        "site_all": tuple(sitestats.site_visit_info(conn)[1:]),
        "paths": {p: (tuple(sitestats.site_visit_info(conn, day, p)[1:]), tuple(sitestats.site_visit_info(conn, None, p)[1:]))
                  for p in paths},
        "uniques": uniques.unique_visitors(conn, day),
        "hits": [pair for p in counters.PRECISIONS for pair in counters.get_counter(conn, "hits", p, now=ts)],
        "hits_path": {p: counters.get_counter(conn, f"hits:{p}", 1, now=ts) for p in paths},
        "day": day.isoformat(),
    }


def site_pv(conn, ts: float) -> int:
    return sitestats.site_visit_info(conn, local_day(ts)).pv
