"""A broker behind Redis Sentinel: ``CELERY_BROKER_URL=sentinel://host:port/1`` (kombu's
``SentinelTransport``) with the master's name in the deployment's Celery configuration
(``broker_transport_options["master_name"]``), as docs/production.md ("URL forms tested") says.
A real worker counts what ``.delay()`` sends, and ``counters-tasks health`` reads the queues
through kombu (the broker is not read as a plain Redis). ``COUNTERS_REDIS_URL`` stays a
``redis://`` URL: redis-py opens no ``sentinel://`` URL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import redis

from counters_tasks import sitestats
from counters_tasks.core.days import local_day
from counters_tasks.local.redis_server import RedisServer, free_port, server_binary
from counters_tasks.local.waiting import wait_until
from tests.support.procs import REPO, celery_env

pytestmark = [pytest.mark.processes, pytest.mark.workers]

CONFIG = textwrap.dedent("""
    from counters_tasks.worker.celery_defaults import *  # noqa: F403
    broker_transport_options = {**broker_transport_options, "master_name": "counters-master"}  # noqa: F405
""")

SENDER = textwrap.dedent("""
    import sys, time
    from counters_tasks import tasks
    now = time.time()
    for n in range(int(sys.argv[1])):
        tasks.record_visit.delay(f"198.51.100.{n + 1}", "/sentinel", ts=now)
""")


def test_a_sentinel_broker_with_its_master_named_in_the_configuration(tmp_path):
    master = RedisServer(tmp_path / "master").start()
    sentinel_port = free_port()
    folder = tmp_path / "sentinel"
    folder.mkdir()
    (folder / "sentinel.conf").write_text(
        f"port {sentinel_port}\nbind 127.0.0.1\ndir {folder}\n"
        f"sentinel monitor counters-master 127.0.0.1 {master.port} 1\n"
    )
    with open(folder / "sentinel.log", "wb") as log:
        sentinel = subprocess.Popen(
            [server_binary(), str(folder / "sentinel.conf"), "--sentinel"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "sentinelconfig.py").write_text(CONFIG)
    env = celery_env(
        master.url,
        COUNTERS_REDIS_CLUSTER="",
        CELERY_BROKER_URL=f"sentinel://127.0.0.1:{sentinel_port}/1",
        CELERY_CONFIG_MODULE="sentinelconfig",
    )
    env["PYTHONPATH"] = str(tmp_path / "config") + os.pathsep + env["PYTHONPATH"]
    worker_log = tmp_path / "worker.log"
    counters = redis.Redis(port=master.port, db=0)
    worker = None
    try:
        probe = redis.Redis(port=sentinel_port, socket_timeout=1)
        wait_until(lambda: _answers(probe), timeout=15, what="the sentinel")
        probe.close()
        with open(worker_log, "wb") as log:  # no --config: CELERY_CONFIG_MODULE names the deployment's module
            worker = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "counters_tasks",
                    "worker",
                    "-Q",
                    "visits,maintenance",
                    "-c",
                    "1",
                    "-n",
                    "sentinel@%h",
                    "--loglevel",
                    "INFO",
                    "--without-mingle",
                    "--without-gossip",
                ],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_until(
            lambda: " ready." in worker_log.read_text() or worker.poll() is not None, timeout=60, what="the worker"
        )
        assert worker.poll() is None, worker_log.read_text()[-3000:]
        assert "sentinel://" in worker_log.read_text()  # the transport Celery names in its banner
        sent = subprocess.run(
            [sys.executable, "-c", SENDER, "30"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
        )
        assert sent.returncode == 0, sent.stderr[-3000:]
        day = local_day(time.time())
        wait_until(
            lambda: sitestats.site_visit_info(counters, day, "/sentinel").pv == 30,
            timeout=60,
            what=f"the visits counted; log:\n{worker_log.read_text()[-3000:]}",
        )
        assert sitestats.site_visit_info(counters, day, "/sentinel").uv == 30
        assert redis.Redis(port=master.port, db=1).exists("_kombu.binding.visits")  # the broker: the master's db 1
        health = subprocess.run(
            [sys.executable, "-m", "counters_tasks.ops.cli", "health", "--json"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        report = json.loads(health.stdout)
        assert report["redis"]["ok"] and report["queues"] == {"ok": True, "visits": 0, "maintenance": 0}, report
        assert report["workers"]["ok"] and report["workers"]["names"][0].startswith("sentinel@"), report
    finally:
        if worker is not None and worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(30)
        sentinel.terminate()
        sentinel.wait(10)
        counters.close()
        master.stop()


def _answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False
