"""``sitestats.top_pages`` over ranges: exact against a plain count of the visits written, while a
range read reads each day's most viewed paths (``DayTop``) instead of every page of every day."""

from __future__ import annotations

import random
import time
from collections import Counter
from datetime import timedelta

import pytest

from counters_tasks import sitestats
from counters_tasks.core.days import local_day
from counters_tasks.sitestats import day_tops
from counters_tasks.visits import apply_visits
from tests.support.visit_model import local_date

DAY = 86400


def write(conn, visits: list[tuple[str, str, float]]) -> None:
    for first in range(0, len(visits), 500):
        apply_visits(conn, [{"ip": ip, "path": path, "ts": ts} for ip, path, ts in visits[first : first + 500]])


def day_visits(rng: random.Random, noon: float, paths: int, views: int) -> list[tuple[str, str, float]]:
    """A day of views: a few popular paths (zipf-like weights, ties among them) and a tail."""
    names = [f"/p{n}" for n in range(paths)]
    weights = [max(1, 40 // (1 + n // 3)) for n in range(paths)]  # groups of three equal weights: ties
    return [
        (
            f"10.9.{rng.randrange(200)}.{rng.randrange(200)}",
            rng.choices(names, weights)[0],
            noon + rng.uniform(-3, 3) * 3600,
        )
        for _ in range(views)
    ]


def expected(visits, first, last, limit):
    counts = Counter(path for _ip, path, ts in visits if first <= local_date(ts) <= last)
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:limit]


def hscans(conn) -> int:
    return int(conn.info("commandstats").get("cmdstat_hscan", {}).get("calls", 0))


@pytest.fixture
def history(conn, monkeypatch):
    """Twelve past days of views, each with more paths than a day's top keeps."""
    monkeypatch.setattr(day_tops, "DAY_TOP_KEPT", 6)
    rng = random.Random(11)
    today = local_day(time.time())
    noons = [time.mktime((today - timedelta(days=back)).timetuple()) + DAY / 2 for back in range(14, 2, -1)]
    visits = [v for noon in noons for v in day_visits(rng, noon, paths=40, views=rng.randrange(150, 400))]
    write(conn, visits)
    days = sorted({local_date(ts) for _ip, _path, ts in visits})
    return visits, days, rng


@pytest.mark.cluster
def test_top_pages_is_exact_on_first_and_later_reads_and_after_a_late_view(conn, history):
    visits, days, rng = history
    ranges = [(days[0], days[-1]), (days[2], days[8]), (days[5], days[5]), (days[0], days[3])]
    for _round in range(2):  # the first read makes the days' tops, the second reads them
        for first, last in ranges:
            for limit in (1, 3, 10, 50):
                assert sitestats.top_pages(conn, first, last, limit) == expected(visits, first, last, limit), (
                    first,
                    last,
                    limit,
                )
    # Views land on a day whose top is kept (a log imported late): the next read counts them.
    late_noon = time.mktime(days[4].timetuple()) + DAY / 2
    late = [
        (f"10.8.{n // 200}.{n % 200}", "/p39", late_noon) for n in range(300)
    ]  # a tail path becomes the day's first
    write(conn, late)
    visits += late
    for first, last in ranges:
        assert sitestats.top_pages(conn, first, last, 5) == expected(visits, first, last, 5)


def test_a_range_read_again_reads_each_days_top_not_its_pages(raw_conn, history):
    visits, days, _rng = history
    first, last = days[0], days[-1]
    before = hscans(raw_conn)
    assert sitestats.top_pages(raw_conn, first, last, 5) == expected(visits, first, last, 5)
    made = hscans(raw_conn) - before
    assert made >= len(days)  # the first read reads each day's pages once
    before = hscans(raw_conn)
    for limit in (1, 3, 5):  # (well within the 6 paths a day's top keeps here)
        assert sitestats.top_pages(raw_conn, first, last, limit) == expected(visits, first, last, limit)
    assert hscans(raw_conn) == before  # later reads: the days' tops and a few HGETs
    # A day that gets a view keeps its top, the view as its slack: still no page read whole.
    noon = time.mktime(days[3].timetuple()) + DAY / 2
    write(raw_conn, [("10.7.0.1", "/p1", noon)])
    visits.append(("10.7.0.1", "/p1", noon))
    before = hscans(raw_conn)
    assert sitestats.top_pages(raw_conn, first, last, 5) == expected(visits, first, last, 5)
    assert hscans(raw_conn) == before


def test_paths_tied_at_the_bound_are_read_whole_and_stay_exact(raw_conn, monkeypatch):
    """Every day has the same views of many paths: no top can tell its first paths apart, so the
    read falls back to every page of the days, and is exact."""
    monkeypatch.setattr(day_tops, "DAY_TOP_KEPT", 3)
    today = local_day(time.time())
    visits = []
    for back in range(3, 7):
        noon = time.mktime((today - timedelta(days=back)).timetuple()) + DAY / 2
        visits += [(f"10.6.{back}.{n}", f"/t{n % 20}", noon) for n in range(100)]
    write(raw_conn, visits)
    first, last = today - timedelta(days=6), today - timedelta(days=3)
    for _round in range(2):
        assert sitestats.top_pages(raw_conn, first, last, 4) == expected(visits, first, last, 4)
    # A day with no top yet joins the range: it is read whole to make its top, and the read that
    # follows (still tied) reads the other days' pages, not that one's twice: one HSCAN a day.
    noon = time.mktime((today - timedelta(days=7)).timetuple()) + DAY / 2
    more = [(f"10.6.9.{n}", f"/z{n}", noon) for n in range(20)]
    write(raw_conn, more)
    visits += more
    first = today - timedelta(days=7)
    before = hscans(raw_conn)
    assert sitestats.top_pages(raw_conn, first, last, 4) == expected(visits, first, last, 4)
    assert hscans(raw_conn) - before == 5


def test_a_stored_top_that_is_not_ours_is_made_again(raw_conn, history):
    from counters_tasks.store import keys

    visits, days, _rng = history
    sitestats.top_pages(raw_conn, days[0], days[-1], 3)
    with keys.bound(raw_conn):
        raw_conn.set(day_tops.site_day_pages_top(days[1]), b"not json")
    assert sitestats.top_pages(raw_conn, days[0], days[-1], 3) == expected(visits, days[0], days[-1], 3)


def test_a_day_that_got_views_since_its_top_is_not_read_whole_while_its_top_still_decides(raw_conn, history):
    """Today under traffic: its top was made a few views ago. A read takes the stored top with
    those views as slack (a listed path has at most that many more; one it leaves out, at most
    its floor plus that many), reads the leading paths' current views of that day one by one,
    and stays exact without reading the day's pages; once the slack could change the order, the
    day is read whole once and its top stored again."""
    visits, days, _rng = history
    first, last = days[0], days[-1]
    assert sitestats.top_pages(raw_conn, first, last, 5) == expected(visits, first, last, 5)  # the tops made
    noon = time.mktime(days[-1].timetuple()) + DAY / 2
    for n in range(3):  # a few views of the leaders: exact, no HSCAN
        leader = expected(visits, first, last, 1)[0][0]
        view = (f"10.5.0.{n}", leader, noon)
        write(raw_conn, [view])
        visits.append(view)
        before = hscans(raw_conn)
        for limit in (1, 3, 5):
            assert sitestats.top_pages(raw_conn, first, last, limit) == expected(visits, first, last, limit)
        assert hscans(raw_conn) == before
    # Many views of a path the day's top left out: the slack could now reorder the leaders, so
    # the day is read whole once (its top stored again), and later reads go back to the tops.
    tail = expected(visits, last, last, 40)[-1][0]
    burst = [(f"10.5.{1 + n // 200}.{n % 200}", tail, noon) for n in range(400)]
    write(raw_conn, burst)
    visits += burst
    before = hscans(raw_conn)
    assert sitestats.top_pages(raw_conn, first, last, 5) == expected(visits, first, last, 5)
    assert hscans(raw_conn) - before >= 1
    before = hscans(raw_conn)
    assert sitestats.top_pages(raw_conn, first, last, 5) == expected(visits, first, last, 5)
    assert hscans(raw_conn) == before


def test_reads_between_views_on_many_days_stay_exact(conn, history):
    """Views keep landing on random days between reads (tops behind by a few views or by
    hundreds, listed paths and left-out ones): every read equals a plain count."""
    visits, days, rng = history
    for round_ in range(12):
        new = []
        for _ in range(rng.choice((1, 5, 60))):
            noon = time.mktime(rng.choice(days).timetuple()) + DAY / 2
            path = rng.choice([f"/p{rng.randrange(40)}", f"/new{round_}"])
            new.append((f"10.4.{round_}.{rng.randrange(200)}", path, noon))
        write(conn, new)
        visits += new
        first, last = sorted(rng.sample(days, 2))
        for limit in (1, 4, 10):
            assert sitestats.top_pages(conn, first, last, limit) == expected(visits, first, last, limit), (
                round_,
                limit,
            )


def test_beats_job_makes_the_finished_days_tops_so_the_first_read_reads_no_page(raw_conn, eager_app):
    """``make_day_tops`` (beat, hourly): yesterday and the day before get their tops once they
    end; a first range read of them then reads tops only. A run with nothing due makes none; a
    day that gets views later (a log imported late) is made again by the next run."""
    from counters_tasks import tasks
    from counters_tasks.worker.celery_defaults import beat_schedule, task_routes

    today = local_day(time.time())
    visits = []
    for back in (1, 2, 3):
        noon = time.mktime((today - timedelta(days=back)).timetuple()) + DAY / 2
        visits += [(f"10.3.{back}.{n % 200}", f"/b{n % 30}", noon) for n in range(300)]
    write(raw_conn, visits)
    assert tasks.make_day_tops.apply().get() == 2  # (3 days back: not its job; the first read's)
    assert sitestats.make_day_tops(raw_conn) == 0
    first, last = today - timedelta(days=2), today - timedelta(days=1)
    before = hscans(raw_conn)
    assert sitestats.top_pages(raw_conn, first, last, 5) == expected(visits, first, last, 5)
    assert hscans(raw_conn) == before
    noon = time.mktime(last.timetuple()) + DAY / 2
    late = [(f"10.3.9.{n}", "/late", noon) for n in range(3)]
    write(raw_conn, late)
    assert sitestats.make_day_tops(raw_conn) == 1
    before = hscans(raw_conn)
    assert sitestats.top_pages(raw_conn, first, last, 40) == expected(visits + late, first, last, 40)
    assert hscans(raw_conn) == before
    entry = beat_schedule["make-day-tops"]
    assert entry["task"] == tasks.make_day_tops.name and entry["schedule"].minute == {15}
    assert len(entry["schedule"].hour) == 24 and task_routes[entry["task"]] == {"queue": "maintenance"}
