"""Sliding-window rankings against a real Redis, checked against an exact model."""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict

import pytest

from counters_tasks import ranking
from counters_tasks.errors import InvalidInput
from counters_tasks.ranking import Ranking
from counters_tasks.store import keys
from counters_tasks.worker.maintenance import SKIPPED
from tests.support.servers import dump_all

pytestmark = pytest.mark.cluster

T0 = 1_700_000_000
HOUR = 3600


class Model:
    """The documented semantics in plain Python."""

    def __init__(self, period: int, interval: int) -> None:
        self.interval = interval
        self.n = period // interval
        self.wm: int | None = None
        self.rot: int | None = None
        self.accepted: list[tuple[int, str, int]] = []
        self.late = 0

    def slot(self, ts: float) -> int:
        return int(ts // (self.interval * HOUR))

    def incr(self, member: str, amount: int, ts: float) -> None:
        s = self.slot(ts)
        if (self.wm is not None and s <= self.wm - self.n) or (self.rot is not None and s < self.rot):
            self.late += 1
            return
        self.wm = s if self.wm is None else max(self.wm, s)
        self.accepted.append((s, member, amount))

    def rotate(self, now: float) -> None:
        s = self.slot(now)
        self.rot = s - self.n + 1 if self.rot is None else max(self.rot, s - self.n + 1)
        self.wm = s if self.wm is None else max(self.wm, s)

    def has_pending_expired(self, now: float) -> bool:
        """A slot older than the window of ``now``, not rotated away, with a non-zero amount."""
        cutoff = self.slot(now) - self.n + 1
        sums: dict[tuple[int, str], int] = defaultdict(int)
        for slot, member, amount in self.accepted:
            if slot < cutoff and (self.rot is None or slot >= self.rot):
                sums[slot, member] += amount
        return any(sums.values())

    def ranked(self, now: float) -> list[tuple[str, int]]:
        s = self.slot(now)
        totals: dict[str, int] = defaultdict(int)
        for slot, member, amount in self.accepted:
            if s - self.n < slot <= s:
                totals[member] += amount
        return sorted(((m, t) for m, t in totals.items() if t > 0), key=lambda p: (-p[1], p[0]))

    def top(self, offset: int, limit: int, withscores: bool, now: float) -> list:
        page = self.ranked(now)[offset : offset + limit]
        return page if withscores else [m for m, _ in page]


MEMBERS = ["a", "b", "c", "post:1", "post:10", "post:2", "é", "Z", "{x}", "日本", "a b", "*"]


@pytest.mark.parametrize("read_rotates", [False, True], ids=["reads-correct", "reads-rotate"])
@pytest.mark.parametrize("period,interval", [(6, 1), (8, 2), (72, 24)])
def test_random_stream_matches_model(conn, period, interval, read_rotates, monkeypatch):
    """Out-of-order, late, early and corrective bumps, rotations at random (some repeated).

    Reads either correct for expired slots beat has not dropped yet, or (past CORRECT_AT_MOST
    members, here 0) rotate first; the model mirrors that rotation.
    """
    monkeypatch.setattr(ranking, "CORRECT_AT_MOST", 0 if read_rotates else 10**6)
    rng = random.Random(period * 100 + interval)
    read_rotations = 0
    board = Ranking(conn, "posts", period, interval)
    model = Model(period, interval)
    now = float(T0)
    last_rotation = None
    span = period * HOUR
    checks = 0
    for step in range(500):
        now += rng.choice([0, 1, 60, 600, 1800, HOUR, 3 * HOUR]) * (interval if interval >= 24 else 1)
        delay = rng.choice([0, 0, 0, 30, HOUR, 2 * HOUR, span // 2, span, span + interval * HOUR])
        if rng.random() < 0.05:
            delay = -rng.choice([1, HOUR, interval * HOUR])  # clock skew: a bump from ahead of now
        ts = max(0.0, now - delay)
        member, amount = rng.choice(MEMBERS), rng.choice([1, 1, 1, 2, 3, 5, -1, -3, 0])
        board.incr(member, amount, now=ts)
        model.incr(member, amount, ts)
        if rng.random() < 0.08:
            for _ in range(rng.choice([1, 1, 2])):
                board.rotate(now=now)
                model.rotate(now)
            last_rotation = now
        if step % 5 == 0:
            # a read at ``now`` (>= the latest rotation), whether or not beat has caught up
            when = (
                now
                if last_rotation is None or rng.random() < 0.7
                else max(last_rotation, now - rng.randint(0, 3 * HOUR))
            )
            offset, limit = rng.choice([(0, 10), (0, 3), (2, 3), (5, 4), (0, 100), (11, 5)])
            withscores = rng.random() < 0.5
            if read_rotates and model.has_pending_expired(when):
                model.rotate(when)
                read_rotations += 1
                last_rotation = when if last_rotation is None else max(last_rotation, when)
            assert board.top(offset, limit, withscores, now=when) == model.top(offset, limit, withscores, when), step
            checks += 1
    assert checks == 100
    assert (read_rotations > 0) == read_rotates
    assert board.stats()["late"] == model.late
    assert model.late > 0 and model.ranked(now)  # the stream did exercise late bumps and a non-empty board
    # paging: pages of 2 concatenate to the whole ranking, never overlapping
    full = board.top(0, 1000, True, now=now)
    assert full == model.ranked(now)
    pages = [p for offset in range(0, len(full) + 2, 2) for p in board.top(offset, 2, True, now=now)]
    assert pages == full


def test_ties_are_broken_by_ascending_member_name(conn):
    board = Ranking(conn, "ties")
    for member in ["b", "a", "é", "B", "c", "aa"]:
        board.incr(member, 2, now=T0)
    board.incr("top", 3, now=T0)
    expected = ["top", "B", "a", "aa", "b", "c", "é"]
    assert board.top(0, 10, now=T0) == expected
    assert [board.top(i, 1, now=T0)[0] for i in range(7)] == expected
    assert board.top(0, 10, True, now=T0)[0] == ("top", 3)
    assert all(isinstance(m, str) for m in board.top(now=T0))
    assert all(type(t) is int for _, t in board.top(0, 10, True, now=T0))
    assert all(type(t) is int for _, t in board.top(0, 10, True, now=T0 + 24 * HOUR + 1))  # corrected read
    assert board.top(0, 10, True, now=T0 + 24 * HOUR + 1) == []


def test_now_defaults_to_the_clock(conn):
    board = Ranking(conn, "live")
    board.incr("m", 2)
    board.incr("n")
    assert board.top(withscores=True) == [("m", 2), ("n", 1)]
    assert board.rotate() == 0
    assert board.top(limit=0) == []


@pytest.mark.usefixtures("bound_deployment")
def test_non_positive_totals_are_not_listed_but_stay_exact(conn):
    board = Ranking(conn, "neg", 3, 1)
    board.incr("x", 5, now=T0)
    board.incr("x", -7, now=T0 + HOUR)  # correction past zero: hidden, kept for exactness
    board.incr("y", 1, now=T0 + HOUR)
    assert board.top(withscores=True, now=T0 + HOUR) == [("y", 1)]
    board.incr("x", 3, now=T0 + 2 * HOUR)
    assert board.top(withscores=True, now=T0 + 2 * HOUR) == [("x", 1), ("y", 1)]
    board.rotate(now=T0 + 3 * HOUR)  # slot of +5 leaves: -7 + 3
    assert board.top(withscores=True, now=T0 + 3 * HOUR) == [("y", 1)]
    board.rotate(now=T0 + 5 * HOUR)  # everything left: nothing remains anywhere
    assert board.top(withscores=True, now=T0 + 5 * HOUR) == []
    assert conn.zcard(keys.ranking_top("neg")) == 0
    assert conn.zcard(keys.ranking_slots("neg")) == 0


@pytest.mark.usefixtures("bound_deployment")
def test_top_is_exact_when_beat_is_late_and_rotation_catches_up(conn):
    board = Ranking(conn, "late-beat", 3, 1)
    board.incr("old", 10, now=T0)
    board.incr("new", 1, now=T0 + 3 * HOUR)
    assert board.top(withscores=True, now=T0 + 2 * HOUR) == [("old", 10)]
    # the slot of "old" left the window of T0 + 3h; beat has not run: the read corrects for it
    assert board.top(withscores=True, now=T0 + 3 * HOUR) == [("new", 1)]
    assert conn.zscore(keys.ranking_top("late-beat"), "old") == -10  # still pending in the totals
    assert board.stats()["rotated_slot"] is None  # a small correction: the read wrote nothing
    assert board.rotate(now=T0 + 3 * HOUR) == 1
    assert board.top(withscores=True, now=T0 + 3 * HOUR) == [("new", 1)]
    assert conn.zscore(keys.ranking_top("late-beat"), "old") is None


def test_read_rotates_first_when_beat_left_many_members_pending(conn, monkeypatch):
    monkeypatch.setattr(ranking, "CORRECT_AT_MOST", 2)
    board = Ranking(conn, "many", 2, 1)
    for i in range(3):
        board.incr(f"old{i}", 5, now=T0)
    board.incr("new", 1, now=T0 + 2 * HOUR)
    future = time.time() + 3 * 86400  # a ``now`` ahead of the clock never rotates: it corrects
    assert board.top(withscores=True, now=future) == []
    assert board.stats()["rotated_slot"] is None
    assert board.top(withscores=True, now=T0 + 2 * HOUR) == [("new", 1)]
    assert board.stats()["rotated_slot"] == ranking.slot_of(T0, 1) + 1  # the read rotated
    assert board.stats()["live_slots"] == 1


def test_rotation_is_idempotent(conn):
    board = Ranking(conn, "idem", 4, 1)
    for h in range(8):
        board.incr(f"m{h % 3}", h + 1, now=T0 + h * HOUR)
    later = T0 + 9 * HOUR
    assert board.rotate(now=later) == 6  # slots T0 .. T0+5h left the window (T0+6h .. T0+9h)
    snapshot = dump_all(conn)
    answer = board.top(0, 10, True, now=later)
    assert board.rotate(now=later) == 0
    assert board.rotate(now=later - HOUR) == 0  # an older, duplicated beat run subtracts nothing
    assert dump_all(conn) == snapshot
    assert board.top(0, 10, True, now=later) == answer == [("m1", 8), ("m0", 7)]
    board.incr("m0", 100, now=T0 + 5 * HOUR)  # a slot that was rotated away: late, ignored
    assert dump_all(conn) != snapshot  # only the late counter moved
    assert board.stats()["late"] == 1
    assert board.top(0, 10, True, now=later) == answer


@pytest.mark.usefixtures("bound_deployment")
def test_big_slot_rotates_in_several_bounded_calls(conn, monkeypatch):
    monkeypatch.setattr(ranking, "ROTATE_BUDGET", 100)
    board = Ranking(conn, "big", 2, 1)
    model = Model(2, 1)
    for i in range(1200):  # past 512 fields: a real hash table, scanned a page at a time
        board.incr(f"m{i}", i % 5 + 1, now=T0)
        model.incr(f"m{i}", i % 5 + 1, T0)
        board.incr(f"m{i}", 1, now=T0 + HOUR)
        model.incr(f"m{i}", 1, T0 + HOUR)
    calls = []
    real = ranking.run_script

    def counting(conn_, name, *args, **kwargs):
        calls.append(name)
        return real(conn_, name, *args, **kwargs)

    monkeypatch.setattr(ranking, "run_script", counting)
    assert board.rotate(now=T0 + 2 * HOUR) == 1
    assert calls.count("ranking_rotate") >= 4
    model.rotate(T0 + 2 * HOUR)
    assert board.top(0, 100, True, now=T0 + 2 * HOUR) == model.top(0, 100, True, T0 + 2 * HOUR)
    assert not conn.exists(keys.ranking_slot("big", ranking.slot_of(T0, 1)))


@pytest.mark.usefixtures("bound_deployment")
def test_concurrent_incr_and_rotation_end_exact(conn):
    """Writers stream bumps (some delayed past the window) while a rotator follows their clock."""
    period, interval = 4, 1
    per_writer, writers = 300, 4
    span = 30 * HOUR
    t_end = T0 + span
    errors: list[BaseException] = []
    per_thread: list[list[tuple[str, int, float]]] = [[] for _ in range(writers)]

    def clock() -> float:
        """The stream's time: how far the writers have got, over T0 .. t_end."""
        return T0 + span * sum(map(len, per_thread)) / (per_writer * writers)

    def writer(index: int) -> None:
        rng = random.Random(index)
        board = Ranking(conn, "race", period, interval)
        try:
            for _ in range(per_writer):
                ts = min(t_end, max(T0, clock() - rng.choice([0, 600, HOUR, 3 * HOUR, 6 * HOUR])))
                member, amount = rng.choice(MEMBERS[:6]), rng.randint(-1, 4)
                board.incr(member, amount, now=ts)
                per_thread[index].append((member, amount, ts))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    stop = threading.Event()
    rotations = []

    def rotator() -> None:
        board = Ranking(conn, "race", period, interval)
        try:
            while not stop.is_set():
                rotations.append(board.rotate(now=clock()))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(writers)]
    rot = threading.Thread(target=rotator)
    rot.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    rot.join()
    assert not errors
    assert sum(rotations) > 0  # the rotator did drop slots while writers ran
    assert Ranking(conn, "race", period, interval).stats()["late"] > 0  # and some bumps came too late
    board = Ranking(conn, "race", period, interval)
    board.rotate(now=t_end)
    end_slot = ranking.slot_of(t_end, interval)
    totals: dict[str, int] = defaultdict(int)
    for mine in per_thread:
        for member, amount, ts in mine:
            if ranking.slot_of(ts, interval) > end_slot - period:
                totals[member] += amount
    expected = sorted(((m, t) for m, t in totals.items() if t > 0), key=lambda p: (-p[1], p[0]))
    assert expected
    assert board.top(0, 100, True, now=t_end) == expected
    # the totals ZSET holds exactly the live slots: a rebuild changes nothing
    before = conn.zrange(keys.ranking_top("race"), 0, -1, withscores=True)
    board.rebuild()
    assert conn.zrange(keys.ranking_top("race"), 0, -1, withscores=True) == before


@pytest.mark.usefixtures("bound_deployment")
def test_rebuild_equals_incremental_result(conn):
    rng = random.Random(3)
    board = Ranking(conn, "rb", 6, 1)
    for i in range(300):
        board.incr(rng.choice(MEMBERS), rng.randint(-2, 6), now=T0 + i * 60)
        if i % 97 == 0:
            board.rotate(now=T0 + i * 60)
    top_key = keys.ranking_top("rb")
    before = conn.zrange(top_key, 0, -1, withscores=True)
    assert before
    conn.zadd(top_key, {"garbage": -99})
    conn.zincrby(top_key, 5, MEMBERS[0])
    assert board.rebuild() == len(before)
    assert conn.zrange(top_key, 0, -1, withscores=True) == before
    assert ranking.rebuild(conn, "rb") == len(before)
    assert board.stats()["rebuilds"] == 2


@pytest.mark.usefixtures("bound_deployment")
def test_expired_slot_hash_is_recovered_by_rebuild(conn):
    """The safety-net TTL fired before beat rotated: reads and rotation stay exact."""
    board = Ranking(conn, "ttl", 3, 1)
    board.incr("gone", 50, now=T0)
    board.incr("kept", 2, now=T0 + 2 * HOUR)
    board.incr("kept2", 1, now=T0 + 3 * HOUR)
    slot_key = keys.ranking_slot("ttl", ranking.slot_of(T0, 1))
    window = 3 * HOUR
    assert window + 86400 < conn.ttl(slot_key) <= window + HOUR + ranking.SLOT_TTL_GRACE
    conn.delete(slot_key)  # as if it expired (its slot left the window of T0+3h long ago)
    assert board.top(withscores=True, now=T0 + 3 * HOUR) == [("kept", 2), ("kept2", 1)]
    assert board.stats()["rebuilds"] == 1
    conn.delete(keys.ranking_slot("ttl", ranking.slot_of(T0 + 2 * HOUR, 1)))  # in window, then rotated
    board.incr("kept2", 1, now=T0 + 5 * HOUR)
    assert board.rotate(now=T0 + 5 * HOUR) == 0  # the lost slot is rebuilt away, not subtracted
    assert board.stats()["rebuilds"] == 2
    assert board.top(withscores=True, now=T0 + 5 * HOUR) == [("kept2", 2)]


@pytest.mark.usefixtures("bound_deployment")
def test_message_id_applies_once(conn):
    board = Ranking(conn, "dedupe")
    board.incr("m", 5, now=T0, message_id="task-1")
    board.incr("m", 5, now=T0, message_id="task-1")
    board.incr("m", 5, now=T0 + 60, message_id="task-2")
    assert board.top(withscores=True, now=T0 + 60) == [("m", 10)]
    seen = keys.ranking_seen("dedupe", "task-1")
    assert 0 < conn.ttl(seen) <= 6 * 3600
    # a late bump with a message id is counted late once
    board.rotate(now=T0 + 48 * HOUR)
    board.incr("m", 1, now=T0, message_id="task-3")
    board.incr("m", 1, now=T0, message_id="task-3")
    assert board.stats()["late"] == 1


def test_settings_are_fixed_by_the_first_write(raw_conn):
    Ranking(raw_conn, "fixed", 48, 2).incr("m", 1, now=T0)
    assert ranking.board_settings(raw_conn, "fixed") == (48, 2)
    before = dump_all(raw_conn)
    other = Ranking(raw_conn, "fixed", 24, 1)
    with pytest.raises(InvalidInput, match="fixed"):
        other.incr("m", 1, now=T0)
    with pytest.raises(InvalidInput):
        other.top(now=T0)
    with pytest.raises(InvalidInput):
        other.rotate(now=T0)
    with pytest.raises(InvalidInput):
        other.stats()
    assert dump_all(raw_conn) == before
    assert Ranking(raw_conn, "fixed", 48, 2).top(now=T0) == ["m"]


def test_registry_lists_boards_and_rotate_all_uses_each_boards_settings(conn):
    hourly = Ranking(conn, "hourly {x}*", 2, 1)
    daily = Ranking(conn, "daily", 48, 24)
    hourly.incr("a", 1, now=T0)
    daily.incr("a", 1, now=T0)
    assert Ranking(conn, "never written").top(now=T0) == []
    assert ranking.known_boards(conn) == sorted(["hourly {x}*", "daily"])
    assert ranking.rotate_all(conn, now=T0 + 3 * HOUR) == 1  # hourly's slot expired; daily's not
    assert hourly.top(now=T0 + 3 * HOUR) == []
    assert daily.top(now=T0 + 3 * HOUR) == ["a"]
    assert ranking.rotate_all(conn, now=T0 + 3 * 86400) == 1


def test_registration_interrupted_by_a_crash_is_repaired_by_the_next_write(conn, monkeypatch):
    real = ranking.register_board

    def crash(conn, name):
        raise ConnectionError("worker died between the script and the registry")

    monkeypatch.setattr(ranking, "register_board", crash)
    board = Ranking(conn, "crashy")
    with pytest.raises(ConnectionError):
        board.incr("m", 1, now=T0, message_id="t1")
    assert ranking.known_boards(conn) == []
    monkeypatch.setattr(ranking, "register_board", real)
    board.incr("m", 1, now=T0, message_id="t1")  # the retry: deduplicated, but registers the board
    assert ranking.known_boards(conn) == ["crashy"]
    assert board.top(withscores=True, now=T0) == [("m", 1)]
    calls = []
    monkeypatch.setattr(ranking, "register_board", lambda conn, name: calls.append(1))
    board.incr("m", 1, now=T0)
    assert calls == []  # registered boards pay no extra round trip


@pytest.mark.usefixtures("bound_deployment")
def test_keys_of_a_board_share_its_tag_and_names_are_escaped():
    name = "{evil} *name\u00e9"
    t = keys.board_tag(name)
    made = [
        keys.ranking_meta(name),
        keys.ranking_top(name),
        keys.ranking_slots(name),
        keys.ranking_slot(name, 42),
        keys.ranking_seen(name, "msg"),
    ]
    assert all(k.count("{") == 1 and f"{{{t}}}" in k for k in made)
    head, tail = keys.ranking_slot_parts(name)
    assert head + "42" + tail == keys.ranking_slot(name, 42)
    assert len(set(made)) == len(made)


def test_big_amounts_stay_exact(conn):
    big = 2**53 - 1
    board = Ranking(conn, "big-amounts", 2, 1)
    board.incr("m", big, now=T0)
    board.incr("n", big - 2, now=T0 + HOUR)
    assert board.top(withscores=True, now=T0 + HOUR) == [("m", big), ("n", big - 2)]
    assert board.top(withscores=True, now=T0 + 2 * HOUR) == [("n", big - 2)]  # corrected read
    board.rotate(now=T0 + 2 * HOUR)
    assert board.top(withscores=True, now=T0 + 2 * HOUR) == [("n", big - 2)]
    board.rebuild()
    assert board.top(withscores=True, now=T0 + 2 * HOUR) == [("n", big - 2)]


BAD_INCR = [
    {"member": ""},
    {"member": "x" * 1025},
    {"member": "bad\nmember"},
    {"member": "bad\x00"},
    {"member": 5},
    {"member": None},
    {"amount": 1.0},
    {"amount": True},
    {"amount": "1"},
    {"amount": 2**60},
    {"now": -1},
    {"now": float("nan")},
    {"now": "1700000000"},
    {"message_id": ""},
]
BAD_BOARD = [
    {"name": ""},
    {"name": "x" * 1025},
    {"name": "a\tb"},
    {"period_hours": 0},
    {"period_hours": -24},
    {"period_hours": 25, "interval_hours": 2},
    {"period_hours": 24, "interval_hours": 5},
    {"period_hours": 72, "interval_hours": 36},
    {"period_hours": 24, "interval_hours": 48},
    {"period_hours": True},
    {"interval_hours": 1.0},
    {"period_hours": "24"},
    {"interval_hours": 0},
]


@pytest.mark.parametrize("kwargs", BAD_INCR + BAD_BOARD)
def test_bad_input_is_refused_before_any_write(raw_conn, kwargs):
    Ranking(raw_conn, "seed").incr("m", 1, now=T0)
    before = dump_all(raw_conn)
    board_args = {k: kwargs[k] for k in ("name", "period_hours", "interval_hours") if k in kwargs}
    incr_args = {"member": "ok", "amount": 1, "now": T0} | {k: v for k, v in kwargs.items() if k not in board_args}
    with pytest.raises(InvalidInput):
        board = Ranking(raw_conn, **({"name": "seed"} | board_args))
        board.incr(incr_args.pop("member"), incr_args.pop("amount"), incr_args.pop("now"), **incr_args)
    assert dump_all(raw_conn) == before


@pytest.mark.parametrize(
    "kwargs",
    [{"offset": -1}, {"limit": -1}, {"limit": 1.5}, {"offset": True}, {"withscores": 1}, {"now": float("inf")}],
)
def test_bad_top_arguments_are_refused(conn, kwargs):
    with pytest.raises(InvalidInput):
        Ranking(conn, "seed").top(**kwargs)


@pytest.mark.parametrize("kwargs", BAD_INCR[:12] + BAD_BOARD)
def test_task_refuses_bad_input_before_any_write(eager_app, raw_conn, kwargs):
    from counters_tasks.tasks import incr_ranking

    incr_ranking.apply(args=("seed", "m", 1, T0), task_id="seed-task")
    before = dump_all(raw_conn)
    args = {"board": "seed", "member": "ok", "amount": 1, "ts": T0}
    args |= {("board" if k == "name" else "ts" if k == "now" else k): v for k, v in kwargs.items()}
    with pytest.raises(InvalidInput):
        incr_ranking.apply(kwargs=args, task_id="bad-task")
    assert dump_all(raw_conn) == before


def test_task_counts_a_redelivered_message_once(eager_app, raw_conn):
    from counters_tasks.tasks import incr_ranking

    incr_ranking.apply(args=("likes", "post:1", 2, T0), task_id="x")
    incr_ranking.apply(args=("likes", "post:1", 2, T0), task_id="x")
    incr_ranking.apply(args=("likes", "post:1", 2, T0 + 1), task_id="y")
    incr_ranking.apply(
        kwargs={"board": "daily", "member": "p", "ts": T0, "period_hours": 48, "interval_hours": 24}, task_id="z"
    )
    assert Ranking(raw_conn, "likes").top(withscores=True, now=T0 + 1) == [("post:1", 4)]
    assert Ranking(raw_conn, "daily", 48, 24).top(withscores=True, now=T0) == [("p", 1)]
    with pytest.raises(InvalidInput):  # the board is fixed to 48/24
        incr_ranking.apply(kwargs={"board": "daily", "member": "p", "ts": T0}, task_id="w")


@pytest.mark.usefixtures("bound_deployment")
def test_rotate_rankings_task_skips_while_locked_then_rotates(eager_app, raw_conn):
    from counters_tasks.tasks import rotate_rankings

    board = Ranking(raw_conn, "beat", 2, 1)
    board.incr("m", 1, now=time.time() - 3 * 86400)  # expired by the wall clock the task uses
    lock = raw_conn.lock(keys.lock("rotate_rankings"), timeout=60)
    assert lock.acquire(blocking=False)
    try:
        assert rotate_rankings.apply().get() == SKIPPED
        assert raw_conn.zcard(keys.ranking_slots("beat")) == 1
    finally:
        lock.release()
    assert rotate_rankings.apply().get() == 1
    assert raw_conn.zcard(keys.ranking_slots("beat")) == 0
    assert raw_conn.zcard(keys.ranking_top("beat")) == 0


def test_beat_entry_is_hourly_on_the_maintenance_queue(eager_app):
    entry = eager_app.conf.beat_schedule["rotate-rankings"]
    assert entry["task"] == "counters_tasks.rotate_rankings"
    assert entry["schedule"].minute == {0} and entry["schedule"].hour == set(range(24))
    assert 0 < entry["options"]["expires"] < 3600
    assert eager_app.conf.task_routes["counters_tasks.rotate_rankings"] == {"queue": "maintenance"}
