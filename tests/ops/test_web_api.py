"""The dashboard's JSON endpoints (in-process, Starlette's test client): same answers as the
views the CLI prints, errors as 400/503, and optional basic auth."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from counters_tasks import visits
from counters_tasks.core.days import local_day
from counters_tasks.core.settings import load_settings, reset_settings
from counters_tasks.errors import ConfigurationError
from counters_tasks.ops import views
from counters_tasks.ops.web import create_app
from tests.support import demo_data
from tests.support.dashboard import TestClient
from tests.support.servers import dead_client, use_settings


def fake_health(_conn):
    return {"ok": True}


@pytest.fixture
def client(conn):
    demo_data.seed(conn)
    return TestClient(create_app(conn, auth=None, health=fake_health))


def test_endpoints_answer_what_the_views_answer(client, conn):
    assert client.get("/api/counters").json() == views.counters_list(conn)
    assert client.get("/api/boards").json() == views.boards_list(conn)
    assert client.get("/api/top?board=posts&limit=4").json() == views.board_view(conn, "posts", 4)
    got = client.get("/api/counter?name=hits&precision=300&last=10").json()
    assert got == views.counter_view(conn, "hits", 300, 10, now=got["now"])
    assert client.get("/api/health").json() == {"ok": True}
    assert client.get("/api/config").json() == views.config_view()
    assert client.get("/api/stats?from=yesterday&to=today").json() == views.stats_view(conn, None, "yesterday", "today")
    assert client.get("/api/stats?day=today&path=/blog").json() == views.stats_view(conn, "today", path="/blog")
    assert client.get("/api/top-pages?from=yesterday&limit=3").json() == views.top_pages_view(
        conn, "yesterday", None, 3
    )
    assert client.get("/api/uniques?from=yesterday").json() == views.uniques_view(conn, None, "yesterday")
    assert client.get("/api/uniques").json()["visitors"] > 0  # default: today
    page = client.get("/")
    assert page.status_code == 200 and "static/chart.js" in page.text


@pytest.mark.parametrize(
    "url",
    [
        "/api/counter?precision=60",
        "/api/counter?name=hits&precision=61",
        "/api/counter?name=hits:/a&precision=1",  # a page's counter keeps no 1 s buckets: not zeros
        "/api/counter?name=hits&last=abc",
        "/api/top?board=nope",
        "/api/top?board=posts&limit=-1",
        "/api/top",
        "/api/stats?day=2026-02-30",
        "/api/stats?from=today&to=yesterday",
        "/api/stats?day=today&to=today",
        "/api/top-pages?limit=x",
        "/api/uniques?from=2000-01-01",
    ],
)
def test_bad_queries_are_400_with_a_reason(client, url):
    response = client.get(url)
    assert response.status_code == 400 and response.json()["error"]


def test_redis_down_is_503():
    response = TestClient(create_app(dead_client(), auth=None, health=fake_health)).get("/api/counters")
    assert response.status_code == 503 and "Redis" in response.json()["error"]


def test_basic_auth(conn, monkeypatch):
    use_settings(monkeypatch, COUNTERS_DASHBOARD_AUTH="ops:s3cret:with-colon")
    client = TestClient(create_app(conn, health=fake_health))
    assert client.get("/").status_code == 401
    assert client.get("/api/counters").status_code == 401
    assert client.get("/static/chart.js").status_code == 401
    assert "Basic" in client.get("/").headers["www-authenticate"]
    assert client.get("/api/counters", auth=("ops", "wrong")).status_code == 401
    assert client.get("/api/counters", headers={"Authorization": "Basic !!!"}).status_code == 401
    assert client.get("/api/counters", auth=("ops", "s3cret:with-colon")).status_code == 200
    monkeypatch.delenv("COUNTERS_DASHBOARD_AUTH")
    reset_settings()
    assert TestClient(create_app(conn, health=fake_health)).get("/api/counters").status_code == 200


@pytest.mark.parametrize("value", ["nocolon", ":pw", "user:"])
def test_malformed_auth_setting_is_refused(value):
    with pytest.raises(ConfigurationError):
        load_settings({"COUNTERS_DASHBOARD_AUTH": value})


def test_counters_come_in_pages_that_cover_every_name_once(conn):
    """65,000 names once made one 6 MB answer; now pages of at most 1,000, each name exactly once."""
    from counters_tasks import counters

    names = [f"page-{i}" for i in range(1500)]
    counters.write_counters(conn, {name: {86400: {0: 1}} for name in names})
    client = TestClient(create_app(conn, auth=None, health=fake_health))
    seen, cursor, pages = [], None, 0
    while True:
        query = {"limit": 400} | ({"cursor": cursor} if cursor else {})
        page = client.get("/api/counters", params=query).json()
        assert len(page["counters"]) <= 400
        seen += page["counters"]
        pages += 1
        cursor = page["next"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(names) and pages == 4
    assert client.get("/api/counters", params={"limit": 1001}).status_code == 400
    assert client.get("/api/counters", params={"cursor": "x"}).status_code == 400


def test_every_answer_forbids_framing_sniffing_and_foreign_scripts(client, conn):
    for path in ("/", "/api/counters", "/static/app.js", "/api/stats?day=nope"):
        headers = client.get(path).headers
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert "script-src" not in headers["content-security-policy"]  # default-src 'self': own files only
        assert headers["x-content-type-options"] == "nosniff" and headers["x-frame-options"] == "DENY"
    guarded = TestClient(create_app(conn, auth=("ops", "pw"), health=fake_health))
    assert guarded.get("/api/counters").headers["x-frame-options"] == "DENY"


@pytest.mark.parametrize(
    "host, auth, hosts, status",
    [
        ("127.0.0.1:8000", None, (), 200),
        ("localhost", None, (), 200),
        ("[::1]:8000", None, (), 200),
        ("evil.example", None, (), 400),  # DNS rebinding: a page of another site resolved to this machine
        ("stats.example.org", None, ("stats.example.org",), 200),
        ("evil.example", None, ("stats.example.org",), 400),
        ("evil.example", ("ops", "pw"), (), 200),  # with auth no Host list is needed (the password guards it)
        ("evil.example", ("ops", "pw"), ("stats.example.org",), 400),
    ],
)
def test_the_host_allowlist(conn, host, auth, hosts, status):
    client = TestClient(create_app(conn, auth=auth, health=fake_health, hosts=hosts), base_url=f"http://{host}")
    headers = {"Authorization": "Basic b3BzOnB3"} if auth else {}
    response = client.get("/api/counters", headers=headers)
    assert response.status_code == status, response.text
    assert response.headers["x-frame-options"] == "DENY"  # refusals carry the security headers too


def test_hosts_come_from_the_environment(conn, monkeypatch):
    monkeypatch.setenv("COUNTERS_DASHBOARD_HOSTS", "a.example, b.example")
    reset_settings()
    try:
        app = create_app(conn, auth=None, health=fake_health)
        assert TestClient(app, base_url="http://b.example").get("/api/counters").status_code == 200
        assert TestClient(app, base_url="http://c.example").get("/api/counters").status_code == 400
    finally:
        monkeypatch.delenv("COUNTERS_DASHBOARD_HOSTS")
        reset_settings()


def _visitors_on(conn, day_ts: float, count: int, path: str = "/", first: int = 1) -> None:
    """``count`` distinct visitors (IPs) with a view of ``path`` at ``day_ts``."""
    for i in range(first, first + count):
        visits.apply_visit(conn, f"198.51.100.{i % 250 + 1}" if i < 250 else f"2001:db8::{i:x}", path, None, day_ts)


def test_a_range_with_visitors_on_one_day_only_has_that_days_exact_uv(conn):
    """A week whose visitors all came today (a fresh ``make demo``, the dashboard's default
    range) showed the HyperLogLog union of the days, marked "≈ estimate", where today's exact
    figure is known: one day with visitors is that day's figure, exact (docs/api.md)."""
    now = time.time()
    today = local_day(now)
    _visitors_on(conn, now, 400)
    _visitors_on(conn, now, 300, path="/pricing")  # more than the 256 a path's day sketch keeps exactly
    week = {"start": (today - timedelta(days=6)).isoformat(), "end": today.isoformat()}
    site = views.stats_view(conn, **week)
    assert (site["uv"], site["uv_approximate"]) == (400, False)
    page = views.stats_view(conn, path="/pricing", **week)
    assert (page["uv"], page["uv_approximate"]) == (300, False)
    nobody = views.stats_view(conn, path="/nowhere", **week)
    assert (nobody["pv"], nobody["uv"], nobody["uv_approximate"]) == (0, 0, False)
    # the same through the dashboard's endpoint
    client = TestClient(create_app(conn, auth=None, health=fake_health))
    assert client.get("/api/stats", params={"from": week["start"], "to": week["end"]}).json() == site


def test_a_range_with_visitors_on_several_days_is_still_marked_an_estimate(conn):
    now = time.time()
    today = local_day(now)
    _visitors_on(conn, now, 400)
    _visitors_on(conn, now - 86400, 400, first=201)  # 200 of them again, 200 new
    _visitors_on(conn, now, 300, path="/pricing")
    _visitors_on(conn, now - 86400, 300, path="/pricing", first=201)
    week = {"start": (today - timedelta(days=6)).isoformat(), "end": today.isoformat()}
    site = views.stats_view(conn, **week)
    assert site["uv_approximate"] is True and abs(site["uv"] - 600) <= 20  # 0.81% standard error
    assert views.stats_view(conn, path="/pricing", **week)["uv_approximate"] is True


def test_one_day_in_hll_mode_is_still_marked_an_estimate(conn, monkeypatch):
    use_settings(monkeypatch, COUNTERS_UV_MODE="hll")
    now = time.time()
    today = local_day(now)
    _visitors_on(conn, now, 100)
    assert views.stats_view(conn, day="today")["uv_approximate"] is True
    week = views.stats_view(conn, start=(today - timedelta(days=6)).isoformat(), end=today.isoformat())
    assert week["uv_approximate"] is True and abs(week["uv"] - 100) <= 4
