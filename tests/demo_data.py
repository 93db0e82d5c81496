"""Demo data for the dashboard and CLI tests: written with the public API over the real Redis."""

from __future__ import annotations

import random
import time

from counters_tasks import counters, ranking

POSTS = ["redis-counters", "celery-beat", "hyperloglog", "intsets", "sliding-windows", "lua-scripts"]


def seed(conn, now: float | None = None, seed: int = 3) -> float:
    """Counters ``hits`` and ``signups`` over the last hour, and a board ``posts``; returns now."""
    now = time.time() if now is None else now
    rng = random.Random(seed)
    for i in range(600):
        ts = now - rng.uniform(0, 3600)
        counters.update_counter(conn, "hits", rng.randint(1, 5), now=ts)
        if i % 7 == 0:
            counters.update_counter(conn, "signups", 1, now=ts)
    board = ranking.Ranking(conn, "posts")
    for i, post in enumerate(POSTS):
        for _ in range(3 + 4 * (len(POSTS) - i)):
            board.incr(post, rng.randint(1, 3), now=now - rng.uniform(0, 6 * 3600))
    return now
