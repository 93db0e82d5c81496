"""Starlette's test client for the dashboard app, sending requests as a browser on this machine
does (Host ``127.0.0.1:8000``: an unauthenticated dashboard answers loopback Host names only)."""

from __future__ import annotations

import warnings
from typing import Any

with warnings.catch_warnings():  # Starlette 1.x asks for httpx2; httpx works on every version we allow
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient as StarletteTestClient


def TestClient(app: Any, **options: Any) -> StarletteTestClient:  # noqa: N802  (named as the class it makes)
    return StarletteTestClient(app, **{"base_url": "http://127.0.0.1:8000", **options})
