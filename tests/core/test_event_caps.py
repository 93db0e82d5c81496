"""What an event is (``core.events``): the rule every route applies. The texts the tables show for
what no event sent are refused as a name or a value, so that no event is counted in those rows."""

from __future__ import annotations

import pytest

from counters_tasks import events, tasks
from counters_tasks.core.events import MAX_PROPS, NONE, OTHER, check_event_name, check_props
from counters_tasks.errors import InvalidInput


@pytest.mark.parametrize("name", [OTHER, NONE])
def test_the_rows_names_are_not_an_events_name(name: str) -> None:
    with pytest.raises(InvalidInput, match="reserved"):
        check_event_name(name)


@pytest.mark.parametrize("value", [OTHER, NONE])
def test_the_rows_names_are_not_a_propertys_value(value: str) -> None:
    with pytest.raises(InvalidInput, match="reserved"):
        check_props({"plan": value})


def test_scalars_are_kept_as_text_and_past_the_cap_dropped_and_counted() -> None:
    props = {"a": True, "b": 3, "c": 9.5, "d": "x", "e": None, **{f"k{n}": n for n in range(MAX_PROPS)}}
    kept, dropped = check_props(props)
    assert kept[:4] == (("a", "true"), ("b", "3"), ("c", "9.5"), ("d", "x"))
    assert len(kept) == MAX_PROPS and dropped == 4  # 34 given with a value ("e" is left out, not dropped)


def test_an_event_named_as_the_other_row_is_refused_by_the_task_and_the_rest_applied(conn, eager_app) -> None:
    tasks.track_events.delay([{"name": OTHER, "ip": "10.0.0.1"}, {"name": "signup", "ip": "10.0.0.2"}])
    report = events.event_report(conn)
    assert [(row.name, row.total) for row in report.events] == [("signup", 1)]
