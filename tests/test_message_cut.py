"""A message's cut (issue 42): the parts of a message's write, and so their dedupe ids, are a
function of the message alone, the same under every setting and version. A message applied in
part by a worker of one setting and delivered again, whole, to a worker of another counts every
view once."""

from __future__ import annotations

import time
import uuid

import pytest
import redis

from counters_tasks import counters, sitestats, uniques, visits
from counters_tasks.core.days import local_day
from counters_tasks.core.settings import get_settings
from counters_tasks.sitestats import site_day, upgrade
from counters_tasks.store import deployment
from tests.faults.test_duplicates import LosesConnection
from tests.support.servers import empty, is_cluster_run, use_settings

TS = float(int(time.time()))
VIEWS = 250


def flood(n: int = VIEWS) -> list[dict]:
    """``n`` views of one day, each of a new user agent, language and country: the worst input
    the API accepts for a ``site_day`` call (``tests/core/test_clients.py``'s flood)."""
    return [
        {
            "ip": f"{1 + n_ % 200}.{n_ % 97}.{n_ % 13}.{n_ % 251}",
            "path": f"/cut/{n_ % 7}",
            "ts": TS,
            "user_agent": f"Mozilla/5.0 (X11; Linux x86_64) Gecko/20100101 Firefox/{n_}.{n_ % 89}",
            "language": chr(97 + n_ % 400 // 26) + chr(97 + n_ % 26),
        }
        for n_ in range(n)
    ]


def day_pv(conn) -> int:
    return sitestats.site_visit_info(conn, local_day(TS)).pv


def apply_in_part(conn, batch: list[dict], message_id: str) -> int:
    """Apply ``batch`` with the connection lost after a growing number of commands, until the
    day's page views are some but not all of the batch (a message applied in part): returns them."""
    for budget in range(1, 200):
        empty(conn)  # (the tag key kept: a process's first write also checks the deployment)
        uniques.forget_expected()
        with pytest.raises(redis.ConnectionError):
            visits.apply_visits(LosesConnection(conn.connection_pool, budget), batch, message_id=message_id)
        pv = day_pv(conn)
        if 0 < pv < len(batch):
            return pv
    raise AssertionError("no budget applied the message in part")


@pytest.mark.skipif(is_cluster_run(), reason="wraps a single-server client")
@pytest.mark.parametrize("first, then", [("on", "off"), ("off", "on")])
def test_a_message_applied_in_part_under_one_setting_counts_once_under_another(raw_conn, monkeypatch, first, then):
    """COUNTERS_CLIENT_TABLES ``first`` on the worker that applied part of the message (its
    connection lost after some ``site_day`` calls), ``then`` on the one it is delivered to again:
    every figure counted once (issue 32's caveat: the who-visits cap cut the views differently)."""
    batch, message_id = flood(), str(uuid.uuid4())
    visits.apply_visits(raw_conn, flood(1), message_id=None)  # (the deployment made: its tag key kept)
    use_settings(monkeypatch, COUNTERS_CLIENT_TABLES=first)
    part = apply_in_part(raw_conn, batch, message_id)
    assert 0 < part < VIEWS
    use_settings(monkeypatch, COUNTERS_CLIENT_TABLES=then)
    visits.apply_visits(raw_conn, batch, message_id=message_id)
    visits.apply_visits(raw_conn, batch, message_id=message_id)  # and once more: nothing changes
    day = local_day(TS)
    assert day_pv(raw_conn) == VIEWS, f"{part} views applied first"
    for n in range(7):
        assert sitestats.site_visit_info(raw_conn, day, f"/cut/{n}").pv == len(range(n, VIEWS, 7))
    assert sum(pv for _path, pv in sitestats.top_pages(raw_conn, day, day, 100)) == VIEWS
    assert counters.get_counter(raw_conn, "hits", 86400, now=TS) == [(counters.bucket_start(TS, 86400), VIEWS)]


def layout1_cut(views, message_id):
    """Layout 1's ``_parts``: its cut with the who-visits cap (as a layout-1 worker of the
    COUNTERS_CLIENT_TABLES in force made it), its parts named ``<id>/d<n>``."""
    parts = upgrade.layout1_parts(views, message_id or "", get_settings().client_tables)
    return [part for part, _id in parts], [None if message_id is None else part_id for _part, part_id in parts]


@pytest.mark.skipif(is_cluster_run(), reason="wraps a single-server client")
@pytest.mark.parametrize("tables", ["on", "off"])
def test_a_message_applied_in_part_at_layout_1_counts_once_after_the_upgrade(raw_conn, monkeypatch, tables):
    """Issue 42: a message applied in part by a layout-1 worker (its markers ``<id>/d<n>`` under
    layout 1's cut), then ``counters-tasks migrate``, then the message delivered again, whole, to a
    layout-2 worker: every figure counted once, and once more it changes nothing. (The layout-1
    worker here is this code with layout 1's cut and marker: tests/system/test_upgrade.py runs
    the real one.)"""
    use_settings(monkeypatch, COUNTERS_CLIENT_TABLES=tables)
    batch, message_id = flood(), str(uuid.uuid4())
    with monkeypatch.context() as layout1:
        layout1.setattr(deployment, "LAYOUT", 1)
        layout1.setattr(site_day, "_parts", layout1_cut)
        visits.apply_visits(raw_conn, flood(1), message_id=None)  # (the deployment made, at layout 1)
        part = apply_in_part(raw_conn, batch, message_id)
        assert raw_conn.hget(deployment.marker_name(), "layout") == b"1"
    assert 0 < part < VIEWS
    assert deployment.migrate(raw_conn) == "migrated the key layout 1 -> 2"
    assert deployment.upgrade(raw_conn) is None  # (this process reads the marker on its next check)
    deployment.ensure(raw_conn)
    upgrading = deployment.upgrade(raw_conn)
    assert upgrading is not None and upgrading.client_tables == (tables == "on")
    assert visits.apply_visits(raw_conn, batch, message_id=message_id) == VIEWS
    visits.apply_visits(raw_conn, batch, message_id=message_id)
    day = local_day(TS)
    assert day_pv(raw_conn) == VIEWS, f"{part} views applied by layout 1"
    for n in range(7):
        assert sitestats.site_visit_info(raw_conn, day, f"/cut/{n}").pv == len(range(n, VIEWS, 7))
    if tables == "on":
        assert sum(row.pv for row in sitestats.top_clients(raw_conn, day, day, "device", 100)) == VIEWS
    assert counters.get_counter(raw_conn, "hits", 86400, now=TS) == [(counters.bucket_start(TS, 86400), VIEWS)]


def test_the_upgrades_window_is_the_layout_1_dedupe_ttl(raw_conn):
    """``counters-tasks migrate`` from layout 1 records when and the layout-1 settings; the window in
    which a layout-2 write reads layout 1's markers ends with their TTL."""
    visits.apply_visits(raw_conn, flood(1), message_id=None)
    raw_conn.hset(deployment.marker_name(), "layout", 1)
    before = time.time()
    assert deployment.migrate(raw_conn) == "migrated the key layout 1 -> 2"
    marker = {k.decode(): v.decode() for k, v in raw_conn.hgetall(deployment.marker_name()).items()}
    assert marker["layout"] == "2" and before <= float(marker["migrated_at"]) <= time.time()
    assert marker["layout1_dedupe_ttl"] == str(get_settings().dedupe_ttl) and marker["layout1_client_tables"] == "on"
    deployment.ensure(raw_conn)
    upgrading = deployment.upgrade(raw_conn)
    assert upgrading is not None and upgrading.until == float(marker["migrated_at"]) + get_settings().dedupe_ttl
    assert deployment.upgrade(raw_conn, now=upgrading.until - 1) == upgrading
    assert deployment.upgrade(raw_conn, now=upgrading.until) is None
