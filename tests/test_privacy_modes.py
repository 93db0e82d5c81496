"""The privacy modes (COUNTERS_VISITOR_KEY, docs/privacy.md "Privacy modes") against a real Redis:
with ``daily`` the visitor key rotates each local day, so the same IP on two days is two
visitor-days in every figure over several days (range and all-time UV, a goal's converters),
one visitor in ``standard``; one day's figures are the same in both modes; and every answer that
shows a figure over several days says what it counts (no silent figure)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import date, datetime, timedelta, timezone

import pytest

from counters_tasks import events, sitestats, tasks, uniques, visits
from counters_tasks.core import visitors
from counters_tasks.core.days import today
from counters_tasks.core.settings import get_settings
from counters_tasks.core.visitors import VISITOR_DAYS, VISITORS, session_visitor_id, visitor_id
from counters_tasks.errors import ConfigurationError
from counters_tasks.events import definitions
from counters_tasks.ops import event_views, importer, views
from counters_tasks.ops.web import create_app
from tests.support.browser import Browser, ensure_chromium
from tests.support.cli_run import run_in_process as run
from tests.support.dashboard import TestClient, served
from tests.support.procs import REPO
from tests.support.servers import flush, use_settings

MODES = ("standard", "daily")
A, B = "203.0.113.7", "198.51.100.9"


def at(day: date, hour: int, minute: int = 0) -> float:
    """Epoch seconds of ``day`` at ``hour``:``minute`` UTC (the tests' zone)."""
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=timezone.utc).timestamp()


def two_days() -> tuple[date, date]:
    """The day before yesterday and yesterday: both whole, in the past, within every horizon."""
    last = today() - timedelta(days=1)
    return last - timedelta(days=1), last


def visit(conn, ip: str, path: str, ts: float) -> None:
    visits.apply_visit(conn, ip, path, ts=ts)


@pytest.mark.parametrize("mode", MODES)
def test_the_same_ip_on_two_days_is_two_visitor_days_in_daily_mode_one_visitor_in_standard(raw_conn, monkeypatch, mode):
    use_settings(monkeypatch, COUNTERS_VISITOR_KEY=mode)
    first, last = two_days()
    visit(raw_conn, A, "/a", at(first, 10))
    visit(raw_conn, B, "/a", at(first, 11))
    visit(raw_conn, A, "/a", at(last, 10))
    visit(raw_conn, A, "/a", at(last, 12))  # the same day again: one visitor of that day in both modes
    daily = mode == "daily"
    # one day's figures: the same in both modes
    assert sitestats.site_visit_info(raw_conn, first) == (first, 2, 2)
    assert sitestats.site_visit_info(raw_conn, last) == (last, 2, 1)
    assert sitestats.site_visit_info(raw_conn, last, "/a") == (last, 2, 1)
    assert sitestats.site_visit_info(raw_conn, first).uv_counts == VISITORS
    # all time: one id per visitor (standard) or per visitor and day (daily)
    for path in (None, "/a"):
        whole = sitestats.site_visit_info(raw_conn, None, path)
        assert (whole.pv, whole.uv) == (4, 3 if daily else 2), path
        assert whole.uv_counts == (VISITOR_DAYS if daily else VISITORS)
    # a range of days: the union of the days' ids (standard), their sum (daily: exact, no sketch read)
    for path in (None, "/a"):
        span = sitestats.site_visit_range(raw_conn, first, last, path)
        assert (span.pv, span.uv) == (4, 3 if daily else 2), path
        assert span.uv_counts == (VISITOR_DAYS if daily else VISITORS)
        if daily:
            assert (span.uv_approximate, span.uv_error) == (False, 0.0)
        one = sitestats.site_visit_range(raw_conn, last, last, path)
        assert (one.uv, one.uv_counts) == (1, VISITORS)  # one day: visitors in both modes
    # every answer says what its figures count, and a note only in the daily mode
    stats = views.stats_view(raw_conn, start=first.isoformat(), end=last.isoformat())
    assert (stats["uv"], stats["uv_counts"]) == (3, VISITOR_DAYS) if daily else (2, VISITORS)
    assert (stats["uv_note"] is not None) is daily
    assert all(d["uv_counts"] == VISITORS for d in stats["days"])  # a day's own figure
    day = views.stats_view(raw_conn, day=last.isoformat())
    assert (day["uv"], day["uv_counts"], day["uv_note"]) == (1, VISITORS, None)
    sources = views.sources_view(raw_conn, first.isoformat(), last.isoformat())
    assert sources["uv_counts"] == (VISITOR_DAYS if daily else VISITORS) and (sources["uv_note"] is not None) is daily
    assert [(s["source"], s["uv_counts"]) for s in sources["sources"]] == [("(direct)", sources["uv_counts"])]


def test_a_visitors_id_differs_each_day_in_daily_mode_and_not_in_standard(monkeypatch):
    first, last = two_days()
    session = "0123456789abcdef0123456789abcdef"
    assert visitor_id(A, first) == visitor_id(A, last) == visitor_id(A)  # standard: the day changes nothing
    assert session_visitor_id(session, first) == session_visitor_id(session)
    standard = visitor_id(A)
    use_settings(monkeypatch, COUNTERS_VISITOR_KEY="daily")
    ids = {visitor_id(A, first), visitor_id(A, last), standard}
    assert len(ids) == 3  # no day's id is another day's, nor the standard one
    assert visitor_id(A, first) == visitor_id("::ffff:" + A, first)  # one IP, however spelt
    assert session_visitor_id(session, first) != session_visitor_id(session, last)
    assert visitor_id(A, first) != session_visitor_id(session, first)
    with pytest.raises(ValueError, match="daily"):
        visitor_id(A)  # a daily id without its day: refused, never a guess
    with pytest.raises(ValueError, match="daily"):
        session_visitor_id(session)
    use_settings(monkeypatch, COUNTERS_SECRET="another secret")
    assert visitor_id(A, first) not in ids  # the secret still keys it


def test_the_standard_modes_ids_cost_one_cache_lookup_whatever_the_day(monkeypatch):
    """A visit's cost does not grow: in the standard mode the day is not part of the cached call
    (the same IP on another day is a hit), and the daily mode's ids are cached per (day, IP)."""
    first, last = two_days()
    visitor_id(A, first)
    hits = visitors._visitor_id.cache_info().hits
    visitor_id(A, last)
    assert visitors._visitor_id.cache_info().hits == hits + 1
    use_settings(monkeypatch, COUNTERS_VISITOR_KEY="daily")
    visitor_id(A, last)
    daily_hits = visitors._daily_visitor_id.cache_info().hits
    visitor_id(A, last)
    assert visitors._daily_visitor_id.cache_info().hits == daily_hits + 1


@pytest.mark.parametrize("value", ["hourly", "none", "daily-ish", "0"])
def test_a_bad_visitor_key_setting_is_refused(monkeypatch, value):
    use_settings(monkeypatch, COUNTERS_VISITOR_KEY=value)
    with pytest.raises(ConfigurationError, match="COUNTERS_VISITOR_KEY"):
        get_settings()


@pytest.mark.parametrize(("value", "mode"), [("", "standard"), (" Daily ", "daily"), ("STANDARD", "standard")])
def test_the_visitor_key_setting_is_read_as_the_other_choices_are(monkeypatch, value, mode):
    use_settings(monkeypatch, COUNTERS_VISITOR_KEY=value)  # (unset, any case, spaces: as COUNTERS_UV_MODE)
    assert get_settings().visitor_key == mode


@pytest.mark.parametrize("mode", MODES)
def test_events_goals_and_funnels_say_what_they_count(eager_app, raw_conn, monkeypatch, mode):
    """An event's UV and a goal's converters over two days count visitor-days in the daily mode;
    a funnel does not follow a visitor past midnight there, and its answer says so."""
    use_settings(monkeypatch, COUNTERS_VISITOR_KEY=mode, COUNTERS_FUNNEL_LATENESS=10 * 86400, COUNTERS_VISITOR_DAYS=11)
    daily = mode == "daily"
    first, last = two_days()
    since = at(first, 0) - 60
    definitions.define_goal(raw_conn, "done", page="/done", now=since)
    definitions.define_funnel(raw_conn, "night", [{"page": "/a"}, {"page": "/b"}], 3600, now=since)
    for ts in (at(first, 9), at(last, 9)):
        tasks.track_event.delay("signup", None, ts, A)
        tasks.record_visit.delay(A, "/done", None, ts)
    tasks.record_visit.delay(A, "/a", None, at(first, 23, 50))
    tasks.record_visit.delay(A, "/b", None, at(last, 0, 10))  # 20 minutes later, past midnight
    report = events.event_report(raw_conn, start=first, end=last)
    assert [(row.name, row.total, row.uv) for row in report.events] == [("signup", 2, 2 if daily else 1)]
    answer = event_views.events_view(raw_conn, first.isoformat(), last.isoformat())
    assert answer["uv_counts"] == answer["events"][0]["uv_counts"] == (VISITOR_DAYS if daily else VISITORS)
    goals = event_views.goals_view(raw_conn, first.isoformat(), last.isoformat())
    (goal,) = goals["goals"]
    assert (goal["conversions"], goal["converters"]) == (2, 2 if daily else 1)
    assert goal["converters_counts"] == goals["visitors_counts"] == (VISITOR_DAYS if daily else VISITORS)
    assert goals["visitors"] == (2 if daily else 1)  # the site's UV over the range: A, once a day in daily
    funnel = event_views.funnel_view(raw_conn, "night", first.isoformat(), last.isoformat())
    assert [step["visitors"] for step in funnel["steps"]] == ([1, 0] if daily else [1, 1])
    assert (funnel["visitor_note"] is not None) is daily and (goals["visitor_note"] is not None) is daily


def test_the_cli_says_visitor_days_under_its_tables(raw_conn, monkeypatch):
    use_settings(monkeypatch, COUNTERS_VISITOR_KEY="daily")
    first, last = two_days()
    visit(raw_conn, A, "/a", at(first, 10))
    visit(raw_conn, A, "/a", at(last, 10))
    code, out, err = run("stats", "--from", first.isoformat(), "--to", last.isoformat())
    assert code == 0, err
    assert "UV 2" in out and "visitor-days (COUNTERS_VISITOR_KEY=daily" in " ".join(out.split())
    code, out, err = run("stats", "--from", first.isoformat(), "--to", last.isoformat(), "--format", "csv")
    assert code == 0 and "visitor-days" in err and "visitor-days" not in out  # stdout stays one CSV
    code, out, err = run("stats", "--day", last.isoformat())
    assert code == 0 and "visitor-days" not in out  # one day: visitors, nothing to say
    flush(raw_conn)  # (a reader takes the mode it is set to: every process of a deployment shares it)
    use_settings(monkeypatch, COUNTERS_VISITOR_KEY="standard")
    visit(raw_conn, A, "/a", at(first, 10))
    visit(raw_conn, A, "/a", at(last, 10))
    code, out, err = run("stats", "--from", first.isoformat(), "--to", last.isoformat())
    assert code == 0 and "visitor-days" not in out and "UV ≈1 " in out  # the union of the days, one visitor


def test_the_dashboards_api_carries_the_notes_it_shows(raw_conn, monkeypatch):
    """The dashboard draws ``uv_note`` under its visitors' section (app.js ``privacyNote``) from
    ``/api/stats``: the API says it in the daily mode, over several days only."""
    use_settings(monkeypatch, COUNTERS_VISITOR_KEY="daily")
    first, last = two_days()
    visit(raw_conn, A, "/a", at(first, 10))
    visit(raw_conn, A, "/a", at(last, 10))
    client = TestClient(create_app(raw_conn, health=lambda _c: {"ok": True}))
    answer = client.get(f"/api/stats?from={first}&to={last}").json()
    assert (answer["uv"], answer["uv_counts"]) == (2, VISITOR_DAYS) and "visitor-days" in answer["uv_note"]
    assert client.get(f"/api/stats?from={last}&to={last}").json()["uv_note"] is None
    script = (REPO / "counters_tasks" / "ops" / "static" / "app.js").read_text()
    for section in ("visitors", "sources", "clients", "uniques", "events", "goals", "funnel"):
        assert f'privacyNote("{section}", data);' in script, section


@pytest.mark.parametrize("mode", MODES)
def test_an_imported_logs_session_ids_are_made_for_their_day_in_daily_mode(monkeypatch, mode):
    """``counters-tasks import`` derives a log line's session id (its daily unique) from the IP and
    user agent: with COUNTERS_VISITOR_KEY=daily keyed by the line's local day too, so the daily
    uniques hold no session id that links a visitor's days; the same day's lines are one session
    in both modes."""
    use_settings(monkeypatch, COUNTERS_VISITOR_KEY=mode)
    agent = "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0"

    def session(stamp: str) -> str:
        line = f'{A} - - [{stamp} +0000] "GET /a HTTP/1.1" 200 512 "-" "{agent}"'
        visit = importer.log_line_visit(line, "combined", "a secret")
        assert isinstance(visit, dict), visit
        return visit["session_id"]

    morning, evening, next_day = (
        session(s) for s in ("01/Dec/2026:08:00:00", "01/Dec/2026:23:00:00", "02/Dec/2026:08:00:00")
    )
    assert morning == evening  # one day: one session in both modes
    assert (morning != next_day) is (mode == "daily")
    assert (morning == importer.session_id_for("a secret", A, agent)) is (mode == "standard")


def uniques_members(conn) -> set[int]:
    """Every member of the daily uniques' sets (``ct:uniq:*``), as integers."""
    members: set[int] = set()
    for key in conn.scan_iter(match="*uniq:*", count=1000):
        if conn.type(key) in (b"set", "set"):
            members |= {int(m) for m in conn.smembers(key)}
    return members


@pytest.mark.parametrize("mode", MODES)
def test_a_session_cookie_of_several_days_is_another_number_each_day_in_daily_mode(raw_conn, monkeypatch, mode):
    """The middleware's session cookie lasts a year: in the daily mode the daily uniques hold a
    number keyed by the day (not the cookie's digits), so they link no visitor's days; a day's
    count is the same in both modes."""
    use_settings(monkeypatch, COUNTERS_VISITOR_KEY=mode)
    first, last = two_days()
    session = "0123456789abcdef0123456789abcdef"
    own = int(session[:15], 16)
    for day in (first, last):
        for hour in (9, 17):  # twice a day: once a day in the uniques
            visits.apply_visit(raw_conn, A, "/a", session, at(day, hour))
    uniques.count_visit(raw_conn, session, at(last, 20))  # the task of the contract: the same number
    assert [uniques.unique_visitors(raw_conn, day) for day in (first, last)] == [1, 1]
    held = uniques_members(raw_conn)
    if mode == "standard":
        assert held == {own}
    else:
        assert own not in held and len(held) == 2  # one number a day, neither the cookie's
        assert held == {uniques.session_number(session, day) for day in (first, last)}
    assert uniques.session_number(session) == own  # (no day: what the app's process checks)
    answer = views.uniques_view(raw_conn, start=first.isoformat(), end=last.isoformat())
    assert (answer["visitors"], answer["uv_counts"]) == ((2, VISITOR_DAYS) if mode == "daily" else (1, VISITORS))
    assert (answer["uv_note"] is not None) is (mode == "daily")


@pytest.fixture
def daily_dashboard(raw_conn, monkeypatch) -> Iterator[str]:
    """The dashboard app over the test Redis in the daily mode, served by uvicorn in a thread of
    this process (``tests.support.dashboard.served``), with A's visits on two days."""
    use_settings(monkeypatch, COUNTERS_VISITOR_KEY="daily", COUNTERS_AGGREGATE_DAYS=30)
    first, last = two_days()
    visit(raw_conn, A, "/a", at(first, 10))
    visit(raw_conn, A, "/a", at(last, 10))
    with served(create_app(raw_conn, auth=None, health=lambda _c: {"ok": True})) as url:
        yield url


@pytest.mark.processes
def test_the_dashboard_says_visitor_days_under_its_sections(daily_dashboard, tmp_path):
    """The notes under each section: visitor-days over several days (daily mode), and, over a range
    that starts before COUNTERS_AGGREGATE_DAYS (30 here), that retention removed those days."""
    try:
        browser = Browser(ensure_chromium(), tmp_path / "profile")
    except RuntimeError as exc:
        pytest.skip(f"chromium cannot be installed here: {exc}")
    first, last = two_days()
    sections = ["visitors", "pages", "sources", "uniques", "goals"]

    def notes_over(start: date) -> dict:
        browser.navigate(f"{daily_dashboard}/?from={start}&to={last}&refresh=600000")
        for section in sections:
            browser.wait_until(f"Number(document.getElementById('{section}').dataset.loaded) >= 1", what=section)
        script = (
            "(() => ({uv: document.getElementById('uv-total').textContent, notes: Object.fromEntries("
            + json.dumps(sections)
            + ".map(s => { const el = document.getElementById(s + '-privacy');"
            " return [s, el && !el.hidden ? el.textContent : null]; }))}))()"
        )
        return browser.evaluate(script)

    try:
        shown = notes_over(first)
        removed = notes_over(today() - timedelta(days=40))
    finally:
        browser.close()
    assert shown["uv"] == "2" and shown["notes"]["pages"] is None
    for section in ("visitors", "sources", "uniques"):
        assert "visitor-days (COUNTERS_VISITOR_KEY=daily" in (shown["notes"][section] or ""), (section, shown)
        assert "COUNTERS_AGGREGATE_DAYS" not in (shown["notes"][section] or ""), (section, shown)
    assert "not followed past the local midnight" in (shown["notes"]["goals"] or ""), shown
    kept = today() - timedelta(days=30)
    for section in sections:
        note = f"Days before {kept} are past COUNTERS_AGGREGATE_DAYS=30"
        assert note in (removed["notes"][section] or ""), (section, removed)
