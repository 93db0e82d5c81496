"""Prometheus metrics: the workers' totals kept in Redis (``throughput``) and ``/metrics`` of the
dashboard server (``ops.metrics``): exact counts of a known mix sent through a real worker and
scraped from a real ``counters-tasks serve``, queue depth and lag with the worker stopped and
after it drained, and a scrape that stays bounded when Redis or the broker is away."""

from __future__ import annotations

import time
import urllib.request
import uuid

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from redis.backoff import NoBackoff
from redis.retry import Retry

from counters_tasks import ranking_bumps, skips, tasks, throughput, visits
from counters_tasks.core.settings import get_settings
from counters_tasks.errors import InvalidInput
from counters_tasks.kinds import VISIT
from counters_tasks.local.redis_server import free_port
from counters_tasks.local.waiting import wait_until
from counters_tasks.ops import metrics
from counters_tasks.ops.web import create_app
from counters_tasks.store import deployment, keys
from counters_tasks.worker import dead_letters, retention
from tests.support.dashboard import TestClient
from tests.support.procs import REPO, celery_env, purge_broker, serving, start_worker
from tests.support.servers import use_settings


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``{(sample name, sorted labels): value}`` of a Prometheus text exposition."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: dict, name: str, **labels: str) -> float | None:
    return found.get((name, tuple(sorted(labels.items()))))


def scrape_app(conn, **app_options) -> dict:
    response = TestClient(create_app(conn, auth=None, **app_options)).get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return samples(response.text)


@pytest.fixture
def broker(redis_url):
    purge_broker(redis_url)
    client = redis.Redis.from_url(get_settings().broker_url)
    yield client
    client.flushdb()
    client.close()


# --- the totals, in process ------------------------------------------------------------------


def test_requests_that_were_not_page_views_are_counted_by_route_and_reason(conn, broker):
    skips.count_skipped(
        conn,
        [
            {"route": "middleware", "reason": "crawler", "count": 3},
            {"route": "middleware", "reason": "static", "count": 2},
        ],
        message_id="web-1",
    )
    skips.count_skipped(conn, [{"route": "middleware", "reason": "crawler", "count": 3}], message_id="web-1")  # again
    skips.count_skipped(conn, skips.as_items("import", {"crawler": 4, "malformed": 1, "refused:future": 2}))
    found = scrape_app(conn)
    assert value(found, "counters_skipped_total", route="middleware", reason="crawler") == 3
    assert value(found, "counters_skipped_total", route="middleware", reason="static") == 2
    assert value(found, "counters_skipped_total", route="import", reason="crawler") == 4
    assert value(found, "counters_skipped_total", route="import", reason="malformed") == 1
    # a bad item is refused on its own (counted), the good ones of its message are added
    assert (
        skips.count_skipped(
            conn,
            [
                {"route": "middleware", "reason": "made-up", "count": 1},
                {"route": "middleware", "reason": "static", "count": 1},
            ],
            message_id="web-2",
        )
        == 1
    )
    found = scrape_app(conn)
    assert value(found, "counters_skipped_total", route="middleware", reason="static") == 3
    assert value(found, "counters_refused_total", reason="bad_input") == 1
    assert all(reason != "made-up" for (_route, reason) in skips.counts(conn))
    with pytest.raises(InvalidInput):  # a payload that is not a list of counts is refused whole
        skips.count_skipped(conn, {"route": "middleware", "reason": "static", "count": 1})


@pytest.mark.parametrize(
    "size, bucket",
    [(0, "1"), (1, "1"), (2, "10"), (10, "10"), (11, "50"), (1000, "1000"), (20000, "20000"), (20001, "inf")],
)
def test_a_batch_falls_in_the_bucket_of_its_upper_bound(size, bucket):
    assert throughput.bucket_field("record_visits", size) == f"batch:record_visits:{bucket}"


def test_a_batch_counts_what_it_applied_and_a_redelivery_counts_as_duplicates(conn):
    now = time.time()
    good = [{"ip": f"192.0.2.{n}", "path": f"/m{n % 2}", "ts": now - 60 + n} for n in range(5)]
    bad = [{"ip": "not-an-ip", "path": "/"}, {"ip": "192.0.2.9", "path": "/", "oops": 1}]
    assert visits.apply_visits(conn, good + bad, message_id="batch-1") == 5
    first = throughput.totals(conn)
    assert (first.applied["visit"], first.duplicates["visit"]) == (5, 0)
    assert first.newest_ts == good[-1]["ts"]
    assert visits.apply_visits(conn, good + bad, message_id="batch-1") == 5  # redelivered: nothing written
    again = throughput.totals(conn)
    assert (again.applied["visit"], again.duplicates["visit"]) == (5, 5)
    sizes = again.batches["record_visits"]
    assert (sizes.count, sizes.total) == (2, 14)
    assert dict(sizes.buckets)["1"] == 0 and dict(sizes.buckets)["10"] == 2 and dict(sizes.buckets)["+Inf"] == 2
    assert again.batches["record_visit"].count == 0


def test_a_visit_without_a_message_id_is_never_a_duplicate(conn):
    batch = [{"ip": "192.0.2.1", "path": "/", "ts": time.time()}]
    visits.apply_visits(conn, batch)
    visits.apply_visits(conn, batch)
    assert throughput.totals(conn).applied["visit"] == 2 and throughput.totals(conn).duplicates["visit"] == 0


def test_ranking_bumps_late_ones_are_not_applied(conn):
    now = time.time()
    bumps = [{"board": "mb", "member": f"m{n}", "ts": now} for n in range(3)]
    late = {"board": "mb", "member": "old", "ts": now - 3 * 86400}  # out of a 24 h window
    assert ranking_bumps.incr_bumps(conn, bumps, message_id="r1") == 3
    ranking_bumps.incr_bumps(conn, [*bumps, late], message_id="r2")
    ranking_bumps.incr_bumps(conn, bumps, message_id="r1")  # redelivered
    totals = throughput.totals(conn)
    assert (totals.applied["ranking"], totals.duplicates["ranking"]) == (6, 3)
    assert totals.batches["incr_rankings"].total == 10
    assert totals.newest_ts is None  # kept for visits only


def test_the_newest_item_time_is_a_maximum(conn):
    now = time.time()
    visits.apply_visits(conn, [{"ip": "192.0.2.1", "path": "/", "ts": now - 10}], message_id="new")
    visits.apply_visits(conn, [{"ip": "192.0.2.1", "path": "/", "ts": now - 500}], message_id="old")
    assert throughput.totals(conn).newest_ts == now - 10


def test_a_redis_error_never_fails_the_write(conn, monkeypatch, caplog):
    def refuse(*_args, **_kwargs):
        raise redis.ConnectionError("away")

    monkeypatch.setattr(throughput, "run_script", refuse)
    assert visits.apply_visits(conn, [{"ip": "192.0.2.1", "path": "/"}], message_id="x") == 1
    assert "throughput totals not updated" in caplog.text


def test_worker_side_batches_count_each_message_once(conn):
    """``apply_batch`` of per-item messages (as celery-batches hands them over): the batch's
    size once, each message's visit once, a message seen before as a duplicate."""
    from counters_tasks.worker.batch_apply import apply_batch

    class Request:
        def __init__(self, task_id, *args):
            self.id, self.args, self.kwargs, self.delivery_info = task_id, list(args), {}, {}

    now = time.time()
    first = [Request(f"m{n}", f"192.0.2.{n}", "/w", None, now) for n in range(4)]
    assert apply_batch(conn, VISIT, first)["applied"] == 4
    apply_batch(conn, VISIT, [*first[:2], Request("bad", "nope", "/w")])
    totals = throughput.totals(conn)
    assert (totals.applied["visit"], totals.duplicates["visit"]) == (4, 2)
    sizes = totals.batches["record_visit"]
    assert (sizes.count, sizes.total, dict(sizes.buckets)["1"], dict(sizes.buckets)["10"]) == (2, 7, 0, 2)


# --- /metrics, in process ------------------------------------------------------------------


def test_metrics_of_an_idle_deployment(conn, broker):
    found = scrape_app(conn)
    assert value(found, "counters_source_up", source="redis") == 1
    assert value(found, "counters_source_up", source="broker") == 1
    assert value(found, "counters_visits_applied_total") == 0
    assert value(found, "counters_queue_length", queue="visits") == 0
    assert value(found, "counters_queue_length", queue="maintenance") == 0
    assert value(found, "counters_lag_oldest_unapplied_seconds", queue="visits") == 0
    assert value(found, "counters_refused_total", reason="bad_input") == 0
    assert value(found, "counters_batch_size_count", kind="record_visits") == 0
    assert value(found, "counters_lag_newest_applied_seconds") is None  # nothing applied yet
    assert all(name.startswith("counters_") for name, _labels in found)


def test_waiting_messages_give_the_queue_length_and_the_lag(conn, broker):
    """No worker: what is sent waits in the broker, and the oldest item time at the head of the
    queue is the lag (a batch's oldest item; a per-item message's ts)."""
    now = time.time()
    tasks.record_visits.apply_async(
        args=[[{"ip": "192.0.2.1", "path": "/", "ts": now - 300}, {"ip": "192.0.2.2", "path": "/", "ts": now - 400}]]
    )
    tasks.record_visit.delay("192.0.2.3", "/", None, now - 10)
    tasks.record_visit.delay("192.0.2.3", "/")  # no ts: stamped by the worker, no lag known
    broker.lpush("visits", "not json")  # newest: never read for the lag (the head is the oldest)
    found = scrape_app(conn)
    assert value(found, "counters_queue_length", queue="visits") == 4
    lag = value(found, "counters_lag_oldest_unapplied_seconds", queue="visits")
    assert 400 <= lag < 400 + 30
    later = scrape_app(conn)
    assert value(later, "counters_lag_oldest_unapplied_seconds", queue="visits") > lag  # it grows while waiting


def test_a_delay_without_ts_is_as_old_as_when_it_was_sent(conn, broker):
    """``.delay()`` without ``ts`` (the item is stamped when a worker applies it): the message
    next in line still tells how long it has waited, from the time this app sent it."""
    sent = time.time()
    tasks.record_visit.delay("192.0.2.3", "/")  # oldest, without ts
    tasks.record_visit.delay("192.0.2.3", "/", None, time.time() + 1)
    found = scrape_app(conn)
    assert value(found, "counters_queue_length", queue="visits") == 2
    lag = value(found, "counters_lag_oldest_unapplied_seconds", queue="visits")
    assert lag is not None and 0 <= lag <= time.time() - sent
    grown = wait_until(
        lambda: (value(scrape_app(conn), "counters_lag_oldest_unapplied_seconds", queue="visits") or 0) >= 1.0,
        timeout=10,
        interval=0.2,
        what="the lag to grow while it waits",
    )
    assert grown


def test_a_foreign_message_without_ts_leaves_the_lag_unknown(conn, broker):
    """A message sent by another Celery app (no send time of ours) and without ``ts``: unknown, not 0."""
    from celery import Celery

    foreign = Celery("other", broker=get_settings().broker_url)
    foreign.send_task("counters_tasks.record_visit", args=["192.0.2.3", "/"], queue="visits")
    tasks.record_visit.delay("192.0.2.3", "/", None, time.time() - 100)
    found = scrape_app(conn)
    assert value(found, "counters_queue_length", queue="visits") == 2
    assert value(found, "counters_lag_oldest_unapplied_seconds", queue="visits") is None  # unknown, not 0


@pytest.mark.parametrize(
    "task, args, kwargs, expected",
    [
        ("counters_tasks.record_visit", ["192.0.2.1", "/", None, 5.0], {}, 5.0),
        ("counters_tasks.record_visit", ["192.0.2.1", "/"], {"ts": 6}, 6.0),
        ("counters_tasks.record_visit", ["192.0.2.1", "/"], {}, None),
        ("counters_tasks.incr_ranking", ["b", "m", 1, 7.5], {}, 7.5),
        ("counters_tasks.update_counter", ["c", 1, 8], {}, 8.0),
        ("counters_tasks.count_unique", ["s", 9], {}, 9.0),
        ("counters_tasks.record_visits", [[{"ts": 3}, {"ts": 2}, {}, "x"]], {}, 2.0),
        ("counters_tasks.incr_rankings", [], {"events": [{"ts": 4}, {"ts": True}]}, 4.0),
        ("counters_tasks.record_visits", ["not a list"], {}, None),
        ("counters_tasks.record_visits", [[{"ts": float("nan")}, {"ts": float("inf")}, {"ts": "1"}]], {}, None),
        ("counters_tasks.clean_counters", [], {}, None),
    ],
)
def test_item_time_of_each_task(task, args, kwargs, expected):
    assert metrics.item_time(task, args, kwargs) == expected


def test_dead_letters_are_exported(conn, broker):
    dead_letters.set_aside_message(broker, ("unacked", "unacked_index"), "visits", b"junk", "not_json", None)
    dead_letters.set_aside_message(broker, ("unacked", "unacked_index"), "visits", b"junk2", "not_json", None)
    dead_letters.drop(broker, 0)
    found = scrape_app(conn)
    assert value(found, "counters_dead_letters") == 1
    assert value(found, "counters_dead_lettered_total", reason="not_json") == 2


def test_the_histogram_is_cumulative(conn, broker):
    for size in (1, 3, 3, 700):
        visits.apply_visits(conn, [{"ip": "192.0.2.1", "path": "/"}] * size)
    found = scrape_app(conn)
    buckets = {
        le: value(found, "counters_batch_size_bucket", kind="record_visits", le=le)
        for le in ("1.0", "10.0", "500.0", "1000.0", "+Inf")
    }
    assert buckets == {"1.0": 1, "10.0": 3, "500.0": 3, "1000.0": 4, "+Inf": 4}
    assert value(found, "counters_batch_size_sum", kind="record_visits") == 707
    assert value(found, "counters_batch_size_count", kind="record_visits") == 4
    assert value(found, "counters_visits_applied_total") == 707


def test_metrics_need_the_dashboards_auth(conn, monkeypatch, broker):
    use_settings(monkeypatch, COUNTERS_DASHBOARD_AUTH="ops:pw")
    client = TestClient(create_app(conn))
    assert client.get("/metrics").status_code == 401
    answer = client.get("/metrics", auth=("ops", "pw"))
    assert answer.status_code == 200 and "counters_visits_applied_total" in answer.text


def test_a_source_that_is_away_is_reported_not_waited_for(conn, monkeypatch):
    """A dead broker (connection refused) and a dead counters Redis: the scrape still answers,
    at once, saying which source is away."""
    use_settings(monkeypatch, CELERY_BROKER_URL=f"redis://127.0.0.1:{free_port()}/0")
    dead = redis.Redis(port=free_port(), socket_connect_timeout=0.5, socket_timeout=0.5, retry=Retry(NoBackoff(), 0))
    started = time.monotonic()
    found = scrape_app(dead)
    assert time.monotonic() - started < 5
    assert value(found, "counters_source_up", source="redis") == 0
    assert value(found, "counters_source_up", source="broker") == 0
    assert value(found, "counters_visits_applied_total") is None
    assert value(found, "counters_queue_length", queue="visits") is None


def test_a_scrape_reads_a_fixed_number_of_keys(conn, broker, monkeypatch):
    """However much data there is: the commands of a scrape are the same few, none of them a
    scan of the keyspace (KEYS, SCAN) or of a queue (LRANGE)."""
    visits.apply_visits(conn, [{"ip": f"192.0.2.{n % 250}", "path": f"/{n}"} for n in range(300)], message_id="b")
    tasks.record_visit.delay("192.0.2.3", "/")
    sent = []
    real = redis.client.Pipeline.execute

    def spy(self, *args, **kwargs):
        sent.extend(str(command[0][0]).upper() for command in self.command_stack)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(redis.client.Pipeline, "execute", spy)
    scrape_app(conn)
    assert sorted(set(sent)) == ["GET", "HGETALL", "HLEN", "LINDEX", "LLEN", "PFCOUNT", "ZRANGE"]
    # throughput, refusals, skips, retention, the tag key and the deployment's marker; visitors now
    # (one site); 2 queues x 4 lists; 4 heads; unacked x2; dead x2
    assert len(sent) == 6 + 1 + 8 + 4 + 1 + 1 + 1 + 1
    assert (
        value(samples(TestClient(create_app(conn, auth=None)).get("/metrics").text), "counters_visits_applied_total")
        == 300
    )


# --- a real worker, a real ``counters-tasks serve`` ------------------------------------------


@pytest.fixture
def serve(redis_url, tmp_path):
    """``python -m counters_tasks.ops.cli serve`` on a free port, as a user starts it."""

    def scrape_at(base: str) -> dict:
        with urllib.request.urlopen(base + "/metrics", timeout=10) as answer:
            assert answer.status == 200
            return samples(answer.read().decode())

    with serving(celery_env(redis_url), tmp_path / "serve.log", scrape_at) as base:
        yield lambda: scrape_at(base)


@pytest.mark.processes
def test_a_known_mix_through_a_real_worker_is_counted_exactly(redis_url, raw_conn, broker, serve, tmp_path):
    now = time.time()
    good = [{"ip": f"198.51.100.{n}", "path": f"/p{n % 3}", "ts": now - 300 + n} for n in range(40)]
    bad = [
        {"ip": "999.1.1.1", "path": "/"},  # bad_input
        {"ip": "198.51.100.1", "path": "/", "referer": "x"},  # malformed
        {"ip": "198.51.100.1", "path": "/", "ts": now + 86400},
    ]  # future
    batch_id = str(uuid.uuid4())
    tasks.record_visits.apply_async(args=[good + bad], task_id=batch_id)
    tasks.record_visits.apply_async(args=[good + bad], task_id=batch_id)  # delivered again: duplicates
    newest = now - 5
    for n in range(20):
        tasks.record_visit.delay(f"203.0.113.{n}", "/single", None, newest - n)
    tasks.record_visit.delay("not-an-ip", "/single")  # bad_input
    for n in range(6):
        tasks.incr_ranking.delay("metrics-board", f"m{n % 2}", 1, now)
    tasks.incr_rankings.apply_async(args=[[{"board": "metrics-board", "member": "m9", "ts": now}] * 4])
    broker.lpush("visits", b"\x00 not a message")  # set aside by the worker's transport

    waiting = serve()  # the worker is not running yet: everything waits
    assert value(waiting, "counters_queue_length", queue="visits") == 2 + 21 + 6 + 1 + 1
    lag = value(waiting, "counters_lag_oldest_unapplied_seconds", queue="visits")
    assert lag >= 300, lag  # the first batch's oldest visit
    wait_until(
        lambda: value(serve(), "counters_lag_oldest_unapplied_seconds", queue="visits") > lag + 0.5,
        timeout=10,
        what="the lag to grow while nothing is applied",
    )
    assert value(waiting, "counters_visits_applied_total") == 0

    worker = start_worker(celery_env(redis_url), tmp_path / "worker.log", concurrency=2)
    try:

        def drained() -> dict | None:
            found = serve()
            done = (
                value(found, "counters_queue_length", queue="visits") == 0
                and value(found, "counters_unacked_messages") == 0
                and value(found, "counters_visits_applied_total") == 60
                and value(found, "counters_ranking_events_applied_total") == 10
                and value(found, "counters_batch_size_sum", kind="record_visit") == 21
            )
            return found if done else None

        found = wait_until(drained, timeout=90, what=f"the worker to apply everything; log:\n{worker.output()[-3000:]}")
    finally:
        assert worker.stop() == 0, worker.output()[-3000:]
    assert value(found, "counters_visits_applied_total") == 40 + 20
    assert value(found, "counters_duplicates_skipped_total", kind="visit") == 40
    assert value(found, "counters_duplicates_skipped_total", kind="ranking") == 0
    assert value(found, "counters_ranking_events_applied_total") == 6 + 4
    assert value(found, "counters_refused_total", reason="bad_input") == 2
    assert value(found, "counters_refused_total", reason="malformed") == 1
    assert value(found, "counters_refused_total", reason="future") == 1
    assert value(found, "counters_refused_total", reason="closed_day") == 0
    assert value(found, "counters_batch_size_count", kind="record_visits") == 2
    assert value(found, "counters_batch_size_bucket", kind="record_visits", le="50.0") == 2
    assert value(found, "counters_batch_size_sum", kind="record_visits") == 86
    assert value(found, "counters_batch_size_sum", kind="incr_ranking") == 6
    assert value(found, "counters_batch_size_sum", kind="incr_rankings") == 4
    assert value(found, "counters_dead_letters") == 1
    assert value(found, "counters_dead_lettered_total", reason="not_json") == 1
    assert value(found, "counters_lag_oldest_unapplied_seconds", queue="visits") == 0
    assert value(found, "counters_newest_applied_timestamp_seconds") == pytest.approx(newest, abs=1e-6)
    assert value(found, "counters_lag_newest_applied_seconds") >= 5
    assert raw_conn.exists(keys.throughput())


def test_docs_list_every_metric_with_its_type(conn, broker):
    """docs/metrics.md's table names every family /metrics exports, with its type, and no other."""
    visits.apply_visits(conn, [{"ip": "192.0.2.1", "path": "/"}])  # the newest-item gauges appear
    conn.hset(deployment.marker_name(), "lost_at", time.time())  # and the data-loss gauge (a loss recorded)
    conn.hset(retention.state_key(), "last_run", time.time())  # and the retention pass's (a pass ran)
    text = TestClient(create_app(conn, auth=None)).get("/metrics").text
    exported = {
        family.name if family.type != "counter" else family.name + "_total": family.type
        for family in text_string_to_metric_families(text)
    }
    documented = {}
    for line in (REPO / "docs" / "metrics.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `counters_") and len(cells) == 5:
            documented[cells[0].strip("`")] = cells[1]
    assert documented == exported
