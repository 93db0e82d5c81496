"""One page, one name; one person, one view: the same requests counted live through each
middleware (Flask under gunicorn, Starlette under uvicorn, Django under gunicorn, each with a
real worker) and imported as the access log gunicorn wrote of them, give the same figures, and
those equal a count made here by hand from the requests (``EXPECTED``), not by the package.

The requests: encoded and non-ASCII paths in several spellings, ``%23`` and ``%3F`` inside a
name, a query string, a browser's revalidation (304, no Content-Type), a HEAD, a stylesheet, a
404, crawlers and scripts, paths of 1,500 and 3,000 characters (counted under their names cut
to 512 bytes, issue 40), Referers sent as UTF-8 bytes, as punycode and as bytes that are not
UTF-8 (their sources: ``EXPECTED_SOURCES``), and in the log a line whose user agent was cut off
by the logger.
Each live route and the import count under their own key prefix on one Redis.

Who visits (issue 33, ``COUNTERS_CLIENT_TABLES=on`` on every route): the browser, system,
device, country and language tables (``sitestats.top_clients``) are the same on every route
and equal ``EXPECTED_CLIENTS``, counted by hand, except where the access log cannot say what the
request did: a combined log carries no Accept-Language, so every imported view's language is
``(unknown)``; and the line cut inside its user agent (``CUT_LINE``, Safari on an iPhone) lost
the ``Version/17.5 ... Safari/604.1`` that makes it Mobile Safari 17, so the import counts that
view's browser as what is left says, ``Mobile Safari UI/WKWebView`` (its system and device are
still there). Both are written by hand (``EXPECTED_IMPORTED_CLIENTS``): the importer can only
read what was logged.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import NamedTuple

import pytest
import redis

from counters_tasks import sitestats, skips
from counters_tasks.core.days import local_day
from counters_tasks.core.settings import reset_settings
from counters_tasks.local.redis_server import free_port
from counters_tasks.local.waiting import wait_until
from tests.support.faults import drain_and_stop
from tests.support.procs import Server, celery_env, purge_broker, start_worker

pytestmark = pytest.mark.processes

FIREFOX = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"
CHROME = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"
)
SAFARI = (
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
    "Version/17.5 Mobile/15E148 Safari/604.1"
)
GOOGLEBOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
BINGBOT = "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)"
PAGE = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8", "Sec-Fetch-Dest": "document"}


class Request(NamedTuple):
    ip: str
    agent: str
    method: str
    target: str
    extra: dict[str, str] = {}


BUCHER = "http://bücher.example/".encode().decode("latin-1")
"""A Referer sent as UTF-8 bytes (``http.client`` sends a header's str as latin-1: one byte a character)."""
NOT_UTF8 = "http://\xff\xfe.example/"
"""A Referer whose host is two bytes that are not UTF-8 (docs/sources.md: ``(unknown)``)."""
A, B, C = "81.2.69.142", "5.9.0.1", "1.0.16.1"  # public addresses of known countries: GB, DE, JP (iptocc)
LANGUAGES = {A: "en-GB,en;q=0.9", B: "de-DE,de;q=0.8", C: "ja"}
"""Each visitor's Accept-Language, sent with each of its requests on the live routes (the
crawlers and scripts send none)."""
REQUESTS = [
    Request(A, FIREFOX, "GET", "/caf%C3%A9"),
    Request(A, FIREFOX, "GET", "/a%20b", {"Referer": BUCHER}),
    Request(A, FIREFOX, "GET", "/%E6%97%A5%E6%9C%AC"),
    Request(A, FIREFOX, "GET", "/tags/c%23"),
    Request(A, FIREFOX, "GET", "/tags/c"),
    Request(A, FIREFOX, "GET", "/faq/why%3F"),
    Request(A, FIREFOX, "GET", "/pricing?utm_source=news&x=1"),
    Request(A, FIREFOX, "GET", "/pricing", {"If-None-Match": '"v1"'}),  # revisit: 304
    Request(A, FIREFOX, "HEAD", "/pricing"),
    Request(A, FIREFOX, "GET", "/static/app.css", {"Accept": "text/css", "Sec-Fetch-Dest": "style"}),
    Request(A, FIREFOX, "GET", "/missing"),
    Request(B, CHROME, "GET", "/caf%c3%a9"),  # the same page, lower-case escapes
    Request(B, CHROME, "GET", "/tags/f%23", {"Referer": NOT_UTF8}),
    Request(B, CHROME, "GET", "/pricing", {"Referer": "https://www.xn--bcher-kva.example/x?y"}),  # as browsers send it
    Request(B, CHROME, "GET", "/pricing", {"If-None-Match": '"v1"'}),  # revisit: 304
    Request(C, SAFARI, "GET", "/%E6%97%A5%E6%9C%AC"),  # its log line is cut inside the user agent
    Request("66.249.66.1", GOOGLEBOT, "GET", "/pricing"),
    Request("66.249.66.1", GOOGLEBOT, "GET", "/caf%C3%A9"),
    Request("40.77.167.5", BINGBOT, "GET", "/tags/c%23"),
    Request("192.0.2.99", "curl/8.5.0", "GET", "/pricing"),
    Request("192.0.2.98", "python-requests/2.32.3", "GET", "/a%20b"),
    Request(A, FIREFOX, "GET", "/long/" + "a" * 1500),  # over the API's 1,024 characters: counted under its cut name
    Request(B, CHROME, "GET", "/long/" + "b" * 3000, {"Referer": BUCHER}),
]
CUT_LINE = 15
"""The request whose log line loses the end of its user agent (as a logger cutting long lines does)."""

EXPECTED_VIEWS = {  # counted by hand from REQUESTS: page -> (views, visitors)
    "/café": (2, {A, B}),
    "/a b": (1, {A}),
    "/日本": (2, {A, C}),
    "/tags/c%23": (1, {A}),
    "/tags/c": (1, {A}),
    "/faq/why%3F": (1, {A}),
    "/pricing": (4, {A, B}),
    "/tags/f%23": (1, {B}),
    "/long/" + "a" * 506: (1, {A}),  # cut to 512 bytes (core.paths)
    "/long/" + "b" * 506: (1, {B}),
}
EXPECTED_SOURCES = [  # (source, views, visitors), counted by hand: the Referer's host in its IDNA form, as browsers send it
    ("(direct)", 11, 3),
    ("xn--bcher-kva.example", 3, 2),
    ("(unknown)", 1, 1),
]
EXPECTED_IMPORTED_SOURCES = [  # what gunicorn's access log can say of the same Referers
    ("(direct)", 11, 3),
    ("xn--bcher-kva.example", 3, 2),
    # gunicorn logs a header's bytes as latin-1 text (written in UTF-8): the two bytes that are
    # not UTF-8 are the text "ÿþ" in its log, which the importer cannot tell from a host so
    # named (importer.formats.logged_header); the live routes read the bytes themselves
    ("xn--vdab.example", 1, 1),
]
EXPECTED_SKIPS = {"method": 1, "static": 1, "status": 1, "crawler": 5}
EXPECTED_CLIENTS = {  # counted by hand from REQUESTS, live: kind -> value -> (views, visitors)
    # A's views: 7 pages + /pricing twice (its query string, the 304); B's: /café, /tags/f%23,
    # a long path and /pricing twice; C's: /日本. Crawlers and scripts are skipped: no "bot" row.
    "browser": {"Firefox": (9, {A}), "Chrome": (5, {B}), "Mobile Safari": (1, {C})},
    "browser_version": {"Firefox 128": (9, {A}), "Chrome 131": (5, {B}), "Mobile Safari 17": (1, {C})},
    "os": {"Linux": (9, {A}), "Windows": (5, {B}), "iOS": (1, {C})},
    "os_version": {"Linux": (9, {A}), "Windows 10": (5, {B}), "iOS 17.5": (1, {C})},  # Firefox's says no version
    "device": {"desktop": (14, {A, B}), "mobile": (1, {C})},
    "country": {"GB": (9, {A}), "DE": (5, {B}), "JP": (1, {C})},
    "language": {"en-GB": (9, {A}), "de-DE": (5, {B}), "ja": (1, {C})},
}
EXPECTED_IMPORTED_CLIENTS = EXPECTED_CLIENTS | {  # what the access log can say of the same views
    # C's line (CUT_LINE) was cut inside its user agent: what was logged ends "(KHTML, like
    # Gecko) ", without "Version/17.5 Mobile/15E148 Safari/604.1"; an iPhone's WebKit without
    # Safari's tokens is what an app's web view sends, and ua-parser names it so, with no
    # version. The importer can only read what was logged: not a disagreement of the routes.
    "browser": {"Firefox": (9, {A}), "Chrome": (5, {B}), "Mobile Safari UI/WKWebView": (1, {C})},
    "browser_version": {"Firefox 128": (9, {A}), "Chrome 131": (5, {B}), "Mobile Safari UI/WKWebView": (1, {C})},
    # a combined access log carries no Accept-Language: every imported view's language is
    # "(unknown)" (core.clients.language_of(None), UNKNOWN)
    "language": {"(unknown)": (15, {A, B, C})},
}


def figures(conn: redis.Redis, day) -> dict:
    """Every figure the package shows of the day: site and each page, the day and the range of
    that day and the one before (PV, UV), and the top pages."""
    yesterday = day - timedelta(days=1)
    out: dict = {
        "site": tuple(sitestats.site_visit_info(conn, day))[1:],
        "site range": _range(sitestats.site_visit_range(conn, yesterday, day)),
        "top": sitestats.top_pages(conn, day, day, limit=50),
        "sources": [(s.source, s.pv, s.uv) for s in sitestats.top_sources(conn, day, day, limit=50)],
    }
    for page in EXPECTED_VIEWS:
        out[page] = tuple(sitestats.site_visit_info(conn, day, page))[1:]
        out[page + " range"] = _range(sitestats.site_visit_range(conn, yesterday, day, page))
    for kind in EXPECTED_CLIENTS:  # who visits: the day, and the range of it and the day before
        out[kind] = [tuple(c) for c in sitestats.top_clients(conn, day, day, kind, limit=50)]
        out[kind + " range"] = [tuple(c) for c in sitestats.top_clients(conn, yesterday, day, kind, limit=50)]
    return out


def _range(result: sitestats.SiteRange) -> tuple:
    return result.pv, result.uv, [(d.pv, d.uv) for d in result.days]


def expected_figures(clients: dict = EXPECTED_CLIENTS, sources: list = EXPECTED_SOURCES) -> dict:
    """``figures`` as counted by hand: EXPECTED_VIEWS, the who-visits tables ``clients`` and the
    referrers ``sources``."""
    views = sum(n for n, _ in EXPECTED_VIEWS.values())
    visitors = set().union(*(who for _, who in EXPECTED_VIEWS.values()))
    out: dict = {
        "site": (views, len(visitors)),
        "site range": (views, len(visitors), [(0, 0), (views, len(visitors))]),
        "top": sorted(((p, n) for p, (n, _) in EXPECTED_VIEWS.items()), key=lambda item: (-item[1], item[0])),
        "sources": sources,
    }
    for page, (n, who) in EXPECTED_VIEWS.items():
        out[page] = (n, len(who))
        out[page + " range"] = (n, len(who), [(0, 0), (n, len(who))])
    for kind, table in clients.items():
        assert sum(n for n, _ in table.values()) == views, kind  # (every counted view has one value a table)
        rows = sorted(
            ((value, n, len(who), False, 0.0) for value, (n, who) in table.items()), key=lambda r: (-r[1], r[0])
        )
        out[kind] = out[kind + " range"] = rows  # the day before has no views: the range's figures are the day's
    return out


def send(server: Server) -> None:
    for request in REQUESTS:
        headers = {"User-Agent": request.agent, "X-Forwarded-For": request.ip} | PAGE | request.extra
        if request.ip in LANGUAGES:
            headers["Accept-Language"] = LANGUAGES[request.ip]
        server.get(request.target, headers, method=request.method)


def prefixed(monkeypatch, prefix: str) -> None:
    monkeypatch.setenv("COUNTERS_KEY_PREFIX", prefix)
    reset_settings()


def counts_under(redis_url: str, monkeypatch, prefix: str, day) -> tuple[dict, dict]:
    """(figures, skips by reason) as the package reads them under ``prefix``."""
    prefixed(monkeypatch, prefix)
    conn = redis.Redis.from_url(redis_url)  # a new client: the key schema is per client
    try:
        found = skips.counts(conn)
        return figures(conn, day) | {"skipped today": skips.day_counts(conn, day, day)[day]}, found
    finally:
        conn.close()


SERVERS = {
    "flask": lambda port, log: [
        "gunicorn",
        "-w",
        "1",
        "-b",
        f"127.0.0.1:{port}",
        "--access-logfile",
        str(log),
        "--access-logformat",
        '%({x-forwarded-for}i)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s"',
        "tests.support.one_site:application",
    ],
    "starlette": lambda port, log: [
        "uvicorn",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-access-log",
        "--no-proxy-headers",
        "tests.support.one_site:application",
    ],
    "django": lambda port, log: [
        "gunicorn",
        "-w",
        "1",
        "-b",
        f"127.0.0.1:{port}",
        "tests.support.one_site:application",
    ],
}


def run_live(kind: str, redis_url: str, tmp_path: Path, access_log: Path) -> None:
    """The requests through one middleware under its server, applied by a real worker: returns
    once the server has stopped (its recorder flushed to the broker at SIGTERM) and the worker
    has taken and acknowledged every message (acknowledged only once applied). The middleware's
    own stats are not read: an ASGI server may answer the next request before the last one's
    visit is handed over, so a snapshot of them races with the requests."""
    env = celery_env(redis_url, COUNTERS_KEY_PREFIX=f"{kind}:", ONE_SITE_KIND=kind, COUNTERS_CLIENT_TABLES="on")
    purge_broker(redis_url)
    worker = start_worker(env, tmp_path / f"{kind}-worker.log", concurrency=1).wait_ready()
    port = free_port()
    server = Server(SERVERS[kind](port, access_log), env, tmp_path / f"{kind}.log", port)
    try:
        send(server)
    finally:
        code = server.stop()  # uvicorn raises the SIGTERM again once it has shut down cleanly
        assert code == 0 or (kind == "starlette" and code == -15), server.log.read_text()[-3000:]
    drain_and_stop(env, worker)


def test_live_and_imported_requests_give_the_same_figures(redis_url, tmp_path, monkeypatch):
    wait_until(lambda: (time.time() + 120) % 86400 > 240, timeout=300, what="a time away from midnight (UTC)")
    day = local_day(time.time())
    access_log = tmp_path / "access.log"
    expected = expected_figures()
    monkeypatch.setenv("COUNTERS_CLIENT_TABLES", "on")  # for the import (read at prefixed's reset_settings)
    results = {}
    for kind in SERVERS:
        run_live(kind, redis_url, tmp_path, access_log)
        results[kind] = counts_under(redis_url, monkeypatch, f"{kind}:", day)

    lines = [
        line for line in access_log.read_text().splitlines() if '"GET /health ' not in line
    ]  # the test's own readiness probes
    assert len(lines) == len(REQUESTS)
    cut = lines[CUT_LINE]
    assert cut.endswith(f'"{SAFARI}"')
    lines[CUT_LINE] = cut[:-40]  # no closing quote: the user agent cut short
    assert lines[CUT_LINE].endswith('"' + SAFARI.partition("Version/")[0])  # (EXPECTED_IMPORTED_CLIENTS)
    log = tmp_path / "cut.log"
    log.write_text("\n".join(lines) + "\n")
    prefixed(monkeypatch, "import:")
    from click.testing import CliRunner

    from counters_tasks.ops.cli import cli

    result = CliRunner().invoke(cli, ["import", "--json", str(log)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["skipped"]["malformed"] == 0 and summary["counted"] == expected["site"][0]
    results["import"] = counts_under(redis_url, monkeypatch, "import:", day)

    # no Accept-Language in an access log: the import's language table is all "(unknown)"
    assert results["import"][0]["language"] == [("(unknown)", 15, 3, False, 0.0)]
    for route, (found, skipped) in results.items():
        today_skipped = found.pop("skipped today")
        imported = expected_figures(EXPECTED_IMPORTED_CLIENTS, EXPECTED_IMPORTED_SOURCES)
        assert found == (imported if route == "import" else expected), route
        by_reason = defaultdict(int)
        for (_route, reason), n in skipped.items():
            by_reason[reason] += n
        assert {reason: by_reason[reason] for reason in EXPECTED_SKIPS} == EXPECTED_SKIPS, (route, skipped)
        # every skip was of today, and counts in today's figures on every route (the probes of
        # /health too, live: not_page; the import reads no line it could not date)
        assert today_skipped == {reason: n for reason, n in by_reason.items() if n}, (route, today_skipped)
