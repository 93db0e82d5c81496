"""A kind's fields are declared once (``core.kind.Kind.fields``); every signature that still
restates them, because users call it by position (the recorder's methods, the contract's module
functions, the explicit tasks), is checked here against the declaration, for every package kind,
and the places that take an item whole take the declaration's bound dict (``Kind.bind``), not a
list of their own.

Issue 41: a visit's fields stood in nine signatures and had drifted: the middleware's
``Recorder`` Protocol lacked ``user_agent`` and ``language`` though every request sends them, and
``visits.apply_visit`` lacked them too. Each check names what a signature may add (``conn``,
``self``, ``message_id``), the contract's name for a field (``now``: the event's time, ``ts``) and
the fields it leaves out on purpose, with why."""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Callable, Iterable
from typing import Any, get_type_hints
from zoneinfo import ZoneInfo

import pytest

from counters_tasks import counters, live, sitestats, tasks, uniques, visits
from counters_tasks.core.kind import Kind, registered
from counters_tasks.integrations import common
from counters_tasks.integrations.common import Counting, RequestInfo
from counters_tasks.kinds import COUNTER_UPDATE, PACKAGE_KINDS, RANKING, SKIPS, UNIQUE, VISIT
from counters_tasks.ops.importer import formats, ledger
from counters_tasks.recorder import VisitRecorder
from tests.support import brittle_kind, toy_kind

EXTRAS = frozenset({"self", "conn", "message_id"})
"""What a signature may take besides its kind's fields: the object, the Redis client, the dedupe id."""
CONTRACT_NAMES = {"now": "ts"}
"""CONTRACT.md's module functions call the event's time ``now`` (docs/architecture.md "Words")."""
PACKED = ("client",)
"""A visit's ``client``: the user agent as ``visits.pack_visits`` reduces it in the recorder's own
thread; no caller gives it (it is a field for the batch messages and the per-event task)."""


def parameters(function: Callable[..., Any]) -> list[str]:
    """The field names ``function`` takes, in order: its parameters but ``EXTRAS`` and ``*``/``**``
    catch-alls, the contract's names read as the fields they are."""
    found = []
    for parameter in inspect.signature(function).parameters.values():
        if parameter.name in EXTRAS or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        found.append(CONTRACT_NAMES.get(parameter.name, parameter.name))
    return found


def fields_but(kind: Kind, left_out: Iterable[str] = ()) -> list[str]:
    """``kind``'s fields in their declared order, those ``left_out`` left out."""
    return [name for name in kind.fields if name not in set(left_out)]


def middleware_recorder_type() -> type:
    """The type the middleware declares for the recorder it hands visits and bumps to."""
    return get_type_hints(Counting.recorder.fget)["return"]  # type: ignore[attr-defined]


RESTATED: list[tuple[str, Callable[[], Callable[..., Any]], Kind, tuple[str, ...]]] = [
    # (what, the signature, its kind, the fields it leaves out on purpose)
    ("VisitRecorder.record", lambda: VisitRecorder.record, VISIT, PACKED),
    ("the middleware's recorder .record", lambda: middleware_recorder_type().record, VISIT, PACKED),
    ("VisitRecorder.incr_ranking", lambda: VisitRecorder.incr_ranking, RANKING, ()),
    ("the middleware's recorder .incr_ranking", lambda: middleware_recorder_type().incr_ranking, RANKING, ()),
    # a view's bump: timed when made, and of the request's site (the middleware fills both in)
    ("RequestCounters.bump", lambda: common.RequestCounters.bump, RANKING, ("ts", "site")),
    # skips are counted by the time their reason was first seen since the last batch (stamped there)
    ("VisitRecorder.skipped", lambda: VisitRecorder.skipped, SKIPS, ("ts",)),
    ("task update_counter", lambda: tasks.update_counter.run, COUNTER_UPDATE, ()),
    ("counters.update_counter (contract)", lambda: counters.update_counter, COUNTER_UPDATE, ()),
    ("task count_unique", lambda: tasks.count_unique.run, UNIQUE, ()),
    ("uniques.count_visit (contract)", lambda: uniques.count_visit, UNIQUE, ()),
]


@pytest.mark.parametrize("what, signature, kind, left_out", RESTATED, ids=[row[0] for row in RESTATED])
def test_each_restated_signature_is_its_kinds_fields_in_order(what, signature, kind, left_out):
    assert parameters(signature()) == fields_but(kind, left_out), what


def test_record_visit_takes_the_contracts_fields_and_the_views_by_name():
    """``sitestats.record_visit`` (the contract's ``ip, path, now``) takes the view's other fields
    by name, ``VIEW_FIELDS``, which the visit's declaration is made with: no list restated."""
    assert parameters(sitestats.record_visit) == ["ip", "path", "ts"]
    assert list(sitestats.VIEW_FIELDS) == fields_but(VISIT, ("ip", "path", "session_id", "ts", *PACKED))
    with pytest.raises(TypeError, match="session_id"):
        sitestats.record_visit(None, "1.2.3.4", "/", session_id="x")


def test_every_package_kind_with_a_per_item_task_is_checked_or_derived():
    """A kind's per-event task is either made from its declaration (``worker.kind_tasks``: its
    documented call is ``Kind.signature``) or an explicit task checked above."""
    checked = {kind.name for _what, _signature, kind, _left_out in RESTATED}
    for kind in PACKAGE_KINDS:
        if kind.item_task is None:
            continue
        task = tasks.app.tasks[kind.item_task]
        if kind.worker_batches:
            assert kind.signature in (task.__doc__ or ""), kind.name
        else:
            assert kind.name in checked, kind.name


def test_a_kinds_item_functions_take_the_bound_fields_whole():
    """``prepare`` and ``app_item`` take the one dict ``Kind.bind`` returns, never the fields
    spread again as parameters of their own (every package kind, and the test tree's)."""
    assert toy_kind.TOY in registered() and brittle_kind.BRITTLE in registered()
    for kind in registered():
        for function in (kind.prepare, kind.app_item):
            if function is not None:
                assert list(inspect.signature(function).parameters) == ["fields"], (kind.name, function)


def test_a_visit_of_every_field_is_taken_by_each_path(raw_conn):
    """One visit with every field a caller gives, by name: the kind binds it, the app side
    checks it, the worker prepares it, ``apply_visit`` takes and writes it as the task does."""
    given = {
        "ip": "203.0.113.7",
        "path": "/pricing",
        "session_id": "6f1c2b1e8d7a4c559f0e3a2b1c0d9e8f",
        "ts": float(int(time.time())),
        "site": None,
        "referrer": "https://search.example/?q=x",
        "utm": {"source": "news", "medium": "email"},
        "user_agent": "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0",
        "language": "fr-CH, fr;q=0.9",
    }
    assert list(given) == fields_but(VISIT, PACKED)
    item = VISIT.app_item(VISIT.bind((), given))  # type: ignore[misc]
    assert set(item) <= VISIT.field_names and item["referrer"] == "search.example" and item["language"] == "fr-CH"
    prepared = VISIT.prepare(VISIT.bind((), given))  # type: ignore[misc]
    assert prepared.view.referrer == "search.example" and prepared.session is not None
    visits.apply_visit(raw_conn, **given)
    assert live.visitors_now(raw_conn, now=given["ts"]) == 1


@pytest.mark.parametrize("method, kind, left_out", [("record", VISIT, PACKED), ("incr_ranking", RANKING, ())])
def test_the_recorders_methods_hand_each_field_on_under_its_name(monkeypatch, method, kind, left_out):
    """A recorder method's body passes its parameters on by position: each one lands in the
    field of its own name (a value of its own a field, so a swap shows)."""
    added: list[dict[str, Any]] = []
    monkeypatch.setattr(VisitRecorder, "add", lambda self, kind, *args, **kwargs: added.append(kind.bind(args, kwargs)))
    given = {name: f"value of {name}" for name in fields_but(kind, left_out)}
    getattr(VisitRecorder.__new__(VisitRecorder), method)(**given)  # no buffer or thread: add is replaced
    assert added == [given]


class Binding:
    """A stand-in recorder that binds what the middleware hands it as the kinds declare."""

    def __init__(self) -> None:
        self.visits: list[dict[str, Any]] = []

    def record(self, *args: Any, **kwargs: Any) -> None:
        self.visits.append(VISIT.bind(args, kwargs))

    def incr_ranking(self, *args: Any, **kwargs: Any) -> None:
        RANKING.bind(args, kwargs)


def test_the_middleware_hands_over_every_field_a_request_has():
    counting = Counting(recorder=Binding())
    headers = {
        "user-agent": "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0",
        "accept-language": "fr-CH, fr;q=0.9",
        "referer": "https://search.example/",
        "cookie": "counters_session=6f1c2b1e8d7a4c559f0e3a2b1c0d9e8f",
    }
    visit = counting.begin(RequestInfo("GET", "/pricing", "203.0.113.7", headers, query="utm_source=news"))
    counting.response(visit, 200, [("Content-Type", "text/html")])
    counting.finish(visit)
    [bound] = counting.recorder.visits  # type: ignore[union-attr]
    assert set(bound) == {"ip", "path", "session_id", "ts", "referrer", "utm", "user_agent", "language"}


COMBINED = (
    '203.0.113.7 - - [10/Oct/2023:13:55:36 +0000] "GET /pricing?utm_source=news HTTP/1.1" 200 2326 '
    '"https://search.example/" "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0"'
)


def test_the_importers_items_are_visits_as_declared():
    """An imported line's visit is a batch item of the visit kind: every key a field, bound as a
    ``record_visits`` item is; the ledger's source fields are fields too."""
    jsonl = {"ip": "203.0.113.7", "path": "/", "ts": 1_700_000_000, "session_id": "s1", "user_agent": "x"}
    jsonl["language"] = "fr"
    items = [
        formats.line_visit(COMBINED.encode(), "combined", "secret", ZoneInfo("UTC")),
        formats.line_visit(json.dumps(jsonl).encode(), "jsonl", "secret", ZoneInfo("UTC")),
    ]
    for item in items:
        assert isinstance(item, dict), item
        assert VISIT.item_fields(item) == item
    assert {"referrer", "utm", "user_agent"} <= set(items[0]) and {"user_agent", "language"} <= set(items[1])
    assert ledger.SOURCE_FIELDS <= VISIT.field_names
