"""Many sites on one deployment (docs/sites.md): ``COUNTERS_SITES``, each site's figures apart from
the others' and the default site's keys those of a one-site deployment, a site's days in its own
zone, unknown sites refused before anything is written, the middleware's Host allowlist, and two
sites behind one worker pool under a real server, with the same log imported for each site."""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from datetime import date, datetime, timedelta, timezone
from urllib.parse import parse_qsl, urlsplit

import pytest
import redis
from click.testing import CliRunner

from counters_tasks import InvalidInput, counters, live, ranking, sitestats, uniques, visits
from counters_tasks.core import sites
from counters_tasks.core.days import local_day
from counters_tasks.core.settings import MAX_SITES, load_settings, reset_settings
from counters_tasks.errors import ConfigurationError
from counters_tasks.integrations import common
from counters_tasks.local.redis_server import free_port
from counters_tasks.ops import importer
from counters_tasks.sitestats import page_all, site_day, slots
from counters_tasks.store import keys
from tests.support.faults import wait_idle
from tests.support.procs import BROWSER_AGENT, Server, celery_env, purge_broker, start_worker
from tests.support.servers import flush, use_settings

SITES = {
    "blog": {"hosts": ["blog.example.com", "www.blog.example.com"], "timezone": "Asia/Tokyo"},
    "shop": {"hosts": ["shop.example.pt"], "timezone": "Europe/Lisbon"},
}
ZONES = {"default": "UTC", "blog": "Asia/Tokyo", "shop": "Europe/Lisbon"}
EVE_DAY = datetime.now(timezone.utc).date() - timedelta(days=1)
NEXT_DAY = EVE_DAY + timedelta(days=1)
EVENING = datetime(EVE_DAY.year, EVE_DAY.month, EVE_DAY.day, 20, 0, tzinfo=timezone.utc).timestamp()
"""20:00 UTC yesterday (``EVE_DAY``): already the next day (``NEXT_DAY``) in Tokyo, still
``EVE_DAY`` in Lisbon. Yesterday, not a fixed date: the visits stay within every retention horizon
and the dashboard's default week whenever the suite runs (a fixed 2026-11-25 fell out of the
Tokyo week on 2026-12-02, and its visitor sets would expire with COUNTERS_VISITOR_DAYS)."""


@pytest.fixture
def two_sites(monkeypatch):
    use_settings(monkeypatch, COUNTERS_SITES=json.dumps(SITES))


def key_names(client) -> set[str]:
    return {k.decode() if isinstance(k, bytes) else k for k in client.scan_iter(count=1000)}


# -- configuration ---------------------------------------------------------------------------


def test_sites_are_read_from_json_or_a_file_and_every_mistake_is_named(tmp_path):
    settings = load_settings({"COUNTERS_SITES": json.dumps(SITES)})
    assert [(s.name, s.hosts, s.timezone) for s in settings.sites] == [
        ("blog", ("blog.example.com", "www.blog.example.com"), "Asia/Tokyo"),
        ("shop", ("shop.example.pt",), "Europe/Lisbon"),
    ]
    path = tmp_path / "sites.json"
    path.write_text(json.dumps({"a": {}, "default": {"hosts": ["Example.COM."]}}))
    settings = load_settings({"COUNTERS_SITES": f"@{path}", "COUNTERS_TIMEZONE": "Europe/Paris"})
    assert [(s.name, s.hosts, s.timezone) for s in settings.sites] == [
        ("a", (), "Europe/Paris"),
        ("default", ("example.com",), "Europe/Paris"),
    ]
    wrong = {
        "not json": "{blog",
        "a list": "[]",
        "Blog": json.dumps({"Blog": {}}),
        "-blog": json.dumps({"-blog": {}}),
        "x" * 33: json.dumps({"x" * 33: {}}),
        "unknown key": json.dumps({"blog": {"host": ["a.example"]}}),
        "hosts not a list": json.dumps({"blog": {"hosts": "a.example"}}),
        "a bad host": json.dumps({"blog": {"hosts": ["a example"]}}),
        "a host twice": json.dumps({"blog": {"hosts": ["a.example"]}, "shop": {"hosts": ["A.example"]}}),
        "an unknown zone": json.dumps({"blog": {"timezone": "Mars/Olympus"}}),
        "the default site's own zone": json.dumps({"default": {"timezone": "Asia/Tokyo"}}),
        "too many": json.dumps({f"s{n}": {} for n in range(MAX_SITES + 1)}),
        "a missing file": f"@{tmp_path / 'none.json'}",
    }
    for what, raw in wrong.items():
        with pytest.raises(ConfigurationError, match="COUNTERS_SITES"):
            load_settings({"COUNTERS_SITES": raw})
            pytest.fail(what)
    assert (
        len(load_settings({"COUNTERS_SITES": json.dumps({f"s{n}": {} for n in range(MAX_SITES)})}).sites) == MAX_SITES
    )


def test_a_site_name_is_checked_against_the_configuration(two_sites):
    assert sites.check_site(None) == sites.check_site("default") == ""
    assert sites.check_site("blog") == "blog"
    for name in ("nope", "Blog", 3, "blog\x1fhits", "x" * 2000):
        with pytest.raises(InvalidInput):
            sites.check_site(name)
    assert sites.site_names() == ["default", "blog", "shop"]
    assert sites.zone_of("blog") == "Asia/Tokyo" and sites.zone_of("") == "UTC"


# -- each site apart -------------------------------------------------------------------------


@pytest.mark.cluster
def test_each_site_counts_apart_and_the_default_site_keeps_the_keys_of_one_site(raw_conn, monkeypatch):
    now = time.time() - 60
    visits.apply_visit(raw_conn, "198.51.100.7", "/a", "5f0c4c1e-5a2b-4c6d-8e9f-0a1b2c3d4e5f", now)
    ranking.Ranking(raw_conn, "likes").incr("post-1", 2, now)
    counters.update_counter(raw_conn, "signups", 3, now)
    one_site = key_names(raw_conn)
    flush(raw_conn)

    use_settings(monkeypatch, COUNTERS_SITES=json.dumps(SITES))
    for site in (None, "blog", "shop", "default"):
        visits.apply_visit(raw_conn, "198.51.100.7", "/a", "5f0c4c1e-5a2b-4c6d-8e9f-0a1b2c3d4e5f", now, site=site)
        ranking.Ranking(raw_conn, "likes", site=site).incr("post-1", 2, now)
        counters.update_counter(raw_conn, "signups", 3, now, site=site)
    visits.apply_visit(raw_conn, "198.51.100.8", "/b", None, now, site="blog")
    every_key = key_names(raw_conn)
    ours = {k for k in one_site if ":seen:" not in k and not k.endswith(("deployment", "tagkey"))}
    assert ours <= every_key, "the default site writes the keys of one site"
    shared = re.compile(r"ct:cnt:\{c\d+\}:due(:\d+)?|ct:boards:\{b\d+\}|.*:seen:.*|ct:throughput:.*")
    other = {k for k in every_key - one_site if "%1F" not in k and not k.endswith(("deployment", "tagkey"))}
    assert other and all(shared.fullmatch(k) for k in other), "besides, only shared indexes and markers"

    day = local_day(now)
    default = sitestats.site_visit_info(raw_conn, site="default")
    assert default == sitestats.site_visit_info(raw_conn) == (None, 2, 1)  # None and "default" twice
    assert sitestats.site_visit_info(raw_conn, site="blog") == (None, 2, 2)
    assert sitestats.site_visit_info(raw_conn, site="shop") == (None, 1, 1)
    assert sitestats.site_visit_info(raw_conn, local_day(now, "Asia/Tokyo"), "/b", site="blog")[1:] == (1, 1)
    assert sitestats.site_visit_info(raw_conn, day, "/b", site="shop")[1:] == (0, 0)
    assert sitestats.top_pages(raw_conn, day, day, site="shop") == [("/a", 1)]
    assert uniques.unique_visitors(raw_conn, day, site="shop") == 1
    assert uniques.unique_visitors(raw_conn, local_day(now, "Asia/Tokyo"), site="blog") == 1
    assert ranking.Ranking(raw_conn, "likes", site="blog").top(withscores=True, now=now) == [("post-1", 2)]
    assert ranking.Ranking(raw_conn, "likes").top(withscores=True, now=now) == [("post-1", 4)]
    assert ranking.known_boards(raw_conn, site="shop") == ranking.known_boards(raw_conn) == ["likes"]
    assert sum(t for _, t in counters.get_counter(raw_conn, "signups", 86400, now, site="blog")) == 3
    assert sum(t for _, t in counters.get_counter(raw_conn, "signups", 86400, now)) == 6
    assert counters.known_counters(raw_conn, site="blog") == ["hits", "hits:/a", "hits:/b", "signups"]
    assert counters.known_counters(raw_conn) == ["hits", "hits:/a", "signups"]
    assert ranking.delete_board(raw_conn, "likes", site="blog")
    assert ranking.known_boards(raw_conn, site="blog") == [] and ranking.known_boards(raw_conn) == ["likes"]
    # the cleaner's pass covers every site's counters in the same 256 groups
    assert counters.clean_counters(raw_conn, now + 86400 * 200) > 0
    assert counters.known_counters(raw_conn, site="blog") == counters.known_counters(raw_conn) == []


@pytest.mark.cluster
def test_an_unknown_site_is_refused_before_anything_is_written_and_alone_in_a_batch(raw_conn, two_sites):
    for call in (
        lambda: visits.apply_visit(raw_conn, "198.51.100.7", "/a", site="nope"),
        lambda: sitestats.record_visit(raw_conn, "198.51.100.7", "/a", site="Blog"),
        lambda: uniques.count_visit(raw_conn, "5f0c4c1e5a2b4c6d8e9f0a1b2c3d4e5f", site="nope"),
        lambda: counters.update_counter(raw_conn, "x", site="nope"),
        lambda: ranking.Ranking(raw_conn, "likes", site="nope"),
        lambda: sitestats.site_visit_info(raw_conn, site="nope"),
    ):
        with pytest.raises(InvalidInput, match="site"):
            call()
    assert not [k for k in key_names(raw_conn) if not k.endswith(("tagkey", "deployment"))]
    batch = [
        {"ip": "198.51.100.7", "path": "/a", "site": "blog"},
        {"ip": "198.51.100.7", "path": "/a", "site": "nope"},
        {"ip": "198.51.100.7", "path": "/a", "site": "shop"},
    ]
    assert visits.apply_visits(raw_conn, batch, message_id="batch-1") == 2
    assert [sitestats.site_visit_info(raw_conn, site=s).pv for s in ("default", "blog", "shop")] == [0, 1, 1]
    assert int(raw_conn.hget(keys.refusal_counts(), "bad_input")) == 1


@pytest.mark.cluster
def test_a_site_counts_its_days_in_its_own_zone(raw_conn, two_sites):
    for site in ("default", "blog", "shop"):
        visits.apply_visit(raw_conn, "198.51.100.7", "/a", "5f0c4c1e5a2b4c6d8e9f0a1b2c3d4e5f", EVENING, site=site)
    days = {site: local_day(EVENING, zone) for site, zone in ZONES.items()}
    assert days == {"default": EVE_DAY, "blog": NEXT_DAY, "shop": EVE_DAY}
    for site, day in days.items():
        assert sitestats.site_visit_info(raw_conn, day, site=site)[1:] == (1, 1), site
        assert uniques.unique_visitors(raw_conn, day, site=site) == 1, site
        other = EVE_DAY if day == NEXT_DAY else NEXT_DAY
        assert sitestats.site_visit_info(raw_conn, other, site=site)[1:] == (0, 0), site
    # the expected-uniques job fixes each site's tomorrow at its own 23:00
    tokyo_late = EVENING - 5.5 * 3600  # 14:30 UTC: 23:30 in Tokyo, 14:30 or 15:30 in Lisbon
    assert set(uniques.precompute_due(raw_conn, tokyo_late)) == {
        f"{EVE_DAY}",
        f"blog:{EVE_DAY}",
        f"blog:{NEXT_DAY}",
        f"shop:{EVE_DAY}",
    }


@pytest.mark.usefixtures("bound_deployment")
def test_no_site_pushes_its_or_another_sites_keys_onto_one_slot(monkeypatch):
    many = {f"site{n}": {} for n in range(200)}
    use_settings(monkeypatch, COUNTERS_SITES=json.dumps(many))
    day = date(2026, 11, 25)
    day_slots = {redis.cluster.key_slot(site_day.site_day_totals(day, site=site).encode()) for site in many}
    assert len(day_slots) > 190  # 200 sites' days: each its own slot (a few share by chance, 16,384 slots)
    assert len({redis.cluster.key_slot(keys.uniques_count(day, site=site).encode()) for site in many}) > 190
    assert slots.site_day_tag(day, "site1") != slots.site_day_tag(day) != slots.site_day_tag(day, "site2")
    # one site's paths and counters spread over the tag groups as the default site's do
    groups = {page_all.path_tag(keys.scoped("site1", f"/p{n}")) for n in range(300)}
    assert len(groups) > 150
    assert keys.scoped("site1", "hits") != "site1:hits" and keys.unscoped("site1", keys.scoped("site1", "x")) == "x"
    assert (
        keys.unscoped("", keys.scoped("site1", "x")) is None
        and keys.unscoped("site2", keys.scoped("site1", "x")) is None
    )


# -- the middleware's site ------------------------------------------------------------------


class Taken:
    def __init__(self) -> None:
        self.visits: list[tuple] = []
        self.skips: list[tuple] = []

    def record(self, ip, path, session_id=None, ts=None, site=None, user_agent=None, language=None):
        self.visits.append((path, site))

    def incr_ranking(self, *args, **kwargs):
        pass

    def skipped(self, route, reason, count=1):
        self.skips.append(reason)


def serve_one(counting: common.Counting, host: str | None, path: str = "/page") -> None:
    headers = {"user-agent": BROWSER_AGENT, "accept": "text/html"} | ({"host": host} if host is not None else {})
    visit = counting.begin(common.RequestInfo("GET", path, "198.51.100.7", headers))
    counting.response(visit, 200, [("Content-Type", "text/html")])
    counting.finish(visit)


def test_the_middleware_takes_the_site_from_the_host_allowlist_or_the_apps_callable(two_sites):
    taken = Taken()
    counting = common.Counting(recorder=taken)
    for host in (
        "blog.example.com",
        "WWW.Blog.Example.com.",
        "blog.example.com:8443",
        "shop.example.pt",
        "evil.example",
        "blog.example.com.evil.example",
        "",
        None,
        "shop.example.pt:x",
    ):
        serve_one(counting, host)
    assert [site for _path, site in taken.visits] == ["blog", "blog", "blog", "shop"]
    assert taken.skips == ["host"] * 5
    assert counting.stats.as_dict()["counted"] == 4

    by_header = common.Counting(recorder=taken, site=lambda info: info.headers.get("x-tenant"))
    taken.visits.clear()
    for tenant in ("shop", "default", "nope", None):
        headers = {"user-agent": BROWSER_AGENT, "host": "blog.example.com"} | ({"x-tenant": tenant} if tenant else {})
        visit = by_header.begin(common.RequestInfo("GET", "/p", "198.51.100.7", headers))
        by_header.response(visit, 200, [("Content-Type", "text/html")])
        by_header.finish(visit)
    assert taken.visits == [("/p", "shop"), ("/p", None)]  # the default site: no site= passed


def test_without_hosts_in_the_configuration_every_request_counts_for_the_default_site(monkeypatch):
    use_settings(monkeypatch, COUNTERS_SITES=json.dumps({"blog": {}}))
    taken = Taken()
    counting = common.Counting(recorder=taken)
    serve_one(counting, "anything.example")
    serve_one(counting, None)
    assert taken.visits == [("/page", None), ("/page", None)] and taken.skips == []


# -- two sites behind one worker pool, under a real server -----------------------------------

VISITORS = [f"203.0.113.{n}" for n in range(1, 9)]
HOSTS = {"blog.example.com": "blog", "www.blog.example.com": "blog", "shop.example.pt": "shop"}
FORGED = ["evil.example", "blog.example.com.evil.example", "127.0.0.1"]
ACCESS_FORMAT = '%({host}i)s %({x-forwarded-for}i)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s"'


REFERRERS = [
    "",
    "https://www.google.com/search?q=private+words",
    "https://news.ycombinator.com/item?id=1",
    "https://{host}/post/1",
]
CAMPAIGNS = ["", "?utm_source=news&utm_medium=email", "?utm_campaign=launch&x=1", "", "?utm_source=feed"]


class Model:
    """The test's own count of what it sent: per (site, local day) page views and visitors, per
    path, and per source (kind, source) with plain urllib, not the package's rule."""

    def __init__(self) -> None:
        self.views: dict[tuple[str, date, str], int] = defaultdict(int)
        self.who: dict[tuple[str, date, str], set[str]] = defaultdict(set)
        self.sources: dict[tuple[str, date, str, str], set[str]] = defaultdict(set)
        self.source_views: dict[tuple[str, date, str, str], int] = defaultdict(int)

    def add(self, site: str, ts: float, path: str, ip: str, referrer: str = "", query: str = "") -> None:
        day = local_day(ts, ZONES[site])
        self.views[site, day, path] += 1
        self.who[site, day, path].add(ip)
        host = urlsplit(referrer).hostname if referrer else None
        own = {h for h, s in HOSTS.items() if s == site}
        found = [
            ("referrer", "(direct)" if host is None else "(internal)" if host in own else host.removeprefix("www."))
        ]
        found += [(key, value) for key, value in parse_qsl(query.lstrip("?")) if key.startswith("utm_")]
        for kind, source in found:
            self.source_views[site, day, kind, source] += 1
            self.sources[site, day, kind, source].add(ip)

    def source_figures(self) -> dict:
        return {key: (n, len(self.sources[key])) for key, n in self.source_views.items()}

    def figures(self) -> dict:
        out: dict = {}
        for (site, day, path), n in self.views.items():
            out[site, day, path] = (n, len(self.who[site, day, path]))
        for site, day in {(s, d) for s, d, _p in self.views}:
            paths = [p for s, d, p in self.views if (s, d) == (site, day)]
            out[site, day, None] = (
                sum(self.views[site, day, p] for p in paths),
                len(set().union(*(self.who[site, day, p] for p in paths))),
            )
        return out


def read_figures(conn, wanted: dict) -> dict:
    return {
        (site, day, path): tuple(sitestats.site_visit_info(conn, day, path, site=site))[1:]
        for site, day, path in wanted
    }


def read_sources(conn, wanted: dict) -> dict:
    out = {}
    for site, day, kind in {(s, d, k) for s, d, k, _source in wanted}:
        for found in sitestats.top_sources(conn, day, day, kind, 100, site=site):
            out[site, day, kind, found.source] = (found.pv, found.uv)
    return out


def prefixed(monkeypatch, prefix: str) -> None:
    monkeypatch.setenv("COUNTERS_KEY_PREFIX", prefix)
    reset_settings()


@pytest.mark.processes
def test_two_sites_behind_one_worker_pool_through_the_middleware_and_the_same_log_imported(
    redis_url, tmp_path, monkeypatch
):
    monkeypatch.setenv("COUNTERS_SITES", json.dumps(SITES))
    prefixed(monkeypatch, "live:")
    env = celery_env(redis_url, COUNTERS_SITES=json.dumps(SITES), COUNTERS_KEY_PREFIX="live:")
    purge_broker(redis_url)
    worker = start_worker(env, tmp_path / "worker.log", concurrency=2).wait_ready()
    port = free_port()
    access_log = tmp_path / "access.log"
    server = Server(
        [
            "gunicorn",
            "-w",
            "2",
            "-b",
            f"127.0.0.1:{port}",
            "--access-logfile",
            str(access_log),
            "--access-logformat",
            ACCESS_FORMAT,
            "tests.support.two_sites:application",
        ],
        env,
        tmp_path / "gunicorn.log",
        port,
    )
    model = Model()
    likes: dict[str, int] = defaultdict(int)
    try:
        for n in range(60):
            host = list(HOSTS)[n % 3]
            path, ip = f"/post/{n % 7}", VISITORS[n % len(VISITORS)]
            referrer, query = REFERRERS[n % len(REFERRERS)].format(host=host), CAMPAIGNS[n % len(CAMPAIGNS)]
            sent = time.time()
            status, _h, _b = server.get(
                path + query, {"Host": host, "X-Forwarded-For": ip} | ({"Referer": referrer} if referrer else {})
            )
            assert status == 200
            model.add(HOSTS[host], sent, path, ip, referrer, query)
            if n % 5 == 0:
                assert server.get(f"/like/p{n % 2}", {"Host": host, "X-Forwarded-For": ip}, method="POST")[0] == 200
                likes[HOSTS[host], f"p{n % 2}"] += 1
        for n, host in enumerate(FORGED * 4):  # a Host no site lists: counted for none
            assert server.get(f"/post/{n}", {"Host": host, "X-Forwarded-For": VISITORS[0]})[0] == 200
            assert server.get("/like/p0", {"Host": host, "X-Forwarded-For": VISITORS[0]}, method="POST")[0] == 200
    finally:
        assert server.stop() == 0, server.log.read_text()[-3000:]
    broker = redis.Redis.from_url(load_settings(env).broker_url)
    try:
        wait_idle(broker, timeout=60)
    finally:
        broker.close()
        assert worker.stop() == 0, worker.output()[-3000:]

    expected, expected_sources = model.figures(), model.source_figures()
    conn = redis.Redis.from_url(redis_url)
    try:
        assert read_figures(conn, expected) == expected
        assert read_sources(conn, expected_sources) == expected_sources
        default_total = sitestats.site_visit_info(conn, site="default")
        assert default_total.pv == 0, "a forged Host counted for no site, the default one included"
        all_time = {site: sitestats.site_visit_info(conn, site=site).pv for site in ("blog", "shop")}
        assert all_time == {"blog": 40, "shop": 20}
        for site in ("blog", "shop"):
            board = ranking.Ranking(conn, "likes", site=site).top(withscores=True)
            assert sorted(board) == sorted((m, n) for (s, m), n in likes.items() if s == site), site
        assert ranking.known_boards(conn) == []
        assert live.visitors_now_by_site(conn) == {"default": 0, "blog": 8, "shop": 8}  # right now, per site
        from counters_tasks import skips

        assert skips.counts(conn)[("middleware", "host")] >= len(FORGED) * 4 * 2  # the views and the likes

        # the same access log imported, each host's lines for its site, under another prefix
        lines = [line for line in access_log.read_text().splitlines() if '"GET /post/' in line]
        per_site: dict[str, list[str]] = defaultdict(list)
        for line in lines:
            host, _, combined = line.partition(" ")
            if host in HOSTS:
                per_site[HOSTS[host]].append(combined)
        assert sum(map(len, per_site.values())) == 60
        prefixed(monkeypatch, "import:")
        from counters_tasks.ops.cli import cli

        for site, site_lines in per_site.items():
            log = tmp_path / f"{site}.log"
            log.write_text("\n".join(site_lines) + "\n")
            result = CliRunner().invoke(cli, ["import", "--site", site, "--json", str(log)], catch_exceptions=False)
            assert result.exit_code == 0, result.output
            assert json.loads(result.stdout)["counted"] == len(site_lines)
        imported = read_figures(conn, expected)
        assert imported == expected
        assert read_sources(conn, expected_sources) == expected_sources
        again = importer.import_lines(conn, (line.encode() for line in per_site["shop"]), site="shop")
        assert again.counted == 0  # the ledger: the same lines for the same site count once

        # the whole log at once, each line for the site its virtual host names (forged hosts skipped)
        prefixed(monkeypatch, "vhost:")
        log = tmp_path / "vhost.log"
        log.write_text("\n".join(lines) + "\n")
        result = CliRunner().invoke(
            cli, ["import", "--format", "vhost_combined", "--output", "json", str(log)], catch_exceptions=False
        )
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout)
        assert (summary["counted"], summary["skipped"]["host"]) == (60, len(FORGED) * 4)
        assert read_figures(conn, expected) == expected
        assert read_sources(conn, expected_sources) == expected_sources
    finally:
        conn.close()


def test_the_importer_counts_for_the_site_it_is_given_and_refuses_an_unknown_one(raw_conn, two_sites):
    stamp = datetime.fromtimestamp(EVENING, timezone.utc).strftime("%d/%b/%Y:%H:%M:%S +0000")
    line = (f'198.51.100.7 - - [{stamp}] "GET /a HTTP/1.1" 200 10 "-" "{BROWSER_AGENT}"').encode()
    with pytest.raises(InvalidInput, match="site"):
        importer.import_lines(raw_conn, [line], site="nope")
    assert importer.import_lines(raw_conn, [line], site="blog").counted == 1
    assert importer.import_lines(raw_conn, [line], site="blog").counted == 0
    assert importer.import_lines(raw_conn, [line]).counted == 1  # the default site: another import
    assert sitestats.site_visit_info(raw_conn, NEXT_DAY, site="blog").pv == 1  # Tokyo's day
    assert sitestats.site_visit_info(raw_conn, EVE_DAY).pv == 1


def test_the_cli_and_the_dashboards_api_read_a_site_and_refuse_an_unknown_one(raw_conn, two_sites):
    from counters_tasks.ops.cli import cli
    from counters_tasks.ops.web import create_app
    from tests.support.dashboard import TestClient

    for site, ip in (("blog", "198.51.100.7"), ("blog", "198.51.100.8"), ("shop", "198.51.100.7")):
        visits.apply_visit(raw_conn, ip, "/a", None, EVENING, site=site)
    runner = CliRunner()
    result = runner.invoke(cli, ["stats", "--day", f"{NEXT_DAY}", "--site", "blog", "--json"])
    assert result.exit_code == 0, result.output
    assert (json.loads(result.stdout)["pv"], json.loads(result.stdout)["uv"]) == (2, 2)
    result = runner.invoke(
        cli, ["top-pages", "--from", f"{EVE_DAY}", "--to", f"{EVE_DAY}", "--site", "shop", "--format", "csv"]
    )
    assert result.exit_code == 0 and result.stdout.splitlines()[1:] == ["1,/a,1"], result.output
    assert runner.invoke(cli, ["stats", "--site", "nope"]).exit_code == 2

    client = TestClient(create_app(raw_conn, auth=False))
    config = client.get("/api/config", params={"site": "blog"}).json()
    assert config["sites"] == ["default", "blog", "shop"] and config["timezone"] == "Asia/Tokyo"
    assert config["site"] == "blog" and config["today"] == local_day(time.time(), "Asia/Tokyo").isoformat()
    stats = client.get("/api/stats", params={"day": f"{NEXT_DAY}", "site": "blog"}).json()
    assert (stats["pv"], stats["uv"]) == (2, 2)
    assert client.get("/api/stats", params={"day": f"{NEXT_DAY}"}).json()["pv"] == 0  # the default site
    refused = client.get("/api/stats", params={"site": "nope"})
    assert refused.status_code == 400 and "site" in refused.json()["error"]
