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

from .. import refusals, sitestats, skips
from ..app import app as default_app
from ..core.days import local_day
from ..core.settings import get_settings, is_redis_url, redis_py_url
from ..core.sites import DEFAULT_SITE, check_site, site_names, zone_of
from ..store import deployment, server
from ..store.client import RedisClient, as_str, get_redis
from ..worker import dead_letters
from ..worker.maintenance import BEAT_STARTED, HEARTBEAT_JOB, job_status

QUEUES = ("visits", "maintenance")
JOBS = ("clean_counters", "rotate_rankings", "precompute_expected", "expire_dead_letters", "make_day_tops")
BEAT_JOB = HEARTBEAT_JOB
"""The job beat runs every minute: its last start, or beat's own start, tells whether beat is alive."""
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


def beat_status(conn: RedisClient, job: dict[str, Any], now: float, max_age: float) -> dict[str, Any]:
    """Beat is alive when its every-minute job (``job``: its ``_job`` report) started within
    ``max_age`` seconds, or beat itself started within them (``worker.maintenance.note_beat_started``):
    just after a start the job has not run yet (up to a minute), and that is no sign of a dead beat.
    A beat that started longer ago and whose job has not run since is reported dead, as one whose
    job stopped running."""
    raw = job_status(conn, BEAT_JOB).get(BEAT_STARTED)
    started_age = None if raw is None else round(now - float(raw), 3)
    ages = [age for age in (job["age_seconds"], started_age) if age is not None]
    return {
        "ok": bool(ages) and min(ages) <= max_age,
        "last_run_age_seconds": job["age_seconds"],
        "started_age_seconds": started_age,
        "max_age_seconds": max_age,
    }


MOSTLY_SKIPPED = 0.5
"""Share of a day's requests skipped (not page views) above which ``health`` warns."""


def traffic(conn: RedisClient, now: float) -> dict[str, Any]:
    """Today's page views and skipped requests of each site, with a warning for each site where
    most of today's requests were not page views: a site whose visitors come through a script,
    a proxy that drops the User-Agent or a monitor would otherwise read low figures with nothing
    saying why. A warning, not a failure: ``ok`` stays true."""
    sites, warnings, names = {}, [], site_names()
    for site in names:
        day = local_day(now, zone_of(check_site(site)))
        pv = sitestats.site_visit_info(conn, day, site=site).pv
        skipped = skips.day_counts(conn, day, day, site)[day]
        total = sum(skipped.values())
        sites[site] = {"day": day.isoformat(), "pv": pv, "skipped": skipped, "skipped_total": total}
        if total and total > MOSTLY_SKIPPED * (total + pv):
            reasons = ", ".join(f"{reason} {n}" for reason, n in sorted(skipped.items(), key=lambda kv: -kv[1]))
            where = "" if names == [DEFAULT_SITE] else f" of site {site}"
            warnings.append(
                f"{total} of today's {total + pv} requests{where} were not counted as page views "
                f"({reasons}): requests without a browser User-Agent (scripts, monitors) are "
                f"crawler; see README, 'What is counted'"
            )
    return {"ok": True, "sites": sites, "warnings": warnings}


def _server_report(conn: RedisClient, role: str) -> dict[str, Any]:
    """``store.server.report``; a server whose INFO cannot be read (an ACL without it) gets a warning."""
    try:
        return server.report(conn, role)
    except redis.RedisError as exc:
        return {
            "ok": True,
            "errors": [],
            "servers": [],
            "warnings": [f"{role}: its version and memory policy could not be read ({type(exc).__name__}: {exc})"],
        }


def _add_server(into: dict[str, Any], more: dict[str, Any]) -> None:
    """Merge a server report (``store.server.report``) into another; a server already in it
    (the broker in another database of the counters' Redis) is not reported twice."""
    seen = {found["where"] for found in into["servers"]}
    if more["servers"] and all(found["where"] in seen for found in more["servers"]):
        return
    into["ok"] = into["ok"] and more["ok"]
    for part in ("errors", "warnings", "servers"):
        into[part] = into[part] + more[part]


def check(
    conn: RedisClient,
    broker: Any = None,
    app: Any = None,
    ping_timeout: float = 1.0,
    beat_max_age: float = 180.0,
    now: float | None = None,
    other_broker: bool = False,
) -> dict[str, Any]:
    """The health report: ``ok`` is true when Redis answers, is new enough and never evicts
    (``store.server``; the broker too when it is a Redis), holds this package's key layout and
    lost no data within a day (``store.deployment``), a worker answers a ping and beat's
    every-minute job, or beat itself, started within ``beat_max_age`` seconds (``beat_status``).
    ``broker`` (a Redis client of the broker) and ``app`` (the Celery app) are optional: the checks
    that need them are skipped and count as failed when missing. ``other_broker``: the broker is not a Redis (RabbitMQ...):
    the queues are read through the app's kombu connection and the dead letters from ``conn``."""
    now = time.time() if now is None else now
    # whether the who-visits tables are kept, as this process's settings say (not a check: a
    # deployment may leave them off); said so that empty or partial tables are explained
    report: dict[str, Any] = {"checked_at": now, "who_visits": sitestats.client_tables_status()}
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
        # today's figures, read only when this process can see them (the data check says why not)
        report["traffic"] = (
            traffic(conn, now) if report["deployment"]["visible"] else {"ok": True, "sites": {}, "warnings": []}
        )
        report["beat"] = beat_status(conn, report["jobs"][BEAT_JOB], now, beat_max_age)
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
        report["workers"] = {
            "ok": False,
            "names": [],
            "error": "the broker is not reachable" if app else "no app given",
        }
    report["ok"] = all(report[part]["ok"] for part in ("redis", "servers", "deployment", "beat", "queues", "workers"))
    return report


def broker_client(url: str, timeout: float = 2.0) -> Any:
    """A Redis client of the broker (for queue lengths), with short timeouts and no retries: a
    report says at once that the broker is away (redis-py's default retries with backoff took
    seconds: 10 tries in redis-py 8, 3 tries of up to 1, 2 and 4 s in 6.4)."""
    return redis.Redis.from_url(
        redis_py_url(url), socket_timeout=timeout, socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0)
    )


def report(ping_timeout: float = 1.0, beat_max_age: float = 180.0) -> dict[str, Any]:
    """The health report of the configured deployment: its Redis, broker and workers (``check``),
    whatever the broker (a Redis, or RabbitMQ and the others kombu reaches)."""
    url = get_settings().broker_url
    if not is_redis_url(url):
        return check(
            get_redis(), None, default_app, ping_timeout=ping_timeout, beat_max_age=beat_max_age, other_broker=True
        )
    broker = broker_client(url)
    try:
        return check(get_redis(), broker, default_app, ping_timeout=ping_timeout, beat_max_age=beat_max_age)
    finally:
        broker.close()
