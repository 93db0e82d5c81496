"""The local stack behind ``counters-tasks run`` and ``demo``: Redis (when none is configured),
a worker, one beat and Flower, stopped together on Ctrl-C.

State lives in a local folder (``COUNTERS_HOME``, default ``./.counters-tasks``): the private
Redis's data (AOF on), the generated ``COUNTERS_SECRET`` and Flower password, and logs.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ..app import app
from ..core.settings import get_settings, reset_settings
from .redis_server import RedisServer, free_port, port_is_free
from .waiting import wait_until

DEFAULT_REDIS_PORT = 6379


def _read_or_create(path: Path, make: Callable[[], str]) -> str:
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    value = make()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
    return value


class Stack:
    """Start what is missing, in order; stop everything in reverse order."""

    def __init__(self, flower: bool = True, concurrency: int = 2, log: Callable[[str], object] = print) -> None:
        self.settings = get_settings()
        self.home = self.settings.home
        self.flower = flower
        self.concurrency = concurrency
        self.log = log
        self.redis: RedisServer | None = None
        self.children: list[tuple[str, subprocess.Popen]] = []
        self.env = dict(os.environ)
        self.flower_url: str | None = None

    def start(self) -> Stack:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "logs").mkdir(exist_ok=True)
        if not self.settings.redis_url_given:
            port = DEFAULT_REDIS_PORT if port_is_free(DEFAULT_REDIS_PORT) else free_port()
            self.redis = RedisServer(self.home / "redis", port=port, appendonly=True).start()
            self.env["COUNTERS_REDIS_URL"] = self.redis.url
            self.log(f"redis    private redis-server at {self.redis.url} (data in {self.redis.data_dir})")
        else:
            self.log(f"redis    using COUNTERS_REDIS_URL={self.env['COUNTERS_REDIS_URL']}")
        if not self.settings.secret:
            self.env["COUNTERS_SECRET"] = _read_or_create(self.home / "secret", lambda: secrets.token_hex(32))
            self.log(f"secret   COUNTERS_SECRET from {self.home / 'secret'}")
        os.environ.update({k: self.env[k] for k in ("COUNTERS_REDIS_URL", "COUNTERS_SECRET")})
        reset_settings()
        self._spawn("worker", ["worker", "-Q", "visits,maintenance", "-c", str(self.concurrency), "-n", "counters@%h",
                               "--loglevel", "INFO"])
        self._spawn("beat", ["beat", "--loglevel", "INFO", "-s", str(self.home / "celerybeat-schedule"),
                             "--pidfile", str(self.home / "beat.pid")])
        if self.flower:
            auth = self.settings.flower_auth or _read_or_create(
                self.home / "flower-auth", lambda: "admin:" + secrets.token_urlsafe(12))
            port = self.settings.flower_port
            self._spawn("flower", ["flower", "--address=127.0.0.1", f"--port={port}", f"--basic-auth={auth}"])
            self.flower_url = f"http://127.0.0.1:{port}"
            self.log(f"flower   {self.flower_url} (user {auth.split(':')[0]}, password in {self.home / 'flower-auth'})")
        return self

    def _spawn(self, name: str, args: list[str]) -> None:
        log_path = self.home / "logs" / f"{name}.log"
        log_file = open(log_path, "ab")
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "counters_tasks", *args],
            env=self.env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
        )
        log_file.close()
        self.children.append((name, process))
        self.log(f"{name:<8} started (pid {process.pid}, log {log_path})")

    def check_alive(self) -> None:
        for name, process in self.children:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}; see {self.home / 'logs' / (name + '.log')}")

    def wait_worker_ready(self, timeout: float = 60.0) -> None:
        """Wait until the worker answers a ping, so what is sent next is consumed at once."""
        def answers() -> bool:
            self.check_alive()
            return bool(app.control.ping(timeout=0.5))

        wait_until(answers, timeout, interval=0, what="the worker to answer a ping")

    def stop(self) -> None:
        for _name, process in reversed(self.children):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for name, process in reversed(self.children):
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            self.log(f"{name:<8} stopped")
        self.children.clear()
        if self.redis is not None:
            self.redis.stop()
            self.log("redis    stopped")
            self.redis = None

    def run_forever(self) -> int:
        """Block until Ctrl-C (SIGINT) or SIGTERM, then stop everything; 0 on a clean stop."""
        stopping = []

        def on_signal(signum, _frame):
            stopping.append(signum)

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        self.log("ready    press Ctrl-C to stop")
        code = 0
        try:
            while not stopping:
                try:
                    self.check_alive()
                except RuntimeError as exc:
                    self.log(f"error    {exc}")
                    code = 1
                    break
                time.sleep(0.2)
        finally:
            self.stop()
        return code
