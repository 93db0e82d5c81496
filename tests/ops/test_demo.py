"""The demo's report (``counters-tasks demo``, ``ops/demo.py``) over real Redis data; the whole
demo runs as ``make demo`` in tests/repo/test_make_run_and_demo.py (marker long)."""

from __future__ import annotations

import time
import uuid

from counters_tasks import visits
from counters_tasks.core.days import local_day
from counters_tasks.ops import views
from counters_tasks.ops.demo import day_summary
from tests.support.servers import use_settings
from tests.support.uv_marks import shown_uv


def test_the_days_two_unique_visitor_figures_say_what_each_counts_and_why_they_differ(raw_conn):
    """Issue 30: the report printed "449 unique visitors; unique sessions today: 309" with nothing
    saying that the first counts IPs and the second session cookies, nor why they differ."""
    now = time.time()
    sessions = [str(uuid.uuid5(uuid.NAMESPACE_URL, f"demo-session-{n}")) for n in range(3)]
    for i in range(6):  # six IPs, two of them on each of three browsers' sessions
        visits.apply_visit(raw_conn, f"198.51.100.{i + 1}", "/", sessions[i % 3], now)
    lines = day_summary(raw_conn, local_day(now))
    assert lines[0] == (
        "site today (all runs): 6 page views, 6 unique visitors (by IP), 3 unique sessions (by session cookie)"
    )
    why = " ".join(lines[1:])
    assert "one IP shared by several browsers is one visitor and several sessions" in why
    assert "one browser on several networks one session and several visitors" in why


def test_the_demos_visitors_fill_every_who_visits_table(raw_conn, eager_app):
    """Issue 40: after ``make demo`` the who-visits panels read ``(unknown)`` (its visitors sent no
    headers from documentation addresses). Its visitors now send browsers' headers from networks
    of six countries: every table has real values, the countries those of iptocc for the IPs."""
    import random
    from collections import Counter

    from iptocc import country_code

    from counters_tasks.ops.demo import DEMO_NETWORKS, demo_visitors, who_summary
    from counters_tasks.recorder import VisitRecorder

    people = demo_visitors(random.Random(1), 60)
    assert {country_code(ip) for ip, _agent, _language in people} == {c for c, _l in DEMO_NETWORKS.values()}
    recorder = VisitRecorder()
    now = time.time()
    for ip, agent, language in people:
        recorder.record(ip, "/", ts=now, user_agent=agent, language=language)
    recorder.close()
    lines = who_summary(raw_conn, local_day(now))
    assert len(lines) == 5 and "(unknown)" not in " ".join(lines), lines
    assert set(Counter(country_code(ip) for ip, _a, _l in people).values()) == {10}  # ten of each country
    assert lines[3] == "who visits today, country: BR 10, DE 10, FR 10"  # a tie: by name


def test_the_days_visitors_are_marked_an_estimate_in_the_hll_mode(raw_conn, monkeypatch):
    """Issue 42: with ``COUNTERS_UV_MODE=hll`` the day's UV is its HyperLogLog's estimate, and the
    report printed it as plainly as an exact figure; it is ``≈N ±X%`` now, X the read's own bound."""
    use_settings(monkeypatch, COUNTERS_UV_MODE="hll")
    now = time.time()
    for i in range(6):
        visits.apply_visit(raw_conn, f"198.51.100.{i + 1}", "/", None, now)
    figure = views.stats_view(raw_conn, day=local_day(now))
    assert not figure["uv_exact"] and figure["uv_error"] > 0
    line = day_summary(raw_conn, local_day(now))[0]
    assert f"6 page views, {shown_uv(figure)} unique visitors (by IP)" in line and "±" in line, line
