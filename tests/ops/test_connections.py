"""``counters-tasks serve`` under connections that never send a whole request (``ops.connections``):
a real server process, hundreds of idle, half-sent and trickling sockets, and real requests that
must still be answered within 2 s; the idle ones are closed by the server's own rules."""

from __future__ import annotations

import os
import select
import socket
import time
import urllib.request
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from counters_tasks.local.waiting import wait_until
from counters_tasks.ops.connections import MAX_CONNECTIONS
from tests.support.procs import celery_env, start_serve

HALF_SENT = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow"  # the head never ends
REQUEST_TIMEOUT = 3.0
"""COUNTERS_DASHBOARD_REQUEST_TIMEOUT of the server here (10 by default: the test would wait it out)."""


def answers_within(url: str, seconds: float) -> int:
    """The status of a GET of ``url``, which must come within ``seconds`` (else the test fails)."""
    started = time.monotonic()
    with urllib.request.urlopen(url, timeout=seconds) as answer:
        status = answer.status
        answer.read()
    assert time.monotonic() - started < seconds
    return status


def open_sockets(pid: int) -> int:
    """Sockets the process holds (its listening socket and Redis clients included)."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:  # closed meanwhile
            pass
    return count


TCP_STATES = {"01": "established", "03": "SYN received", "06": "time wait", "07": "closed", "08": "close wait"}


def tcp_rows(pid: int, port: int) -> Iterator[tuple[int, str, str]]:
    """The kernel's TCP table as process ``pid`` sees it, the rows on local ``port``: (client
    port, state, socket inode; "0" for a connection in the listen queue, not accepted yet)."""
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as rows:
            next(rows)  # the header
            for row in rows:
                fields = row.split()
                local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
                if int(local.rsplit(":", 1)[1], 16) == port:
                    yield int(remote.rsplit(":", 1)[1], 16), state, inode


def peer_ports(pid: int, port: int) -> set[int]:
    """The client ports of the connections process ``pid`` has accepted on ``port``: its socket
    fds matched by inode against the kernel's TCP table. Exact where a count of the process's
    sockets is not: a socket it held for a moment (the probe that found it up, a Redis client)
    closing meanwhile would hide one accepted connection from a count."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return {client for client, _state, inode in tcp_rows(pid, port) if inode in inodes and client}


def where_they_are(pid: int, port: int, clients: set[int]) -> str:
    """Where the kernel has each of ``clients`` (not accepted by the server): by state, "in the
    listen queue" for an established connection no process holds yet."""
    seen: dict[str, int] = {}
    found = set()
    for client, state, inode in tcp_rows(pid, port):
        if client in clients:
            found.add(client)
            where = "in the listen queue" if state == "01" and inode == "0" else TCP_STATES.get(state, state)
            seen[where] = seen.get(where, 0) + 1
    if clients - found:
        seen["gone from the table"] = len(clients - found)
    return ", ".join(f"{count} {where}" for where, count in sorted(seen.items()))


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed ``sock`` (readable with nothing left to read)."""
    if not select.select([sock], [], [], 0)[0]:
        return False
    try:
        return sock.recv(4096) == b""
    except ConnectionError:
        return True


@pytest.fixture(params=[None])
def server(request, redis_url, tmp_path) -> Iterator[tuple[int, str]]:
    """A real ``counters-tasks serve``: (its pid, its base URL), once it answers. Parametrized
    with a request timeout, it is the server's (else the default, 10 s)."""
    extra = {} if request.param is None else {"COUNTERS_DASHBOARD_REQUEST_TIMEOUT": str(request.param)}
    process, base = start_serve(celery_env(redis_url, **extra), tmp_path / "serve.log")

    def up() -> bool:
        try:
            return answers_within(base + "/api/config", 10) == 200
        except OSError:
            assert process.poll() is None, (tmp_path / "serve.log").read_text()
            return False

    try:
        wait_until(up, timeout=30, what="the dashboard to answer")
        yield process.pid, base
    finally:
        process.terminate()
        process.wait(15)


@pytest.mark.processes
@pytest.mark.timing  # 200 sockets accepted within the server's 10 s request timeout: alone, not beside another test
def test_idle_and_half_sent_connections_do_not_shut_out_real_requests(server):
    pid, base = server
    port = urlsplit(base).port
    held: list[socket.socket] = []
    try:
        for n in range(200):
            sock = socket.create_connection(("127.0.0.1", port))
            if n % 2:
                sock.sendall(HALF_SENT)
            held.append(sock)
        # every one of them accepted by the server before the real requests come
        ports = {sock.getsockname()[1] for sock in held}
        missing: set[int] = set()

        def all_accepted() -> bool:
            missing.clear()
            missing.update(ports - peer_ports(pid, port))
            return not missing

        try:
            wait_until(all_accepted, timeout=10, what="the server to accept 200 sockets")
        except TimeoutError as error:
            raise AssertionError(
                f"{len(missing)} of 200 not accepted within 10 s ({where_they_are(pid, port, missing)}); "
                f"the server holds {open_sockets(pid)} sockets"
            ) from error
        for path in ("/", "/metrics", "/api/stats", "/api/config"):
            assert answers_within(base + path, 2.0) == 200, path
        assert not any(closed_by_server(sock) for sock in held)  # under the cap: nobody was evicted
    finally:
        for sock in held:
            sock.close()


@pytest.mark.processes
@pytest.mark.timing  # closed after REQUEST_TIMEOUT, answered within 2 s: alone, not beside another test
@pytest.mark.parametrize("server", [REQUEST_TIMEOUT], indirect=True, ids=["timeout"])
def test_connections_that_never_send_a_request_are_closed(server):
    """Over the cap the longest-waiting connection goes at once; every idle, half-sent or trickling
    one goes after REQUEST_TIMEOUT; real requests are answered all along."""
    pid, base = server
    port = urlsplit(base).port
    extra = 40
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(MAX_CONNECTIONS + extra)]
    trickling = socket.create_connection(("127.0.0.1", port))
    opened = time.monotonic()
    try:
        # the oldest `extra` (and one more for the trickler) are closed as the newer ones come
        wait_until(
            lambda: sum(closed_by_server(sock) for sock in idle[: extra + 1]) == extra + 1,
            timeout=10,
            what="the oldest idle connections to be closed",
        )
        assert answers_within(base + "/api/config", 2.0) == 200
        sent = 0

        def trickler_closed() -> bool:
            nonlocal sent
            if closed_by_server(trickling):
                return True
            try:  # a byte at a time, never a whole head
                trickling.sendall(HALF_SENT[sent % len(HALF_SENT) :][:1])
                sent += 1
            except OSError:
                return True
            return False

        wait_until(trickler_closed, timeout=REQUEST_TIMEOUT + 10, interval=0.5, what="the trickler to be closed")
        # it kept sending a byte every half second (a keep-alive timer would have been reset), and
        # was closed at the deadline all the same
        assert time.monotonic() - opened >= REQUEST_TIMEOUT - 0.5 and sent >= 2
        wait_until(
            lambda: all(closed_by_server(sock) for sock in idle[extra + 1 :]),
            timeout=10,
            what="every idle connection to be closed after its deadline",
        )
        assert answers_within(base + "/metrics", 2.0) == 200
    finally:
        for sock in [*idle, trickling]:
            sock.close()


def test_requests_past_the_limit_are_answered_503_at_once():
    """The bound on work is on requests in hand (``web.RequestLimit``), not on connections."""
    import asyncio

    from counters_tasks.ops.web import RequestLimit

    release = asyncio.Event()

    async def slow_app(scope, receive, send):
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def call(app) -> int:
        sent: list[dict] = []

        async def receive() -> dict:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict) -> None:
            sent.append(message)

        await app({"type": "http", "method": "GET", "path": "/", "headers": [], "query_string": b""}, receive, send)
        return sent[0]["status"]

    async def scenario() -> tuple[list[int], int, int]:
        limited = RequestLimit(slow_app, limit=2)
        in_hand = [asyncio.create_task(call(limited)) for _ in range(2)]
        await asyncio.sleep(0)  # both are now in hand
        refused = await asyncio.wait_for(call(limited), timeout=2)
        release.set()
        return list(await asyncio.gather(*in_hand)), refused, limited.in_hand

    answered, refused, left = asyncio.run(scenario())
    assert answered == [200, 200] and refused == 503 and left == 0
