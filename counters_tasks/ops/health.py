"""Operator health checks: Redis, workers, beat, queue lengths and the beat jobs' last runs.

Used by ``counters-tasks health`` and the dashboard's health panel. Every check has a timeout,
so a dead broker or Redis makes the report unhealthy instead of hanging it.
"""

from __future__ import annotations

import time
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .. import refusals
from ..app import app as default_app
from ..core.settings import get_settings, is_redis_url
from ..store import deployment, server
from ..store.client import RedisClient, as_str, get_redis
from ..worker import dead_letters
from ..worker.maintenance import job_status

QUEUES = ("visits", "maintenance")
JOBS = ("clean_counters", "rotate_rankings", "precompute_expected", "expire_dead_letters")
BEAT_JOB = "clean_counters"
"""The job beat runs every minute: its last start tells whether beat is alive."""
PRIORITY_SEPARATOR = "\x06\x16"
PRIORITY_STEPS = (3, 6, 9)  # kombu's Redis transport keeps priorities 1-9 in extra lists


def queue_lists(queue: str) -> list[str]:
    """The Redis lists of a Celery queue on a Redis broker: its own, then one per priority step."""
    return [queue, *(f"{queue}{PRIORITY_SEPARATOR}{step}" for step in PRIORITY_STEPS)]


def amqp_queue_lengths(app: Any) -> dict[str, int]:
    """Messages ready in each queue on a broker that is not a Redis (RabbitMQ...), through kombu:
    a passive declare, which changes nothing; a queue never declared holds none. Messages taken
    by a worker and not yet acknowledged are not counted (AMQP reports them apart)."""
    lengths = {}
    with app.connection_for_write() as connection:
        for queue in QUEUES:
            channel = connection.channel()  # a failed passive declare closes its channel
            try:
                lengths[queue] = channel.queue_declare(queue=queue, passive=True).message_count
            except connection.channel_errors:
                lengths[queue] = 0
            finally:
                channel.close()
    return lengths


def queue_length(broker: Any, queue: str) -> int:
    """Messages waiting in a Celery queue on a Redis broker (every priority list of it)."""
    pipe = broker.pipeline(transaction=False)
    for name in queue_lists(queue):
        pipe.llen(name)
    return sum(int(n) for n in pipe.execute())


def _job(conn: RedisClient, job: str, now: float) -> dict[str, Any]:
    raw = job_status(conn, job)
    started = float(raw["last_started"]) if "last_started" in raw else None
    return {
        "last_started": started,
        "age_seconds": None if started is None else round(now - started, 3),
        "last_duration": float(raw["last_duration"]) if "last_duration" in raw else None,
        "last_result": raw.get("last_result"),
        "skipped": int(raw.get("skipped", 0)),
    }


def _server_report(conn: RedisClient, role: str) -> dict[str, Any]:
    """``store.server.report``; a server whose INFO cannot be read (an ACL without it) gets a warning."""
    try:
        return server.report(conn, role)
    except redis.RedisError as exc:
        return {"ok": True, "errors": [], "servers": [],
                "warnings": [f"{role}: its version and memory policy could not be read ({type(exc).__name__}: {exc})"]}


def _add_server(into: dict[str, Any], more: dict[str, Any]) -> None:
    """Merge a server report (``store.server.report``) into another; a server already in it
    (the broker in another database of the counters' Redis) is not reported twice."""
    seen = {found["where"] for found in into["servers"]}
    if more["servers"] and all(found["where"] in seen for found in more["servers"]):
        return
    into["ok"] = into["ok"] and more["ok"]
    for part in ("errors", "warnings", "servers"):
        into[part] = into[part] + more[part]


def check(conn: RedisClient, broker: Any = None, app: Any = None, ping_timeout: float = 1.0,
          beat_max_age: float = 180.0, now: float | None = None, other_broker: bool = False) -> dict[str, Any]:
    """The health report: ``ok`` is true when Redis answers, is new enough and never evicts
    (``store.server``; the broker too when it is a Redis), holds this package's key layout and
    lost no data within a day (``store.deployment``), a worker answers a ping and beat's
    every-minute job started within ``beat_max_age`` seconds. ``broker`` (a Redis client of the
    broker) and ``app`` (the Celery app) are optional: the checks that need them are skipped
    and count as failed when missing. ``other_broker``: the broker is not a Redis (RabbitMQ...):
    the queues are read through the app's kombu connection and the dead letters from ``conn``."""
    now = time.time() if now is None else now
    report: dict[str, Any] = {"checked_at": now}
    started = time.perf_counter()
    try:
        conn.ping()
        report["redis"] = {"ok": True, "latency_ms": round((time.perf_counter() - started) * 1000, 3)}
    except Exception as exc:  # any failure to answer is "unhealthy", reported as text
        report["redis"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    if report["redis"]["ok"]:
        report["deployment"] = deployment.status(conn, now)
        report["servers"] = _server_report(conn, "the counters' Redis")
        report["jobs"] = {job: _job(conn, job, now) for job in JOBS}
        report["refused"] = refusals.counts(conn)
        age = report["jobs"][BEAT_JOB]["age_seconds"]
        report["beat"] = {"ok": age is not None and age <= beat_max_age, "last_run_age_seconds": age,
                          "max_age_seconds": beat_max_age}
    else:
        report["deployment"] = {"ok": False, "error": "Redis is not reachable"}
        report["servers"] = {"ok": False, "errors": ["Redis is not reachable"], "warnings": [], "servers": []}
        report["jobs"] = {}
        report["refused"] = {}
        report["beat"] = {"ok": False, "error": "Redis is not reachable"}
    if broker is not None:
        try:
            report["queues"] = {"ok": True, **{q: queue_length(broker, q) for q in QUEUES}}
            report["dead_letters"] = dead_letters.summary(broker)
        except Exception as exc:
            report["queues"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        if report["queues"]["ok"]:
            _add_server(report["servers"], _server_report(broker, "the broker's Redis"))
    elif other_broker and app is not None:
        try:
            report["queues"] = {"ok": True, **amqp_queue_lengths(app)}
            report["dead_letters"] = dead_letters.summary(conn)
        except Exception as exc:
            report["queues"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    else:
        report["queues"] = {"ok": False, "error": "no broker given"}
    if app is not None and report["queues"]["ok"]:
        try:
            # a connection of its own, not the app's producer pool: a check can never wait on
            # (or exhaust) the pool that other callers use
            with app.connection_for_write() as connection:
                replies = app.control.ping(timeout=ping_timeout, connection=connection) or []
            names = sorted(as_str(name) for reply in replies for name in reply)
            report["workers"] = {"ok": bool(names), "names": names}
        except Exception as exc:
            report["workers"] = {"ok": False, "names": [], "error": f"{type(exc).__name__}: {exc}"}
    else:
        report["workers"] = {"ok": False, "names": [], "error": "the broker is not reachable" if app else "no app given"}
    report["ok"] = all(report[part]["ok"] for part in ("redis", "servers", "deployment", "beat", "queues", "workers"))
    return report


def broker_client(url: str, timeout: float = 2.0) -> Any:
    """A Redis client of the broker (for queue lengths), with short timeouts and no retries: a
    report says at once that the broker is away (redis-py's default retries with backoff took
    seconds: 10 tries in redis-py 8, 3 tries of up to 1, 2 and 4 s in 6.4)."""
    return redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout,
                                retry=Retry(NoBackoff(), 0))


def report(ping_timeout: float = 1.0, beat_max_age: float = 180.0) -> dict[str, Any]:
    """The health report of the configured deployment: its Redis, broker and workers (``check``),
    whatever the broker (a Redis, or RabbitMQ and the others kombu reaches)."""
    url = get_settings().broker_url
    if not is_redis_url(url):
        return check(get_redis(), None, default_app, ping_timeout=ping_timeout, beat_max_age=beat_max_age,
                     other_broker=True)
    broker = broker_client(url)
    try:
        return check(get_redis(), broker, default_app, ping_timeout=ping_timeout, beat_max_age=beat_max_age)
    finally:
        broker.close()
