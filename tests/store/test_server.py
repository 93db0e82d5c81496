"""The Redis servers people run (``store.server``): an evicting memory policy is loud (worker log,
health, /metrics) unless accepted, and a server older than 6.2 is refused by the worker, naming
both versions. Real servers started here with the settings a managed service or an old distro has."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from counters_tasks.local.redis_server import RedisServer
from counters_tasks.ops.web import create_app
from counters_tasks.store import server
from tests.support.dashboard import TestClient
from tests.support.procs import REPO, celery_env, start_worker
from tests.support.servers import make_client

pytestmark = pytest.mark.server_version

OLD_SERVERS = REPO / ".old-servers"
"""Where ``scripts/old-redis-servers.sh`` (``make test-oldest-redis``) puts Redis 6.0 and 6.2."""


def health(env: dict[str, str]) -> tuple[int, dict]:
    out = subprocess.run(
        [sys.executable, "-m", "counters_tasks.ops.cli", "health", "--json", "--timeout", "3"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return out.returncode, json.loads(out.stdout)


@pytest.fixture(params=["volatile-lru", "allkeys-lru"])
def evicting(request, tmp_path):
    """A Redis with maxmemory 24mb and an evicting policy (the default of several managed services):
    ``(server, policy)``; both policies for the error, one for the warning (a worker start each)."""
    with RedisServer(
        tmp_path / "redis", extra_args=["--maxmemory", "24mb", "--maxmemory-policy", request.param]
    ) as evicting_server:
        yield evicting_server, request.param


@pytest.mark.processes
def test_an_evicting_policy_is_an_error_in_the_worker_log_health_and_metrics(evicting, tmp_path):
    redis_server, policy = evicting
    env = celery_env(redis_server.url)
    worker = start_worker(env, tmp_path / "worker.log").wait_ready()
    try:
        code, report = health(env)
        assert report["redis"]["ok"] and report["workers"]["ok"]
        assert code == 1 and not report["ok"] and not report["servers"]["ok"]
        assert any(f"maxmemory-policy {policy}" in line for line in report["servers"]["errors"])
        log = worker.output()
        assert "ERROR" in log and f"maxmemory-policy {policy}" in log
    finally:
        worker.stop()
    conn = make_client(redis_server.url)
    scrape = TestClient(create_app(conn, auth=None)).get("/metrics").text
    assert (
        f'counters_redis_evicting{{policy="{policy}",server=' in scrape
        and "} 1.0" in scrape.split("counters_redis_evicting{", 1)[1].splitlines()[0]
    )


@pytest.mark.processes
@pytest.mark.parametrize("evicting", ["allkeys-lru"], indirect=True)
def test_an_evicting_policy_accepted_is_a_warning(evicting, tmp_path):
    redis_server, policy = evicting
    env = celery_env(redis_server.url, COUNTERS_ALLOW_EVICTION="1")
    worker = start_worker(env, tmp_path / "worker.log").wait_ready()
    try:
        _code, report = health(env)
        assert report["servers"]["ok"] and not report["servers"]["errors"]
        assert any("accepted: COUNTERS_ALLOW_EVICTION" in line for line in report["servers"]["warnings"])
        log = worker.output()
        assert f"maxmemory-policy {policy}" in log and "ERROR" not in log
    finally:
        worker.stop()


def test_the_session_server_is_new_enough_and_never_evicts(raw_conn):
    [found] = server.facts(raw_conn)
    assert not found.too_old and found.policy == "noeviction"
    assert server.report(raw_conn)["ok"]


def old_server(version: str) -> Path:
    binary = OLD_SERVERS / version / "redis-server"
    if not binary.exists():
        if os.environ.get("COUNTERS_OLD_SERVERS_REQUIRED"):
            raise AssertionError(f"{binary} is missing: scripts/old-redis-servers.sh makes it")
        pytest.skip(f"no Redis {version} here: `make test-oldest-redis` fetches it")
    return binary


@pytest.mark.processes
def test_a_worker_refuses_a_redis_older_than_6_2_naming_both_versions(tmp_path):
    with RedisServer(tmp_path / "redis", binary=str(old_server("6.0"))) as old:
        env = celery_env(old.url)
        worker = start_worker(env, tmp_path / "worker.log")
        try:
            assert worker.process.wait(60) != 0
            log = worker.output()
            assert "Redis 6.0.9" in log and "needs Redis 6.2.0 or newer" in log, log[-3000:]
            assert "BLMOVE" in log  # says which command needs it
        finally:
            worker.stop()
        code, report = health(env)
        assert code == 1 and any("needs Redis 6.2.0 or newer" in line for line in report["servers"]["errors"])


@pytest.mark.processes
def test_the_oldest_supported_server_counts_through_a_real_worker(tmp_path):
    """Redis 6.2 is accepted: a worker on it starts and counts (make test-oldest-redis runs the
    whole data suite on it)."""
    from counters_tasks import counters, tasks
    from counters_tasks.app import app
    from counters_tasks.core.settings import load_settings
    from counters_tasks.local.waiting import wait_until

    with RedisServer(tmp_path / "redis", binary=str(old_server("6.2"))) as oldest:
        env = celery_env(oldest.url)
        worker = start_worker(env, tmp_path / "worker.log").wait_ready()
        conn = make_client(oldest.url)
        try:
            with app.connection_for_write(load_settings({"COUNTERS_REDIS_URL": oldest.url}).broker_url) as broker:
                for n in range(20):
                    tasks.update_counter.apply_async(("on-6.2", 1, 1000.0 + n), producer=app.amqp.Producer(broker))
            wait_until(
                lambda: sum(t for _b, t in counters.get_counter(conn, "on-6.2", 60, now=1019.0)) == 20,
                timeout=30,
                what=f"20 updates on Redis 6.2; log:\n{worker.output()[-2000:]}",
            )
            assert "Redis 6.2" not in worker.output()  # no complaint about the version
        finally:
            worker.stop()


@pytest.mark.processes
def test_the_module_api_refuses_to_write_to_a_redis_older_than_6_2(tmp_path, monkeypatch):
    """An app calling the data modules itself (no worker) gets the refusal before any write."""
    from counters_tasks import counters
    from tests.support.servers import use_settings

    with RedisServer(tmp_path / "redis", binary=str(old_server("6.0"))) as old:
        use_settings(monkeypatch, COUNTERS_REDIS_URL=old.url)
        conn = make_client(old.url)
        with pytest.raises(server.ServerTooOld, match="Redis 6.0.9.*needs Redis 6.2.0"):
            counters.update_counter(conn, "hits", 1)
        assert conn.dbsize() == 0  # nothing half-written (it wrote some buckets, then failed)
