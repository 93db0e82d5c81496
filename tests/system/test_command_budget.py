"""Redis commands a visit costs (issue 21), counted by the server itself (``INFO commandstats``:
calls made inside Lua included), with every count still exact (the visit model).

A ``VisitRecorder`` batch of 500 visits over 2,000 pages and 5,000 visitors (the benchmark's
uniform traffic), each with a ranking bump: 33.6 commands a visit before issue 21 (a ``TYPE``
per key written, one ``SADD`` per visitor, an ``HLEN`` per new page, two ``HGET`` per session
id...), 23.1 once each key's first write was its type check, 12.2 since hashes are added to by
one ``HMGET`` and one ``HSET`` a key rather than an ``HINCRBY`` a field (so the precisions a page
counter keeps no longer change the count). Issue 42: fixed parts of 40 views a ``site_day`` call
(a cut by views alone) made it 13.7, a call's ~35 commands of its own spread over fewer views; a
cut by the user agents and languages the views carry (``sitestats.DAY_HEADERS_PER_CALL``) keeps
calls of 100 on this traffic: 12.8. ``python -m bench.commands`` prints the same by script."""

from __future__ import annotations

import random
import time
import uuid

import pytest

from counters_tasks import counters, ranking, ranking_bumps, visits
from counters_tasks.core.settings import load_settings
from counters_tasks.errors import ConfigurationError, InvalidInput
from counters_tasks.ops import views
from counters_tasks.store import keys
from tests.support.servers import is_cluster_run, use_settings
from tests.support.visit_model import model_of

pytestmark = pytest.mark.skipif(is_cluster_run(), reason="INFO commandstats is per node")

VISITS = 500


def uniform_batch(seed: int) -> list[dict]:
    """The benchmark's uniform traffic: a page of 2,000, a visitor of 5,000, a session of 4,000."""
    rng = random.Random(seed)
    sessions = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(4000)]
    now = time.time()
    return [
        {
            "ip": f"10.0.{(i := rng.randrange(5000)) // 250}.{i % 250}",
            "path": f"/post/{rng.randrange(2000)}",
            "session_id": rng.choice(sessions),
            "ts": now,
        }
        for _ in range(VISITS)
    ]


def commands_per_visit(conn, batch: list[dict]) -> float:
    conn.config_resetstat()
    visits.apply_visits(conn, batch, message_id=f"budget-{uuid.uuid4()}")
    ranking_bumps.incr_bumps(
        conn,
        [{"board": "budget", "member": v["path"], "ts": v["ts"]} for v in batch],
        message_id=f"budget-r-{uuid.uuid4()}",
    )
    stats = conn.info("commandstats")
    calls = sum(v["calls"] for k, v in stats.items() if k not in ("cmdstat_config", "cmdstat_info"))
    return calls / len(batch)


@pytest.mark.parametrize("precisions, budget", [("", 13.0), ("60,3600,86400", 13.0)])
def test_a_batch_costs_at_most_its_budget_of_commands_a_visit(raw_conn, monkeypatch, precisions, budget, capsys):
    use_settings(monkeypatch, COUNTERS_PATH_HITS_PRECISIONS=precisions)
    visits.apply_visits(raw_conn, uniform_batch(0)[:20], message_id="warm-up")  # scripts loaded, day fixed
    raw_conn.flushdb()
    batch = uniform_batch(1)
    per_visit = commands_per_visit(raw_conn, batch)
    with capsys.disabled():
        print(
            f"\n[commands] a batch of {VISITS}, hits:<path> at {precisions or 'the default precisions'}: "
            f"{per_visit:.1f} Redis commands a visit (budget {budget})"
        )
    assert per_visit <= budget
    assert model_of(batch).mismatches(raw_conn) == []
    assert dict(ranking.Ranking(raw_conn, "budget").top(limit=VISITS, withscores=True)) == {
        path: sum(1 for v in batch if v["path"] == path) for path in {v["path"] for v in batch}
    }


@pytest.mark.parametrize(
    "precisions, kept", [("3600,60,86400", (60, 3600, 86400)), ("", (60, 300, 3600, 18000, 86400))]
)
@pytest.mark.usefixtures("bound_deployment")
def test_a_page_counter_keeps_the_precisions_set_and_the_site_counter_all(raw_conn, monkeypatch, precisions, kept):
    """A page's ``hits:<path>`` keeps COUNTERS_PATH_HITS_PRECISIONS (by default all but 1 s and
    5 s), the site's ``hits`` all seven; a read of a precision the page does not keep is refused,
    through the Python API and the dashboard's, where it would have been zeros."""
    use_settings(monkeypatch, COUNTERS_PATH_HITS_PRECISIONS=precisions)
    now = time.time()
    for n in range(3):
        visits.apply_visit(raw_conn, f"192.0.2.{n + 1}", "/kept", None, now)
    stored = {counters.bucket_of(field)[0] for field in raw_conn.hkeys(keys.counter_hash("hits:/kept"))}
    assert stored == set(kept)
    for precision in counters.PRECISIONS:
        site = sum(total for _start, total in counters.get_counter(raw_conn, "hits", precision, now=now))
        assert site == 3
        if precision in kept:
            page = sum(total for _start, total in counters.get_counter(raw_conn, "hits:/kept", precision, now=now))
            assert page == 3
            assert views.counter_view(raw_conn, "hits:/kept", str(precision), now=now)["total"] == 3
        else:
            with pytest.raises(InvalidInput, match=f"keeps precisions {', '.join(map(str, kept))}"):
                counters.get_counter(raw_conn, "hits:/kept", precision, now=now)
            with pytest.raises(InvalidInput, match="keeps precisions"):
                counters.get_series(raw_conn, "hits:/kept", precision, now - 60, now, now=now)
            with pytest.raises(InvalidInput, match="keeps precisions"):
                views.counter_view(raw_conn, "hits:/kept", str(precision), now=now)


@pytest.mark.parametrize("raw", ["7", "60,abc", ","])
def test_a_precision_that_is_not_a_counters_precision_is_refused(raw):
    with pytest.raises(ConfigurationError, match="COUNTERS_PATH_HITS_PRECISIONS"):
        load_settings({"COUNTERS_PATH_HITS_PRECISIONS": raw})


@pytest.mark.parametrize("sites, budget", [(1, 13.0), (3, 14.0)])
def test_sources_and_several_sites_keep_a_batch_within_its_budget(raw_conn, monkeypatch, capsys, sites, budget):
    """The same traffic, each view with a referrer (full URLs, reduced) and a fifth with campaign
    tags: the sources' tables ride in each day's call (issue 22: 12.5 a visit, as without them).
    Over three sites mixed in one batch each site has its own days and all-time figures: 13.7
    (one Lua call a site and day, and three commands a site in each all-time shard's call)."""
    use_settings(monkeypatch, COUNTERS_SITES='{"blog": {"timezone": "Asia/Tokyo"}, "shop": {}}')
    rng = random.Random(3)
    referrers = [
        None,
        "https://www.google.com/search?q=a",
        "https://news.ycombinator.com/item?id=1",
        "https://t.co/x",
        "https://duckduckgo.com/?q=b",
    ]
    batch = uniform_batch(1)
    for visit in batch:
        visit["site"] = rng.choice([None, "blog", "shop"][:sites])
        visit["referrer"] = rng.choice(referrers)
        if rng.random() < 0.2:
            visit["utm"] = {"source": rng.choice(["news", "feed"]), "campaign": "launch"}
    visits.apply_visits(raw_conn, uniform_batch(0)[:20], message_id="warm-up")
    raw_conn.flushdb()
    per_visit = commands_per_visit(raw_conn, batch)
    with capsys.disabled():
        print(
            f"\n[commands] a batch of {VISITS} over {sites} site(s), with sources: {per_visit:.1f} Redis commands "
            f"a visit (budget {budget})"
        )
    assert per_visit <= budget
