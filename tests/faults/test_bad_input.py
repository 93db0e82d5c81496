"""Bad input for every task: Hypothesis makes arguments (wrong types, huge, unicode, control
characters, NaN, negative, missing, unknown). Each call is applied, or refused with InvalidInput
(TypeError for a call that does not fit the signature), and a refused call leaves Redis byte for
byte as it was."""

from __future__ import annotations

import math
import time
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from counters_tasks import counters, ranking, refusals, tasks, visits
from counters_tasks.errors import InvalidInput
from tests.support.servers import dump_all, flush

pytestmark = pytest.mark.processes

NOW = float(int(time.time()))
MISSING = object()

junk = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([math.nan, math.inf, -math.inf, -1, -1.5, 0, 2**53, 2**63]),
    st.text(max_size=40), st.text(alphabet=st.characters(max_codepoint=0x9F), max_size=10),
    st.sampled_from(["", " ", "{x}", "a\nb", "\x00", "\ud800", "x" * 1025, "é" * 10_240, "*", "10.0.0.1", "/p?q#f"]),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)
ips = st.one_of(st.sampled_from(["10.0.0.1", "::1", "::ffff:10.0.0.2", "fe80::1%eth0", "2001:db8::7"]), st.ip_addresses().map(str))
texts = st.text(min_size=1, max_size=60)
paths = st.one_of(texts.map(lambda t: "/" + t), st.just("/" + "é" * 600))
sessions = st.one_of(st.uuids().map(str), st.uuids().map(lambda u: u.hex.upper()))
stamps = st.one_of(st.none(), st.floats(min_value=NOW - 3600, max_value=NOW), st.integers(min_value=int(NOW) - 3600, max_value=int(NOW)))
amounts = st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)


def arg(good):
    """Mostly a good value, often junk, sometimes missing."""
    return st.one_of(good, good, junk, st.just(MISSING))


def visit_dicts():
    return st.fixed_dictionaries({"ip": arg(ips), "path": arg(paths)}, optional={"session_id": arg(sessions), "ts": arg(stamps)})


def ranking_events():
    return st.fixed_dictionaries({"board": arg(texts), "member": arg(texts)},
                                 optional={"amount": arg(amounts), "ts": arg(stamps), "period_hours": arg(st.just(24)),
                                           "interval_hours": arg(st.sampled_from([1, 2, 5, 48]))})


CALLS = {  # by task name: touching a task object here would load the Celery config at collection
    "update_counter": {"name": arg(texts), "count": arg(amounts), "ts": arg(stamps)},
    "incr_ranking": {"board": arg(st.sampled_from(["board", "other"])), "member": arg(texts), "amount": arg(amounts),
                         "ts": arg(stamps), "period_hours": arg(st.sampled_from([24, 48, 5])),
                         "interval_hours": arg(st.sampled_from([1, 2, 7]))},
    "record_visit": {"ip": arg(ips), "path": arg(paths), "session_id": arg(sessions), "ts": arg(stamps)},
    "count_unique": {"session_id": arg(sessions), "ts": arg(stamps)},
    "record_visits": {"visits": arg(st.lists(st.one_of(visit_dicts(), visit_dicts(), junk), max_size=4))},
    "incr_rankings": {"events": arg(st.lists(st.one_of(ranking_events(), ranking_events(), junk), max_size=4))},
}


def seed(conn) -> None:
    """Some data to keep intact: a board fixed to (24, 1), counters, a visit."""
    flush(conn)
    ranking.Ranking(conn, "board").incr("m", 1, NOW)
    counters.update_counter(conn, "name", 1, NOW)
    visits.apply_visit(conn, "10.0.0.1", "/seed", str(uuid.UUID(int=1)), NOW)


@pytest.mark.parametrize("name", list(CALLS))
def test_every_task_applies_or_refuses_cleanly(name, eager_app, raw_conn):
    task = getattr(tasks, name)

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                     HealthCheck.too_slow])
    @given(st.fixed_dictionaries(CALLS[name]), st.one_of(st.just({}), st.dictionaries(st.sampled_from(["bogus", "nope"]), junk, max_size=1)))
    def check(kwargs, extra):
        seed(raw_conn)
        before = dump_all(raw_conn)
        call = {k: v for k, v in kwargs.items() if v is not MISSING} | extra
        try:
            task.apply(kwargs=call, task_id=str(uuid.uuid4()))
        except (InvalidInput, TypeError) as exc:
            assert dump_all(raw_conn) == before, f"{task.name} refused {call!r} but wrote"
            if isinstance(exc, InvalidInput):  # refused, and counted under its reason
                assert refusals.counts(raw_conn)[exc.reason] >= 1

    check()
