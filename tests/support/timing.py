"""Tests that measure time run alone when the suite runs in parallel (``make test``: pytest-xdist,
two worker processes).

A test marked ``timing`` or ``budget`` asserts wall time or Redis's own call times (latency at p90,
SLOWLOG's 5 ms budget, a ratio of two timings): a test of the other worker running beside it on the
same two cores would take CPU from its Redis or its worker and make it fail on a slow moment that is
not the package's. So, under xdist, each test holds a lock for its whole run (set-up, call,
tear-down): shared by the ordinary tests, exclusive for a timed one, which therefore starts once the
other worker's current test has ended, and no test starts beside it until it ends. A timed test
waiting closes a gate first, so a worker that runs one short test after another cannot keep it
waiting for ever. The locks are ``flock`` locks on two files in the run's temp root (the parent of
each worker's ``--basetemp``), held through open file descriptors: a worker that dies releases its
locks with its process. The wait happens before the test's set-up, so it is not counted in the
test's durations (``--durations``) nor in its timeout. Without xdist this does nothing. Under
xdist the timed tests run first, back to back on one worker, in one turn (``timed_tests_first``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

TIMED_MARKERS = ("timing", "budget")
"""The markers of a test that must run alone under xdist (pyproject.toml declares both)."""

_locks: dict[str, int] = {}
_held = {"alone": False}
"""Whether this worker holds its turn alone (from a timed test to the last of those that follow it)."""


def is_timed(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(name) is not None for name in TIMED_MARKERS)


def _lock_files(config: pytest.Config) -> tuple[int, int] | None:
    """(gate, run) descriptors of this xdist run's lock files; None when not an xdist worker."""
    if not hasattr(config, "workerinput") or not config.option.basetemp:
        return None
    if not _locks:
        root = Path(config.option.basetemp).parent  # the controller's basetemp: one per run
        root.mkdir(parents=True, exist_ok=True)
        for name in ("gate", "run"):
            _locks[name] = os.open(root / f"timing-{name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    return _locks["gate"], _locks["run"]


def timed_tests_first(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker, the timed tests first in the collection (their order otherwise kept):
    xdist hands each worker consecutive tests, so one worker runs them all back to back at the
    start, in one turn (``turn``), on a Redis that no test has used yet; the other worker stops
    once for all of them instead of once each (each stop waits for the end of the test it is
    running: 3 s on average in this suite). Every worker orders the same way, as xdist requires."""
    if hasattr(config, "workerinput"):
        items[:] = [item for item in items if is_timed(item)] + [item for item in items if not is_timed(item)]


@contextlib.contextmanager
def turn(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Hold this worker's turn to run ``item``: alone when it is timed (kept for ``nextitem``
    when that is timed too), beside ordinary tests else."""
    files = _lock_files(item.config)
    if files is None:
        yield
        return
    gate, run = files
    timed = is_timed(item)
    if timed and not _held["alone"]:
        fcntl.flock(gate, fcntl.LOCK_EX)  # no ordinary test starts from now on
        fcntl.flock(run, fcntl.LOCK_EX)  # once the one running ends
        _held["alone"] = True
    elif not timed:
        fcntl.flock(gate, fcntl.LOCK_SH)  # waits while a timed test holds or waits for its turn
        fcntl.flock(run, fcntl.LOCK_SH)
        fcntl.flock(gate, fcntl.LOCK_UN)
    try:
        yield
    finally:
        if not timed:
            fcntl.flock(run, fcntl.LOCK_UN)
        elif nextitem is None or not is_timed(nextitem):
            fcntl.flock(run, fcntl.LOCK_UN)
            fcntl.flock(gate, fcntl.LOCK_UN)
            _held["alone"] = False
