#!/usr/bin/env bash
# Install what is missing: Debian's redis-server (apt-get, as root or through sudo) and the
# package with its test extra in ./.venv. Safe to run again: it does nothing when all is there.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! command -v redis-server >/dev/null 2>&1 && [ ! -x /usr/bin/redis-server ]; then
  echo "bootstrap: installing Debian's redis-server" >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi
# Cluster tools (redis-cli) come with the same package; the service it may register is not used.

VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  echo "bootstrap: creating $VENV" >&2
  "${PYTHON:-python3}" -m venv "$VENV"
fi
if [ ! -f "$VENV/.installed" ] || [ pyproject.toml -nt "$VENV/.installed" ]; then
  echo "bootstrap: installing counters-tasks[test] into $VENV" >&2
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$VENV/bin/python" -m pip install -q -e ".[test]"
  touch "$VENV/.installed"
fi
