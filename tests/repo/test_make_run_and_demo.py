"""The README's commands, run the way a user runs them: ``make run`` and ``make demo``."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from counters_tasks.local.redis_server import free_port
from counters_tasks.local.waiting import wait_until
from tests.support.procs import REPO, http_status

pytestmark = [pytest.mark.processes, pytest.mark.long]


def user_env(tmp_path, **extra) -> dict[str, str]:
    """A new user's environment: no Redis URL, no secret; state under a temp COUNTERS_HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COUNTERS_", "CELERY_", "FLOWER_"))}
    env.update(COUNTERS_HOME=str(tmp_path / "home"), **extra)
    return env


def demo_rows(stdout: str) -> list[list[str]]:
    """The per-path rows: path, sent, hits, rank, PV (this burst), |, PV today, UV today, ..."""
    return [line.split() for line in stdout.splitlines() if line.startswith("/")]


def test_make_demo_counts_exactly_and_exits_cleanly(tmp_path):
    runs = []
    for visits in (600, 300):  # the second run finds the first one's totals in Redis
        result = subprocess.run(
            ["make", "demo", f"VISITS={visits}"],
            cwd=REPO,
            env=user_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        runs.append(result.stdout)
    first, second = runs
    assert re.search(r"private (redis|valkey)-server at", first)
    for stdout, visits in ((first, 600), (second, 300)):
        assert "this burst exact (sent = hits = rank = PV, per path): yes" in stdout
        rows = demo_rows(stdout)
        assert len(rows) == 8 and sum(int(row[1]) for row in rows) == visits
        assert all(row[1] == row[2] == row[3] == row[4] for row in rows)  # what this burst changed, only
    today_pv = sum(int(row[6]) for row in demo_rows(second))
    midnight_near = time.localtime().tm_hour == 0 and time.localtime().tm_min < 20  # visits span 10 minutes
    assert midnight_near or today_pv == 900  # the day's column: both runs, and said to be so
    assert "site today (all runs): " in second and "unique visitors" in second
    # who visits, on by default: the panels are filled (the demo's visitors send browsers' headers
    # from addresses of six countries), not "(unknown)"
    who = {line.split(":")[0]: line for line in second.splitlines() if line.startswith("who visits today")}
    assert set(who) == {f"who visits today, {kind}" for kind in ("browser", "os", "device", "country", "language")}
    assert "(unknown)" not in "".join(who.values()), who
    assert re.search(r"country: (GB|DE|FR|JP|US|BR) \d+", who["who visits today, country"]), who
    assert (tmp_path / "home" / "secret").stat().st_mode & 0o777 == 0o600
    for name in ("worker", "beat", "redis"):
        assert f"{name:<8} stopped" in second


def test_make_run_starts_the_stack_and_stops_it_on_ctrl_c(tmp_path):
    flower_port = free_port()
    log = open(tmp_path / "run.log", "w+")
    process = subprocess.Popen(
        ["make", "run"],
        cwd=REPO,
        env=user_env(tmp_path, FLOWER_PORT=str(flower_port)),
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    output = lambda: (tmp_path / "run.log").read_text()  # noqa: E731
    try:
        wait_until(lambda: "ready" in output(), timeout=180, what="the stack to be ready")
        # what a user does next: health passes at once (beat's every-minute job may not have run yet)
        health = subprocess.run(
            [sys.executable, "-m", "counters_tasks", "health"],
            cwd=REPO,
            env=user_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert health.returncode == 0 and "healthy" in health.stdout, health.stdout + health.stderr
        auth = (tmp_path / "home" / "flower-auth").read_text().strip()
        url = f"http://127.0.0.1:{flower_port}/api/workers"
        wait_until(lambda: http_status(url, auth) == 200, timeout=60, what="Flower to answer")
        assert http_status(url) == 401  # basic auth is on
        secrets = [auth.split(":", 1)[1], (tmp_path / "home" / "secret").read_text().strip()]
        for pid in (p for p in os.listdir("/proc") if p.isdigit()):  # what ps shows every user of the machine
            try:
                cmdline = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
            except OSError:
                continue
            assert not any(secret in cmdline for secret in secrets), (pid, cmdline)
        redis_url = private_redis_url(output())
        assert redis_url == "redis://127.0.0.1:6379/0", "6379 was free: the stack must take it"
        # a new shell: the env file's lines, as the README's snippets use them
        sourced = subprocess.run(
            ["bash", "-c", f"source {tmp_path}/home/env && echo $COUNTERS_REDIS_URL && command -v counters-tasks"],
            env=user_env(tmp_path, PATH="/usr/bin:/bin"),
            capture_output=True,
            text=True,
            timeout=30,
        )
        url_line, cli_path = sourced.stdout.split()
        assert url_line == redis_url and cli_path == str(REPO / ".venv" / "bin" / "counters-tasks")
    finally:
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole process group
        process.wait(90)
    text = output()
    stops = [line.split()[0] for line in text.splitlines() if line.endswith(" stopped")]
    assert stops == ["flower", "beat", "worker", "redis"], text[-3000:]  # the documented order
    worker_log = (tmp_path / "home" / "logs" / "worker.log").read_text()
    assert not re.search(r"Cannot connect|Connection refused|ConnectionError|Error 111", worker_log), worker_log[-3000:]
    import redis

    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    try:
        redis.Redis(port=port, socket_connect_timeout=1).ping()
        still_up = True
    except redis.ConnectionError:
        still_up = False
    assert not still_up, "the private redis-server must be stopped"


def private_redis_url(output: str) -> str:
    return next(
        line.split(" at ")[1].split()[0] for line in output.splitlines() if re.search(r"private \S+-server at", line)
    )


def test_port_6379_taken_is_said_loudly_and_the_cli_follows_the_env_file(tmp_path, redis_url):
    """Another Redis holds the wanted port: the stack says so, by whom, takes another port and
    writes it in the env file; the CLI in a new shell (no COUNTERS_REDIS_URL) finds the stack."""
    taken = int(redis_url.rsplit(":", 1)[1].split("/")[0])  # the test session's own Redis
    env = user_env(tmp_path, COUNTERS_REDIS_PORT=str(taken))
    log = open(tmp_path / "run.log", "w+")
    process = subprocess.Popen(
        [sys.executable, "-m", "counters_tasks", "run", "--no-flower", "--concurrency", "1"],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    output = lambda: (tmp_path / "run.log").read_text()  # noqa: E731
    try:
        wait_until(lambda: "ready" in output() or process.poll() is not None, timeout=120, what="the stack")
        text = output()
        assert re.search(rf"!!! port {taken} is taken by another (redis|valkey) server", text), text
        stack_url = private_redis_url(text)
        assert f":{taken}/" not in stack_url
        env_lines = (tmp_path / "home" / "env").read_text()
        assert f"export COUNTERS_REDIS_URL={stack_url}" in env_lines
        # the tag key pinned like the secret: no loss of the stack's Redis can split its figures
        assert f"export COUNTERS_TAG_KEY={(tmp_path / 'home' / 'tag-key').read_text().strip()}" in env_lines
        assert (tmp_path / "home" / "env").stat().st_mode & 0o777 == 0o600  # it holds the secret
        health = subprocess.run(
            [sys.executable, "-m", "counters_tasks", "health", "--json"],
            cwd=tmp_path,
            env=user_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
        )
        report = json.loads(health.stdout)
        assert report["redis"]["ok"] and report["workers"]["names"], health.stdout + health.stderr
    finally:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(90)


def test_a_stack_already_running_on_the_same_data_is_refused_plainly(tmp_path):
    """A Redis of an earlier `run` of this folder still up (the stack was SIGKILLed): a second
    `run` must not start another server on the same AOF files; it says which pid to stop."""
    from counters_tasks.local.redis_server import RedisServer

    home = tmp_path / "home"
    with RedisServer(home / "redis", port=free_port()) as leftover:
        env = user_env(tmp_path, COUNTERS_REDIS_PORT=str(leftover.port))
        result = subprocess.run(
            [sys.executable, "-m", "counters_tasks", "run", "--no-flower"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 1, result.stdout + result.stderr
        assert f"still runs on port {leftover.port}" in result.stderr and "Traceback" not in result.stderr
        assert f"kill {leftover.process.pid}" in result.stderr
        assert leftover.process.poll() is None  # left alone


def start_run(tmp_path, env: dict[str, str], *args: str, log: str = "run.log") -> tuple[subprocess.Popen, object]:
    """``counters-tasks run ARGS`` as a user starts it (its own process group), and its output so far."""
    with open(tmp_path / log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "counters_tasks", "run", "--concurrency", "1", *args],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return process, lambda: (tmp_path / log).read_text()


def test_flowers_port_taken_is_said_loudly_and_flower_takes_a_free_one(tmp_path):
    """Issue 40: `make run` failed when another program held Flower's port 5555. As for the
    Redis's port, the stack says who holds it and takes a free one; it also says whether the
    who-visits tables are on."""
    import socket

    with socket.socket() as holder:  # a program that is not Flower, on Flower's port: this test's process
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        env = user_env(tmp_path, FLOWER_PORT=str(taken), COUNTERS_REDIS_PORT=str(free_port()))
        process, output = start_run(tmp_path, env)
        try:
            wait_until(lambda: "ready" in output() or process.poll() is not None, timeout=180, what="the stack")
            text = output()
            assert process.poll() is None, text
            assert f"flower   !!! port {taken} is taken by pid {os.getpid()} (" in text, text
            port = int(re.search(r"flower listens on port (\d+) instead", text).group(1))
            assert port != taken and f"flower   http://127.0.0.1:{port} " in text
            auth = (tmp_path / "home" / "flower-auth").read_text().strip()
            url = f"http://127.0.0.1:{port}/api/workers"
            wait_until(lambda: http_status(url, auth) == 200, timeout=60, what="Flower to answer on its new port")
            assert re.search(r"^who +who visits tables on \(COUNTERS_CLIENT_TABLES\)", text, re.M), text  # the default
        finally:
            os.killpg(process.pid, signal.SIGINT)
            process.wait(90)


def test_make_demo_runs_beside_a_running_make_run(tmp_path):
    """Issue 40: `make demo` beside a running `make run` advised killing the run's Redis (which
    would break the running stack). The demo now runs beside it, on its Redis with a worker of its
    own, and leaves it running; a second `run` is refused naming the run's pid, not its Redis's."""
    import redis

    env = user_env(tmp_path, COUNTERS_REDIS_PORT=str(free_port()), COUNTERS_CLIENT_TABLES="on")
    process, output = start_run(tmp_path, env, "--no-flower")
    try:
        wait_until(lambda: "ready" in output() or process.poll() is not None, timeout=180, what="the stack")
        assert process.poll() is None, output()
        assert (
            "who      who visits tables on (COUNTERS_CLIENT_TABLES); pages of COUNTERS_CLIENT_PAGES: none" in output()
        )
        demo = subprocess.run(
            [sys.executable, "-m", "counters_tasks", "demo", "--visits", "300", "--concurrency", "1"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
        assert (
            "this one runs beside it" in demo.stdout
            and "this burst exact (sent = hits = rank = PV, per path): yes" in demo.stdout
        )
        assert process.poll() is None, output()  # the run's stack is left running
        redis.Redis.from_url(private_redis_url(output()), socket_timeout=5).ping()
        again = subprocess.run(
            [sys.executable, "-m", "counters_tasks", "run", "--no-flower"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert again.returncode == 1 and f"runs already (pid {process.pid})" in again.stderr, again.stderr
        assert f"kill {process.pid}" in again.stderr and "Traceback" not in again.stderr
    finally:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(90)
    stops = [line.split()[0] for line in output().splitlines() if line.endswith(" stopped")]
    assert stops == ["beat", "worker", "redis"], output()[-3000:]
    assert not (tmp_path / "home" / "stack.pid").exists()
