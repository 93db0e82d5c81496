"""The read commands: the figures as the dashboard shows them, from ``ops.views``
(``counter``, ``counters``, ``top``, ``stats``, ``top-pages``, ``sources``, ``uniques``, and who
visits: ``browsers``, ``operating-systems``, ``devices``, ``countries``, ``languages``). Each runs
its view through ``common.query`` and prints it through ``render.emit``; none writes to Redis.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ...errors import InvalidInput
from ...sitestats import OTHER, SOURCE_KINDS
from ...store.client import get_redis
from ...worker import retention
from .. import tables, views
from .common import output_options, query, site_option
from .render import (
    BOARD_COLUMNS,
    COUNTER_COLUMNS,
    COUNTERS_COLUMNS,
    PAGES_COLUMNS,
    SOURCES_COLUMNS,
    STATS_COLUMNS,
    UNIQUES_COLUMNS,
    board_rows,
    counter_rows,
    counters_rows,
    emit,
    pages_rows,
    render_board,
    render_counter,
    render_pages,
    render_sources,
    render_stats,
    render_uniques,
    sources_rows,
    stats_rows,
    uniques_rows,
)
from .render_clients import clients_columns, clients_rows, not_in_table_line, other_line, render_clients
from .render_tables import TABLES_COLUMNS, render_table_read, render_tables, table_read_rows, tables_rows


@click.command("counter")
@click.argument("name")
@site_option
@click.option("--precision", "-p", type=int, default=60, show_default=True, help="bucket size in seconds")
@click.option("--last", "-n", type=int, default=30, show_default=True, help="how many buckets, up to 120")
@output_options(COUNTER_COLUMNS, "epoch seconds, and ISO 8601 in COUNTERS_TIMEZONE")
def counter_command(name: str, site: str | None, precision: int, last: int, output: str) -> None:
    """A counter's latest buckets (zero-filled) with a terminal chart."""
    emit(
        query(lambda conn: views.counter_view(conn, name, precision, last, site=site)),
        output,
        render_counter,
        counter_rows,
    )


@click.command("counters")
@site_option
@click.option("--cursor", default=None, help="where to go on: the `next` of the page before")
@click.option("--limit", type=int, default=100, show_default=True, help="names a page, up to 1000")
@output_options(COUNTERS_COLUMNS, "the next page's cursor goes to stderr")
def counters_command(site: str | None, cursor: str | None, limit: int, output: str) -> None:
    """The names of the counters that have data, a page at a time."""

    def render(console: Any, data: dict) -> None:
        for row in counters_rows(data)[1]:
            console.print(row["counter"], markup=False)
        if data["next"] is not None:
            console.print(f"(more: counters-tasks counters --cursor {data['next']})", style="dim")

    data = query(lambda conn: views.counters_list(conn, cursor, limit, site=site))
    emit(data, output, render, counters_rows)
    if output == "csv" and data["next"] is not None:  # stdout stays one CSV
        click.echo(f"(more: counters-tasks counters --cursor {data['next']} --format csv)", err=True)


@click.command("top")
@click.argument("board")
@site_option
@click.option("--limit", "-n", type=int, default=10, show_default=True)
@output_options(BOARD_COLUMNS)
def top_command(board: str, site: str | None, limit: int, output: str) -> None:
    """A sliding-window ranking's top members."""
    emit(query(lambda conn: views.board_view(conn, board, limit, site=site)), output, render_board, board_rows)


range_options = [
    click.option("--day", "-d", help="one day: YYYY-MM-DD, today or yesterday (default today)"),
    click.option("--from", "start", help="first day of a range"),
    click.option("--to", "end", help="last day of a range (default today)"),
]


def with_range(command: Callable) -> Callable:
    for option in reversed(range_options):
        command = option(command)
    return command


@click.command("stats")
@with_range
@site_option
@click.option("--path", "-p", help="one path instead of the whole site")
@output_options(
    STATS_COLUMNS,
    "one row a day; uv_exact false: the day's UV is an estimate (COUNTERS_UV_MODE=hll), uv_error "
    "its relative standard error; the range's PV and UV are in json",
)
def stats_command(
    day: str | None, start: str | None, end: str | None, site: str | None, path: str | None, output: str
) -> None:
    """Page views and unique visitors per day and over a range (site or one path)."""
    emit(query(lambda conn: views.stats_view(conn, day, start, end, path, site=site)), output, render_stats, stats_rows)


@click.command("top-pages")
@click.option("--from", "start", help="first day (default: the last day)")
@click.option("--to", "end", help="last day (default today)")
@click.option("--limit", "-n", type=int, default=10, show_default=True)
@site_option
@output_options(PAGES_COLUMNS)
def top_pages_command(start: str | None, end: str | None, limit: int, site: str | None, output: str) -> None:
    """Paths by page views over a range of days."""
    emit(
        query(lambda conn: views.top_pages_view(conn, start, end, limit, site=site, count=True)),
        output,
        render_pages,
        pages_rows,
    )


@click.command("sources")
@click.option("--from", "start", help="first day (default: the last day)")
@click.option("--to", "end", help="last day (default today)")
@click.option(
    "--kind",
    "-k",
    type=click.Choice(list(SOURCE_KINDS)),
    default="referrer",
    show_default=True,
    help="referring domains, or one of the campaign's UTM tags",
)
@click.option("--limit", "-n", type=int, default=10, show_default=True)
@site_option
@output_options(SOURCES_COLUMNS, "uv_exact false: the UV is an estimate, uv_error its relative standard error")
def sources_command(start: str | None, end: str | None, kind: str, limit: int, site: str | None, output: str) -> None:
    """Where the page views came from over a range of days: referring domains ((direct) without a
    referrer, (internal) from the site's own pages) or campaign tags."""
    emit(
        query(lambda conn: views.sources_view(conn, start, end, kind, limit, site=site)),
        output,
        render_sources,
        sources_rows,
    )


def clients_command(name: str, kind: str, summary: str, versions: str | None = None) -> click.Command:
    """A who-visits command (``views.clients_view`` of ``kind``; with ``--versions``, of
    ``versions``): the options of ``sources`` but ``--kind``, which the command's name is. In CSV
    mode the page views folded into ``(other)``, when it is not among the rows, the rows past
    ``--limit`` and the period's page views the table does not hold are said on stderr (stdout
    stays one CSV)."""

    def run(
        start: str | None,
        end: str | None,
        limit: int,
        site: str | None,
        path: str | None,
        output: str,
        by_version: bool = False,
    ) -> None:
        data = query(
            lambda conn: views.clients_view(
                conn, start, end, versions if by_version else kind, limit, site=site, path=path
            )
        )
        emit(data, output, render_clients, clients_rows)
        if output == "csv" and data["other"] and all(c["value"] != OTHER for c in data["clients"]):
            click.echo(other_line(data), err=True)
        missing = not_in_table_line(data)
        if output == "csv" and missing:
            click.echo(missing, err=True)

    by = f"; with --versions: rank,{versions},pv,uv,uv_exact,uv_error" if versions else ""
    decorators: list[Callable[[Any], Any]] = [
        click.command(name, help=summary),
        click.option("--from", "start", help="first day (default: the last day)"),
        click.option("--to", "end", help="last day (default today)"),
        click.option("--limit", "-n", type=int, default=10, show_default=True, help="rows, up to 1000"),
        site_option,
        click.option("--path", help="a page of COUNTERS_CLIENT_PAGES: who viewed it, not the whole site"),
        *(
            [click.option("--versions", "by_version", is_flag=True, help=f"by version ({versions}), not by family")]
            if versions
            else []
        ),
        output_options(
            clients_columns(kind),
            f"(other) holds the views of values past a day's COUNTERS_MAX_DAY_CLIENTS{by}; uv_exact "
            "false: the UV is an estimate, uv_error its relative standard error",
        ),
    ]
    command: Any = run
    for decorate in reversed(decorators):
        command = decorate(command)
    return command


browsers_command = clients_command(
    "browsers",
    "browser",
    "The browsers of the page views over a range of days, by family (Chrome, Firefox) or, with "
    "--versions, by major version (Chrome 120).",
    versions="browser_version",
)
operating_systems_command = clients_command(
    "operating-systems",
    "os",
    "The operating systems of the page views over a range of days, by family (Windows, iOS) or, "
    "with --versions, by version (Windows 10, iOS 17.1).",
    versions="os_version",
)
devices_command = clients_command(
    "devices",
    "device",
    "The device types of the page views over a range of days: desktop, mobile, tablet, bot, (unknown).",
)
countries_command = clients_command(
    "countries",
    "country",
    "The visitors' countries over a range of days (ISO 3166 codes from the IP; (unknown) for a "
    "private or unassigned address).",
)
languages_command = clients_command(
    "languages",
    "language",
    "The visitors' preferred languages over a range of days (from Accept-Language: en-US, de; (unknown) without one).",
)


@click.command("uniques")
@with_range
@site_option
@output_options(UNIQUES_COLUMNS, "one row a day; the range's union is in json")
def uniques_command(day: str | None, start: str | None, end: str | None, site: str | None, output: str) -> None:
    """Distinct session ids per day and over a range (an exact union)."""
    emit(query(lambda conn: views.uniques_view(conn, day, start, end, site=site)), output, render_uniques, uniques_rows)


import_option = click.option(
    "--import",
    "modules",
    multiple=True,
    metavar="MODULE",
    help="a module of the app that declares tables of its own (core.table), imported first; repeatable",
)


@click.command("tables")
@import_option
@output_options(TABLES_COLUMNS)
def tables_command(modules: tuple[str, ...], output: str) -> None:
    """Every stored table: its keys, who writes and reads it, how long it is kept, and whether one
    visitor can be erased from it (or why not); the declarations say it. What the retention pass
    removed of each, and its last pass, are read from Redis (said when they cannot be)."""
    try:
        data = tables.tables_view(modules)
    except InvalidInput as exc:
        raise click.UsageError(str(exc)) from None
    try:
        data = tables.with_retention(data, retention.status(get_redis()))
    except Exception as exc:  # noqa: BLE001  the declarations are shown all the same, and why the figures are not
        data = tables.with_retention(data, None, f"{type(exc).__name__}: {exc}")
    emit(data, output, render_tables, tables_rows)


@click.command("table")
@click.argument("name")
@import_option
@output_options(("those_of_its_reader",))
def table_command(name: str, modules: tuple[str, ...], output: str) -> None:
    """The rows of table NAME through its declared reader (an app's table; the package's tables
    have commands of their own, which `tables` names)."""
    emit(query(lambda conn: tables.table_read_view(conn, name, modules)), output, render_table_read, table_read_rows)
