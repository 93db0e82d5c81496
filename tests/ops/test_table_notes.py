"""What a table leaves out, said where it is shown (issue 40): whether the who-visits tables are on
(the reads' JSON, ``/api/config``), the period's page views a who-visits table does not hold (the
tables turned on mid-day), the rows a table cut at ``--limit`` hides ("N more", a total in the JSON),
and the UV note of a single day. Every figure is checked against a count made by hand."""

from __future__ import annotations

import csv
import io
import json
import time

import pytest

from counters_tasks import sitestats
from counters_tasks.core.days import local_day
from counters_tasks.ops import views
from counters_tasks.ops.web import create_app
from tests.ops.test_clients_reads import CHROME_120, FIREFOX_121, fake_health, run
from tests.support.dashboard import TestClient
from tests.support.servers import use_settings

LANGUAGES = ["de", "en", "es", "fr", "it", "ja", "ko", "nl", "pl", "pt", "sv"]  # 11: one past the default limit


def visit(conn, n: int, now: float, **kwargs) -> None:
    sitestats.record_visit(conn, f"198.51.100.{n % 250}", f"/p/{n % 3}", now, **kwargs)


def test_the_tables_turned_on_mid_day_say_the_views_they_do_not_hold(raw_conn, monkeypatch):
    """5 views with the tables off, then 3 with them on, the same day: the day's PV is 8, the
    browser table holds 3; every reader says the 5 others (CLI table, CSV's stderr, JSON, API)."""
    now = time.time()
    use_settings(monkeypatch, COUNTERS_CLIENT_TABLES="off")
    for n in range(5):
        visit(raw_conn, n, now, user_agent=CHROME_120)
    use_settings(monkeypatch, COUNTERS_CLIENT_TABLES="on")
    for n in range(5, 8):
        visit(raw_conn, n, now, user_agent=FIREFOX_121 if n == 7 else CHROME_120)
    day = local_day(now).isoformat()
    code, out, _err = run("browsers", "--from", day, "--to", day, "--json")
    data = json.loads(out)
    assert code == 0 and [(c["value"], c["pv"]) for c in data["clients"]] == [("Chrome", 2), ("Firefox", 1)]
    assert (data["pv"], data["table_pv"], data["not_in_table"]) == (8, 3, 5)
    assert data["client_tables"] is True and data["client_pages"] == []
    code, out, _err = run("browsers", "--from", day, "--to", day)
    assert code == 0 and "5 page views not in this table (tables off then): 3 of the period's 8 are" in out
    code, out, err = run("browsers", "--from", day, "--to", day, "--format", "csv")
    assert code == 0 and len(list(csv.reader(io.StringIO(out)))) == 3 and "5 page views not in this table" in err
    client = TestClient(create_app(raw_conn, auth=None, health=fake_health))
    api = client.get("/api/clients", params={"from": day, "to": day, "kind": "device"}).json()
    assert (api["pv"], api["table_pv"], api["not_in_table"], api["client_tables"]) == (8, 3, 5, True)
    config = client.get("/api/config").json()
    assert config["client_tables"] is True and config["client_pages"] == []


def test_a_listed_pages_table_compares_with_the_pages_own_views(raw_conn, monkeypatch):
    """A page listed in COUNTERS_CLIENT_PAGES after 2 of its views: its table holds 1 of its 3."""
    now = time.time()
    use_settings(monkeypatch, COUNTERS_CLIENT_TABLES="on")
    for n in range(2):
        sitestats.record_visit(raw_conn, f"198.51.100.{n}", "/pricing", now, user_agent=CHROME_120)
    use_settings(monkeypatch, COUNTERS_CLIENT_TABLES="on", COUNTERS_CLIENT_PAGES="/pricing")
    sitestats.record_visit(raw_conn, "198.51.100.9", "/pricing", now, user_agent=CHROME_120)
    sitestats.record_visit(raw_conn, "198.51.100.9", "/other", now, user_agent=CHROME_120)
    data = views.clients_view(raw_conn, kind="device", path="/pricing")
    assert (data["pv"], data["table_pv"], data["not_in_table"]) == (3, 1, 2)
    assert data["client_pages"] == ["/pricing"]
    site = views.clients_view(raw_conn, kind="device")
    assert (site["pv"], site["table_pv"], site["not_in_table"]) == (4, 4, 0)
    code, out, _err = run("devices", "--path", "/pricing")
    assert code == 0 and "2 page views not in this table (tables off, or the page not in" in out


def test_with_the_tables_off_the_reads_say_so(raw_conn, monkeypatch):
    use_settings(monkeypatch, COUNTERS_CLIENT_TABLES="off", COUNTERS_CLIENT_PAGES="/pricing")
    visit(raw_conn, 1, time.time(), user_agent=CHROME_120)
    data = views.clients_view(raw_conn, kind="browser")
    assert data["client_tables"] is False and data["client_pages"] == []
    assert (data["pv"], data["not_in_table"]) == (1, 1)
    assert views.config_view()["client_tables"] is False


def test_a_table_cut_at_its_limit_says_how_many_more(raw_conn, monkeypatch):
    """11 languages, 11 referrers, 11 pages (one view each): at the default limit of 10 every
    command says "1 more" under its table, its JSON a total of 11, its CSV's stderr the line."""
    use_settings(monkeypatch, COUNTERS_CLIENT_TABLES="on")
    now = time.time()
    for n, language in enumerate(LANGUAGES):
        sitestats.record_visit(
            raw_conn, f"198.51.100.{n}", f"/page/{n}", now, language=language, referrer=f"https://r{n}.example/"
        )
    for args, rows in ((["languages"], "clients"), (["sources"], "sources"), (["top-pages"], "pages")):
        code, out, _err = run(*args, "--json")
        data = json.loads(out)
        assert code == 0 and len(data[rows]) == 10 and (data["total"], data["more"]) == (11, 1), args
        code, out, _err = run(*args)
        assert code == 0 and "1 more (--limit to see them; 11 in all)" in out, args
        code, out, err = run(*args, "--format", "csv")
        assert code == 0 and len(out.splitlines()) == 11 and "1 more (--limit to see them" in err, args
        code, out, _err = run(*args, "--limit", "11")
        assert code == 0 and "more (--limit" not in out, args
        data = json.loads(run(*args, "--limit", "11", "--json")[1])
        assert (data["total"], data["more"]) == (11, 0), args


@pytest.mark.parametrize("offsets", [(0,), (0, 1)])
def test_the_several_days_note_only_for_several_days(raw_conn, monkeypatch, offsets):
    """300 visitors of Chrome a day make its UV an estimate: on one day the caption says why
    without "several days"; over two days it says "UV over several days"."""
    use_settings(monkeypatch, COUNTERS_CLIENT_TABLES="on")
    now = time.time()
    for offset in offsets:
        for n in range(300):
            ip = f"198.{51 + n // 250}.{offset}.{n % 250}"
            sitestats.record_visit(raw_conn, ip, "/", now - 86400 * offset, user_agent=CHROME_120)
    first, last = local_day(now - 86400 * max(offsets)).isoformat(), local_day(now).isoformat()
    code, out, _err = run("browsers", "--from", first, "--to", last)
    assert code == 0 and "≈" in out
    assert ("several days" in out) == (len(offsets) > 1)


@pytest.mark.parametrize("tables", ["on", "off"])
def test_health_says_whether_the_tables_are_on_and_which_pages(raw_conn, monkeypatch, tables):
    """``counters-tasks health`` (text and JSON) says whether who visits is counted and the pages
    of COUNTERS_CLIENT_PAGES (none while the tables are off)."""
    use_settings(monkeypatch, COUNTERS_CLIENT_TABLES=tables, COUNTERS_CLIENT_PAGES="/pricing,/docs/")
    _code, out, _err = run("health", "--json")
    pages = ["/docs/", "/pricing"] if tables == "on" else []
    assert json.loads(out)["who_visits"] == {"client_tables": tables == "on", "client_pages": pages}
    _code, out, _err = run("health")
    [line] = [line for line in out.splitlines() if "who visits tables" in line]
    assert f"who visits tables {tables}" in line and (("/docs/, /pricing" in line) is (tables == "on"))


def test_a_log_line_without_a_user_agent_is_a_bot_as_the_crawler_rule_says(raw_conn, monkeypatch, tmp_path):
    """Issue 40: ``import --all`` of a combined log's ``-`` user agent (no User-Agent sent) put the
    view under device ``(unknown)``, where docs/clients.md says the crawler rule's answer is
    ``bot`` (``core.pageviews.is_crawler``: empty or ``-`` is a script). One rule: ``bot``; its
    browser and system stay ``(unknown)``. A visit sent with no user agent at all (None) did not
    tell: ``(unknown)``."""
    from counters_tasks.core import clients
    from counters_tasks.core.pageviews import is_crawler

    use_settings(monkeypatch, COUNTERS_CLIENT_TABLES="on")
    assert is_crawler("-") and is_crawler("")
    assert clients.client_of("-") == clients.client_of("") == (clients.UNKNOWN, clients.UNKNOWN, clients.BOT)
    assert clients.client_of(None) == clients.UNKNOWN_CLIENT
    now = time.time()
    when = time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now))
    log = tmp_path / "access.log"
    log.write_text(
        f'198.51.100.1 - - [{when}] "GET /a HTTP/1.1" 200 5 "-" "-"\n'
        f'198.51.100.2 - - [{when}] "GET /b HTTP/1.1" 200 5 "-" "{FIREFOX_121}"\n'
    )
    code, out, err = run("import", "--all", str(log), "--output", "json")
    assert code == 0, out + err
    day = local_day(now).isoformat()
    data = json.loads(run("devices", "--from", day, "--to", day, "--json")[1])
    assert sorted((c["value"], c["pv"]) for c in data["clients"]) == [("bot", 1), ("desktop", 1)]


def test_a_board_and_the_dead_letters_cut_at_their_limit_say_how_many_more(raw_conn):
    """``top`` (11 members, default limit 10) and ``dead-letters list`` (3 records, --limit 2)."""
    from counters_tasks import ranking
    from counters_tasks.store import keys
    from counters_tasks.worker import dead_letters

    board = ranking.Ranking(raw_conn, "pages")
    for n in range(11):
        board.incr(f"/m/{n}", n + 1)
    data = json.loads(run("top", "pages", "--json")[1])
    assert len(data["top"]) == 10 and (data["total"], data["more"]) == (11, 1)
    assert "1 more (--limit to see them; 11 in all)" in run("top", "pages")[1]
    assert "more (--limit" not in run("top", "pages", "-n", "11")[1]
    assert "1 more (--limit" in run("top", "pages", "--format", "csv")[2]
    client = dead_letters.store_client()
    client.delete(keys.dead_letters())
    try:
        for n in range(3):
            dead_letters.set_aside_call("counters.update_counter", f"id,{n}", [n], {}, "visits", ValueError("bad"), 5)
        data = json.loads(run("dead-letters", "list", "--limit", "2", "--json")[1])
        assert len(data["records"]) == 2 and (data["count"], data["total"], data["more"]) == (3, 3, 1)
        assert "1 more (--limit to see them; 3 in all)" in run("dead-letters", "list", "--limit", "2")[1]
    finally:
        client.delete(keys.dead_letters())


def test_a_single_days_estimated_uv_is_not_said_to_be_over_several_days(raw_conn, monkeypatch):
    """``stats`` of one day with ``COUNTERS_UV_MODE=hll``: the day's UV is its HyperLogLog's
    estimate, not a union of days; two days are."""
    use_settings(monkeypatch, COUNTERS_UV_MODE="hll")
    now = time.time()
    for n in range(60):
        sitestats.record_visit(raw_conn, f"198.51.100.{n}", "/", now)
        sitestats.record_visit(raw_conn, f"198.51.101.{n}", "/", now - 86400)
    day, yesterday = local_day(now).isoformat(), local_day(now - 86400).isoformat()
    data = json.loads(run("stats", "--day", day, "--json")[1])
    assert data["uv_approximate"] and data["pv"] == 60
    code, out, _err = run("stats", "--day", day)
    assert code == 0 and "several days" not in out and "UV: an estimate" in out, out
    code, out, _err = run("stats", "--from", yesterday, "--to", day)
    assert code == 0 and "UV over several days: an estimate" in out, out
