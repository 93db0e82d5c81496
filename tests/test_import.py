"""``counters-tasks import`` on logs the test writes (combined, common, .gz, stdin, JSON lines),
checked against figures computed here from the generated lines, not from the importer."""

from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime, timezone

import pytest

from counters_tasks import counters, sitestats, uniques
from counters_tasks.core.days import local_day
from counters_tasks.sitestats import SiteCount
from counters_tasks.store import keys
from tests.support.procs import REPO, celery_env

pytestmark = pytest.mark.processes

AGENTS = ["Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0", "Mozilla/5.0 (iPhone) Safari/604.1",
          "Mozilla/5.0 (Windows NT 10.0) Chrome/119.0"]
BOTS = ["Googlebot/2.1 (+http://www.google.com/bot.html)", "curl/8.1.2", "-"]


def log_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).astimezone().strftime("%d/%b/%Y:%H:%M:%S %z")


class Log:
    """Generated access-log lines and, alongside, what should be counted from them."""

    def __init__(self, seed: int, start: float, days: int, n: int, combined: bool = True):
        rng = random.Random(seed)
        self.lines: list[str] = []
        self.views: list[tuple[str, str, str, float]] = []  # (ip, path, agent, ts) of counted views
        self.reasons: dict[str, int] = defaultdict(int)
        ips = [f"203.0.{rng.randrange(4)}.{rng.randrange(1, 250)}" for _ in range(80)]
        for _ in range(n):
            ts = start + rng.uniform(0, days * 86400)
            ip, agent = rng.choice(ips), rng.choice(AGENTS)
            path = rng.choice(["/", "/about", "/blog/1", "/blog/2", "/pricing"])
            method, status, kind = "GET", rng.choice([200, 200, 200, 304, 301]), "view"
            roll = rng.random()
            if roll < 0.05:
                method, kind = "POST", "method"
            elif roll < 0.10:
                status, kind = rng.choice([404, 500, 403]), "status"
            elif roll < 0.15:
                path, kind = rng.choice(["/static/app.css", "/img/logo.PNG", "/favicon.ico", "/robots.txt"]), "static"
            elif roll < 0.20 and combined:
                agent, kind = rng.choice(BOTS), "bot"
            query = "?utm=x" if rng.random() < 0.1 else ""
            line = f'{ip} - - [{log_time(ts)}] "{method} {path}{query} HTTP/1.1" {status} {rng.randrange(100, 9000)}'
            if combined:
                line += f' "https://example.com/" "{agent}"'
            self.lines.append(line)
            if kind == "view":
                self.views.append((ip, path, agent if combined else "", ts))
            else:
                self.reasons[kind] += 1
        for garbage in ["", "not a log line", '1.2.3.4 - - [99/Foo/2020:00:00:00 +0000] "GET / HTTP/1.1" 200 1 "-" "x"']:
            self.lines.append(garbage)
            if garbage:
                self.reasons["malformed"] += 1

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    def check(self, conn, extra_views: int = 0) -> None:
        pv, uv = defaultdict(int), defaultdict(set)
        sessions = defaultdict(set)
        for ip, path, agent, ts in self.views:
            day = local_day(ts)
            for where in (None, path):
                pv[day, where] += 1
                uv[day, where].add(ip)
            sessions[day].add((ip, agent))
        for (day, where), views in pv.items():
            assert sitestats.site_visit_info(conn, day, where) == SiteCount(day, views, len(uv[day, where])), (day, where)
        for day, seen in sessions.items():
            assert uniques.unique_visitors(conn, day) == len(seen), day
        assert sitestats.site_visit_info(conn).pv == len(self.views) + extra_views
        assert sitestats.site_visit_info(conn).uv == len({ip for ip, *_ in self.views})
        recent = [ts for *_, ts in self.views if ts > time.time() - 100 * 86400]
        if recent:
            total = sum(t for _, t in counters.get_counter(conn, "hits", 86400))
            assert total == len(recent)


def run_import(redis_url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "counters_tasks", "import", *args], cwd=REPO, input=stdin,
                          env=celery_env(redis_url), capture_output=True, text=True, timeout=240)


def summary_of(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return json.loads(result.stdout)


def test_combined_log_of_last_week_counts_every_page_view_once(raw_conn, redis_url, tmp_path):
    log = Log(1, time.time() - 7 * 86400, 6.9, 3000)
    path = tmp_path / "access.log"
    path.write_text(log.text())
    summary = summary_of(run_import(redis_url, "--json", str(path)))
    assert summary["lines"] == len(log.lines) - 1  # the empty line is not a line of the log
    assert summary["counted"] == len(log.views)
    assert summary["skipped"] == dict(log.reasons)
    log.check(raw_conn)
    again = summary_of(run_import(redis_url, "--json", str(path)))
    assert again["counted"] == 0 and again["already_imported"] == len(log.views)
    log.check(raw_conn)


def test_history_from_2015_and_400_days_ago_at_default_settings(raw_conn, redis_url, tmp_path):
    old = Log(2, datetime(2015, 3, 1, tzinfo=timezone.utc).timestamp(), 3, 1500)
    year_ago = Log(3, time.time() - 400 * 86400, 2, 1500)
    path = tmp_path / "history.log.gz"
    with gzip.open(path, "wt") as out:
        out.write(old.text() + year_ago.text())
    summary = summary_of(run_import(redis_url, "--json", "--format", "combined", str(path)))
    assert summary["counted"] == len(old.views) + len(year_ago.views)
    assert summary["first_view"] == local_day(min(ts for *_, ts in old.views)).isoformat()
    for log in (old, year_ago):  # days far apart: each day's PV is its own log's
        for day in {local_day(ts) for *_, ts in log.views}:
            assert sitestats.site_visit_info(raw_conn, day).pv == sum(1 for *_, ts in log.views if local_day(ts) == day)
    assert sitestats.site_visit_info(raw_conn).pv == len(old.views) + len(year_ago.views)


def test_a_rerun_after_the_dedupe_markers_expired_still_counts_nothing_twice(raw_conn, redis_url, tmp_path):
    log = Log(4, time.time() - 3 * 86400, 2, 1200)
    path = tmp_path / "a.log"
    path.write_text(log.text())
    summary_of(run_import(redis_url, "--json", str(path)))
    for key in raw_conn.scan_iter(match="*:seen:*", count=1000):
        raw_conn.delete(key)  # 15 minutes later: only the import ledger remembers
    assert raw_conn.hlen(keys.import_ledger()) == -(-len(log.views) // 500)
    summary = summary_of(run_import(redis_url, "--json", str(path)))
    assert summary["counted"] == 0
    log.check(raw_conn)
    # the same log with a day more appended: only the new lines count
    more = Log(5, time.time() - 86400, 0.9, 400)
    path.write_text(log.text() + more.text())
    summary = summary_of(run_import(redis_url, "--json", str(path)))
    assert summary["counted"] + summary["already_imported"] == len(log.views) + len(more.views)
    assert summary["counted"] < len(more.views) + 500  # the boundary chunk at most, again


def test_common_format_from_stdin_and_all(raw_conn, redis_url):
    log = Log(6, time.time() - 2 * 86400, 1.5, 800, combined=False)
    summary = summary_of(run_import(redis_url, "--json", "--all", "-", stdin=log.text()))
    static = log.reasons.get("static", 0)
    assert summary["counted"] == len(log.views) + static  # --all: static files count too
    assert "static" not in summary["skipped"] and summary["skipped"]["method"] == log.reasons["method"]


def test_json_lines_with_their_own_sessions(raw_conn, redis_url, tmp_path):
    rng = random.Random(7)
    now = time.time()
    items = [{"ip": f"198.51.100.{rng.randrange(1, 60)}", "path": rng.choice(["/a", "/b"]),
              "ts": now - rng.uniform(0, 86400), "session_id": f"{rng.randrange(40):08x}{'0' * 24}"} for _ in range(700)]
    items[5]["ts"] = datetime.fromtimestamp(items[5]["ts"], timezone.utc).isoformat()  # ISO 8601 too
    bad = [{"ip": "nope", "path": "/", "ts": now}, {"path": "/"}, {"ip": "1.2.3.4", "path": "/", "ts": now + 86400}]
    path = tmp_path / "views.jsonl"
    path.write_text("\n".join(json.dumps(i) for i in items + bad) + "\n")
    summary = summary_of(run_import(redis_url, "--json", str(path)))
    assert summary["counted"] == 700
    assert summary["skipped"] == {"invalid (bad_input)": 1, "malformed": 1, "invalid (future)": 1}
    def ts_of(item):
        return item["ts"] if isinstance(item["ts"], float) else datetime.fromisoformat(item["ts"]).timestamp()

    for day in {local_day(ts_of(i)) for i in items}:
        of_day = [i for i in items if local_day(ts_of(i)) == day]
        assert uniques.unique_visitors(raw_conn, day) == len({i["session_id"] for i in of_day})
        assert sitestats.site_visit_info(raw_conn, day).pv == len(of_day)


def test_text_summary_and_errors(raw_conn, redis_url, tmp_path):
    log = Log(8, time.time() - 86400, 0.5, 300)
    path = tmp_path / "s.log"
    path.write_text(log.text())
    result = run_import(redis_url, str(path))
    assert result.returncode == 0, result.stderr
    assert f"counted {len(log.views):,}" in result.stdout and "skipped (bot)" in result.stdout
    assert run_import(redis_url, str(tmp_path / "missing.log")).returncode == 2
    truncated = tmp_path / "t.log.gz"
    truncated.write_bytes(gzip.compress(log.text().encode())[:-30])
    cut = run_import(redis_url, str(truncated))
    assert cut.returncode == 1 and "run the import again" in cut.stderr
