"""The local stack behind ``counters-tasks run`` and ``demo``: Redis (when none is configured),
a worker, one beat and Flower, stopped together on Ctrl-C.

State lives in a local folder (``COUNTERS_HOME``, default ``./.counters-tasks``): the private
Redis's data (AOF on), the generated ``COUNTERS_SECRET``, tag key (``COUNTERS_TAG_KEY``) and Flower password, logs, and
``env``: the ``export`` lines that point another shell (the README's snippets, the CLI) at this
stack. The private Redis takes port 6379 (``COUNTERS_REDIS_PORT``) and Flower 5555
(``FLOWER_PORT``); when one is taken it says so loudly, by whom, and takes a free port (the
Redis's is then in ``env``). A stack that runs (``stack.pid``) is not started twice on one
folder: a second ``run`` says so (stop it, or use it); ``demo`` runs beside it, on its Redis, with
a worker of its own and no beat. Stop order (Ctrl-C or SIGTERM): Flower, beat, the worker (it
finishes the batch in hand), then Redis. The start says whether the who-visits tables are on.

In a source checkout (``make run``) the worker, beat and Flower load its ``celeryconfig.py``, as
docker-compose.yml's services do; installed, the package's defaults (``CELERY_CONFIG_MODULE``
names another); the log says which. Flower's password is passed in its environment, never on a
command line (``ps`` shows those to every user). ``ready`` means the worker answers and beat has
started (``counters-tasks health`` passes from then on).
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import redis

from .. import sitestats
from ..app import PACKAGE_DEFAULTS, app
from ..core.settings import get_settings, redact_url, reset_settings
from ..store.client import as_str, get_redis
from ..store.deployment import tag_key_name
from ..worker.maintenance import BEAT_STARTED, HEARTBEAT_JOB, job_status
from .redis_server import RedisServer, free_port, port_is_free
from .waiting import wait_until

ENV_NAMES = ("COUNTERS_REDIS_URL", "COUNTERS_SECRET", "COUNTERS_TAG_KEY")
"""What the env file exports (besides PATH): what a shell needs to talk to this stack."""


CHECKOUT = Path(__file__).resolve().parents[2]
"""The folder holding the imported package: a source checkout when it holds pyproject.toml."""
CHECKOUT_CONFIG = "celeryconfig"
"""The deployment's Celery configuration module of a checkout (what docker-compose.yml's services load)."""


def checkout_config() -> Path | None:
    """The checkout's ``celeryconfig.py`` when the package runs from a source checkout that has one
    (``make run``), else None (an installed package: the package's defaults). Found next to the
    package, never on the path or in the current folder, where an app's own ``celeryconfig`` may be."""
    config = CHECKOUT / f"{CHECKOUT_CONFIG}.py"
    return config if config.is_file() and (CHECKOUT / "pyproject.toml").is_file() else None


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

    def __init__(
        self,
        flower: bool = True,
        concurrency: int = 2,
        log: Callable[[str], object] = print,
        beside: bool = False,
    ) -> None:
        """``beside`` (``demo``): when a stack of this folder runs, use its Redis (with a worker of
        this stack's own, no beat) instead of refusing to start."""
        self.settings = get_settings()
        self.home = self.settings.home
        self.flower = flower
        self.beside = beside
        self.shared = False
        self.concurrency = concurrency
        self.log = log
        self.redis: RedisServer | None = None
        self.children: list[tuple[str, subprocess.Popen]] = []
        self.env = dict(os.environ)
        self.flower_url: str | None = None
        self.config_args: list[str] = []
        self.cwd: Path | None = None
        self.started_at = 0.0

    def start(self) -> Stack:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "logs").mkdir(exist_ok=True)
        running = running_stack(self.home)
        if not self.settings.redis_url_given and running is not None and self.beside:
            self.shared = True  # the stack of `run` keeps its Redis and beat: this one adds a worker
            self.env["COUNTERS_REDIS_URL"] = stack_env(self.home)["COUNTERS_REDIS_URL"]
            self.log(
                f"redis    the running stack's (pid {running}, {redact_url(self.env['COUNTERS_REDIS_URL'])}): "
                "this one runs beside it, with a worker of its own"
            )
        elif not self.settings.redis_url_given:
            if running is not None:
                raise RuntimeError(
                    f"a `counters-tasks run` of {self.home} runs already (pid {running}): use it (source "
                    f"{self.env_file}), or stop it first (Ctrl-C in its terminal, or kill {running}); "
                    "another stack needs its own COUNTERS_HOME"
                )
            self.redis = RedisServer(self.home / "redis", port=self.redis_port(), appendonly=True).start()
            self.env["COUNTERS_REDIS_URL"] = self.redis.url
            self.log(
                f"redis    private {Path(self.redis.command()[0]).name} at {self.redis.url} (data in {self.redis.data_dir})"
            )
            self.pid_file.write_text(f"{os.getpid()}\n")
        else:
            self.log(f"redis    using COUNTERS_REDIS_URL={redact_url(self.env['COUNTERS_REDIS_URL'])}")
        if not self.settings.secret:
            self.env["COUNTERS_SECRET"] = _read_or_create(self.home / "secret", lambda: secrets.token_hex(32))
            self.log(f"secret   COUNTERS_SECRET from {self.home / 'secret'}")
        if not self.settings.tag_key:
            # pinned like the secret, so no loss of Redis's data can ever give this stack's processes
            # two tag keys; a stack of before the pin keeps the key its Redis already holds
            self.env["COUNTERS_TAG_KEY"] = _read_or_create(self.home / "tag-key", self._tag_key_in_redis)
            self.log(f"tag key  COUNTERS_TAG_KEY from {self.home / 'tag-key'}")
        os.environ.update({k: self.env[k] for k in ENV_NAMES})
        reset_settings()
        if not self.shared:  # (the running stack's env file stays as it wrote it)
            self.write_env_file()
        self.choose_config()
        self.log(f"who      {sitestats.client_tables_said(sitestats.client_tables_status())}")
        self.started_at = time.time()
        self._spawn(
            "worker",
            [
                "worker",
                "-Q",
                "visits,maintenance",
                "-c",
                str(self.concurrency),
                "-n",
                "demo@%h" if self.shared else "counters@%h",
                "--loglevel",
                "INFO",
            ],
        )
        self._spawn(
            "beat",
            []
            if self.shared
            else [
                "beat",
                "--loglevel",
                "INFO",
                "-s",
                str(self.home / "celerybeat-schedule"),
                "--pidfile",
                str(self.home / "beat.pid"),
            ],
        )
        if self.flower:
            if importlib.util.find_spec("flower") is None:
                raise RuntimeError("Flower is not installed: pip install 'counters-tasks[flower]' (or run --no-flower)")
            auth = self.settings.flower_auth or _read_or_create(
                self.home / "flower-auth", lambda: "admin:" + secrets.token_urlsafe(12)
            )
            port = self.port_for("flower", self.settings.flower_port)
            # the password in Flower's environment, which only this user can read, not on its command
            # line, which any user of the machine sees in ps (Flower reads FLOWER_BASIC_AUTH itself)
            self._spawn(
                "flower",
                ["flower", "--address=127.0.0.1", f"--port={port}"],
                env={**self.env, "FLOWER_BASIC_AUTH": auth},
            )
            self.flower_url = f"http://127.0.0.1:{port}"
            self.log(f"flower   {self.flower_url} (user {auth.split(':')[0]}, password in {self.home / 'flower-auth'})")
        return self

    def choose_config(self) -> None:
        """The Celery configuration of the worker, beat and Flower, said in the log: the module
        ``CELERY_CONFIG_MODULE`` names; else in a checkout its ``celeryconfig.py``, as
        docker-compose.yml's services load it (``celery --config celeryconfig``, run from the
        checkout so that no other ``celeryconfig`` is found first); else the package's defaults.
        Each process also logs the file it loaded (``counters_tasks.app``)."""
        config = checkout_config()
        if self.settings.celery_config_module:
            self.log(f"config   CELERY_CONFIG_MODULE={self.settings.celery_config_module}")
        elif config is not None:
            self.config_args = ["--config", CHECKOUT_CONFIG]
            self.cwd = config.parent
            self.log(f"config   {config} (this checkout's, as docker-compose.yml loads it)")
        else:
            self.log(f"config   the package's defaults ({PACKAGE_DEFAULTS})")

    def _tag_key_in_redis(self) -> str:
        """The tag key the stack's Redis holds already (made before it was pinned), else a new one."""
        client = redis.Redis.from_url(self.env["COUNTERS_REDIS_URL"], socket_timeout=5, decode_responses=True)
        try:
            return as_str(client.get(tag_key_name()) or secrets.token_hex(16))
        finally:
            client.close()

    def redis_port(self) -> int:
        """The wanted port when it is free; else, said loudly with who holds it, a free one. A Redis
        that serves this very data folder (an earlier stack still running) stops the start."""
        wanted = self.settings.redis_port
        if port_is_free(wanted):
            return wanted
        holder = describe_listener(wanted)
        if holder.get("dir") == str((self.home / "redis").resolve()):
            raise RuntimeError(
                f"a Redis of an earlier `counters-tasks run` in {self.home} still runs on port "
                f"{wanted} (pid {holder.get('pid')}): stop it first (kill {holder.get('pid')})"
            )
        port = free_port()
        for line in (
            f"port {wanted} is taken by {holder['what']}",
            f"the private Redis of this stack listens on port {port} instead;",
            f"point other shells at it with:  source {self.env_file}",
        ):
            self.log(f"redis    !!! {line}")
        return port

    def port_for(self, name: str, wanted: int) -> int:
        """The wanted port of ``name`` (Flower) when it is free; else, said loudly with who holds
        it (as the Redis's port), a free one."""
        if port_is_free(wanted):
            return wanted
        port = free_port()
        self.log(f"{name:<8} !!! port {wanted} is taken by {port_holder(wanted)}")
        self.log(f"{name:<8} !!! {name} listens on port {port} instead")
        return port

    @property
    def env_file(self) -> Path:
        return self.home / "env"

    @property
    def pid_file(self) -> Path:
        """``stack.pid``: the pid of the process whose stack owns this folder's Redis, while it runs."""
        return self.home / "stack.pid"

    def write_env_file(self) -> None:
        """``export`` lines for this stack (readable by the owner only: it holds the secret),
        printed too; PATH gains the folder of the ``counters-tasks`` command when it lacks it."""
        lines = [f"export {name}={self.env[name]}" for name in ENV_NAMES]
        bin_dir = str(Path(sys.executable).parent)
        on_path = bin_dir in os.environ.get("PATH", "").split(os.pathsep)
        if not on_path:
            lines.append(f'export PATH="{bin_dir}:$PATH"')
        fd = os.open(self.env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("# the local stack of `counters-tasks run`; use it from another shell: source this file\n")
            f.write("\n".join(lines) + "\n")
        self.log(f"env      {self.env_file} (for other shells: source {self.env_file})")
        for line in lines:
            for hidden in ("COUNTERS_SECRET", "COUNTERS_TAG_KEY"):
                line = line.replace(self.env[hidden], f"<{hidden.removeprefix('COUNTERS_').lower()}>")
            url = self.env["COUNTERS_REDIS_URL"]
            self.log(f"         {line.replace(url, redact_url(url))}")  # a password stays in the file only
        if not on_path and Path(bin_dir, "counters-tasks").exists():
            self.log(
                f"cli      {bin_dir}/counters-tasks (not on your PATH: source the env file, or "
                f"source {bin_dir}/activate)"
            )

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        if not args:  # (beat, beside a running stack: its beat runs the jobs)
            return
        log_path = self.home / "logs" / f"{name if not self.shared else 'demo-' + name}.log"
        log_file = open(log_path, "ab")
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "counters_tasks", *self.config_args, *args],
            env=self.env if env is None else env,
            cwd=self.cwd,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log_file.close()
        self.children.append((name, process))
        self.log(f"{name:<8} started (pid {process.pid}, log {log_path})")

    def check_alive(self) -> None:
        if self.redis is not None and self.redis.process is not None and self.redis.process.poll() is not None:
            raise RuntimeError(
                f"redis exited with {self.redis.process.returncode}; see {self.redis.data_dir}/redis.log"
            )
        for name, process in self.children:
            if process.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with {process.returncode}; see {self.home / 'logs' / (name + '.log')}"
                )

    def wait_worker_ready(self, timeout: float = 60.0) -> None:
        """Wait until the worker answers a ping, so what is sent next is consumed at once."""

        def answers() -> bool:
            self.check_alive()
            return bool(app.control.ping(timeout=0.5))

        wait_until(answers, timeout, interval=0, what="the worker to answer a ping")

    def wait_beat_started(self, timeout: float = 60.0) -> None:
        """Wait until this stack's beat noted its start (``worker.maintenance.note_beat_started``):
        from then on ``counters-tasks health`` counts it alive."""

        def noted() -> bool:
            self.check_alive()
            started = job_status(get_redis(), HEARTBEAT_JOB).get(BEAT_STARTED)
            return started is not None and float(started) >= self.started_at

        wait_until(noted, timeout, interval=0.1, what="beat to start")

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until the worker answers and beat has started: what ``ready`` promises."""
        self.wait_worker_ready(timeout)
        self.wait_beat_started(timeout)

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
            if running_stack(self.home) == os.getpid():
                self.pid_file.unlink()

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


def load_stack_env(home: Path) -> bool:
    """Take ``COUNTERS_REDIS_URL``, ``COUNTERS_SECRET`` and ``COUNTERS_TAG_KEY`` from the env file a local stack wrote
    under ``home``, where the environment does not set them (the CLI's queries in a new shell
    find the stack of ``make run``); True when it was read."""
    if not (home / "env").is_file():
        return False
    for name, value in stack_env(home).items():
        if not os.environ.get(name):
            os.environ[name] = value
    reset_settings()
    return True


def running_stack(home: Path) -> int | None:
    """The pid of the process whose stack owns ``home``'s Redis (``stack.pid``) while it runs, else None."""
    try:
        pid = int((home / "stack.pid").read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):  # none, unreadable, or that process is gone (SIGKILLed)
        return None
    return pid


def stack_env(home: Path) -> dict[str, str]:
    """The names the env file of ``home``'s stack exports (``write_env_file``)."""
    names = {}
    for line in (home / "env").read_text().splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        if name in ENV_NAMES and value:
            names[name] = value
    return names


def port_holder(port: int) -> str:
    """Who listens on TCP ``port`` (any program): ``pid N (its command)`` when this user may see
    it (``/proc/net/tcp`` gives the socket, a ``/proc/<pid>/fd`` entry its owner), else a sentence
    saying it could not be told. For the ports the stack's programs other than Redis want."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or not inodes:
            continue
        try:
            if any(os.readlink(fd) in inodes for fd in (entry / "fd").iterdir()):
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                return f"pid {entry.name} ({command[:120] or 'no command line'})"
        except OSError:  # another user's, or gone meanwhile
            continue
    return "another program (not one of this user's: `ss -ltnp` as root names it)"


def describe_listener(port: int) -> dict[str, str]:
    """Who listens on ``port`` on loopback: a Redis (its version, pid and data folder) or something else."""
    client = redis.Redis(port=port, socket_timeout=1, socket_connect_timeout=1, decode_responses=True)
    try:
        info = client.info("server")
        try:
            folder = client.config_get("dir").get("dir") or ""
        except redis.RedisError:
            folder = ""
        name = info.get("server_name", "redis")
        version = info.get("valkey_version") or info.get("redis_version", "?")
        return {
            "what": f"another {name} server ({name} {version}, pid {info.get('process_id')}, data in "
            f"{folder or 'unknown'})",
            "pid": str(info.get("process_id")),
            "dir": folder,
        }
    except redis.AuthenticationError:
        return {"what": "a Redis server with a password"}
    except redis.RedisError:
        return {"what": "a program that is not a Redis server (or a socket not yet released)"}
    finally:
        client.close()
