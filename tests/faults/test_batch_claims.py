"""Per-item messages applied by the worker in batches (``worker.claims``): a batch costs what a
``record_visits`` chunk costs, and each message still counts exactly once whatever happens to
the worker between claiming a batch and applying it, and however its messages come back."""

from __future__ import annotations

import time

import pytest

from counters_tasks import events, ranking, refusals, sitestats, throughput, visits
from counters_tasks.core.days import local_day
from counters_tasks.events.kind import EVENT
from counters_tasks.kinds import RANKING, VISIT
from counters_tasks.store import keys, scripts, tombstones
from counters_tasks.worker import batch_apply, claims, forget
from counters_tasks.worker.batch_consumer import FAILED, SimpleRequest
from tests.support.servers import dump_all, is_cluster_run
from tests.support.visit_model import model_of, random_visits

pytestmark = pytest.mark.cluster

VISIT_TASK, RANKING_TASK = "counters_tasks.record_visit", "counters_tasks.incr_ranking"
EVENT_TASK = "counters_tasks.track_event"
TARGET = "203.0.113.77"


def visit_requests(batch: list[dict], first: int = 0) -> list[SimpleRequest]:
    return [
        SimpleRequest(f"v{first + n}", VISIT_TASK, [v["ip"], v["path"], v.get("session_id"), v["ts"]], {})
        for n, v in enumerate(batch)
    ]


def visit_items(batch: list[dict], first: int = 0) -> list[tuple[visits.Visit, str]]:
    return [(visits.prepare_visit(v), f"v{first + n}") for n, v in enumerate(batch)]


def commands(conn) -> int:
    return sum(
        v["calls"] for k, v in conn.info("commandstats").items() if not k.startswith(("cmdstat_info", "cmdstat_config"))
    )


@pytest.mark.skipif(is_cluster_run(), reason="commandstats of one server")
def test_a_worker_batch_of_per_visit_messages_costs_about_a_record_visits_chunk(raw_conn):
    """Issue 21: one ``record_visit`` and one ``incr_ranking`` message a visit cost 84-86 Redis
    commands a visit, each message applied under its own markers; the goal is 20 at most."""
    batch = random_visits(200, seed=21)
    now = time.time()
    bumps = [SimpleRequest(f"r{n}", RANKING_TASK, ["posts", f"/post/{n % 40}"], {"ts": now}) for n in range(200)]
    raw_conn.config_resetstat()
    assert batch_apply.apply_batch(raw_conn, VISIT, visit_requests(batch))["applied"] == 200
    assert batch_apply.apply_batch(raw_conn, RANKING, bumps)["applied"] == 200
    used = commands(raw_conn) / len(batch)
    print(f"\n[claims] a worker batch of 200 visits + 200 ranking bumps: {used:.1f} Redis commands a visit")
    assert used <= 20
    assert model_of(batch).mismatches(raw_conn) == []
    assert ranking.Ranking(raw_conn, "posts").top(0, 3, withscores=True, now=now) == [
        ("/post/0", 5),
        ("/post/1", 5),
        ("/post/10", 5),
    ]
    assert not list(raw_conn.scan_iter(match=b"*journal*"))  # applied in full: the journals are gone


def killed_after(monkeypatch, calls: int) -> None:
    """The next batch's apply dies (as a SIGKILLed worker) after its first ``calls`` commands
    reached Redis: the rest of its pipeline is never sent. The batch's claim goes first, whole (a
    ``WritePlan`` of its own); the write after it is cut (every ``WritePlan`` sends through
    ``store.scripts.execute_in_order``)."""
    real = scripts.execute_in_order
    sent = []

    def dying(conn, *stages):
        sent.append(stages)
        if len(sent) == 1:  # the claim
            return real(conn, *stages)
        pipe = conn.pipeline(transaction=False)
        for stage in stages:
            stage(pipe)
        pipe.command_stack = pipe.command_stack[:calls]
        pipe.execute()
        monkeypatch.setattr(scripts, "execute_in_order", real)
        raise SystemExit("killed")

    monkeypatch.setattr(scripts, "execute_in_order", dying)


@pytest.mark.skipif(is_cluster_run(), reason="a pipeline of one server cut by hand")
@pytest.mark.parametrize("calls", [0, 1, 5, 12])
def test_a_batch_killed_half_way_is_finished_by_any_of_its_messages_coming_back(raw_conn, monkeypatch, calls):
    batch = random_visits(60, seed=22, paths=25)
    visits.apply_visits(raw_conn, random_visits(5, seed=1), message_id="warm")  # the scripts loaded
    raw_conn.flushdb()
    tally = throughput.Tally()
    killed_after(monkeypatch, calls)
    with pytest.raises(SystemExit):
        batch_apply.write_claimed(raw_conn, VISIT, visit_items(batch[:40]), tally)
    assert list(raw_conn.scan_iter(match=b"*journal*"))  # the claimed batch waits in its journal
    # its messages come back in other batches: two of them with new messages, then all of them
    batch_apply.write_claimed(raw_conn, VISIT, visit_items(batch[10:12], 10) + visit_items(batch[40:], 40), tally)
    assert model_of(batch).mismatches(raw_conn) == []
    assert not list(raw_conn.scan_iter(match=b"*journal*"))
    for first in range(0, 40, 7):
        batch_apply.write_claimed(raw_conn, VISIT, visit_items(batch[first : first + 7], first), tally)
    assert model_of(batch).mismatches(raw_conn) == []


def test_messages_applied_before_count_nothing_again(raw_conn):
    batch = random_visits(30, seed=23)
    tally = throughput.Tally()
    batch_apply.write_claimed(raw_conn, VISIT, visit_items(batch), tally)
    once = dump_all(raw_conn)
    batch_apply.write_claimed(
        raw_conn, VISIT, visit_items(batch) + visit_items(batch[:5]), tally
    )  # twice in one batch too
    after = dump_all(raw_conn)
    assert {k: v for k, v in after.items() if b"claim" not in k} == {k: v for k, v in once.items() if b"claim" not in k}
    assert model_of(batch).mismatches(raw_conn) == []


def test_a_message_whose_journal_is_gone_was_applied(raw_conn):
    """A journal goes only once its batch was applied in full: a claim without one is a message
    applied (acknowledged, nothing written)."""
    new, earlier = claims.claim(raw_conn, "visit", [(f"v{n}", ["never read"]) for n in range(3)])
    assert earlier == [] and sorted(m for _b, entries in new for m, _i in entries) == ["v0", "v1", "v2"]
    claims.done(raw_conn, [batch_id for batch_id, _entries in new])
    batch_apply.write_claimed(raw_conn, VISIT, visit_items(random_visits(3, seed=24)), throughput.Tally())
    assert all(b"claim" in key for key in dump_all(raw_conn))


def test_a_ranking_bump_of_a_board_with_other_settings_is_refused_alone(raw_conn):
    now = time.time()
    ranking.Ranking(raw_conn, "fixed").incr("seed", 1, now=now)  # (24, 1)
    requests = [
        SimpleRequest("a", RANKING_TASK, ["fixed", "x"], {"ts": now}),
        SimpleRequest("b", RANKING_TASK, ["fixed", "y"], {"ts": now, "period_hours": 48}),
        SimpleRequest("c", RANKING_TASK, ["fresh", "x"], {"ts": now}),
        SimpleRequest("d", RANKING_TASK, ["fresh", "z"], {"ts": now, "period_hours": 48, "interval_hours": 2}),
    ]
    outcome = batch_apply.apply_batch(raw_conn, RANKING, requests)
    # the fresh board's first bump fixes its settings: "c" (24 h, 1 h) and "d" (48 h, 2 h) are in
    # one batch on one server, but may be in two claim groups on a cluster (message ids hash into
    # 16 there, under the deployment's tag key), applied in either order: the other is refused
    refused = sorted(outcome[FAILED])
    assert outcome["applied"] == 2 and refused in ([1, 3], [1, 2])
    # the winner's settings are the board's: a read with the other settings is refused
    fresh_winner, fresh_settings = ([("x", 1)], (24, 1)) if refused == [1, 3] else ([("z", 1)], (48, 2))
    assert refused == [1, 3] or is_cluster_run()  # (one server: the batch's order)
    for _delivery in range(2):  # then redelivered (an acknowledgement lost): nothing written twice
        assert ranking.Ranking(raw_conn, "fixed").top(withscores=True, now=now) == [("seed", 1), ("x", 1)]
        assert ranking.Ranking(raw_conn, "fresh", *fresh_settings).top(withscores=True, now=now) == fresh_winner
        assert refusals.counts(raw_conn)["board_settings"] == 2
        batch_apply.apply_batch(raw_conn, RANKING, requests)


@pytest.mark.usefixtures("bound_deployment")  # (the journal's key made by hand below)
def test_claims_and_journals_share_the_slot_of_their_group(raw_conn):
    """On one server one claim group; on a cluster CLAIM_GROUPS_CLUSTER, each its own slot."""
    groups = claims.claim_groups(raw_conn)
    assert groups == (keys.CLAIM_GROUPS_CLUSTER if is_cluster_run() else 1)
    new, _earlier = claims.claim(raw_conn, "visit", [(f"id{n}", n) for n in range(64)])
    assert (len(new) == 1) if groups == 1 else (1 < len(new) <= groups)
    assert sorted(item for _b, entries in new for _m, item in entries) == list(range(64))
    for batch_id, entries in new:
        group = claims.batch_group(batch_id)
        assert all(keys.claim_group(m, groups) == group for m, _i in entries)
        assert f"{{m{group}}}" in keys.batch_journal(batch_id, group)


@pytest.mark.skipif(is_cluster_run(), reason="a pipeline of one server cut by hand")
@pytest.mark.parametrize("calls", [0, 2])
def test_a_journaled_item_of_a_visitor_forgotten_meanwhile_is_not_counted_back(raw_conn, monkeypatch, calls):
    """A worker dies with a batch claimed (its items prepared and journaled, before the erasure),
    the visitor is forgotten, then one of the batch's other messages comes back and applies the
    journal: the forgotten visitor's visit and event are refused (``forgotten``, once a message,
    though their messages are not the one that came back), the others' counted; then every
    message comes back (the target's refused as they are read, counted no second time)."""
    monkeypatch.setattr(forget, "settle", lambda: None)
    tombstones.forget_copy()
    now = time.time()
    ips = ["198.51.100.1", TARGET, "198.51.100.2", "198.51.100.3", TARGET]
    sent = {
        VISIT: [SimpleRequest(f"v{n}", VISIT_TASK, [ip, "/p", None, now], {}) for n, ip in enumerate(ips)],
        EVENT: [SimpleRequest(f"e{n}", EVENT_TASK, ["signup"], {"ts": now, "ip": ip}) for n, ip in enumerate(ips)],
    }
    for kind in (VISIT, EVENT):
        first = sent[kind][0]
        batch_apply.apply_batch(
            raw_conn, kind, [SimpleRequest(f"warm-{kind.name}", first.name, first.args, first.kwargs)]
        )
    raw_conn.flushdb()  # (the scripts loaded: a pipeline cut by hand sends EVALSHA only)
    for kind, requests in sent.items():
        items = [(batch_apply.parse_arguments(r, kind), r.id) for r in requests]  # prepared before the erasure
        killed_after(monkeypatch, calls)
        with pytest.raises(SystemExit):
            batch_apply.write_claimed(raw_conn, kind, items, throughput.Tally())
        assert list(raw_conn.scan_iter(match=b"*journal*"))
    assert forget.forget_visitor(ip=TARGET, conn=raw_conn)["audit"]
    tombstones.forget_copy()  # (a worker's copy, read again: at most tombstones.REFRESH seconds old)

    for kind, requests in sent.items():
        assert batch_apply.apply_batch(raw_conn, kind, requests[:1])["applied"] == 1  # the journal applied
        again = batch_apply.apply_batch(raw_conn, kind, requests)
        assert (again["applied"], sorted(again[FAILED])) == (3, [1, 4])
    day = local_day(now)
    # counts the dead worker wrote before the erasure stay (they name no visitor: docs/privacy.md)
    counts = {3} if calls == 0 else {3, 5}
    info = sitestats.site_visit_info(raw_conn, day, "/p")
    assert info.uv == 3 and info.pv in counts
    [row] = events.event_report(raw_conn).events
    assert (row.name, row.uv) == ("signup", 3) and row.total in counts
    assert refusals.counts(raw_conn)["forgotten"] == 4  # two visits, two events, once each
    assert not list(raw_conn.scan_iter(match=b"*journal*"))
