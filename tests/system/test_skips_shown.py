"""Scripted traffic is skipped, never silently: a Flask site under gunicorn (the package's
middleware, a real worker) gets 200 requests from a script that sends no User-Agent, and a few
from a browser. The scripted page views are not page views (the page view rule's ``crawler``),
and every place that shows the day's figures says so beside them: ``counters-tasks stats``
(its table and its JSON), the dashboard's ``/api/stats``, and ``health``, which warns when most of
a day's requests were skipped. The expected numbers are the requests this test sent."""

from __future__ import annotations

import http.client
import json
import time

import pytest

from counters_tasks.core.days import local_day
from counters_tasks.local.redis_server import free_port
from counters_tasks.local.waiting import wait_until
from counters_tasks.ops import views
from tests.support.faults import drain_and_stop
from tests.support.procs import Server, celery_env, cli, purge_broker, start_worker

pytestmark = [pytest.mark.processes, pytest.mark.workers]

SCRIPTED_PAGES, SCRIPTED_STATIC, BROWSER_PAGES = 170, 30, 10


def scripted_get(port: int, path: str) -> int:
    """A GET as a script sends it: no User-Agent, no Accept (``http.client`` adds neither)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.putrequest("GET", path, skip_accept_encoding=True)
        connection.endheaders()
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


@pytest.fixture
def scripted_site(raw_conn, redis_url, tmp_path):
    """The requests served and applied: the environment of the site's processes."""
    wait_until(lambda: (time.time() + 60) % 86400 > 120, timeout=200, what="a time away from midnight (UTC)")
    env = celery_env(redis_url, ONE_SITE_KIND="flask")
    purge_broker(redis_url)
    worker = start_worker(env, tmp_path / "worker.log", concurrency=1).wait_ready()
    port = free_port()
    server = Server(
        ["gunicorn", "-w", "1", "-b", f"127.0.0.1:{port}", "tests.support.one_site:application"],
        env,
        tmp_path / "gunicorn.log",
        port,
    )
    try:
        for n in range(SCRIPTED_PAGES):
            assert scripted_get(port, f"/page{n % 7}") == 200
        for _ in range(SCRIPTED_STATIC):
            assert scripted_get(port, "/static/app.css") == 200
        for n in range(BROWSER_PAGES):
            assert server.get(f"/page{n}")[0] == 200
    finally:
        assert server.stop() == 0, server.log.read_text()[-3000:]
    drain_and_stop(env, worker)
    return env


def test_scripted_requests_are_shown_beside_the_figures(raw_conn, scripted_site):
    env = scripted_site
    today = local_day(time.time()).isoformat()
    out = cli(env, "stats", "--day", "today", "--json")
    assert out.returncode == 0, out.stderr
    stats = json.loads(out.stdout)
    assert stats["pv"] == BROWSER_PAGES
    probes = stats["skipped"].pop("not_page")  # the test's own readiness probes of /health (plain text)
    assert stats["skipped"] == {"crawler": SCRIPTED_PAGES, "static": SCRIPTED_STATIC} and probes >= 1
    skipped = SCRIPTED_PAGES + SCRIPTED_STATIC + probes
    assert stats["skipped_total"] == skipped
    assert stats["days"] == [{"day": today, "pv": BROWSER_PAGES, **views.uv_view(1, False, 0.0), "skipped": skipped}]

    table = cli(env, "stats", "--day", "today").stdout
    assert f"skipped {skipped} requests" in table and f"crawler {SCRIPTED_PAGES}" in table
    assert "skipped" in cli(env, "stats", "--day", "today", "--format", "csv").stdout.splitlines()[0]

    from counters_tasks.ops.web import create_app
    from tests.support.dashboard import TestClient

    api = TestClient(create_app(raw_conn, auth=None)).get("/api/stats?day=today").json()
    assert api["skipped"] == stats["skipped"] | {"not_page": probes} and api["skipped_total"] == skipped

    health = cli(env, "health", "--json", "--timeout", "1")
    report = json.loads(health.stdout)
    [warning] = report["traffic"]["warnings"]
    assert f"{skipped} of today's {skipped + BROWSER_PAGES} requests" in warning
    assert "crawler" in warning
    assert "skipped" in cli(env, "health", "--timeout", "1").stdout
