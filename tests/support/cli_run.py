"""``counters-tasks ARGS`` run in this process, as the console script runs it (click's runner):
the one helper of the tests that read a command's output and exit code without a subprocess."""

from __future__ import annotations

from click.testing import CliRunner

from counters_tasks.ops import cli


def run_in_process(*args: str, columns: int = 160) -> tuple[int, str, str]:
    """``(exit code, stdout, stderr)`` of ``counters-tasks ARGS``, tables laid out ``columns`` wide:
    through the console script's own ``main`` (a command's returned code is its exit code, as
    ``health``'s 1 when unhealthy; click's standalone ``main`` would end such a command with 0)."""
    with CliRunner().isolation(env={"COLUMNS": str(columns)}) as (out, err, _):
        try:
            code = cli.main(list(args))
        except SystemExit as exc:  # what a command raises to end with a code
            code = exc.code
    return code, out.getvalue().decode(), err.getvalue().decode()
