"""Where page views came from (``core.sources``, ``sitestats.top_sources``): referring domains and
campaign tags per site and day, reduced (no URL or query string kept), capped with ``(other)``,
over any range, the same from the API, the middleware and an access log of 2015."""

from __future__ import annotations

import json
import random
import time
from collections import Counter, defaultdict
from datetime import date, datetime, timezone
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner

from counters_tasks import InvalidInput, sitestats, visits
from counters_tasks.core import sources
from counters_tasks.core.days import local_day
from counters_tasks.integrations import common
from counters_tasks.ops import importer
from counters_tasks.ops.cli import cli
from counters_tasks.sitestats import sources as source_tables
from tests.support.procs import BROWSER_AGENT
from tests.support.servers import use_settings


def test_a_referrer_is_reduced_to_its_domain_and_a_campaign_to_its_tags():
    own = frozenset({"blog.example.com", "example.com:8443"})
    cases = {
        None: "(direct)",
        "": "(direct)",
        "-": "(direct)",
        "  ": "(direct)",
        "https://www.google.com/search?q=secret+words": "google.com",
        "http://News.YCombinator.com/item?id=1#top": "news.ycombinator.com",
        "https://user:pw@t.co:443/abc": "t.co",
        "android-app://com.google.android.gm/": "com.google.android.gm",
        "duckduckgo.com": "duckduckgo.com",
        "https://blog.example.com/other-post?x=1": "(internal)",
        "https://www.blog.example.com/": "(internal)",
        "https://example.com/": "(internal)",
        "about:blank": "(unknown)",
        "https://": "(unknown)",
        "http://[::1/": "(unknown)",
        "https://evil.example/\x00": "(unknown)",
        "x" * 3000: "(unknown)",
        "(internal)": "(internal)",
        "(direct)": "(direct)",
        "https://www.co": "www.co",
    }
    for referrer, expected in cases.items():
        assert sources.referrer_domain(referrer, own) == expected, referrer
        assert sources.referrer_domain(sources.referrer_domain(referrer, own), own) == expected  # idempotent
    with pytest.raises(InvalidInput):
        sources.referrer_domain(3)
    assert sources.campaign_of("a=1&utm_source=news&utm_medium=email&utm_campaign=Nov%20Sale&utm_term=x") == {
        "source": "news",
        "medium": "email",
        "campaign": "Nov Sale",
    }
    assert sources.campaign_of("utm_source=" + "y" * 500)["source"] == "y" * sources.MAX_TAG
    assert sources.campaign_of("utm_source=b%00ad&utm_medium=ok") == {"medium": "ok"}
    assert sources.campaign_of("") == sources.campaign_of(None) == sources.campaign_of("utm_source=") == {}
    for bad in ({"term": "x"}, {"source": 3}, ["source"]):
        with pytest.raises(InvalidInput):
            sources.check_campaign(bad)


REFERRERS = [
    "https://www.google.com/search?q=a",
    "https://news.ycombinator.com/item?id=7",
    None,
    "https://t.co/x",
    "https://www.google.com/url?sa=t",
]
TAGS = [None, {"source": "newsletter", "medium": "email"}, {"campaign": "black-friday"}]


def independent(seen: list[tuple[str, date, str, str | None, dict | None]]) -> dict:
    """(kind, day, source) -> (pv, uv) counted here, with plain urlsplit, not with core.sources."""
    views, who = Counter(), defaultdict(set)
    for ip, day, _path, referrer, tags in seen:
        host = urlsplit(referrer).hostname if referrer else None
        found = [("referrer", "(direct)" if host is None else host.removeprefix("www."))]
        found += [(f"utm_{k}", v) for k, v in (tags or {}).items()]
        for kind, source in found:
            views[kind, day, source] += 1
            who[kind, day, source].add(ip)
    return {key: (n, len(who[key])) for key, n in views.items()}


def read(conn, expected: dict, **options) -> dict:
    out = {}
    for kind, day in {(k, d) for k, d, _s in expected}:
        for s in sitestats.top_sources(conn, day, day, kind, 1000, **options):
            out[kind, day, s.source] = (s.pv, s.uv)
    return out


@pytest.mark.cluster
def test_sources_per_day_and_over_a_range_equal_an_independent_count(raw_conn):
    rng = random.Random(5)
    now = time.time() - 60
    seen, batch = [], []
    for n in range(400):
        ip, ts = f"198.51.100.{rng.randint(1, 40)}", now - rng.choice([0, 86400, 2 * 86400])
        referrer, tags = rng.choice(REFERRERS), rng.choice(TAGS)
        visit = {"ip": ip, "path": f"/p{n % 9}", "ts": ts}
        if referrer:
            visit["referrer"] = referrer
        if tags:
            visit["utm"] = tags
        batch.append(visit)
        seen.append((ip, local_day(ts), visit["path"], referrer, tags))
    visits.apply_visits(raw_conn, batch[:200], message_id="a")
    for visit in batch[200:]:
        visits.apply_visit(
            raw_conn,
            visit["ip"],
            visit["path"],
            None,
            visit["ts"],
            referrer=visit.get("referrer"),
            utm=visit.get("utm"),
        )
    visits.apply_visits(raw_conn, batch[:200], message_id="a")  # redelivered: nothing twice
    expected = independent(seen)
    assert read(raw_conn, expected) == expected
    for day in {d for _k, d, _s in expected}:  # every view has one referrer entry: they sum to the day's PV
        assert (
            sum(pv for (k, d, _s), (pv, _uv) in expected.items() if k == "referrer" and d == day)
            == sitestats.site_visit_info(raw_conn, day).pv
        )
    days = sorted({d for _k, d, _s in expected})
    over = sitestats.top_sources(raw_conn, days[0], days[-1], "referrer", 3)
    pv = Counter()
    ips = defaultdict(set)
    for ip, _day, _path, referrer, _tags in seen:
        source = "(direct)" if not referrer else urlsplit(referrer).hostname.removeprefix("www.")
        pv[source] += 1
        ips[source].add(ip)
    top3 = sorted(pv.items(), key=lambda item: (-item[1], item[0]))[:3]
    assert [(s.source, s.pv) for s in over] == top3
    assert all(s.uv == len(ips[s.source]) and not s.uv_approximate for s in over)  # <= 42 visitors a day: exact
    stored = b"".join(
        k + b"".join(v for pair in raw_conn.hgetall(k).items() for v in pair)
        for k in raw_conn.scan_iter(match="*:src*")
    )
    assert b"search" not in stored and b"?" not in stored and b"item" not in stored  # only domains are kept


def test_a_site_s_own_hosts_are_internal_and_sources_past_the_cap_count_as_other(raw_conn, monkeypatch):
    use_settings(
        monkeypatch, COUNTERS_SITES=json.dumps({"blog": {"hosts": ["blog.example.com"]}}), COUNTERS_MAX_DAY_SOURCES=3
    )
    now = time.time() - 60
    for n in range(8):
        visits.apply_visit(
            raw_conn, f"198.51.100.{n}", "/", None, now, site="blog", referrer=f"https://site{n}.example/page"
        )
    visits.apply_visit(raw_conn, "198.51.100.1", "/", None, now, site="blog", referrer="https://blog.example.com/a")
    visits.apply_visit(raw_conn, "198.51.100.2", "/", None, now, referrer="https://blog.example.com/a")  # default site
    day = local_day(now)
    found = {s.source: (s.pv, s.uv) for s in sitestats.top_sources(raw_conn, day, day, limit=100, site="blog")}
    assert found == {
        "site0.example": (1, 1),
        "site1.example": (1, 1),
        "site2.example": (1, 1),
        "(other)": (6, 6),
    }  # the site's own page: internal, but past the cap too
    assert sitestats.top_sources(raw_conn, day, day)[0].source == "blog.example.com"  # not the default site's own
    with pytest.raises(InvalidInput, match="kind"):
        sitestats.top_sources(raw_conn, day, day, "utm_term")
    result = CliRunner().invoke(cli, ["sources", "--site", "blog", "--from", day.isoformat(), "--format", "csv"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == "rank,source,pv,uv,uv_exact,uv_error" and "6,6,true,0.0" in result.stdout


def test_the_middleware_sends_the_reduced_referrer_and_the_pages_campaign():
    taken = []

    class Recorder:
        def record(self, ip, path, session_id=None, ts=None, user_agent=None, language=None, **source):
            taken.append((path, source))

        def incr_ranking(self, *args, **kwargs):
            pass

    counting = common.Counting(recorder=Recorder())
    for referer, query in (
        ("https://www.google.com/search?q=private", "utm_source=x&a=1"),
        ("https://shop.example:8080/cart", ""),
        (None, ""),
    ):
        headers = {"user-agent": BROWSER_AGENT, "host": "shop.example:8080"} | ({"referer": referer} if referer else {})
        visit = counting.begin(common.RequestInfo("GET", "/p", "198.51.100.7", headers, query=query))
        counting.response(visit, 200, [("Content-Type", "text/html")])
        counting.finish(visit)
    assert taken == [
        ("/p", {"referrer": "google.com", "utm": {"source": "x"}}),
        ("/p", {"referrer": "(internal)"}),
        ("/p", {}),
    ]


def log_2015(rng: random.Random) -> tuple[list[bytes], list[tuple]]:
    start = int(datetime(2015, 6, 1, tzinfo=timezone.utc).timestamp())
    referers = [
        "-",
        "https://www.google.com/search?q=x",
        "http://www.reddit.com/r/python/comments/1",
        "https://blog.example.com/older-post",
        "http://t.co/abc",
        "https://duckduckgo.com/?q=y",
    ]
    lines, seen = [], []
    for n in range(600):
        ts = start + rng.randint(0, 3 * 86400)
        ip, referer = f"198.51.100.{rng.randint(1, 40)}", rng.choice(referers)  # <= 42 a day: exact UV
        target = f"/post/{n % 13}" + rng.choice(["", "?utm_source=feed&utm_medium=rss", "?utm_campaign=launch"])
        when = datetime.fromtimestamp(ts, timezone.utc).strftime("%d/%b/%Y:%H:%M:%S +0000")
        lines.append(f'{ip} - - [{when}] "GET {target} HTTP/1.1" 200 512 "{referer}" "{BROWSER_AGENT}"'.encode())
        query = dict(part.split("=") for part in target.partition("?")[2].split("&") if part)
        tags = {k.removeprefix("utm_"): v for k, v in query.items()}
        seen.append(
            (
                ip,
                datetime.fromtimestamp(ts, timezone.utc).date(),
                target,
                None if referer == "-" else referer,
                tags or None,
            )
        )
    return lines, seen


def test_a_2015_access_logs_referrers_and_campaigns_equal_a_plain_python_count(raw_conn, monkeypatch):
    use_settings(monkeypatch, COUNTERS_SITES=json.dumps({"default": {"hosts": ["blog.example.com"]}}))
    lines, seen = log_2015(random.Random(2015))
    summary = importer.import_lines(raw_conn, lines)
    assert summary.counted == 600
    expected = {}
    for (kind, day, source), figures in independent(seen).items():
        expected[kind, day, "(internal)" if source == "blog.example.com" else source] = figures
    assert read(raw_conn, expected) == expected


@pytest.mark.cluster
@pytest.mark.usefixtures("bound_deployment")
def test_a_source_of_many_visitors_has_an_estimated_uv_that_lua_and_python_agree_on(raw_conn):
    from counters_tasks.store import hll, page_sketch

    now = time.time() - 60
    batch = [
        {"ip": f"10.1.{n // 250}.{n % 250}", "path": "/", "ts": now, "referrer": "https://google.com/"}
        for n in range(600)
    ]
    visits.apply_visits(raw_conn, batch[:300], message_id="a")
    visits.apply_visits(raw_conn, batch, message_id="b")  # 300 of them again: no more visitors
    day = local_day(now)
    [found] = sitestats.top_sources(raw_conn, day, day)
    assert (found.source, found.pv) == ("google.com", 900) and found.uv_approximate
    assert found.uv_error == hll.STANDARD_ERROR and abs(found.uv - 600) < 600 * 4 * hll.STANDARD_ERROR
    table = source_tables.site_day_table(day, "r")
    pv, uv, sketch = raw_conn.hget(table, "google.com").decode().split(" ", 2)
    # the HLL PFADD wrote in Lua counts as the read's UV; the stored <uv> of an HLL sketch is its
    # count when it became one (counting at each change is left to readers)
    assert (int(pv), sketch, raw_conn.pfcount(page_sketch.hll_key(table, "google.com"))) == (900, "#", found.uv)
    assert 42 < int(uv) <= found.uv


def test_an_international_referrer_is_one_source_in_its_idna_form_and_unreadable_bytes_are_unknown():
    """``http://bücher.example/`` however it reaches the package (text, ``%XX`` escapes, the
    punycode browsers send) is one source, ``xn--bcher-kva.example``; a host that is not text
    (U+FFFD, what the middleware reads bytes that are not UTF-8 as; escapes that are not UTF-8
    or are control characters) is ``(unknown)`` (docs/sources.md)."""
    cases = {
        "http://bücher.example/": "xn--bcher-kva.example",
        "http://www.BÜCHER.example:8080/x?y": "xn--bcher-kva.example",
        "http://b%C3%BCcher.example/": "xn--bcher-kva.example",
        "https://www.xn--bcher-kva.example/a": "xn--bcher-kva.example",
        "bücher.example": "xn--bcher-kva.example",  # a bare host, as a producer reduced it
        "http://\ufffd\ufffd.example/": "(unknown)",
        "http://%FF%FE.example/": "(unknown)",
        "http://a%00b.example/": "(unknown)",
        "http://a%2Fb.example/": "(unknown)",
        "http://日本.example/": "xn--wgv71a.example",
    }
    for referrer, expected in cases.items():
        assert sources.referrer_domain(referrer) == expected, referrer
        assert sources.referrer_domain(expected) == expected  # idempotent
    assert sources.referrer_domain("http://bücher.example/a", {"xn--bcher-kva.example"}) == "(internal)"
    assert sources.referrer_domain("http://xn--bcher-kva.example/", {"bücher.example:8080"}) == "(internal)"


def test_the_importer_reads_a_logged_referrer_as_the_middleware_reads_the_header():
    """A combined line's referer as nginx and Apache write it (bytes past ASCII as ``\\xHH``), as
    a log written in UTF-8 has it, and as gunicorn writes it (the header's bytes read as latin-1,
    written in UTF-8): the source the middleware gives the same header, ``xn--bcher-kva.example``;
    bytes that are not UTF-8, escaped, are ``(unknown)``. A target of 3,000 characters counts
    under its name cut to 512 bytes, as the middleware counts it (``core.validation.page_name``)."""
    when = datetime.now(timezone.utc).strftime("%d/%b/%Y:%H:%M:%S +0000")

    def line(referer: str, target: str = "/p") -> str:
        return f'203.0.113.9 - - [{when}] "GET {target} HTTP/1.1" 200 10 "{referer}" "{BROWSER_AGENT}"'

    logged = {
        r"http://b\xC3\xBCcher.example/": "xn--bcher-kva.example",  # nginx, Apache
        "http://bücher.example/": "xn--bcher-kva.example",  # a log in UTF-8
        "http://b\u00c3\u00bccher.example/": "xn--bcher-kva.example",  # gunicorn: UTF-8 bytes as latin-1 text
        r"http://\xFF\xFE.example/": "(unknown)",
    }
    for referer, expected in logged.items():
        visit = importer.log_line_visit(line(referer), "combined", "secret")
        assert isinstance(visit, dict) and visit["referrer"] == expected, (referer, visit)
    visit = importer.log_line_visit(line("-", "/long/" + "a" * 3000), "combined", "secret")
    assert isinstance(visit, dict) and visit["path"] == "/long/" + "a" * 506
