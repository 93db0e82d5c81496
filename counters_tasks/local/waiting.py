"""Waiting for local processes: one polling loop with a deadline, for servers, clusters, workers."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T], timeout: float = 30.0, interval: float = 0.05, what: str = "the condition"
) -> T:
    """Call ``condition`` until it returns something truthy (returned), or raise TimeoutError
    naming ``what`` after ``timeout`` seconds. ``condition`` may raise to give up at once."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
