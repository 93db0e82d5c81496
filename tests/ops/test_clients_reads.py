"""Who visits, read by an operator: the ``browsers``, ``operating-systems``, ``devices``,
``countries`` and ``languages`` commands (table, CSV, JSON, ``--versions``, ``--site``) and the
dashboard's ``/api/clients`` (``views.clients_view``) answer what ``sitestats.top_clients`` answers
for visits written over two days on two sites, and say the views folded into ``(other)``."""

from __future__ import annotations

import csv
import io
import json
import time
from datetime import date

import pytest

from counters_tasks import InvalidInput, sitestats
from counters_tasks.core.days import local_day
from counters_tasks.ops import views
from counters_tasks.ops.web import create_app
from tests.support.cli_run import run_in_process
from tests.support.dashboard import TestClient
from tests.support.servers import dead_client, use_settings
from tests.support.uv_marks import shown_uv

CHROME_120 = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36"
)
CHROME_119 = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/119.0.0.0 Safari/537.36"
FIREFOX_121 = "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:121.0) Gecko/20100101 Firefox/121.0"
IPHONE = (
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
    "Version/17.1 Mobile/15E148 Safari/604.1"
)
SITES = '{"blog": {}}'
COMMANDS = {  # command words -> the kind they list
    ("browsers",): "browser",
    ("browsers", "--versions"): "browser_version",
    ("operating-systems",): "os",
    ("operating-systems", "--versions"): "os_version",
    ("devices",): "device",
    ("countries",): "country",
    ("languages",): "language",
}
# (day offset, site, ip, user agent, Accept-Language): yesterday and today, the default site and the blog
PLAN = [
    (1, None, "8.8.8.8", CHROME_120, "en-US,en;q=0.9"),
    (1, None, "8.8.8.8", CHROME_120, "en-US,en;q=0.9"),
    (1, None, "1.0.16.1", FIREFOX_121, "ja"),
    (1, None, "81.2.69.142", IPHONE, "en-GB"),
    (0, None, "8.8.8.8", CHROME_119, "en-US"),
    (0, None, "5.9.0.1", CHROME_120, "de-DE,de;q=0.8"),
    (0, None, "5.9.0.1", FIREFOX_121, "de"),
    (0, None, "10.1.2.3", None, None),
    (1, "blog", "81.2.69.142", FIREFOX_121, "en-GB"),
    (0, "blog", "81.2.69.142", FIREFOX_121, "en-GB"),
    (0, "blog", "1.0.16.1", IPHONE, "ja-JP"),
]


@pytest.fixture(autouse=True)
def client_tables(monkeypatch) -> None:
    """Who visits is counted only with COUNTERS_CLIENT_TABLES on (off by default)."""
    use_settings(monkeypatch, COUNTERS_CLIENT_TABLES="on")


def run(*args: str) -> tuple[int, str, str]:
    return run_in_process(*args, columns=120)


def write(conn, plan: list[tuple[int, str | None, str, str | None, str | None]], now: float) -> None:
    for n, (offset, site, ip, agent, language) in enumerate(plan):
        ts = now - 86400 * offset
        sitestats.record_visit(conn, ip, f"/p/{n}", ts, site=site, user_agent=agent, language=language)


@pytest.fixture
def two_days(raw_conn, monkeypatch) -> tuple[date, date]:
    """PLAN written over yesterday and today (two sites): (yesterday, today)."""
    use_settings(monkeypatch, COUNTERS_SITES=SITES)
    now = time.time()
    write(raw_conn, PLAN, now)
    return local_day(now - 86400), local_day(now)


def expected(conn, kind: str, first: date, last: date, limit: int = 10, site: str | None = None) -> list[dict]:
    return [
        {"value": c.source, "pv": c.pv, **views.uv_view(c.uv, c.uv_approximate, c.uv_error)}
        for c in sitestats.top_clients(conn, first, last, kind, limit, site=site)
    ]


def test_the_commands_answer_the_apis_figures_in_json_csv_and_table(raw_conn, two_days):
    first, last = two_days
    span = ["--from", first.isoformat(), "--to", last.isoformat()]
    for site, site_args in ((None, []), ("blog", ["--site", "blog"]), (None, ["-s", "default"])):
        for words, kind in COMMANDS.items():
            want = expected(raw_conn, kind, first, last, site=site)
            assert want, (words, site)
            code, out, err = run(*words, *span, *site_args, "--json")
            assert code == 0, (words, err)
            data = json.loads(out)
            assert data == {
                "from": first.isoformat(),
                "to": last.isoformat(),
                "kind": kind,
                "site": site or "default",
                "clients": want,
                "other": 0,
                "path": None,
                "pages": [],
                "client_tables": True,
                "client_pages": [],
                "total": len(want),
                "more": 0,
                "pv": 3 if site == "blog" else 8,  # PLAN's views of the site, every one in the tables
                "table_pv": 3 if site == "blog" else 8,
                "not_in_table": 0,
                "uv_counts": "visitors",  # the standard privacy mode (tests/test_privacy_modes.py: the daily one)
                "uv_note": None,
                "retention_note": None,
            }, words
            code, out, err = run(*words, *span, *site_args, "--format", "csv")
            assert code == 0 and not err, (words, err)
            reader = csv.DictReader(io.StringIO(out, newline=""))
            rows = list(reader)
            assert reader.fieldnames == ["rank", kind, "pv", "uv", "uv_exact", "uv_error"], words
            assert rows == [
                {
                    "rank": str(rank),
                    kind: c["value"],
                    "pv": str(c["pv"]),
                    "uv": str(c["uv"]),
                    "uv_exact": "true" if c["uv_exact"] else "false",
                    "uv_error": str(c["uv_error"]),
                }
                for rank, c in enumerate(want, 1)
            ], words
            code, out, err = run(*words, *span, *site_args)
            assert code == 0, (words, err)
            lines = [line.split("│")[1:-1] for line in out.splitlines() if line.count("│") == 5]
            assert [[cell.strip() for cell in line] for line in lines] == [
                [str(rank), c["value"], str(c["pv"]), shown_uv(c)] for rank, c in enumerate(want, 1)
            ], (words, out)
            assert (f"site {site}" in out) is (site is not None) and first.isoformat() in out


def test_the_figures_are_those_written(raw_conn, two_days):
    """Not only equal to the API: the values and counts PLAN wrote (both days, each site)."""
    first, last = two_days

    def figures(*args: str) -> list[tuple[str, int, int]]:
        code, out, err = run(*args, "--from", first.isoformat(), "--to", last.isoformat(), "--json")
        assert code == 0, err
        return [(c["value"], c["pv"], c["uv"]) for c in json.loads(out)["clients"]]

    assert figures("browsers") == [("Chrome", 4, 2), ("Firefox", 2, 2), ("(unknown)", 1, 1), ("Mobile Safari", 1, 1)]
    assert figures("browsers", "--versions") == [
        ("Chrome 120", 3, 2),
        ("Firefox 121", 2, 2),
        ("(unknown)", 1, 1),
        ("Chrome 119", 1, 1),
        ("Mobile Safari 17", 1, 1),
    ]
    assert figures("browsers", "-s", "blog") == [("Firefox", 2, 1), ("Mobile Safari", 1, 1)]
    assert figures("operating-systems") == [("Windows", 5, 3), ("(unknown)", 1, 1), ("Linux", 1, 1), ("iOS", 1, 1)]
    assert ("Windows 10", 5, 3) in figures("operating-systems", "--versions")
    assert figures("devices") == [("desktop", 6, 3), ("(unknown)", 1, 1), ("mobile", 1, 1)]
    assert figures("countries", "--limit", "2") == [("US", 3, 1), ("DE", 2, 1)]
    assert figures("languages", "-n", "3", "--site", "blog") == [("en-GB", 2, 1), ("ja-JP", 1, 1)]
    today = run("languages", "--from", last.isoformat(), "--json")
    assert [c["value"] for c in json.loads(today[1])["clients"]] == ["(unknown)", "de", "de-DE", "en-US"]


def test_views_folded_into_other_are_said_wherever_the_figures_are(raw_conn, monkeypatch):
    """A day's values past COUNTERS_MAX_DAY_CLIENTS count under ``(other)``: the JSON's ``other``,
    the table's note and, when ``(other)`` is not among the rows, the CSV's stderr say them."""
    use_settings(monkeypatch, COUNTERS_MAX_DAY_CLIENTS=2)
    now = time.time()
    languages = ["en", "en", "en", "de", "de", "fr", "es", "it"]  # en and de fill the day's cap
    write(raw_conn, [(0, None, f"8.8.8.{n}", CHROME_120, lang) for n, lang in enumerate(languages)], now)
    day = local_day(now).isoformat()
    code, out, err = run("languages", "--from", day, "--json")
    data = json.loads(out)
    assert [(c["value"], c["pv"]) for c in data["clients"]] == [("(other)", 3), ("en", 3), ("de", 2)]
    assert data["other"] == 3
    code, out, err = run("languages", "--from", day)
    assert code == 0 and "(other): 3 page views of values past a day's cap" in out and "not among" not in out
    # (other) ranks below the one row asked for: the figure is still known and said
    write(raw_conn, [(0, None, "8.8.8.99", CHROME_120, "en")], now)  # en now leads: (other) is second
    data = views.clients_view(raw_conn, day, day, "language", 1)
    assert data["clients"] == [{"value": "en", "pv": 4, **views.uv_view(4, False, 0.0)}] and data["other"] == 3
    assert sitestats.folded_client_views(raw_conn, local_day(now), local_day(now), "language") == 3  # read apart
    assert sitestats.folded_client_views(raw_conn, local_day(now), local_day(now), "browser") == 0
    with pytest.raises(InvalidInput):
        sitestats.folded_client_views(raw_conn, local_day(now), local_day(now), "browsers")
    code, out, err = run("languages", "--from", day, "-n", "1")
    assert code == 0 and "(other): 3 page views" in out and "not among the 1 listed" in out
    code, out, err = run("languages", "--from", day, "-n", "1", "--format", "csv")
    assert code == 0 and out.splitlines() == ["rank,language,pv,uv,uv_exact,uv_error", "1,en,4,4,true,0.0"]
    assert "(other): 3 page views" in err and "not among the 1 listed" in err
    code, out, err = run("languages", "--from", day, "-n", "2", "--format", "csv")
    assert code == 0 and "(other)" in out and "(other)" not in err  # a row of its own: nothing more to say
    assert err == "1 more (--limit to see them; 3 in all)\n"  # (the third value, cut at -n 2)
    # nothing folded: no note, other 0
    assert views.clients_view(raw_conn, day, day, "browser")["other"] == 0
    assert "(other)" not in run("browsers", "--from", day)[1]


def test_an_estimated_uv_is_marked_in_the_table_and_the_json(raw_conn):
    """Past 256 visitors of a value on a day, its UV over the range is an estimate: ``≈N ±X%`` and a
    caption in the table, ``uv_approximate``, ``uv_exact`` false and ``uv_error`` in the JSON; the
    exact value beside it is not marked."""
    now = time.time()
    plan = [
        (offset, None, f"198.{51 + n // 250}.{offset}.{n % 250}", CHROME_120, "en")
        for offset in (0, 1)
        for n in range(300)
    ]
    write(raw_conn, [*plan, (0, None, "8.8.8.8", FIREFOX_121, "de")], now)
    first, last = local_day(now - 86400).isoformat(), local_day(now).isoformat()
    code, out, err = run("browsers", "--from", first, "--to", last, "--json")
    chrome, firefox = json.loads(out)["clients"]
    assert (chrome["value"], chrome["pv"], chrome["uv_approximate"]) == ("Chrome", 600, True)
    assert 576 <= chrome["uv"] <= 624 and firefox == {"value": "Firefox", "pv": 1, **views.uv_view(1, False, 0.0)}
    assert not chrome["uv_exact"] and chrome["uv_error"] > 0
    code, out, err = run("browsers", "--from", first, "--to", last)
    assert code == 0 and shown_uv(chrome) in out and "UV over several days" in out
    [firefox_line] = [line for line in out.splitlines() if "Firefox" in line]
    assert "≈" not in firefox_line and "1" in firefox_line


@pytest.mark.parametrize(
    "args",
    [
        ["browsers", "--limit", "0"],
        ["browsers", "--limit", "1001"],
        ["countries", "-n", "x"],
        ["devices", "--versions"],  # only browsers and operating-systems have versions
        ["languages", "--kind", "browser"],  # the command is the kind
        ["operating-systems", "--from", "today", "--to", "yesterday"],
        ["browsers", "--from", "2020-01-01", "--to", "2024-01-01"],  # more than 400 days
        ["countries", "--site", "nope"],
        ["browsers", "--json", "--format", "csv"],
    ],
)
def test_usage_errors_exit_2_with_nothing_on_stdout(raw_conn, monkeypatch, args):
    use_settings(monkeypatch, COUNTERS_SITES=SITES)
    code, out, err = run(*args)
    assert code == 2 and not out and "Error" in err, (args, out, err)


def test_the_view_refuses_bad_input_before_reading(raw_conn):
    """Bad input is InvalidInput (400, exit code 2) before Redis is asked anything: a client of no
    server gets the same refusals."""
    for conn in (raw_conn, dead_client()):
        for kwargs in ({"kind": "browsers"}, {"kind": "referrer"}, {"limit": "0"}, {"limit": 1001}, {"start": "x"}):
            with pytest.raises(InvalidInput):
                views.clients_view(conn, **kwargs)
    assert views.clients_view(raw_conn)["kind"] == "browser"  # the default kind; no data: no rows
    assert views.clients_view(raw_conn)["clients"] == []


def fake_health(_conn):
    return {"ok": True}


def test_the_api_answers_the_view_and_refuses_bad_queries(raw_conn, two_days):
    first, last = two_days
    client = TestClient(create_app(raw_conn, auth=None, health=fake_health))
    span = {"from": first.isoformat(), "to": last.isoformat()}
    for kind in sitestats.CLIENT_VIEWS:
        for site in (None, "blog"):
            params = {**span, "kind": kind, **({"site": site} if site else {})}
            answer = client.get("/api/clients", params=params)
            assert answer.status_code == 200 and answer.headers["cache-control"] == "no-store"
            assert answer.json() == views.clients_view(raw_conn, first, last, kind, 10, site=site)
            assert answer.json()["clients"] == expected(raw_conn, kind, first, last, site=site) != []
    one = client.get("/api/clients", params={**span, "kind": "country", "limit": "1"}).json()
    assert one["clients"] == expected(raw_conn, "country", first, last, 1) and len(one["clients"]) == 1
    assert client.get("/api/clients", params=span).json()["kind"] == "browser"
    for bad in ({"kind": "browsers"}, {"kind": "referrer"}, {"limit": "0"}, {"limit": "x"}, {"from": "someday"}):
        refused = client.get("/api/clients", params={**span, **bad})
        assert refused.status_code == 400 and refused.json()["error"], bad
    assert client.get("/api/clients", params={"site": "nope"}).status_code == 400


def test_the_api_takes_a_read_token_and_keeps_its_site_rule(raw_conn, two_days):
    first, _last = two_days
    client = TestClient(create_app(raw_conn, auth=("ops", "s3cret"), health=fake_health))
    url = f"/api/clients?kind=device&from={first.isoformat()}"
    assert client.get(url).status_code == 401  # the password's rule, as every route
    every = views.create_token(raw_conn, "every-site")["token"]
    blog = views.create_token(raw_conn, "blog-only", site="blog")["token"]
    answer = client.get(url, headers={"Authorization": f"Bearer {every}"})
    assert answer.status_code == 200 and answer.json() == views.clients_view(raw_conn, first, None, "device")
    assert client.get(url, headers={"Authorization": "Bearer ctk_wrong"}).status_code == 401
    refused = client.get(url, headers={"Authorization": f"Bearer {blog}"})  # the default site: not the blog's
    assert refused.status_code == 403
    mine = client.get(url + "&site=blog", headers={"Authorization": f"Bearer {blog}"})
    assert mine.status_code == 200 and mine.json()["site"] == "blog" and mine.json()["clients"]
    views.revoke_token(raw_conn, "every-site")
    assert client.get(url, headers={"Authorization": f"Bearer {every}"}).status_code == 401


def test_without_client_tables_the_reads_say_how_to_count_them(raw_conn, monkeypatch):
    use_settings(monkeypatch, COUNTERS_CLIENT_TABLES="off")
    write(raw_conn, PLAN[:3], time.time())
    data = views.clients_view(raw_conn, kind="device")
    assert data["clients"] == [] and data["other"] == 0
    code, out, err = run("devices")
    assert code == 0 and "unless COUNTERS_CLIENT_TABLES=off" in out
    code, out, err = run("devices", "--format", "csv")
    assert code == 0 and out.splitlines() == ["rank,device,pv,uv,uv_exact,uv_error"]


def test_a_pages_readers_through_the_commands_the_api_and_the_view(raw_conn, monkeypatch):
    """COUNTERS_CLIENT_PAGES: ``--path`` on the commands, ``path=`` on ``/api/clients`` and the
    view read a listed page's own tables (who read ``/pricing``, not the site); a page not listed
    is a usage error (exit 2), a 400 and InvalidInput, never an empty table."""
    use_settings(monkeypatch, COUNTERS_SITES=SITES, COUNTERS_CLIENT_PAGES="/pricing")
    now = time.time()
    day = local_day(now)
    for ip, path, agent in (
        ("8.8.8.8", "/pricing?ref=mail", CHROME_120),
        ("8.8.8.8", "/pricing", CHROME_120),
        ("1.0.16.1", "/pricing", IPHONE),
        ("5.9.0.1", "/about", FIREFOX_121),
    ):
        sitestats.record_visit(raw_conn, ip, path, now, user_agent=agent)
    sitestats.record_visit(raw_conn, "81.2.69.142", "/pricing", now, site="blog", user_agent=FIREFOX_121)
    pricing = views.clients_view(raw_conn, day, day, "country", path="/pricing")
    assert [(c["value"], c["pv"], c["uv"]) for c in pricing["clients"]] == [("US", 2, 1), ("JP", 1, 1)]
    assert pricing["path"] == "/pricing" and pricing["pages"] == ["/pricing"]
    assert [c["value"] for c in views.clients_view(raw_conn, day, day, "browser")["clients"]] == [
        "Chrome",
        "Firefox",
        "Mobile Safari",
    ]  # the site: every page
    blog = views.clients_view(raw_conn, day, day, "browser", site="blog", path="/pricing")
    assert [(c["value"], c["pv"]) for c in blog["clients"]] == [("Firefox", 1)]  # the blog's /pricing

    code, out, err = run("countries", "--path", "/pricing", "--json")
    assert code == 0 and json.loads(out) == pricing, err
    code, out, _err = run("browsers", "--path", "/pricing", "--format", "table")
    assert code == 0 and "page /pricing" in out and "Chrome" in out and "Firefox" not in out
    client = TestClient(create_app(raw_conn, auth=None, health=fake_health))
    answer = client.get("/api/clients", params={"kind": "country", "path": "/pricing"})
    assert answer.status_code == 200 and answer.json() == pricing

    for conn in (raw_conn, dead_client()):  # refused before Redis is asked
        with pytest.raises(InvalidInput, match="COUNTERS_CLIENT_PAGES"):
            views.clients_view(conn, path="/about")
    refused = client.get("/api/clients", params={"path": "/about"})
    assert refused.status_code == 400 and "COUNTERS_CLIENT_PAGES" in refused.json()["error"]
    code, out, err = run("devices", "--path", "/about")
    assert code == 2 and not out and "COUNTERS_CLIENT_PAGES" in err


@pytest.fixture
def unpinned_pricing(raw_conn, monkeypatch) -> date:
    """COUNTERS_CLIENT_PAGES=/pricing with COUNTERS_TAG_KEY unset (a pip install's default: the tag
    key read from Redis, so every key is made inside ``keys.bound``), and /pricing read twice from
    the US today: the day."""
    monkeypatch.delenv("COUNTERS_TAG_KEY", raising=False)
    use_settings(monkeypatch, COUNTERS_CLIENT_PAGES="/pricing")
    now = time.time()
    for path in ("/pricing", "/pricing?ref=mail"):
        sitestats.record_visit(raw_conn, "8.8.8.8", path, now, user_agent=CHROME_120)
    return local_day(now)


def test_a_pages_readers_unpinned_through_the_python_api(raw_conn, unpinned_pricing):
    day = unpinned_pricing
    found = sitestats.top_clients(raw_conn, day, day, "country", path="/pricing")
    assert [(c.source, c.pv, c.uv) for c in found] == [("US", 2, 1)]
    assert sitestats.folded_client_views(raw_conn, day, day, "country", path="/pricing") == 0


def test_a_pages_readers_unpinned_through_the_command(raw_conn, unpinned_pricing):
    code, out, err = run("countries", "--path", "/pricing", "--json")
    assert code == 0, err
    assert [(c["value"], c["pv"], c["uv"]) for c in json.loads(out)["clients"]] == [("US", 2, 1)]


def test_a_pages_readers_unpinned_through_the_api(raw_conn, unpinned_pricing):
    client = TestClient(create_app(raw_conn, auth=None, health=fake_health), raise_server_exceptions=False)
    answer = client.get("/api/clients", params={"kind": "country", "path": "/pricing"})
    assert answer.status_code == 200, answer.text
    assert [(c["value"], c["pv"], c["uv"]) for c in answer.json()["clients"]] == [("US", 2, 1)]
    refused = client.get("/api/clients", params={"path": "/about"})  # still refused before Redis is asked
    assert refused.status_code == 400 and "COUNTERS_CLIENT_PAGES" in refused.json()["error"]
