"""What a goal or funnel step matches (``core.conversions``): the one rule a worker applies to a
page view and to an event, and the definitions' checks and JSON form. No Redis."""

from __future__ import annotations

import pytest

from counters_tasks.core.conversions import (
    Funnel,
    Goal,
    Match,
    Step,
    funnel_from_json,
    goal_from_json,
    match_of,
    parse_window,
    to_json,
)
from counters_tasks.errors import InvalidInput


@pytest.mark.parametrize(
    ("page", "how", "path", "hit"),
    [
        ("/signup", "exact", "/signup", True),
        ("/signup", "exact", "/signup/", False),
        ("/signup", "exact", "/signup?x=1", False),  # a path reaches the rule as its canonical name: no query
        ("/blog/", "prefix", "/blog/a", True),
        ("/blog/", "prefix", "/blo", False),
        ("/blog/*/comments", "pattern", "/blog/a-post/comments", True),
        ("/blog/*/comments", "pattern", "/blog/a/b/comments", False),  # * stays within a segment
        ("/blog/**", "pattern", "/blog/a/b/c", True),
        ("/a.b", "pattern", "/aXb", False),  # only * is special
        ("/caf%C3%A9", "exact", "/café", True),  # the goal's page is named as a view's path is
    ],
)
def test_a_page_match_compares_canonical_paths(page: str, how: str, path: str, hit: bool) -> None:
    assert Match(page=page, page_match=how).hits_view(path) is hit


def test_an_event_match_needs_its_name_and_the_property_value_when_filtered() -> None:
    plain = Match(event="signup")
    filtered = Match(event="signup", prop="plan", value="pro")
    assert plain.hits_event("signup", ()) and plain.hits_event("signup", (("plan", "free"),))
    assert not plain.hits_event("signin", ())
    assert filtered.hits_event("signup", (("src", "ad"), ("plan", "pro")))
    assert not filtered.hits_event("signup", (("plan", "free"),))
    assert not filtered.hits_event("signup", ())
    assert not Match(page="/signup").hits_event("signup", ())  # a page match is no event's
    assert not plain.hits_view("/signup")


@pytest.mark.parametrize(
    "made",
    [
        lambda: Match(),  # neither a page nor an event
        lambda: Match(page="/a", event="b"),  # both
        lambda: Match(page="/a", page_match="regex"),
        lambda: Match(page="/a", prop="k", value="v"),  # a page view has no properties
        lambda: Match(event="e", prop="k"),  # a filter needs both
        lambda: Match(event="x" * 101),
        lambda: Match(event="bad\x00name"),
        lambda: Goal("g", Match(page="/a"), revenue="amount"),  # revenue is an event's property
        lambda: Funnel("f", (Step(Match(page="/a")),), 1800),  # one step
        lambda: Funnel("f", tuple(Step(Match(page=f"/{n}")) for n in range(9)), 1800),  # nine
        lambda: Funnel("f", (Step(Match(page="/a")), Step(Match(page="/b"))), 30),  # under a minute
        lambda: Step(Match(page="/a"), window=True),
        lambda: match_of({"page": "/a", "pages": 1}),
    ],
)
def test_definitions_that_cannot_count_are_refused(made) -> None:
    with pytest.raises(InvalidInput):
        made()


@pytest.mark.parametrize(("text", "seconds"), [("30m", 1800), ("90s", 90), ("2h", 7200), ("7d", 604800), ("600", 600)])
def test_windows_are_read_with_their_unit(text: str, seconds: int) -> None:
    assert parse_window(text) == seconds


@pytest.mark.parametrize("text", ["", "30x", "-5m", "1.5h", "91d", "59s"])
def test_windows_out_of_bounds_or_unreadable_are_refused(text: str) -> None:
    with pytest.raises(InvalidInput):
        parse_window(text)


def test_definitions_come_back_from_their_json() -> None:
    goal = Goal("paid", Match(event="purchase", prop="plan", value="pro"), "amount", "shop", 1_700_000_040.0)
    funnel = Funnel(
        "signup",
        (
            Step(Match(page="/pricing")),
            Step(Match(event="signup"), 600),
            Step(Match(page="/welcome/", page_match="prefix")),
        ),
        1800,
        "",
        1_700_000_100.0,
    )
    assert goal_from_json(to_json(goal)) == goal
    assert funnel_from_json(to_json(funnel)) == funnel
