"""What every command shares: exit codes and ``Failed`` (exit code 1), ``query`` (a view run
against the configured Redis, its errors mapped to exit codes), and the options of many
commands: ``output_options`` (``--format``/``--output`` table|csv|json and ``--json``),
``json_option``, ``site_option``; and ``CLI_EXTRA_MODULES``, the modules of the ``cli`` extra
(a core-only install answers their absence plainly).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click
import redis

from ...core.settings import get_settings, redact_url
from ...errors import ConfigurationError, InvalidInput
from ...store import deployment
from ...store.client import get_redis
from .render import OUTPUTS

CLI_EXTRA_MODULES = ("rich", "starlette", "anyio", "uvicorn", "prometheus_client")
"""What ``pip install counters-tasks[cli]`` adds: a core-only install answers its absence plainly."""


# --- exit codes -----------------------------------------------------------------------------
# Exit codes: 0 ok, 1 a failed check or an unreachable Redis/broker, 2 a usage error (bad
# option or argument, including input the API refuses with InvalidInput).

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class Failed(click.ClickException):
    """A check failed or a server is unreachable: exit code 1."""

    exit_code = EXIT_FAILED


def query(make: Callable[[Any], dict]) -> dict:
    """Run a view against the configured Redis, mapping errors to exit codes."""
    try:
        return make(get_redis())
    except InvalidInput as exc:
        raise click.UsageError(str(exc)) from None
    except (ConfigurationError, deployment.DeploymentMismatch) as exc:
        raise Failed(str(exc)) from None
    except redis.RedisError as exc:
        raise Failed(f"Redis at {redact_url(get_settings().redis_url)}: {type(exc).__name__}: {exc}") from None


json_option = click.option("--json", "as_json", is_flag=True, help="print the answer as JSON")
"""``--json`` alone, for a command without a table (its answer is a sentence or a token)."""


def output_options(
    columns: tuple[str, ...],
    csv_note: str = "",
    names: tuple[str, ...] = ("--format", "--output"),
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

        run = click.option(
            *names,
            "output",
            type=click.Choice(OUTPUTS),
            default=None,
            help=f"table (default), csv (RFC 4180 with a header row, for spreadsheets and "
            f"scripts; columns: {','.join(columns)}{'; ' + csv_note if csv_note else ''}) "
            f"or json" + ("; --output is the same option" if "--output" in names[1:] else ""),
        )(run)
        return click.option("--json", "as_json", is_flag=True, help=f"print the answer as JSON (= {name} json)")(run)

    return decorate


site_option = click.option(
    "--site", "-s", default=None, metavar="SITE", help="which site of COUNTERS_SITES (default: the default site)"
)
