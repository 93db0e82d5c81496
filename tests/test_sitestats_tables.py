"""The site's tables are declared once, each in a module of its own (issue 41): its keys are the
rows of docs/keys.md, its retention and erasure said; a visit's write goes down through them;
visitor identity is the core's. Read from the files and the registry, no Redis."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

from counters_tasks import sitestats, uniques
from counters_tasks.core import table, visitors
from counters_tasks.core.settings import load_settings

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "counters_tasks"
SITESTATS = PACKAGE / "sitestats"

TABLES = ("site_day", "site_all", "page_day", "page_all", "pairs", "sources", "who_visits", "day_tops")
"""The site's stored tables, each declared by the module of its name."""

LOWER = ("page_day", "pairs", "sources", "who_visits", "site_all", "page_all", "slots")
"""The modules a visit's write goes down to from ``site_day``: they make their keys and their
part of the calls, and call nothing back."""


def site_rows() -> dict[str, str]:
    """The key pattern (first backticks) -> its type column, of each row of docs/keys.md's
    "Site PV/UV" section."""
    text = (REPO / "docs" / "keys.md").read_text()
    section = text.split("\n## Site PV/UV", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if line.startswith("| `"):
            cells = line.split(" | ")
            rows[re.match(r"\| `([^`]+)`", line).group(1)] = cells[1]
    return rows


def test_every_site_table_is_declared_in_the_module_of_its_name():
    for name in TABLES:
        declared = table.by_name(name)
        assert declared is not None, name
        assert declared.module == f"counters_tasks.sitestats.{name}"
        assert declared.fed_by == (() if name == "day_tops" else ("visit",)), name


def test_the_tables_keys_are_the_rows_of_docs_keys_md():
    rows = site_rows()
    declared = {key.pattern: key.type for name in TABLES for key in table.by_name(name).keys}
    assert declared.keys() <= rows.keys()
    assert {pattern for pattern in rows if ":seen:" not in pattern} == declared.keys()  # the markers: not here
    for pattern, kind in declared.items():  # the row's type, as its column begins
        assert rows[pattern].startswith(kind.split(" ")[0]), (pattern, kind, rows[pattern][:40])


def test_retention_and_erasure_are_said():
    settings = load_settings({"COUNTERS_SECRET": "s"})
    days = {name: table.by_name(name).retention.days_under(settings) for name in TABLES}
    assert days == {
        "site_day": 400,
        "site_all": None,
        "page_day": 400,
        "page_all": 400,
        "pairs": 2,
        "sources": 400,
        "who_visits": 400,
        "day_tops": 400,
    }
    assert table.by_name("page_all").retention.days_under(load_settings({"COUNTERS_PATH_KEEP_DAYS": "0"})) is None
    erasable = {name for name in TABLES if table.by_name(name).erasure.erasable}
    # the exact sets of visitor ids, and the sketches' lists of ids (issue 44: their HLLs named as estimates)
    assert erasable == {"site_day", "site_all", "page_all", "pairs", "page_day", "sources", "who_visits"}
    assert all(table.by_name(name).erasure.forget for name in erasable)
    for name in ("page_day", "sources", "who_visits", "site_day", "site_all", "page_all"):
        # sketches and HyperLogLogs (hll mode, the range HLL): the estimate's bound is the reason
        assert "0.81%" in table.by_name(name).erasure.how
    assert not table.by_name("day_tops").erasure.holds_visitor


def imports_of(path: Path) -> set[str]:
    """The sitestats modules (last names) and the package's top modules ``path`` imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found |= {node.module} if node.module else {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 2 and node.module is None:
            found |= {alias.name for alias in node.names}
    return found


def test_a_visits_write_goes_down():
    """visits -> site_day -> the table modules -> store: no table module imports site_day, the
    reads or visits (the write never comes back up), and site_day imports no read module."""
    for name in LOWER:
        up = imports_of(SITESTATS / f"{name}.py") & {"site_day", "views", "reads", "day_tops", "visits", "payloads"}
        assert not up, (name, up)
    assert not imports_of(SITESTATS / "site_day.py") & {"reads", "day_tops"}
    assert {"page_day", "pairs", "sources", "who_visits", "site_all", "page_all"} <= imports_of(
        SITESTATS / "site_day.py"
    )


def test_no_module_of_the_site_tables_or_the_keys_is_over_600_lines():
    for path in [*SITESTATS.glob("*.py"), PACKAGE / "store" / "keys.py", PACKAGE / "core" / "visitors.py"]:
        assert len(path.read_text().splitlines()) <= 600, path


def test_visitor_identity_is_the_cores():
    assert uniques.session_number is visitors.session_number
    for path in SITESTATS.glob("*.py"):
        defined = {node.name for node in ast.parse(path.read_text()).body if isinstance(node, ast.FunctionDef)}
        assert not defined & {"visitor_id", "pair_visitor", "session_number"}, path


def test_a_view_is_made_from_the_visits_fields():
    assert list(inspect.signature(sitestats.view_on).parameters) == ["fields", "day", "site"]


@pytest.mark.parametrize("name", ["record_visit", "site_visit_info", "SiteCount"])
def test_the_contracts_names_stay_in_sitestats(name):
    assert name in sitestats.__all__ and getattr(sitestats, name) is not None
