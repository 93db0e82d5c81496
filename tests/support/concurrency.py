"""Concurrency helpers: a check in a forked child, and work in many threads at once."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable


def true_in_forked_child(check: Callable[[], object]) -> bool:
    """Fork, run ``check`` in the child, and tell whether it returned something truthy there."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            ok = bool(check())
        except BaseException:
            ok = False
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.waitpid(pid, 0)
    os.close(read)
    return answer == b"1"


def run_threads(work: Callable[[int], object], count: int) -> list[BaseException]:
    """Run ``work(i)`` in ``count`` threads at once; returns the exceptions they raised."""
    errors: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            work(i)
        except BaseException as exc:  # reported to the test
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors
