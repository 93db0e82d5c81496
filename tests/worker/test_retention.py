"""The retention pass (issue 44, ``worker.retention``): each table's data of a site's day goes once
the day is past its tier's horizon (COUNTERS_VISITOR_DAYS for visitor-level data, COUNTERS_AGGREGATE_DAYS
for the day's figures), in the site's own zone, whatever TTL it was written with; a longer horizon
re-times what is stored; a pass with nothing due costs the same whatever is stored.

The data is written through the kinds' real payload paths (visits with session ids, a path viewed
by 300 visitors so its day's sketch is a HyperLogLog, events, a funnel), over 20 days for two sites
in different zones; the keys a pass must remove are found by a plain-Python reading of the key
names (the day in each, its tier by the table's key pattern) and the zones."""

from __future__ import annotations

import json
import re
import time
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner

from counters_tasks import payloads, skips, tasks
from counters_tasks.events import definitions
from counters_tasks.events.kind import EVENT
from counters_tasks.local.waiting import wait_until
from counters_tasks.ops.cli import cli
from counters_tasks.store import day_registry
from counters_tasks.visits import VISIT
from counters_tasks.worker import retention
from counters_tasks.worker.maintenance import job_status
from tests.ops.test_metrics import scrape_app, value
from tests.support.procs import celery_env, purge_broker, start_worker
from tests.support.servers import expires_at, is_cluster_run, use_settings

pytestmark = pytest.mark.cluster  # (make test-cluster runs them on a 3-master cluster too)

DAY = 86_400
UA = "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0"
ZONES = {"": "UTC", "blog": "Pacific/Honolulu"}
SITES = json.dumps({"blog": {"hosts": ["blog.example.com"], "timezone": "Pacific/Honolulu"}})
VISITOR_PATTERN = re.compile(r"\}:(vis|hll|pairs|shard|levels|overflow|open|res|step):")
AGGREGATE_PATTERN = re.compile(r"\}:(day|rhll|pages|ptop|src[a-z]|who|count|expected):")
DAY_IN_KEY = re.compile(r"(?:(blog)%1F)?(?:%1E[^%:]*%1F)?(\d{4}-\d{2}-\d{2})")
OWN_KEYS = (":days:{days}:", ":retention", ":lock:", ":job:")
"""The pass's own keys and the day registry: not data of a day."""


@pytest.fixture
def two_sites(monkeypatch):
    use_settings(
        monkeypatch,
        COUNTERS_SITES=SITES,
        COUNTERS_VISITOR_DAYS=7,
        COUNTERS_AGGREGATE_DAYS=12,
        COUNTERS_DAY_GRACE_DAYS=7,
    )


def write_days(conn, now: float, days: int, *, busy_day: int | None = None) -> None:
    """``days`` days of visits (with session ids), events and skips for both sites, through the
    kinds' payload paths; on ``busy_day`` (days ago), 300 visitors of one path (a HyperLogLog)."""
    for ago in range(days):
        for site in ("", "blog"):
            ts = now - ago * DAY - 60
            visits = [
                {
                    "ip": f"10.0.{ago}.{n}",
                    "path": f"/p{n % 3}",
                    "ts": ts,
                    "site": site or None,
                    "session_id": f"{ago:04x}{n:04x}-0000-4000-8000-000000000000",
                    "referrer": "https://news.example.org/x",
                    "user_agent": UA,
                    "language": "pt-PT",
                }
                for n in range(5)
            ]
            if ago == busy_day:
                visits += [
                    {
                        "ip": f"10.9.{n // 250}.{n % 250}",
                        "path": "/busy",
                        "ts": ts,
                        "site": site or None,
                        "user_agent": UA,
                    }
                    for n in range(300)
                ]
            assert payloads.apply_payload(conn, VISIT, visits, message_id=f"v-{site}-{ago}") == len(visits)
            events = [
                {"name": "signup", "ts": ts, "ip": f"10.0.{ago}.1", "site": site or None, "props": {"plan": "pro"}}
            ]
            if ago == busy_day:  # (each sketch of the event, its name's and its value's, a HyperLogLog)
                events += [
                    {
                        "name": "signup",
                        "ts": ts,
                        "ip": f"10.8.{n // 250}.{n % 250}",
                        "site": site or None,
                        "props": {"plan": "pro"},
                    }
                    for n in range(300)
                ]
            assert payloads.apply_payload(conn, EVENT, events, message_id=f"e-{site}-{ago}") == len(events)
            skipped = [{"route": skips.MIDDLEWARE, "reason": "app", "count": 2, "ts": ts, "site": site or None}]
            skips.count_skipped(conn, skipped, message_id=f"s-{site}-{ago}")


def day_of_key(name: str) -> tuple[str, date] | None:
    """The site's scope and day a key is of (None: not a day's key)."""
    found = DAY_IN_KEY.search(name)
    return None if found is None else (found.group(1) or "", date.fromisoformat(found.group(2)))


def tier_of_key(name: str) -> str:
    if ":skipped:{skipped}:day:" in name:
        return "aggregate"
    if VISITOR_PATTERN.search(name):
        return "visitor-level"
    assert AGGREGATE_PATTERN.search(name), f"a day's key of no known tier: {name}"
    return "aggregate"


def due(scope: str, day: date, horizon: int, now: float) -> bool:
    """Plain Python: the day's end in the site's zone plus ``horizon`` days is past."""
    end = datetime.combine(day + timedelta(days=1), datetime.min.time(), ZoneInfo(ZONES[scope])).timestamp()
    return end + horizon * DAY <= now


def snapshot(raw_conn) -> dict[str, bytes]:
    """Every data key with its DUMP (equal DUMPs: an unchanged value)."""
    out = {}
    for key in raw_conn.scan_iter(count=1000):
        name = key.decode()
        if not any(part in name for part in OWN_KEYS):
            out[name] = raw_conn.dump(key)
    return out


def expected_gone(before: dict[str, bytes], horizons: dict[str, int], now: float) -> set[str]:
    gone = set()
    for name in before:
        of = day_of_key(name)
        if of is not None and ":seen:" not in name and due(*of, horizons[tier_of_key(name)], now):
            gone.add(name)
    return gone


@pytest.mark.skipif(is_cluster_run(), reason="reads the keyspace with SCAN and DUMP on one server")
def test_a_pass_removes_exactly_the_days_past_each_horizon_and_a_longer_one_retimes_the_rest(
    raw_conn, two_sites, monkeypatch
):
    now = time.time()
    definitions.define_funnel(raw_conn, "signup", [{"page": "/p1"}, {"event": "signup"}], 3600, now=now - 30 * DAY)
    for site in (None, "blog"):
        definitions.define_goal(raw_conn, "signed", event="signup", site=site, now=now - 30 * DAY)
    write_days(raw_conn, now, 20, busy_day=15)
    before = snapshot(raw_conn)
    assert any(re.search(r":pages:[^:]*\d:.", name) for name in before), "no path's HyperLogLog"
    assert any(re.search(r"event:.*:day:[^:]*\d:v", name) for name in before), "no event value's HyperLogLog"
    assert any(re.search(r"goal:.*:day:[^:]*\d:.", name) for name in before), "no goal's HyperLogLog"
    assert any(re.search(r":who:[^:]*\d:b", name) for name in before), "no browser's HyperLogLog"
    assert {tier_of_key(n) for n in before if day_of_key(n) and ":seen:" not in n} == {"visitor-level", "aggregate"}

    use_settings(monkeypatch, COUNTERS_VISITOR_DAYS=7, COUNTERS_AGGREGATE_DAYS=10)
    horizons = {"visitor-level": 7, "aggregate": 10}
    gone = expected_gone(before, horizons, now)
    assert len(gone) > 100 and any(":vis:" in name for name in gone) and any(":hll:" not in name for name in gone)

    report = retention.apply_retention(raw_conn, now)
    after = snapshot(raw_conn)
    assert set(after) == set(before) - gone, (
        sorted(set(after) - (set(before) - gone))[:5],
        sorted((set(before) - gone) - set(after))[:5],
    )
    assert {name: after[name] for name in after} == {name: before[name] for name in after}  # the rest unchanged
    assert sum(report.removed.values()) == len(gone)
    assert report.removed["page_day", "aggregate"] > 0 and report.removed["daily_uniques", "visitor-level"] > 0
    assert report.removed["event_day", "visitor-level"] > 0 and report.removed["funnel", "aggregate"] > 0
    assert not report.pending

    status = retention.status(raw_conn)
    assert sum(status["removed"].values()) == len(gone) and status["last"]["keys"] == len(gone)
    assert status["applied"] == {"visitor-level": "7", "aggregate": "10"}
    again = retention.apply_retention(raw_conn, now)  # nothing more due
    assert sum(again.removed.values()) == 0 and snapshot(raw_conn) == after

    # A longer aggregate horizon: what is stored is re-timed to it (a few days a pass), what went stays gone.
    use_settings(monkeypatch, COUNTERS_VISITOR_DAYS=7, COUNTERS_AGGREGATE_DAYS=40)
    passes = 0
    while True:
        passes += 1
        report = retention.apply_retention(raw_conn, now, days_per_pass=5)
        if not report.retiming:
            break
        assert passes < 20
    assert passes > 2
    assert set(snapshot(raw_conn)) == set(after)
    for name in after:
        of = day_of_key(name)
        if of is not None and ":seen:" not in name and tier_of_key(name) == "aggregate":
            end = datetime.combine(of[1] + timedelta(days=1), datetime.min.time(), ZoneInfo(ZONES[of[0]])).timestamp()
            assert expires_at(raw_conn, name) >= end + 40 * DAY - 1, name
    assert retention.status(raw_conn)["applied"]["aggregate"] == "40"


def test_days_past_the_horizon_beyond_a_pass_are_pending_and_go_in_the_next_passes(raw_conn, two_sites, monkeypatch):
    now = time.time()
    write_days(raw_conn, now, 12)
    use_settings(monkeypatch, COUNTERS_VISITOR_DAYS=7, COUNTERS_AGGREGATE_DAYS=8)
    due_visitor = [e for e in day_registry.listed(raw_conn, "visitor-level") if due(*e, 7, now)]
    assert len(due_visitor) >= 8
    first = retention.apply_retention(raw_conn, now, days_per_pass=3)
    assert first.swept["visitor-level"] == 3 and first.pending["visitor-level"] == len(due_visitor) - 3
    assert retention.status(raw_conn)["last"]["pending"] == sum(first.pending.values())
    swept = 3
    for _ in range(10):
        report = retention.apply_retention(raw_conn, now, days_per_pass=3)
        swept += report.swept["visitor-level"]
        if not report.pending:
            break
    assert swept == len(due_visitor)
    left = day_registry.listed(raw_conn, "visitor-level")
    assert left and not any(due(*e, 7, now) for e in left)


def calls_of_a_nothing_due_pass(raw_conn, now: float) -> int:
    retention.apply_retention(raw_conn, now)  # the due days go
    raw_conn.config_resetstat()
    report = retention.apply_retention(raw_conn, now)
    assert sum(report.removed.values()) == 0
    stats = raw_conn.info("commandstats")
    return sum(int(s["calls"]) for name, s in stats.items() if name.upper().split("_", 1)[1] not in ("INFO", "CONFIG"))


@pytest.mark.skipif(is_cluster_run(), reason="INFO commandstats is per node")
def test_a_pass_with_nothing_due_costs_the_same_at_10_and_at_90_days(raw_conn, two_sites, monkeypatch):
    now = time.time()
    use_settings(monkeypatch, COUNTERS_VISITOR_DAYS=7, COUNTERS_AGGREGATE_DAYS=400)
    costs = {}
    for stored in (10, 90):
        raw_conn.flushdb()
        for ago in range(stored):
            for site in (None, "blog"):
                item = {"ip": f"10.1.{ago}.1", "path": "/", "ts": now - ago * DAY - 60, "site": site}
                payloads.apply_payload(raw_conn, VISIT, [item], message_id=f"n-{site}-{ago}")
        assert len(day_registry.listed(raw_conn, "aggregate", limit=1000)) == 2 * stored
        costs[stored] = calls_of_a_nothing_due_pass(raw_conn, now)
    print(f"\n[retention] a pass with nothing due: {costs} Redis calls (10 and 90 days stored)")
    assert costs[10] == costs[90] and costs[10] <= 12


def test_metrics_and_tables_show_what_retention_removed(raw_conn, two_sites, monkeypatch):
    now = time.time()
    write_days(raw_conn, now, 10)
    no_pass = CliRunner().invoke(cli, ["tables", "--format", "table"])
    assert no_pass.exit_code == 0 and "no retention pass yet" in no_pass.output
    use_settings(monkeypatch, COUNTERS_VISITOR_DAYS=7, COUNTERS_AGGREGATE_DAYS=8)
    report = retention.apply_retention(raw_conn, now)
    removed = report.removed["site_day", "aggregate"]
    assert removed > 0

    found = scrape_app(raw_conn)
    assert value(found, "counters_retention_removed_keys_total", table="site_day", tier="aggregate") == removed
    assert (
        value(found, "counters_retention_removed_keys_total", table="pairs", tier="visitor-level")
        == (report.removed["pairs", "visitor-level"])
    )
    assert value(found, "counters_retention_pending_days", tier="aggregate") == 0
    assert value(found, "counters_retention_last_run_timestamp_seconds") == pytest.approx(now)

    as_json = CliRunner().invoke(cli, ["tables", "--format", "json"])
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.output)
    entries = {entry["name"]: entry for entry in data["tables"]}
    assert entries["site_day"]["removed_by_retention"] == {
        "visitor-level": report.removed["site_day", "visitor-level"],
        "aggregate": removed,
    }
    assert "removed_by_retention" not in entries["site_all"]  # (its own rule: for ever)
    assert data["retention"]["last"]["keys"] == sum(report.removed.values())
    as_csv = CliRunner().invoke(cli, ["tables", "--format", "csv"])
    assert f"visitor-level {report.removed['site_day', 'visitor-level']}; aggregate {removed}" in as_csv.output
    as_table = CliRunner().invoke(cli, ["tables", "--format", "table"])
    shown = " ".join(as_table.output.split())
    assert f"{sum(report.removed.values())} keys removed" in shown and "last retention pass" in shown


def test_a_funnel_visitors_state_is_kept_at_most_the_visitor_days(raw_conn, monkeypatch):
    """A visitor's funnel state is visitor-level data: a 30-day window would keep it 61 days past
    its latest step event; COUNTERS_VISITOR_DAYS caps it. (Such a funnel is refused while the
    setting is 7: it was defined under 31, then the setting was lowered.)"""
    use_settings(monkeypatch, COUNTERS_VISITOR_DAYS=31)
    now = time.time()
    definitions.define_funnel(raw_conn, "long", [{"page": "/a"}, {"page": "/b"}], 30 * DAY, now=now - 600)
    use_settings(monkeypatch, COUNTERS_VISITOR_DAYS=7)
    assert payloads.apply_payload(raw_conn, VISIT, [{"ip": "10.5.5.5", "path": "/a", "ts": now - 60}], message_id="f")
    states = list(raw_conn.scan_iter(match="*fun:*:v:*"))
    assert len(states) == 1
    assert now - 60 + 7 * DAY - 2 <= expires_at(raw_conn, states[0]) <= now - 60 + 7 * DAY + 2


def test_beat_schedules_the_pass_hourly_on_the_maintenance_queue():
    from counters_tasks.worker.celery_defaults import beat_schedule, task_routes

    entry = beat_schedule["apply-retention"]
    assert entry["task"] == "counters_tasks.apply_retention" and entry["schedule"].minute == {45}
    assert task_routes["counters_tasks.apply_retention"] == {"queue": "maintenance"}


@pytest.mark.skipif(
    is_cluster_run(), reason="its worker's broker is one Redis (the worker on a cluster: tests/system/test_cluster.py)"
)
@pytest.mark.processes
@pytest.mark.workers
def test_a_real_worker_runs_the_pass_under_its_lock(redis_url, raw_conn, two_sites, monkeypatch, tmp_path):
    now = time.time()
    write_days(raw_conn, now, 10)
    use_settings(monkeypatch, COUNTERS_VISITOR_DAYS=7, COUNTERS_AGGREGATE_DAYS=8)
    due_days = [e for e in day_registry.listed(raw_conn, "aggregate") if due(*e, 8, now)]
    assert due_days
    env = celery_env(redis_url, COUNTERS_SITES=SITES, COUNTERS_VISITOR_DAYS="7", COUNTERS_AGGREGATE_DAYS="8")
    purge_broker(redis_url)
    worker = start_worker(env, tmp_path / "worker.log", concurrency=1)
    try:
        tasks.apply_retention.delay()
        status = wait_until(
            lambda: retention.status(raw_conn)["last"] or None,
            timeout=60,
            what=f"the worker to run the pass; log:\n{worker.output()[-3000:]}",
        )
        assert status["keys"] > 0 and status["days"] >= len(due_days)
        assert not set(due_days) & set(day_registry.listed(raw_conn, "aggregate"))
        assert job_status(raw_conn, "apply_retention")["last_result"].startswith("days swept")
    finally:
        assert worker.stop() == 0, worker.output()[-3000:]


@pytest.mark.long  # (alone on the machine for 10-30 s: make test-long)
@pytest.mark.budget
def test_every_call_of_a_pass_over_a_day_of_ten_thousand_paths_stays_in_budget(
    raw_conn, two_sites, monkeypatch, call_budget
):
    """The sweep of a full day (COUNTERS_MAX_DAY_PATHS paths, each with a sketch, one a HyperLogLog)
    is made of calls of bounded cost: HSCAN of 500 fields, UNLINK of at most 500 keys."""
    now = time.time()
    ts = now - 20 * DAY
    views = [{"ip": f"10.7.{n // 250}.{n % 250}", "path": "/busy", "ts": ts} for n in range(300)]
    views += [{"ip": f"10.{n // 65536}.{n // 256 % 256}.{n % 256}", "path": f"/x/{n}", "ts": ts} for n in range(9_999)]
    for first in range(0, len(views), 500):
        payloads.apply_payload(raw_conn, VISIT, views[first : first + 500], message_id=f"big-{first}")
    use_settings(monkeypatch, COUNTERS_VISITOR_DAYS=7, COUNTERS_AGGREGATE_DAYS=10)
    call_budget.reset()
    report = retention.apply_retention(raw_conn, now)
    assert report.removed["page_day", "aggregate"] >= 2 and report.removed["pairs", "visitor-level"] == 1
    print("\n" + call_budget.report())
    assert call_budget.within(3) == []
