"""The commands that change or run things: the local stack (``run``, ``demo``), ``import`` (with
its progress bar), ``delete-board``, ``forget`` (one visitor), ``health``, ``migrate``, ``dead-letters`` (list, requeue,
drop), ``tokens`` (create, list, revoke) and ``serve`` (the dashboard, imported only when the
``cli`` extra is installed: without it ``serve`` says what to install).
"""

from __future__ import annotations

import functools
import logging
import sys
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click
import redis

from ...app import app as default_app
from ...core.settings import get_settings, is_redis_url, redact_url
from ...errors import ConfigurationError, InvalidInput
from ...local.stack import Stack
from ...store import deployment
from ...store.client import get_redis
from ...worker import dead_letters, forget
from .. import health, importer, views
from ..demo import run_demo
from .common import CLI_EXTRA_MODULES, EXIT_FAILED, EXIT_OK, Failed, json_option, output_options, query, site_option
from .render import (
    DEAD_LETTER_COLUMNS,
    DELETE_BOARD_COLUMNS,
    FORGET_COLUMNS,
    HEALTH_COLUMNS,
    IMPORT_COLUMNS,
    TOKEN_COLUMNS,
    dead_letter_rows,
    delete_board_rows,
    emit,
    forget_rows,
    health_rows,
    import_rows,
    render_dead_letters,
    render_forget,
    render_health,
    render_import,
    render_tokens,
    token_rows,
)

try:
    from .. import web
    from ..web import create_app

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
        stack.wait_ready()
    except (RuntimeError, FileNotFoundError) as exc:  # what the stack could not start, said plainly
        stack.stop()
        raise Failed(str(exc)) from None
    except BaseException:
        stack.stop()
        raise
    return stack.run_forever()


@click.command("run")
@click.option("--concurrency", type=int, default=2, show_default=True)
@click.option("--no-flower", is_flag=True)
def run_command(concurrency: int, no_flower: bool) -> int:
    """The local stack: Redis (if none configured), worker, beat, Flower; Ctrl-C stops."""
    return run_stack(concurrency, flower=not no_flower)


@click.command("demo")
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
    with Progress(
        TextColumn("importing {task.fields[lines]:,} lines"),
        BarColumn(),
        DownloadColumn(),
        TextColumn(what),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("import", total=source.size, lines=0)
        yield lambda lines: bar.update(task, completed=source.bytes_read(), lines=lines)


@click.command("import")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True, exists=True))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(importer.FORMATS),
    help="the input's format (default: detected from its first line)",
)
@click.option("--all", "include_all", is_flag=True, help="also count crawlers and static files")
@click.option(
    "--site",
    "-s",
    default=None,
    metavar="SITE",
    help="the site of COUNTERS_SITES every line counts for (default: the default site)",
)
@click.option(
    "--event",
    "events",
    multiple=True,
    metavar="PATH=NAME",
    help="also count each page view of PATH (exact, or a prefix ending with *) as the event NAME; repeatable",
)
@output_options(IMPORT_COLUMNS, "one row a day; lines read and skipped are in json", names=("--output",))
def import_command(
    file: str, fmt: str | None, include_all: bool, site: str | None, events: tuple[str, ...], output: str
) -> None:
    """Count the page views of an access log (combined or common format, .gz too, - for stdin) or
    of JSON lines (ip, path, ts, session_id) at their own times; importing again counts nothing twice.
    With --event PATH=NAME, the views of PATH count as the event NAME too (at the view's time).

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
            summary = importer.import_lines(
                get_redis(),
                importer.read_lines(source.stream),
                fmt,
                include_all=include_all,
                name=source.name,
                progress=progress,
                site=site,
                events=events,
            )
    except InvalidInput as exc:  # an unknown site or a bad --event: nothing was read or written
        raise click.UsageError(str(exc)) from None
    except ConfigurationError as exc:
        raise Failed(str(exc)) from None
    except redis.RedisError as exc:
        raise Failed(
            f"Redis at {redact_url(get_settings().redis_url)}: {type(exc).__name__}: {exc} "
            f"(importing the file again counts nothing twice)"
        ) from None
    except (OSError, EOFError, zlib.error) as exc:
        raise Failed(f"{file}: cannot read on: {exc} (importing it again counts nothing twice)") from None
    finally:
        source.close()
    emit(summary.as_dict(), output, render_import, import_rows)


@click.command("delete-board")
@click.argument("board")
@site_option
@output_options(DELETE_BOARD_COLUMNS)
def delete_board_command(board: str, site: str | None, output: str) -> None:
    """Delete a ranking board and all its data (exit 1 when there is no such board)."""
    data = query(lambda conn: views.delete_board_view(conn, board, site=site))
    emit(
        data,
        output,
        lambda console, d: console.print(
            f"board {d['board']!r} deleted" if d["deleted"] else f"no board named {d['board']!r}", markup=False
        ),
        delete_board_rows,
    )
    if not data["deleted"]:
        raise SystemExit(EXIT_FAILED)


@click.command("forget")
@site_option
@click.option("--ip", default=None, metavar="IP", help="the visitor's IP address")
@click.option("--session-id", default=None, metavar="ID", help="the visitor's session id (a UUID)")
@output_options(FORGET_COLUMNS, "one row a figure corrected, an estimate, a table not forgotten")
def forget_command(site: str | None, ip: str | None, session_id: str | None, output: str) -> None:
    """Forget one visitor (its IP and/or session id) of a site: its ids out of every table, every
    exact unique-visitor figure corrected; prints what was done, the estimates that cannot forget
    it, and the audit entry (docs/privacy.md, "Erasing one visitor"). Exit 2 on bad input."""
    if ip is None and session_id is None:
        raise click.UsageError("give --ip IP or --session-id ID (or both)")
    data = query(lambda conn: forget.forget_visitor(site, ip, session_id, conn=conn))
    emit(data, output, render_forget, forget_rows)


@click.command("health")
@click.option("--timeout", type=float, default=1.0, show_default=True, help="seconds to wait for workers' pings")
@click.option(
    "--beat-max-age",
    type=float,
    default=180.0,
    show_default=True,
    help="beat counts as alive when its every-minute job, or beat itself, started within this many seconds",
)
@output_options(
    HEALTH_COLUMNS,
    "one row a check (redis, server, data, workers, beat, queues); the server's "
    "warnings, the jobs' last runs, refusals and dead letters are in json",
)
def health_command(timeout: float, beat_max_age: float, output: str) -> int:
    """Redis, workers, beat, queue lengths, last maintenance runs; exit 1 when unhealthy."""
    try:
        report = health.report(timeout, beat_max_age)
    except ConfigurationError as exc:
        raise Failed(str(exc)) from None
    emit(report, output, render_health, health_rows)
    return EXIT_OK if report["ok"] else EXIT_FAILED


@click.command("migrate")
def migrate_command() -> None:
    """Move the counters to this version's key layout (stop the workers first); says what it did."""
    click.echo(query(lambda conn: {"done": deployment.migrate(conn)})["done"])


@click.group("dead-letters")
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
        raise Failed(f"dead letters at {redact_url(where)}: {type(exc).__name__}: {exc}") from None


@dead_letters_group.command("list")
@click.option("--limit", "-n", type=click.IntRange(1, 10_000), default=20, show_default=True)
@output_options(
    DEAD_LETTER_COLUMNS, "epoch seconds, and ISO 8601 in COUNTERS_TIMEZONE; the counts by reason are in json"
)
def dead_letters_list(limit: int, output: str) -> None:
    """The newest set-aside messages (index 0 = newest), with why and when."""
    data = _broker(lambda client: {**dead_letters.summary(client), "records": dead_letters.listing(client, limit)})
    data.update(views.listed_view(len(data["records"]), data["count"]))  # "N more" past --limit
    emit(data, output, render_dead_letters, dead_letter_rows)


def which_records(command: Callable) -> Callable:
    """``--all`` or ``--index I``: the dead letters a dead-letters command acts on (None for all)."""

    @functools.wraps(command)
    def run(all_: bool, index: int | None) -> None:
        if all_ == (index is not None):
            raise click.UsageError("give either --all or --index")
        command(index)

    run = click.option("--index", type=click.IntRange(0), help="one dead letter (see list)")(run)
    return click.option("--all", "all_", is_flag=True, help="every dead letter")(run)


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


@click.group("tokens")
def tokens_group() -> None:
    """Read-only tokens for the dashboard's JSON API and /metrics (Authorization: Bearer <token>)."""


def _token_query(make: Callable[[Any], dict]) -> dict:
    try:
        return query(make)
    except views.TooManyTokens as exc:
        raise Failed(str(exc)) from None


@tokens_group.command("create")
@click.argument("name")
@click.option(
    "--site", "-s", default=None, metavar="SITE", help="the one site it reads (default: every site, and /metrics)"
)
@json_option
def tokens_create(name: str, site: str | None, as_json: bool) -> None:
    """Make a token named NAME and print it, this once (only its SHA-256 is kept)."""
    data = _token_query(lambda conn: views.create_token(conn, name, site=site))
    if as_json:
        emit(data, True, lambda _console, _data: None)
        return
    click.echo(data["token"])  # alone on stdout: TOKEN=$(counters-tasks tokens create NAME) works
    click.echo(
        f"token {name!r} created: it is shown only now, store it (revoke: counters-tasks tokens revoke {name})",
        err=True,
    )


@tokens_group.command("list")
@output_options(
    TOKEN_COLUMNS,
    "created as epoch seconds and ISO 8601 in COUNTERS_TIMEZONE; site empty for a token "
    "of every site (and /metrics); never a token",
)
def tokens_list_command(output: str) -> None:
    """The tokens: name, when made, scope and site; never a token."""
    emit(_token_query(views.tokens_list), output, render_tokens, token_rows)


@tokens_group.command("revoke")
@click.argument("name")
@json_option
def tokens_revoke(name: str, as_json: bool) -> None:
    """Delete the token named NAME: refused from the dashboard's next request (exit 1 when none)."""
    data = _token_query(lambda conn: views.revoke_token(conn, name))
    emit(
        data,
        as_json,
        lambda console, d: console.print(
            f"token {d['name']!r} revoked" if d["revoked"] else f"no token named {d['name']!r}", markup=False
        ),
    )
    if not data["revoked"]:
        raise SystemExit(EXIT_FAILED)


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="address to bind (default: this machine only)")
@click.option("--port", type=int, default=8000, show_default=True)
@click.option(
    "--allow-host",
    "allowed_hosts",
    multiple=True,
    help="a Host name to answer besides loopback ones (repeatable; or COUNTERS_DASHBOARD_HOSTS)",
)
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
        click.echo(
            f"warning: serving on {host} without COUNTERS_DASHBOARD_AUTH: anyone who can reach it can read it", err=True
        )
        if not hosts:
            click.echo("note: only loopback Host names are answered; name the others with --allow-host", err=True)
    web.run(create_app(auth=settings.dashboard_auth, hosts=hosts), host, port)
