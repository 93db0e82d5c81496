"""The local stack of ``counters-tasks run`` (what ``make run`` runs), started as a user starts it,
with Flower: what it shows to other users of the machine, which Celery configuration its
processes load, and that ``counters-tasks health`` passes as soon as it says it is ready (beat's
every-minute job not run yet), without calling a beat alive for longer than ``--beat-max-age``."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from counters_tasks.local.redis_server import free_port
from counters_tasks.local.waiting import wait_until
from tests.support.procs import REPO, celery_env, http_status
from tests.support.servers import TEST_SECRET

pytestmark = pytest.mark.processes


def every_cmdline() -> Iterator[tuple[int, bytes]]:
    """``(pid, command line)`` of every process of the machine that can be read (what ``ps`` shows)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                yield int(entry.name), (entry / "cmdline").read_bytes()
            except OSError:  # gone meanwhile
                continue


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """``counters-tasks ARGS`` in another shell of the same user."""
    return subprocess.run(
        [sys.executable, "-m", "counters_tasks", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.long  # the whole stack with Flower (~20 s); make test-long also runs `make run` itself
def test_the_stack_hides_its_secrets_loads_the_checkouts_config_and_is_healthy_when_ready(
    raw_conn, redis_url, tmp_path
):
    """(``raw_conn``: the session's Redis emptied; a tag key another test left there would not be
    the one this stack pins, and the stack would rightly refuse it.)"""
    broker = redis_url.rsplit("/", 1)[0] + "/4"
    redis.Redis.from_url(broker).flushdb()
    flower_port = free_port()
    env = {k: v for k, v in celery_env(redis_url).items() if not k.startswith(("FLOWER_", "CELERY_"))}
    env.update(
        COUNTERS_HOME=str(tmp_path / "home"),
        FLOWER_PORT=str(flower_port),
        CELERY_BROKER_URL=broker,
        COUNTERS_CLEAN_EVERY="3600",
    )  # the cleaner's first run an hour away: the stack just started
    home = tmp_path / "home"
    with open(tmp_path / "run.log", "w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "counters_tasks", "run", "--concurrency", "1"],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    output = (tmp_path / "run.log").read_text
    try:
        wait_until(lambda: "ready" in output() or process.poll() is not None, timeout=120, what="the stack")
        assert process.poll() is None, output()
        health = cli(env, "health", "--json")  # what a user runs next: healthy, beat's first job still to come
        report = json.loads(health.stdout)
        assert health.returncode == 0, (report, output())
        assert report["jobs"]["clean_counters"]["last_started"] is None  # the job has not run: beat's start counts
        age = report["beat"]["started_age_seconds"]
        assert report["beat"]["ok"] and 0 < age < 60
        text = cli(env, "health")
        assert text.returncode == 0 and re.search(r"beat started \d+s ago", text.stdout), text.stdout
        # and no longer than --beat-max-age: a beat that started before it with its job never run is dead
        late = cli(env, "health", "--json", "--beat-max-age", str(age / 2))
        report = json.loads(late.stdout)
        assert late.returncode == 1 and not report["beat"]["ok"] and report["workers"]["ok"], report

        auth = (home / "flower-auth").read_text().strip()
        password = auth.split(":", 1)[1]
        api = f"http://127.0.0.1:{flower_port}/api/workers"
        wait_until(lambda: http_status(api, auth) == 200, timeout=60, what="Flower to answer with its password")
        assert http_status(api) == 401 and http_status(api, "admin:wrong") == 401
        seen = dict(every_cmdline())
        assert any(b"flower" in line for line in seen.values()), "Flower's process was not seen"
        for pid, line in seen.items():
            for secret in (password, TEST_SECRET):
                assert secret.encode() not in line, f"pid {pid} shows a secret on its command line: {line!r}"

        config = REPO / "celeryconfig.py"
        assert re.search(rf"^config +{re.escape(str(config))}", output(), re.M), output()
        for name in ("worker", "beat"):
            logged = (home / "logs" / f"{name}.log").read_text()
            assert f"Celery configuration celeryconfig ({config})" in logged, logged[-3000:]
    finally:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(90)
        redis.Redis.from_url(broker).flushdb()


def test_the_stacks_output_never_shows_the_redis_password(pinned_tag_key, monkeypatch, tmp_path):
    """Issue 30: a stack pointed at a Redis with a password (``COUNTERS_REDIS_URL`` given) printed
    the whole URL twice: in its ``redis`` line and in the ``export`` lines it shows. The env file
    keeps it (mode 600: other shells need it); what is printed shows ``***``. (Pinned: a stack's
    tag key is, which ``Stack.start`` sets before it writes the file.)"""
    from counters_tasks.core.settings import reset_settings
    from counters_tasks.local.stack import Stack

    password = "s3cret-stack-pass"
    url = f"redis://:{password}@127.0.0.1:6399/0"
    monkeypatch.setenv("COUNTERS_REDIS_URL", url)
    monkeypatch.setenv("COUNTERS_HOME", str(tmp_path / "home"))
    reset_settings()
    said: list[str] = []
    stack = Stack(flower=False, log=said.append)
    stack.home.mkdir(parents=True)
    stack.write_env_file()
    assert password in stack.env_file.read_text() and oct(stack.env_file.stat().st_mode)[-3:] == "600"
    assert said and not any(password in line for line in said), said
    assert any("redis://:***@127.0.0.1:6399/0" in line for line in said), said
    reset_settings()
