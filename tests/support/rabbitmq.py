"""A private RabbitMQ node for the tests (Debian's ``rabbitmq-server``): its own node name, AMQP,
distribution and epmd ports on loopback, its data, logs and Erlang cookie under a temp folder;
stopped with the object. The RabbitMQ tests run in ``make test-rabbitmq`` (``.ci/run`` installs
the package first), which sets ``COUNTERS_RABBITMQ_REQUIRED``: there a missing server fails.
Elsewhere (``make test``, which they would lengthen by half a minute) they skip."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from counters_tasks.local.redis_server import free_port
from counters_tasks.local.waiting import wait_until

SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
"""The server script itself (``/usr/sbin/rabbitmq-server`` switches to the rabbitmq user first)."""


def rabbitmq_or_skip() -> str:
    if not os.environ.get("COUNTERS_RABBITMQ_REQUIRED"):
        pytest.skip("the RabbitMQ tests run in make test-rabbitmq")
    if not Path(SERVER).exists():
        raise AssertionError(f"{SERVER} is missing: apt-get install rabbitmq-server (.ci/run does)")
    return SERVER


class RabbitServer:
    """One RabbitMQ node; ``url`` (``amqp://``) once ``start()`` returned."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port, self.dist_port, self.epmd_port = free_port(), free_port(), free_port()
        self.name = f"ct{self.port}@localhost"
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    def env(self) -> dict[str, str]:
        home = self.folder / "home"
        return {
            **os.environ,
            "HOME": str(home),
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_MNESIA_BASE": str(self.folder / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.folder / "log"),
            "RABBITMQ_PID_FILE": str(self.folder / "pid"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.folder / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(self.folder / "rabbitmq"),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }

    def start(self, timeout: float = 90.0) -> RabbitServer:
        binary = rabbitmq_or_skip()
        for sub in ("home", "mnesia", "log"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)
        (self.folder / "enabled_plugins").write_text("[].\n")
        (self.folder / "rabbitmq.conf").write_text(f"listeners.tcp.default = 127.0.0.1:{self.port}\n")
        self.log = open(self.folder / "server.log", "wb")
        self.process = subprocess.Popen(
            [binary], env=self.env(), cwd=self.folder, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )

        def accepts() -> bool:
            assert self.process.poll() is None, (self.folder / "server.log").read_text()[-3000:]
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return True
            except OSError:
                return False

        wait_until(accepts, timeout=timeout, interval=0.2, what=f"RabbitMQ on port {self.port}")
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        # epmd runs as a daemon of its own; this node's is on its own port: stop it
        epmd = shutil.which("epmd") or "/usr/lib/erlang/bin/epmd"
        subprocess.run([epmd, "-kill"], env=self.env(), capture_output=True, timeout=10)
        if getattr(self, "log", None):
            self.log.close()
