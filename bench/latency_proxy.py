"""A TCP proxy that delays every chunk by a fixed one-way latency (in its own process).

The benchmarks run on one machine, where a Redis round trip costs ~20 microseconds; across a
network it costs 0.1-1 ms, and then the number of round trips per visit decides throughput.
This emulates that latency without root (no ``tc netem``): each chunk read from one side is
written to the other ``delay`` seconds after it arrived, in order, with no bandwidth limit.
"""

from __future__ import annotations

import multiprocessing
import queue
import socket
import threading
import time
from typing import Any


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _pump(source: socket.socket, target: socket.socket, delay: float) -> None:
    """Copy ``source`` to ``target``, each chunk ``delay`` seconds after it arrived, in order."""
    pending: queue.Queue = queue.Queue()

    def read() -> None:
        try:
            while data := source.recv(65536):
                pending.put((time.perf_counter() + delay, data))
        except OSError:
            pass
        pending.put((0.0, b""))

    def write() -> None:
        try:
            while True:
                due, data = pending.get()
                if not data:
                    break
                wait = due - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                target.sendall(data)
        except OSError:
            pass
        for sock in (source, target):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    threading.Thread(target=read, daemon=True).start()
    threading.Thread(target=write, daemon=True).start()


def _serve(listen_port: int, target_port: int, delay: float, ready: Any) -> None:
    listener = socket.create_server(("127.0.0.1", listen_port))
    ready.set()
    while True:
        client, _ = listener.accept()
        server = socket.create_connection(("127.0.0.1", target_port))
        for sock in (client, server):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _pump(client, server, delay)
        _pump(server, client, delay)


class LatencyProxy:
    """``with LatencyProxy(redis_port, rtt_ms=0.5) as port:`` connect to 127.0.0.1:port."""

    def __init__(self, target_port: int, rtt_ms: float) -> None:
        self.target_port = target_port
        self.delay = rtt_ms / 2000.0
        self.port = _free_port()
        self.process: multiprocessing.Process | None = None

    def __enter__(self) -> int:
        ready = multiprocessing.Event()
        self.process = multiprocessing.Process(
            target=_serve, args=(self.port, self.target_port, self.delay, ready), daemon=True
        )
        self.process.start()
        if not ready.wait(10):
            raise RuntimeError("latency proxy did not start")
        return self.port

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.join(5)
