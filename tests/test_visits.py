"""visits.apply_visit (the composition) and the Celery tasks of site PV/UV and daily uniques, eagerly."""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter

import pytest
import redis

from counters_tasks import counters, sitestats, uniques, visits
from counters_tasks.core import days
from counters_tasks.counters import PRECISIONS
from counters_tasks.errors import InvalidInput
from counters_tasks.sitestats import SiteCount
from counters_tasks.store import keys
from counters_tasks.worker import maintenance
from tests.support.servers import dump_all, is_cluster_run, use_settings

pytestmark = pytest.mark.cluster


def test_record_visit_counts_everything(conn):
    now = time.time()
    today = days.local_day(now)
    session = str(uuid.uuid4())
    visits.apply_visit(conn, "192.0.2.1", "/a?x=1", session, now)
    visits.apply_visit(conn, "192.0.2.2", "/a", None, now)
    visits.apply_visit(conn, "192.0.2.1", "/b#f", session, now)
    assert sitestats.site_visit_info(conn, today) == SiteCount(today, 3, 2)
    assert sitestats.site_visit_info(conn, today, "/a") == SiteCount(today, 2, 2)
    assert uniques.unique_visitors(conn, today) == 1
    assert counters.known_counters(conn) == ["hits", "hits:/a", "hits:/b"]
    for precision in PRECISIONS:
        start = counters.bucket_start(now, precision)
        assert counters.get_counter(conn, "hits", precision, now) == [(start, 3)]
    for precision in counters.kept_precisions("hits:/a"):
        start = counters.bucket_start(now, precision)
        assert counters.get_counter(conn, "hits:/a", precision, now) == [(start, 2)]


@pytest.mark.skipif(is_cluster_run(), reason="one server: a cluster sends one pipeline per node and stage")
@pytest.mark.parametrize("pinned", [True, False], ids=["pinned", "unpinned"])
def test_record_visit_is_one_round_trip(raw_conn, monkeypatch, request, pinned):
    """After the day's figure is known and the counters are registered: one pipeline, no other
    command (no SCRIPT EXISTS); without ``COUNTERS_TAG_KEY`` pinned, then one GET of the tag key
    (``keys.confirm_written``: a write under a key that lost to another is made again)."""
    if pinned:
        request.getfixturevalue("pinned_tag_key")
    now = time.time()
    visits.apply_visit(raw_conn, "192.0.2.1", "/warm", str(uuid.uuid4()), now)
    calls = []
    for cls, name in (
        (redis.Redis, "execute_command"),
        (redis.client.Pipeline, "execute"),
        (redis.client.Pipeline, "immediate_execute_command"),
    ):
        real = getattr(cls, name)

        def spy(self, *args, _real=real, _name=name, **kwargs):
            calls.append(_name)
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, spy)
    visits.apply_visit(raw_conn, "192.0.2.2", "/warm", str(uuid.uuid4()), now)
    assert calls == (["execute"] if pinned else ["execute", "execute_command"])


def test_scripts_missing_on_the_server_are_sent_again_once(raw_conn):
    """After SCRIPT FLUSH (or a restart) the NOSCRIPT calls are re-sent; nothing counts twice."""
    now = time.time()
    today = days.local_day(now)
    visits.apply_visit(raw_conn, "192.0.2.1", "/s", str(uuid.uuid4()), now)
    raw_conn.script_flush()
    visits.apply_visit(raw_conn, "192.0.2.2", "/s", str(uuid.uuid4()), now)
    assert sitestats.site_visit_info(raw_conn, today, "/s") == SiteCount(today, 2, 2)
    assert uniques.unique_visitors(raw_conn, today) == 2
    assert counters.get_counter(raw_conn, "hits", 86400, now) == [(counters.bucket_start(now, 86400), 2)]


BAD = [
    {"ip": "300.1.1.1"},
    {"ip": None},
    {"path": ""},
    {"path": 7},
    {"path": "?q=1"},
    {"session_id": "nope"},
    {"session_id": 5},
    {"session_id": ""},
    {"ts": -1},
    {"ts": "soon"},
    {"ts": float("nan")},
    {"ts": 253402300799},
]


@pytest.mark.parametrize("kwargs", BAD)
def test_bad_visit_refused_before_any_write(raw_conn, kwargs):
    visits.apply_visit(raw_conn, "192.0.2.1", "/seed", str(uuid.uuid4()))
    before = dump_all(raw_conn)
    args = {"ip": "192.0.2.5", "path": "/ok", "session_id": str(uuid.uuid4()), "ts": time.time()} | kwargs
    with pytest.raises(InvalidInput):
        visits.apply_visit(raw_conn, args["ip"], args["path"], args["session_id"], args["ts"])
    assert dump_all(raw_conn) == before


# --- Celery tasks, eager ----------------------------------------------------------------------


def test_record_visit_task_applies_once_per_message(eager_app, raw_conn):
    from counters_tasks.tasks import record_visit

    now = time.time()
    today = days.local_day(now)
    session = str(uuid.uuid4())
    for _ in range(2):
        record_visit.apply(args=("192.0.2.1", "/t?x", session, now), task_id="x")
    assert sitestats.site_visit_info(raw_conn, today, "/t") == SiteCount(today, 1, 1)
    assert uniques.unique_visitors(raw_conn, today) == 1
    assert counters.get_counter(raw_conn, "hits:/t", 60, now) == [(counters.bucket_start(now, 60), 1)]
    record_visit.apply(kwargs={"ip": "192.0.2.1", "path": "/t", "ts": now}, task_id="y")
    assert sitestats.site_visit_info(raw_conn, today, "/t") == SiteCount(today, 2, 1)
    assert counters.get_counter(raw_conn, "hits", 60, now) == [(counters.bucket_start(now, 60), 2)]


def test_count_unique_task_applies_once_per_message(eager_app, raw_conn):
    from counters_tasks.tasks import count_unique

    now = time.time()
    today = days.local_day(now)
    assert count_unique.apply(args=(str(uuid.uuid4()), now), task_id="x").get() is True
    # the same message delivered again (even if its body differed) is not applied
    assert count_unique.apply(args=(str(uuid.uuid4()), now), task_id="x").get() is False
    assert uniques.unique_visitors(raw_conn, today) == 1
    count_unique.apply(args=(str(uuid.uuid4()),), task_id="z")  # ts None: now
    assert uniques.unique_visitors(raw_conn, today) in (1, 2)  # 2 unless midnight passed meanwhile
    assert uniques.unique_visitors(raw_conn, days.local_day(time.time())) >= 1


@pytest.mark.parametrize(
    "task_name, args",
    [
        ("record_visit", ("not-an-ip", "/")),
        ("record_visit", ("192.0.2.1", "")),
        ("record_visit", ("192.0.2.1", "/", "bad-session")),
        ("record_visit", ("192.0.2.1", "/", None, "ts")),
        ("count_unique", ("bad",)),
        ("count_unique", (str(uuid.uuid4()), -3)),
    ],
)
def test_tasks_refuse_bad_input_without_writing(eager_app, raw_conn, task_name, args):
    from counters_tasks import tasks

    tasks.record_visit.apply(args=("192.0.2.1", "/seed", str(uuid.uuid4())), task_id="seed")
    before = dump_all(raw_conn)
    with pytest.raises(InvalidInput):
        getattr(tasks, task_name).apply(args=args, task_id="bad")
    assert dump_all(raw_conn) == before


@pytest.mark.usefixtures("bound_deployment")
def test_precompute_expected_task(eager_app, raw_conn):
    from counters_tasks.tasks import precompute_expected

    today = days.local_day(time.time())
    result = precompute_expected.apply().get()
    assert result[today.isoformat()] == 1_000_000
    assert raw_conn.get(keys.uniques_expected(today)) == b"1000000"
    assert maintenance.job_status(raw_conn, "precompute_expected")["last_result"]


@pytest.mark.usefixtures("bound_deployment")
def test_precompute_expected_is_skipped_while_another_run_holds_the_lock(eager_app, raw_conn):
    from counters_tasks.tasks import precompute_expected

    lock = raw_conn.lock(keys.lock("precompute_expected"), timeout=30)
    assert lock.acquire(blocking=False)
    try:
        assert precompute_expected.apply().get() == maintenance.SKIPPED
    finally:
        lock.release()
    assert not raw_conn.exists(keys.uniques_expected(days.local_day(time.time())))


def test_beat_entry_and_route(eager_app):
    entry = eager_app.conf.beat_schedule["precompute-expected"]
    assert entry["task"] == "counters_tasks.precompute_expected"
    assert 0 < entry["options"]["expires"] < 3600  # before the next hourly run
    assert entry["schedule"].hour == set(range(24)) and entry["schedule"].minute == {0}
    assert eager_app.conf.task_routes["counters_tasks.precompute_expected"] == {"queue": "maintenance"}
    assert {"counters_tasks.record_visit", "counters_tasks.count_unique", "counters_tasks.precompute_expected"} <= set(
        eager_app.tasks
    )


@pytest.mark.parametrize("precisions", ["", "5,300,3600", "1,86400"])
def test_hits_folded_per_second_and_per_page_unit_count_every_view(raw_conn, monkeypatch, precisions):
    """A batch's views are folded once per (site, second) for ``hits`` and once per (page, its
    finest kept precision) for ``hits:<path>``: every bucket of every precision each keeps holds
    what a count view by view gives, on two sites, over a stretch of seconds and minutes."""
    use_settings(monkeypatch, COUNTERS_PATH_HITS_PRECISIONS=precisions, COUNTERS_SITES='{"blog": {}}')
    rng = random.Random(precisions)
    now = time.time()
    batch = [
        {
            "ip": f"198.51.100.{rng.randrange(40)}",
            "path": f"/p{rng.randrange(6)}",
            "ts": now - rng.uniform(0, 900) - (rng.random() < 0.3) * 0.5,
            **({"site": "blog"} if rng.random() < 0.4 else {}),
        }
        for _ in range(700)
    ]
    visits.apply_visits(raw_conn, batch, message_id="folded")
    page_kept = tuple(int(p) for p in precisions.split(",")) if precisions else (60, 300, 3600, 18000, 86400)
    for site in (None, "blog"):
        views = [v for v in batch if v.get("site") == site]
        for name in ["hits", *sorted({f"hits:{v['path']}" for v in views})]:
            mine = views if name == "hits" else [v for v in views if f"hits:{v['path']}" == name]
            kept = (1, 5, 60, 300, 3600, 18000, 86400) if name == "hits" else page_kept
            for precision in kept:
                expected = Counter(int(v["ts"]) // precision * precision for v in mine)  # counted by hand
                got = dict(counters.get_counter(raw_conn, name, precision, now=now, site=site))
                window = {start: n for start, n in expected.items() if start > now - 120 * precision}
                assert got == window, (site, name, precision)


def test_a_batch_plan_keeps_the_order_of_a_view_by_view_fold(monkeypatch):
    """The counters of a batch, and each one's fields, come in the order a fold view by view
    gives (a site's ``hits`` before its first page): a group's calls are cut at
    ``FIELDS_PER_CALL`` in that order, and their dedupe ids must name the same fields on every
    delivery, before and after an upgrade. The expected plan is counted by hand (four views, a
    field being ``second // precision * 10 + the precision's place``, docs/keys.md), not made by
    the planner's own helpers."""
    use_settings(monkeypatch, COUNTERS_SITES='{"blog": {}}', COUNTERS_TAG_KEY="ab" * 16)
    day = 1_699_920_000  # a UTC midnight: a multiple of every precision
    views = [("/a", 1, None), ("/b", 2, "blog"), ("/a", 61, None), ("/c", 7, None)]  # (path, second of the day, site)
    batch = [
        visits.prepare_visit({"ip": f"198.51.100.{n}", "path": path, "ts": day + s, "site": site})
        for n, (path, s, site) in enumerate(views)
    ]
    place = {1: 0, 5: 1, 60: 2, 300: 3, 3600: 4, 18000: 5, 86400: 6}

    def field(second: int, precision: int) -> int:
        return (day + second) // precision * 10 + place[precision]

    coarse = [field(0, p) for p in (300, 3600, 18000, 86400)]  # one bucket each: every view is in the day's first 5 min
    expected = [
        (  # views 1, 3 and 4 (seconds 1, 61, 7), each of their buckets in the order it was first added to
            "hits",
            [(field(1, 1), 1), (field(0, 5), 1), (field(0, 60), 2)]
            + [(f, 3) for f in coarse]
            + [(field(61, 1), 1), (field(60, 5), 1), (field(60, 60), 1), (field(7, 1), 1), (field(5, 5), 1)],
        ),
        ("hits:/a", [(field(0, 60), 1)] + [(f, 2) for f in coarse] + [(field(60, 60), 1)]),  # views 1 and 3, from 60 s
        ("blog\x1fhits", [(field(2, 1), 1), (field(0, 5), 1), (field(0, 60), 1)] + [(f, 1) for f in coarse]),
        ("blog\x1fhits:/b", [(field(0, 60), 1)] + [(f, 1) for f in coarse]),
        ("hits:/c", [(field(0, 60), 1)] + [(f, 1) for f in coarse]),
    ]
    planned = visits._plan(batch, "m").per_counter
    assert [(name, list(fields.items())) for name, fields in planned.items()] == expected
