"""``make test`` runs the suite in two worker processes (pytest-xdist), and a test that measures time
(marker ``timing`` or ``budget``) runs alone there: no other test of the run is running while it
runs (``tests/support/timing.py``, wired by ``tests/conftest.py``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import json, os, time

import pytest


def record(kind):
    start = time.time()
    time.sleep(0.3)
    with open(os.environ["PROBE_LOG"], "a") as log:
        log.write(json.dumps([kind, os.environ["PYTEST_XDIST_WORKER"], start, time.time()]) + "\\n")


@pytest.mark.parametrize("n", range(3))
def test_before(n):
    record("ordinary")


@pytest.mark.timing
def test_timed():
    record("timed")


@pytest.mark.parametrize("n", range(3))
def test_between(n):
    record("ordinary")


@pytest.mark.budget
def test_budget():
    record("timed")


@pytest.mark.parametrize("n", range(3))
def test_after(n):
    record("ordinary")
"""


def overlap(a: list, b: list) -> bool:
    return a[2] < b[3] and b[2] < a[3]


def test_make_test_runs_two_workers():
    recipe = re.search(r"^test:.*\n((?:\t.*\n)+)", (REPO / "Makefile").read_text(), re.M)[1]
    assert " -n 2 " in recipe and "--durations=15" in recipe


def test_a_timed_test_runs_while_no_other_test_runs(tmp_path):
    (tmp_path / "test_probe.py").write_text(PROBE)
    log = tmp_path / "log.jsonl"
    env = {**os.environ, "PROBE_LOG": str(log), "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    # the suite's conftest as a plugin (its hooks and fixtures), its markers from pyproject.toml
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            "-p",
            "tests.conftest",
            "-c",
            str(REPO / "pyproject.toml"),
            "--rootdir",
            str(tmp_path),
            "-q",
            "-p",
            "no:cacheprovider",
            str(tmp_path / "test_probe.py"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(runs) == 11 and {worker for _, worker, _, _ in runs} == {"gw0", "gw1"}
    ordinary = [run for run in runs if run[0] == "ordinary"]
    timed = [run for run in runs if run[0] == "timed"]
    # the run is parallel (else the check below proves nothing)...
    assert any(overlap(a, b) for a in ordinary for b in ordinary if a[1] != b[1])
    # ...but not while a timed test runs
    for run in timed:
        assert [other for other in runs if other is not run and overlap(run, other)] == [], run
    # the timed tests ran first, back to back on one worker: no other test started from the first one's start
    # to the last one's end
    assert len({worker for _, worker, _, _ in timed}) == 1
    first, last = min(run[2] for run in timed), max(run[3] for run in timed)
    assert [run for run in ordinary if first < run[2] < last] == []
