"""Secrets never shown: with a ``requirepass`` password and an ACL user's password in
``COUNTERS_REDIS_URL``, an ACL user's in ``CELERY_BROKER_URL``, ``COUNTERS_SECRET``, a dashboard
password (``COUNTERS_DASHBOARD_AUTH``) and an API token, every failure is provoked (a wrong
password, Redis down, the broker down or refusing its user) and every output is searched for
each secret: the CLI commands' stdout and stderr, ``serve``'s HTTP answers and its log, the
worker's and beat's logs. A server is named by its URL with the password as ``***``
(``core.settings.redact_url``); Celery masks it as ``**`` in its own lines."""

from __future__ import annotations

import base64
import json
import subprocess
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from counters_tasks.local.redis_server import RedisServer, free_port
from counters_tasks.local.waiting import wait_until
from tests.support.procs import BROWSER_HEADERS, celery_env, cli, start_beat, start_serve, start_worker

pytestmark = pytest.mark.processes

REQUIREPASS = "rqpass-7f3a9c1e"
ACL_PASS = "aclpass-51d0e2b8"
BROKER_PASS = "brokerpass-2c8e7d14"
WRONG_PASS = "wrongpass-0d9f6a33"
SECRET = "hmacsecret-93b7c2f0"
DASHBOARD_PASS = "dashpass-c41e8a57"
SECRETS = (REQUIREPASS, ACL_PASS, BROKER_PASS, WRONG_PASS, SECRET, DASHBOARD_PASS)
"""Every secret the processes are given; the API token is added once made."""


def leaks(text: str, secrets: tuple[str, ...] = SECRETS) -> list[str]:
    return [secret for secret in secrets if secret in text]


@pytest.fixture
def servers(tmp_path):
    """The counters' Redis (a requirepass password, and an ACL user) and the broker's (an ACL
    user only: the default user is off), each stopped by the test or at its end."""
    counters = RedisServer(tmp_path / "counters").start()
    broker = RedisServer(tmp_path / "broker").start()
    admin = redis.Redis(port=counters.port)
    admin.acl_setuser(
        "counters", enabled=True, passwords=[f"+{ACL_PASS}"], keys=["*"], channels=["*"], commands=["+@all"]
    )
    admin.config_set("requirepass", REQUIREPASS)
    admin.close()
    admin = redis.Redis(port=broker.port)
    admin.acl_setuser(
        "celery", enabled=True, passwords=[f"+{BROKER_PASS}"], keys=["*"], channels=["*"], commands=["+@all"]
    )
    admin.acl_setuser("default", enabled=False)
    admin.close()
    yield counters, broker
    broker.stop()
    counters.stop()


def urls(counters: RedisServer, broker: RedisServer) -> dict[str, str]:
    return {
        "requirepass": f"redis://:{REQUIREPASS}@127.0.0.1:{counters.port}/0",
        "acl": f"redis://counters:{ACL_PASS}@127.0.0.1:{counters.port}/0",
        "wrong requirepass": f"redis://:{WRONG_PASS}@127.0.0.1:{counters.port}/0",
        "wrong acl": f"redis://counters:{WRONG_PASS}@127.0.0.1:{counters.port}/0",
        "broker": f"redis://celery:{BROKER_PASS}@127.0.0.1:{broker.port}/1",
        "wrong broker": f"redis://celery:{WRONG_PASS}@127.0.0.1:{broker.port}/1",
    }


def secret_env(counters_url: str, broker_url: str, **extra: str) -> dict[str, str]:
    return celery_env(
        counters_url,
        CELERY_BROKER_URL=broker_url,
        COUNTERS_SECRET=SECRET,
        COUNTERS_REDIS_CLUSTER="",
        COUNTERS_DASHBOARD_AUTH=f"ops:{DASHBOARD_PASS}",
        COLUMNS="200",
        **extra,
    )


FAILURES = {
    "the counters' requirepass password is wrong": ("wrong requirepass", "broker", [("stats",), ("health", "--json")]),
    "the counters' ACL user's password is wrong": ("wrong acl", "broker", [("top-pages",), ("import", "access.log")]),
    "the broker's ACL user's password is wrong": (
        "requirepass",
        "wrong broker",
        [("dead-letters", "list"), ("health",)],
    ),
}
"""Each failure provoked while both servers run: (the counters' URL, the broker's, the commands run)."""
OUTAGES = {
    "the counters' Redis is down": (
        "acl",
        "broker",
        [("sources",), ("counter", "hits"), ("tokens", "list"), ("health",)],
    ),
    "the broker is down": ("requirepass", "broker", [("dead-letters", "list")]),
}
"""Run once both servers are stopped, with the right passwords. Every command that reads Redis goes
through one of ``query`` (stats, top-pages, sources, counter, tokens), ``import``'s own errors,
the dead letters' (the broker) or health: each is met with at least one failure above."""


def test_no_cli_command_shows_a_password_whatever_fails(servers, tmp_path):
    counters, broker = servers
    url = urls(counters, broker)
    (tmp_path / "access.log").write_text(
        '192.0.2.1 - - [10/Oct/2025:13:55:36 +0000] "GET /a HTTP/1.1" 200 5 "-" "Mozilla/5.0"\n'
    )

    def run_all(failures: dict) -> list[tuple[str, tuple[str, ...], subprocess.CompletedProcess]]:
        runs = [
            (failure, args, secret_env(url[counters_url], url[broker_url]))
            for failure, (counters_url, broker_url, commands) in failures.items()
            for args in commands
        ]

        def run(item: tuple[str, tuple[str, ...], dict[str, str]]):
            failure, args, env = item
            return failure, args, cli(env, *args, cwd=tmp_path)

        with ThreadPoolExecutor(4) as pool:  # as the user runs them, a few at a time
            return list(pool.map(run, runs))

    results = run_all(FAILURES)
    broker.stop()
    counters.stop()
    results += run_all(OUTAGES)
    shown = [
        (failure, " ".join(args), leaks(result.stdout + result.stderr), result.stdout + result.stderr)
        for failure, args, result in results
        if leaks(result.stdout + result.stderr)
    ]
    assert not shown, "\n\n".join(
        f"{failure}: `counters-tasks {args}` shows {found}:\n{output[-1500:]}" for failure, args, found, output in shown
    )
    assert all(result.returncode == 1 for _, _, result in results), [
        (args, result.returncode, result.stderr[-300:]) for _, args, result in results if result.returncode != 1
    ]
    # the server is still named, its password hidden
    said = {(failure, args): result.stdout + result.stderr for failure, args, result in results}
    assert (
        f"Redis at redis://:***@127.0.0.1:{counters.port}/0: AuthenticationError"
        in said["the counters' requirepass password is wrong", ("stats",)]
    )
    assert (
        f"Redis at redis://counters:***@127.0.0.1:{counters.port}/0: ConnectionError"
        in said["the counters' Redis is down", ("sources",)]
    )
    assert (
        f"dead letters at redis://celery:***@127.0.0.1:{broker.port}/1: AuthenticationError"
        in said["the broker's ACL user's password is wrong", ("dead-letters", "list")]
    )


def request(base: str, path: str, auth: str | None = None, token: str | None = None) -> tuple[int, str]:
    headers = dict(BROWSER_HEADERS)
    if auth:
        headers["Authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        with urllib.request.urlopen(urllib.request.Request(base + path, headers=headers), timeout=30) as answer:
            return answer.status, answer.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def test_serve_shows_no_secret_in_its_answers_or_its_log(servers, tmp_path):
    counters, broker = servers
    url = urls(counters, broker)
    env = secret_env(url["acl"], url["broker"])
    made = cli(env, "tokens", "create", "secrets-test")
    assert made.returncode == 0, made.stderr
    token = made.stdout.splitlines()[0].strip()
    secrets = (*SECRETS, token)
    process, base = start_serve(env, tmp_path / "serve.log", auth=True)
    answers: list[tuple[str, int, str]] = []
    user = f"ops:{DASHBOARD_PASS}"

    def ask(what: str, path: str, **credentials: str) -> int:
        status, body = request(base, path, **credentials)
        answers.append((f"{what}: {path}", status, body))
        return status

    try:
        wait_until(lambda: _answers(base), timeout=30, what="serve to answer")
        assert ask("up", "/api/stats", auth=user) == 200
        assert ask("up", "/api/stats", token=token) == 200
        assert ask("a wrong password", "/api/stats", auth=f"ops:{WRONG_PASS}") == 401
        assert ask("a wrong token", "/api/stats", token="ctk_" + WRONG_PASS) == 401
        assert ask("up", "/metrics", token=token) == 200
        assert ask("up", "/api/health", auth=user) == 200
        broker.stop()
        wait_until(
            lambda: "ConnectionError" in request(base, "/api/health", auth=user)[1],
            timeout=30,
            what="health to see the broker down",
        )
        assert ask("the broker down", "/api/health", auth=user) == 200  # a report saying so
        assert ask("the broker down", "/metrics", auth=user) == 200
        counters.stop()
        assert ask("Redis down", "/api/stats", auth=user) == 503
        assert ask("Redis down", "/api/stats", token=token) == 503  # the token cannot be checked
        assert ask("Redis down", "/api/top-pages", auth=user) == 503
        wait_until(
            lambda: not json.loads(request(base, "/api/health", auth=user)[1])["redis"]["ok"],
            timeout=30,
            what="health to see Redis down",
        )
        assert ask("Redis down", "/api/health", auth=user) == 200
        assert ask("Redis down", "/metrics", auth=user) in (200, 503)
    finally:
        process.terminate()
        process.wait(15)
    shown = [
        (what, status, leaks(body, secrets), body[:1500]) for what, status, body in answers if leaks(body, secrets)
    ]
    assert not shown, shown
    log = (tmp_path / "serve.log").read_text(errors="replace")
    assert not leaks(log, secrets), log[-3000:]
    assert "GET /api/stats" in log  # the log searched is the one of these requests


def _answers(base: str) -> bool:
    try:
        return request(base, "/api/config")[0] == 401  # basic auth: up, and asking for it
    except OSError:
        return False


def test_worker_and_beat_logs_show_no_secret_through_outages(servers, tmp_path):
    counters, broker = servers
    url = urls(counters, broker)
    env = secret_env(url["requirepass"], url["broker"], COUNTERS_CLEAN_EVERY="0.5")
    worker = start_worker(env, tmp_path / "worker.log")
    beat = start_beat(env, tmp_path, tmp_path / "beat.log")
    refused = start_worker(secret_env(url["requirepass"], url["wrong broker"]), tmp_path / "refused.log", name="w2")
    try:
        worker.wait_ready()
        wait_until(
            lambda: "clean_counters" in worker.output() and "succeeded" in worker.output(),
            timeout=30,
            what=f"beat's job run; log:\n{worker.output()[-2000:]}",
        )
        wait_until(
            lambda: "Cannot connect to" in refused.output(),
            timeout=30,
            what=f"the worker with a wrong broker password to say so; log:\n{refused.output()[-2000:]}",
        )
        counters.stop()
        wait_until(
            lambda: "ConnectionError" in worker.output() or "Error 111" in worker.output(),
            timeout=30,
            what=f"the worker to meet the counters' Redis down; log:\n{worker.output()[-2000:]}",
        )
        broker.stop()
        wait_until(
            lambda: "Cannot connect to" in worker.output().split("Error 111", 1)[-1],
            timeout=30,
            what=f"the worker to meet the broker down; log:\n{worker.output()[-2000:]}",
        )
        wait_until(
            lambda: (
                "beat: Connection error" in beat.output()
                or "Cannot connect" in beat.output()
                or "Error 111" in beat.output()
            ),
            timeout=30,
            what=f"beat to meet the broker down; log:\n{beat.output()[-2000:]}",
        )
    finally:
        refused.kill()
        beat.kill()
        worker.kill()
    for process in (worker, beat, refused):
        output = process.output()
        assert not leaks(output), f"{process.log.name} shows {leaks(output)}:\n{output[-3000:]}"
    assert f"celery:**@127.0.0.1:{broker.port}" in worker.output()  # the broker named, as Celery masks it


def test_a_settings_error_does_not_show_the_url_password():
    result = cli(secret_env(f"http://:{REQUIREPASS}@127.0.0.1:{free_port()}/0", "redis://127.0.0.1:1/1"), "stats")
    assert result.returncode == 1 and "COUNTERS_REDIS_URL must be" in result.stderr
    assert not leaks(result.stdout + result.stderr), result.stderr
    broker = cli(secret_env("redis://127.0.0.1:1/0", f"redis+socket://:{BROKER_PASS}@/tmp/r.sock?db=1"), "stats")
    assert broker.returncode == 1 and "virtual_host" in broker.stderr
    assert not leaks(broker.stdout + broker.stderr), broker.stderr
