"""The ``counters-tasks`` command: the local stack (``run``, ``demo``), queries, ``health``, ``serve``."""

from __future__ import annotations

import csv
import functools
import io
import json
import logging
import sys
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

import click
import redis

from .. import __version__
from ..app import app as default_app
from ..core.settings import get_settings, is_redis_url
from ..errors import ConfigurationError, InvalidInput
from ..local.stack import Stack, load_stack_env
from ..store import deployment
from ..store.client import get_redis
from ..store.keys import SOURCE_KINDS
from ..worker import dead_letters
from . import health, importer, views
from .demo import run_demo

CLI_EXTRA_MODULES = ("rich", "starlette", "anyio", "uvicorn", "prometheus_client")
"""What ``pip install counters-tasks[cli]`` adds: a core-only install answers its absence plainly."""

try:
    from . import web
    from .web import create_app
    missing_web_module = ""
except ModuleNotFoundError as missing:  # a core-only install: `serve` says what to install
    if missing.name not in CLI_EXTRA_MODULES:
        raise
    web = create_app = None  # type: ignore[assignment]
    missing_web_module = missing.name


def run_stack(concurrency: int, flower: bool) -> int:
    """Start the local stack and block until Ctrl-C; 0 on a clean stop."""
    stack = Stack(flower=flower, concurrency=concurrency)
    try:
        stack.start()
        stack.wait_worker_ready()
    except (RuntimeError, FileNotFoundError) as exc:  # what the stack could not start, said plainly
        stack.stop()
        raise Failed(str(exc)) from None
    except BaseException:
        stack.stop()
        raise
    return stack.run_forever()


# --- the command line (click) ----------------------------------------------------------------
# Exit codes: 0 ok, 1 a failed check or an unreachable Redis/broker, 2 a usage error (bad
# option or argument, including input the API refuses with InvalidInput).

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class Failed(click.ClickException):
    """A check failed or a server is unreachable: exit code 1."""

    exit_code = EXIT_FAILED


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


OUTPUTS = ("table", "csv", "json")
"""What ``--format`` / ``--output`` choose: the rich table (default), CSV, or the JSON of ``--json``."""

Rows = tuple[tuple[str, ...], list[dict[str, Any]]]
"""A command's table as data: its CSV column names, and one dict a row keyed by them. One function
a command makes them (``counter_rows``, ...); its renderer draws them and ``--format csv`` writes
them, so the terminal and the CSV show the same figures."""


def _csv_cell(value: Any) -> Any:
    """A value as a CSV cell: ``true``/``false`` for a bool, empty for None, else as it is (an
    int is written as plain digits: no thousands separators, no colour, no markup)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else value


def write_csv(columns: tuple[str, ...], rows: list[dict[str, Any]]) -> None:
    """The one CSV writer of the commands: to stdout, a header row of ``columns`` then a row a
    dict, RFC 4180 (``csv``'s excel dialect: CRLF line ends, a field with a comma, a quote or a
    line break quoted, quotes doubled), so any text survives ``csv.reader``."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(columns)
    writer.writerows([_csv_cell(row[name]) for name in columns] for row in rows)
    click.echo(buffer.getvalue(), nl=False)


def _emit(payload: dict, output: str | bool, render: Callable[[Any, dict], None],
          rows: Callable[[dict], Rows] | None = None) -> None:
    """Print a command's answer as ``output`` says: ``json`` (the payload), ``csv`` (``rows`` of
    it, ``write_csv``) or ``table`` (``render``, which draws the same ``rows``). A bool is the
    ``as_json`` of a command with ``json_option`` only (True: json, False: table)."""
    if isinstance(output, bool):
        output = "json" if output else "table"
    if output == "json":
        click.echo(json.dumps(payload, indent=2, ensure_ascii=False, default=str))
    elif output == "csv" and rows is not None:
        write_csv(*rows(payload))
    else:
        render(_console(), payload)


def _query(make: Callable[[Any], dict]) -> dict:
    """Run a view against the configured Redis, mapping errors to exit codes."""
    try:
        return make(get_redis())
    except InvalidInput as exc:
        raise click.UsageError(str(exc)) from None
    except (ConfigurationError, deployment.LayoutMismatch) as exc:
        raise Failed(str(exc)) from None
    except redis.RedisError as exc:
        raise Failed(f"Redis at {get_settings().redis_url}: {type(exc).__name__}: {exc}") from None


json_option = click.option("--json", "as_json", is_flag=True, help="print the answer as JSON")
"""``--json`` alone, for a command without a table (its answer is a sentence or a token)."""


def output_options(columns: tuple[str, ...], csv_note: str = "", names: tuple[str, ...] = ("--format", "--output"),
                   ) -> Callable[[Callable], Callable]:
    """A query command's ``--format``/``--output`` [table|csv|json] (one option, two names; default
    table) and ``--json`` (short for json), passed to it as ``output``. ``import``, whose ``--format``
    is the log's format, takes ``names=("--output",)``. The help names the CSV ``columns``."""
    name = names[0]

    def decorate(command: Callable) -> Callable:
        @functools.wraps(command)
        def run(*args: Any, output: str | None, as_json: bool, **kwargs: Any) -> Any:
            if as_json and output not in (None, "json"):
                raise click.UsageError(f"--json is short for {name} json: give one or the other")
            return command(*args, output="json" if as_json else output or "table", **kwargs)

        run = click.option(*names, "output", type=click.Choice(OUTPUTS), default=None,
                           help=f"table (default), csv (RFC 4180 with a header row, for spreadsheets and "
                                f"scripts; columns: {','.join(columns)}{'; ' + csv_note if csv_note else ''}) "
                                f"or json" + ("; --output is the same option" if "--output" in names[1:] else ""))(run)
        return click.option("--json", "as_json", is_flag=True, help=f"print the answer as JSON (= {name} json)")(run)

    return decorate


STACK_COMMANDS = ("run", "demo")
"""Commands that start a stack of their own; the others talk to the one configured or running."""


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="counters-tasks")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """counters-tasks: website analytics counters in Redis, kept by Celery.

    Without COUNTERS_REDIS_URL, the commands use the stack of `counters-tasks run` in this folder
    (its COUNTERS_HOME/env file). Exit codes: 0 ok, 1 failed check or unreachable server, 2 usage error.
    """
    if ctx.invoked_subcommand not in STACK_COMMANDS:
        try:
            load_stack_env(get_settings().home)
        except ConfigurationError:
            pass  # the command itself reports the bad setting


@cli.command("run")
@click.option("--concurrency", type=int, default=2, show_default=True)
@click.option("--no-flower", is_flag=True)
def run_command(concurrency: int, no_flower: bool) -> int:
    """The local stack: Redis (if none configured), worker, beat, Flower; Ctrl-C stops."""
    return run_stack(concurrency, flower=not no_flower)


@cli.command("demo")
@click.option("--visits", type=int, default=5000, show_default=True)
@click.option("--concurrency", type=int, default=2, show_default=True)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--timeout", type=float, default=300, show_default=True)
def demo_command(visits: int, concurrency: int, seed: int, timeout: float) -> int:
    """The local stack, a burst of simulated visits, a report, then exit."""
    try:
        return run_demo(visits, concurrency, seed, timeout)
    except (RuntimeError, FileNotFoundError) as exc:  # the stack could not start
        raise Failed(str(exc)) from None


SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[int]) -> str:
    """One character per value, scaled between the smallest and largest."""
    if not values:
        return ""
    low, high = min(min(values), 0), max(values)
    span = (high - low) or 1
    return "".join(SPARKS[min(len(SPARKS) - 1, int((v - low) * (len(SPARKS) - 1) / span + 0.5))] for v in values)


def _time_label(ts: int, precision: int) -> str:
    when = datetime.fromtimestamp(ts, get_settings().zone)
    return when.strftime("%Y-%m-%d" if precision >= 86400 else "%m-%d %H:%M" if precision >= 3600 else "%H:%M:%S")


COUNTER_COLUMNS = ("bucket_start_epoch", "bucket_start_iso", "total")


def counter_rows(data: dict) -> Rows:
    """One row a bucket, oldest first: its start (epoch seconds, and ISO 8601 in COUNTERS_TIMEZONE)
    and its total."""
    zone = get_settings().zone
    return COUNTER_COLUMNS, [{"bucket_start_epoch": int(bucket),
                              "bucket_start_iso": datetime.fromtimestamp(bucket, zone).isoformat(), "total": total}
                             for bucket, total in data["points"]]


def _render_counter(console: Any, data: dict) -> None:
    from rich.table import Table

    _, points = counter_rows(data)
    values = [row["total"] for row in points]
    console.print(f"[bold]{data['name']}[/bold]  every {data['precision']}s, last {len(points)} buckets, "
                  f"total {data['total']}, max {max(values, default=0)}")
    console.print(sparkline(values))
    table = Table(box=None, show_header=True, pad_edge=False)
    table.add_column("bucket")
    table.add_column("total", justify="right")
    table.add_column("")
    high = max((abs(v) for v in values), default=0) or 1
    for row in points:  # every bucket asked for (--last), oldest first
        total = row["total"]
        table.add_row(_time_label(row["bucket_start_epoch"], data["precision"]), str(total),
                      "█" * round(30 * abs(total) / high))
    console.print(table)


site_option = click.option("--site", "-s", default=None, metavar="SITE",
                           help="which site of COUNTERS_SITES (default: the default site)")


@cli.command("counter")
@click.argument("name")
@site_option
@click.option("--precision", "-p", type=int, default=60, show_default=True, help="bucket size in seconds")
@click.option("--last", "-n", type=int, default=30, show_default=True, help="how many buckets, up to 120")
@output_options(COUNTER_COLUMNS, "epoch seconds, and ISO 8601 in COUNTERS_TIMEZONE")
def counter_command(name: str, site: str | None, precision: int, last: int, output: str) -> None:
    """A counter's latest buckets (zero-filled) with a terminal chart."""
    _emit(_query(lambda conn: views.counter_view(conn, name, precision, last, site=site)), output, _render_counter,
          counter_rows)


IMPORT_COLUMNS = ("day", "counted")


def import_rows(data: dict) -> Rows:
    """One row a day the import counted page views on (its table): the day and how many."""
    return IMPORT_COLUMNS, [{"day": day, "counted": n} for day, n in data["days"].items()]


def _render_import(console: Any, data: dict) -> None:
    from rich.text import Text

    console.print(Text.assemble((data["file"], "bold"), f" ({data['format']}{', --all' if data['all'] else ''}): "
                                f"{data['lines']} lines read, {data['counted']} counted, "
                                f"{data['skipped_total']} skipped"))
    reasons = [f"{reason} {n}" for reason, n in data["skipped"].items() if n]
    if reasons:
        console.print("  skipped: " + ", ".join(reasons), markup=False)
    if data["malformed_lines"]:
        more = " ..." if data["skipped"]["malformed"] > len(data["malformed_lines"]) else ""
        console.print("  unreadable lines: " + ", ".join(map(str, data["malformed_lines"])) + more, markup=False)
    for row in import_rows(data)[1]:
        console.print(f"  {row['day']}  {row['counted']:>9} counted")


@contextmanager
def import_progress(source: importer.Input, console: Any = None) -> Iterator[Callable[[int], None] | None]:
    """A progress bar of an import on stderr (lines and bytes read; of the file's size when known),
    only when stderr is a terminal (or ``console`` is given): else no callback."""
    if console is None:
        if not sys.stderr.isatty():
            yield None
            return
        from rich.console import Console

        console = Console(stderr=True)
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

    what = "read (compressed)" if source.compressed else "read"
    with Progress(TextColumn("importing {task.fields[lines]:,} lines"), BarColumn(), DownloadColumn(),
                  TextColumn(what), TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task("import", total=source.size, lines=0)
        yield lambda lines: bar.update(task, completed=source.bytes_read(), lines=lines)


@cli.command("import")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True, exists=True))
@click.option("--format", "fmt", type=click.Choice(importer.FORMATS),
              help="the input's format (default: detected from its first line)")
@click.option("--all", "include_all", is_flag=True, help="also count crawlers and static files")
@click.option("--site", "-s", default=None, metavar="SITE",
              help="the site of COUNTERS_SITES every line counts for (default: the default site)")
@output_options(IMPORT_COLUMNS, "one row a day; lines read and skipped are in json", names=("--output",))
def import_command(file: str, fmt: str | None, include_all: bool, site: str | None, output: str) -> None:
    """Count the page views of an access log (combined or common format, .gz too, - for stdin) or
    of JSON lines (ip, path, ts, session_id) at their own times; importing again counts nothing twice.

    Here --format is the input's format: the answer's is --output (table, csv or json). The CSV is
    the summary's table, one row a day (day,counted); the lines read, skipped (by reason) and the
    unreadable line numbers are in --output json."""
    refusals_log = logging.getLogger("counters_tasks.refusals")  # the summary counts refusals by reason
    if not any(isinstance(handler, logging.NullHandler) for handler in refusals_log.handlers):
        refusals_log.addHandler(logging.NullHandler())
    try:
        source = importer.open_input(file, getattr(sys.stdin, "buffer", None))
    except OSError as exc:
        raise Failed(f"{file}: {exc}") from None
    try:
        with import_progress(source) as progress:
            summary = importer.import_lines(get_redis(), importer.read_lines(source.stream), fmt,
                                            include_all=include_all, name=source.name, progress=progress, site=site)
    except InvalidInput as exc:  # an unknown site: nothing was read or written
        raise click.UsageError(str(exc)) from None
    except ConfigurationError as exc:
        raise Failed(str(exc)) from None
    except redis.RedisError as exc:
        raise Failed(f"Redis at {get_settings().redis_url}: {type(exc).__name__}: {exc} "
                     f"(importing the file again counts nothing twice)") from None
    except (OSError, EOFError, zlib.error) as exc:
        raise Failed(f"{file}: cannot read on: {exc} (importing it again counts nothing twice)") from None
    finally:
        source.close()
    _emit(summary.as_dict(), output, _render_import, import_rows)


COUNTERS_COLUMNS = ("counter",)


def counters_rows(data: dict) -> Rows:
    """One row a counter name of the page."""
    return COUNTERS_COLUMNS, [{"counter": name} for name in data["counters"]]


@cli.command("counters")
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

    data = _query(lambda conn: views.counters_list(conn, cursor, limit, site=site))
    _emit(data, output, render, counters_rows)
    if output == "csv" and data["next"] is not None:  # stdout stays one CSV
        click.echo(f"(more: counters-tasks counters --cursor {data['next']} --format csv)", err=True)


BOARD_COLUMNS = ("rank", "member", "total")


def board_rows(data: dict) -> Rows:
    """One row a member, best first: its rank (from 1), name and total over the window."""
    return BOARD_COLUMNS, [{"rank": rank, "member": member, "total": total}
                           for rank, (member, total) in enumerate(data["top"], 1)]


def _render_board(console: Any, data: dict) -> None:
    from rich.table import Table

    table = Table(title=f"{data['board']} (last {data['period_hours']} h, every {data['interval_hours']} h)",
                  title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("member")
    table.add_column("total", justify="right")
    for row in board_rows(data)[1]:
        table.add_row(str(row["rank"]), row["member"], str(row["total"]))
    console.print(table)


@cli.command("top")
@click.argument("board")
@site_option
@click.option("--limit", "-n", type=int, default=10, show_default=True)
@output_options(BOARD_COLUMNS)
def top_command(board: str, site: str | None, limit: int, output: str) -> None:
    """A sliding-window ranking's top members."""
    _emit(_query(lambda conn: views.board_view(conn, board, limit, site=site)), output, _render_board, board_rows)


DELETE_BOARD_COLUMNS = ("board", "deleted")


def delete_board_rows(data: dict) -> Rows:
    """One row: the board, and whether it was there to delete (true/false)."""
    return DELETE_BOARD_COLUMNS, [{"board": data["board"], "deleted": data["deleted"]}]


@cli.command("delete-board")
@click.argument("board")
@site_option
@output_options(DELETE_BOARD_COLUMNS)
def delete_board_command(board: str, site: str | None, output: str) -> None:
    """Delete a ranking board and all its data (exit 1 when there is no such board)."""
    data = _query(lambda conn: views.delete_board_view(conn, board, site=site))
    _emit(data, output, lambda console, d: console.print(
        f"board {d['board']!r} deleted" if d["deleted"] else f"no board named {d['board']!r}", markup=False),
        delete_board_rows)
    if not data["deleted"]:
        raise SystemExit(EXIT_FAILED)


range_options = [
    click.option("--day", "-d", help="one day: YYYY-MM-DD, today or yesterday (default today)"),
    click.option("--from", "start", help="first day of a range"),
    click.option("--to", "end", help="last day of a range (default today)"),
]


def with_range(command: Callable) -> Callable:
    for option in reversed(range_options):
        command = option(command)
    return command


STATS_COLUMNS = ("day", "pv", "uv")


def stats_rows(data: dict) -> Rows:
    """One row a day of the range: the day (ISO 8601), its page views and unique visitors."""
    return STATS_COLUMNS, [{"day": d["day"], "pv": d["pv"], "uv": d["uv"]} for d in data["days"]]


def _render_stats(console: Any, data: dict) -> None:
    from rich.table import Table

    where = data["path"] or "whole site"
    uv = f"{'~' if data['uv_approximate'] else ''}{data['uv']}"
    note = ("  (UV over several days: an estimate of the union, docs/api.md)" if data["uv_approximate"] else "")
    console.print(f"[bold]{where}[/bold] {data['from']} .. {data['to']}: PV {data['pv']}, UV {uv}{note}")
    table = Table(box=None, pad_edge=False)
    for name, justify in (("day", "left"), ("PV", "right"), ("UV", "right"), ("", "left")):
        table.add_column(name, justify=justify)
    _, days = stats_rows(data)
    high = max((d["pv"] for d in days), default=0) or 1
    for d in days:
        table.add_row(d["day"], str(d["pv"]), str(d["uv"]), "█" * round(30 * d["pv"] / high))
    console.print(table)


@cli.command("stats")
@with_range
@site_option
@click.option("--path", "-p", help="one path instead of the whole site")
@output_options(STATS_COLUMNS, "one row a day; the range's PV and UV are in json")
def stats_command(day: str | None, start: str | None, end: str | None, site: str | None, path: str | None,
                  output: str) -> None:
    """Page views and unique visitors per day and over a range (site or one path)."""
    _emit(_query(lambda conn: views.stats_view(conn, day, start, end, path, site=site)), output, _render_stats, stats_rows)


PAGES_COLUMNS = ("rank", "path", "pv")


def pages_rows(data: dict) -> Rows:
    """One row a path, most viewed first: its rank (from 1), the path and its page views."""
    return PAGES_COLUMNS, [{"rank": rank, "path": path, "pv": pv} for rank, (path, pv) in enumerate(data["pages"], 1)]


def _render_pages(console: Any, data: dict) -> None:
    from rich.table import Table

    table = Table(title=f"top pages {data['from']} .. {data['to']}", title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("path")
    table.add_column("PV", justify="right")
    for row in pages_rows(data)[1]:
        table.add_row(str(row["rank"]), row["path"], str(row["pv"]))
    console.print(table)


@cli.command("top-pages")
@click.option("--from", "start", help="first day (default: the last day)")
@click.option("--to", "end", help="last day (default today)")
@click.option("--limit", "-n", type=int, default=10, show_default=True)
@site_option
@output_options(PAGES_COLUMNS)
def top_pages_command(start: str | None, end: str | None, limit: int, site: str | None, output: str) -> None:
    """Paths by page views over a range of days."""
    _emit(_query(lambda conn: views.top_pages_view(conn, start, end, limit, site=site)), output, _render_pages, pages_rows)


SOURCES_COLUMNS = ("rank", "source", "pv", "uv")


def sources_rows(data: dict) -> Rows:
    """One row a source, most viewed first: its rank (from 1), the source (a domain, ``(direct)``,
    ``(internal)``, a campaign tag, ``(other)``), its page views and distinct visitors."""
    return SOURCES_COLUMNS, [{"rank": rank, "source": s["source"], "pv": s["pv"], "uv": s["uv"]}
                             for rank, s in enumerate(data["sources"], 1)]


def _render_sources(console: Any, data: dict) -> None:
    from rich.table import Table

    approximate = any(s["uv_approximate"] for s in data["sources"])
    table = Table(title=f"{data['kind']} {data['from']} .. {data['to']}", title_justify="left",
                  caption="UV over several days: estimated (≈)" if approximate else None)
    table.add_column("#", justify="right")
    table.add_column(data["kind"])
    table.add_column("PV", justify="right")
    table.add_column("UV", justify="right")
    for row, source in zip(sources_rows(data)[1], data["sources"], strict=True):
        uv = ("≈" if source["uv_approximate"] else "") + str(row["uv"])
        table.add_row(str(row["rank"]), row["source"], str(row["pv"]), uv)
    console.print(table)


@cli.command("sources")
@click.option("--from", "start", help="first day (default: the last day)")
@click.option("--to", "end", help="last day (default today)")
@click.option("--kind", "-k", type=click.Choice(list(SOURCE_KINDS)), default="referrer", show_default=True,
              help="referring domains, or one of the campaign's UTM tags")
@click.option("--limit", "-n", type=int, default=10, show_default=True)
@site_option
@output_options(SOURCES_COLUMNS, "the UV of a source over several days may be an estimate (uv_approximate in json)")
def sources_command(start: str | None, end: str | None, kind: str, limit: int, site: str | None, output: str) -> None:
    """Where the page views came from over a range of days: referring domains ((direct) without a
    referrer, (internal) from the site's own pages) or campaign tags."""
    _emit(_query(lambda conn: views.sources_view(conn, start, end, kind, limit, site=site)), output, _render_sources,
          sources_rows)


UNIQUES_COLUMNS = ("day", "visitors", "visitor_ids_expired")


def uniques_rows(data: dict) -> Rows:
    """One row a day: the day, its distinct session ids, and whether its per-visitor data has
    expired (then the day is not in the range's total)."""
    missing = set(data["missing_days"])
    return UNIQUES_COLUMNS, [{"day": d["day"], "visitors": d["visitors"], "visitor_ids_expired": d["day"] in missing}
                             for d in data["days"]]


def _render_uniques(console: Any, data: dict) -> None:
    console.print(f"[bold]unique visitors[/bold] {data['from']} .. {data['to']}: {data['visitors']}")
    _, days = uniques_rows(data)
    values = [d["visitors"] for d in days]
    if len(values) > 1:
        console.print(sparkline(values))
    for d in days:
        console.print(f"  {d['day']}  {d['visitors']:>9}")
    if data["missing_days"]:
        console.print(f"  (per-visitor data expired for {', '.join(data['missing_days'])}: not in the total)")


@cli.command("uniques")
@with_range
@site_option
@output_options(UNIQUES_COLUMNS, "one row a day; the range's union is in json")
def uniques_command(day: str | None, start: str | None, end: str | None, site: str | None, output: str) -> None:
    """Distinct session ids per day and over a range (an exact union)."""
    _emit(_query(lambda conn: views.uniques_view(conn, day, start, end, site=site)), output, _render_uniques, uniques_rows)


def _ago(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.0f}s ago"


def _deployment_detail(info: dict) -> str:
    """The deployment line of ``health``: its key layout and the last data loss."""
    if "error" in info:
        return info["error"]
    if not info["layout_ok"]:
        return deployment.layout_message(info["layout"])
    parts = [f"key layout {info['layout'] or info['package_layout']}" + ("" if info["layout"] else " (new)")]
    if info["lost_at"] is not None:
        when = datetime.fromtimestamp(info["lost_at"], timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        parts.append(f"Redis LOST ITS DATA at {when} (seen by {info['lost_by']}): figures before then are gone"
                     if info["recent_loss"] else f"last data loss {when}")
    return "; ".join(parts)


HEALTH_COLUMNS = ("check", "ok", "detail")


def health_rows(data: dict) -> Rows:
    """One row a check the verdict rests on (redis, server, data, workers, beat, queues): its
    name, whether it passed, and the detail the terminal shows."""
    redis_, servers, workers, beat, queues = (data[k] for k in ("redis", "servers", "workers", "beat", "queues"))
    checks = [
        ("redis", redis_["ok"], f"{redis_.get('latency_ms', 0):.1f} ms" if redis_["ok"] else redis_["error"]),
        ("server", servers["ok"], "; ".join(servers["errors"]) or ", ".join(
            f"{s['software']} {s['version']} ({s['maxmemory_policy']})" for s in servers["servers"])),
        ("data", data["deployment"]["ok"], _deployment_detail(data["deployment"])),
        ("workers", workers["ok"], ", ".join(workers["names"]) or workers.get("error", "no worker answered")),
        ("beat", beat["ok"], beat.get("error") or f"clean_counters last started {_ago(beat['last_run_age_seconds'])}"
         f" (limit {beat['max_age_seconds']:.0f}s)"),
        ("queues", queues["ok"], "  ".join(f"{q}={queues[q]}" for q in ("visits", "maintenance")) if queues["ok"]
         else queues["error"]),
    ]
    return HEALTH_COLUMNS, [{"check": check, "ok": ok, "detail": detail} for check, ok, detail in checks]


def _render_health(console: Any, data: dict) -> None:
    for row in health_rows(data)[1]:
        console.print(f"{'[green]ok  [/green]' if row['ok'] else '[red]FAIL[/red]'} {row['check']:<8} {row['detail']}")
        if row["check"] == "server":
            for warning in data["servers"]["warnings"]:
                console.print(f"[yellow]warn[/yellow] server   {warning}")
    for job, info in data["jobs"].items():
        took = "" if info["last_duration"] is None else f", took {info['last_duration'] * 1000:.1f} ms"
        result = "" if info["last_result"] is None else f", result {info['last_result']}"
        console.print(f"     job      {job}: {_ago(info['age_seconds'])}{took}{result}, skipped {info['skipped']}")
    if data["refused"]:
        console.print("     refused  " + "  ".join(f"{reason}={n}" for reason, n in data["refused"].items()))
    if "dead_letters" in data:
        dead = data["dead_letters"]
        console.print(f"     dead     {dead['count']} set aside (counters-tasks dead-letters list)")
    console.print("healthy" if data["ok"] else "UNHEALTHY")


@cli.command("health")
@click.option("--timeout", type=float, default=1.0, show_default=True, help="seconds to wait for workers' pings")
@click.option("--beat-max-age", type=float, default=180.0, show_default=True,
              help="beat counts as alive when its every-minute job started within this many seconds")
@output_options(HEALTH_COLUMNS, "one row a check (redis, server, data, workers, beat, queues); the server's "
                "warnings, the jobs' last runs, refusals and dead letters are in json")
def health_command(timeout: float, beat_max_age: float, output: str) -> int:
    """Redis, workers, beat, queue lengths, last maintenance runs; exit 1 when unhealthy."""
    try:
        report = health.report(timeout, beat_max_age)
    except ConfigurationError as exc:
        raise Failed(str(exc)) from None
    _emit(report, output, _render_health, health_rows)
    return EXIT_OK if report["ok"] else EXIT_FAILED


@cli.command("migrate")
def migrate_command() -> None:
    """Move the counters to this version's key layout (stop the workers first); says what it did."""
    click.echo(_query(lambda conn: {"done": deployment.migrate(conn)})["done"])


@cli.group("dead-letters")
def dead_letters_group() -> None:
    """Messages the workers set aside (undecodable, malformed, oversize, failing for good)."""


def _broker(action: Callable[[Any], Any]) -> Any:
    """Run ``action`` with a client of the Redis that keeps the dead letters (the broker's, or
    the counters' with another broker), mapping its errors to exit code 1."""
    try:
        return action(dead_letters.store_client())
    except ConfigurationError as exc:
        raise Failed(str(exc)) from None
    except redis.RedisError as exc:
        where = get_settings().broker_url if is_redis_url(get_settings().broker_url) else get_settings().redis_url
        raise Failed(f"dead letters at {where}: {type(exc).__name__}: {exc}") from None


DEAD_LETTER_COLUMNS = ("index", "at_epoch", "at_iso", "reason", "task", "id", "queue")


def dead_letter_rows(data: dict) -> Rows:
    """One row a record, newest first: its index (for requeue and drop), when it was set aside
    (epoch seconds, and ISO 8601 in COUNTERS_TIMEZONE), why, and its task, id and queue."""
    zone = get_settings().zone
    return DEAD_LETTER_COLUMNS, [
        {"index": record["index"], "at_epoch": int(record["at"]),
         "at_iso": datetime.fromtimestamp(int(record["at"]), zone).isoformat(), "reason": record["reason"],
         "task": record.get("task"), "id": record.get("id"), "queue": record.get("queue")}
        for record in data["records"]]


def _render_dead_letters(console: Any, data: dict) -> None:
    console.print(f"[bold]{data['count']} dead letters[/bold]"
                  + (" (ever, by reason: " + ", ".join(f"{r}={n}" for r, n in data["by_reason"].items()) + ")"
                     if data["by_reason"] else ""))
    for row in dead_letter_rows(data)[1]:
        when = datetime.fromtimestamp(row["at_epoch"], get_settings().zone).strftime("%Y-%m-%d %H:%M:%S")
        console.print(f"  #{row['index']:<4} {when}  {row['reason']:<14} {row['task'] or '-'} "
                      f"{row['id'] or '-'} from {row['queue'] or '-'}", markup=False)


@dead_letters_group.command("list")
@click.option("--limit", "-n", type=click.IntRange(1, 10_000), default=20, show_default=True)
@output_options(DEAD_LETTER_COLUMNS, "epoch seconds, and ISO 8601 in COUNTERS_TIMEZONE; the counts by reason "
                "are in json")
def dead_letters_list(limit: int, output: str) -> None:
    """The newest set-aside messages (index 0 = newest), with why and when."""
    data = _broker(lambda client: {**dead_letters.summary(client), "records": dead_letters.listing(client, limit)})
    _emit(data, output, _render_dead_letters, dead_letter_rows)


def which_records(command: Callable) -> Callable:
    """``--all`` or ``--index I``: the records a dead-letters command acts on (None for all)."""
    @functools.wraps(command)
    def run(all_: bool, index: int | None) -> None:
        if all_ == (index is not None):
            raise click.UsageError("give either --all or --index")
        command(index)

    run = click.option("--index", type=click.IntRange(0), help="one record (see list)")(run)
    return click.option("--all", "all_", is_flag=True, help="every record")(run)


@dead_letters_group.command("requeue")
@which_records
def dead_letters_requeue(index: int | None) -> None:
    """Send set-aside messages again (a fixed worker, a fixed input)."""
    click.echo(f"requeued {_broker(lambda client: dead_letters.requeue(client, default_app, index))}")


@dead_letters_group.command("drop")
@which_records
def dead_letters_drop(index: int | None) -> None:
    """Delete set-aside messages for good."""
    click.echo(f"dropped {_broker(lambda client: dead_letters.drop(client, index))}")


@cli.group("tokens")
def tokens_group() -> None:
    """Read-only tokens for the dashboard's JSON API and /metrics (Authorization: Bearer <token>)."""


def _token_query(make: Callable[[Any], dict]) -> dict:
    try:
        return _query(make)
    except views.TooManyTokens as exc:
        raise Failed(str(exc)) from None


def _when(ts: int | None) -> str:
    return "-" if ts is None else datetime.fromtimestamp(ts, get_settings().zone).strftime("%Y-%m-%d %H:%M:%S")


@tokens_group.command("create")
@click.argument("name")
@click.option("--site", "-s", default=None, metavar="SITE",
              help="the one site it reads (default: every site, and /metrics)")
@json_option
def tokens_create(name: str, site: str | None, as_json: bool) -> None:
    """Make a token named NAME and print it, this once (only its SHA-256 is kept)."""
    data = _token_query(lambda conn: views.create_token(conn, name, site=site))
    if as_json:
        _emit(data, True, lambda _console, _data: None)
        return
    click.echo(data["token"])  # alone on stdout: TOKEN=$(counters-tasks tokens create NAME) works
    click.echo(f"token {name!r} created: it is shown only now, store it (revoke: counters-tasks tokens revoke "
               f"{name})", err=True)


@tokens_group.command("list")
@json_option
def tokens_list_command(as_json: bool) -> None:
    """The tokens: name, when made, scope; never a token."""
    def render(console: Any, data: dict) -> None:
        from rich.table import Table
        from rich.text import Text

        table = Table(title=f"{len(data['tokens'])} tokens (at most {data['max']})", title_justify="left")
        for column in ("name", "created", "scope", "site"):
            table.add_column(column)
        for token in data["tokens"]:
            table.add_row(Text(token["name"]), _when(token["created"]), str(token["scope"]), token["site"] or "all")
        console.print(table)

    _emit(_token_query(views.tokens_list), as_json, render)


@tokens_group.command("revoke")
@click.argument("name")
@json_option
def tokens_revoke(name: str, as_json: bool) -> None:
    """Delete the token named NAME: refused from the dashboard's next request (exit 1 when none)."""
    data = _token_query(lambda conn: views.revoke_token(conn, name))
    _emit(data, as_json, lambda console, d: console.print(
        f"token {d['name']!r} revoked" if d["revoked"] else f"no token named {d['name']!r}", markup=False))
    if not data["revoked"]:
        raise SystemExit(EXIT_FAILED)


@cli.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="address to bind (default: this machine only)")
@click.option("--port", type=int, default=8000, show_default=True)
@click.option("--allow-host", "allowed_hosts", multiple=True,
              help="a Host name to answer besides loopback ones (repeatable; or COUNTERS_DASHBOARD_HOSTS)")
def serve_command(host: str, port: int, allowed_hosts: tuple[str, ...]) -> None:
    """The read-only web dashboard and Prometheus /metrics (basic auth when COUNTERS_DASHBOARD_AUTH=user:password)."""
    if create_app is None:
        raise ModuleNotFoundError(name=missing_web_module)
    try:
        settings = get_settings()
    except ConfigurationError as exc:
        raise Failed(str(exc)) from None
    hosts = allowed_hosts or settings.dashboard_hosts
    if not settings.dashboard_auth and host not in web.LOOPBACK_HOSTS:
        click.echo(f"warning: serving on {host} without COUNTERS_DASHBOARD_AUTH: anyone who can reach it can read it",
                   err=True)
        if not hosts:
            click.echo("note: only loopback Host names are answered; name the others with --allow-host", err=True)
    web.run(create_app(auth=settings.dashboard_auth, hosts=hosts), host, port)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``counters-tasks`` console script; returns the exit code."""
    try:
        result = cli.main(args=argv, prog_name="counters-tasks", standalone_mode=False)
    except ModuleNotFoundError as exc:
        if exc.name not in CLI_EXTRA_MODULES:
            raise
        click.echo(f"this command needs {exc.name}, which comes with the 'cli' extra: "
                   "pip install 'counters-tasks[cli]'", err=True)
        return EXIT_FAILED
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return EXIT_FAILED
    return result if isinstance(result, int) else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
