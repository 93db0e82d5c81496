"""A Redis reached through a unix socket only: ``COUNTERS_REDIS_URL=unix://:password@/...?db=0``
and no ``CELERY_BROKER_URL``, as docs/configuration.md says works (the broker is database 1 of
the same server). kombu has no ``unix://`` transport ("No such transport: unix"): the settings
give the broker in its spelling, ``redis+socket://...?virtual_host=1``; the workers take it
with the package's transport (``worker/broker.py``'s ``SocketTransport``: an undecodable
message is set aside, as on ``redis://``), and everything that reads the broker as a Redis
(health, queue lengths, dead letters) reads that form too. The server listens on no TCP port,
so nothing can pass by falling back to localhost:6379."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from counters_tasks import sitestats
from counters_tasks.core.days import local_day
from counters_tasks.core.settings import load_settings
from counters_tasks.local.redis_server import RedisServer
from counters_tasks.local.waiting import wait_until
from counters_tasks.store import keys
from tests.support.procs import REPO, celery_env, cli, start_beat, start_worker

pytestmark = [pytest.mark.processes, pytest.mark.workers]

PASSWORD = "socket-pw"


class SocketOnlyServer(RedisServer):
    """A private Redis listening on a unix socket and on no TCP port (``--port 0``)."""

    def __init__(self, data_dir: Path, socket_path: Path) -> None:
        super().__init__(
            data_dir, extra_args=["--port", "0", "--unixsocket", str(socket_path), "--unixsocketperm", "700"]
        )
        self.socket_path = socket_path

    password: str | None = None

    @property
    def url(self) -> str:
        return f"unix://{f':{self.password}@' if self.password else ''}{self.socket_path}?db=0"

    def client(self, db: int) -> redis.Redis:
        return redis.Redis(unix_socket_path=str(self.socket_path), db=db, password=self.password, socket_timeout=5)

    def wait_ready(self, timeout: float = 15.0) -> None:
        client = redis.Redis(unix_socket_path=str(self.socket_path), socket_timeout=1)

        def answers() -> bool:
            assert self.process is not None and self.process.poll() is None, (self.data_dir / "redis.log").read_text()
            try:
                return bool(client.ping())
            except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
                return False

        try:
            wait_until(answers, timeout, what=f"the Redis server on {self.socket_path}")
        finally:
            client.close()


@pytest.fixture
def socket_server(tmp_path) -> Iterator[SocketOnlyServer]:
    with tempfile.TemporaryDirectory(prefix="ct-", dir="/tmp") as short:  # a socket path has at most 107 bytes
        server = SocketOnlyServer(tmp_path / "redis", Path(short) / "redis.sock").start()
        admin = server.client(0)
        admin.config_set("requirepass", PASSWORD)  # a socket's Redis may want one too: it goes in the URL
        admin.close()
        server.password = PASSWORD
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture
def socket_env(socket_server) -> dict[str, str]:
    """The environment of every process: the socket URL, and no broker URL (nor the suite's)."""
    env = celery_env(socket_server.url, COUNTERS_REDIS_CLUSTER="")
    env.pop("CELERY_BROKER_URL", None)
    return env


SENDER = textwrap.dedent("""
    import sys, time
    from counters_tasks import VisitRecorder, tasks

    delayed, recorded = int(sys.argv[1]), int(sys.argv[2])
    now = time.time()
    for n in range(delayed):
        tasks.record_visit.delay(f"198.51.100.{n + 1}", "/socket-delay", ts=now)
    recorder = VisitRecorder()
    for n in range(recorded):
        recorder.record(f"203.0.113.{n + 1}", "/socket-recorder", ts=now)
    assert recorder.close(timeout=30), recorder.stats()
    print(recorder.stats()["sent"], flush=True)
""")


def test_default_broker_on_a_unix_socket_counts_every_visit(socket_server, socket_env, tmp_path):
    settings = load_settings(socket_env)
    assert settings.broker_url == f"redis+socket://:{PASSWORD}@{socket_server.socket_path}?virtual_host=1"
    counters, broker = socket_server.client(0), socket_server.client(1)
    worker = start_worker(dict(socket_env, COUNTERS_CLEAN_EVERY="0.5"), tmp_path / "worker.log")
    beat = start_beat(dict(socket_env, COUNTERS_CLEAN_EVERY="0.5"), tmp_path, tmp_path / "beat.log")
    try:
        worker.wait_ready()
        sent = subprocess.run(
            [sys.executable, "-c", SENDER, "40", "60"],
            cwd=REPO,
            env=socket_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert sent.returncode == 0, sent.stderr[-3000:]
        day = local_day(time.time())
        wait_until(
            lambda: (
                (
                    sitestats.site_visit_info(counters, day, "/socket-delay").pv,
                    sitestats.site_visit_info(counters, day, "/socket-recorder").pv,
                )
                == (40, 60)
            ),
            timeout=60,
            what=f"the visits counted; worker log:\n{worker.output()[-3000:]}",
        )
        assert sitestats.site_visit_info(counters, day, "/socket-delay").uv == 40
        assert sitestats.site_visit_info(counters, day, "/socket-recorder").uv == 60
        # the queues were on database 1 of the same server, the counters on database 0
        assert broker.exists("_kombu.binding.visits") and not counters.exists("_kombu.binding.visits")
        assert sitestats.site_visit_info(broker, day, "/socket-delay").pv == 0

        # a message the worker cannot decode is set aside in the broker's dead letters (the
        # package's transport, as with redis://), where health and the CLI read them
        broker.lpush("visits", "{this is not json")
        wait_until(
            lambda: broker.llen(keys.dead_letters()) == 1,
            timeout=30,
            what=f"the undecodable message set aside; worker log:\n{worker.output()[-3000:]}",
        )

        def healthy() -> bool:
            result = cli(socket_env, "health", "--json")
            return result.returncode == 0

        wait_until(healthy, timeout=60, interval=1, what="counters-tasks health to be ok")
        report = json.loads(cli(socket_env, "health", "--json").stdout)
        assert report["ok"] and [name.split("@")[0] for name in report["workers"]["names"]] == ["w1"]
        assert report["queues"] == {"ok": True, "visits": 0, "maintenance": report["queues"]["maintenance"]}
        assert report["dead_letters"]["count"] == 1
        assert f"Connected to redis+socket://:**@{socket_server.socket_path}" in worker.output()  # its password masked
        assert PASSWORD not in worker.output() + beat.output()
        listing = cli(socket_env, "dead-letters", "list", "--json")
        assert listing.returncode == 0 and json.loads(listing.stdout)["records"][0]["reason"] == "not_json"
    finally:
        beat.stop()
        worker.stop()
        counters.close()
        broker.close()
