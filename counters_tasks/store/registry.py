"""Sharded registries: names (of counters, of boards) kept in several ZSETs, each its own
cluster slot, walked with ZSCAN a page at a time (never KEYS or SCAN).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from .client import RedisClient, as_str


def walk(conn: RedisClient, registries: Iterable[str], page_size: int) -> Iterator[tuple[str, list[str]]]:
    """``(registry key, names)`` pages of every registry in turn, about ``page_size`` names a page."""
    for registry in registries:
        cursor = 0
        while True:
            cursor, page = conn.zscan(registry, cursor, count=page_size)
            names = [as_str(member) for member, _score in page]
            if names:
                yield registry, names
            if int(cursor) == 0:
                break


def all_names(conn: RedisClient, registries: Iterable[str]) -> list[str]:
    """Every name in the registries, sorted."""
    names: set[str] = set()
    for registry in registries:
        names.update(as_str(member) for member in conn.zrange(registry, 0, -1))
    return sorted(names)
