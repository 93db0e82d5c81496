"""``counters-tasks demo``: the local stack, a burst of simulated visits, a report, then exit.

The visits go the way a busy app sends them: ``VisitRecorder`` batches of ``record_visits``
(site PV/UV, the ``hits`` counters, daily uniques) plus a ranking bump of the page, applied by
a real worker. The report compares what this burst changed in Redis (hits counters, ranking,
all-time page views: each read before and after) with what it sent, and says "exact" only when
every one of them matches; the day's totals, which include earlier runs, are shown apart.
"""

from __future__ import annotations

import random
import sys
import time
import uuid
from collections import Counter
from datetime import date
from typing import cast

from .. import counters, ranking, sitestats, uniques
from ..core import days
from ..local.stack import Stack
from ..recorder import VisitRecorder
from ..store.client import RedisClient, get_redis
from . import views

DEMO_PATHS = ["/", "/about", "/blog", "/blog/redis-counters", "/pricing", "/docs", "/docs/api", "/contact"]

DEMO_NETWORKS = {  # a /24 of each country (iptocc): the demo's visitors come from these
    "81.2.69": ("GB", "en-GB,en;q=0.9"),
    "5.9.0": ("DE", "de-DE,de;q=0.9,en;q=0.6"),
    "80.12.0": ("FR", "fr-FR,fr;q=0.9"),
    "133.0.0": ("JP", "ja"),
    "3.0.0": ("US", "en-US,en;q=0.9"),
    "200.160.0": ("BR", "pt-BR,pt;q=0.9"),
}
"""Where the demo's visitors are (a network's country, and the Accept-Language its browsers send),
so that the who-visits panels show countries and languages as a real site's would."""

DEMO_BROWSERS = [  # (user agent, weight): browsers of 2026 on desktops, phones and a tablet
    (
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/142.0.0.0 Safari/537.36",
        30,
    ),
    (
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.6 Safari/605.1.15",
        12,
    ),
    ("Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:145.0) Gecko/20100101 Firefox/145.0", 8),
    ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/142.0.0.0 Safari/537.36", 4),
    (
        "Mozilla/5.0 (iPhone; CPU iPhone OS 18_6 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.6 Mobile/15E148 Safari/604.1",
        20,
    ),
    (
        "Mozilla/5.0 (Linux; Android 15; Pixel 9) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/142.0.0.0 Mobile Safari/537.36",
        16,
    ),
    (
        "Mozilla/5.0 (iPad; CPU OS 18_6 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.6 Mobile/15E148 Safari/604.1",
        6,
    ),
]
"""The user agents the demo's visitors send, by weight (no crawler: the middleware skips those)."""


def demo_visitors(rng: random.Random, count: int = 450) -> list[tuple[str, str, str]]:
    """``count`` visitors, each ``(ip, user agent, accept-language)``: an address of one of
    ``DEMO_NETWORKS``, a browser of ``DEMO_BROWSERS`` and its network's language, kept by the
    visitor for the whole burst (a visitor keeps its browser)."""
    networks = list(DEMO_NETWORKS.items())
    agents, weights = zip(*DEMO_BROWSERS, strict=True)
    visitors = []
    for n in range(count):
        prefix, (_country, language) = networks[n % len(networks)]
        visitors.append((f"{prefix}.{n // len(networks) + 1}", rng.choices(agents, weights)[0], language))
    return visitors


BOARD = "demo:pages"


def progress(done: int, total: int, label: str, width: int = 40) -> None:
    filled = int(width * done / total) if total else width
    sys.stderr.write(f"\r{label:<10} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _hits(conn, name: str) -> int:
    return sum(total for _bucket, total in counters.get_counter(conn, name, 86400))


def _top(board: ranking.Ranking, limit: int) -> list[tuple[str, int]]:
    """``board``'s first members with their totals (``Ranking.top`` with ``withscores``, typed
    with both of its shapes)."""
    return cast("list[tuple[str, int]]", board.top(limit=limit, withscores=True))


def day_summary(conn: RedisClient, day: date) -> list[str]:
    """The report's lines on the site's ``day`` (every run of the stack in it): page views and the
    two unique-visitor figures, each labelled with what it counts and why they differ (the
    dashboard says the same: visitors by IP in its UV, sessions by cookie in its uniques)."""
    site = views.stats_view(conn, day=day)  # its UV marked as every table marks it: exact, or ≈N ±X%
    sessions = uniques.unique_visitors(conn, day)
    return [
        f"site today (all runs): {site['pv']} page views, {views.uv_text(site)} unique visitors (by IP), "
        f"{sessions} unique sessions (by session cookie)",
        "  (two ways to count people: one IP shared by several browsers is one visitor and several sessions,",
        "  one browser on several networks one session and several visitors; the demo draws IPs and sessions",
        "  independently, so the two differ)",
    ]


def who_summary(conn: RedisClient, day: date) -> list[str]:
    """The report's lines on who visited the site on ``day`` (every run in it): the top three of
    each who-visits table, or why there are none (the tables off on the workers)."""
    if not sitestats.client_tables_status()["client_tables"]:
        return ["who visits: the tables are off (COUNTERS_CLIENT_TABLES=off)"]
    lines = []
    for kind in ("browser", "os", "device", "country", "language"):
        rows = sitestats.top_clients(conn, day, day, kind, limit=3)
        lines.append(f"who visits today, {kind}: " + ", ".join(f"{row.source} {row.pv}" for row in rows))
    return lines


def run_demo(visits: int, concurrency: int = 2, seed: int = 1, timeout: float = 300) -> int:
    """Returns 0 when every figure the demo can check is exact, 1 otherwise."""
    stack = Stack(flower=False, concurrency=concurrency, beside=True)  # beside a running `run`: on its Redis
    try:
        stack.start()
        stack.wait_worker_ready()
        conn = get_redis()
        rng = random.Random(seed)
        visitors = demo_visitors(rng)
        sessions = [str(uuid.uuid4()) for _ in range(300)]
        board = ranking.Ranking(conn, BOARD)
        before_hits = {path: _hits(conn, counters.PAGE_HITS + path) for path in DEMO_PATHS}
        before_top = dict(_top(board, 100))
        before_pv = sitestats.site_visit_info(conn).pv
        before_page_pv = {path: sitestats.site_visit_info(conn, None, path).pv for path in DEMO_PATHS}
        sent: Counter[str] = Counter()
        recorder = VisitRecorder(max_batch=500, max_delay=0.1)
        now = time.time()
        for i in range(visits):
            path = rng.choices(DEMO_PATHS, weights=[8, 2, 4, 3, 2, 3, 1, 1])[0]
            ts = now - rng.uniform(0, 600)  # visits over the last ten minutes
            ip, agent, language = rng.choice(visitors)
            recorder.record(ip, path, rng.choice(sessions), ts, user_agent=agent, language=language)
            recorder.incr_ranking(BOARD, path, 1, ts)
            sent[path] += 1
            if i % 200 == 0 or i == visits - 1:
                progress(i + 1, visits, "sent")
        if not recorder.close(timeout=60):
            print("demo: the broker did not take every batch", file=sys.stderr)
            return 1
        deadline = time.monotonic() + timeout
        while True:
            applied = sitestats.site_visit_info(conn).pv - before_pv
            progress(min(applied, visits), visits, "counted")
            top_now = dict(_top(board, 100))
            if applied >= visits and sum(top_now.values()) - sum(before_top.values()) >= visits:
                break
            stack.check_alive()
            if time.monotonic() > deadline:
                print(f"\ndemo: only {applied} of {visits} visits counted after {timeout}s", file=sys.stderr)
                return 1
            time.sleep(0.2)
        today = days.today()
        print()
        print(
            f"This burst: {visits} visits sent, {applied} counted. Its figures below are what it changed in "
            f"Redis (after minus before);"
        )
        print("'today' columns are the day's totals, with every earlier run of the stack in them.")
        print("(UV: unique visitors, told apart by IP)")
        print(f"{'path':<24}{'sent':>7}{'hits':>7}{'rank':>7}{'PV':>7}  |{'PV today':>10}{'UV today':>10}   per minute")
        exact = applied == visits
        for path in sorted(DEMO_PATHS, key=lambda p: -sent[p]):
            hits = _hits(conn, counters.PAGE_HITS + path) - before_hits[path]
            rank = top_now.get(path, 0) - before_top.get(path, 0)
            page_pv = sitestats.site_visit_info(conn, None, path).pv - before_page_pv[path]
            exact &= hits == sent[path] == rank == page_pv
            info = views.stats_view(conn, day=today, path=path)
            series = [t for _b, t in counters.get_counter(conn, counters.PAGE_HITS + path, 60)][-10:]
            print(
                f"{path:<24}{sent[path]:>7}{hits:>7}{rank:>7}{page_pv:>7}  |{info['pv']:>10}{views.uv_text(info):>10}   "
                f"{' '.join(map(str, series))}"
            )
        print("\n".join(day_summary(conn, today)))
        print("\n".join(who_summary(conn, today)))
        print(f"top pages ({BOARD}, last 24 h): {', '.join(m for m, _ in _top(board, 3))}")
        print(
            f"known counters: {len(counters.known_counters(conn))}; "
            f"this burst exact (sent = hits = rank = PV, per path): {'yes' if exact else 'NO'}"
        )
        return 0 if exact else 1
    finally:
        stack.stop()
