"""Every size a client chooses is capped before the expensive work: IP text, message ids,
batch lengths, argument shapes."""

from __future__ import annotations

import tracemalloc

import pytest

from counters_tasks import ranking_bumps, tasks, visits
from counters_tasks.core.validation import MAX_IP_TEXT, MAX_MESSAGE_ID, check_ip
from counters_tasks.errors import InvalidInput, MalformedMessage


def test_a_huge_ipv6_scope_id_is_refused_before_parsing_or_caching():
    huge = "fe80::1%" + "x" * 1_000_000
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for n in range(200):
            with pytest.raises(InvalidInput):
                check_ip(huge + str(n))
        grown = sum(stat.size_diff for stat in tracemalloc.take_snapshot().compare_to(before, "filename"))
    finally:
        tracemalloc.stop()
    assert grown < 1_000_000  # was ~210 MB: every distinct text parsed and kept in a cache
    assert check_ip("fe80::1%eth0") == "fe80::1"
    assert len("ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255%" + "e" * 15) <= MAX_IP_TEXT


@pytest.mark.parametrize("message_id", [12345, "x" * (MAX_MESSAGE_ID + 1), "", "a\nb"])
def test_message_ids_are_short_strings_on_every_path(raw_conn, message_id):
    visit = {"ip": "192.0.2.1", "path": "/"}
    with pytest.raises(MalformedMessage):
        visits.apply_visits(raw_conn, [visit], message_id=message_id)
    with pytest.raises(MalformedMessage):
        ranking_bumps.incr_bumps(raw_conn, [{"board": "b", "member": "m"}], message_id=message_id)


def test_arguments_given_as_a_dict_are_refused_not_unpacked_as_names(eager_app, raw_conn):
    with pytest.raises(MalformedMessage):
        tasks.record_visit.apply(args={"192.0.2.1": 1, "/": 2})
    with pytest.raises(MalformedMessage):
        tasks.incr_ranking.apply(args={"board": 1, "member": 2})


def test_every_batch_task_has_a_size_cap(raw_conn):
    with pytest.raises(MalformedMessage):
        visits.apply_visits(raw_conn, [{"ip": "192.0.2.1", "path": "/"}] * (visits.MAX_BATCH + 1))
    with pytest.raises(MalformedMessage):
        ranking_bumps.incr_bumps(raw_conn, [{"board": "b", "member": "m"}] * (ranking_bumps.MAX_BUMPS + 1))
