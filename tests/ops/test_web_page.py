"""The dashboard served by the real app (``counters-tasks serve``) over the real Redis, loaded
in headless Chromium: the numbers on the page equal the API's, the counter chart updates live."""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.error
import urllib.request
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import redis

from counters_tasks import counters, ranking, sitestats, visits
from counters_tasks.core.days import local_day
from counters_tasks.core.settings import reset_settings
from counters_tasks.local.waiting import wait_until
from counters_tasks.store import deployment
from tests.ops.test_uv_marks import seed as uv_marks_seed
from tests.support import demo_data
from tests.support.browser import Browser, ensure_chromium
from tests.support.procs import REPO, celery_env, serving, start_beat, start_serve, start_worker
from tests.support.servers import use_settings
from tests.support.uv_marks import bound, shown_uv

pytestmark = pytest.mark.processes

DOCS = REPO / "docs"


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


@pytest.fixture(scope="module")
def chromium() -> str:
    try:
        return ensure_chromium()
    except RuntimeError as exc:
        pytest.skip(f"chromium cannot be installed here: {exc}")


@pytest.fixture
def broker_url(redis_url):
    url = redis_url.rsplit("/", 1)[0] + "/5"
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url
    client.flushdb()
    client.close()


@pytest.fixture
def stack(redis_url, broker_url, tmp_path):
    """A real worker and beat (the cleaner every half second), so the health panel has something to show."""
    env = celery_env(redis_url, CELERY_BROKER_URL=broker_url, COUNTERS_CLEAN_EVERY="0.5")
    worker = start_worker(env, tmp_path / "worker.log", concurrency=1)
    beat = start_beat(env, tmp_path, tmp_path / "beat.log")
    yield
    beat.stop()
    worker.stop()


PAGE = "/pricing"
"""The page of COUNTERS_CLIENT_PAGES of the dashboard's server: the who-visits card offers it."""


@pytest.fixture
def server(redis_url, broker_url, tmp_path):
    """``python -m counters_tasks.ops.cli serve`` on a free port, as a user starts it."""
    with serving(
        celery_env(redis_url, CELERY_BROKER_URL=broker_url, COUNTERS_CLIENT_TABLES="on", COUNTERS_CLIENT_PAGES=PAGE),
        tmp_path / "serve.log",
        lambda base: "counters" in get_json(base + "/api/counters"),
    ) as base:
        yield base


@pytest.fixture
def browser(chromium, tmp_path):
    b = Browser(chromium, tmp_path / "profile")
    yield b
    b.close()


def dom_numbers(browser: Browser) -> dict:
    return browser.evaluate("""(() => ({
        counterTotal: document.getElementById('counter-total').textContent,
        counterBars: [...document.querySelectorAll('#counter-chart rect[data-series]')]
            .map(r => Number(r.dataset.value)),
        board: [...document.querySelectorAll('#board-table tr')]
            .map(tr => [tr.children[1].textContent, Number(tr.children[2].textContent)]),
        pv: document.getElementById('pv-total').textContent,
        uv: document.getElementById('uv-total').textContent,
        uvNote: document.getElementById('uv-note').textContent,
        pvBars: [...document.querySelectorAll('#visitors-chart rect[data-series="PV"]')].map(r => Number(r.dataset.value)),
        uvDots: [...document.querySelectorAll('#visitors-chart circle[data-series="UV"]')].map(c => Number(c.dataset.value)),
        pages: [...document.querySelectorAll('#pages-table tr')]
            .map(tr => [tr.children[1].textContent, Number(tr.children[2].textContent)]),
        clients: [...document.querySelectorAll('#clients-table tr')]
            .map(tr => [tr.children[1].textContent, Number(tr.children[2].textContent), tr.children[3].textContent]),
        uniques: document.getElementById('uniques-total').textContent,
        uniqueBars: [...document.querySelectorAll('#uniques-chart rect[data-series]')].map(r => Number(r.dataset.value)),
    }))()""")


def test_dashboard_in_chromium_shows_the_apis_numbers_and_updates_live(
    raw_conn, stack, server, browser, tmp_path, monkeypatch
):
    # the "who visits" card's tables (off by default), and a page's own (COUNTERS_CLIENT_PAGES)
    use_settings(monkeypatch, COUNTERS_CLIENT_TABLES="on", COUNTERS_CLIENT_PAGES=PAGE)
    now = demo_data.seed(raw_conn)
    today = local_day(now)
    first = today - timedelta(days=2)
    span = f"from={first.isoformat()}&to={today.isoformat()}"
    browser.navigate(f"{server}/?counter=hits&precision=60&board=posts&refresh=300&{span}")
    for section in ("visitors", "pages", "clients", "uniques", "counter", "rankings", "health-panel"):
        browser.wait_until(
            f"Number(document.getElementById('{section}').dataset.loaded) >= 1", what=f"{section} to load"
        )

    def page_matches_api() -> dict | None:
        api = get_json(f"{server}/api/counter?name=hits&precision=60")
        shown = dom_numbers(browser)
        same = shown["counterTotal"] == str(api["total"]) and shown["counterBars"] == [t for _, t in api["points"]]
        return (api, shown) if same else None

    api, shown = wait_until(page_matches_api, timeout=20, what="the counter chart to show the API's numbers")
    assert api["total"] > 0 and len(shown["counterBars"]) == counters.SAMPLE_COUNT
    board = get_json(f"{server}/api/top?board=posts&limit=10")
    assert shown["board"] == board["top"]
    # with no dates in the URL the page shows the last seven days up to the server's today
    defaults = browser.evaluate("[document.getElementById('from').value, document.getElementById('to').value]")
    assert defaults == [first.isoformat(), today.isoformat()]  # the URL's; now the page's own defaults:
    browser.navigate(f"{server}/?counter=hits&board=posts")
    week = [(today - timedelta(days=6)).isoformat(), today.isoformat()]
    browser.wait_until(
        f"document.getElementById('from').value === '{week[0]}' && document.getElementById('to').value === '{week[1]}'",
        what="the default range: the last 7 days",
    )
    browser.navigate(f"{server}/?counter=hits&precision=60&board=posts&refresh=300&{span}")
    browser.wait_until(
        f"document.getElementById('from').value === '{first.isoformat()}' && "
        "Number(document.getElementById('counter').dataset.loaded) >= 1",
        what="the page again",
    )
    assert len(board["top"]) == len(demo_data.POSTS)
    stats = get_json(f"{server}/api/stats?{span}")
    assert (shown["pv"], shown["uv"]) == (str(stats["pv"]), str(stats["uv"])) and stats["pv"] > 0
    # visitors on two of the days: their union is a HyperLogLog estimate, and the page says so
    assert stats["uv_approximate"] and "≈" in shown["uvNote"]
    assert shown["pvBars"] == [d["pv"] for d in stats["days"]] and len(shown["pvBars"]) == 3
    assert shown["uvDots"] == [d["uv"] for d in stats["days"]]
    pages = get_json(f"{server}/api/top-pages?{span}&limit=10")
    assert shown["pages"] == pages["pages"] and len(pages["pages"]) == len(demo_data.PATHS)
    who = get_json(f"{server}/api/clients?{span}&kind=browser&limit=10")  # the demo's views send no User-Agent
    assert who["clients"] and sum(c["pv"] for c in who["clients"]) == stats["pv"]
    assert shown["clients"] == [[c["value"], c["pv"], shown_uv(c)] for c in who["clients"]]
    # the card's page choice (COUNTERS_CLIENT_PAGES): who viewed /pricing, read from its own tables
    assert browser.evaluate("[...document.getElementById('client-page').options].map(o => o.value)") == ["", PAGE]
    assert browser.evaluate("document.getElementById('client-page').hidden") is False
    of_page = get_json(f"{server}/api/clients?{span}&kind=browser&limit=10&path={PAGE}")
    page_views = get_json(f"{server}/api/stats?{span}&path={PAGE}")["pv"]
    assert 0 < sum(c["pv"] for c in of_page["clients"]) == page_views < stats["pv"]
    browser.evaluate(
        f"(() => {{ const s = document.getElementById('client-page'); s.value = '{PAGE}';"
        " s.dispatchEvent(new Event('change')); })()"
    )
    wait_until(
        lambda: dom_numbers(browser)["clients"] == [[c["value"], c["pv"], shown_uv(c)] for c in of_page["clients"]],
        timeout=20,
        what="the card to show the page's readers",
    )
    daily = get_json(f"{server}/api/uniques?{span}")
    assert shown["uniques"] == str(daily["visitors"]) and daily["visitors"] > 0
    assert shown["uniqueBars"] == [d["visitors"] for d in daily["days"]]
    # one page over the three days: its unique visitors too (the union of its days; it was "n/a")
    page = get_json(f"{server}/api/stats?{span}&path=/pricing")
    assert page["uv"] > 0 and page["uv"] <= sum(d["uv"] for d in page["days"])
    browser.navigate(f"{server}/?counter=hits&board=posts&refresh=300&{span}&path=/pricing")
    browser.wait_until(
        f"document.getElementById('uv-total').textContent === '{page['uv']}' && "
        f"document.getElementById('pv-total').textContent === '{page['pv']}'",
        what="the page's PV and UV over the range",
    )
    # the health panel turns green once the worker answers pings and beat's cleaner has run
    browser.wait_until(
        "['redis', 'workers', 'beat', 'queues'].every(c => "
        "document.querySelector(`#health [data-check=${c}]`)) && "
        "[...document.querySelectorAll('#health [data-check]')].every(b => b.dataset.ok === '1')",
        timeout=40,
        what="every health check to pass in the page",
    )
    health = get_json(f"{server}/api/health")
    assert health["ok"] and health["workers"]["names"] and health["jobs"]["clean_counters"]["last_duration"] is not None
    dead_row = browser.evaluate("document.querySelector('#health-table tr[data-row=\"dead letters\"]').textContent")
    assert f"{health['dead_letters']['count']} set aside" in dead_row
    refused_row = browser.evaluate("document.querySelector('#health-table tr[data-row=\"refused\"]').textContent")
    assert all(f"{reason} {count}" in refused_row for reason, count in health["refused"].items())
    jobs = browser.evaluate("[...document.querySelectorAll('#jobs-table tr')].map(tr => tr.children[0].textContent)")
    assert jobs == list(health["jobs"])

    # the screenshot (docs/dashboard.png): the whole site over the range, every card drawn
    browser.navigate(f"{server}/?counter=hits&precision=60&board=posts&refresh=300&{span}&shot=1")
    browser.wait_until(
        "location.search.endsWith('shot=1') && "
        "['visitors', 'pages', 'sources', 'clients', 'uniques', 'events', 'goals', 'funnel', 'counter', 'rankings', "
        "'health-panel', 'now']"
        ".every(s => Number(document.getElementById(s).dataset.loaded) >= 1) && "
        "[...document.querySelectorAll('#health [data-check]')].every(b => b.dataset.ok === '1')",
        timeout=40,
        what="every card of the page",
    )
    shot = browser.screenshot(tmp_path / "dashboard.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    if os.environ.get("COUNTERS_UPDATE_DOCS") == "1":
        shutil.copy(shot, Path(os.environ.get("COUNTERS_DOCS_DIR") or DOCS) / "dashboard.png")

    # live: a new count appears without reloading the page
    counters.update_counter(raw_conn, "hits", 1000)

    def page_shows_the_new_count() -> dict | None:
        found = page_matches_api()
        return found if found and max(found[1]["counterBars"][-2:]) >= 1000 else None

    # (the total itself may lose the oldest bucket meanwhile, as the 120-bucket window moves on)
    _api, after = wait_until(page_shows_the_new_count, timeout=20, what="the live update")
    assert int(after["counterTotal"]) == _api["total"] and max(after["counterBars"][-2:]) >= 1000


def test_dashboard_page_needs_no_internet(server):
    page = urllib.request.urlopen(server + "/", timeout=10).read().decode()
    assert "http://" not in page and "https://" not in page  # every script and style is served locally
    for asset in ("static/chart.js", "static/app.js", "static/style.css"):
        assert urllib.request.urlopen(f"{server}/{asset}", timeout=10).status == 200
    assert Path(REPO / "counters_tasks" / "ops" / "static" / "chart.js").exists()


def test_a_bad_refresh_parameter_polls_at_the_default_pace(raw_conn, server, browser):
    """``?refresh=abc`` once made the page poll in a tight loop (685 requests in 10 s)."""
    demo_data.seed(raw_conn)
    browser.navigate(f"{server}/?counter=hits&precision=60&refresh=abc")
    browser.wait_until("Number(document.getElementById('counter').dataset.loaded) >= 1", what="the counter")
    start = browser.evaluate("performance.now()")
    browser.wait_until(f"performance.now() > {start + 3000}", timeout=10, what="3 seconds of the page")
    loads = browser.evaluate("Number(document.getElementById('counter').dataset.loaded)")
    assert loads <= 2, loads  # the default 5 s refresh: one load, maybe two; a tight loop makes hundreds


def test_forty_health_requests_at_once_never_hang_the_server(raw_conn, stack, server):
    """40 concurrent /api/health requests once deadlocked kombu's producer pool under the
    workers' ping: every endpoint then timed out for good."""
    from concurrent.futures import ThreadPoolExecutor

    def health_status(_n: int) -> int:
        with urllib.request.urlopen(server + "/api/health", timeout=30) as response:
            return response.status

    started = time.monotonic()
    with ThreadPoolExecutor(40) as pool:
        statuses = list(pool.map(health_status, range(40)))
    assert statuses == [200] * 40
    assert time.monotonic() - started < 30
    assert "counters" in get_json(server + "/api/counters")  # and the server still answers
    assert get_json(server + "/api/health")["redis"]["ok"]


def test_sigterm_stops_a_server_whose_handlers_are_stuck(tmp_path):
    """A Redis that accepts connections and never answers (here with a 120 s client timeout, as a
    user may set): handler threads block in their calls, and SIGTERM must still stop the server
    within its shutdown grace (uvicorn alone waits for the stuck requests for good)."""
    import signal
    import socket
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from counters_tasks.ops.web import SHUTDOWN_GRACE

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    held: list[socket.socket] = []

    def hold_connections() -> None:
        try:
            for _ in range(64):
                held.append(silent.accept()[0])
        except OSError:  # the listening socket is closed when the test ends
            pass

    threading.Thread(target=hold_connections, daemon=True).start()
    process, base = start_serve(
        celery_env(f"redis://127.0.0.1:{silent.getsockname()[1]}/0", COUNTERS_REDIS_TIMEOUT="120"),
        tmp_path / "serve.log",
    )

    def status(path: str) -> int:
        try:
            with urllib.request.urlopen(base + path, timeout=150) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return 0

    pool = ThreadPoolExecutor(6)
    try:
        wait_until(lambda: status("/static/app.js") == 200, timeout=30, what="the server to answer")
        stuck = [pool.submit(status, "/api/counters") for _ in range(6)]
        wait_until(lambda: len(held) >= 1, timeout=30, what="a handler to block on the silent Redis")
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        # an orderly stop: 0, or dying of the SIGTERM uvicorn re-raises once it has shut down
        assert process.wait(SHUTDOWN_GRACE + 10) in (0, -signal.SIGTERM)
        assert time.monotonic() - signalled < SHUTDOWN_GRACE + 5
        assert "Application shutdown complete" in (tmp_path / "serve.log").read_text()
        assert all(f.result(timeout=10) != 200 for f in stuck)  # nothing pretended to answer
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        pool.shutdown(wait=False, cancel_futures=True)
        for conn in held:
            conn.close()
        silent.close()


def test_the_dashboard_switches_between_sites(raw_conn, redis_url, broker_url, browser, tmp_path, monkeypatch):
    from tests.core.test_sites import EVENING, SITES

    sites = json.dumps(SITES)
    monkeypatch.setenv("COUNTERS_SITES", sites)
    reset_settings()
    for site, ip in (("blog", "198.51.100.7"), ("blog", "198.51.100.8"), ("shop", "198.51.100.7")):
        visits.apply_visit(raw_conn, ip, "/a", None, EVENING, site=site)
    visits.apply_visit(raw_conn, "198.51.100.9", "/b", site="blog")  # now: the blog's one visitor right now
    env = celery_env(redis_url, CELERY_BROKER_URL=broker_url, COUNTERS_SITES=sites)
    with serving(env, tmp_path / "serve.log", lambda base: "sites" in get_json(base + "/api/config")) as base:
        browser.navigate(base + "/")
        browser.wait_until("Number(document.getElementById('visitors').dataset.loaded) >= 1", what="the default site")
        assert (
            browser.evaluate("[...document.getElementById('site').options].map(o => o.value).join()")
            == "default,blog,shop"
        )
        assert browser.evaluate("document.getElementById('pv-total').textContent") == "0"
        browser.wait_until("document.getElementById('now-total').textContent === '0'", what="nobody right now")
        browser.evaluate(
            "(() => { const s = document.getElementById('site'); s.value = 'blog';"
            " s.dispatchEvent(new Event('change')); return true; })()"
        )
        browser.wait_until(
            "location.search === '?site=blog' && "
            "Number(document.getElementById('visitors').dataset.loaded) >= 1 && "
            "document.getElementById('pv-total').textContent === '3'",
            what="the blog's figures",
        )
        assert browser.evaluate("document.getElementById('uv-total').textContent") == "3"
        browser.wait_until("document.getElementById('now-total').textContent === '1'", what="the blog's visitor now")
        assert browser.evaluate("document.getElementById('timezone').textContent") == "days in Asia/Tokyo"
        assert (
            browser.evaluate("document.getElementById('to').value") == local_day(time.time(), "Asia/Tokyo").isoformat()
        )
        assert browser.evaluate("document.getElementById('site').value") == "blog"


def section_text(browser: Browser, section: str) -> str:
    """What a section shows (its rendered text: hidden parts left out)."""
    return str(browser.evaluate(f"document.getElementById('{section}').innerText"))


def test_the_two_unique_visitor_figures_say_what_they_count_and_only_an_estimate_is_marked(raw_conn, server, browser):
    """Issue 30: after a first ``make demo`` the page showed two unique-visitor figures (by IP, by
    session) with nothing saying why they differ, and marked the week's UV "≈ estimate" though
    every visitor came on one day, whose figure is exact."""
    now = time.time()
    today = local_day(now)
    sessions = [str(uuid.uuid5(uuid.NAMESPACE_URL, f"session-{n}")) for n in range(40)]
    for i in range(120):  # 120 IPs sharing 40 sessions, all today
        visits.apply_visit(raw_conn, f"198.51.100.{i + 1}", "/", sessions[i % 40], now)
    loaded = (
        "location.search.endsWith('{mark}') && "
        "['visitors', 'uniques'].every(s => Number(document.getElementById(s).dataset.loaded) >= 1)"
    )
    browser.navigate(f"{server}/?refresh=300&n=1")  # the default range: the last seven days
    browser.wait_until(loaded.format(mark="n=1"), what="the week's figures")
    shown = browser.evaluate(
        "[document.getElementById('uv-total').textContent, "
        "document.getElementById('uv-note').textContent, "
        "document.getElementById('uniques-total').textContent]"
    )
    assert shown == ["120", "", "40"]  # one day's exact figure: no "≈"
    visitors, uniques = section_text(browser, "visitors"), section_text(browser, "uniques")
    assert "visitors (by IP)" in visitors and "sessions (by cookie)" in uniques
    # each says why the other figure differs, on the page and in the figures' tooltips
    assert "one IP" in visitors and "session" in visitors and "IP" in uniques
    uv_tip, uniques_tip = browser.evaluate(
        "['uv-total', 'uniques-total'].map(id => document.getElementById(id).parentNode.title)"
    )
    assert "by IP" in uv_tip and "session ids" in uniques_tip and "cookie" in uniques_tip
    # a true estimate is still marked: visitors on two days of the week
    for i in range(30):
        visits.apply_visit(raw_conn, f"203.0.113.{i + 1}", "/", None, now - 86400)
    browser.navigate(f"{server}/?refresh=300&n=2")
    browser.wait_until(loaded.format(mark="n=2"), what="the week's figures again")
    stats = get_json(f"{server}/api/stats?from={(today - timedelta(days=6)).isoformat()}&to={today.isoformat()}")
    assert stats["uv_approximate"]
    assert browser.evaluate("document.getElementById('uv-total').textContent") == str(stats["uv"])
    assert "≈" in browser.evaluate("document.getElementById('uv-note').textContent")
    # and one day alone (today: 120 visitors, exact) is not
    browser.navigate(f"{server}/?refresh=300&from={today.isoformat()}&to={today.isoformat()}&n=3")
    browser.wait_until(loaded.format(mark="n=3"), what="today's figures")
    assert browser.evaluate(
        "[document.getElementById('uv-total').textContent, document.getElementById('uv-note').textContent]"
    ) == ["120", ""]


def test_rankings_without_a_board_say_what_fills_one_until_the_first_arrives(raw_conn, server, browser):
    """Issue 30: with no board the Rankings card was an empty box that looked broken; now it says
    what a ranking is and the one line that fills one, and the first board replaces that by
    itself (no reload)."""
    browser.navigate(f"{server}/?refresh=300")
    browser.wait_until("Number(document.getElementById('rankings').dataset.loaded) >= 1", what="the rankings card")
    text = section_text(browser, "rankings")
    assert "No rankings yet" in text and 'tasks.incr_ranking.delay("posts", "post-1", 1, time.time())' in text
    assert browser.evaluate("document.getElementById('board-table').offsetParent") is None  # no empty table
    ranking.Ranking(raw_conn, "posts").incr("post-1", 3)
    browser.wait_until("document.querySelector('#board-table tr') !== null", what="the first board to show")
    text = section_text(browser, "rankings")
    assert "No rankings yet" not in text and "post-1" in text
    assert browser.evaluate(
        "[...document.querySelectorAll('#board-table tr')].map(tr => tr.innerText.split('\\t'))"
    ) == [["1", "post-1", "3"]]
    ranking.delete_board(raw_conn, "posts")  # the last board gone: the card says so again
    browser.wait_until(
        "document.getElementById('rankings').innerText.includes('No rankings yet')",
        what="the empty state after the last board went",
    )
    assert browser.evaluate("document.getElementById('board-table').offsetParent") is None


def test_skipped_requests_and_an_invisible_deployment_are_said_on_the_page(raw_conn, server, browser):
    """Issue 30: scripted requests were skipped with nothing on the page saying so, and a
    process that could not see the data showed zeros with every health badge green. Now the
    skipped requests stand beside PV (by reason), and the health panel's ``data`` badge fails
    when the server's process cannot see the deployment's data."""
    from counters_tasks import skips

    now = time.time()
    today = local_day(now)
    for n in range(3):
        visits.apply_visit(raw_conn, f"198.51.100.{n + 1}", "/", None, now)
    skips.count_skipped(
        raw_conn,
        [
            {"route": "middleware", "reason": "crawler", "count": 40, "ts": now},
            {"route": "middleware", "reason": "static", "count": 5, "ts": now},
        ],
    )
    browser.navigate(f"{server}/?refresh=300&from={today.isoformat()}&to={today.isoformat()}")
    browser.wait_until("Number(document.getElementById('visitors').dataset.loaded) >= 1", what="the day's figures")
    shown = browser.evaluate(
        "[document.getElementById('pv-total').textContent, "
        "document.getElementById('skipped-total').textContent, "
        "document.getElementById('skipped-reasons').textContent, "
        "document.getElementById('skipped').hidden, "
        "document.getElementById('skipped').classList.contains('warn')]"
    )
    assert shown == ["3", "45", " crawler 40, static 5", False, True]
    # a path's figures have no skips of their own: the figure is not shown
    browser.navigate(f"{server}/?refresh=300&from={today.isoformat()}&to={today.isoformat()}&path=/")
    browser.wait_until(
        "location.search.endsWith('path=/') && Number(document.getElementById('visitors').dataset.loaded) >= 1",
        what="the page's figures",
    )
    assert browser.evaluate("document.getElementById('skipped').hidden") is True

    browser.wait_until("document.querySelector('#health [data-check=data]') !== null", what="the health badges")
    assert browser.evaluate("document.querySelector('#health [data-check=data]').dataset.ok") == "1"
    raw_conn.delete(
        deployment.tag_key_name()
    )  # the data now under a key Redis does not hold (a pinned writer of before)
    browser.navigate(f"{server}/?refresh=300")
    browser.wait_until(
        "document.querySelector('#health [data-check=data]')?.dataset.ok === '0'",
        timeout=20,
        what="the data badge to fail",
    )
    assert "COUNTERS_TAG_KEY" in section_text(browser, "health-panel")


def test_the_who_visits_card_says_the_views_its_table_does_not_hold(raw_conn, server, browser, monkeypatch):
    """Issue 40: the tables turned on mid-day, the day's browser table held 3 of its 8 page views
    with no note. The card says the 5 others (and the values past its 10 rows)."""
    now = time.time()
    agent = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36"
    use_settings(monkeypatch, COUNTERS_CLIENT_TABLES="off")
    for n in range(5):
        sitestats.record_visit(raw_conn, f"198.51.100.{n}", "/", now, user_agent=agent)
    use_settings(monkeypatch, COUNTERS_CLIENT_TABLES="on")
    for n, language in enumerate(["de", "en", "es"]):
        sitestats.record_visit(raw_conn, f"198.51.100.{n + 10}", "/", now, user_agent=agent, language=language)
    day = local_day(now).isoformat()
    browser.navigate(f"{server}/?refresh=300&from={day}&to={day}")
    browser.wait_until("Number(document.getElementById('clients').dataset.loaded) >= 1", what="the who-visits card")
    shown = browser.evaluate("document.getElementById('clients-coverage').textContent")
    assert shown == "5 page views not in this table (tables off then): 3 of the period's 8 are"


def uv_cell(figure: dict) -> list[str]:
    """What the dashboard shows of a JSON figure's UV, as ``shown_uv_cells`` reads it: the cell's text
    (an estimate ``≈N ±X%``, the bound from its ``uv_error``; an exact figure plain) and its hover text."""
    return [
        shown_uv(figure),
        "exact" if figure["uv_exact"] else f"estimate: {bound(figure['uv_error'])} standard error",
    ]


def shown_uv_cells(browser: Browser, table: str) -> dict:
    """A table's rows on the page: the value -> its UV cell's text and hover text."""
    return dict(
        browser.evaluate(
            f"[...document.querySelectorAll('#{table} tr')].map(tr => "
            "[tr.children[1].textContent, [tr.children[3].textContent, tr.children[3].title]])"
        )
    )


def test_each_uv_on_the_page_is_marked_an_estimate_with_its_bound_or_left_plain(raw_conn, server, browser, monkeypatch):
    """Issue 42: the page marked an estimate ``≈`` with no bound. Over two days: the site's UV, a
    source's and a browser's of more than 42 visitors a day are estimates, shown ``≈N ±X%`` with
    "estimate: ±X% standard error" on hover (X from the API's ``uv_error``); a source and a
    browser of three visitors are exact and plain; one day's site UV is exact and plain."""
    use_settings(monkeypatch, COUNTERS_CLIENT_TABLES="on")
    first, last = uv_marks_seed(raw_conn, time.time())
    span = f"from={first.isoformat()}&to={last.isoformat()}"
    loaded = "['visitors', 'sources', 'clients'].every(s => Number(document.getElementById(s).dataset.loaded) >= 1)"
    browser.navigate(f"{server}/?refresh=300&{span}")
    browser.wait_until(loaded, what="the two days' figures")
    stats = get_json(f"{server}/api/stats?{span}")
    assert not stats["uv_exact"] and stats["uv_error"] > 0
    total, note, tip = browser.evaluate(
        "['uv-total', 'uv-note'].map(id => document.getElementById(id).textContent)"
        ".concat([document.getElementById('uv-total').title])"
    )
    assert total == str(stats["uv"]) and f"≈ {bound(stats['uv_error'])}" in note
    assert tip == f"estimate: {bound(stats['uv_error'])} standard error"
    # each day's point says its own figure's mark on hover (the default mode: each day exact, plain)
    points = browser.evaluate(
        "[...document.querySelectorAll('#visitors-chart circle[data-series=\"UV\"] title')].map(t => t.textContent)"
    )
    assert points == [f"{d['day'][5:]}: UV {shown_uv(d)}" for d in stats["days"]] and all(
        d["uv_exact"] for d in stats["days"]
    )
    sources = get_json(f"{server}/api/sources?{span}")["sources"]
    clients = get_json(f"{server}/api/clients?{span}&kind=browser")["clients"]
    assert {s["source"]: s["uv_exact"] for s in sources} == {"big.example": False, "small.example": True}
    assert {c["value"]: c["uv_exact"] for c in clients} == {"Chrome": False, "Firefox": True}
    assert shown_uv_cells(browser, "sources-table") == {s["source"]: uv_cell(s) for s in sources}
    assert shown_uv_cells(browser, "clients-table") == {c["value"]: uv_cell(c) for c in clients}
    browser.navigate(f"{server}/?refresh=300&from={last.isoformat()}&to={last.isoformat()}")
    browser.wait_until(loaded + " && location.search.includes('from=' + document.getElementById('to').value)")
    day = get_json(f"{server}/api/stats?from={last.isoformat()}&to={last.isoformat()}")
    assert day["uv_exact"] and day["uv_error"] == 0.0
    assert browser.evaluate(
        "['uv-total', 'uv-note'].map(id => document.getElementById(id).textContent)"
        ".concat([document.getElementById('uv-total').title])"
    ) == [str(day["uv"]), "", "exact"]


def test_each_days_point_is_marked_an_estimate_in_the_hll_mode(
    raw_conn, redis_url, broker_url, browser, tmp_path, monkeypatch
):
    """``COUNTERS_UV_MODE=hll``: each day's UV is its HyperLogLog's estimate; the chart's UV points
    say ``≈N ±X%`` on hover (X the day's ``uv_error`` in the API), as one day's figure does."""
    use_settings(monkeypatch, COUNTERS_UV_MODE="hll")
    first, last = uv_marks_seed(raw_conn, time.time())
    env = celery_env(redis_url, CELERY_BROKER_URL=broker_url, COUNTERS_UV_MODE="hll")
    with serving(env, tmp_path / "serve.log", lambda base: "counters" in get_json(base + "/api/counters")) as base:
        span = f"from={first.isoformat()}&to={last.isoformat()}"
        browser.navigate(f"{base}/?refresh=300&{span}")
        browser.wait_until("Number(document.getElementById('visitors').dataset.loaded) >= 1", what="the two days")
        stats = get_json(f"{base}/api/stats?{span}")
        assert [d["uv_exact"] for d in stats["days"]] == [False, False] and stats["days"][0]["uv_error"] > 0
        points = browser.evaluate(
            "[...document.querySelectorAll('#visitors-chart circle[data-series=\"UV\"] title')].map(t => t.textContent)"
        )
        assert points == [f"{d['day'][5:]}: UV {shown_uv(d)}" for d in stats["days"]]
        assert all("≈" in point and "±" in point for point in points)
        browser.navigate(f"{base}/?refresh=300&from={last.isoformat()}&to={last.isoformat()}")
        browser.wait_until(
            "Number(document.getElementById('visitors').dataset.loaded) >= 1 && "
            f"document.getElementById('from').value === '{last.isoformat()}'",
            what="one day",
        )
        day = get_json(f"{base}/api/stats?from={last.isoformat()}&to={last.isoformat()}")
        assert not day["uv_exact"]
        note, tip = browser.evaluate(
            "[document.getElementById('uv-note').textContent, document.getElementById('uv-total').title]"
        )
        assert f"≈ {bound(day['uv_error'])}" in note and "COUNTERS_UV_MODE=hll" in note
        assert tip == f"estimate: {bound(day['uv_error'])} standard error"
