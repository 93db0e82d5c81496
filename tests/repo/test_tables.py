"""Every stored table is declared once (``core.table``) and the lists of tables are read from the
declarations: docs/keys.md's rows are exactly the declared keys (a row no table declares, or a key
two tables or no row name, fails), every module that declares a table is one
``counters-tasks tables`` imports, and each declaration names what exists (the kinds that feed it,
its Lua scripts, its settings, its CLI readers)."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest
from click.testing import CliRunner

from counters_tasks.core.kind import registered as registered_kinds
from counters_tasks.ops import tables
from counters_tasks.ops.cli import cli
from tests.support.procs import REPO

KEYS_DOC = REPO / "docs" / "keys.md"
PACKAGE = REPO / "counters_tasks"


def documented_rows() -> list[str]:
    """The key patterns of the rows of docs/keys.md's tables (a row's first cell, each key in it)."""
    patterns = []
    for line in KEYS_DOC.read_text().splitlines():
        if line.startswith("| `ct:"):
            first_cell = line.strip("|").split(" | ")[0]
            patterns += re.findall(r"`(ct:[^`]+)`", first_cell)
    return patterns


def declared_keys() -> Counter[str]:
    return Counter(key.pattern for declared in tables.package_tables() for key in declared.keys)


def test_every_row_of_the_key_model_is_a_key_of_exactly_one_table():
    rows, declared = documented_rows(), declared_keys()
    assert len(rows) >= 45
    assert [row for row in rows if declared[row] != 1] == [], "rows of docs/keys.md no table (or two) declares"
    assert [key for key, count in declared.items() if count > 1] == []


def test_every_declared_key_is_in_the_key_model():
    text = KEYS_DOC.read_text()
    assert [key for key in declared_keys() if f"`{key}`" not in text] == []


def test_every_module_that_declares_a_table_is_listed():
    """A module of the package that registers a table and that ``counters-tasks tables`` does not
    import would leave its table out of the list an operator reads."""
    declaring = {
        ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        for path in PACKAGE.rglob("*.py")
        if "table.register(" in path.read_text()
    }
    listed = {declared.module for declared in tables.known_tables()}
    assert declaring - {"counters_tasks.core.table"} <= listed
    assert all(
        any(m == p or m.startswith(p + ".") for p in tables.PACKAGE_TABLE_MODULES)
        for m in declaring - {"counters_tasks.core.table"}
    )


def test_each_declaration_names_what_exists():
    kinds = {kind.name for kind in registered_kinds()}
    configuration = (REPO / "docs" / "configuration.md").read_text()
    commands = set(cli.commands)
    for declared in tables.known_tables():
        assert set(declared.fed_by) <= kinds, declared.name
        for writer in declared.writers:
            for script in re.findall(r"store/lua/\w+\.lua", writer):
                assert (PACKAGE / script).exists(), (declared.name, script)
        for reader in (*declared.readers, *declared.writers):
            for command in re.findall(r"counters-tasks ([a-z-]+)", reader):
                assert command in commands, (declared.name, command)
        setting = declared.retention.setting
        if setting is not None:
            assert f"`{setting}`" in configuration, (declared.name, setting)
            assert declared.retention.days is not None, declared.name
        assert declared.erasure.how and declared.erasure.holds, declared.name


def test_the_horizon_follows_its_setting(monkeypatch):
    """A table's horizon in days is read from the setting it names, not written down beside it."""
    from counters_tasks.core.settings import reset_settings

    monkeypatch.setenv("COUNTERS_UNIQUES_SHARD_DAYS", "9")
    reset_settings()
    entry = {e["name"]: e for e in tables.tables_view()["tables"]}["daily_uniques"]
    assert entry["kept_days"] == 9
    monkeypatch.setenv("COUNTERS_UNIQUES_SHARD_DAYS", "3")
    reset_settings()
    entry = {e["name"]: e for e in tables.tables_view()["tables"]}["daily_uniques"]
    assert entry["kept_days"] == 3


@pytest.mark.parametrize("output", ["json", "csv", "table"])
def test_the_tables_command(output):
    result = CliRunner().invoke(cli, ["tables", "--format", output])
    assert result.exit_code == 0, result.output
    names = [declared.name for declared in tables.known_tables()]
    if output == "json":
        data = json.loads(result.output)
        assert [entry["name"] for entry in data["tables"]] == names
        assert data["hold_visitors"] >= 1 and data["visitor_erasable"] >= 1
    elif output == "csv":
        lines = result.output.splitlines()
        assert lines[0].startswith("name,what,keys")
        assert [line.split(",")[0] for line in lines[1:]] == names
    else:
        assert "stored tables" in result.output and "one visitor can be erased" in result.output


def test_a_module_that_cannot_be_imported_is_a_usage_error():
    result = CliRunner().invoke(cli, ["tables", "--import", "no.such.module"])
    assert result.exit_code == 2 and "no.such.module" in result.output


def test_the_cli_doc_names_the_tables_columns():
    from counters_tasks.ops.cli.render_tables import TABLES_COLUMNS

    assert f"`{','.join(TABLES_COLUMNS)}`" in (REPO / "docs" / "cli.md").read_text()
