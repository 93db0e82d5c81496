"""``counters-tasks import``: access logs (combined, common, .gz, stdin) and JSON lines counted at
their own times. Every figure is checked against one computed here from the generated lines
(PV and UV per day, PV per path, daily uniques, the ``hits`` counters), and a second import of
the same lines counts nothing, also once the messages' dedupe markers are gone (the ledger)."""

from __future__ import annotations

import gzip
import io
import json
import os
import random
import re
import shlex
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench.traffic import log_time
from counters_tasks import counters, sitestats, skips, uniques
from counters_tasks.core.settings import reset_settings
from counters_tasks.local.redis_server import free_port
from counters_tasks.ops import importer
from counters_tasks.ops.cli import cli, import_progress
from counters_tasks.store import keys
from tests.support.procs import REPO, celery_env
from tests.support.servers import use_settings

BROWSERS = [
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_4) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Safari/605.1.15",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:125.0) Gecko/20100101 Firefox/125.0",
]
BOTS = [
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "curl/8.5.0",
    "python-requests/2.31.0",
    "Mozilla/5.0 (compatible; YandexBot/3.0; +http://yandex.com/bots)",
    "-",
]
PAGES = ["/", "/pricing", "/blog", "/blog/post-1", "/docs/api", "/about"]
STATIC = [
    "/static/app.css",
    "/static/app.js",
    "/img/logo.PNG",
    "/favicon.ico",
    "/fonts/x.woff2",
    "/robots.txt",
    "/static/app.js.map",
    "/img/hero.jpg?v=3",
]
OFFSETS = [0, 2, -7, 5.5]


def log_line(
    ip: str, ts: int, method: str, target: str, status: int | str, agent: str | None, offset: float = 0
) -> str:
    common = f'{ip} - - [{log_time(ts, offset)}] "{method} {target} HTTP/1.1" {status} 1234'
    return common if agent is None else f'{common} "https://example.com/" "{agent}"'


def utc_day(ts: float) -> date:
    return datetime.fromtimestamp(ts, timezone.utc).date()


@dataclass
class Expected:
    """What an import of the generated lines must count: page views (ip, path, ts, visitor key)
    and the lines skipped by reason."""

    views: list[tuple[str, str, float, str | None]] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    skipped_on: Counter = field(default_factory=Counter)  # (UTC day, reason) of the lines with a time
    lines: int = 0

    def view(self, ip: str, path: str, ts: float, visitor: str | None) -> None:
        self.lines += 1
        self.views.append((ip, path.split("?")[0], ts, visitor))

    def skip(self, reason: str, ts: float | None = None) -> None:
        self.lines += 1
        self.skipped[reason] += 1
        if ts is not None:
            self.skipped_on[(utc_day(ts), reason)] += 1

    def skipped_days(self) -> dict[date, dict[str, int]]:
        found: dict[date, dict[str, int]] = defaultdict(dict)
        for (day, reason), n in self.skipped_on.items():
            found[day][reason] = n
        return found

    def pv(self) -> Counter:
        return Counter(utc_day(ts) for _ip, _path, ts, _v in self.views)

    def path_pv(self) -> Counter:
        return Counter((utc_day(ts), path) for _ip, path, ts, _v in self.views)

    def uv(self) -> dict[date, int]:
        found = defaultdict(set)
        for ip, _path, ts, _v in self.views:
            found[utc_day(ts)].add(ip)
        return {day: len(ips) for day, ips in found.items()}

    def uniques(self) -> dict[date, int]:
        found = defaultdict(set)
        for _ip, _path, ts, visitor in self.views:
            if visitor is not None:
                found[utc_day(ts)].add(visitor)
        return {day: len(v) for day, v in found.items()}

    def hits(self, path: str | None = None) -> list[tuple[int, int]]:
        found = Counter(int(ts // 86400) * 86400 for _ip, p, ts, _v in self.views if path in (None, p))
        return sorted(found.items())


def recent_times(rng: random.Random, now: float) -> tuple[int, int]:
    """A span of recent seconds over two days: the last hour of yesterday (UTC) to now."""
    today = int(now // 86400) * 86400
    return today - 3600, max(int(now) - 10, today + 60)


def make_log(
    rng: random.Random, count: int, now: float, fmt: str = "combined", include_all: bool = False, extras: bool = True
) -> tuple[list[bytes], Expected]:
    """``count`` random lines of a site's access log (plus malformed and blank lines when
    ``extras``), and what importing them counts."""
    first, last = recent_times(rng, now)
    ips = [f"198.51.100.{n}" for n in range(1, 30)] + [f"2001:db8::{n:x}" for n in range(1, 10)]
    expected = Expected()
    lines: list[bytes] = []
    for _ in range(count):
        ip, ts, offset = rng.choice(ips), rng.randint(first, last), rng.choice(OFFSETS)
        kind = rng.choices(["view", "static", "bot", "post", "head", "status"], [70, 10, 8, 4, 2, 6])[0]
        agent = rng.choice(BOTS if kind == "bot" else BROWSERS)
        target = rng.choice(STATIC if kind == "static" else PAGES)
        if kind == "view" and rng.random() < 0.2:
            target += "?utm_source=news&x=1"
        method = {"post": "POST", "head": "HEAD"}.get(kind, "GET")
        status = rng.choice([404, 500, 403, 101]) if kind == "status" else rng.choice([200, 200, 200, 304, 301, 206])
        shown_agent = None if fmt == "common" else agent
        lines.append(log_line(ip, ts, method, target, status, shown_agent, offset).encode())
        visitor = f"{ip}|{shown_agent or ''}"
        if kind in ("post", "head"):
            expected.skip("method", ts)
        elif kind == "status":
            expected.skip("status", ts)
        elif kind == "static" and not include_all:
            expected.skip("static", ts)
        elif kind == "bot" and not include_all and fmt == "combined":
            expected.skip("crawler", ts)
        else:
            expected.view(ip, target, ts, visitor)
    if extras:
        junk = [
            b"",
            b"   ",
            b"not a log line at all",
            b"\xff\xfe\x00\x01 binary",
            b"x" * (70 * 1024),
            log_line("198.51.100.1", last, "GET", "/", 200, None if fmt == "common" else BROWSERS[0]).encode()[:40],
            b'198.51.100.1 - - [31/Feb/2024:10:00:00 +0000] "GET / HTTP/1.1" 200 5'
            + (b' "-" "x"' if fmt == "combined" else b""),
            b'198.51.100.1 - - [01/Jan/2024:10:00:00 +0000] "GET / HTTP/1.1" abc 5'
            + (b' "-" "x"' if fmt == "combined" else b""),
            b'198.51.100.1 - - [01/Jan/2024:10:00:00 +0000] "GET" 200 5' + (b' "-" "x"' if fmt == "combined" else b""),
            b"198.51.100.1 \x00 nul",
        ]
        for junk_line in junk:
            at = rng.randint(1, len(lines) - 1)  # not first: the format is detected on the first line
            lines.insert(at, junk_line)
            expected.skip("blank" if not junk_line.strip() else "malformed")
    return lines, expected


def write(path: Path, lines: list[bytes], compress: bool = False) -> Path:
    data = b"\n".join(lines) + b"\n"
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def run_import(*args: str, stdin: bytes | None = None, code: int = 0) -> dict | str:
    result = CliRunner().invoke(cli, ["import", *args], input=stdin, catch_exceptions=False)
    assert result.exit_code == code, (result.exit_code, result.output)
    if code == 0 and "--json" in args:
        return json.loads(result.stdout)
    return result.output


def check_figures(conn, expected: Expected) -> None:
    """Every figure Redis holds for the imported views is the one computed from the lines."""
    pv, uv, uniq = expected.pv(), expected.uv(), expected.uniques()
    assert len(pv) >= 1
    for day in pv:
        site = sitestats.site_visit_info(conn, day)
        assert (site.pv, site.uv) == (pv[day], uv[day]), day
        assert uniques.unique_visitors(conn, day) == uniq.get(day, 0), day
    for (day, path), n in expected.path_pv().items():
        assert sitestats.site_visit_info(conn, day, path).pv == n, (day, path)
    assert sitestats.site_visit_info(conn).pv == len(expected.views)
    assert counters.get_counter(conn, "hits", 86400) == expected.hits()
    assert counters.get_counter(conn, "hits:/pricing", 86400) == expected.hits("/pricing")


def check_summary(summary: dict, expected: Expected, counted: int | None = None) -> None:
    assert summary["lines"] == expected.lines
    assert summary["counted"] == (len(expected.views) if counted is None else counted)
    assert summary["lines"] == summary["counted"] + summary["skipped_total"]
    assert summary["skipped_total"] == sum(summary["skipped"].values())
    got = {reason: n for reason, n in summary["skipped"].items() if n}
    want = dict(expected.skipped)
    if counted is not None:
        want["already_imported"] = len(expected.views) - counted
    assert got == {reason: n for reason, n in want.items() if n}


def seen_markers(conn) -> list[bytes]:
    return [key for key in conn.scan_iter(match="ct:*:seen:*", count=1000)]


# --- the command -------------------------------------------------------------------------------


def test_combined_log_counts_page_views_at_their_times_and_once(raw_conn, tmp_path):
    lines, expected = make_log(random.Random(1), 1500, time.time())
    log = write(tmp_path / "access.log", lines)
    summary = run_import("--json", str(log))
    assert summary["format"] == "combined" and summary["file"] == str(log) and summary["all"] is False
    check_summary(summary, expected)
    assert set(summary["skipped"]) >= {"malformed", "method", "status", "static", "crawler", "already_imported"}
    assert summary["days"] == {day.isoformat(): n for day, n in sorted(expected.pv().items())}
    assert len(expected.views) > 2 * importer.CHUNK  # several chunks, the last one partial
    check_figures(raw_conn, expected)
    # each skipped line counts in its own day (the unreadable ones, which have none, in the totals only)
    days = sorted(expected.skipped_days())
    assert len(days) == 2 and skips.day_counts(raw_conn, days[0], days[-1]) == expected.skipped_days()
    # the same lines again count nothing; nor once the messages' dedupe markers are gone (the ledger)
    again = run_import("--json", str(log))
    check_summary(again, expected, counted=0)
    assert seen_markers(raw_conn)
    raw_conn.delete(*seen_markers(raw_conn))
    check_summary(run_import("--json", "--format", "combined", str(log)), expected, counted=0)
    check_figures(raw_conn, expected)
    ledger = keys.import_ledger()
    assert raw_conn.type(ledger) == b"hash" and 399 * 86400 < raw_conn.ttl(ledger) <= 400 * 86400
    assert {field[:2] for field in raw_conn.hkeys(ledger)} == {b"c:", b"v:"}  # full chunks, and the last one's views


def test_text_summary(raw_conn, tmp_path):
    lines, expected = make_log(random.Random(2), 200, time.time())
    output = run_import(str(write(tmp_path / "access.log", lines)))
    assert f"{expected.lines} lines read, {len(expected.views)} counted" in output
    assert f"static {expected.skipped['static']}" in output and "malformed" in output
    for day, n in expected.pv().items():
        assert re.search(rf"{day.isoformat()}\s+{n} counted", output)


def test_all_counts_crawlers_and_static_files(raw_conn, tmp_path):
    lines, expected = make_log(random.Random(3), 800, time.time(), include_all=True)
    summary = run_import("--all", "--json", str(write(tmp_path / "access.log", lines)))
    assert summary["all"] is True and summary["skipped"]["static"] == summary["skipped"]["crawler"] == 0
    check_summary(summary, expected)
    check_figures(raw_conn, expected)


def test_common_format_gzipped(raw_conn, tmp_path):
    """No user agent in the common format: no crawler filter, the IP alone makes the session."""
    lines, expected = make_log(random.Random(4), 900, time.time(), fmt="common")
    log = write(tmp_path / "access.log.1.gz", lines, compress=True)
    summary = run_import("--json", str(log))
    assert summary["format"] == "common" and summary["skipped"]["crawler"] == 0
    check_summary(summary, expected)
    check_figures(raw_conn, expected)
    # the same lines unpacked, or with another name, are the same lines
    plain = write(tmp_path / "other-name", lines)
    check_summary(run_import("--json", "--format", "common", str(plain)), expected, counted=0)


def test_stdin_gzipped_or_not(raw_conn, tmp_path):
    lines, expected = make_log(random.Random(5), 700, time.time())
    data = b"\n".join(lines) + b"\n"
    summary = run_import("--json", "-", stdin=gzip.compress(data))
    assert summary["file"] == "<stdin>"
    check_summary(summary, expected)
    check_summary(run_import("--json", "-", stdin=data), expected, counted=0)
    check_figures(raw_conn, expected)


def test_a_log_that_grew_is_imported_for_its_new_lines(raw_conn, tmp_path):
    """Nightly imports of the same growing file: the last (partial) chunk of the first import is
    noted visit by visit, so the second counts only the lines written since."""
    lines, expected = make_log(random.Random(6), 1600, time.time(), extras=False)
    log = write(tmp_path / "access.log", lines[:700])
    first = run_import("--json", str(log))
    assert 0 < first["counted"] < len(expected.views)
    write(log, lines)
    second = run_import("--json", str(log))
    assert second["counted"] == len(expected.views) - first["counted"]
    assert second["skipped"]["already_imported"] == first["counted"]
    check_figures(raw_conn, expected)
    check_summary(run_import("--json", str(log)), expected, counted=0)


def test_equal_lines_all_count(raw_conn, tmp_path):
    """A burst of equal lines (same second, visitor and page) makes equal chunks: each counts."""
    now = int(time.time()) - 60
    line = log_line("198.51.100.7", now, "GET", "/", 200, BROWSERS[0]).encode()
    summary = run_import("--json", str(write(tmp_path / "burst.log", [line] * (2 * importer.CHUNK + 7))))
    assert summary["counted"] == 2 * importer.CHUNK + 7
    assert sitestats.site_visit_info(raw_conn, utc_day(now)).pv == 2 * importer.CHUNK + 7
    assert run_import("--json", str(tmp_path / "burst.log"))["counted"] == 0


def test_refused_lines_are_counted_by_reason_and_tried_again(raw_conn, tmp_path):
    lines, expected = make_log(random.Random(7), 600, time.time(), extras=False)
    ahead = log_line("198.51.100.2", int(time.time()) + 3600, "GET", "/", 200, BROWSERS[0]).encode()
    bad_ip = log_line("999.1.2.3", int(time.time()) - 60, "GET", "/", 200, BROWSERS[0]).encode()
    lines[10:10] = [ahead, bad_ip]
    expected.skip("refused:future")
    expected.skip("refused:bad_input")
    log = write(tmp_path / "access.log", lines)
    check_summary(run_import("--json", str(log)), expected)
    check_figures(raw_conn, expected)
    # the refused lines are not noted: they are tried (and refused) again, the others are not counted twice
    check_summary(run_import("--json", str(log)), expected, counted=0)
    check_figures(raw_conn, expected)


def test_jsonl_lines(raw_conn, tmp_path):
    now = time.time()
    rng = random.Random(8)
    first, last = recent_times(rng, now)
    expected = Expected()
    rows = []
    sessions = [uuid.uuid4().hex for _ in range(40)]
    for n in range(900):
        ts = rng.randint(first, last) + rng.choice([0, 0.25])
        ip, path = f"203.0.113.{rng.randint(1, 60)}", rng.choice(PAGES + ["/static/x.css"])
        row: dict = {"ip": ip, "path": path, "ts": ts, "extra": "ignored"}
        if n % 3 == 0:
            row["ts"] = datetime.fromtimestamp(ts, timezone.utc).isoformat().replace("+00:00", "Z")
        elif n % 3 == 1:
            row["ts"] = datetime.fromtimestamp(ts, timezone(timedelta(hours=-3))).isoformat()
        session = rng.choice(sessions) if n % 2 else None
        if session:
            row["session_id"] = str(uuid.UUID(session)) if n % 4 == 1 else session
        rows.append(json.dumps(row))
        if path.endswith(".css"):
            expected.skip("static")
        else:
            expected.view(ip, path, ts, session)
    for junk, reason in [
        ("{not json", "malformed"),
        ("[1, 2]", "malformed"),
        ('{"ip": "203.0.113.1", "path": "/"}', "malformed"),
        ('{"ip": 7, "path": "/", "ts": 1}', "malformed"),
        ('{"ip": "203.0.113.1", "path": "/", "ts": true}', "malformed"),
        ('{"ip": "203.0.113.1", "path": "/", "ts": "yesterday"}', "malformed"),
        ('{"ip": "203.0.113.1", "path": "/", "ts": 1, "session_id": 5}', "malformed"),
        (json.dumps({"ip": "nope", "path": "/", "ts": now - 5}), "refused:bad_input"),
        (json.dumps({"ip": "203.0.113.1", "path": "/", "ts": now - 5, "session_id": "xyz"}), "refused:bad_input"),
        (json.dumps({"ip": "203.0.113.1", "path": "/", "ts": now + 7200}), "refused:future"),
        ("", "blank"),
    ]:
        rows.insert(rng.randint(1, len(rows)), junk)
        expected.skip(reason)
    log = tmp_path / "visits.jsonl"
    log.write_text("\n".join(rows) + "\n")
    summary = run_import("--json", str(log))
    assert summary["format"] == "jsonl"
    check_summary(summary, expected)
    check_figures(raw_conn, expected)
    check_summary(run_import("--json", "--format", "jsonl", str(log)), expected, counted=0)


@pytest.mark.parametrize("who", ["off", "", "pages"], ids=["who-visits-off", "default", "who-visits-pages"])
def test_every_key_the_import_writes_is_documented(raw_conn, tmp_path, monkeypatch, who):
    from tests.system.test_scaleout import documented_patterns

    lines, _expected = make_log(random.Random(9), 600, time.time())
    if who == "off":  # the tables of who visits (core.clients), on by default
        use_settings(monkeypatch, COUNTERS_CLIENT_TABLES="off")
    elif who == "pages":  # and a page's own
        use_settings(monkeypatch, COUNTERS_CLIENT_PAGES=",".join(PAGES[:2]))
    run_import(str(write(tmp_path / "access.log", lines)))
    patterns = documented_patterns()
    stored = [key.decode() for key in raw_conn.scan_iter(count=1000)]
    assert keys.import_ledger() in stored
    assert any(":who:" in key for key in stored) == (who != "off")
    assert any("%1E" in key for key in stored) == (who == "pages")
    for key in stored:
        found = [ttl for regex, ttl in patterns if regex.fullmatch(key)]
        assert len(found) == 1, key
        assert (raw_conn.ttl(key) > 0) == (not found[0].startswith("none")), (key, found[0])


def test_old_days_are_counted(raw_conn, tmp_path):
    """A log of 2015 and one of 400 days ago, at default settings: every page view counted, on
    its own day (before issue 13 they were refused as closed_day)."""
    rng = random.Random(10)
    old = int(datetime(2015, 6, 1, tzinfo=timezone.utc).timestamp())
    year_ago = int(time.time()) - 400 * 86400
    lines = [
        log_line(
            f"198.51.100.{n % 20 + 1}",
            start + rng.randint(0, 80000),
            "GET",
            rng.choice(PAGES),
            200,
            rng.choice(BROWSERS),
        ).encode()
        for start in (old, year_ago)
        for n in range(300)
    ]
    summary = run_import("--json", str(write(tmp_path / "old.log", lines)))
    assert summary["counted"] == 600 and summary["skipped_total"] == 0
    assert sitestats.site_visit_info(raw_conn).pv == 600
    assert sitestats.site_visit_info(raw_conn, None, "/pricing").pv == sum(b'"GET /pricing ' in line for line in lines)


def test_exit_codes(raw_conn, tmp_path, monkeypatch):
    log = write(tmp_path / "access.log", make_log(random.Random(11), 20, time.time())[0])
    assert "does not exist" in run_import(str(tmp_path / "missing.log"), code=2)
    assert "xml" in run_import("--format", "xml", str(log), code=2)
    empty = run_import("--json", str(write(tmp_path / "empty.log", [])))
    assert (empty["lines"], empty["counted"]) == (1, 0)  # one blank line
    broken = tmp_path / "broken.log.gz"
    broken.write_bytes(gzip.compress(b"\n".join(make_log(random.Random(11), 2000, time.time())[0]))[:20000])
    assert "cannot read on" in run_import(str(broken), code=1)  # what was read before is counted
    assert 0 < sitestats.site_visit_info(raw_conn).pv
    raw_conn.flushdb()
    monkeypatch.setenv("COUNTERS_REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    reset_settings()
    assert "Redis at" in run_import(str(log), code=1)
    monkeypatch.delenv("COUNTERS_SECRET")
    reset_settings()
    assert "COUNTERS_SECRET" in run_import(str(log), code=1)
    assert sitestats.site_visit_info(raw_conn).pv == 0


def test_progress_bar_shows_lines_and_bytes(tmp_path):
    from rich.console import Console

    log = write(tmp_path / "access.log", [b"x" * 1000] * 50)
    source = importer.open_input(str(log))
    out = io.StringIO()
    try:
        with import_progress(source, Console(file=out, force_terminal=True, width=100)) as progress:
            source.stream.read()
            progress(12345)
    finally:
        source.close()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    assert "importing 12,345 lines" in text and "50.0/50.0 kB read" in text  # bytes read of the file's 50,050


def test_no_progress_bar_when_stderr_is_not_a_terminal(tmp_path):
    source = importer.open_input(str(write(tmp_path / "a.log", [b"x"])))
    try:
        with import_progress(source) as progress:
            assert progress is None
    finally:
        source.close()


# --- parsing ---------------------------------------------------------------------------------


def test_log_times_respect_their_offset():
    assert importer.parse_log_time("10/Oct/2000:13:55:36 -0700") == int(
        datetime(2000, 10, 10, 20, 55, 36, tzinfo=timezone.utc).timestamp()
    )
    assert importer.parse_log_time("01/jan/2024:00:30:00 +0530") == int(
        datetime(2023, 12, 31, 19, 0, tzinfo=timezone.utc).timestamp()
    )
    for bad in ("10/Foo/2000:13:55:36 -0700", "31/Feb/2024:10:00:00 +0000", "10/Oct/2000:13:55:36", "yesterday"):
        assert importer.parse_log_time(bad) is None


def test_format_detection():
    combined = log_line("198.51.100.1", 0, "GET", "/", 200, "Mozilla/5.0")
    assert importer.detect_format(combined) == "combined"
    assert importer.detect_format(log_line("198.51.100.1", 0, "GET", "/", 200, None)) == "common"
    assert importer.detect_format(' {"ip": "x"}') == "jsonl"


def test_log_line_fields():
    line = (
        r'::1 - frank [10/Oct/2000:13:55:36 -0700] "GET http://example.com/a\"b?x=1 HTTP/1.0" 200 - "-" "curl/8 \"x\""'
    )
    visit = importer.log_line_visit(line, "combined", "s", include_all=True)
    assert visit["path"] == '/a"b' and visit["ip"] == "::1" and visit["ts"] == 971211336
    assert re.fullmatch(r"[0-9a-f]{32}", visit["session_id"])
    assert importer.log_line_visit(line, "combined", "s") == "crawler"
    assert visit["session_id"] == importer.session_id_for("s", "0:0:0:0:0:0:0:1", 'curl/8 \\"x\\"')
    assert visit["session_id"] != importer.session_id_for("other secret", "::1", 'curl/8 \\"x\\"')


def test_a_line_over_the_limit_is_read_past():
    data = b"a\n" + b"y" * 300 + b"\nb\r\n" + b"z" * 100
    assert list(importer.read_lines(io.BytesIO(data), max_line=100)) == [b"a\n", None, b"b\r\n", b"z" * 100]


# --- docs/cli.md ----------------------------------------------------------------------------------


def readme_import_commands() -> list[str]:
    doc = (REPO / "docs" / "cli.md").read_text()
    section = doc.split("## Importing access logs", 1)[1].split("\n## ", 1)[0]
    return [
        line
        for block in re.findall(r"```sh\n(.*?)```", section, re.S)
        for line in block.splitlines()
        if "counters-tasks import" in line
    ]


SITES = json.dumps({"shop": {"hosts": ["shop.example.pt"]}, "default": {"hosts": ["www.example.com"]}})


@pytest.mark.processes
def test_readme_import_commands_run(raw_conn, redis_url, tmp_path, monkeypatch):
    """Every command of docs/cli.md's "Importing access logs", as a shell runs it, over generated logs."""
    commands = readme_import_commands()
    assert len(commands) >= 4
    use_settings(monkeypatch, COUNTERS_SITES=SITES)
    rng = random.Random(12)
    lines, expected = make_log(rng, 300, time.time())
    write(tmp_path / "access.log", lines)
    write(tmp_path / "access.log.2.gz", make_log(rng, 300, time.time())[0], compress=True)
    write(tmp_path / "access.log.3.gz", make_log(rng, 300, time.time())[0], compress=True)
    write(tmp_path / "shop-access.log", make_log(rng, 100, time.time(), extras=False)[0])
    hosts = [b"shop.example.pt", b"www.example.com", b"www.example.com:443", b"unknown.example"]
    write(
        tmp_path / "all.log",
        [rng.choice(hosts) + b" " + line for line in make_log(rng, 100, time.time(), extras=False)[0]],
    )
    (tmp_path / "visits.jsonl").write_text(json.dumps({"ip": "203.0.113.9", "path": "/", "ts": time.time() - 5}) + "\n")
    env = celery_env(
        redis_url, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", COUNTERS_SITES=SITES
    )
    counted = 0
    for command in commands:
        result = subprocess.run(
            ["bash", "-c", f"set -o pipefail; {command}"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, (command, result.stdout, result.stderr)
        assert "counted" in result.stdout, command
        if "--json" in shlex.split(command, comments=True):
            counted += json.loads(result.stdout)["counted"]
        else:
            counted += int(re.search(r"lines read, (\d+) counted", result.stdout)[1])
    total = sum(sitestats.site_visit_info(raw_conn, site=site).pv for site in ("default", "shop"))
    assert counted == total > len(expected.views)
    assert sitestats.site_visit_info(raw_conn, site="shop").pv > 0


def test_a_line_cut_short_is_read_with_what_it_kept(raw_conn, tmp_path):
    """A logger that cuts long lines leaves the time, request and status: such a line is a page
    view as GoAccess counts it (before: malformed, its page and day short by one); what is still
    unreadable is counted and its first line numbers shown."""
    now = int(time.time())
    whole = log_line("198.51.100.1", now, "GET", "/caf%C3%A9", 200, BROWSERS[0])
    cut_agent = log_line("198.51.100.2", now, "GET", "/caf%C3%A9", 200, BROWSERS[1])[:-30]
    cut_referer = log_line("198.51.100.3", now, "GET", "/caf%C3%A9", 304, BROWSERS[2]).split(' "https://')[0] + ' "http'
    cut_size = f'198.51.100.4 - - [{log_time(now, 0)}] "GET /caf%C3%A9 HTTP/1.1" 200'
    cut_bot = log_line("66.249.66.1", now, "GET", "/caf%C3%A9", 200, BOTS[0])[:-20]
    unreadable = f'198.51.100.5 - - [{log_time(now, 0)}] "GET /caf%C3%A9 HTT'
    lines = [whole, cut_agent, cut_referer, cut_size, cut_bot, unreadable, "garbage"]
    summary = run_import("--json", str(write(tmp_path / "cut.log", [line.encode() for line in lines])))
    assert summary["counted"] == 4 and summary["skipped"]["crawler"] == 1
    assert summary["skipped"]["malformed"] == 2 and summary["malformed_lines"] == [6, 7]
    day = utc_day(now)
    assert sitestats.site_visit_info(raw_conn, day, "/café") == (day, 4, 4)
    output = run_import(str(write(tmp_path / "again.log", [lines[0].encode()] + [b"garbage"] * 12)))
    assert "unreadable lines: 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 ..." in output
