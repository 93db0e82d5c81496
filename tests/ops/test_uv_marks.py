"""Every UV says what it is (issue 42): exact, or an estimate with its error bound, in the CLI's
table (``≈N ±X%``, the bound printed from the read's ``uv_error``; an exact figure plain), its
CSV and JSON (``uv_exact``, ``uv_error`` beside every ``uv``) and the API's JSON. The estimates
are made as users make them: a source, a browser and a page with more than 256 visitors on each of
two days (their range UV a union of sketches), the site over two days with visitors on both (a
union of HyperLogLogs), and each day of ``COUNTERS_UV_MODE=hll``. The expected marks are read
from ``sitestats``, never from a constant of the test's."""

from __future__ import annotations

import csv
import io
import json
import re
import time
from datetime import date, timedelta
from typing import Any

import pytest

from counters_tasks import sitestats
from counters_tasks.core.days import local_day
from counters_tasks.ops.web import create_app
from counters_tasks.store import page_sketch
from tests.ops.test_clients_reads import CHROME_120, FIREFOX_121, fake_health, run
from tests.support.dashboard import TestClient
from tests.support.servers import use_settings
from tests.support.uv_marks import bound

BIG, SMALL = page_sketch.EXACT_IDS + 20, 3
"""Visitors a day of the estimated rows (past the 256 ids kept exactly) and of the exact ones."""


def seed(conn, now: float) -> tuple[date, date]:
    """Two days: on each, BIG visitors of /big from big.example with Chrome, SMALL of /small from
    small.example with Firefox (other visitors each day). The first and the last day."""
    for offset in (1, 0):
        for n in range(BIG):
            sitestats.record_visit(
                conn,
                f"198.{51 + n // 250}.{offset}.{n % 250}",
                "/big",
                now - 86400 * offset,
                referrer="https://big.example/",
                user_agent=CHROME_120,
            )
        for n in range(SMALL):
            sitestats.record_visit(
                conn,
                f"203.0.{offset}.{n}",
                "/small",
                now - 86400 * offset,
                referrer="https://small.example/",
                user_agent=FIREFOX_121,
            )
    return local_day(now - 86400), local_day(now)


@pytest.fixture
def two_days(raw_conn, monkeypatch) -> tuple[date, date]:
    use_settings(monkeypatch, COUNTERS_CLIENT_TABLES="on")
    return seed(raw_conn, time.time())


def json_of(*args: str) -> dict:
    code, out, err = run(*args, "--json")
    assert code == 0, (out, err)
    return json.loads(out)


def csv_of(*args: str) -> list[dict[str, str]]:
    code, out, err = run(*args, "--format", "csv")
    assert code == 0, (out, err)
    return list(csv.DictReader(io.StringIO(out)))


def table_of(*args: str) -> str:
    code, out, err = run(*args)
    assert code == 0, (out, err)
    return out


def line_of(text: str, word: str) -> str:
    [line] = [line for line in text.splitlines() if word in line]
    return line


def row_of(text: str, first: str) -> list[str]:
    """The cells of a table's row whose first or second cell is ``first`` (a day; a ranked value),
    the table with or without borders (its columns at least two spaces apart)."""
    rows = [[cell.strip() for cell in re.split(r"│|\s{2,}", line) if cell.strip()] for line in text.splitlines()]
    [row] = [row for row in rows if first in row[:2]]
    return row


def test_stats_over_two_days_marks_the_estimated_range_and_leaves_the_exact_days_plain(raw_conn, two_days):
    """The site's UV over two days is a union of HyperLogLogs: ``≈N ±X%`` in the table, exact
    false and its error in the JSON; each day's own figure (the default mode) exact and plain."""
    first, last = two_days
    read = sitestats.site_visit_range(raw_conn, first, last)
    assert read.uv_approximate and read.uv_error > 0
    args = ("stats", "--from", first.isoformat(), "--to", last.isoformat())
    data = json_of(*args)
    assert (data["uv"], data["uv_exact"], data["uv_error"]) == (read.uv, False, read.uv_error)
    assert [(d["uv"], d["uv_exact"], d["uv_error"]) for d in data["days"]] == [(BIG + SMALL, True, 0.0)] * 2
    text = table_of(*args)
    assert f"UV ≈{read.uv} {bound(read.uv_error)}" in text, text
    for day in (first, last):
        assert row_of(text, day.isoformat())[2] == str(BIG + SMALL)
    rows = csv_of(*args)
    assert [(r["day"], r["uv"], r["uv_exact"], r["uv_error"]) for r in rows] == [
        (day.isoformat(), str(BIG + SMALL), "true", "0.0") for day in (first, last)
    ]


@pytest.mark.parametrize("path", ["/big", "/small"])
def test_a_pages_range_uv_is_marked_only_when_it_is_an_estimate(raw_conn, two_days, path):
    first, last = two_days
    read = sitestats.site_visit_range(raw_conn, first, last, path)
    assert read.uv_approximate is (path == "/big") and (read.uv_error > 0) is read.uv_approximate
    args = ("stats", "--from", first.isoformat(), "--to", last.isoformat(), "--path", path)
    data = json_of(*args)
    assert (data["uv"], data["uv_exact"], data["uv_error"]) == (read.uv, not read.uv_approximate, read.uv_error)
    header = line_of(table_of(*args), f"PV {read.pv}")
    if read.uv_approximate:
        assert f"UV ≈{read.uv} {bound(read.uv_error)}" in header, header
    else:
        assert f"UV {read.uv}" in header and "≈" not in header and "±" not in header, header


def check_row(text: str, value: str, uv: int, error: float) -> None:
    """A table's row of a value: its UV cell ``≈uv ±X%`` for an estimate, the plain figure for an exact one."""
    assert row_of(text, value)[3] == (f"≈{uv} {bound(error)}" if error else str(uv)), text


@pytest.mark.parametrize(
    ("words", "rows", "name", "read"),
    [
        (("sources",), "sources", "source", lambda conn, a, b: sitestats.top_sources(conn, a, b, "referrer", 10)),
        (("browsers",), "clients", "value", lambda conn, a, b: sitestats.top_clients(conn, a, b, "browser", 10)),
    ],
)
def test_sources_and_who_visits_mark_each_estimate_with_its_bound(raw_conn, two_days, words, rows, name, read):
    """big.example and Chrome: more than 256 visitors on each day, an estimate over the two; small.example
    and Firefox: exact. Table, CSV and JSON each say which, with the read's own error."""
    first, last = two_days
    expected = {c.source: c for c in read(raw_conn, first, last)}
    big, small = ("big.example", "small.example") if rows == "sources" else ("Chrome", "Firefox")
    assert expected[big].uv_approximate and expected[big].uv_error > 0
    assert not expected[small].uv_approximate and expected[small].uv_error == 0.0
    args = (*words, "--from", first.isoformat(), "--to", last.isoformat())
    data = json_of(*args)
    got = {r[name]: (r["uv"], r["uv_exact"], r["uv_error"]) for r in data[rows]}
    assert got == {v: (c.uv, c.uv_error == 0.0, c.uv_error) for v, c in expected.items()}
    text = table_of(*args)
    for value in (big, small):
        check_row(text, value, expected[value].uv, expected[value].uv_error)
    column = "source" if rows == "sources" else "browser"
    table = {r[column]: (r["uv"], r["uv_exact"], float(r["uv_error"])) for r in csv_of(*args)}
    assert table[big] == (str(expected[big].uv), "false", expected[big].uv_error)
    assert table[small] == (str(expected[small].uv), "true", 0.0)


def test_each_day_of_the_hll_mode_is_marked_an_estimate(raw_conn, monkeypatch):
    """``COUNTERS_UV_MODE=hll``: a day's UV is its HyperLogLog's estimate; every day of ``stats``
    (table, CSV, JSON) says so with the day's bound, a day with no visitor stays an exact 0."""
    use_settings(monkeypatch, COUNTERS_UV_MODE="hll")
    first, last = seed(raw_conn, time.time())
    before = first - timedelta(days=1)
    day_error = sitestats.site_visit_range(raw_conn, last, last).uv_error
    assert day_error > 0
    figures = {d.day: d.uv for d in sitestats.site_visit_range(raw_conn, before, last).days}
    args = ("stats", "--from", before.isoformat(), "--to", last.isoformat())
    data = json_of(*args)
    assert [(d["uv_exact"], d["uv_error"]) for d in data["days"]] == [
        (True, 0.0),
        (False, day_error),
        (False, day_error),
    ]
    text = table_of(*args)
    for day in (first, last):
        assert row_of(text, day.isoformat())[2] == f"≈{figures[day]} {bound(day_error)}"
    assert row_of(text, before.isoformat())[2] == "0"
    rows = csv_of(*args)
    assert [(r["uv_exact"], float(r["uv_error"])) for r in rows] == [
        ("true", 0.0),
        ("false", day_error),
        ("false", day_error),
    ]


def uv_figures(node: Any, where: str = "") -> list[tuple[str, dict]]:
    """Every dict of a JSON answer holding a ``uv``, with where it is."""
    found = []
    if isinstance(node, dict):
        if "uv" in node:
            found.append((where, node))
        for key, value in node.items():
            found += uv_figures(value, f"{where}.{key}")
    elif isinstance(node, list):
        for n, value in enumerate(node):
            found += uv_figures(value, f"{where}[{n}]")
    return found


def test_every_uv_of_the_api_says_whether_it_is_exact_and_its_error(raw_conn, two_days):
    first, last = two_days
    client = TestClient(create_app(raw_conn, auth=None, health=fake_health))
    span = {"from": first.isoformat(), "to": last.isoformat()}
    answers = {
        "stats": client.get("/api/stats", params=span).json(),
        "stats of a page": client.get("/api/stats", params={**span, "path": "/big"}).json(),
        "sources": client.get("/api/sources", params=span).json(),
        "clients": client.get("/api/clients", params=span).json(),
        "top-pages": client.get("/api/top-pages", params=span).json(),
    }
    seen = 0
    for name, answer in answers.items():
        for where, figure in uv_figures(answer):
            assert isinstance(figure["uv_error"], float) and figure["uv_error"] >= 0, (name, where, figure)
            assert figure["uv_exact"] is (figure["uv_error"] == 0.0), (name, where, figure)
            seen += 1
    assert seen == 3 + 3 + 2 + 2  # the two ranges and their days, two sources, two browsers
    assert not answers["stats"]["uv_exact"] and not answers["stats of a page"]["uv_exact"]
