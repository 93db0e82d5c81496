"""A private ``redis-server`` process: for the run/demo commands, the tests and the benchmarks.

It listens on 127.0.0.1 on a free port (or the one given), keeps its data in a folder of its
own, and is stopped with the object. Debian's ``redis-server`` package provides the binary.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import redis

from .waiting import wait_until


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def redis_server_binary() -> str:
    found = shutil.which("redis-server") or ("/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None)
    if not found:
        raise FileNotFoundError("redis-server not found: install Debian's package (apt-get install redis-server)")
    return found


class RedisServer:
    """One ``redis-server`` child process; ``url`` points at it once ``start()`` returned."""

    def __init__(self, data_dir: str | Path, port: int | None = None, extra_args: list[str] | None = None,
                 appendonly: bool = False) -> None:
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.extra_args = list(extra_args or [])
        self.appendonly = appendonly
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        return [
            redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1",
            "--dir", str(self.data_dir), "--save", "", "--appendonly", "yes" if self.appendonly else "no",
            "--maxmemory-policy", "noeviction", "--daemonize", "no", "--logfile", str(self.data_dir / "redis.log"),
            *self.extra_args,
        ]

    def start(self, timeout: float = 15.0) -> RedisServer:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 15.0) -> None:
        """Until the server answers PING; a server that exited raises with the tail of its log."""
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1)

        def answers() -> bool:
            if self.process is not None and self.process.poll() is not None:
                log = self.data_dir / "redis.log"
                tail = log.read_text()[-2000:] if log.exists() else ""
                raise RuntimeError(f"redis-server exited with {self.process.returncode}: {tail}")
            try:
                return bool(client.ping())
            except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
                return False

        try:
            wait_until(answers, timeout, what=f"redis-server on port {self.port}")
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
