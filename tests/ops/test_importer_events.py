"""``counters-tasks import --event PATH=NAME``: the page views of a path (exact, or a prefix
ending with ``*``) counted as an event too, with the view's time, address and site, through the
event kind's payload; counted in the summary, and never twice: importing the same lines again,
or again after a crash that left a chunk applied but not noted in the ledger."""

from __future__ import annotations

import json
import random
import time
from collections import Counter, defaultdict
from datetime import date, datetime, timezone

import pytest
from click.testing import CliRunner

from counters_tasks import events
from counters_tasks.errors import InvalidInput
from counters_tasks.ops import importer
from counters_tasks.ops.cli import cli
from counters_tasks.store import keys
from tests.support.servers import use_settings

PAGES = ["/", "/pricing", "/signup", "/signup/done", "/checkout/cart", "/checkout/pay", "/checkoutx", "/blog/a"]
RULES = ["/signup/done=signup", "/checkout/*=checkout", "/=home"]


def utc_day(ts: float) -> date:
    return datetime.fromtimestamp(ts, timezone.utc).date()


def expected_event(path: str) -> list[str]:
    """The events a view of ``path`` counts as under RULES, written out by hand."""
    found = []
    if path == "/signup/done":
        found.append("signup")
    if path.startswith("/checkout/"):
        found.append("checkout")
    if path == "/":
        found.append("home")
    return found


def make_lines(count: int, seed: int = 3) -> tuple[list[str], dict[tuple[date, str], Counter], Counter]:
    """``count`` JSON lines over the last hour of yesterday to now (UTC), and what they count:
    per (day, event) the events of each visitor (IP), and the events by name."""
    rng = random.Random(seed)
    now = time.time()
    today = int(now // 86400) * 86400
    first, last = today - 3600, max(int(now) - 10, today + 60)
    lines, per_day, names = [], defaultdict(Counter), Counter()
    for _ in range(count):
        ts = rng.randint(first, last)
        ip, path = f"203.0.113.{rng.randint(1, 80)}", rng.choice(PAGES)
        lines.append(json.dumps({"ip": ip, "path": path, "ts": ts}))
        for name in expected_event(path):
            per_day[(utc_day(ts), name)][ip] += 1
            names[name] += 1
    return lines, per_day, names


def run_import(*args: str, code: int = 0) -> dict | str:
    result = CliRunner().invoke(cli, ["import", *args], catch_exceptions=False)
    assert result.exit_code == code, (result.exit_code, result.output)
    return json.loads(result.stdout) if code == 0 and "--json" in args else result.output


def event_figures(conn, days) -> dict[tuple[date, str], tuple[int, int]]:
    """Each day's events as the read gives them: (day, name) -> (total, unique visitors)."""
    found = {}
    for day in days:
        for row in events.event_report(conn, start=day, end=day).events:
            found[(day, row.name)] = (row.total, row.uv)
    return found


def want_figures(per_day) -> dict[tuple[date, str], tuple[int, int]]:
    return {key: (sum(ips.values()), len(ips)) for key, ips in per_day.items()}


def event_args() -> list[str]:
    return [arg for rule in RULES for arg in ("--event", rule)]


def test_views_of_a_path_count_as_events_once(raw_conn, tmp_path):
    lines, per_day, names = make_lines(1300)  # three chunks: two of CHUNK, one short
    log = tmp_path / "views.jsonl"
    log.write_text("\n".join(lines) + "\n")
    summary = run_import("--json", *event_args(), str(log))
    assert summary["counted"] == 1300
    assert summary["events"] == dict(sorted(names.items())) and summary["events_total"] == sum(names.values())
    assert summary["events_refused"] == {}
    days = sorted({day for day, _name in per_day})
    assert event_figures(raw_conn, days) == want_figures(per_day)

    again = run_import("--json", *event_args(), str(log))
    assert again["counted"] == 0 and again["events"] == {} and again["events_total"] == 0
    assert event_figures(raw_conn, days) == want_figures(per_day)


def test_a_chunk_applied_but_not_noted_sends_its_events_once(raw_conn, tmp_path, bound_deployment):
    """A crash after a chunk's writes and before its ledger note: the next import applies the
    chunk again under the same ids, and neither its views nor its events count twice."""
    lines, per_day, names = make_lines(700, seed=5)
    log = tmp_path / "views.jsonl"
    log.write_text("\n".join(lines) + "\n")
    run_import("--json", *event_args(), str(log))
    raw_conn.delete(keys.import_ledger())  # the notes lost, the writes' dedupe markers kept
    run_import("--json", *event_args(), str(log))
    days = sorted({day for day, _name in per_day})
    assert event_figures(raw_conn, days) == want_figures(per_day)


def test_the_events_count_for_the_imports_site(raw_conn, tmp_path, monkeypatch):
    use_settings(monkeypatch, COUNTERS_SITES=json.dumps({"shop": {"hosts": ["shop.example.pt"]}}))
    now = int(time.time()) - 30
    log = tmp_path / "views.jsonl"
    log.write_text(json.dumps({"ip": "203.0.113.5", "path": "/signup/done", "ts": now}) + "\n")
    summary = run_import("--json", "--site", "shop", "--event", "/signup/done=signup", str(log))
    assert summary["events"] == {"signup": 1}
    day = utc_day(now)
    assert [(row.name, row.total) for row in events.event_report(raw_conn, site="shop", start=day, end=day).events] == [
        ("signup", 1)
    ]
    assert events.event_report(raw_conn, start=day, end=day).events == []


@pytest.mark.parametrize(
    "spec", ["signup", "=signup", "/a=", "pricing=x", "/a*b=x", "/a**=x", "/a=" + "n" * 101, "/a=bad\x01name"]
)
def test_a_bad_rule_is_refused_before_anything_is_read(raw_conn, tmp_path, spec):
    log = tmp_path / "views.jsonl"
    log.write_text(json.dumps({"ip": "203.0.113.5", "path": "/a", "ts": int(time.time()) - 30}) + "\n")
    with pytest.raises(InvalidInput):
        importer.parse_rule(spec)
    output = run_import("--event", spec, str(log), code=2)
    assert "--event" in output or "event name" in output
    assert raw_conn.dbsize() == 0


def test_rules_match_as_a_goals_page_does():
    exact, prefix = importer.parse_rule("/signup/done=signup"), importer.parse_rule("/checkout/*=checkout")
    assert str(exact) == "/signup/done=signup" and str(prefix) == "/checkout/*=checkout"
    view = {"ip": "203.0.113.5", "path": "/checkout/pay", "ts": 1.5, "session_id": None, "site": "shop"}
    assert importer.events_of(view, (exact, prefix)) == [
        {"name": "checkout", "ts": 1.5, "ip": "203.0.113.5", "site": "shop"}
    ]
    assert importer.events_of(view | {"path": "/checkout"}, (exact, prefix)) == []
    assert importer.events_of(view | {"path": "/signup/done"}, (exact, prefix))[0]["name"] == "signup"
    assert importer.parse_rule("/a=b=name").match.page == "/a=b"


def test_the_text_summary_shows_the_events(raw_conn, tmp_path):
    now = int(time.time()) - 30
    lines = [{"ip": "203.0.113.5", "path": "/signup/done", "ts": now}, {"ip": "203.0.113.6", "path": "/", "ts": now}]
    log = tmp_path / "views.jsonl"
    log.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    output = run_import(*event_args(), str(log))
    assert "2 lines read, 2 counted" in output
    assert "events: 2 counted (home 1, signup 1)" in output
