"""History at default settings: days long past (a 2015 date, a day 400 days ago) are counted
exactly when they were never counted; a late visit of a closed day is counted in what can
still be exact and reported; per-day paths are capped; shards stay intsets past their figure."""

from __future__ import annotations

import random
import time
import uuid
from datetime import date, datetime, timezone

import pytest

from counters_tasks import counters, refusals, sitestats, tasks, uniques, visits
from counters_tasks.core.days import local_day
from counters_tasks.sitestats import SiteCount, page_day, pairs, site_day
from counters_tasks.store import keys
from tests.support.servers import dump_all, expires_at, use_settings

pytestmark = pytest.mark.cluster

JUNE_2015 = datetime(2015, 6, 15, 12, 0, tzinfo=timezone.utc).timestamp()


def old_times() -> list[float]:
    return [JUNE_2015, time.time() - 400 * 86400]


def history(rng: random.Random, around: float, n: int = 300) -> list[dict]:
    """Visits within a few hours of ``around`` (one day, or two near midnight), with repeats."""
    ips = [f"198.51.{rng.randrange(256)}.{rng.randrange(256)}" for _ in range(60)]
    sessions = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(40)]
    return [
        {
            "ip": rng.choice(ips),
            "path": rng.choice(["/", "/a", "/blog/1"]),
            "session_id": rng.choice(sessions),
            "ts": around + rng.uniform(-3 * 3600, 3 * 3600),
        }
        for _ in range(n)
    ]


def check_against_model(conn, batch: list[dict]) -> None:
    for day in {local_day(v["ts"]) for v in batch}:
        of_day = [v for v in batch if local_day(v["ts"]) == day]
        assert sitestats.site_visit_info(conn, day) == SiteCount(day, len(of_day), len({v["ip"] for v in of_day}))
        for path in {v["path"] for v in of_day}:
            on_path = [v for v in of_day if v["path"] == path]
            assert sitestats.site_visit_info(conn, day, path) == SiteCount(
                day, len(on_path), len({v["ip"] for v in on_path})
            )
        assert uniques.unique_visitors(conn, day) == len({v["session_id"] for v in of_day})
    assert sitestats.site_visit_info(conn) == SiteCount(None, len(batch), len({v["ip"] for v in batch}))


@pytest.mark.parametrize("when", ["2015", "400 days ago"])
def test_module_functions_count_old_days_exactly(conn, when):
    around = old_times()[0 if when == "2015" else 1]
    batch = history(random.Random(1), around)
    for v in batch:
        visits.apply_visit(conn, v["ip"], v["path"], v["session_id"], v["ts"])
    check_against_model(conn, batch)
    # the counters keep the samples of their own now (get_counter's window follows ``now``)
    total = counters.get_counter(conn, "hits", 86400, now=around + 3 * 3600)
    assert sum(t for _, t in total) == len(batch)
    assert refusals.counts(conn)["closed_day"] == 0


def test_batches_and_redelivery_count_old_days_once(conn):
    batch = [v for around in old_times() for v in history(random.Random(2), around, 400)]
    random.Random(3).shuffle(batch)
    assert visits.apply_visits(conn, batch, message_id="import-1") == len(batch)
    visits.apply_visits(conn, batch, message_id="import-1")  # redelivered: nothing twice
    check_against_model(conn, batch)


def test_tasks_count_old_days(eager_app, conn):
    batch = history(random.Random(4), JUNE_2015, 100) + history(random.Random(5), old_times()[1], 60)
    for n, v in enumerate(batch[:50]):
        tasks.record_visit.apply(args=[v["ip"], v["path"], v["session_id"], v["ts"]], task_id=f"v{n}")
    tasks.record_visits.apply(args=[batch[50:]], task_id="b1")
    check_against_model(conn, batch)
    day = local_day(JUNE_2015)
    assert tasks.count_unique.apply(args=[str(uuid.uuid4()), JUNE_2015], task_id="u1").get() is True
    assert uniques.unique_visitors(conn, day) == len({v["session_id"] for v in batch if local_day(v["ts"]) == day}) + 1


@pytest.mark.usefixtures("bound_deployment")
def test_a_backfilled_day_stays_open_for_its_grace_from_the_write(raw_conn):
    now = time.time()
    day = local_day(JUNE_2015)
    sitestats.record_visit(raw_conn, "192.0.2.1", "/", JUNE_2015)
    uniques.count_visit(raw_conn, str(uuid.uuid4()), JUNE_2015)
    for key, days_kept in (
        (site_day.site_day_visitors(day, "exact"), 2),
        (pairs.site_day_pairs(day), 2),
        (site_day.site_day_totals(day), 400),
        (keys.uniques_count(day), 400),
        (keys.uniques_open(day), 7),
    ):
        assert abs(expires_at(raw_conn, key) - (now + days_kept * 86400)) < 5, key


def _close_site_day(conn, day: date) -> None:
    """What Redis does when a day's open time passes: its visitor sets expire (done at once here)."""
    conn.hset(site_day.site_day_totals(day), "open_until", int(time.time()) - 1)
    conn.delete(site_day.site_day_visitors(day, "exact"), pairs.site_day_pairs(day))


@pytest.mark.usefixtures("bound_deployment")
def test_a_late_visit_of_a_closed_day_counts_where_exact_and_is_reported(raw_conn):
    old = time.time() - 30 * 86400
    day = local_day(old)
    visits.apply_visit(raw_conn, "192.0.2.1", "/a", None, old)
    _close_site_day(raw_conn, day)
    visits.apply_visits(
        raw_conn,
        [{"ip": "192.0.2.2", "path": "/a", "ts": old}, {"ip": "192.0.2.3", "path": "/b", "ts": old}],
        message_id="late",
    )
    visits.apply_visits(raw_conn, [{"ip": "192.0.2.2", "path": "/a", "ts": old}], message_id="late")  # redelivery
    # PV of the day and of its paths: counted; the day's UV: cannot be deduplicated, left as it was
    assert sitestats.site_visit_info(raw_conn, day) == SiteCount(day, 3, 1)
    assert sitestats.site_visit_info(raw_conn, day, "/a") == SiteCount(day, 2, 1)
    assert sitestats.site_visit_info(raw_conn, day, "/b") == SiteCount(day, 1, 0)
    # all-time figures stay exact
    assert sitestats.site_visit_info(raw_conn) == SiteCount(None, 3, 3)
    assert sitestats.site_visit_info(raw_conn, None, "/a") == SiteCount(None, 2, 2)
    assert sum(t for _, t in counters.get_counter(raw_conn, "hits", 86400, now=old)) == 3
    assert refusals.counts(raw_conn)["closed_day"] == 2  # reported, once per message
    assert not raw_conn.exists(site_day.site_day_visitors(day, "exact"))  # no set reopened for a closed day


@pytest.mark.usefixtures("bound_deployment")
def test_a_day_past_its_path_cap_counts_the_rest_as_other(raw_conn, monkeypatch):
    use_settings(monkeypatch, COUNTERS_MAX_DAY_PATHS=50)
    now = time.time()
    day = local_day(now)
    batch = [{"ip": f"10.0.{i % 7}.{i % 251}", "path": f"/p{i % 80}", "ts": now} for i in range(400)]
    visits.apply_visits(raw_conn, batch[:100])
    visits.apply_visits(raw_conn, batch[100:])
    assert raw_conn.hlen(page_day.site_day_pages(day)) == 51  # 50 paths and the overflow
    pages = dict(sitestats.top_pages(raw_conn, day, day, limit=100))
    assert sum(pages.values()) == 400 == sitestats.site_visit_info(raw_conn, day).pv
    tracked = [p for p in pages if p != sitestats.OTHER]
    assert len(tracked) == 50 and pages[sitestats.OTHER] == sum(1 for v in batch if v["path"] not in tracked)
    other = sitestats.OTHER
    assert pages[other] > 0
    untracked = next(f"/p{i}" for i in range(80) if f"/p{i}" not in tracked)
    assert sitestats.site_visit_info(raw_conn, day, untracked) == SiteCount(day, 0, 0)
    # its all-time figures and counters are still kept
    assert sitestats.site_visit_info(raw_conn, None, untracked).pv == sum(1 for v in batch if v["path"] == untracked)


@pytest.mark.usefixtures("bound_deployment")
def test_shards_stay_intsets_when_a_day_outgrows_its_figure(raw_conn):
    now = time.time()
    day = local_day(now)
    yesterday = local_day(now - 86400)
    raw_conn.set(keys.uniques_count(yesterday), 10)  # a quiet yesterday: 16 expected, one shard
    assert uniques.precompute_expected(raw_conn, day) == 16
    rng = random.Random(9)
    ids = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(3000)]
    for first in range(0, len(ids), 250):
        visits.apply_visits(
            raw_conn,
            [{"ip": "192.0.2.1", "path": "/", "session_id": s, "ts": now} for s in ids[first : first + 250] + ids[:20]],
        )  # repeats too
    assert uniques.unique_visitors(raw_conn, day) == len(set(ids))
    tag = keys.uniques_tag(day)
    sets = [key for key in raw_conn.scan_iter(match=f"*{{{tag}}}:shard:*", count=1000)]
    assert len(sets) >= 3000 // 512
    assert all(raw_conn.scard(key) <= 512 and raw_conn.object("encoding", key) == b"intset" for key in sets)
    assert uniques.unique_visitors_range(raw_conn, day, day).visitors == len(set(ids))


@pytest.mark.usefixtures("bound_deployment")
def test_closed_day_changes_nothing_of_the_day_uniques(raw_conn):
    before_any = dump_all(raw_conn)
    assert before_any == {}
    old = time.time() - 20 * 86400
    day = local_day(old)
    uniques.count_visit(raw_conn, str(uuid.uuid4()), old)
    raw_conn.delete(keys.uniques_open(day))  # its shards' time has passed
    assert (
        visits.apply_visits(
            raw_conn, [{"ip": "192.0.2.9", "path": "/", "session_id": str(uuid.uuid4()), "ts": old}], message_id="m"
        )
        == 1
    )
    assert uniques.unique_visitors(raw_conn, day) == 1
    assert sitestats.site_visit_info(raw_conn, day).pv == 1
    assert refusals.counts(raw_conn)["closed_day"] == 1
