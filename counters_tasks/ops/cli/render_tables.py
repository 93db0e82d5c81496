"""The renderers of ``counters-tasks tables`` (every stored table: ``ops.tables.tables_view``) and
``counters-tasks table NAME`` (an app's table through its declared reader): their rows, the same
for the rich table and the CSV."""

from __future__ import annotations

from typing import Any

from ..tables import retention_line
from .render import Rows

TABLES_COLUMNS = (
    "name",
    "what",
    "keys",
    "tag",
    "fed_by",
    "writers",
    "readers",
    "kept",
    "kept_setting",
    "kept_days",
    "removed_by_retention",
    "holds",
    "visitor_erasable",
    "erasure",
    "module",
)


def tables_rows(data: dict) -> Rows:
    """One row a table; its keys, kinds, writers and readers each one cell (``; ``-separated)."""
    rows = []
    for entry in data["tables"]:
        row = {name: entry.get(name) for name in TABLES_COLUMNS}
        row["keys"] = "; ".join(f"{key['key']} ({key['type']})" for key in entry["keys"])
        for name in ("fed_by", "writers", "readers"):
            row[name] = "; ".join(entry[name])
        row["removed_by_retention"] = _removed(entry)
        rows.append(row)
    return TABLES_COLUMNS, rows


def _removed(entry: dict) -> str:
    """A table's keys removed by retention, by tier (``""``: it has no sweep; ``?``: not read)."""
    if not entry.get("retention_tiers"):
        return ""
    removed = entry.get("removed_by_retention")
    if removed is None:
        return "?"
    return "; ".join(f"{tier} {count}" for tier, count in removed.items())


def summary_line(data: dict) -> str:
    """Under the table: how many tables hold something of a visitor, and of those how many can have
    one visitor erased (the others say why not in their ``erasure``)."""
    line = (
        f"{data['count']} tables; {data['hold_visitors']} hold something of a visitor, one visitor can be erased "
        f"from {data['visitor_erasable']} of them (the others say why not)"
    )
    return line + ("\n" + retention_line(data) if "retention" in data else "")


def render_tables(console: Any, data: dict) -> None:
    from rich.table import Table

    table = Table(title="stored tables", title_justify="left", caption=summary_line(data), caption_justify="left")
    for column in ("table", "keys", "written by", "read by", "kept", "one visitor erasable?"):
        table.add_column(column, overflow="fold")
    for entry in data["tables"]:
        keys = "\n".join(f"{key['key']} {key['type']}" for key in entry["keys"])
        erasable = ("yes: " if entry["visitor_erasable"] else "no: ") + entry["erasure"]
        kept = entry["kept"] + (f" ({entry['kept_setting']})" if entry["kept_setting"] else "")
        if entry.get("retention_tiers"):
            kept += f"\nremoved by retention: {_removed(entry)}"
        name = entry["name"] + (f"\nfed by: {', '.join(entry['fed_by'])}" if entry["fed_by"] else "")
        table.add_row(name, keys, "\n".join(entry["writers"]), "\n".join(entry["readers"]), kept, erasable)
    console.print(table)


def table_read_rows(data: dict) -> Rows:
    """The rows of an app's table as its reader gives them; the columns those of its first row."""
    rows = data["rows"]
    columns = tuple(rows[0]) if rows else ()
    return columns, rows


def render_table_read(console: Any, data: dict) -> None:
    from rich.table import Table

    columns, rows = table_read_rows(data)
    table = Table(title=f"table {data['table']}", title_justify="left", caption=f"{data['count']} rows")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(str(row.get(column, "")) for column in columns))
    console.print(table)
