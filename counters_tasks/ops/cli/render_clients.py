"""How the who-visits commands (``browsers``, ``operating-systems``, ``devices``, ``countries``,
``languages``) show their answers (``views.clients_view``): their rows, and the notes beside a
table: the views folded into ``(other)``, the values past ``--limit``, the period's page views
the table does not hold (the tables off then), and whether the tables are on now. The shared
pieces (``Rows``, ``more_line``, ``uv_note``) are ``render``'s.
"""

from __future__ import annotations

from typing import Any

from ...sitestats import OTHER
from ..views import uv_text
from .render import UV_FIELDS, Rows, more_line, uv_fields, uv_note

CLIENT_TITLES = {
    "browser": "browsers",
    "browser_version": "browser versions",
    "os": "operating systems",
    "os_version": "operating system versions",
    "device": "devices",
    "country": "countries",
    "language": "languages",
}
"""The table title of each kind of ``views.clients_view`` (``sitestats.CLIENT_VIEWS``)."""


def clients_columns(kind: str) -> tuple[str, ...]:
    """The CSV columns of a who-visits command (``browsers``, ``countries``, ...): the value's
    column is named for its kind (``browser``, ``browser_version``, ``os``, ``country``, ...), so
    a file says what it lists."""
    return ("rank", kind, "pv", "uv", *UV_FIELDS)


def clients_rows(data: dict) -> Rows:
    """One row a value (a browser, system, device type, country or language; ``(unknown)``,
    ``(other)``), most viewed first: its rank (from 1), the value, its page views and distinct
    visitors."""
    kind = data["kind"]
    return clients_columns(kind), [
        {"rank": rank, kind: c["value"], "pv": c["pv"], "uv": c["uv"], **uv_fields(c)}
        for rank, c in enumerate(data["clients"], 1)
    ]


def other_line(data: dict) -> str | None:
    """The page views folded into ``(other)`` (values past a day's cap), said beside the figures
    (also when ``(other)`` ranks below the rows listed); None when nothing was folded."""
    if not data["other"]:
        return None
    listed = any(c["value"] == OTHER for c in data["clients"])
    return f"{OTHER}: {data['other']} page views of values past a day's cap (COUNTERS_MAX_DAY_CLIENTS)" + (
        "" if listed else f", not among the {len(data['clients'])} listed"
    )


def not_in_table_line(data: dict) -> str | None:
    """The period's page views a who-visits table does not hold (``views.coverage_view``): views
    counted while the tables were off (or before the page was listed); None when it holds them all."""
    missing = data.get("not_in_table") or 0
    if not missing:
        return None
    when = "tables off, or the page not in COUNTERS_CLIENT_PAGES, then" if data.get("path") else "tables off then"
    return f"{missing} page views not in this table ({when}): {data['table_pv']} of the period's {data['pv']} are"


NO_CLIENTS = (
    "none counted in the range: who visits is counted by the workers unless COUNTERS_CLIENT_TABLES=off "
    "(docs/clients.md)"
)
"""Said under an empty who-visits table: the tables were off, or no view came in the range."""


def render_clients(console: Any, data: dict) -> None:
    from rich.table import Table
    from rich.text import Text

    notes = [note for note in (other_line(data), more_line(data), not_in_table_line(data)) if note]
    if not data["clients"]:
        notes.append(NO_CLIENTS)
    elif not data.get("client_tables", True):
        notes.append("who visits tables off now (COUNTERS_CLIENT_TABLES): no view is counted in them")
    notes.extend(note for note in (uv_note(data, data["clients"]),) if note)
    site = "" if data["site"] == "default" else f", site {data['site']}"
    page = f", page {data['path']}" if data.get("path") else ""
    table = Table(
        title=Text(f"{CLIENT_TITLES.get(data['kind'], data['kind'])} {data['from']} .. {data['to']}{site}{page}"),
        title_justify="left",
        caption=Text("\n".join(notes)) if notes else None,
        caption_justify="left",
    )
    table.add_column("#", justify="right")
    table.add_column(data["kind"])
    table.add_column("PV", justify="right")
    table.add_column("UV", justify="right")
    for row in clients_rows(data)[1]:
        table.add_row(str(row["rank"]), Text(row[data["kind"]]), str(row["pv"]), uv_text(row))
    console.print(table)
