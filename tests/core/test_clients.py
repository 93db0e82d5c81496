"""Who visits (``core.clients``, ``sitestats.top_clients``): browser, operating system, device
type, country and language per site and day, from real user agents and addresses, capped with
``(other)``, the same from every route, and equal to a plain count with the same libraries."""

from __future__ import annotations

import random
import time
from collections import defaultdict
from datetime import date, datetime, timezone

import iptocc
import pytest
import ua_parser

from bench.traffic import AGENTS_2015
from counters_tasks import InvalidInput, sitestats, tasks, visits
from counters_tasks.core import clients, days
from counters_tasks.ops import importer
from counters_tasks.sitestats import sources, who_visits
from counters_tasks.store import keys
from tests.support.servers import use_settings

ADDRESSES = {  # addresses of blocks the registries assigned to these countries (or to none)
    "8.8.8.8": "US",
    "1.0.16.1": "JP",
    "81.2.69.142": "GB",
    "5.9.0.1": "DE",
    "2a00:1450:4001::1": "IE",
    "127.0.0.1": "(unknown)",
    "10.1.2.3": "(unknown)",
    "192.168.0.9": "(unknown)",
}


@pytest.fixture(autouse=True)
def tables_on(monkeypatch):
    """The tables of who visits are off by default (their cost a visit: docs/clients.md)."""
    use_settings(monkeypatch, COUNTERS_CLIENT_TABLES="on")


LIMIT_AGENTS = 3.8
"""The budget test's limit, in reference calls (``tests/support/server_cpu.py``): 1.6 times the most
it measured on the machine of record (its docstring)."""
VIEWS = ("browser", "browser_version", "os", "os_version", "device", "country", "language")


def test_the_rules_on_real_user_agents_headers_and_addresses():
    for agent, device, _weight in AGENTS_2015:
        parsed = ua_parser.parse(agent)
        client = clients.client_of(agent)
        assert client.device == device, agent
        assert clients.family(client.browser) == parsed.user_agent.family
        assert clients.shown(client.browser) == f"{parsed.user_agent.family} {parsed.user_agent.major}"
        if parsed.os is not None:
            assert clients.family(client.os) == parsed.os.family
    assert (
        clients.client_of(None) == clients.UNKNOWN_CLIENT
    )  # not told; "" and "-" (none sent) are bots: the crawler rule
    assert clients.client_of("") == clients.client_of("-") == (clients.UNKNOWN, clients.UNKNOWN, clients.BOT)
    assert clients.client_of("x" * 5000) == clients.UNKNOWN_CLIENT
    assert clients.client_of("Mozilla/5.0\x00(evil)") == clients.UNKNOWN_CLIENT
    assert clients.client_of("curl/8.5.0").device == clients.BOT  # the crawler rule's: a script
    for value in (3, b"Mozilla", ["a"]):
        with pytest.raises(InvalidInput):
            clients.client_of(value)
        with pytest.raises(InvalidInput):
            clients.language_of(value)
    languages = {
        None: "(unknown)",
        "": "(unknown)",
        "*": "(unknown)",
        "en-US,en;q=0.9": "en-US",
        "EN-gb": "en-GB",
        "de;q=0.3, fr-CH, fr;q=0.9": "fr-CH",
        "en;q=0.1, de;q=0.9": "de",
        "zh-Hans-CN,zh;q=0.9": "zh-CN",
        "es-419": "es-419",
        "not a language!": "(unknown)",
        "en;q=abc, de": "de",
        "x" * 2000: "(unknown)",
    }
    for header, expected in languages.items():
        assert clients.language_of(header) == expected, header
        assert clients.language_of(clients.language_of(header)) == expected  # idempotent: a producer may reduce
    for ip, country in ADDRESSES.items():
        assert clients.country_of(ip) == country == (iptocc.country_code(ip) or "(unknown)")


def headers_lines(rng: random.Random, n: int) -> tuple[list[bytes], list[tuple[str, date, str]]]:
    """An access log of 2015 (combined format) by browsers of ``AGENTS_2015`` and addresses of
    several countries (at most 42 visitors a day: exact UVs), and each line's (ip, day, agent)."""
    start = int(datetime(2015, 6, 1, tzinfo=timezone.utc).timestamp())
    prefixes = ["8.8.8.", "1.0.16.", "81.2.69.", "5.9.0.", "10.1.2."]
    browsers = [(agent, weight) for agent, device, weight in AGENTS_2015 if device != "bot"]
    lines, seen = [], []
    for _ in range(n):
        ts = start + rng.randint(0, 3 * 86400 - 1)
        ip = rng.choice(prefixes) + str(rng.randint(1, 8))
        agent = rng.choices([a for a, _w in browsers], [w for _a, w in browsers])[0]
        when = datetime.fromtimestamp(ts, timezone.utc).strftime("%d/%b/%Y:%H:%M:%S +0000")
        lines.append(f'{ip} - - [{when}] "GET /post/{rng.randint(1, 9)} HTTP/1.1" 200 512 "-" "{agent}"'.encode())
        seen.append((ip, datetime.fromtimestamp(ts, timezone.utc).date(), agent))
    return lines, seen


def plain_count(seen: list[tuple[str, date, str]]) -> dict[tuple[str, date], dict[str, tuple[int, int]]]:
    """(view, day) -> value -> (pv, uv), counted with ua-parser and iptocc directly, the device
    as AGENTS_2015 labels it."""
    devices = {agent: device for agent, device, _w in AGENTS_2015}
    views: dict = defaultdict(lambda: defaultdict(int))
    visitors: dict = defaultdict(lambda: defaultdict(set))
    for ip, day, agent in seen:
        parsed = ua_parser.parse(agent)
        browser, system = parsed.user_agent, parsed.os
        os_version = (
            f"{system.family} {system.major}.{system.minor}" if system.minor else f"{system.family} {system.major}"
        )
        values = {
            "browser": browser.family,
            "browser_version": f"{browser.family} {browser.major}",
            "os": system.family,
            "os_version": os_version if system.major else system.family,
            "device": devices[agent],
            "country": iptocc.country_code(ip) or "(unknown)",
            "language": "(unknown)",  # no access log carries Accept-Language
        }
        for view, value in values.items():
            views[view, day][value] += 1
            visitors[view, day][value].add(ip)
    return {key: {v: (n, len(visitors[key][v])) for v, n in per.items()} for key, per in views.items()}


def read_all(conn, keys_: list[tuple[str, date]]) -> dict[tuple[str, date], dict[str, tuple[int, int]]]:
    out = {}
    for view, day in keys_:
        found = sitestats.top_clients(conn, day, day, view, 1000)
        assert not any(c.uv_approximate for c in found)
        out[view, day] = {c.source: (c.pv, c.uv) for c in found}
    return out


def test_a_2015_access_logs_clients_equal_a_plain_python_count_with_the_same_libraries(raw_conn):
    lines, seen = headers_lines(random.Random(2015), 900)
    summary = importer.import_lines(raw_conn, lines)
    assert summary.counted == 900
    expected = plain_count(seen)
    assert len({day for _v, day in expected}) == 3 and len(expected[("country", date(2015, 6, 1))]) == 5
    assert read_all(raw_conn, list(expected)) == expected
    # over the range: each value's views summed, its visitors the union of the days'
    over = sitestats.top_clients(raw_conn, date(2015, 6, 1), date(2015, 6, 3), "device")
    per_device: dict[str, set[str]] = defaultdict(set)
    devices = {agent: device for agent, device, _w in AGENTS_2015}
    for ip, _day, agent in seen:
        per_device[devices[agent]].add(ip)
    assert {c.source: c.uv for c in over} == {device: len(ips) for device, ips in per_device.items()}
    assert sum(c.pv for c in over) == 900


def test_who_reads_a_page_of_client_pages_equals_a_plain_count_of_its_lines(raw_conn, monkeypatch, eager_app):
    """COUNTERS_CLIENT_PAGES: a page's own who-visits tables (who reads ``/post/3``). The 2015 log
    imported: each day's tables of ``/post/3`` equal the plain count of its lines alone, and of
    ``/post/7`` of its own; the site's tables stay the count of every line; a view of the page
    under another spelling (its query string) counts in it, from ``.delay()`` too; a page not
    listed is refused (its tables are not kept), and so is one read for another site's page."""
    use_settings(monkeypatch, COUNTERS_CLIENT_TABLES="on", COUNTERS_CLIENT_PAGES="/post/3, /post/7")
    lines, seen = headers_lines(random.Random(2015), 900)
    paths = [line.split(b'"GET ')[1].split(b" ")[0].decode() for line in lines]
    assert importer.import_lines(raw_conn, lines).counted == 900
    whole = plain_count(seen)
    assert read_all(raw_conn, list(whole)) == whole  # the site's own tables: every line
    for page in ("/post/3", "/post/7"):
        expected = plain_count([one for one, path in zip(seen, paths, strict=True) if path == page])
        assert 50 < sum(
            expected["device", day][d][0] for day in {d for _v, d in expected} for d in expected["device", day]
        )
        for view, day in whole:
            found = sitestats.top_clients(raw_conn, day, day, view, 1000, path=page)
            assert {c.source: (c.pv, c.uv) for c in found} == expected.get((view, day), {}), (page, view, day)
        over = sitestats.top_clients(raw_conn, date(2015, 6, 1), date(2015, 6, 3), "country", path=page)
        by_country: dict[str, set[str]] = defaultdict(set)
        for (ip, _day, _agent), path in zip(seen, paths, strict=True):
            if path == page:
                by_country[iptocc.country_code(ip) or "(unknown)"].add(ip)
        assert {c.source: c.uv for c in over} == {country: len(ips) for country, ips in by_country.items()}
    now = time.time()
    day = days.local_day(now)
    agent = AGENTS_2015[3][0]  # Firefox 41
    tasks.record_visit.delay("8.8.8.8", "/post/3?from=mail#top", None, now, user_agent=agent).get()
    tasks.record_visit.delay("8.8.8.8", "/post/4", None, now, user_agent=agent).get()  # not a listed page
    assert [tuple(c) for c in sitestats.top_clients(raw_conn, day, day, "browser", path="/post/3?x=1")] == [
        ("Firefox", 1, 1, False, 0.0)
    ]
    assert sitestats.site_visit_info(raw_conn, day).pv == 2  # the page's tables add no view to the site's
    with pytest.raises(InvalidInput, match="COUNTERS_CLIENT_PAGES"):
        sitestats.top_clients(raw_conn, day, day, "browser", path="/post/4")
    with pytest.raises(InvalidInput, match="COUNTERS_CLIENT_PAGES"):
        sitestats.folded_client_views(raw_conn, day, day, "browser", path="/elsewhere")


def test_a_listed_pages_name_follows_the_path_rules_in_force(monkeypatch):
    """COUNTERS_CLIENT_PAGES names pages as every route does (``check_path``), under the path
    settings of the moment: the same list read again under COUNTERS_PATH_CASE=lower is lower case."""
    use_settings(monkeypatch, COUNTERS_CLIENT_TABLES="on", COUNTERS_CLIENT_PAGES="/Pricing/?x=1")
    assert sitestats.client_pages() == {"/Pricing/"}
    use_settings(monkeypatch, COUNTERS_PATH_CASE="lower", COUNTERS_PATH_TRAILING_SLASH="strip")
    assert sitestats.client_pages() == {"/pricing"}


def test_every_write_route_gives_the_same_tables(raw_conn, eager_app):
    """``.delay()``, ``record_visits``' items as ``VisitRecorder`` writes them, and the module API:
    the same visits, the same tables (the worker derives all of it from the same fields)."""
    agent = AGENTS_2015[10][0]
    now = time.time()
    day = days.local_day(now)
    tasks.record_visit.delay("8.8.8.8", "/a", None, now, user_agent=agent, language="de-DE,de;q=0.9").get()
    items = [
        visits.app_visit({"ip": "8.8.8.8", "path": "/a", "ts": now, "user_agent": agent, "language": "de-DE,de;q=0.9"})
    ]
    assert (
        items[0]["language"] == "de-DE" and items[0]["user_agent"] == agent
    )  # reduced before the broker: the language only
    tasks.record_visits.delay(items).get()
    packed = visits.pack_visits([dict(items[0])])  # what VisitRecorder sends: the user agent reduced
    assert "user_agent" not in packed[0] and packed[0]["client"] == ["Chrome Mobile\t45", "Android\t5.0", "mobile"]
    assert visits.pack_visits([dict(packed[0])]) == packed  # packing packed items changes nothing
    tasks.record_visits.delay(packed).get()
    sitestats.record_visit(raw_conn, "8.8.8.8", "/a", now, user_agent=agent, language="de-DE,de;q=0.9")
    got = {view: [tuple(c) for c in sitestats.top_clients(raw_conn, day, day, view)] for view in VIEWS}
    assert got == {
        "browser": [("Chrome Mobile", 4, 1, False, 0.0)],
        "browser_version": [("Chrome Mobile 45", 4, 1, False, 0.0)],
        "os": [("Android", 4, 1, False, 0.0)],
        "os_version": [("Android 5.0", 4, 1, False, 0.0)],
        "device": [("mobile", 4, 1, False, 0.0)],
        "country": [("US", 4, 1, False, 0.0)],
        "language": [("de-DE", 4, 1, False, 0.0)],
    }


def test_a_bad_header_is_refused_on_its_own_and_the_others_are_applied(raw_conn):
    now = time.time()
    day = days.local_day(now)
    good = {"ip": "8.8.8.8", "path": "/", "ts": now, "user_agent": AGENTS_2015[0][0]}
    bad = [
        {**good, "user_agent": 42},
        {**good, "language": ["en"]},
        {**good, "client": ["Chrome\t45", "Windows\t7", "fridge"]},
        {**good, "client": ["Chrome\x00", "Windows", "desktop"]},
        {**good, "client": "Chrome"},
    ]
    with pytest.raises(InvalidInput):
        visits.app_visit({"ip": "8.8.8.8", "path": "/", "ts": now, "user_agent": 42})
    applied = visits.apply_visits(raw_conn, [bad[0], good, *bad[1:]], message_id="m-bad-headers")
    assert applied == 1
    assert [tuple(c) for c in sitestats.top_clients(raw_conn, day, day, "browser")] == [("Chrome", 1, 1, False, 0.0)]
    with pytest.raises(InvalidInput):
        sitestats.top_clients(raw_conn, day, day, "browsers")
    with pytest.raises(InvalidInput):
        sitestats.top_clients(raw_conn, day, day, "browser", 1001)


@pytest.mark.usefixtures("bound_deployment")
def test_with_the_tables_off_nothing_is_parsed_or_kept(raw_conn, monkeypatch):
    use_settings(monkeypatch, COUNTERS_CLIENT_TABLES="off")
    now = time.time()
    day = days.local_day(now)
    good = {"ip": "8.8.8.8", "path": "/", "ts": now, "user_agent": AGENTS_2015[0][0]}
    bad = [
        {**good, "user_agent": 42},
        {**good, "language": ["en"]},
        {**good, "client": ["Chrome", "Windows", "fridge"]},
    ]
    # bad input is refused item by item all the same, the good one applied
    assert visits.apply_visits(raw_conn, [*bad, good], message_id="m-off-bad") == 1
    sitestats.record_visit(raw_conn, "8.8.8.8", "/", now, user_agent=AGENTS_2015[0][0], language="en")
    assert sitestats.site_visit_info(raw_conn, day).pv == 2
    assert all(sitestats.top_clients(raw_conn, day, day, view) == [] for view in VIEWS)
    assert not raw_conn.exists(*[sources.site_day_table(day, letter) for letter in who_visits.CLIENT_KINDS.values()])


def fifty_thousand_user_agents(raw_conn, call_budget) -> None:
    """50,000 visits of a day, each of a new user agent (a new browser version) and one of 400
    languages, in VisitRecorder's batches: the caps hold with (other) counted, memory stated;
    its calls left in ``call_budget``."""
    raw_conn.flushdb()
    call_budget.reset()
    now = time.time()
    day = days.local_day(now)
    batch = []
    for n in range(50_000):
        agent = f"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{n}.0.{n % 97}.1 Safari/537.36"
        language = chr(97 + n % 400 // 26) + chr(97 + n % 26)  # 400 languages: past the cap too
        ip = f"10.{n // 65536}.{n // 256 % 256}.{n % 256}"
        batch.append({"ip": ip, "path": f"/post/{n % 50}", "ts": now, "user_agent": agent, "language": language})
    for first in range(0, len(batch), 1000):  # in VisitRecorder's batches (max_batch 1000)
        assert visits.apply_visits(raw_conn, batch[first : first + 1000], message_id=f"ua-{first}") == 1000
    cap = 200
    for view, letter in (("browser_version", "b"), ("language", "l")):
        found = sitestats.top_clients(raw_conn, day, day, view, 1000)
        other = [c for c in found if c.source == "(other)"]
        assert len(found) == cap + 1 and len(other) == 1, view
        assert sum(c.pv for c in found) == 50_000 and other[0].pv == 50_000 - sum(
            c.pv for c in found if c.source != "(other)"
        )
        assert raw_conn.hlen(sources.site_day_table(day, letter)) == cap + 1  # the cap's values and ""
    # a family is the sum of its tracked versions: the versions past the cap are under (other)
    by_family = [tuple(c)[:2] for c in sitestats.top_clients(raw_conn, day, day, "browser")]
    assert by_family == [("(other)", 50_000 - cap), ("Chrome", cap)]
    tables = [sources.site_day_table(day, letter) for letter in who_visits.CLIENT_KINDS.values()]
    sketches = who_visits.site_day_who_sketches(day)
    assert raw_conn.hlen(sketches) == 2 * (cap + 1) + 3  # 200 + (other) browsers and languages, one of each other kind
    memory = sum(raw_conn.memory_usage(key) or 0 for key in [*tables, sketches])
    print(f"who-visits tables of a site day with 50,000 user agents: {memory / 1024:.0f} KiB")
    assert memory < 5 * 201 * 400  # a tracked value's views and sketch (at most ~260 bytes) and their fields


@pytest.mark.long  # (alone on the machine for 10-30 s: make test-long)
@pytest.mark.budget
@pytest.mark.usefixtures("bound_deployment")
def test_fifty_thousand_user_agents_in_a_day_stay_under_the_cap_with_other_counted(raw_conn, call_budget):
    """And no call over 5 ms (the server's CPU time for each, ``tests/support/server_cpu.py``):
    a call takes at most DAY_HEADERS_PER_CALL distinct user agents and languages as the views carry
    them (~32 such views: a cut that depends on no setting or version, issue 42), and makes at most
    24 sketches into HLLs (``page_sketch.lua``). One run decides: each kind of call's median, in
    reference calls of about 0.6 ms (``tests/support/server_cpu.py``).

    Measured: the costliest kind (the site day's script, 1,600 calls) 2.2 reference calls, on
    Redis 7.0 here (fixed parts of 40 views: 1,326 calls of 2.4; layout 1's cut by at most 64
    who-visits values a call: 1,734 calls of 2.0 to 2.1). The limit, 3.8 (``LIMIT_AGENTS``), is 1.6
    times the most: code that makes these calls twice as costly fails (100 views a call, 4.5,
    would), a machine twice as slow passes (its reference calls are twice as slow too), and a
    moment taken from Redis moves neither median."""
    fifty_thousand_user_agents(raw_conn, call_budget)
    print(call_budget.report())
    assert call_budget.within(LIMIT_AGENTS) == []


def test_a_profiles_digest_is_made_with_the_bound_deployments_tag_key(raw_conn, monkeypatch):
    """A view's profile is named in its day's pairs SET by a digest keyed like a path's
    (``keys.path_digest``): with the tag key of the deployment bound now, not of the one this
    process met the profile under first (two deployments, or one whose key was made again after a
    data loss, would name one profile two ways and work its sketches again)."""
    who = ("Chrome", "Chrome 120", "Windows", "desktop", "US")
    names = []
    for prefix in ("ct:", "other:"):
        use_settings(monkeypatch, COUNTERS_KEY_PREFIX=prefix)
        with keys.bound(raw_conn, write=True):
            names.append((sitestats.who_digest(who), keys.path_digest("\x1f".join(who))))
    assert [made for made, _ in names] == [expected for _, expected in names]
    assert names[0] != names[1]
