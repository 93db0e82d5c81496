"""The demo's report (``counters-tasks demo``, ``ops/demo.py``) over real Redis data; the whole
demo runs as ``make demo`` in tests/repo/test_make_run_and_demo.py (marker long)."""

from __future__ import annotations

import time
import uuid

from counters_tasks import visits
from counters_tasks.core.days import local_day
from counters_tasks.ops.demo import day_summary


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
