"""The query commands through the real entry point (``python -m counters_tasks.ops.cli``, which the
``counters-tasks`` console script calls): text and ``--json`` output, and the exit codes."""

from __future__ import annotations

import json
import re
import subprocess
from datetime import timedelta

import pytest

from counters_tasks import counters, ranking, sitestats, uniques
from counters_tasks.core.days import local_day
from counters_tasks.counters import bucket_start
from counters_tasks.local.redis_server import free_port
from counters_tasks.local.waiting import wait_until
from counters_tasks.ops import health
from counters_tasks.ops.views import uv_view
from tests.support import demo_data
from tests.support.procs import celery_env, cli, start_beat, start_worker
from tests.support.uv_marks import shown_uv

pytestmark = pytest.mark.processes


def run_cli(redis_url: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    return cli(celery_env(redis_url, COLUMNS="100", **env), *args)


def test_counter_json_equals_the_api_and_text_has_a_chart(raw_conn, redis_url):
    demo_data.seed(raw_conn)
    result = run_cli(redis_url, "counter", "hits", "--precision", "60", "--last", "12", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    start = bucket_start(data["now"], 60) - 11 * 60
    expected = counters.get_series(raw_conn, "hits", 60, start, data["now"], now=data["now"])
    assert [tuple(p) for p in data["points"]] == expected and len(expected) == 12
    assert data["total"] == sum(t for _, t in expected) > 0
    text = run_cli(redis_url, "counter", "hits", "-p", "60", "-n", "12")
    assert text.returncode == 0 and "hits" in text.stdout
    assert any(ch in text.stdout for ch in "▁▂▃▄▅▆▇█")  # the sparkline
    thirty = run_cli(redis_url, "counter", "hits", "--last", "30")
    rows = [line for line in thirty.stdout.splitlines() if re.match(r"\d\d:\d\d:\d\d ", line)]
    assert len(rows) == 30, thirty.stdout  # one row per bucket asked for (it used to stop at 20)
    listing = run_cli(redis_url, "counters", "--json")
    assert {"hits", "hits:/pricing", "signups"} <= set(json.loads(listing.stdout)["counters"])


def test_stats_top_pages_and_uniques_json_equal_the_api(raw_conn, redis_url):
    now = demo_data.seed(raw_conn)
    today = local_day(now)
    yesterday = today - timedelta(days=1)
    for args, first in (
        (["--day", "today"], today),
        (["--from", "yesterday", "--to", "today"], yesterday),
        (["--from", yesterday.isoformat()], yesterday),
    ):
        data = json.loads(run_cli(redis_url, "stats", *args, "--json").stdout)
        expected = sitestats.site_visit_range(raw_conn, first, today)
        assert (data["from"], data["to"], data["pv"], data["uv"]) == (
            first.isoformat(),
            today.isoformat(),
            expected.pv,
            expected.uv,
        )
        assert data["days"] == [
            {"day": d.day.isoformat(), "pv": d.pv, **uv_view(d.uv, False, 0.0), "skipped": 0} for d in expected.days
        ]  # the demo data skipped no request; each day's UV exact (the default mode)
        assert data["skipped"] == {} and data["skipped_total"] == 0
        assert data["uv_approximate"] is (first != today) and expected.pv > 0
    data = json.loads(run_cli(redis_url, "stats", "--from", "yesterday", "--path", "/pricing?x=1", "--json").stdout)
    page = sitestats.site_visit_range(raw_conn, yesterday, today, "/pricing")
    assert data["path"] == "/pricing" and (data["pv"], data["uv"]) == (page.pv, page.uv) and page.uv > 0
    text = run_cli(redis_url, "stats", "--from", "yesterday", "--path", "/pricing")
    assert f"UV {shown_uv(data)}" in text.stdout and data["uv_error"] == page.uv_error
    pages = json.loads(run_cli(redis_url, "top-pages", "--from", "yesterday", "--limit", "3", "--json").stdout)
    assert [tuple(p) for p in pages["pages"]] == sitestats.top_pages(raw_conn, yesterday, today, 3)
    assert len(pages["pages"]) == 3
    got = json.loads(run_cli(redis_url, "uniques", "--from", "yesterday", "--to", "today", "--json").stdout)
    expected_uniques = uniques.unique_visitors_range(raw_conn, yesterday, today)
    assert got["visitors"] == expected_uniques.visitors > 0 and got["missing_days"] == []
    assert got["days"] == [{"day": d.isoformat(), "visitors": n} for d, n in expected_uniques.days]
    text = run_cli(redis_url, "stats", "--from", "yesterday")
    assert text.returncode == 0 and f"PV {expected.pv}" in text.stdout
    assert "/pricing" in run_cli(redis_url, "top-pages", "--from", "yesterday").stdout
    assert str(expected_uniques.visitors) in run_cli(redis_url, "uniques", "--from", "yesterday").stdout


def test_top_json_equals_the_ranking(raw_conn, redis_url):
    demo_data.seed(raw_conn)
    result = run_cli(redis_url, "top", "posts", "--limit", "3", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert [tuple(p) for p in data["top"]] == ranking.Ranking(raw_conn, "posts").top(0, 3, withscores=True)
    assert (data["period_hours"], data["interval_hours"]) == (24, 1)
    text = run_cli(redis_url, "top", "posts")
    assert all(post in text.stdout for post in demo_data.POSTS)


@pytest.mark.parametrize(
    "args",
    [
        ["counter"],  # missing NAME
        ["counter", "hits", "--precision", "7"],  # not a precision (InvalidInput)
        ["counter", "hits", "--last", "0"],
        ["counter", "hits", "--precision", "x"],  # not an int
        ["top", "no-such-board"],
        ["top", "posts", "--limit", "0"],
        ["no-such-command"],
        ["health", "--bogus"],
        ["stats", "--day", "2026-13-01"],
        ["stats", "--day", "today", "--from", "yesterday"],
        ["stats", "--from", "today", "--to", "yesterday"],
        ["stats", "--from", "2020-01-01", "--to", "2024-01-01"],  # more than 400 days
        ["stats", "--path", ""],
        ["top-pages", "--limit", "0"],
        ["uniques", "--day", "someday"],
    ],
)
def test_usage_errors_exit_2(raw_conn, redis_url, args):
    demo_data.seed(raw_conn)
    result = run_cli(redis_url, *args)
    assert result.returncode == 2, (args, result.stdout, result.stderr)
    assert "Error" in result.stderr and not result.stdout


def test_unreachable_redis_exits_1(redis_url):
    dead = f"redis://127.0.0.1:{free_port()}/0"
    result = run_cli(redis_url, "counters", COUNTERS_REDIS_URL=dead)
    assert result.returncode == 1 and "Redis at" in result.stderr
    health = run_cli(redis_url, "health", "--json", COUNTERS_REDIS_URL=dead, CELERY_BROKER_URL=dead)
    assert health.returncode == 1
    report = json.loads(health.stdout)
    assert report["ok"] is False and report["redis"]["ok"] is False and report["queues"]["ok"] is False


def test_help_and_version_exit_0(redis_url):
    result = run_cli(redis_url, "--help")
    assert result.returncode == 0
    for command in ("run", "demo", "counter", "top", "health", "serve"):
        assert command in result.stdout
    assert "Exit codes" in result.stdout
    assert run_cli(redis_url, "--version").stdout.strip().endswith("0.1.0")
    serve_help = run_cli(redis_url, "serve", "--help").stdout
    assert "default: 127.0.0.1" in " ".join(serve_help.split())


def test_serve_refuses_a_malformed_auth_setting(redis_url):
    result = run_cli(redis_url, "serve", "--port", str(free_port()), COUNTERS_DASHBOARD_AUTH="no-colon")
    assert result.returncode == 1 and "COUNTERS_DASHBOARD_AUTH" in result.stderr


def test_health_without_workers_is_unhealthy_then_healthy_with_worker_and_beat(raw_conn, redis_url, tmp_path):
    broker = redis_url.rsplit("/", 1)[0] + "/3"
    result = run_cli(redis_url, "health", "--json", CELERY_BROKER_URL=broker)
    report = json.loads(result.stdout)
    assert result.returncode == 1 and report["redis"]["ok"] and not report["workers"]["ok"] and not report["beat"]["ok"]
    assert report["queues"] == {"ok": True, "visits": 0, "maintenance": 0}

    import redis

    broker_conn = redis.Redis.from_url(broker)
    broker_conn.flushdb()
    broker_conn.rpush("visits", *["{}"] * 3)  # three messages waiting (no worker consumes yet)
    result = run_cli(redis_url, "health", "--json", CELERY_BROKER_URL=broker)
    assert json.loads(result.stdout)["queues"]["visits"] == 3
    broker_conn.flushdb()

    env = celery_env(redis_url, CELERY_BROKER_URL=broker, COUNTERS_CLEAN_EVERY="0.5")
    worker = start_worker(env, tmp_path / "worker.log", concurrency=1)
    beat = start_beat(env, tmp_path, tmp_path / "beat.log")
    try:

        def healthy():
            r = run_cli(redis_url, "health", "--json", CELERY_BROKER_URL=broker)
            # healthy, and beat's cleaner has run (beat counts as alive from its start on)
            return r if r.returncode == 0 and json.loads(r.stdout)["beat"]["last_run_age_seconds"] is not None else None

        # first, in this process (no CLI start and no 1 s ping a try): beat's cleaner has run on a worker
        wait_until(
            lambda: health.check(raw_conn)["beat"].get("last_run_age_seconds") is not None,
            timeout=60,
            interval=0.2,
            what="beat's cleaner to have run",
        )
        result = wait_until(healthy, timeout=60, interval=0.5, what="health to pass with a worker and beat")
        report = json.loads(result.stdout)
        assert report["ok"] and report["workers"]["names"] and report["beat"]["last_run_age_seconds"] < 180
        job = report["jobs"]["clean_counters"]
        assert job["last_duration"] is not None and job["last_result"] is not None
        text = run_cli(redis_url, "health", CELERY_BROKER_URL=broker)
        assert text.returncode == 0 and "healthy" in text.stdout and "clean_counters" in text.stdout
    finally:
        beat.stop()
        worker.stop()
        broker_conn.flushdb()
        broker_conn.close()
