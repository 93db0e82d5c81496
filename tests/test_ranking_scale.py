"""Big boards with bounded Redis work: rebuild, rotation, deep pages and deletion of a board of
50,000 members x 24 slots run in calls under 5 ms of the real server's time, give the answers
of a model kept here, and a rebuild or deletion in progress never shows half a board."""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest
import redis

from counters_tasks import ranking, ranking_bumps
from counters_tasks.local.waiting import wait_until
from counters_tasks.store import keys
from counters_tasks.store.scripts import run_script
from tests.support.servers import is_cluster_run, use_settings

MEMBERS = 50_000
SLOTS = 24
LIMIT_BIG_BOARD = 1.3
LIMIT_FRESH = 2.2
LIMIT_AHEAD = 1.6
"""The budget tests' limits, in reference calls (``tests/support/server_cpu.py``): 1.6 times the
most each measured on the machine of record (their docstrings)."""


def build_board(conn, name: str, now: float, members: int = MEMBERS) -> Counter:
    """A 24-hour board with ``members`` members spread over the last 24 hourly slots, written
    straight into its keys (as its scripts would leave them): a model of its totals."""
    rng = random.Random(1)
    board = ranking.Ranking(conn, name)
    board.incr("seed", 1, now=now)  # meta, settings and registry, through the package
    now_slot = ranking.slot_of(now, 1)
    totals: Counter = Counter({"seed": 1})
    pipe = conn.pipeline(transaction=False)
    for slot in range(now_slot - SLOTS + 1, now_slot + 1):
        amounts = {f"m{i}": rng.randint(1, 9) for i in rng.sample(range(members), members // 4)}
        for member, amount in amounts.items():
            totals[member] += amount
        items = list(amounts.items())
        for first in range(0, len(items), 5000):
            pipe.hset(keys.ranking_slot(name, slot), mapping=dict(items[first : first + 5000]))
        pipe.expire(keys.ranking_slot(name, slot), 3 * 86400)
        pipe.zadd(keys.ranking_slots(name), {str(slot): slot})
        pipe.execute()
    seed_slot = keys.ranking_slot(name, now_slot)
    conn.hincrby(seed_slot, "seed", 0)  # already there from the incr
    items = [(member, -total) for member, total in totals.items()]
    for first in range(0, len(items), 5000):
        conn.zadd(keys.ranking_top(name), dict(items[first : first + 5000]))
    return totals


def ranked(totals: Counter) -> list[tuple[str, int]]:
    return sorted(((m, t) for m, t in totals.items() if t > 0), key=lambda p: (-p[1], p[0]))


def big_board_work(raw_conn, call_budget) -> None:
    """Every operation on a big board, checked against the model; its calls left in ``call_budget``."""
    raw_conn.flushdb()
    now = time.time()
    totals = build_board(raw_conn, "big", now)
    expected = ranked(totals)
    call_budget.reset()
    board = ranking.Ranking(raw_conn, "big")
    assert board.top(0, 20, withscores=True, now=now) == expected[:20]
    assert board.top(40_000, 10, withscores=True, now=now) == expected[40_000:40_010]  # a deep page by rank
    assert board.top(0, 5_000, withscores=True, now=now) == expected[:5_000]  # a big page, in calls
    raw_conn.unlink(keys.ranking_top("big"))  # the totals lost: recover them
    # (once Redis's background thread has freed them: it competes with the main thread for a core)
    wait_until(lambda: raw_conn.info("memory")["lazyfree_pending_objects"] == 0, timeout=10, what="lazy free")
    assert board.rebuild() == len(expected)
    assert board.top(0, 100, withscores=True, now=now) == expected[:100]
    later = now + 12 * 3600  # half the slots leave the window
    board.rotate(later)
    now_slot = ranking.slot_of(now, 1)
    kept = Counter()
    by_hand = redis.Redis(connection_pool=raw_conn.connection_pool)  # the test's reads: not the package's calls
    for slot in range(ranking.slot_of(later, 1) - SLOTS + 1, now_slot + 1):
        for member, amount in by_hand.hscan_iter(keys.ranking_slot("big", slot), count=1000):  # short reads
            kept[member.decode()] += int(amount)
    assert board.top(0, 50, withscores=True, now=later) == ranked(kept)[:50]
    assert ranking.delete_board(raw_conn, "big")
    assert not [k for k in raw_conn.scan_iter(match="*big*", count=1000)]
    assert "big" not in ranking.known_boards(raw_conn)


@pytest.mark.long  # (alone on the machine for 10-30 s: make test-long)
@pytest.mark.budget
@pytest.mark.usefixtures("bound_deployment")
def test_a_big_board_is_read_rebuilt_rotated_and_deleted_in_short_calls(raw_conn, call_budget):
    """Every call bounded, judged by the server's CPU time for it in one run
    (``tests/support/server_cpu.py``: the median of the 5 costliest calls, in reference calls of
    about 1 ms). SLOWLOG's wall time judged it before: late in a full ``make test`` one
    ``ranking_top`` call of this 50,000-member board took 6.5-7.5 ms, in a CI run calls of 7.6-29
    ms, while the same calls took 1-3 ms alone: the time Redis waited for a core.

    Measured: the costliest kind of call (the ranking's read and rotation scripts, thousands of
    calls each) 0.6 to 0.8 reference calls at the median, on Redis 7.0 and Valkey 8 here. The
    limit, 1.3 (``LIMIT_BIG_BOARD``), is 1.6 times the most: code that makes these calls twice as
    costly fails, a machine twice as slow passes (its reference calls are twice as slow too), and
    a moment taken from Redis moves neither median."""
    big_board_work(raw_conn, call_budget)
    print(call_budget.report())
    assert call_budget.within(LIMIT_BIG_BOARD) == []


def fresh_batch_work(raw_conn, call_budget) -> None:
    """Batches of ranking bumps (incr_rankings, the worker's ranking batch) of 2,000 distinct
    new members each into a board's new hour, the costliest write: every member a new field of
    the slot hash and a new member of the top. Checked exact; its calls left in ``call_budget``."""
    raw_conn.flushdb()
    now = time.time()
    ranking_bumps.incr_bumps(raw_conn, [{"board": "fresh", "member": "warm", "ts": now}], message_id="warm")
    call_budget.reset()
    expected = Counter({"warm": 1})
    for batch in range(3):
        bumps = [
            {"board": "fresh", "member": f"/post/{batch}/{n}", "amount": n % 3 + 1, "ts": now} for n in range(2_000)
        ]
        ranking_bumps.incr_bumps(raw_conn, bumps, message_id=f"fresh-{batch}")
        expected.update({bump["member"]: bump["amount"] for bump in bumps})
    assert ranking.Ranking(raw_conn, "fresh").top(0, 50, withscores=True, now=now) == ranked(expected)[:50]


@pytest.mark.budget
def test_batches_of_new_members_go_in_calls_under_5_ms(raw_conn, call_budget):
    """``ranking_incr`` took 5-12 ms for 500 bumps of new members on this 2-core machine, 200 up
    to 6.5 ms (issue 21's benchmark): a new slot hash is a listpack up to 512 members, scanned for
    each one. Batches now go BUMPS_PER_CALL bumps a call. One run decides, as above.

    Measured: 1.1 to 1.4 reference calls at the median (``ranking_incr``, 60 calls); the limit,
    2.2 (``LIMIT_FRESH``), 1.6 times the most, as above: 500 bumps a call would be over it."""
    fresh_batch_work(raw_conn, call_budget)
    print(call_budget.report())
    assert call_budget.within(LIMIT_FRESH) == []


@pytest.mark.usefixtures("bound_deployment")
def test_writes_and_reads_during_a_rebuild_wait_for_it_and_stay_exact(raw_conn):
    now = time.time()
    totals = build_board(raw_conn, "live", now, members=5_000)
    raw_conn.delete(keys.ranking_top("live"))
    board_keys, parts = ranking._work_keys("live")  # noqa: SLF001 - one step by hand, as a crashed rebuild leaves it
    assert run_script(raw_conn, "ranking_rebuild", board_keys, [*parts, 500]) == [0, 0]
    assert raw_conn.hget(keys.ranking_meta("live"), "rb") is not None
    board = ranking.Ranking(raw_conn, "live")
    board.incr("m1", 7, now=now)  # finishes the rebuild first, then applies
    totals["m1"] += 7
    assert raw_conn.hget(keys.ranking_meta("live"), "rb") is None
    assert board.top(0, 30, withscores=True, now=now) == ranked(totals)[:30]
    assert board.stats()["rebuilds"] == 1


@pytest.mark.usefixtures("bound_deployment")
def test_a_write_after_a_delete_starts_a_new_board(raw_conn):
    now = time.time()
    board = ranking.Ranking(raw_conn, "contest", 48, 2)
    board.incr("a", 3, now=now)
    board_keys, parts = ranking._work_keys("contest")  # noqa: SLF001 - a deletion left half way
    raw_conn.hset(keys.ranking_meta("contest"), "del", 1)
    assert board.top(now=now) == []  # the read finishes the deletion: nothing half deleted shows
    ranking.Ranking(raw_conn, "contest", 24, 1).incr("b", 1, now=now)  # new settings: a new board
    assert ranking.Ranking(raw_conn, "contest", 24, 1).top(withscores=True, now=now) == [("b", 1)]
    assert ranking.known_boards(raw_conn) == ["contest"]
    assert not ranking.delete_board(raw_conn, "missing")


@pytest.mark.usefixtures("bound_deployment")
def test_idle_boards_go_with_the_rotation_job(raw_conn, monkeypatch):
    now = time.time()
    ranking.Ranking(raw_conn, "daily").incr("x", 1, now=now)
    ranking.Ranking(raw_conn, "yearly", 24 * 365, 24).incr("y", 1, now=now)
    ranking.rotate_all(raw_conn, now + 29 * 86400)
    assert ranking.known_boards(raw_conn) == ["daily", "yearly"]
    ranking.rotate_all(raw_conn, now + 31 * 86400)  # 30 days idle: the daily board goes
    assert ranking.known_boards(raw_conn) == ["yearly"]  # its window is a year: kept
    assert not raw_conn.exists(keys.ranking_meta("daily"))
    use_settings(monkeypatch, COUNTERS_BOARD_IDLE_DAYS=0)
    ranking.rotate_all(raw_conn, now + 500 * 86400)
    assert ranking.known_boards(raw_conn) == ["yearly"]


@pytest.mark.budget
@pytest.mark.usefixtures("bound_deployment")
def test_a_read_with_big_slots_ahead_of_its_now_is_exact_and_short(raw_conn, call_budget):
    """``top(now=an hour ago)`` on a board whose current slot holds 20,000 members: that slot is
    ahead of ``now`` and cannot be rotated away, so the read goes in bounded parts.

    Measured: 0.55 to 1.0 reference calls at the median (``ZMSCORE``, 82 calls); the limit, 1.6
    (``LIMIT_AHEAD``), 1.6 times the most, as above."""
    now = time.time()
    build_board(raw_conn, "ahead", now, members=80_000)  # ~20,000 members a slot
    earlier = now - 3600
    in_window = Counter()
    for slot in range(ranking.slot_of(earlier, 1) - SLOTS + 1, ranking.slot_of(earlier, 1) + 1):
        for member, amount in raw_conn.hscan_iter(keys.ranking_slot("ahead", slot), count=1000):
            in_window[member.decode()] += int(amount)
    board = ranking.Ranking(raw_conn, "ahead")

    call_budget.reset()
    assert board.top(0, 20, withscores=True, now=earlier) == ranked(in_window)[:20]
    assert board.top(1000, 10, withscores=True, now=earlier) == ranked(in_window)[1000:1010]
    print(call_budget.report())
    assert call_budget.within(LIMIT_AHEAD) == []


@pytest.mark.scale  # a slot of 50,000 members
@pytest.mark.skipif(is_cluster_run(), reason="commandstats of one server")
@pytest.mark.usefixtures("bound_deployment")
def test_a_big_expired_slot_is_rotated_one_page_per_call(raw_conn):
    """One hourly slot of 50,000 members (a viral hour) leaves the window. Each rotation call reads
    one HSCAN page from where the last call stopped: a scan restarted at 0 walked every bucket the
    earlier calls had emptied, so a call cost more the bigger the slot (1,135 HSCANs for 200 calls
    here; 11-19 ms calls, 5 ms median, at 200,000 members on Redis 7.0)."""
    now = time.time()
    board = ranking.Ranking(raw_conn, "viral")
    board.incr("seed", 1, now=now)
    slot = ranking.slot_of(now, 1)
    members = [f"p{i}" for i in range(50_000)]
    pipe = raw_conn.pipeline(transaction=False)
    for first in range(0, len(members), 5000):
        pipe.hset(keys.ranking_slot("viral", slot), mapping=dict.fromkeys(members[first : first + 5000], 2))
        pipe.zadd(keys.ranking_top("viral"), dict.fromkeys(members[first : first + 5000], -2))
    pipe.execute()
    raw_conn.config_resetstat()
    assert board.rotate(now + 25 * 3600) == 1
    stats = raw_conn.info("commandstats")
    rotate_calls = int(stats["cmdstat_evalsha"]["calls"])
    assert rotate_calls >= 100  # calls of ROTATE_BUDGET members (HSCAN pages may hold a few more)
    assert int(stats["cmdstat_hscan"]["calls"]) <= rotate_calls + 1  # one page a call, never a walk from 0
    assert board.top(withscores=True, now=now + 25 * 3600) == []
    assert raw_conn.hget(keys.ranking_meta("viral"), "rcur") is None  # the kept cursor goes with its slot
    assert not raw_conn.exists(keys.ranking_slot("viral", slot))
