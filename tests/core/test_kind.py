"""The kinds of things counted, declared once (``core.kind``): the package's tables derive from
the declarations, and a kind declared in the test tree alone (``tests.support.toy_kind``) runs
through ``.delay()``, ``VisitRecorder``, the payload task, the refusals, the throughput totals and
the metrics' item times, applied eagerly here (through real workers, SIGKILL included:
tests/faults/test_toy_kind.py)."""

from __future__ import annotations

import uuid

import pytest

from counters_tasks import kinds, refusals, throughput
from counters_tasks.core.kind import Kind, by_task, register, registered
from counters_tasks.errors import InvalidInput, MalformedMessage
from counters_tasks.ops.metrics import item_time
from counters_tasks.recorder import VisitRecorder
from tests.support import toy_kind


def test_the_package_tables_come_from_the_declarations(eager_app):
    """What used to be kept in eight tables, read from the declarations: the task names, where
    ``ts`` sits, each payload task's argument, the throughput kinds."""
    assert {kind.name for kind in kinds.PACKAGE_KINDS} <= {kind.name for kind in registered()}
    assert (
        kinds.VISIT.signature
        == "ip, path, session_id=None, ts=None, site=None, referrer=None, utm=None, user_agent=None, language=None, client=None"
    )
    assert [
        kinds.of_task(f"counters_tasks.{task}").name
        for task in (
            "record_visit",
            "record_visits",
            "incr_ranking",
            "incr_rankings",
            "update_counter",
            "count_unique",
            "count_skips",
        )
    ] == ["visit", "visit", "ranking", "ranking", "counter", "unique", "skip"]
    assert item_time("counters_tasks.record_visit", ["1.2.3.4", "/", None, 120.5], {}) == 120.5
    assert item_time("counters_tasks.update_counter", ["hits"], {"ts": 7}) == 7
    assert item_time("counters_tasks.record_visits", [[{"ts": 9}, {"ts": 3}, "junk"]], {}) == 3
    assert item_time("counters_tasks.clean_counters", [], {}) is None
    assert {"visit", "ranking"} <= set(throughput.item_kinds())
    assert {"record_visit", "incr_ranking", "record_visits", "incr_rankings"} <= set(throughput.batch_kinds())


def test_a_kind_is_registered_once_and_its_names_are_its_own():
    assert register(toy_kind.TOY) is toy_kind.TOY  # the same declaration again: nothing changes
    with pytest.raises(ValueError, match="taken"):
        register(Kind(name="other", fields=("x",), required=1, item_task="tests.toy.like"))
    with pytest.raises(ValueError, match="taken"):
        register(Kind(name="visit", fields=("x",), required=1))
    assert by_task("tests.toy.likes") is toy_kind.TOY


def test_a_kind_declared_in_the_tests_counts_through_every_route(eager_app, raw_conn):
    """``.delay()`` of its per-item task, ``VisitRecorder.add``, its payload task (a redelivery
    counted once), each bad item refused on its own and counted, a call that does not fit refused;
    the throughput totals and batch sizes kept under its names."""
    toy_kind.like.delay("p1")
    toy_kind.like.delay("p1", ts=1_000_000.0)
    VisitRecorder(flush_on_sigterm=False).add(toy_kind.TOY, "p2")
    batch_id = str(uuid.uuid4())
    payload = [{"post": "p3"}, {"post": ""}, {"bogus": 1}, "junk", {"post": "p3", "ts": 5.0}]
    assert toy_kind.likes.apply(args=[payload], task_id=batch_id).get() == 2
    assert toy_kind.likes.apply(args=[payload], task_id=batch_id).get() == 2  # redelivered: written once
    assert toy_kind.totals(raw_conn) == {"p1": 2, "p2": 1, "p3": 2}
    assert refusals.counts(raw_conn)[MalformedMessage.reason] == 2  # once per message id, not per delivery
    assert refusals.counts(raw_conn)[InvalidInput.reason] == 1
    with pytest.raises(InvalidInput):
        toy_kind.like.delay("")
    with pytest.raises(MalformedMessage):
        toy_kind.like.delay("p1", "not a time", "one too many")
    with pytest.raises(TypeError):
        toy_kind.likes.delay(posts=[])
    with pytest.raises(InvalidInput):
        VisitRecorder(flush_on_sigterm=False).add(toy_kind.TOY, "p4", ts=float("nan"))
    assert toy_kind.totals(raw_conn) == {"p1": 2, "p2": 1, "p3": 2}
    totals = throughput.totals(raw_conn)
    assert totals.applied["toy_like"] == 5 and totals.duplicates["toy_like"] == 2
    assert totals.batches["like"].count == 4 and totals.batches["likes"].count == 3  # refused ones too
    assert item_time("tests.toy.likes", [[{"post": "a", "ts": 40}, {"post": "b", "ts": 30}]], {}) == 30
    assert item_time("tests.toy.like", [], {"post": "a", "ts": 12}) == 12
