"""Any ``str`` a caller can build (lone surrogates, NUL, 10 KB, any code point) in any text field of
a visit or a ranking bump, beside good items, through each app-side route run in-process: a
``record_visit`` / ``incr_ranking`` message applied eagerly, a ``record_visits`` /
``incr_rankings`` batch, and ``VisitRecorder`` under eager mode. Every item is counted exactly
once or refused (InvalidInput, counted under its reason) alone: the good items beside it are
counted whatever it holds, and nothing but InvalidInput is raised. (Through real workers and the
broker: tests/worker/test_unencodable_text.py; through the middleware: tests/integrations/.)

And an app's eager test without COUNTERS_SECRET is told so, not handed zeros."""

from __future__ import annotations

import time
import uuid

import pytest
from celery.exceptions import Retry
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from counters_tasks import ranking, refusals, sitestats, tasks
from counters_tasks.core.settings import reset_settings
from counters_tasks.errors import ConfigurationError, InvalidInput
from counters_tasks.recorder import VisitRecorder

any_text = st.one_of(
    st.text(alphabet=st.characters(exclude_categories=()), max_size=30),
    st.sampled_from(["\udcff", "a\udcfeb", "\ud800\udc00", "\x00", "é" * 10_240, "x" * 10_240, " ", ""]),
)
"""Any str at all: Hypothesis's own ``text()`` leaves out surrogates, the case that took batches down."""

VISIT_TEXT_FIELDS = ("ip", "path", "session_id", "site", "referrer", "user_agent", "language")
RANKING_TEXT_FIELDS = ("board", "member")
GOOD_AGENT = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36"
)


def good_visit(n: int) -> dict:
    return {"ip": f"203.0.113.{n + 1}", "path": "/sweep", "ts": time.time(), "user_agent": GOOD_AGENT, "language": "en"}


def site_views(conn) -> int:
    return sitestats.site_visit_info(conn).pv


def board_total(conn, board: str) -> int:
    try:
        return sum(score for _member, score in ranking.Ranking(conn, board).top(limit=100, withscores=True))
    except InvalidInput:  # a board name that is not one: nothing can be there
        return 0


def refused_total(conn, route: str) -> int:
    """Refusals counted in Redis: a worker's (eager here); ``VisitRecorder`` raises at the call
    instead, before anything is queued, where the app sees it."""
    return 0 if route == "recorder" else sum(refusals.counts(conn).values())


SWEEP = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


@pytest.fixture(params=["message", "batch", "recorder"])
def route(request, eager_app, monkeypatch):
    monkeypatch.setenv("COUNTERS_CLIENT_TABLES", "on")  # (user agents parsed, languages read)
    reset_settings()
    return request.param


def send(route: str, task_one, task_many, items: list[dict]) -> int:
    """``items`` through ``route``; returns how many were refused with InvalidInput at the call."""
    refused = 0
    if route == "batch":
        applied = task_many.apply(args=[items], task_id=str(uuid.uuid4())).get()
        return len(items) - applied
    recorder = VisitRecorder() if route == "recorder" else None
    for item in items:
        try:
            if recorder is None:
                task_one.apply(kwargs=item, task_id=str(uuid.uuid4())).get()
            elif task_one is tasks.record_visit:
                recorder.record(**item)
            else:
                recorder.incr_ranking(**item)
        except InvalidInput:
            refused += 1
        except Retry as exc:  # pragma: no cover  (what the report saw: never bad input retried)
            raise AssertionError(f"bad input retried: {exc!r}") from exc
    return refused


@pytest.mark.parametrize("field", VISIT_TEXT_FIELDS)
def test_any_text_in_a_visit_field(route, field, raw_conn):
    @SWEEP
    @given(value=any_text)
    def check(value):
        raw_conn.flushdb()
        odd = good_visit(50) | {field: value}
        items = [good_visit(0), good_visit(1), odd, good_visit(2)]
        refused = send(route, tasks.record_visit, tasks.record_visits, items)
        assert refused in (0, 1)
        assert site_views(raw_conn) == len(items) - refused  # the good ones, whatever the odd one held
        assert refused_total(raw_conn, route) == (0 if route == "recorder" else refused)  # a refusal is counted

    check()


@pytest.mark.parametrize("field", RANKING_TEXT_FIELDS)
def test_any_text_in_a_ranking_field(route, field, raw_conn):
    @SWEEP
    @given(value=any_text)
    def check(value):
        raw_conn.flushdb()
        odd = {"board": "posts", "member": "odd"} | {field: value}
        items = [{"board": "posts", "member": f"m{n}"} for n in range(3)]
        refused = send(route, tasks.incr_ranking, tasks.incr_rankings, [*items[:2], odd, items[2]])
        assert refused in (0, 1)
        counted = board_total(raw_conn, "posts") + (board_total(raw_conn, value) if field == "board" else 0)
        assert counted == len(items) + 1 - refused
        assert refused_total(raw_conn, route) == (0 if route == "recorder" else refused)

    check()


def test_an_eager_test_without_the_secret_is_told(raw_conn, monkeypatch):
    """An app's test suite with ``task_always_eager`` (and Celery's default, exceptions kept in
    the result): no COUNTERS_SECRET raises ConfigurationError at the call, for ``.delay()`` and for
    ``VisitRecorder``, instead of a result that reads (0, 0)."""
    from counters_tasks.app import app

    monkeypatch.delenv("COUNTERS_SECRET")
    reset_settings()  # (read afresh: the fixtures read them with the secret)
    app.conf.update(task_always_eager=True, task_eager_propagates=False)
    try:
        with pytest.raises(ConfigurationError, match="COUNTERS_SECRET"):
            tasks.record_visit.delay("203.0.113.1", "/no-secret")
        with pytest.raises(ConfigurationError, match="COUNTERS_SECRET"):
            tasks.record_visits.delay([{"ip": "203.0.113.1", "path": "/no-secret"}])
        with pytest.raises(ConfigurationError, match="COUNTERS_SECRET"):
            VisitRecorder().record("203.0.113.1", "/no-secret")
    finally:
        app.conf.update(task_always_eager=False, task_eager_propagates=False)
    assert site_views(raw_conn) == 0
