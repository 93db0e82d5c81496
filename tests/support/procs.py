"""Real Celery worker and beat processes, and web servers (``Server``), for the tests."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import os
import shutil
import signal
import struct
import subprocess
import sys
import termios
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from counters_tasks.local.waiting import wait_until
from tests.support.servers import TEST_SECRET

BROWSER_AGENT = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"
"""A browser's user agent: what the tests' requests of pages send (the page view rule skips
scripts such as Python-urllib, which the test's HTTP client would be by default)."""
BROWSER_HEADERS = {"User-Agent": BROWSER_AGENT, "Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}

REPO = Path(__file__).resolve().parents[2]


def http_status(url: str, auth: str | None = None) -> int:
    """The status of a GET of ``url`` (with basic auth ``user:password`` when given); 0 when
    nothing answers (yet)."""
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def celery_env(redis_url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        COUNTERS_REDIS_URL=redis_url,
        COUNTERS_SECRET=env.get("COUNTERS_SECRET", TEST_SECRET),
        PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""),
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def run_python(env: dict[str, str], code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``python -c CODE ARGS`` in a new process with exactly ``env``: for what must not happen in the
    tests' own process (the package's Celery app under another broker or configuration: Celery
    configures an app once, ``tests/support/isolation.py``). Its output captured."""
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


def cli(env: dict[str, str], *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """``counters-tasks ARGS`` (``python -m counters_tasks.ops.cli``) in a new process with exactly
    ``env``: a reader that has never seen the deployment. Its output captured, 60 s at most."""
    return subprocess.run(
        [sys.executable, "-m", "counters_tasks.ops.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def start_serve(env: dict[str, str], log: Path, auth: bool = False) -> tuple[subprocess.Popen, str]:
    """``python -m counters_tasks.ops.cli serve`` on a free port, without dashboard auth unless
    ``auth`` (then with ``env``'s), as a user starts it (in its own process group, its output in
    ``log``); (process, base URL)."""
    from counters_tasks.local.redis_server import free_port

    port = free_port()
    env = {k: v for k, v in env.items() if auth or k != "COUNTERS_DASHBOARD_AUTH"}
    with open(log, "wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "counters_tasks.ops.cli", "serve", "--port", str(port)],
            cwd=REPO,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return process, f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def serving(env: dict[str, str], log: Path, answers: Callable[[str], object], auth: bool = False) -> Iterator[str]:
    """``start_serve``, then its base URL once ``answers(base)`` is true (a connection refused
    meanwhile is waited out, a server that exited fails with its log); terminated on exit."""
    process, base = start_serve(env, log, auth)

    def up() -> bool:
        try:
            return bool(answers(base))
        except OSError:
            assert process.poll() is None, log.read_text()
            return False

    try:
        wait_until(up, timeout=30, what="the dashboard to answer")
        yield base
    finally:
        process.terminate()
        process.wait(15)


class CeleryProcess:
    """A ``celery`` command in its own process group, with its output in a log file."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self._log_file = open(log, "wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "counters_tasks", "--config", "celeryconfig", *args],
            cwd=REPO,
            env=env,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self, timeout: float = 60.0) -> CeleryProcess:
        """Until the worker logs that it is ready (before that, SIGTERM kills it uncleanly)."""
        wait_until(
            lambda: " ready." in self.output() or self.process.poll() is not None,
            timeout=timeout,
            what=f"the worker to be ready; log:\n{self.output()[-2000:]}",
        )
        assert self.process.poll() is None, self.output()[-3000:]
        return self

    def stop(self, timeout: float = 20.0) -> int:
        """Warm shutdown: SIGTERM to the main process, as ``celery multi stop`` and a process
        manager send it (the main process lets the pool finish its tasks, then stops it), then
        SIGKILL of the whole group if it hangs, and of whatever it left behind. A SIGTERM to the
        whole group ended a pool child in the middle of a task whose write was already seen (a
        WorkerLostError in a full ``make test``)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._dump_stacks()
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)  # a child the main process did not stop
        self._log_file.close()
        return self.process.returncode

    def _dump_stacks(self) -> None:
        """A worker that did not stop: every thread's stack of its main process goes to its log
        (Celery's SIGUSR1 handler), and of each of its processes with py-spy where it is
        installed, so a hang seen once says where it was."""
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGUSR1)
        spy = shutil.which("py-spy") or os.environ.get("PY_SPY")
        if spy:
            children = subprocess.run(["pgrep", "-g", str(self.process.pid)], capture_output=True, text=True).stdout
            for pid in children.split():
                dump = subprocess.run([spy, "dump", "--pid", pid], capture_output=True, text=True, timeout=30)
                self._log_file.write(f"\n--- py-spy dump of {pid}\n{dump.stdout}{dump.stderr}".encode())
        self._log_file.flush()
        with contextlib.suppress(TimeoutError, AssertionError):  # written by the worker's own loop
            wait_until(lambda: "MainThread" in self.output(), timeout=3, what="the worker's stack dump")

    def pool_pids(self) -> list[int]:
        """The worker's pool processes (the main process's children)."""
        found = subprocess.run(["pgrep", "-P", str(self.process.pid)], capture_output=True, text=True).stdout
        return sorted(int(pid) for pid in found.split())

    def kill(self) -> None:
        """SIGKILL the worker and its pool children at once."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def purge_broker(redis_url: str, env: dict[str, str] | None = None) -> None:
    """Drop messages left on the test broker by earlier tests (eager runs do not use it, but
    ``send_task`` and ``VisitRecorder`` do), so a new worker sees only this test's messages."""
    import redis

    from counters_tasks.core.settings import load_settings

    broker = load_settings({**(env or {}), "COUNTERS_REDIS_URL": redis_url}).broker_url
    client = redis.Redis.from_url(broker)
    client.flushdb()
    client.close()


def start_worker(
    env: dict[str, str],
    log: Path,
    concurrency: int = 2,
    name: str = "w1",
    queues: str = "visits,maintenance",
    extra: tuple[str, ...] = (),
) -> CeleryProcess:
    return CeleryProcess(
        [
            "worker",
            "-Q",
            queues,
            "-c",
            str(concurrency),
            "-n",
            f"{name}@%h",
            "--loglevel",
            "INFO",
            "--without-mingle",
            "--without-gossip",
            *extra,
        ],
        env,
        log,
    )


def start_beat(env: dict[str, str], workdir: Path, log: Path) -> CeleryProcess:
    return CeleryProcess(
        [
            "beat",
            "--loglevel",
            "INFO",
            "-s",
            str(workdir / "celerybeat-schedule"),
            "--pidfile",
            str(workdir / "beat.pid"),
        ],
        env,
        log,
    )


class Server:
    """A web server process (its own session, so a SIGTERM reaches only it), its output in a file:
    ``python -m <args>``, or ``<program> <args>`` for a server that is not a Python module (uWSGI)."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path, port: int, program: str | None = None) -> None:
        self.log = log
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self._log_file = open(log, "wb")
        command = [program, *args] if program else [sys.executable, "-m", *args]
        self.process = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=self._log_file, stderr=subprocess.STDOUT, start_new_session=True
        )
        wait_until(self._ready, timeout=30, what=f"the server on port {port}")

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"the server exited: {self.log.read_text()[-3000:]}")
        try:
            return self.get("/health")[0] == 200
        except OSError:
            return False

    def get(self, path: str, headers: dict[str, str] | None = None, method: str = "GET"):
        """(status, headers, body) of one request on a new connection, as a browser sends it
        (its user agent and Accept unless ``headers`` name others)."""
        request = urllib.request.Request(self.base + path, headers=BROWSER_HEADERS | (headers or {}), method=method)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, response.headers, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.headers, error.read()

    def wait_for_workers(self, count: int) -> None:
        """Until ``count`` different worker processes have answered ``/pid`` (the app holds that
        request a moment, so a busy sync worker sends concurrent ones to the others)."""
        pids: set[bytes] = set()

        def all_answered() -> bool:
            with ThreadPoolExecutor(8) as pool:
                pids.update(pool.map(lambda _: self.get("/pid")[2], range(16)))
            return len(pids) == count

        wait_until(all_answered, timeout=30, interval=0, what=f"{count} server workers to serve")

    def stop(self) -> int:
        """SIGTERM, as a process manager stops it; what was buffered must reach the broker."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._log_file.close()
        return self.process.returncode


def bytes_in_pipes(pid: int) -> dict[str, int]:
    """The bytes waiting in each pipe process ``pid`` holds, by pipe (``pipe:[inode]``): each is
    opened anew through ``/proc`` and asked with ``FIONREAD``, so a pool process's inbound pipe
    shows what the main process wrote to it that the process has not read yet."""
    waiting = {}
    fds = Path(f"/proc/{pid}/fd")
    for fd in fds.iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if not target.startswith("pipe:"):
                continue
            handle = os.open(fd, os.O_RDONLY | os.O_NONBLOCK)
            try:
                waiting[target] = struct.unpack("i", fcntl.ioctl(handle, termios.FIONREAD, b"\0" * 4))[0]
            finally:
                os.close(handle)
    return waiting
