"""A read over days that retention removed says so (issue 44's note: "range reads before the
aggregate horizon answer 0 silently"): a site owner who keeps 2 days of figures and asks for the
last 5 sees the removed days count 0, and every answer over such a range carries
``retention_note`` (``views.retention_view``), which the CLI prints under its table (stderr beside
a CSV) and the dashboard under each section (app.js ``privacyNote``; the browser test is
tests/test_privacy_modes.py's). A funnel's results are visitor-level: its note follows
COUNTERS_VISITOR_DAYS, the other answers' COUNTERS_AGGREGATE_DAYS."""

from __future__ import annotations

from datetime import timedelta

from counters_tasks import tasks, visits
from counters_tasks.core.days import today
from counters_tasks.events import definitions
from counters_tasks.ops import event_views, views
from counters_tasks.worker import retention
from tests.support.cli_run import run_in_process as run
from tests.support.procs import REPO
from tests.support.servers import use_settings
from tests.test_privacy_modes import A, at

RANGE_VIEWS = {
    "stats": lambda conn, first, last: views.stats_view(conn, start=first, end=last),
    "top-pages": lambda conn, first, last: views.top_pages_view(conn, first, last),
    "sources": lambda conn, first, last: views.sources_view(conn, first, last),
    "clients": lambda conn, first, last: views.clients_view(conn, first, last),
    "uniques": lambda conn, first, last: views.uniques_view(conn, start=first, end=last),
    "events": lambda conn, first, last: event_views.events_view(conn, first, last),
    "goals": lambda conn, first, last: event_views.goals_view(conn, first, last),
}
"""Every read of a range of a site's days (the funnel apart: its tier is another)."""


def test_days_removed_by_retention_count_0_and_every_answer_says_so(eager_app, raw_conn, monkeypatch):
    use_settings(monkeypatch, COUNTERS_VISITOR_DAYS=7, COUNTERS_AGGREGATE_DAYS=7, COUNTERS_DAY_GRACE_DAYS=7)
    now = today()
    old, recent = now - timedelta(days=3), now - timedelta(days=1)
    for day in (old, recent):
        visits.apply_visit(raw_conn, A, "/a", "0123456789abcdef0123456789abcdef", at(day, 10))
        tasks.track_event.delay("signup", None, at(day, 10), A)
    first, last = (now - timedelta(days=4)).isoformat(), now.isoformat()
    before = views.stats_view(raw_conn, start=first, end=last)
    assert before["pv"] == 2 and before["retention_note"] is None  # every day kept: no note
    assert all(read(raw_conn, first, last)["retention_note"] is None for read in RANGE_VIEWS.values())

    # the owner keeps 2 days from now on: the hourly pass removes the old day
    use_settings(monkeypatch, COUNTERS_VISITOR_DAYS=2, COUNTERS_AGGREGATE_DAYS=2, COUNTERS_DAY_GRACE_DAYS=1)
    retention.apply_retention(raw_conn)
    after = views.stats_view(raw_conn, start=first, end=last)
    by_day = {entry["day"]: entry["pv"] for entry in after["days"]}
    assert after["pv"] == 1 and by_day[old.isoformat()] == 0 and by_day[recent.isoformat()] == 1
    kept = (now - timedelta(days=2)).isoformat()  # the first day still kept (core.table.first_day_kept)
    expected = f"Days before {kept} are past COUNTERS_AGGREGATE_DAYS=2"
    for name, read in RANGE_VIEWS.items():
        assert expected in (read(raw_conn, first, last)["retention_note"] or ""), name
        assert read(raw_conn, kept, last)["retention_note"] is None, name  # a range of kept days: none

    code, out, err = run("stats", "--from", first, "--to", last)
    assert code == 0 and expected in out, out + err
    code, out, err = run("top-pages", "--from", first, "--to", last, "--format", "csv")
    assert code == 0 and expected in err and expected not in out, (out, err)  # the CSV stays rows only
    code, out, err = run("stats", "--from", kept, "--to", last)
    assert code == 0 and "COUNTERS_AGGREGATE_DAYS" not in out + err


def test_a_funnels_note_follows_the_visitor_days(eager_app, raw_conn, monkeypatch):
    """A funnel's results name their visitors (visitor-level): kept COUNTERS_VISITOR_DAYS; a goal's
    figures are aggregates, kept COUNTERS_AGGREGATE_DAYS."""
    use_settings(monkeypatch, COUNTERS_VISITOR_DAYS=3, COUNTERS_AGGREGATE_DAYS=30, COUNTERS_FUNNEL_LATENESS=3600)
    now = today()
    since = at(now - timedelta(days=1), 0)
    definitions.define_funnel(raw_conn, "signup", [{"page": "/a"}, {"page": "/b"}], 3600, now=since)
    first, last = (now - timedelta(days=10)).isoformat(), now.isoformat()
    funnel = event_views.funnel_view(raw_conn, "signup", first, last)
    kept = (now - timedelta(days=3)).isoformat()
    assert f"Days before {kept} are past COUNTERS_VISITOR_DAYS=3" in (funnel["retention_note"] or ""), funnel
    assert event_views.goals_view(raw_conn, first, last)["retention_note"] is None
    assert event_views.funnel_view(raw_conn, "signup", kept, last)["retention_note"] is None


def test_every_dashboard_section_over_a_range_shows_the_notes():
    """app.js draws the notes (``privacyNote``) under every section that reads a range of days."""
    script = (REPO / "counters_tasks" / "ops" / "static" / "app.js").read_text()
    assert "data.retention_note" in script
    for section in ("visitors", "pages", "sources", "clients", "uniques", "events", "goals", "funnel"):
        assert f'privacyNote("{section}", data);' in script, section
