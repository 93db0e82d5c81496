"""The reads of events, goals and funnels (issue 43) as every reader shows them, over reports built
directly from ``events.report``'s types (the read functions stubbed, so what is tested is the
rendering): ``counters-tasks events``, ``goals`` and ``funnel NAME`` in-process through the real
entry point (the table's text, the CSV's columns and rows, the JSON's shape), ``/api/events``,
``/api/goals`` and ``/api/funnel`` with a read token; and the definitions' commands
(``define-goal``, ``define-funnel``, ``remove-goal``, ``remove-funnel``) against the test Redis,
bad input refused with exit 2 and the InvalidInput's message."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from counters_tasks import events
from counters_tasks.core.days import day_start, today
from counters_tasks.core.events import NONE, OTHER
from counters_tasks.events import definitions
from counters_tasks.events.report import (
    EventReport,
    EventRow,
    FunnelReport,
    FunnelStep,
    GoalReport,
    GoalRow,
    ValueCount,
)
from counters_tasks.ops import event_views, views
from counters_tasks.ops.web import create_app
from tests.support.browser import Browser, ensure_chromium
from tests.support.cli_run import run_in_process as run
from tests.support.dashboard import TestClient, served

LAST = today() - timedelta(days=1)
DAY = LAST - timedelta(days=1)
"""The range of the stubbed reports: the last two whole days, within every retention horizon
whenever the suite runs (fixed dates would get a ``retention_note`` once past COUNTERS_VISITOR_DAYS)."""
SINCE = float(day_start(DAY))  # the definitions count from the range's first day: not partial


def csv_of(text: str) -> tuple[list[str], list[dict[str, str]]]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    rows = list(reader)
    return list(reader.fieldnames or []), rows


EVENTS = EventReport(
    site="",
    start=DAY,
    end=LAST,
    events=[
        EventRow(
            name="signup",
            total=12,
            uv=9,
            uv_error=0.0,
            no_visitor=2,
            dropped_props=3,
            props={
                "plan": [
                    ValueCount("pro", 7, 5, 0.0),
                    ValueCount('free, "trial"', 4, 4, 0.0),  # a comma and quotes: CSV quotes them
                    ValueCount(NONE, 1, 1, 0.0),
                ]
            },
        ),
        EventRow(
            name="download",
            total=5000,
            uv=1553,
            uv_error=0.008,
            no_visitor=0,
            dropped_props=0,
            props={"file": [ValueCount("a.pdf", 3000, 900, 0.008), ValueCount(OTHER, 2000, 700, 0.008)]},
        ),
    ],
)

GOALS = GoalReport(
    site="",
    start=DAY,
    end=LAST,
    visitors=200,
    visitors_error=0.0,
    goals=[
        GoalRow("bought", "event purchase", 30, 25, 0.0, 0.125, 1234.5, SINCE, no_revenue=2),
        GoalRow("pricing", "page /pricing", 90, 60, 0.0, 0.3, None, SINCE + 86400 + 120),  # defined later: partial
    ],
)

FUNNEL = FunnelReport(
    name="checkout",
    site="",
    start=DAY,
    end=LAST,
    window=1800,
    since=SINCE,
    steps=[
        FunnelStep(1, "page /pricing", 100, 1.0, 1.0, []),
        FunnelStep(2, "event signup[plan=pro]", 40, 0.4, 0.4, [("<1m", 10), ("1-5m", 30), ("5-15m", 0)]),
        FunnelStep(3, "page /done", 10, 0.1, 0.25, [("<1m", 4), ("1-5m", 6)]),
    ],
    open_days=[LAST],
    late=3,
    capped=4,
)


@pytest.fixture
def reports(monkeypatch, raw_conn) -> list[tuple[str, dict[str, Any]]]:
    """The read functions stubbed with the reports above; each call's (function, arguments) noted.
    The funnel ``checkout`` is defined, so ``funnel checkout`` finds it."""
    calls: list[tuple[str, dict[str, Any]]] = []

    def stub(name: str, report: Any):
        def read(conn: Any, *args: Any, **kwargs: Any) -> Any:
            calls.append((name, {"args": args, **kwargs}))
            return report

        monkeypatch.setattr(events, name, read, raising=False)

    stub("event_report", EVENTS)
    stub("goal_report", GOALS)
    stub("funnel_report", FUNNEL)
    steps = [
        {"page": "/pricing"},
        {"event": "signup", "prop": "plan", "value": "pro"},
        {"page": "/done", "window": 600},
    ]
    definitions.define_funnel(raw_conn, "checkout", steps, 1800)
    return calls


RANGE = ("--from", DAY.isoformat(), "--to", LAST.isoformat())


def test_events_table_csv_and_json(reports):
    code, out, err = run("events", *RANGE)
    assert code == 0, err
    assert f"events {DAY} .. {LAST}" in out
    assert "signup" in out and "pro" in out and "≈1553 ±0.8%" in out  # the estimate marked as every UV
    assert "events without a visitor (no IP): 2," in out and "dropped past the 30 an event keeps: 3" in out
    assert f"{OTHER}: the event names or values past a day's cap" in out and f"{NONE}: the events without" in out
    assert reports[-1] == ("event_report", {"args": (), "site": "", "start": DAY, "end": LAST})
    code, out, err = run("events", *RANGE, "--format", "csv")
    header, rows = csv_of(out)
    assert header == [
        "event", "prop", "value", "total", "uv", "uv_exact", "uv_error", "no_visitor", "dropped_props"
    ]  # fmt: skip
    assert [(r["event"], r["prop"], r["value"], r["total"], r["uv"]) for r in rows] == [
        ("signup", "", "", "12", "9"),
        ("signup", "plan", "pro", "7", "5"),
        ("signup", "plan", 'free, "trial"', "4", "4"),
        ("signup", "plan", NONE, "1", "1"),
        ("download", "", "", "5000", "1553"),
        ("download", "file", "a.pdf", "3000", "900"),
        ("download", "file", OTHER, "2000", "700"),
    ]
    assert (rows[0]["no_visitor"], rows[0]["dropped_props"], rows[1]["no_visitor"]) == ("2", "3", "")
    assert (rows[4]["uv_exact"], rows[4]["uv_error"], rows[0]["uv_exact"]) == ("false", "0.008", "true")
    code, out, err = run("events", *RANGE, "--json")
    data = json.loads(out)
    assert data == event_views.events_json(EVENTS)
    assert (data["site"], data["from"], data["to"]) == ("default", DAY.isoformat(), LAST.isoformat())
    download = data["events"][1]
    assert download["uv"] == 1553 and download["uv_exact"] is False and download["uv_error"] == 0.008
    assert download["props"]["file"][1] == {"value": OTHER, "total": 2000, **views.uv_view(700, True, 0.008)}


def test_goals_table_csv_and_json(reports):
    code, out, err = run("goals", *RANGE)
    assert code == 0, err
    assert "rates of 200 unique visitors" in out
    assert "12.5%" in out and "30.0%" in out and "1234.5" in out
    assert "*: defined after the range began" in out
    assert "bought: conversions without a numeric revenue property: 2 (in" in out
    code, out, err = run("goals", *RANGE, "--format", "csv")
    header, rows = csv_of(out)
    assert header == [
        "goal", "label", "conversions", "converters", "converters_exact", "converters_error",
        "rate", "rate_exact", "revenue", "no_revenue", "since_iso", "partial",
    ]  # fmt: skip
    got = [
        (r["goal"], r["conversions"], r["converters"], r["rate"], r["revenue"], r["no_revenue"], r["partial"])
        for r in rows
    ]
    assert got == [
        ("bought", "30", "25", "0.125", "1234.5", "2", "false"),
        ("pricing", "90", "60", "0.3", "", "0", "true"),
    ]
    data = json.loads(run("goals", *RANGE, "--json")[1])
    assert data["visitors"] == 200 and data["visitors_exact"] is True
    pricing = data["goals"][1]
    assert pricing["revenue"] is None and pricing["partial"] is True and pricing["rate_exact"] is True
    assert pricing["since"] == SINCE + 86400 + 120 and pricing["since_iso"].startswith(LAST.isoformat())


def test_funnel_table_csv_and_json(reports):
    code, out, err = run("funnel", "checkout", *RANGE)
    assert code == 0, err
    assert "funnel checkout" in out and "40.0%" in out and "25.0%" in out and "within 30m" in out
    assert f"still open (their window not over, figures may grow): {LAST}" in out
    assert "step events later than the window plus COUNTERS_FUNNEL_LATENESS: 3, not judged" in out
    assert "step events past their visitor's state cap: 4, not judged" in out
    assert "█" * 20 in out  # the first step's bar, the longest
    assert "<1m 10; 1-5m 30" in out and "5-15m" not in out  # the table: the buckets with visitors
    assert "page /done (within 10m)" in out  # the step's own window
    assert reports[-1] == ("funnel_report", {"args": ("checkout",), "site": "", "start": DAY, "end": LAST})
    code, out, err = run("funnel", "checkout", *RANGE, "--format", "csv")
    assert f"still open (their window not over, figures may grow): {LAST}" in err  # beside the CSV
    assert "LATENESS: 3, not judged" in err and "state cap: 4, not judged" in err
    header, rows = csv_of(out)
    assert header == ["step", "label", "visitors", "of_first", "of_previous", "time_to_convert"]
    assert [(r["step"], r["visitors"], r["of_first"], r["time_to_convert"]) for r in rows] == [
        ("1", "100", "1.0", ""),
        ("2", "40", "0.4", "<1m=10; 1-5m=30; 5-15m=0"),  # every bucket in the CSV
        ("3", "10", "0.1", "<1m=4; 1-5m=6"),
    ]
    data = json.loads(run("funnel", "checkout", *RANGE, "--json")[1])
    assert (data["window"], data["window_text"], data["late"], data["open_days"]) == (
        1800,
        "30m",
        3,
        [LAST.isoformat()],
    )
    assert data["steps"][2]["time_to_convert"] == [{"bucket": "<1m", "visitors": 4}, {"bucket": "1-5m", "visitors": 6}]
    assert data["partial"] is False
    assert [s["step_window"] for s in data["steps"]] == [None, None, 600] and data["steps"][2][
        "step_window_text"
    ] == "10m"


def test_a_funnel_not_defined_exits_2_naming_those_there_are(reports):
    code, out, err = run("funnel", "nope")
    assert code == 2 and "no funnel named 'nope' (funnels: checkout)" in err


def test_the_api_answers_the_views_with_a_read_token(reports, raw_conn, monkeypatch):
    client = TestClient(create_app(raw_conn, auth=("ops", "s3cret"), health=lambda _c: {"ok": True}))
    token = views.create_token(raw_conn, "events-reader")["token"]
    bearer = {"Authorization": f"Bearer {token}"}
    span = f"from={DAY}&to={LAST}"
    for path, expected in (
        (f"/api/events?{span}", event_views.events_json(EVENTS)),
        (f"/api/goals?{span}", event_views.goals_json(GOALS)),
        (
            f"/api/funnel?name=checkout&{span}",
            event_views.funnel_json(FUNNEL, definitions.funnel(raw_conn, "checkout")),
        ),
    ):
        assert client.get(path).status_code == 401  # neither password nor token
        answer = client.get(path, headers=bearer)
        assert answer.status_code == 200 and answer.json() == expected, path
    listed = client.get("/api/funnels", headers=bearer).json()
    assert [f["name"] for f in listed["funnels"]] == ["checkout"] and listed["funnels"][0]["window_text"] == "30m"
    for bad in ("/api/funnel", "/api/funnel?name=nope", f"/api/events?from={LAST}&to={DAY}"):
        answer = client.get(bad, headers=bearer)
        assert answer.status_code == 400 and answer.json()["error"], bad


def test_define_and_remove_goals_and_funnels(raw_conn):
    code, out, err = run(
        "define-goal", "pro", "--event", "signup", "--prop", "plan", "--value", "pro", "--revenue", "amount"
    )
    assert code == 0, err
    assert "goal 'pro' defined: event signup[plan=pro]; counts from" in out
    code, out, err = run("define-goal", "blog", "--page", "/blog/", "--match", "prefix", "--json")
    assert code == 0, err
    assert json.loads(out)["label"] == "page /blog/ (prefix)"
    goals = {g.name: g for g in definitions.goals(raw_conn)}
    assert goals["pro"].match.event == "signup" and goals["pro"].revenue == "amount"
    assert goals["blog"].match.page_match == "prefix"
    code, out, err = run(
        "define-funnel", "signup", "--window", "2h",
        "--step", "page:/a", "--step", "event:signup[plan=pro]", "--step", "page:/done@10m", "--step", "pattern:/x/*",
    )  # fmt: skip
    assert code == 0, err
    assert "funnel 'signup' defined: page /a > event signup[plan=pro] > page /done @10m > page /x/* (pattern)" in out
    assert "within 2h" in out
    made = definitions.funnel(raw_conn, "signup")
    assert made is not None and made.window == 7200
    assert [s.window for s in made.steps] == [None, None, 600, None]
    assert (made.steps[1].match.prop, made.steps[1].match.value) == ("plan", "pro")
    assert made.since > 0 and made.since % 60 == 0
    assert run("remove-goal", "pro")[0] == 0 and [g.name for g in definitions.goals(raw_conn)] == ["blog"]
    code, out, _ = run("remove-goal", "pro")
    assert code == 1 and "no goal named 'pro'" in out
    assert run("remove-funnel", "signup", "--json")[0] == 0 and definitions.funnels(raw_conn) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("define-goal", "g", "--page", "/a", "--prop", "k", "--value", "v"), "a page view has no properties"),
        (("define-goal", "g"), "either a page or an event"),
        (("define-goal", "g", "--event", "e", "--match", "prefix"), "--match is how a page goal compares"),
        (("define-goal", "g", "--page", "/a", "--revenue", "amount"), "a page goal has none"),
        (("define-goal", "g", "--event", "e", "--prop", "k"), "needs both prop and value"),
        (("define-funnel", "f", "--window", "30m", "--step", "page:/a"), "a funnel has 2 to 8 steps, got 1"),
        (("define-funnel", "f", "--window", "30x", "--step", "page:/a", "--step", "page:/b"), "a window is a number"),
        (
            ("define-funnel", "f", "--window", "30s", "--step", "page:/a", "--step", "page:/b"),
            "a window is whole seconds",
        ),
        (("define-funnel", "f", "--window", "1h", "--step", "page:/a", "--step", "click:/b"), "a step is page:PATH"),
        (("define-funnel", "f", "--window", "1h", "--step", "page:/a", "--step", "/b"), "a step is page:PATH"),
        (
            ("define-funnel", "f", "--window", "1h", "--step", "page:/a", "--step", "page:/b@5s"),
            "a window is whole seconds",
        ),
        (("events", "--from", "2026-02-30"), "from must be a date"),
        (("goals", "--site", "nowhere"), "unknown site"),
    ],
)
def test_bad_definitions_and_ranges_exit_2_with_the_reason_writing_nothing(raw_conn, args, message):
    code, out, err = run(*args)
    assert code == 2 and message in err, (code, out, err)
    assert definitions.goals(raw_conn) == [] and definitions.funnels(raw_conn) == []


def test_revenue_is_printed_in_plain_digits():
    from counters_tasks.ops.cli.render_events import revenue_text

    assert [revenue_text(r) for r in (None, 1234.5, 2e6, 0.1 + 0.2, 3.0)] == ["", "1234.5", "2000000", "0.3", "3"]


def test_parse_step_reads_every_form():
    assert event_views.parse_step("page:/a") == {"page": "/a", "match": "exact"}
    assert event_views.parse_step("prefix:/blog/@2h") == {"page": "/blog/", "match": "prefix", "window": 7200}
    assert event_views.parse_step("event:signup[plan=pro]@10m") == {
        "event": "signup", "prop": "plan", "value": "pro", "window": 600
    }  # fmt: skip
    assert event_views.parse_step("event:pay[note=a=b]") == {"event": "pay", "prop": "note", "value": "a=b"}
    assert event_views.parse_step("page:/me@home") == {"page": "/me@home", "match": "exact"}  # not a window
    assert event_views.window_text(90) == "90s" and event_views.window_text(86400 * 7) == "7d"


def test_an_empty_site_says_how_to_fill_each_table(monkeypatch, raw_conn):
    monkeypatch.setattr(events, "event_report", lambda conn, **kw: EventReport("", today(), today(), []), raising=False)
    monkeypatch.setattr(
        events, "goal_report", lambda conn, **kw: GoalReport("", today(), today(), 0, 0.0, []), raising=False
    )
    code, out, _ = run("events")
    assert code == 0 and "none counted in the range: an app sends them with track_event" in out
    code, out, _ = run("goals")
    assert code == 0 and "no goal defined for this site" in out


# --- the dashboard's panels, in headless Chromium ---------------------------------------------


@pytest.fixture
def dashboard(reports, raw_conn) -> Iterator[str]:
    """The dashboard app (``web.create_app``) over the test Redis, served by uvicorn in a thread of
    this process, so the stubbed reports are what its endpoints read."""
    with served(create_app(raw_conn, auth=None, health=lambda _c: {"ok": True})) as url:
        yield url


@pytest.mark.processes
def test_the_panels_show_the_reports(dashboard, tmp_path):
    try:
        browser = Browser(ensure_chromium(), tmp_path / "profile")
    except RuntimeError as exc:
        pytest.skip(f"chromium cannot be installed here: {exc}")
    try:
        browser.navigate(f"{dashboard}/?from={DAY}&to={LAST}&funnel=checkout&refresh=600000")
        for section in ("events", "goals", "funnel"):
            browser.wait_until(f"Number(document.getElementById('{section}').dataset.loaded) >= 1", what=section)
        shown = browser.evaluate("""(() => ({
            events: [...document.querySelectorAll('#events-table tr')]
                .map(tr => [...tr.children].slice(1).map(td => td.textContent)),
            eventNotes: document.getElementById('events-notes').textContent,
            goals: [...document.querySelectorAll('#goals-table tr')].map(tr => [...tr.children].map(td => td.textContent)),
            goalsVisitors: document.getElementById('goals-visitors').textContent,
            goalNotes: document.getElementById('goals-notes').textContent,
            funnels: [...document.getElementById('funnel-name').options].map(o => o.value),
            steps: [...document.querySelectorAll('#funnel-chart .funnel-step')].map(s =>
                [Number(s.dataset.visitors), s.querySelector('.bar').style.width, s.querySelector('.share').textContent]),
            stepTitle: document.querySelectorAll('#funnel-chart .bar')[1].title,
            times: [...document.querySelectorAll('#funnel-chart .times')].map(t => t.textContent),
            labels: [...document.querySelectorAll('#funnel-chart .funnel-step')].map(s => s.children[0].textContent),
            funnelNotes: document.getElementById('funnel-notes').textContent,
            funnelEmpty: document.getElementById('funnel-empty').hidden,
        }))()""")
        assert shown["events"] == [
            ["signup", "12", "9", 'plan: pro 7, free, "trial" 4, (none) 1'],
            ["download", "5000", "≈1553 ±0.8%", "file: a.pdf 3000, (other) 2000"],
        ]
        for note in ("without a visitor (no IP): 2", "event keeps: 3", "(other): the event names", "(none): the"):
            assert note in shown["eventNotes"]
        assert shown["goals"] == [
            ["bought", "event purchase", "30", "25", "12.5%", "1234.5 *"],
            ["pricing *", "page /pricing", "90", "60", "30.0%", ""],
        ]
        assert shown["goalsVisitors"] == "rates of 200 unique visitors in the range"
        assert "bought: conversions without a numeric revenue property: 2" in shown["goalNotes"]
        assert "defined after the range began" in shown["goalNotes"]
        assert shown["funnels"] == ["checkout"] and shown["funnelEmpty"] is True
        assert shown["steps"] == [
            [100, "100%", "100 visitors, 100.0% of the first"],
            [40, "40%", "40 visitors, 40.0% of the first, 40.0% of the step before"],
            [10, "10%", "10 visitors, 10.0% of the first, 25.0% of the step before"],
        ]
        assert shown["labels"] == ["1. page /pricing", "2. event signup[plan=pro]", "3. page /done (within 10m)"]
        assert shown["stepTitle"] == "<1m: 10, 1-5m: 30"
        assert shown["times"] == ["time from step 1: <1m: 10, 1-5m: 30", "time from step 2: <1m: 4, 1-5m: 6"]
        for note in (
            "within 30m",
            f"still open (may grow): {LAST}",
            "LATENESS: 3, not judged",
            "state cap: 4, not judged",
        ):
            assert note in shown["funnelNotes"]
        shot = browser.screenshot(tmp_path / "events.png")
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        browser.close()
