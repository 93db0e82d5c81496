"""Goals and funnels kept in Redis (``events.definitions``): defined, replaced, removed, listed by
site, refused when they cannot count, and read by workers from a cache that a definition made in
this process clears; ``since`` is when every worker judges with it."""

from __future__ import annotations

import math

import pytest

from counters_tasks import events
from counters_tasks.core.settings import get_settings
from counters_tasks.errors import InvalidInput
from counters_tasks.events import definitions


def test_a_goal_and_a_funnel_are_kept_and_listed_by_site(conn) -> None:
    events.define_goal(conn, "signed up", event="signup", prop="plan", value="pro", revenue="amount")
    events.define_goal(conn, "pricing", page="/pricing")
    made = events.define_funnel(conn, "signup", [{"page": "/pricing"}, {"event": "signup", "window": 600}], 1800)
    assert [g.name for g in events.goals(conn)] == ["pricing", "signed up"]
    assert events.goals(conn)[1].match.value == "pro" and events.goals(conn)[1].revenue == "amount"
    assert events.funnels(conn) == [made]
    assert made.steps[1].window == 600 and made.window == 1800


def test_defining_again_replaces_and_removing_forgets(conn) -> None:
    events.define_goal(conn, "g", page="/a", now=1_700_000_000)
    again = events.define_goal(conn, "g", page="/b", now=1_700_000_500)
    assert events.goals(conn) == [again]
    assert again.since > 1_700_000_500
    assert events.remove_goal(conn, "g") is True
    assert events.remove_goal(conn, "g") is False
    assert events.goals(conn) == []


def test_since_leaves_every_worker_time_to_read_the_definition(conn) -> None:
    made = events.define_goal(conn, "g", page="/a", now=1_700_000_001)
    tolerance = get_settings().future_tolerance
    assert made.since >= 1_700_000_001 + definitions.REFRESH + tolerance
    assert made.since % 60 == 0 and made.since - (1_700_000_001 + definitions.REFRESH + tolerance) < 60
    assert math.isfinite(made.since)


@pytest.mark.parametrize(
    "define",
    [
        lambda c: events.define_goal(c, "g"),  # neither a page nor an event
        lambda c: events.define_goal(c, "g", page="/a", site="no-such-site"),
        lambda c: events.define_goal(c, "", event="e"),
        lambda c: events.define_funnel(c, "f", [{"page": "/a"}], 1800),
        lambda c: events.define_funnel(c, "f", "/a,/b", 1800),
        lambda c: events.define_funnel(c, "f", [{"page": "/a"}, {"page": "/b"}], 10**9),
        lambda c: events.define_funnel(c, "f", [{"page": "/a"}, {"event": "e", "prop": "p"}], 1800),
    ],
)
def test_bad_definitions_are_refused_and_nothing_is_kept(conn, define) -> None:
    with pytest.raises(InvalidInput):
        define(conn)
    assert events.goals(conn) == [] and events.funnels(conn) == []


def test_a_site_has_at_most_so_many_goals(conn, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(definitions, "MAX_DEFINITIONS", 3)
    for n in range(3):
        events.define_goal(conn, f"g{n}", page=f"/{n}")
    with pytest.raises(InvalidInput, match="at most 3"):
        events.define_goal(conn, "g3", page="/3")
    events.define_goal(conn, "g1", page="/other")  # replacing one is not one more
    assert len(events.goals(conn)) == 3


def test_workers_read_the_definitions_by_site_and_a_definition_clears_the_cache(conn) -> None:
    assert definitions.current(conn).empty
    events.define_goal(conn, "g", page="/a")
    events.define_funnel(conn, "f", [{"page": "/a"}, {"page": "/b"}], 600)
    defined = definitions.current(conn)
    assert [g.name for g in defined.goals[""]] == ["g"] and [f.name for f in defined.funnels[""]] == ["f"]
    conn.delete(*(definitions.definitions_key(what) for what in ("goals", "funnels")))
    assert not definitions.current(conn).empty  # cached: another process's change is read within REFRESH
    events.remove_goal(conn, "g")  # this process's own change clears it
    assert "" not in definitions.current(conn).goals


def test_a_funnel_window_longer_than_the_visitor_days_is_refused_with_the_setting_to_raise(
    conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A visitor's funnel state is visitor-level data, kept at most COUNTERS_VISITOR_DAYS after its
    latest step: a 30-day window would lose longer attempts without a word, so it is refused."""
    from tests.support.servers import use_settings

    steps = [{"page": "/a"}, {"page": "/b"}]
    with pytest.raises(InvalidInput, match="COUNTERS_VISITOR_DAYS of at least 31"):
        events.define_funnel(conn, "month", steps, 30 * 86400)
    assert events.funnels(conn) == []
    events.define_funnel(conn, "week", steps, 6 * 86400)  # 6 days + a day's lateness: 7 days fit
    use_settings(monkeypatch, COUNTERS_VISITOR_DAYS="31")
    assert events.define_funnel(conn, "month", steps, 30 * 86400).window == 30 * 86400
