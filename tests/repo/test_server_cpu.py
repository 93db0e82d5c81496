"""The budget tests' measure (tests/support/server_cpu.py): the server's CPU time for each call,
a pipeline's commands each on their own, and the verdict of several runs."""

from __future__ import annotations

import pytest

from tests.support.server_cpu import BUDGET_US, CallBudget
from tests.support.servers import is_cluster_run

pytestmark = pytest.mark.skipif(is_cluster_run(), reason="one server's /proc")

BUSY = "local x = 0 for i = 1, tonumber(ARGV[1]) do x = x + i end return 1"
"""A script that keeps the server busy for as long as asked (3 million steps: about 50 ms here)."""


def busy_steps(raw_conn, monkeypatch) -> int:
    """Steps of BUSY that take about four times the budget on this machine (measured once)."""
    budget = CallBudget(raw_conn, monkeypatch)
    raw_conn.eval(BUSY, 0, 1_000_000)
    [(us, _head)] = budget.cpu.calls
    return max(1_000_000, int(1_000_000 * 4 * BUDGET_US / max(us, 1)))


def test_a_busy_call_is_over_and_a_trivial_one_is_not(raw_conn, monkeypatch):
    steps = busy_steps(raw_conn, monkeypatch)
    budget = CallBudget(raw_conn, monkeypatch)
    assert budget.cpu.available  # the test server is this machine's
    raw_conn.eval(BUSY, 0, steps)
    raw_conn.ping()
    (busy_us, busy_head), (ping_us, ping_head) = budget.cpu.calls
    assert busy_head.startswith(b"EVAL local x") and ping_head == b"PING"
    assert busy_us > BUDGET_US and ping_us < BUDGET_US / 5
    assert budget.over() == [(busy_us, busy_head)]


def test_a_pipelines_commands_are_measured_one_by_one_with_the_same_replies(raw_conn, monkeypatch):
    steps = busy_steps(raw_conn, monkeypatch)
    budget = CallBudget(raw_conn, monkeypatch)
    pipe = raw_conn.pipeline(transaction=False)
    pipe.set("a", 1).eval(BUSY, 0, steps).incr("a").hset("a", "f", 1).get("a")
    replies = pipe.execute(raise_on_error=False)
    assert replies[:3] == [True, 1, 2] and "WRONGTYPE" in str(replies[3]) and replies[4] == b"2"
    assert [head.split(b" ")[0] for _us, head in budget.cpu.calls] == [b"SET", b"EVAL", b"INCRBY", b"HSET", b"GET"]
    assert [head.split(b" ")[0] for _us, head in budget.over()] == [b"EVAL"]
    with pytest.raises(Exception, match="WRONGTYPE"):  # the first error raised, as a pipeline does
        raw_conn.pipeline(transaction=False).incr("a").hset("a", "f", 1).execute()
    assert raw_conn.get("a") == b"3"


def test_a_call_over_in_every_run_at_the_same_place_is_slow_by_design(raw_conn, monkeypatch):
    steps = busy_steps(raw_conn, monkeypatch)
    budget = CallBudget(raw_conn, monkeypatch)
    runs = []

    def work(slow_in_runs: set[int], moving: bool = False) -> None:
        budget.reset()
        runs.append(None)
        place = len(runs) if moving else 2
        for n in range(5):
            raw_conn.eval(BUSY, 0, steps if n == place and len(runs) in slow_in_runs else 1)

    assert [head[:4] for _us, head in budget.slow_by_design(lambda: work({1, 2, 3}))] == [b"EVAL"]
    assert len(runs) == 3
    runs.clear()
    assert budget.slow_by_design(lambda: work({1, 2})) == []  # the third run had none: a moment
    assert len(runs) == 3
    runs.clear()
    assert budget.slow_by_design(lambda: work({1})) == []
    assert len(runs) == 2
    runs.clear()
    assert budget.slow_by_design(lambda: work({1, 2, 3}, moving=True)) == []  # slow each time, elsewhere
    assert len(runs) == 2
