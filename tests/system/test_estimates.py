"""Issue 42's acceptance: a small site's access log of 2015 imported with ``counters-tasks import``
at the default settings, every figure read back through the public reads equal to a plain count of
the same lines under the same rules (ua-parser, iptocc, the page view rule: ``bench.estimates``),
and every approximate unique-visitor figure within 2% of the true count.

The log (``bench.estimates.log_2015``, seeded): four days of May 2015, 10,000 lines, ~1,700 distinct
IPs, the browsers of 2015 with crawlers and odd user agents, search engines' and sites' referrers,
~2,000 paths under a steep Zipf (the home page has over 200 visitors a day, most pages a few).
``python -m bench.estimates`` is the same comparison as a bench (and on a real log: ``--log``).
An estimate's error depends on the visitor ids, HMACs of the IPs under COUNTERS_SECRET: under the
suite's secret every run gives the same figures.
"""

from __future__ import annotations

import io

from bench.estimates import log_2015, measure, plain_count, report


def test_the_log_is_shaped_like_a_small_sites():
    """The log has what makes estimates matter: rows with hundreds of visitors a day, many
    visitors over four days, most of them seen once, and a long tail of pages."""
    truth = plain_count(log_2015(10_000, seed=2015))
    assert len(truth.days()) == 4
    visitors = set().union(*(figure.ips for figure in truth.site.values()))
    assert 1_500 <= len(visitors) <= 1_900
    returning = sum(len(f.ips) for f in truth.site.values()) - len(visitors)
    assert 0.05 * len(visitors) <= returning <= 0.3 * len(visitors)  # seen on more than one day
    for day in truth.days():
        pages = sorted((len(f.ips) for f in truth.on_day("page", day).values()), reverse=True)
        assert pages[0] >= 200 and pages[1] >= 80, day  # the top pages: hundreds of visitors a day
        assert sum(n <= 3 for n in pages) > len(pages) / 2, day  # most pages: a few
    assert len(truth.over_range("page")) >= 500
    assert {"google.com", "(direct)", "news.ycombinator.com"} <= set(truth.over_range("referrer"))
    assert len(truth.over_range("browser")) >= 8 and len(truth.over_range("country")) >= 30


def test_the_2015_logs_figures_equal_a_plain_count_and_every_estimate_is_within_2_percent(raw_conn, tmp_path):
    """Issue 42: the log imported by the CLI; every row's PV (the site's and each page's days
    and range, each source and who-visits value of each day and of the four days) equal to the
    plain count's; every UV marked exact equal; every UV marked approximate (sources and
    who-visits values, each page's and the site's UV over the four days) within 2% of the true
    count. The figures of each table are printed (``-s``), the largest error of each in the
    failure's message."""
    lines = log_2015(10_000, seed=2015)
    log = tmp_path / "access.log"
    log.write_bytes(b"\n".join(lines) + b"\n")
    _truth, summaries = measure(raw_conn, lines, log)
    out = io.StringIO()
    report(summaries, out)
    text = out.getvalue()
    print(text)
    tables = {s.table: s for s in summaries}
    assert set(tables) == {
        "site a day",
        "site, 4 days",
        "page a day",
        "page, 4 days",
        "sources, a day",
        "sources, 4 days",
        "who visits, a day",
        "who visits, 4 days",
    }
    assert tables["page, 4 days"].rows >= 500 and tables["who visits, 4 days"].rows >= 100
    problems = [(row, why) for s in summaries for row, why in s.problems]
    assert not [p for p in problems if p[1].startswith("PV")], text
    assert not [p for p in problems if "marked exact" in p[1]], text
    largest = {s.table: f"{s.max_error:.1%}" for s in summaries}
    assert not problems, f"largest relative error per table: {largest}\n{text}"
