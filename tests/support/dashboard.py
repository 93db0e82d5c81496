"""Starlette's test client for the dashboard app, sending requests as a browser on this machine
does (Host ``127.0.0.1:8000``: an unauthenticated dashboard answers loopback Host names only)."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

with warnings.catch_warnings():  # Starlette 1.x asks for httpx2; httpx works on every version we allow
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient as StarletteTestClient


def TestClient(app: Any, **options: Any) -> StarletteTestClient:  # noqa: N802  (named as the class it makes)
    return StarletteTestClient(app, **{"base_url": "http://127.0.0.1:8000", **options})


@contextlib.contextmanager
def served(app: Any) -> Iterator[str]:
    """``app`` (the dashboard's, ``web.create_app``) served by uvicorn in a thread of this process
    on a free port, so a real browser reads what the test wrote or stubbed in this process: its
    base URL, the server stopped on leaving."""
    import threading

    import uvicorn

    from counters_tasks.local.redis_server import free_port
    from counters_tasks.local.waiting import wait_until

    server = uvicorn.Server(uvicorn.Config(app, port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, timeout=20, what="the dashboard to start")
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(15)
