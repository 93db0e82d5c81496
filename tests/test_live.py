"""Visitors right now (``counters_tasks.live``): distinct visitors of each site in the last few
minutes, from every route that writes page views, on ``/api/now`` and ``/metrics``."""

from __future__ import annotations

import json
import time

import pytest

from counters_tasks import live, sitestats, visits
from counters_tasks.ops.web import create_app
from counters_tasks.store import keys
from tests.support.dashboard import TestClient
from tests.support.servers import use_settings

SITES = {"blog": {"timezone": "Asia/Tokyo"}}


@pytest.mark.cluster
@pytest.mark.usefixtures("bound_deployment")
def test_distinct_visitors_of_the_last_minutes_per_site(raw_conn, monkeypatch):
    use_settings(monkeypatch, COUNTERS_SITES=json.dumps(SITES))
    now = time.time()
    batch = [{"ip": f"198.51.100.{n % 3}", "path": f"/{n}", "ts": now - 30} for n in range(7)]
    batch += [{"ip": "198.51.100.9", "path": "/", "ts": now - 10, "site": "blog"}]
    batch += [{"ip": "198.51.100.77", "path": "/", "ts": now - 3600}]  # an hour ago: not now
    visits.apply_visits(raw_conn, batch, message_id="b1")
    visits.apply_visits(raw_conn, batch, message_id="b1")  # redelivered: nothing changes
    visits.apply_visits(raw_conn, batch[:2], message_id="b2")  # the same visitors again: still distinct
    sitestats.record_visit(raw_conn, "198.51.100.50", "/", now - 5)  # the PV/UV-only route counts too
    assert live.visitors_now(raw_conn) == 4
    assert live.visitors_now(raw_conn, site="blog") == 1
    assert live.visitors_now_by_site(raw_conn) == {"default": 4, "blog": 1}
    assert live.visitors_now(raw_conn, now=now + live.WINDOW_MINUTES * 60 + 60) == 0  # the window moved on
    ttl = raw_conn.ttl(keys.live_minute("", int((now - 30) // 60)))
    assert 0 < ttl <= live.KEEP_SECONDS


@pytest.mark.cluster
def test_old_views_write_no_keys_of_now(raw_conn):
    visits.apply_visits(
        raw_conn, [{"ip": "198.51.100.1", "path": "/", "ts": 1_430_000_000 + n} for n in range(50)], message_id="import"
    )
    assert not [k for k in raw_conn.scan_iter(match="*live:*")]
    assert live.visitors_now(raw_conn) == 0


def test_now_on_the_api_and_in_metrics(raw_conn, monkeypatch):
    use_settings(monkeypatch, COUNTERS_SITES=json.dumps(SITES))
    visits.apply_visit(raw_conn, "198.51.100.1", "/", site="blog")
    visits.apply_visit(raw_conn, "198.51.100.2", "/", site="blog")
    client = TestClient(create_app(raw_conn, auth=False))
    assert client.get("/api/now", params={"site": "blog"}).json() == {
        "site": "blog",
        "visitors": 2,
        "window_minutes": live.WINDOW_MINUTES,
    }
    assert client.get("/api/now").json()["visitors"] == 0
    text = client.get("/metrics").text
    assert 'counters_visitors_now{site="blog"} 2.0' in text and 'counters_visitors_now{site="default"} 0.0' in text
