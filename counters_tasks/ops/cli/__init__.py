"""The ``counters-tasks`` command (click): the local stack (``run``, ``demo``), queries, ``import``,
``health``, ``serve``, ``tokens``, ``dead-letters``, ``migrate``. This ``__init__`` builds the
``cli`` group from the commands of its modules and holds ``main``, the console script's entry
point (``counters-tasks = "counters_tasks.ops.cli:main"``); ``python -m counters_tasks.ops.cli``
runs it too (``__main__``).

- ``queries``: the read commands (``counter``, ``counters``, ``top``, ``stats``, ``top-pages``,
  ``sources``, ``uniques``, and who visits: ``browsers``, ``operating-systems``, ``devices``,
  ``countries``, ``languages``), and the stored tables (``tables``, ``table NAME``);
- ``event_commands``: events, goals and funnels (``events``, ``goals``, ``funnel NAME``, and the
  definitions' ``define-goal``, ``define-funnel``, ``remove-goal``, ``remove-funnel``), drawn by
  ``render_events``;
- ``admin``: the commands that change or run things (``run``, ``demo``, ``import``,
  ``delete-board``, ``health``, ``migrate``, ``dead-letters``, ``tokens``, ``serve``);
- ``render``: the renderers: each command's rows (the same for its table and its CSV), its rich
  table, the CSV writer and ``emit`` (table, CSV or JSON);
- ``common``: exit codes, ``Failed``, ``query`` (errors to exit codes), the shared options;
- ``__main__``: ``python -m counters_tasks.ops.cli``.

What they may import: ``render`` nothing of the others; ``common`` only ``render``; ``queries``
and ``admin`` ``common`` and ``render`` (not each other); ``event_commands`` those and
``render_events``; this ``__init__`` all of them, and
``__main__`` only this. Besides, every lower layer of the package and the rest of ``ops``
(``views``, ``health``, ``importer``, ``demo``, ``web``); nothing in the package imports this
one but ``counters_tasks.__main__``.
"""

from __future__ import annotations

import click

from ... import __version__
from ...core.settings import get_settings
from ...errors import ConfigurationError
from ...local.stack import load_stack_env
from .admin import (
    dead_letters_group,
    delete_board_command,
    demo_command,
    forget_command,
    health_command,
    import_command,
    import_progress,
    migrate_command,
    run_command,
    run_stack,
    serve_command,
    tokens_group,
)
from .common import CLI_EXTRA_MODULES, EXIT_FAILED, EXIT_OK, EXIT_USAGE, Failed, json_option, output_options
from .event_commands import (
    define_funnel_command,
    define_goal_command,
    events_command,
    funnel_command,
    goals_command,
    remove_funnel_command,
    remove_goal_command,
)
from .queries import (
    browsers_command,
    counter_command,
    counters_command,
    countries_command,
    devices_command,
    languages_command,
    operating_systems_command,
    sources_command,
    stats_command,
    table_command,
    tables_command,
    top_command,
    top_pages_command,
    uniques_command,
)
from .render import OUTPUTS, Rows, emit, sparkline, write_csv

__all__ = [
    "cli",
    "main",
    "STACK_COMMANDS",
    "COMMANDS",
    "CLI_EXTRA_MODULES",
    "EXIT_OK",
    "EXIT_FAILED",
    "EXIT_USAGE",
    "Failed",
    "json_option",
    "output_options",
    "OUTPUTS",
    "Rows",
    "emit",
    "sparkline",
    "write_csv",
    "import_progress",
    "run_stack",
]

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


COMMANDS = (
    run_command,
    demo_command,
    counter_command,
    import_command,
    counters_command,
    top_command,
    delete_board_command,
    forget_command,
    stats_command,
    top_pages_command,
    sources_command,
    browsers_command,
    operating_systems_command,
    devices_command,
    countries_command,
    languages_command,
    uniques_command,
    events_command,
    goals_command,
    funnel_command,
    define_goal_command,
    define_funnel_command,
    remove_goal_command,
    remove_funnel_command,
    tables_command,
    table_command,
    health_command,
    migrate_command,
    dead_letters_group,
    tokens_group,
    serve_command,
)
"""Every command of ``cli`` (its name is each one's ``name``); ``--help`` lists them sorted by name."""

for command in COMMANDS:
    cli.add_command(command)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``counters-tasks`` console script; returns the exit code."""
    try:
        result = cli.main(args=argv, prog_name="counters-tasks", standalone_mode=False)
    except ModuleNotFoundError as exc:
        if exc.name not in CLI_EXTRA_MODULES:
            raise
        click.echo(
            f"this command needs {exc.name}, which comes with the 'cli' extra: pip install 'counters-tasks[cli]'",
            err=True,
        )
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
