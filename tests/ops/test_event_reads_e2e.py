"""Events, goals and funnels end to end (issue 43): page views and events sent through the real
tasks (``record_visit``, ``track_event``, the eager app), then read where people read them: the
``counters-tasks`` commands through the real entry point (``python -m counters_tasks.ops.cli``),
the JSON API with a read token, and the dashboard served by ``counters-tasks serve`` in headless
Chromium. The expected figures are counted here, in plain Python, from the scenario itself."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import time
import urllib.request
from pathlib import Path

import pytest

from counters_tasks import events, sitestats
from counters_tasks.core.days import local_day
from tests.support.browser import Browser, ensure_chromium
from tests.support.dashboard import TestClient
from tests.support.procs import REPO, celery_env, cli, serving

pytestmark = pytest.mark.processes

IP = "198.51.100.{}".format
FUNNEL_STEPS = [
    {"page": "/pricing"},
    {"event": "signup", "prop": "plan", "value": "pro"},
    {"page": "/done", "window": 120},  # within 2 minutes of the signup
]


def scenario(now: float) -> tuple[list[tuple], list[tuple]]:
    """``(visits, events)``: visits ``(visitor, path, ts)``, events ``(visitor or None, name,
    props, ts)``, all within the last 20 minutes (so no step event is late for a 30-minute window)."""
    t0 = now - 1200
    visits = [
        (1, "/pricing", t0),
        (1, "/pricing", t0 + 30),
        (1, "/done", t0 + 90),  # 30 s after the signup: step 3
        (2, "/pricing", t0),
        (2, "/done", t0 + 600),  # 5 min after the signup: past step 3's own window
        (3, "/pricing", t0),
        (3, "/done", t0 + 120),  # after a free signup: no step 2
        (4, "/pricing", t0 + 60),  # after the signup: the signup came first, not in order
        (5, "/done", t0),
    ]
    events_ = [
        (1, "signup", {"plan": "pro", "amount": 30}, t0 + 60),
        (1, "signup", {"plan": "pro", "amount": 12.5}, t0 + 61),  # a second conversion, the same converter
        (2, "signup", {"plan": "pro", "amount": "n/a"}, t0 + 300),  # revenue not a number
        (3, "signup", {"plan": "free"}, t0 + 60),
        (4, "signup", {"plan": "pro", "amount": 5}, t0),
        (None, "signup", {}, t0 + 10),  # no IP: counted, in no UV
        (5, "download", {"file": "a.pdf"}, t0 + 5),
    ]
    return visits, events_


def write(raw_conn, eager_app, now: float) -> None:
    """The goals and funnel defined (counting from an hour before the scenario), then the
    scenario sent through the tasks."""
    from counters_tasks import tasks

    before = now - 3600
    events.define_goal(raw_conn, "pro", event="signup", prop="plan", value="pro", revenue="amount", now=before)
    events.define_goal(raw_conn, "pricing", page="/pricing", now=before)
    events.define_funnel(raw_conn, "checkout", FUNNEL_STEPS, 1800, now=before)
    visits, events_ = scenario(now)
    for who, path, ts in visits:
        tasks.record_visit.delay(IP(who), path, ts=ts)
    for who, name, props, ts in events_:
        tasks.track_event.delay(name, props, ts=ts, ip=None if who is None else IP(who))


def run_cli(redis_url: str, *args: str):
    return cli(celery_env(redis_url, COLUMNS="160"), *args)


def check_events(data: dict) -> None:
    signup = next(e for e in data["events"] if e["name"] == "signup")
    assert (signup["total"], signup["uv"], signup["uv_exact"], signup["no_visitor"]) == (6, 4, True, 1)
    plans = {v["value"]: (v["total"], v["uv"]) for v in signup["props"]["plan"]}
    assert plans == {"pro": (4, 3), "free": (1, 1), "(none)": (1, 0)}  # (none): the event without an IP
    amounts = {v["value"]: v["total"] for v in signup["props"]["amount"]}
    assert amounts == {"30": 1, "12.5": 1, "n/a": 1, "5": 1, "(none)": 2}
    assert [e["name"] for e in data["events"]] == ["signup", "download"]  # by count


def check_goals(data: dict, visitors: int, pro_since_at_most: float) -> None:
    goals = {g["name"]: g for g in data["goals"]}
    assert data["visitors"] == visitors == 5
    pro, pricing = goals["pro"], goals["pricing"]
    assert (pro["conversions"], pro["converters"], pro["revenue"], pro["no_revenue"]) == (4, 3, 47.5, 1)
    assert (pricing["conversions"], pricing["converters"], pricing["revenue"]) == (5, 4, None)
    assert pro["rate"] == pytest.approx(3 / 5) and pricing["rate"] == pytest.approx(4 / 5)
    assert pro["since"] <= pro_since_at_most  # counting before the scenario began


def check_funnel(data: dict, today: str) -> None:
    assert [s["visitors"] for s in data["steps"]] == [4, 2, 1]
    assert [s["of_first"] for s in data["steps"]] == pytest.approx([1.0, 0.5, 0.25])
    assert [s["of_previous"] for s in data["steps"]][1:] == pytest.approx([0.5, 0.5])
    assert sum(b["visitors"] for b in data["steps"][1]["time_to_convert"]) == 2
    assert sum(b["visitors"] for b in data["steps"][2]["time_to_convert"]) == 1
    assert today in data["open_days"] and data["late"] == 0 and data["window_text"] == "30m"
    assert [s["step_window_text"] for s in data["steps"]] == [None, None, "2m"]


@pytest.fixture
def written(raw_conn, eager_app) -> dict:
    now = time.time()
    write(raw_conn, eager_app, now)
    day = local_day(now - 1200)
    return {"now": now, "today": local_day(now).isoformat(), "from": day.isoformat()}


@pytest.mark.long  # 7 CLI processes, 6 s: make test-long, keeping make test under 8 min
def test_the_cli_reads_what_the_tasks_wrote(raw_conn, redis_url, written):
    span = ("--from", written["from"], "--to", written["today"])
    visitors = sitestats.site_visit_range(raw_conn, local_day(written["now"] - 1200), local_day(written["now"])).uv
    result = run_cli(redis_url, "events", *span, "--json")
    assert result.returncode == 0, result.stderr
    check_events(json.loads(result.stdout))
    check_goals(json.loads(run_cli(redis_url, "goals", *span, "--json").stdout), visitors, written["now"] - 1200)
    check_funnel(json.loads(run_cli(redis_url, "funnel", "checkout", *span, "--json").stdout), written["today"])
    table = run_cli(redis_url, "funnel", "checkout", *span)
    assert table.returncode == 0 and "event signup[plan=pro]" in table.stdout and "50.0%" in table.stdout
    rows = list(csv.DictReader(io.StringIO(run_cli(redis_url, "goals", *span, "--format", "csv").stdout)))
    assert {r["goal"]: (r["conversions"], r["converters"]) for r in rows} == {"pro": ("4", "3"), "pricing": ("5", "4")}
    live = json.loads(
        run_cli(redis_url, "counter", "event:signup", "--precision", "60", "--last", "30", "--json").stdout
    )
    assert live["total"] == 6  # the event's live counter: every signup, the one without an IP too
    text = run_cli(redis_url, "events", *span)
    assert "events without a visitor (no IP): 1," in text.stdout


def test_the_api_with_a_read_token_reads_what_the_tasks_wrote(raw_conn, written):
    from counters_tasks.ops import views
    from counters_tasks.ops.web import create_app

    client = TestClient(create_app(raw_conn, auth=("ops", "s3cret"), health=lambda _c: {"ok": True}))
    bearer = {"Authorization": f"Bearer {views.create_token(raw_conn, 'e2e')['token']}"}
    span = f"from={written['from']}&to={written['today']}"
    visitors = sitestats.site_visit_range(raw_conn, local_day(written["now"] - 1200), local_day(written["now"])).uv
    check_events(client.get(f"/api/events?{span}", headers=bearer).json())
    check_goals(client.get(f"/api/goals?{span}", headers=bearer).json(), visitors, written["now"] - 1200)
    check_funnel(client.get(f"/api/funnel?name=checkout&{span}", headers=bearer).json(), written["today"])
    assert client.get(f"/api/funnel?name=checkout&{span}").status_code == 401


def test_the_dashboard_shows_what_the_tasks_wrote(raw_conn, redis_url, written, tmp_path):
    try:
        chromium = ensure_chromium()
    except RuntimeError as exc:
        pytest.skip(f"chromium cannot be installed here: {exc}")
    span = f"from={written['from']}&to={written['today']}"

    def get_json(url: str) -> dict:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return json.load(answer)

    with serving(celery_env(redis_url), tmp_path / "serve.log", lambda base: get_json(base + "/api/funnels")) as base:
        browser = Browser(chromium, tmp_path / "profile")
        try:
            browser.navigate(f"{base}/?{span}&funnel=checkout&counter=event:signup&precision=60&refresh=600000")
            for section in ("events", "goals", "funnel", "visitors", "pages", "counter"):  # (the screenshot's)
                browser.wait_until(f"Number(document.getElementById('{section}').dataset.loaded) >= 1", what=section)
            shown = browser.evaluate("""(() => ({
                events: [...document.querySelectorAll('#events-table tr')].map(tr => tr.dataset.event),
                goals: [...document.querySelectorAll('#goals-table tr')]
                    .map(tr => [tr.dataset.goal, Number(tr.children[2].textContent), tr.children[4].textContent]),
                steps: [...document.querySelectorAll('#funnel-chart .funnel-step')].map(s => Number(s.dataset.visitors)),
                counter: document.getElementById('counter-total').textContent,
            }))()""")
            goals = get_json(f"{base}/api/goals?{span}")
            assert shown["events"] == [e["name"] for e in get_json(f"{base}/api/events?{span}")["events"]]
            assert shown["goals"] == [[g["name"], g["conversions"], f"{g['rate'] * 100:.1f}%"] for g in goals["goals"]]
            assert shown["steps"] == [4, 2, 1]
            assert shown["counter"] == "6"  # the event's live counter, event:signup
            shot = browser.screenshot(tmp_path / "dashboard-events.png")
            assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
            if os.environ.get("COUNTERS_UPDATE_DOCS") == "1":
                shutil.copy(shot, Path(os.environ.get("COUNTERS_DOCS_DIR") or REPO / "docs") / "dashboard-events.png")
        finally:
            browser.close()


def test_a_sites_events_goals_and_funnels_are_its_own(raw_conn, eager_app, monkeypatch):
    """Events, a goal and a funnel of the site ``blog``: read with ``--site blog`` (and
    ``site=blog``), not on the default site; a token of the blog reads them, and is refused the
    default site's."""
    from counters_tasks import tasks
    from counters_tasks.ops import views
    from counters_tasks.ops.web import create_app
    from tests.support.servers import use_settings

    use_settings(monkeypatch, COUNTERS_SITES='{"blog": {}}')
    now = time.time()
    before = now - 3600
    events.define_goal(raw_conn, "read", event="read", site="blog", now=before)
    events.define_funnel(raw_conn, "reading", [{"page": "/post"}, {"event": "read"}], 600, site="blog", now=before)
    for who in (1, 2, 3):
        tasks.record_visit.delay(IP(who), "/post", ts=now - 300, site="blog")
    for who in (1, 2):
        tasks.track_event.delay("read", {"depth": "full"}, ts=now - 240, ip=IP(who), site="blog")
    code, out, err = cli_main("events", "--site", "blog", "--json")
    assert code == 0, err
    blog = json.loads(out)
    assert blog["site"] == "blog" and [(e["name"], e["total"], e["uv"]) for e in blog["events"]] == [("read", 2, 2)]
    assert json.loads(cli_main("events", "--json")[1])["events"] == []  # the default site has none
    goals = json.loads(cli_main("goals", "--site", "blog", "--json")[1])
    assert [(g["name"], g["converters"]) for g in goals["goals"]] == [("read", 2)] and goals["visitors"] == 3
    assert json.loads(cli_main("goals", "--json")[1])["goals"] == []
    code, _out, err = cli_main("funnel", "reading")
    assert code == 2 and "no funnel named 'reading' (funnels: none)" in err  # the default site's funnels
    client = TestClient(create_app(raw_conn, auth=("ops", "s3cret"), health=lambda _c: {"ok": True}))
    bearer = {"Authorization": f"Bearer {views.create_token(raw_conn, 'blog', site='blog')['token']}"}
    funnel = client.get("/api/funnel?name=reading&site=blog", headers=bearer)
    assert funnel.status_code == 200 and [s["visitors"] for s in funnel.json()["steps"]] == [3, 2]
    assert client.get("/api/events", headers=bearer).status_code == 403  # the default site: not the token's
    assert [f["name"] for f in client.get("/api/funnels?site=blog", headers=bearer).json()["funnels"]] == ["reading"]


def cli_main(*args: str) -> tuple[int, str, str]:
    """``counters-tasks ARGS`` in-process (the settings of the test: its sites), as the console script runs it."""
    from click.testing import CliRunner

    from counters_tasks.ops.cli import main

    with CliRunner().isolation(env={"COLUMNS": "160"}) as (out, err, _):
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue().decode(), err.getvalue().decode()
