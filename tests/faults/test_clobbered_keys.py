"""A key of the package's changed by hand to another type (or written by another program under the
prefix) never leaves a message half-applied: the script that meets it fails before its first
write, so no dedupe marker holds it back, and once the key is repaired the retry of the same
message applies it whole, exactly once. Every kind of key a counting script writes, through the
batch function the workers use; and through a real worker, which sets the message aside."""

from __future__ import annotations

import json
import time

import pytest
import redis

from counters_tasks import counters, ranking, sitestats, uniques, visits
from counters_tasks.core.days import local_day
from counters_tasks.local.waiting import wait_until
from counters_tasks.sitestats import page_all, page_day, pairs, site_all, site_day
from counters_tasks.store import keys
from tests.support.procs import celery_env, cli, purge_broker, start_worker
from tests.support.servers import dump_all, use_settings

NOW = time.time() - 60
DAY = local_day(NOW)
PATHS = ["/a", "/b", "/c"]
BATCH = [
    {
        "ip": f"198.51.100.{n % 7 + 1}",
        "path": PATHS[n % 3],
        "ts": NOW + n % 5,
        "session_id": f"{n % 11:08x}-0000-4000-8000-000000000000",
    }
    for n in range(30)
]


def uniques_shard_of_first() -> str:
    number = uniques.session_number(BATCH[0]["session_id"])
    return keys.uniques_shard(DAY, uniques.shard_of(number, uniques.DAILY_EXPECTED))


CLOBBERED = {
    "day totals": lambda: [site_day.site_day_totals(DAY)],
    "day visitors": lambda: [site_day.site_day_visitors(DAY, "exact")],
    "day range HLL": lambda: [site_day.site_day_range_hll(DAY)],
    "day pages": lambda: [page_day.site_day_pages(DAY)],
    "day pairs": lambda: [pairs.site_day_pairs(DAY)],
    "site shards": lambda: [site_all.site_all_totals(shard) for shard in range(site_all.SITE_SHARDS)],
    "path totals": lambda: [page_all.path_totals("/a")],
    "counter hash": lambda: [keys.counter_hash("hits:/b")],
    "counter due index": lambda: [keys.counter_due_subset(keys.counter_tag("hits:/b"), keys.counter_subset("hits:/b"))],
    "counter due summary": lambda: [keys.counter_due(keys.counter_tag("hits:/b"))],
    "uniques shard": lambda: [uniques_shard_of_first()],
}


def figures(conn) -> dict:
    """Everything the batch counts, read through the public API."""
    return {
        "day": sitestats.site_visit_info(conn, DAY),
        "all": sitestats.site_visit_info(conn, None),
        "paths": [(sitestats.site_visit_info(conn, DAY, p), sitestats.site_visit_info(conn, None, p)) for p in PATHS],
        "hits": [
            sum(t for _s, t in counters.get_counter(conn, name, 86400, now=NOW + 10))
            for name in ("hits", *(f"hits:{p}" for p in PATHS))
        ],
        "uniques": uniques.unique_visitors(conn, DAY),
    }


def expected_figures() -> dict:
    """The batch counted by hand."""

    def uv(items):
        return len({v["ip"] for v in items})

    by_path = {p: [v for v in BATCH if v["path"] == p] for p in PATHS}
    return {
        "day": (DAY, len(BATCH), uv(BATCH)),
        "all": (None, len(BATCH), uv(BATCH)),
        "paths": [((DAY, len(by_path[p]), uv(by_path[p])), (None, len(by_path[p]), uv(by_path[p]))) for p in PATHS],
        "hits": [len(BATCH), *(len(by_path[p]) for p in PATHS)],
        "uniques": len({v["session_id"] for v in BATCH}),
    }


@pytest.mark.parametrize("kind", list(CLOBBERED))
@pytest.mark.usefixtures("bound_deployment")
def test_a_clobbered_key_fails_its_call_whole_and_the_retry_applies_the_message_once(raw_conn, kind):
    clobbered = CLOBBERED[kind]()
    for key in clobbered:
        raw_conn.rpush(key, "written by hand")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        visits.apply_visits(raw_conn, BATCH, message_id="batch-1")
    for key in clobbered:
        assert raw_conn.lrange(key, 0, -1) == [b"written by hand"]  # the failing call wrote nothing there
        raw_conn.delete(key)  # the operator repairs it
    assert visits.apply_visits(raw_conn, BATCH, message_id="batch-1") == len(BATCH)  # the redelivery
    assert figures(raw_conn) == expected_figures()
    visits.apply_visits(raw_conn, BATCH, message_id="batch-1")  # once more: nothing twice
    assert figures(raw_conn) == expected_figures()


def paths_of_one_group(count: int) -> list[str]:
    """``count`` paths whose all-time hashes share one tag group (one ``path_all`` call)."""
    by_group: dict[str, list[str]] = {}
    for n in range(100_000):
        path = f"/group/{n}"
        found = by_group.setdefault(page_all.path_tag(path), [])
        found.append(path)
        if len(found) == count:
            return found
    raise AssertionError("no tag group got enough paths")  # pragma: no cover


@pytest.mark.parametrize("mode", ["exact", "hll"])
@pytest.mark.usefixtures("bound_deployment")
def test_a_clobbered_path_after_others_in_its_call_takes_theirs_back_exactly(raw_conn, monkeypatch, mode):
    """``path_all`` checks a path's hash by its read (an HMGET, no TYPE first, issue 21); meeting a
    clobbered one after paths it has already planned, it has written none of them, so they read
    byte for byte as before and the retry counts the message once."""
    use_settings(monkeypatch, COUNTERS_UV_MODE=mode)
    seen_before, other, clobbered = paths_of_one_group(3)
    sitestats.record_visit(raw_conn, "192.0.2.1", seen_before, NOW - 5, message_id="earlier")
    before = {path: raw_conn.hgetall(page_all.path_totals(path)) for path in (seen_before, other)}
    assert before[seen_before] and not before[other]
    raw_conn.rpush(page_all.path_totals(clobbered), "written by hand")
    batch = [
        {"ip": "192.0.2.1", "path": seen_before, "ts": NOW},
        {"ip": "192.0.2.2", "path": seen_before, "ts": NOW},
        {"ip": "192.0.2.3", "path": other, "ts": NOW},
        {"ip": "192.0.2.4", "path": clobbered, "ts": NOW},
    ]
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        visits.apply_visits(raw_conn, batch, message_id="batch-p")
    assert {path: raw_conn.hgetall(page_all.path_totals(path)) for path in (seen_before, other)} == before
    assert not raw_conn.keys(keys.path_seen("*", tag=page_all.path_tag(other)))  # no marker for the call
    raw_conn.delete(page_all.path_totals(clobbered))
    for _ in range(2):  # the redelivery, then once more: counted once
        visits.apply_visits(raw_conn, batch, message_id="batch-p")
    assert [sitestats.site_visit_info(raw_conn, None, path)[1:] for path in (seen_before, other, clobbered)] == [
        (3, 2),
        (1, 1),
        (1, 1),
    ]


@pytest.mark.parametrize("held", ["abc", "1.5", "nan"])
@pytest.mark.usefixtures("bound_deployment")
def test_a_path_total_that_is_not_an_integer_fails_the_call_whole(raw_conn, held):
    """Exact mode sums a path's pv and uv in Lua (issue 21): a total changed by hand to what
    HINCRBY would refuse fails the call with nothing written, and the repaired retry counts once."""
    first, second = paths_of_one_group(2)
    sitestats.record_visit(raw_conn, "192.0.2.1", second, NOW - 5, message_id="earlier")
    raw_conn.hset(page_all.path_totals(second), "pv", held)
    before = dump_all(raw_conn)
    batch = [{"ip": "192.0.2.2", "path": first, "ts": NOW}, {"ip": "192.0.2.3", "path": second, "ts": NOW}]
    with pytest.raises(redis.ResponseError, match="not an integer"):
        visits.apply_visits(raw_conn, batch, message_id="batch-n")
    group = f"{{{page_all.path_tag(first)}}}".encode()  # the call's keys and its marker: untouched
    assert {key: value for key, value in dump_all(raw_conn).items() if group in key} == {
        key: value for key, value in before.items() if group in key
    }
    raw_conn.hset(page_all.path_totals(second), "pv", 1)
    for _ in range(2):
        visits.apply_visits(raw_conn, batch, message_id="batch-n")
    assert [sitestats.site_visit_info(raw_conn, None, path)[1:] for path in (first, second)] == [(1, 1), (2, 2)]


@pytest.mark.usefixtures("bound_deployment")
def test_a_path_total_past_two_to_the_53_stays_exact(raw_conn):
    path = "/big"
    sitestats.record_visit(raw_conn, "192.0.2.1", path, NOW - 5)
    raw_conn.hset(page_all.path_totals(path), "pv", 2**60)
    visits.apply_visits(raw_conn, [{"ip": f"192.0.2.{n}", "path": path, "ts": NOW} for n in (1, 2, 3)])
    assert sitestats.site_visit_info(raw_conn, None, path)[1:] == (2**60 + 3, 3)


@pytest.mark.parametrize("kind", ["slot", "top", "slot index"])
@pytest.mark.usefixtures("bound_deployment")
def test_a_clobbered_ranking_key_fails_the_call_before_any_write(raw_conn, kind):
    board = ranking.Ranking(raw_conn, "posts")
    slot = board.slot_of(NOW)
    key = {
        "slot": keys.ranking_slot("posts", slot),
        "top": keys.ranking_top("posts"),
        "slot index": keys.ranking_slots("posts"),
    }[kind]
    raw_conn.rpush(key, "written by hand")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        board.incr_many([("p1", 2, NOW), ("p2", 1, NOW)], message_id="like-1")
    assert not raw_conn.exists(keys.ranking_seen("posts", "like-1"))  # no dedupe marker
    raw_conn.delete(key)
    board.incr_many([("p1", 2, NOW), ("p2", 1, NOW)], message_id="like-1")
    board.incr_many([("p1", 2, NOW), ("p2", 1, NOW)], message_id="like-1")
    assert board.top(withscores=True, now=NOW) == [("p1", 2), ("p2", 1)]


@pytest.mark.processes
@pytest.mark.usefixtures("bound_deployment")
def test_a_real_worker_sets_the_message_aside_and_a_requeue_applies_it_once(raw_conn, redis_url, tmp_path, monkeypatch):
    """The worker retries a call that meets a clobbered key, then sets it aside (never acknowledged
    as applied); repaired, ``dead-letters requeue`` applies it whole."""
    from counters_tasks import tasks

    env = celery_env(redis_url, COUNTERS_MAX_ATTEMPTS="2")
    use_settings(monkeypatch, COUNTERS_MAX_ATTEMPTS="2")
    purge_broker(redis_url)
    clobbered = CLOBBERED["counter hash"]()[0]
    raw_conn.rpush(clobbered, "written by hand")
    worker = start_worker(env, tmp_path / "worker.log").wait_ready()

    def set_aside() -> list:
        out = cli(env, "dead-letters", "list", "--json")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)["records"]

    try:
        tasks.record_visits.apply_async(args=[BATCH], task_id="batch-2")
        records = wait_until(set_aside, timeout=120, what=f"the batch set aside; log:\n{worker.output()[-3000:]}")
        assert "WRONGTYPE" in json.dumps(records)
        assert raw_conn.lrange(clobbered, 0, -1) == [b"written by hand"]
        raw_conn.delete(clobbered)
        out = cli(env, "dead-letters", "requeue", "--index", "0")
        assert out.returncode == 0, out.stderr
        wait_until(
            lambda: figures(raw_conn) == expected_figures(),
            timeout=60,
            what=f"the requeued batch applied; log:\n{worker.output()[-3000:]}",
        )
    finally:
        worker.stop()
