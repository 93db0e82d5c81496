"""docs/privacy.md against ``counters-tasks tables --format json`` (the tables' declarations,
``core.table``): every table that holds something of a visitor is a row of its "What is stored"
table, with the horizon under the default settings, the setting that changes it and whether one
visitor can be erased as the declaration says; every other table is in its list of those that
hold nothing; no table is named there that does not exist. A declaration that changes fails here
until the page says it."""

from __future__ import annotations

import json
import os
import re

import pytest
from click.testing import CliRunner

from counters_tasks.core.settings import reset_settings
from counters_tasks.ops.cli import cli
from tests.support.procs import REPO

PRIVACY_DOC = REPO / "docs" / "privacy.md"
UNITS = {"minute": 1 / 1440, "minutes": 1 / 1440, "day": 1.0, "days": 1.0}
ROUNDING = 0.0006
"""How far a horizon written here may be from the JSON's (``kept_days``, rounded to 3 decimals)."""


@pytest.fixture
def listed(monkeypatch) -> dict[str, dict]:
    """``counters-tasks tables --format json`` under the default settings (no COUNTERS_* but the
    test server's and secret), by table name."""
    for name in list(os.environ):
        if name.startswith("COUNTERS_") and name not in ("COUNTERS_REDIS_URL", "COUNTERS_SECRET"):
            monkeypatch.delenv(name)
    reset_settings()
    result = CliRunner().invoke(cli, ["tables", "--format", "json"])
    assert result.exit_code == 0, result.output
    tables = json.loads(result.output)["tables"]  # (the package's: a test may have registered a toy table)
    return {entry["name"]: entry for entry in tables if entry["module"].startswith("counters_tasks.")}


def section(title: str) -> str:
    """The text of docs/privacy.md's ``## title`` section."""
    text = PRIVACY_DOC.read_text()
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"docs/privacy.md has no section {title!r}"
    return match.group(1)


def stored_rows() -> dict[str, list[str]]:
    """The rows of "What is stored"'s table, by table name: its cells."""
    rows = {}
    for line in section("What is stored").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        name = re.fullmatch(r"`([a-z_]+)`", cells[0])
        if line.startswith("| `") and name:
            assert name.group(1) not in rows, f"{name.group(1)} has two rows"
            rows[name.group(1)] = cells
    return rows


def nothing_listed() -> set[str]:
    """The tables "What is stored" says hold nothing of a visitor."""
    match = re.search(r"The other tables hold nothing of a visitor: (.*?)\(", section("What is stored"), re.S)
    assert match, "no list of the tables that hold nothing of a visitor"
    return set(re.findall(r"`([a-z_]+)`", match.group(1)))


def horizon_days(cell: str) -> float | None:
    """The horizon a "kept (defaults)" cell starts with, in days: ``N days``, ``N minutes`` (at
    most), or None for ``for ever``."""
    if cell.startswith("for ever"):
        return None
    match = re.match(r"(?:(\d[\d,]*) (minutes?|days?)|(\d+) minutes at most)", cell)
    assert match, f"a horizon is written 'N days', 'N minutes' or 'for ever': {cell!r}"
    if match.group(3):
        return int(match.group(3)) / 1440
    return int(match.group(1).replace(",", "")) * UNITS[match.group(2)]


def test_every_table_that_holds_a_visitor_is_a_row_as_declared(listed):
    rows = stored_rows()
    holding = {name for name, entry in listed.items() if entry["holds_visitor"]}
    assert holding, "no table holds anything of a visitor?"
    assert sorted(holding - set(rows)) == [], "tables holding something of a visitor that docs/privacy.md omits"
    assert sorted(set(rows) - set(listed)) == [], "docs/privacy.md names tables that do not exist"
    assert sorted(set(rows) - holding) == [], "rows of tables that hold nothing of a visitor"
    for name, cells in rows.items():
        entry = listed[name]
        _name, holds, kept, setting, erasable, why = cells
        assert holds and why, name
        assert setting == (f"`{entry['kept_setting']}`" if entry["kept_setting"] else "none"), name
        assert erasable == ("yes" if entry["visitor_erasable"] else "no"), name
        days = horizon_days(kept)
        if entry["kept_days"] is None:
            assert days is None, (name, kept)
        else:
            assert days is not None and abs(days - entry["kept_days"]) <= ROUNDING, (name, kept, entry["kept_days"])


def test_every_other_table_is_said_to_hold_nothing_of_a_visitor(listed):
    nothing = nothing_listed()
    assert sorted(nothing - set(listed)) == [], "docs/privacy.md names tables that do not exist"
    assert nothing == {name for name, entry in listed.items() if not entry["holds_visitor"]}


def test_the_page_is_linked_and_keeps_its_sections():
    for title in ("What is stored", "Raw IPs", "Retention", "Erasing one visitor", "Privacy modes"):
        section(title)
    assert "reliability.md#where-raw-ips-live" in section("Raw IPs")
    assert "### Where raw IPs live, and for how long" in (REPO / "docs" / "reliability.md").read_text()
    assert "(docs/privacy.md)" in (REPO / "README.md").read_text()
    assert "(privacy.md)" in (REPO / "docs" / "configuration.md").read_text()
    modes = section("Privacy modes")
    assert "| | `standard` (the default) | `daily` |" in modes and "visitor-days" in modes
