"""What each Redis call costs the server: the CPU time of its main thread while it served the call.

The budget tests hold every call of the package to 5 ms of the server's time. SLOWLOG measures
wall time, which on a 2-core machine also counts the moments the operating system gave Redis's
core to another process (a CI run saw a 0.1 ms ``HGETALL`` logged at 5.3 ms, and a big board's
calls over 7.5 ms in three runs of three). The main thread's CPU time (Linux
``/proc/<pid>/task/<pid>/schedstat``, in nanoseconds) is what the call itself took; waiting for a
core is not in it. Read around each call the test's client makes, one call at a time: a pipeline
that is not a transaction is sent one command after another while watched (the same commands in
the same order, replies and errors as the pipeline gives them), so each of its commands is judged
alone; a transaction (MULTI/EXEC) blocks the server for the whole of it, and is judged whole.

Where the server's ``/proc`` cannot be read (a Redis on another host, a cluster run), ``available``
is False and the tests judge by SLOWLOG (``servers.slow_calls``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.client import Pipeline

from tests.support.servers import TEST_COMMANDS, slow_calls


class ServerCpu:
    """The server's main-thread CPU time for each call of ``client`` (and of the pipelines made
    in this process, once ``watch`` ran)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        pid = int(client.info("server")["process_id"])
        self.path = Path(f"/proc/{pid}/task/{pid}/schedstat")
        self.available = self._readable(client)
        self.calls: list[tuple[int, bytes]] = []
        """(microseconds of the server's CPU, the command's first bytes), in the order sent."""

    def _readable(self, client: redis.Redis) -> bool:
        """The file is the server's own: its process answers this client from this machine."""
        try:
            self.now_ns()
        except OSError:
            return False
        host = client.connection_pool.connection_kwargs.get("host", "")
        return host in ("127.0.0.1", "localhost", "::1") or "path" in client.connection_pool.connection_kwargs

    def now_ns(self) -> int:
        """The main thread's CPU time so far, in nanoseconds."""
        return int(self.path.read_text().split()[0])

    def measured(self, head: bytes, call: Callable[[], Any]) -> Any:
        before = self.now_ns()
        try:
            return call()
        finally:
            self.calls.append(((self.now_ns() - before) // 1000, head))

    def watch(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Measure from now on every call of ``client`` and every pipeline of this process."""
        if not self.available:
            return
        plain = self.client.execute_command
        monkeypatch.setattr(
            self.client,
            "execute_command",
            lambda *args, **options: self.measured(command_head(args), lambda: plain(*args, **options)),
        )
        monkeypatch.setattr(Pipeline, "_execute_pipeline", _one_by_one(self, Pipeline._execute_pipeline))
        monkeypatch.setattr(Pipeline, "_execute_transaction", _measured_whole(self, Pipeline._execute_transaction))

    def over(self, limit_us: int, leave_out: tuple[bytes, ...] = ()) -> list[tuple[int, int, bytes]]:
        """The calls measured over ``limit_us``, but those whose command starts with ``leave_out``:
        (rank among the calls measured, microseconds, command)."""
        return [
            (rank, us, head)
            for rank, (us, head) in enumerate(self.calls)
            if us > limit_us and not head.upper().startswith(leave_out)
        ]

    def forget(self) -> None:
        self.calls.clear()


def command_head(args: tuple, size: int = 60) -> bytes:
    """The command as SLOWLOG shows it: its words, space separated, cut at ``size`` bytes."""
    words = [a if isinstance(a, bytes) else str(a).encode() for a in args]
    return b" ".join(words)[:size]


def _one_by_one(cpu: ServerCpu, original: Callable) -> Callable:
    def execute(pipe: Pipeline, connection: Any, commands: list, raise_on_error: bool) -> list:
        replies: list = []
        for command in commands:
            replies.extend(
                cpu.measured(command_head(command[0]), lambda c=command: original(pipe, connection, [c], False))
            )
        if raise_on_error:
            pipe.raise_first_error(commands, replies)
        return replies

    return execute


def _measured_whole(cpu: ServerCpu, original: Callable) -> Callable:
    def execute(pipe: Pipeline, connection: Any, commands: list, raise_on_error: bool) -> list:
        head = b"MULTI " + b"; ".join(command_head(command[0], 20) for command in commands)
        return cpu.measured(head[:60], lambda: original(pipe, connection, commands, raise_on_error))

    return execute


BUDGET_US = 5000
"""What one Redis call of the package may cost the server: 5 ms (README, "Bounded work")."""


class CallBudget:
    """The calls of the package over the budget since the last ``reset``: judged by the server's
    CPU time where it can be read (``ServerCpu``), else by SLOWLOG's wall time. SLOWLOG logs the
    calls over the budget either way, and ``wall_over`` lists them (a report, not a verdict where
    CPU time is read)."""

    def __init__(self, client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
        self.client = client
        self.cpu = ServerCpu(client)
        self.cpu.watch(monkeypatch)
        client.config_set("slowlog-log-slower-than", BUDGET_US)
        self.reset()

    @property
    def measure(self) -> str:
        return "server CPU" if self.cpu.available else "SLOWLOG wall time"

    def reset(self) -> None:
        """Forget the calls so far (a test's set-up is not judged)."""
        self.client.slowlog_reset()
        self.cpu.forget()

    def wall_over(self, limit_us: int = BUDGET_US) -> list[tuple[int, bytes]]:
        return [(us, head) for us, head in slow_calls(self.client) if us > limit_us]

    def over(self, limit_us: int = BUDGET_US) -> list[tuple[int, bytes]]:
        """The package's calls over ``limit_us`` since the last ``reset`` (the tests' own set-up
        and waiting left out)."""
        if self.cpu.available:
            return [(us, head) for _rank, us, head in self.cpu.over(limit_us, leave_out=TEST_COMMANDS)]
        return self.wall_over(limit_us)

    def slow_by_design(self, work: Callable[[], object], runs: int = 3) -> list[tuple[int, bytes]]:
        """The calls over the budget in each of up to ``runs`` runs of ``work`` (which calls
        ``reset`` once its set-up is done); [] as soon as one run has none.

        A call slow by design is slow every time, at the same place in the same work; a moment
        the machine took from Redis (a page reclaimed, a core lent to another process: once a
        call in some 30,000 took 11 ms of CPU on this 2-core machine, and the same call 0.6 ms
        in the next run) is not. With CPU time read, a call counts when the call at the same
        place (its rank among the calls measured, and its command) is over in every run; with
        SLOWLOG only, when every run has a call of the same command over."""
        common: set | None = None
        for _ in range(runs):
            work()
            places = self._places_over()
            common = places if common is None else common & places
            if not common:
                return []
        return self.over()

    def _places_over(self, limit_us: int = BUDGET_US) -> set[tuple[int, bytes]]:
        """Where the calls over ``limit_us`` were: (rank among the calls measured, command) with
        CPU time read, (0, the command's first two words) with SLOWLOG only."""
        if self.cpu.available:
            return {(rank, head) for rank, _us, head in self.cpu.over(limit_us, leave_out=TEST_COMMANDS)}
        return {(0, b" ".join(head.split(b" ")[:2])) for _us, head in self.wall_over(limit_us)}
