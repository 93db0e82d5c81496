"""Traffic shapes for the benchmarks: lists of ``(ip, path, session_id, ts)`` visits, the same
for the same seed.

- ``uniform``: every visit an independent draw: a path of 2,000, a visitor of 5,000, a session
  of 4,000 (the benchmarks' first shape: no page is popular, no visitor comes back on purpose);
- ``zipf``: a site with a popular head and a long tail: 20,000 paths Zipf-distributed
  (exponent 1.1), visitors arriving in sessions of several views (geometric, mean 4) that keep
  their IP and session id, a fifth of the sessions by a visitor seen before;
- ``log2015``: shaped like a small blog's access log of 2015: 3,000 paths, a steeper Zipf (1.3:
  the home page and a handful of posts take most views), short sessions (mean 2.5 views) and
  mostly one-time visitors; times spread over the last three hours of today (UTC), in order.
"""

from __future__ import annotations

import bisect
import itertools
import random
import time
import uuid
from collections.abc import Callable

Visit = tuple[str, str, str, float]


def ip_of(n: int) -> str:
    return f"10.{n // 65536 % 256}.{n // 256 % 256}.{n % 256}"


def session_id(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128)))


def uniform(n: int, seed: int = 1) -> list[Visit]:
    """Independent draws: a path of 2,000, an IP of 5,000, a session of 4,000, all at ``now``."""
    rng = random.Random(seed)
    ips = [ip_of(i) for i in range(5000)]
    paths = [f"/post/{i}" for i in range(2000)]
    sessions = [session_id(rng) for _ in range(4000)]
    now = time.time()
    return [(rng.choice(ips), rng.choice(paths), rng.choice(sessions), now) for _ in range(n)]


def zipf_sampler(rng: random.Random, size: int, exponent: float) -> Callable[[], int]:
    """Draws ranks 0..size-1 with probability proportional to 1 / (rank + 1) ** exponent."""
    weights = [1 / (rank + 1) ** exponent for rank in range(size)]
    cumulative = list(itertools.accumulate(weights))
    total = cumulative[-1]
    return lambda: min(bisect.bisect_left(cumulative, rng.random() * total), size - 1)


def sessions_of(
    n: int, seed: int, paths: list[str], exponent: float, mean_views: float, returning: float, spread_s: float
) -> list[Visit]:
    """``n`` views in sessions: each session a visitor (new, or one seen before with probability
    ``returning``) with a new session id, ``mean_views`` views on average (geometric), each view a
    Zipf-drawn path; session starts spread over the last ``spread_s`` seconds, views in time order."""
    rng = random.Random(seed)
    draw = zipf_sampler(rng, len(paths), exponent)
    now = time.time()
    start_of_day = now - now % 86400
    earliest = max(start_of_day, now - spread_s)
    visitors = 0
    out: list[Visit] = []
    while len(out) < n:
        visitor = rng.randrange(visitors) if visitors and rng.random() < returning else visitors
        visitors = max(visitors, visitor + 1)
        sid = session_id(rng)
        at = rng.uniform(earliest, now)
        views = 1
        while rng.random() > 1 / mean_views:
            views += 1
        for _ in range(min(views, n - len(out))):
            out.append((ip_of(visitor), paths[draw()], sid, min(at, now)))
            at += rng.uniform(5, 60)
    out.sort(key=lambda visit: visit[3])
    return out


def zipf(n: int, seed: int = 1) -> list[Visit]:
    """A site with a head and a long tail: 20,000 paths (Zipf 1.1), sessions of mean 4 views,
    a fifth of them by returning visitors, over the last 20 minutes."""
    return sessions_of(n, seed, [f"/article/{i}" for i in range(20000)], 1.1, 4.0, 0.2, 1200)


def log2015(n: int, seed: int = 1) -> list[Visit]:
    """A small blog's log of 2015: 3,000 paths (Zipf 1.3, the home page first), sessions of mean
    2.5 views, one in ten by a returning visitor, over the last three hours of today (UTC)."""
    paths = ["/"] + [f"/{2015 - i % 4}/{i % 12 + 1:02d}/post-{i}/" for i in range(2999)]
    return sessions_of(n, seed, paths, 1.3, 2.5, 0.1, 3 * 3600)


SHAPES: dict[str, Callable[[int, int], list[Visit]]] = {"uniform": uniform, "zipf": zipf, "log2015": log2015}
