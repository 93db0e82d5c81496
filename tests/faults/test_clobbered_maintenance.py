"""The scripts that are not counting writes (the cleaner, ranking rotation/rebuild/deletion, the dead
letters, the workers' throughput totals, the broker's take) meet a key changed by hand to another
type: each fails naming the key before its first write, so nothing is left half-done (a board
marked as being deleted, a rotation point moved with its slots unsubtracted, a message popped from
its queue and lost, a dead-letter record kept twice), and once the key is repaired the same call
does its work. Every case compares a dump of the whole database before and after the failed call.
"""

from __future__ import annotations

import time

import pytest
import redis

from counters_tasks import counters, ranking, throughput
from counters_tasks.core.validation import MAX_AMOUNT
from counters_tasks.store import keys
from counters_tasks.store.scripts import run_script
from tests.support.servers import dump_all

HOUR = 3600
NOW = (int(time.time()) // HOUR) * HOUR - 1800  # mid-slot, in the past


def clobber(conn, key: bytes | str) -> list:
    """Replace ``key`` by a STRING (no key these scripts write is one), as someone typing at
    redis-cli would; returns what it held."""
    held = conn.dump(key)
    conn.set(key, "written by hand")
    return [held]


def restore(conn, key: bytes | str, held: list) -> None:
    """Put back what ``key`` held (the operator's repair)."""
    conn.delete(key)
    if held[0] is not None:
        conn.restore(key, 0, held[0])


def fails_naming(conn, key: str, call) -> None:
    """``call`` fails with WRONGTYPE naming ``key`` and leaves the database as it was."""
    before = dump_all(conn)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE") as failed:
        call()
    assert dump_all(conn) == before
    assert key in str(failed.value)


def old_board(conn) -> ranking.Ranking:
    """A 4-hour board with bumps in 6 hourly slots, the oldest 3 out of the window at NOW."""
    board = ranking.Ranking(conn, "posts", period_hours=4, interval_hours=1)
    for hours_ago in range(6, 0, -1):
        board.incr_many(
            [(f"p{hours_ago}", hours_ago, NOW - hours_ago * HOUR), ("all", 1, NOW - hours_ago * HOUR)],
            message_id=f"m{hours_ago}",
        )
    return board


@pytest.mark.parametrize("kind", ["meta", "top", "slot index", "expired slot"])
@pytest.mark.usefixtures("bound_deployment")
def test_a_clobbered_board_key_fails_the_rotation_before_any_write(raw_conn, kind):
    board = old_board(raw_conn)
    key = {
        "meta": keys.ranking_meta("posts"),
        "top": keys.ranking_top("posts"),
        "slot index": keys.ranking_slots("posts"),
        "expired slot": keys.ranking_slot("posts", board.slot_of(NOW - 6 * HOUR)),
    }[kind]
    held = clobber(raw_conn, key)
    fails_naming(raw_conn, key, lambda: board.rotate(now=NOW))
    restore(raw_conn, key, held)
    assert board.rotate(now=NOW) == 3
    assert board.top(withscores=True, now=NOW) == [("all", 3), ("p3", 3), ("p2", 2), ("p1", 1)]


@pytest.mark.usefixtures("bound_deployment")
def test_rotate_all_rotates_the_other_boards_and_names_the_broken_one(raw_conn):
    board = old_board(raw_conn)
    other = ranking.Ranking(raw_conn, "other", period_hours=4, interval_hours=1)
    other.incr("x", 5, now=NOW - 6 * HOUR, message_id="o1")
    other.incr("y", 1, now=NOW, message_id="o2")
    clobber(raw_conn, keys.ranking_top("posts"))
    with pytest.raises(RuntimeError, match="posts"):
        ranking.rotate_all(raw_conn, now=NOW)
    assert other.top(withscores=True, now=NOW) == [("y", 1)]
    assert raw_conn.zcard(keys.ranking_slots("other")) == 1  # rotated: the old slot is gone
    assert raw_conn.zcard(keys.ranking_slots("posts")) == 6  # the broken board: untouched
    del board


@pytest.mark.parametrize("kind", ["top", "slot index", "slot"])
@pytest.mark.usefixtures("bound_deployment")
def test_a_clobbered_board_key_fails_the_rebuild_and_the_deletion_before_any_write(raw_conn, kind):
    board = old_board(raw_conn)
    key = {
        "top": keys.ranking_top("posts"),
        "slot index": keys.ranking_slots("posts"),
        "slot": keys.ranking_slot("posts", board.slot_of(NOW - 2 * HOUR)),
    }[kind]
    held = clobber(raw_conn, key)
    fails_naming(raw_conn, key, lambda: ranking.rebuild(raw_conn, "posts"))
    if kind != "slot":  # a slot hash is only unlinked by the deletion, whatever its type
        fails_naming(raw_conn, key, lambda: ranking.delete_board(raw_conn, "posts"))
    restore(raw_conn, key, held)
    assert ranking.rebuild(raw_conn, "posts") == 7
    assert ranking.delete_board(raw_conn, "posts")
    assert not [k for k in raw_conn.scan_iter(match=keys.ranking_meta("posts")[:-4] + "*")]


@pytest.mark.parametrize("kind", ["counter hash", "due subset", "due summary", "scan cursors"])
@pytest.mark.usefixtures("bound_deployment")
def test_a_clobbered_counter_key_fails_the_cleaner_before_any_write(raw_conn, kind):
    counters.update_counter(raw_conn, "hits:/old", 3, NOW - 10 * 86400, message_id="c1")
    tag, group = keys.counter_tag("hits:/old"), keys.counter_tag("hits:/old")
    key = {
        "counter hash": keys.counter_hash("hits:/old"),
        "due subset": keys.counter_due_subset(group, keys.counter_subset("hits:/old")),
        "due summary": keys.counter_due(tag),
        "scan cursors": keys.counter_scan(tag),
    }[kind]
    held = clobber(raw_conn, key)
    fails_naming(raw_conn, key, lambda: counters.clean_counters(raw_conn, now=NOW))
    restore(raw_conn, key, held)
    assert counters.clean_counters(raw_conn, now=NOW) > 0
    assert counters.get_counter(raw_conn, "hits:/old", 60, now=NOW) == []


def dead_letter_call(conn) -> list:
    return run_script(
        conn,
        "dead_letter",
        [keys.dead_letters(), keys.dead_letter_reasons(), "unacked", "unacked_index"],
        ['{"reason": "failed"}', 10, "failed", "tag-1"],
    )


@pytest.mark.parametrize("kind", ["list", "reasons", "unacked", "unacked index"])
def test_a_clobbered_key_fails_setting_aside_before_any_write(raw_conn, kind):
    raw_conn.hset("unacked", "tag-1", "the message")
    raw_conn.zadd("unacked_index", {"tag-1": 1})
    key = {
        "list": keys.dead_letters(),
        "reasons": keys.dead_letter_reasons(),
        "unacked": "unacked",
        "unacked index": "unacked_index",
    }[kind]
    held = clobber(raw_conn, key)
    fails_naming(raw_conn, key, lambda: dead_letter_call(raw_conn))
    restore(raw_conn, key, held)
    assert dead_letter_call(raw_conn) == 1
    assert raw_conn.hgetall(keys.dead_letter_reasons()) == {b"failed": b"1"}
    assert not raw_conn.exists("unacked", "unacked_index")


@pytest.mark.parametrize("kind", ["unacked", "unacked index", "dead letters", "reasons"])
def test_a_clobbered_broker_key_leaves_the_message_in_its_queue(raw_conn, kind):
    queue = "visits"
    message = '{"properties": {"delivery_tag": "t1", "delivery_info": {"exchange": "", "routing_key": "visits"}}}'
    raw_conn.rpush(queue, message)
    key = {
        "unacked": "unacked",
        "unacked index": "unacked_index",
        "dead letters": keys.dead_letters(),
        "reasons": keys.dead_letter_reasons(),
    }[kind]

    def take():
        return run_script(
            raw_conn,
            "broker_take",
            ["unacked", "unacked_index", keys.dead_letters(), keys.dead_letter_reasons(), queue],
            [1_000_000, 10],
        )

    held = clobber(raw_conn, key)
    fails_naming(raw_conn, key, take)
    assert raw_conn.lrange(queue, 0, -1) == [message.encode()]  # not popped and lost
    restore(raw_conn, key, held)
    assert take() == [queue.encode(), message.encode()]
    assert raw_conn.hexists("unacked", "t1")


def test_a_clobbered_throughput_total_adds_nothing(raw_conn):
    assert throughput.increment(raw_conn, {"visits": 2, "batches": 1}, newest_ts=NOW)
    raw_conn.hset(keys.throughput(), "batches", "not a number")
    before = raw_conn.hgetall(keys.throughput())
    assert not throughput.increment(raw_conn, {"visits": 5, "batches": 1}, newest_ts=NOW + 60)
    assert raw_conn.hgetall(keys.throughput()) == before  # visits not added, newest_ts not moved
    clobber(raw_conn, keys.throughput())
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        run_script(raw_conn, "throughput_add", [keys.throughput()], ["", "visits", 1])
    assert raw_conn.get(keys.throughput()) == b"written by hand"


def overflowing_call(conn, write, key_part: str) -> str:
    """Apply ``write(message_id)`` (the largest amount accepted) until Redis refuses one; that call
    must leave the database as it was, with no dedupe marker. Returns its error."""
    for _ in range(1015):  # 1015 * (2**53 - 1) < 9.2e18: accepted (the first refusal comes later)
        write(None)
    for n in range(20):
        before = dump_all(conn)
        try:
            write(f"big-{n}")
        except redis.ResponseError as exc:
            assert dump_all(conn) == before  # nothing written, no marker: the retry is not skipped
            assert key_part in str(exc)
            return str(exc)
    raise AssertionError("no write was refused")


@pytest.mark.usefixtures("bound_deployment")
def test_a_counter_bucket_about_to_overflow_fails_the_call_whole(raw_conn):
    """HINCRBY fails once a field would pass 2**63; met midway, it left the earlier buckets and the
    marker (the retry then skipped the message). Checked first, the call fails whole."""
    # the later calls open a new 1-second bucket first (written, then undone when a coarser one overflows)
    error = overflowing_call(
        raw_conn,
        lambda mid: counters.update_counter(raw_conn, "bytes", MAX_AMOUNT, NOW + (mid is not None), message_id=mid),
        keys.counter_hash("bytes"),
    )
    assert "overflow" in error


@pytest.mark.usefixtures("bound_deployment")
def test_a_ranking_slot_about_to_overflow_fails_the_call_whole(raw_conn):
    board = ranking.Ranking(raw_conn, "big")
    error = overflowing_call(
        raw_conn,
        lambda mid: board.incr_many([("a", 1, NOW), ("m", MAX_AMOUNT, NOW)], message_id=mid),
        keys.ranking_slot("big", board.slot_of(NOW)),
    )
    assert "overflow" in error


@pytest.mark.usefixtures("bound_deployment")
def test_a_ranking_slot_member_that_is_not_an_integer_fails_the_call_whole(raw_conn):
    """``ranking_incr`` sums a slot's members in Lua (one HSET a slot, issue 21): a member changed
    by hand to what HINCRBY would refuse fails the call before any write, with no marker."""
    board = ranking.Ranking(raw_conn, "hand")
    board.incr_many([("a", 1, NOW), ("b", 1, NOW)])
    slot = keys.ranking_slot("hand", board.slot_of(NOW))
    raw_conn.hset(slot, "b", "1.5")
    before = dump_all(raw_conn)
    with pytest.raises(redis.ResponseError, match="not an integer"):
        board.incr_many([("a", 2, NOW), ("b", 2, NOW)], message_id="hand-1")
    assert dump_all(raw_conn) == before
    raw_conn.hset(slot, "b", 1)
    for _ in range(2):
        board.incr_many([("a", 2, NOW), ("b", 2, NOW)], message_id="hand-1")
    assert board.top(withscores=True, now=NOW) == [("a", 3), ("b", 3)]
