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
from datetime import datetime, timedelta, timezone

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


MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
"""An access log's month names (``%b`` of the C locale, whatever the machine's)."""


def log_time(ts: float, offset_hours: float = 0) -> str:
    """An access log line's time (``%t``) as Apache writes it, in a zone ``offset_hours`` from UTC
    (the importer must undo it): ``17/May/2015:10:05:03 +0000``."""
    when = datetime.fromtimestamp(ts, timezone(timedelta(hours=offset_hours)))
    sign = "+" if offset_hours >= 0 else "-"
    minutes = int(abs(offset_hours) * 60)
    return (
        f"{when.day:02d}/{MONTHS[when.month - 1]}/{when.year}:{when:%H:%M:%S} "
        f"{sign}{minutes // 60:02d}{minutes % 60:02d}"
    )


SHAPES: dict[str, Callable[[int, int], list[Visit]]] = {"uniform": uniform, "zipf": zipf, "log2015": log2015}

AGENTS_2015: list[tuple[str, str, int]] = [
    # (user agent, its device type, its weight): real browsers' user agents of 2015, the share
    # of each roughly as a blog's log of that year had them (desktop two thirds)
    (
        "Mozilla/5.0 (Windows NT 6.1; WOW64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/45.0.2454.101 Safari/537.36",
        "desktop",
        14,
    ),
    (
        "Mozilla/5.0 (Windows NT 10.0; WOW64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/46.0.2490.80 Safari/537.36",
        "desktop",
        8,
    ),
    (
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_10_5) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/45.0.2454.101 Safari/537.36",
        "desktop",
        7,
    ),
    ("Mozilla/5.0 (Windows NT 6.1; WOW64; rv:41.0) Gecko/20100101 Firefox/41.0", "desktop", 8),
    ("Mozilla/5.0 (Windows NT 6.1; WOW64; Trident/7.0; rv:11.0) like Gecko", "desktop", 6),
    (
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_11) AppleWebKit/601.1.56 (KHTML, like Gecko) Version/9.0 Safari/601.1.56",
        "desktop",
        4,
    ),
    ("Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:40.0) Gecko/20100101 Firefox/40.0", "desktop", 3),
    (
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/42.0.2311.135 Safari/537.36 Edge/12.10240",
        "desktop",
        3,
    ),
    (
        "Mozilla/5.0 (iPhone; CPU iPhone OS 8_4 like Mac OS X) AppleWebKit/600.1.4 (KHTML, like Gecko) Version/8.0 Mobile/12H143 Safari/600.1.4",
        "mobile",
        6,
    ),
    (
        "Mozilla/5.0 (iPhone; CPU iPhone OS 9_0_2 like Mac OS X) AppleWebKit/601.1.46 (KHTML, like Gecko) Version/9.0 Mobile/13A452 Safari/601.1",
        "mobile",
        5,
    ),
    (
        "Mozilla/5.0 (Linux; Android 5.0; SM-G900F Build/LRX21T) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/45.0.2454.94 Mobile Safari/537.36",
        "mobile",
        5,
    ),
    (
        "Mozilla/5.0 (Linux; Android 4.4.2; Nexus 5 Build/KOT49H) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/44.0.2403.133 Mobile Safari/537.36",
        "mobile",
        3,
    ),
    (
        "Mozilla/5.0 (iPad; CPU OS 8_4_1 like Mac OS X) AppleWebKit/600.1.4 (KHTML, like Gecko) Version/8.0 Mobile/12H321 Safari/600.1.4",
        "tablet",
        4,
    ),
    (
        "Mozilla/5.0 (Linux; Android 5.0.2; SM-T530 Build/LRX22G) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/45.0.2454.84 Safari/537.36",
        "tablet",
        2,
    ),
    (
        "Mozilla/5.0 (Linux; U; Android 4.0.3; en-us; KFTT Build/IML74K) AppleWebKit/535.19 (KHTML, like Gecko) Silk/3.68 like Chrome/19.0.1084.78 Safari/535.19",
        "tablet",
        1,
    ),
    ("Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", "bot", 2),
]
"""Real user agents of 2015 with the device type each is (the tests check the rule against it)."""

LANGUAGES = ["en-US,en;q=0.8", "en-GB,en;q=0.9", "de-DE,de;q=0.8,en;q=0.6", "fr-FR,fr;q=0.8", "es-ES,es;q=0.9", "ja"]
"""Accept-Language headers of browsers, a visitor's chosen by its IP."""


def headers_of(ip: str) -> tuple[str, str]:
    """The user agent (of ``AGENTS_2015``, by weight) and Accept-Language a visitor sends: the
    same for the same IP, so a visitor keeps its browser."""
    draw = random.Random(ip)
    agent = draw.choices([a for a, _d, _w in AGENTS_2015 if _d != "bot"], [w for _a, d, w in AGENTS_2015 if d != "bot"])
    return agent[0], draw.choice(LANGUAGES)
