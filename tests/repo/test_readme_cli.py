"""Every ``counters-tasks`` command of docs/cli.md and of README.md's "Reading the numbers" is run
here, the way the docs show it (through ``python -m counters_tasks.ops.cli``, what the console script
calls), over demo data. The session is also rendered to an SVG "screenshot"; with
``COUNTERS_UPDATE_DOCS=1`` (``make screenshots``) it replaces ``docs/cli-session.svg`` (or
writes into ``COUNTERS_DOCS_DIR``)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from counters_tasks.local.redis_server import free_port
from counters_tasks.local.waiting import wait_until
from tests.support import demo_data
from tests.support.procs import REPO, celery_env

pytestmark = [pytest.mark.processes, pytest.mark.long]

README = (REPO / "README.md").read_text()
CLI_DOC = (REPO / "docs" / "cli.md").read_text().split("## Importing access logs", 1)[0]


def readme_commands() -> list[tuple[dict[str, str], list[str]]]:
    """``(env, argv)`` of each ``counters-tasks`` line in the sh blocks of docs/cli.md (but its
    import section, run by tests/ops/test_importer.py) and of README's "Reading the numbers"."""
    section = CLI_DOC + README.split("## Reading the numbers", 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.S):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            env = {}
            while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
                name, _, value = words.pop(0).partition("=")
                env[name] = value
            if words and words[0] == "counters-tasks":
                commands.append((env, words[1:]))
    return commands


def test_readme_lists_every_query_command():
    listed = {argv[0] for _env, argv in readme_commands()}
    assert {"counters", "counter", "top", "stats", "top-pages", "uniques", "health", "serve", "import"} <= listed


def _serve(redis_url: str, env: dict, argv: list[str], tmp_path) -> tuple[str, int]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "counters_tasks.ops.cli", *argv, "--port", str(port)],
        cwd=REPO,
        env=celery_env(redis_url, **env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/api/counters"

    def status() -> int:
        try:
            return urllib.request.urlopen(url, timeout=2).status
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            assert process.poll() is None, "serve exited"
            return 0

    try:
        code = wait_until(status, timeout=30, what="serve to answer")
    finally:
        process.terminate()
        process.wait(15)
    return f"(serving on 127.0.0.1; GET /api/counters without credentials -> {code})\n", code


def test_every_readme_command_runs(raw_conn, redis_url, tmp_path):
    from rich.console import Console
    from rich.text import Text

    demo_data.seed(raw_conn)
    session = Console(record=True, width=100, file=open(os.devnull, "w"))
    for env, argv in readme_commands():
        shown = " ".join([*(f"{k}={v}" for k, v in env.items()), "counters-tasks", *map(shlex.quote, argv)])
        session.print(Text("$ " + shown, style="bold green"))
        if argv[0] == "serve":
            output, code = _serve(redis_url, env, argv, tmp_path)
            assert code == (401 if "COUNTERS_DASHBOARD_AUTH" in env else 200)
            session.print(Text(output))
            continue
        result = subprocess.run(
            [sys.executable, "-m", "counters_tasks.ops.cli", *argv],
            cwd=REPO,
            env=celery_env(redis_url, COLUMNS="100", FORCE_COLOR="1", **env),
            capture_output=True,
            text=True,
            timeout=60,
        )
        expected = 1 if argv[0] == "health" else 0  # no worker or beat runs in this test: unhealthy
        assert result.returncode == expected, (argv, result.stdout, result.stderr)
        assert result.stdout.strip(), argv
        if "--json" in argv:
            json.loads(result.stdout)
        session.print(Text.from_ansi(result.stdout.rstrip()))
    svg = tmp_path / "cli-session.svg"
    session.save_svg(str(svg), title="counters-tasks")
    text = svg.read_text()
    assert text.startswith("<svg") and "counters-tasks" in text and "posts" in text
    if os.environ.get("COUNTERS_UPDATE_DOCS") == "1":
        shutil.copy(svg, Path(os.environ.get("COUNTERS_DOCS_DIR") or REPO / "docs") / "cli-session.svg")
