"""The upgrade of key layout 1 to 2 with real processes (issue 42): a deployment of layout 1 with a
day of data, upgraded while messages are queued: every figure the sum of both, nothing counted
twice.

The layout-1 code is this repository's own, at the commit before layout 2 (``layout1_commit``),
exported from its history into a temporary directory and run first on PYTHONPATH (and as the
working directory: ``python -m`` puts it before PYTHONPATH)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from counters_tasks import counters, sitestats, tasks
from counters_tasks.core.clients import who_of
from counters_tasks.core.days import local_day
from counters_tasks.core.sources import referrer_domain
from counters_tasks.local.waiting import wait_until
from counters_tasks.store import deployment
from tests.support.faults import broker_idle, figures_of, site_pv
from tests.support.procs import REPO, CeleryProcess, celery_env, cli, start_worker

pytestmark = pytest.mark.processes

VISITS = 3000
PER_MESSAGE = 300
AGENTS = [
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{n}.0.0.0 Safari/537.36",
    "Mozilla/5.0 (X11; Linux x86_64; rv:{n}.0) Gecko/20100101 Firefox/{n}.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_{n} like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148",
]
LANGUAGES = ["en-US,en;q=0.8", "de-DE,de;q=0.9", "fr", "ja", "pt-BR"]
REFERRERS = [None, "https://news.example.com/a", "https://search.example.org/?q=x", "https://blog.example.net/"]


def layout1_commit() -> str:
    """The last commit of layout 1: the parent of the first commit that made ``LAYOUT = 2``."""
    found = subprocess.run(
        ["git", "log", "--reverse", "--format=%H", "-S", "LAYOUT = 2", "--", "counters_tasks/store/deployment.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if found.returncode != 0 or not found.stdout.split():
        pytest.fail(
            f"the repository's history is missing (git log in {REPO}: {found.stderr.strip() or 'no commit made LAYOUT = 2'}):"
            " this test runs the layout-1 code of the commit before layout 2; clone with history (not --depth 1)"
        )
    return f"{found.stdout.split()[0]}^"


@pytest.fixture(scope="module")
def layout1_tree(tmp_path_factory) -> Path:
    """The layout-1 code, exported from the repository's history (``git archive``)."""
    tree = tmp_path_factory.mktemp("layout1")
    commit = layout1_commit()
    archive = subprocess.run(["git", "archive", commit], cwd=REPO, capture_output=True)
    if archive.returncode != 0:
        pytest.fail(f"git archive {commit} failed (is the repository's history there?): {archive.stderr.decode()}")
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


def layout1_env(env: dict[str, str], tree: Path) -> dict[str, str]:
    return {**env, "PYTHONPATH": f"{tree}:{env['PYTHONPATH']}"}


def run_layout1(env: dict[str, str], tree: Path, code: str, *args: str) -> subprocess.CompletedProcess:
    """``python -c code args`` with the layout-1 tree first on the path."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=tree,
        env=layout1_env(env, tree),
        capture_output=True,
        text=True,
        timeout=300,
    )


class Layout1Worker(CeleryProcess):
    """A worker of the layout-1 tree (its working directory: ``python -m`` puts it first)."""

    def __init__(self, env: dict[str, str], tree: Path, log: Path) -> None:
        self.log = log
        self._log_file = open(log, "wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "counters_tasks", "--config", "celeryconfig", "worker"]
            + ["-Q", "visits", "-c", "2", "-n", "layout1@%h", "--loglevel", "INFO", "--without-mingle"]
            + ["--without-gossip", "-O", "fair"],
            cwd=tree,
            env=layout1_env(env, tree),
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def day_of_visits(ts: float) -> list[dict]:
    """VISITS views of one day by 400 visitors, with user agents, languages, referrers and sessions."""
    out = []
    for n in range(VISITS):
        visitor = n * 7919 % 400
        item = {
            "ip": f"{1 + visitor % 200}.{visitor % 7}.{visitor // 7 % 256}.9",
            "path": f"/up/{n * 31 % 50}",
            "session_id": str(uuid.UUID(int=visitor * 1_000_003 + n // 40)),
            "ts": ts,
            "user_agent": AGENTS[visitor % 3].format(n=60 + visitor % 90),
            "language": LANGUAGES[visitor % 5],
        }
        if REFERRERS[n % 4]:
            item["referrer"] = REFERRERS[n % 4]
        out.append(item)
    return out


def plain_count(items: list[dict]) -> dict:
    """Every figure of the day, counted in plain Python from the visits."""
    ts = items[0]["ts"]
    pv_path: Counter = Counter()
    uv_path: dict[str, set] = defaultdict(set)
    referrers: Counter = Counter()
    devices: Counter = Counter()
    languages: Counter = Counter()
    for item in items:
        pv_path[item["path"]] += 1
        uv_path[item["path"]].add(item["ip"])
        referrers[referrer_domain(item.get("referrer"))] += 1
        who = who_of(item["ip"], item["user_agent"], item["language"])
        devices[who[2]] += 1
        languages[who[4]] += 1
    site = (len(items), len({item["ip"] for item in items}))
    return {
        "site_day": site,
        "site_all": site,
        "paths": {p: ((pv_path[p], len(uv_path[p])), (pv_path[p], len(uv_path[p]))) for p in sorted(pv_path)},
        "referrers": dict(referrers),
        "devices": dict(devices),
        "languages": dict(languages),
        "uniques": len({uuid.UUID(item["session_id"]).hex[:15] for item in items}),
        "hits": [(counters.bucket_start(ts, p), len(items)) for p in counters.PRECISIONS],
        "hits_path": {p: [(counters.bucket_start(ts, 60), pv_path[p])] for p in sorted(pv_path)},
    }


def read_back(conn, items: list[dict]) -> dict:
    """The same figures read through the public functions: the fault tests' (``figures_of``), and
    the day's referrers, devices and languages."""
    ts = items[0]["ts"]
    day = local_day(ts)
    return {
        **figures_of(conn, ts, sorted({item["path"] for item in items})),
        "referrers": {row.source: row.pv for row in sitestats.top_sources(conn, day, day, "referrer", 100)},
        "devices": {row.source: row.pv for row in sitestats.top_clients(conn, day, day, "device", 100)},
        "languages": {row.source: row.pv for row in sitestats.top_clients(conn, day, day, "language", 100)},
    }


APPLY_IN_PART = """
import json, sys
import redis
from counters_tasks import sitestats, visits
from counters_tasks.core.days import local_day
from counters_tasks.sitestats import site_day
from counters_tasks.store import deployment
assert deployment.LAYOUT == 1, deployment.__file__
items, message_id = json.loads(sys.argv[1]), sys.argv[2]
conn = redis.Redis.from_url(sys.argv[3])
day = local_day(items[0]["ts"])
real, queued = site_day._queue_day_call, []

def first_only(*args, **kwargs):  # the message's first site_day call sent, the others lost
    queued.append(args)
    if len(queued) == 1:
        real(*args, **kwargs)

site_day._queue_day_call = first_only
try:
    visits.apply_visits(conn, items, message_id=message_id)
except ValueError:  # (its replies fewer than its calls: as a worker, it would not acknowledge it)
    pass
print(json.dumps({"applied": sitestats.site_visit_info(conn, day).pv, "calls": len(queued), "file": deployment.__file__}))
"""

REFUSES = """
import redis, sys
from counters_tasks.store import deployment
try:
    deployment.ensure(redis.Redis.from_url(sys.argv[1]))
except deployment.LayoutMismatch as exc:
    print("refused:", exc)
"""


def apply_in_part(env: dict[str, str], tree: Path, items: list[dict], message_id: str) -> int:
    """``items`` applied in part by the layout-1 code under ``message_id``: its first ``site_day``
    call sent (marked ``<id>/d0``), its others lost (its other tables' calls sent, each under its
    own marker): returns the views counted."""
    ran = run_layout1(env, tree, APPLY_IN_PART, json.dumps(items), message_id, env["COUNTERS_REDIS_URL"])
    assert ran.returncode == 0, ran.stderr[-3000:]
    done = json.loads(ran.stdout)
    assert done["file"].startswith(str(tree)), done
    assert 0 < done["applied"] < len(items), done
    return done["applied"]


def test_a_layout_1_deployment_upgraded_with_messages_queued_counts_everything_once(
    layout1_tree, fault_env, counters_conn, broker_conn, publisher, tmp_path, capsys, monkeypatch
):
    """A day of visits in messages of PER_MESSAGE: one applied in part by layout-1 code and left
    queued, the others sent to a layout-1 worker SIGKILLed a third of the way (some applied, some
    in flight, some queued); ``counters-tasks migrate``; a layout-1 process then refuses the
    deployment; a layout-2 worker drains the queue: every figure equals a plain count of the
    visits, once each."""
    monkeypatch.setattr(deployment, "LAYOUT", 1)  # (this process reads the layout-1 figures until the migration)
    ts = float(int(time.time()))
    items = day_of_visits(ts)
    env = celery_env(
        fault_env["COUNTERS_REDIS_URL"], **fault_env, COUNTERS_VISIBILITY_TIMEOUT="2", COUNTERS_CLIENT_TABLES="on"
    )
    payloads = [items[first : first + PER_MESSAGE] for first in range(0, len(items), PER_MESSAGE)]
    # one message applied in part by layout-1 code (some of its site_day calls, marked <id>/d<n>), left queued
    partial_id = str(uuid.uuid4())
    part = apply_in_part(env, layout1_tree, payloads[0], partial_id)
    assert counters_conn.hget(deployment.marker_name(), "layout") == b"1"
    tasks.record_visits.apply_async((payloads[0],), task_id=partial_id, producer=publisher)
    old = Layout1Worker(env, layout1_tree, tmp_path / "layout1.log")
    new = None
    try:
        for payload in payloads[1:]:
            tasks.record_visits.apply_async((payload,), producer=publisher)
        wait_until(  # SIGKILL in the middle of the day: some messages applied, some in flight, some queued
            lambda: site_pv(counters_conn, ts) >= part + VISITS // 3,
            timeout=120,
            interval=0.01,
            what=f"a third of the visits by the layout-1 worker; log:\n{old.output()[-3000:]}",
        )
        old.kill()
        at_kill, queued = site_pv(counters_conn, ts), broker_conn.llen("visits") + broker_conn.zcard("unacked_index")
        assert at_kill < VISITS + part and queued > 0, (at_kill, queued)

        wait_until(lambda: old.process.poll() is not None, timeout=10, what="the layout-1 worker gone")
        done = cli(env, "migrate")
        assert done.returncode == 0 and "migrated the key layout 1 -> 2" in done.stdout, done.stdout + done.stderr
        refused = run_layout1(env, layout1_tree, REFUSES, env["COUNTERS_REDIS_URL"])
        assert refused.returncode == 0 and "refused:" in refused.stdout, refused.stdout + refused.stderr
        monkeypatch.setattr(deployment, "LAYOUT", 2)

        new = start_worker(env, tmp_path / "layout2.log", name="layout2", extra=("-O", "fair"))
        wait_until(
            lambda: broker_idle(broker_conn) and site_pv(counters_conn, ts) >= VISITS,
            timeout=180,
            what=f"the queue drained; pv={site_pv(counters_conn, ts)}; log:\n{new.output()[-3000:]}",
        )
    finally:
        old.kill()
        if new is not None:
            new.stop()
    assert read_back(counters_conn, items) == plain_count(items)
    assert counters_conn.hget(deployment.marker_name(), "layout") == b"2"
    with capsys.disabled():
        print(
            f"\n[upgrade] {VISITS} visits in {len(payloads)} messages: {part} views of one applied in part by "
            f"layout-1 code, {at_kill} counted when its worker was killed ({queued} messages left), the rest "
            f"by a layout-2 worker after migrate: every figure once"
        )
