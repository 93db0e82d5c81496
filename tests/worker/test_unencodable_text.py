"""One string that is not text (a lone surrogate: what ``surrogateescape`` makes of bytes that are
not UTF-8) among good visits, on every route a real app uses: ``.delay()`` to a real worker that
parses user agents with ua-parser-rs (the ``fast`` extra), a raw ``record_visits`` message,
``VisitRecorder`` to a real broker, an app's own kind whose item the sender cannot encode, and a
message whose check itself breaks. Each bad item is refused (or set aside) alone and counted; every
good one beside it is counted exactly once; nothing loops, blocks or kills the worker."""

from __future__ import annotations

import time

import pytest

from counters_tasks import refusals, sitestats, tasks
from counters_tasks.errors import InvalidInput
from counters_tasks.local.waiting import wait_until
from counters_tasks.recorder import VisitRecorder
from counters_tasks.worker import dead_letters
from tests.support import brittle_kind, toy_kind
from tests.support.procs import celery_env, purge_broker, start_worker

pytestmark = [pytest.mark.processes, pytest.mark.workers]

BAD = "Mozilla/5.0 \udcff\udcfe Firefox/121.0"
"""The user agent of the report: a Python ``str`` that UTF-8 cannot encode."""

GOOD_AGENT = "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0"

BAD_FIELDS = {  # every text field of a visit, one at a time, with a lone surrogate in it
    "user_agent": BAD,
    "language": "de-\udcffDE",
    "referrer": "https://b\udcfe.example/",
    "utm": {"source": "news\udcff"},
    "path": "/caf\udce9",
    "session_id": "6f1c2b1e8d7a4c559f0e3a2b1c0d9e8\udcff",
    "site": "s\udcff",
}


@pytest.fixture(scope="module")
def worker(redis_url, tmp_path_factory):
    """A worker keeping the who-visits tables (its user agents parsed by ua-parser-rs), with the
    test tree's brittle kind."""
    log_dir = tmp_path_factory.mktemp("unencodable-worker")
    purge_broker(redis_url)
    env = celery_env(redis_url, COUNTERS_CLIENT_TABLES="on", COUNTERS_WORKER_BATCH="50", COUNTERS_WORKER_BATCH_MS="50")
    process = start_worker(env, log_dir / "worker.log", extra=("-I", "tests.support.brittle_kind")).wait_ready()
    yield process
    assert process.stop() == 0, process.output()[-3000:]


def page_views(conn, path: str) -> int:
    return sitestats.site_visit_info(conn, None, path).pv


def test_ua_parser_rs_is_what_the_worker_uses():
    """The report's worker had the ``fast`` extra: the parser that raised on a lone surrogate."""
    import ua_parser_rs  # noqa: F401  (installed with the fast extra, as make run installs it)


@pytest.mark.parametrize("field", sorted(BAD_FIELDS))
def test_delay_one_bad_field_among_six_good_visits(worker, raw_conn, monkeypatch, field):
    monkeypatch.setenv("COUNTERS_CLIENT_TABLES", "on")
    path = f"/delay-{field}"
    now = time.time()
    for n in range(6):
        tasks.record_visit.delay(f"203.0.113.{n + 1}", path, ts=now, user_agent=GOOD_AGENT, language="en-GB")
    bad = {"ip": "203.0.113.99", "path": path, "ts": now} | {field: BAD_FIELDS[field]}
    tasks.record_visit.delay(**bad)
    wait_until(
        lambda: refusals.counts(raw_conn)["bad_input"] == 1,
        timeout=30,
        what=f"the bad visit refused; log:\n{worker.output()[-3000:]}",
    )
    wait_until(lambda: page_views(raw_conn, path) == 6, timeout=30, what="the six good visits")
    assert sitestats.site_visit_info(raw_conn, None, path).uv == 6
    assert "UnicodeEncodeError" not in worker.output()


def test_a_raw_batch_message_with_one_bad_item(worker, raw_conn):
    """A ``record_visits`` message (what any producer can publish) holding a bad item of each kind
    of field among good ones: the good ones counted, each bad one refused and counted alone."""
    now = time.time()
    good = [{"ip": f"198.51.100.{n + 1}", "path": "/raw", "ts": now, "user_agent": GOOD_AGENT} for n in range(10)]
    bad = [{"ip": "198.51.100.200", "path": "/raw", "ts": now} | {field: value} for field, value in BAD_FIELDS.items()]
    tasks.record_visits.apply_async(args=[good[:5] + bad + good[5:]], task_id="raw-batch-1")
    wait_until(
        lambda: refusals.counts(raw_conn)["bad_input"] == len(bad),
        timeout=30,
        what=f"every bad item refused; log:\n{worker.output()[-3000:]}",
    )
    wait_until(lambda: page_views(raw_conn, "/raw") == len(good), timeout=30, what="the good items")


def test_visit_recorder_refuses_at_the_call_and_sends_the_rest(worker, raw_conn, monkeypatch):
    monkeypatch.setenv("COUNTERS_CLIENT_TABLES", "on")
    recorder = VisitRecorder(max_delay=0.05)
    for field, value in BAD_FIELDS.items():
        bad = {"ip": "192.0.2.200", "path": "/recorded"} | {field: value}
        with pytest.raises(InvalidInput, match="not valid Unicode text|unknown site|session id"):
            recorder.record(**bad)
    for n in range(6):
        recorder.record(f"192.0.2.{n + 1}", "/recorded", user_agent=GOOD_AGENT, language="fr")
    started = time.monotonic()
    assert recorder.flush(timeout=10)
    assert time.monotonic() - started < 2, "flush() waited for a batch that cannot be sent"
    assert recorder.close(timeout=10)
    stats = recorder.stats()
    assert (stats["recorded"], stats["sent"], stats["refused"], stats["send_errors"]) == (6, 6, 0, 0)
    wait_until(lambda: page_views(raw_conn, "/recorded") == 6, timeout=30, what="the good visits")


def test_an_item_the_sender_cannot_encode_is_refused_alone(worker, raw_conn):
    """An app's own kind whose check lets through what JSON cannot carry: the sender refuses
    that item alone (counted in stats, logged), sends the others, never retries for ever."""
    recorder = VisitRecorder(max_delay=0.05, retry_initial=0.05)
    for n in range(5):
        recorder.add(brittle_kind.BRITTLE, f"post-{n}")
    recorder.add(brittle_kind.BRITTLE, "post-x", extra=object())
    assert recorder.flush(timeout=10), recorder.stats()
    assert recorder.close(timeout=10)
    stats = recorder.stats()
    assert (stats["recorded"], stats["sent"], stats["refused"], stats["send_errors"]) == (6, 5, 1, 0)
    wait_until(lambda: sum(toy_kind.totals(raw_conn).values()) == 5, timeout=30, what="the five likes")


def test_a_message_whose_check_breaks_is_set_aside_alone(worker, raw_conn):
    """Not bad input: the check raised something else. That message goes to the dead letters (to
    be requeued once the cause is mended); the others of its batch are applied."""
    store = dead_letters.store_client()
    before = dead_letters.summary(store)["count"]
    for n in range(5):
        brittle_kind.like.delay(f"post-{n}")
    brittle_kind.like.delay(brittle_kind.BREAKS)
    wait_until(
        lambda: sum(toy_kind.totals(raw_conn).values()) == 5,
        timeout=30,
        what=f"the five likes; log:\n{worker.output()[-3000:]}",
    )
    wait_until(lambda: dead_letters.summary(store)["count"] == before + 1, timeout=30, what="the message set aside")
    [record] = dead_letters.listing(store, 1)
    assert record["args"][0] == brittle_kind.BREAKS
    assert toy_kind.totals(raw_conn).get(brittle_kind.BREAKS) is None
