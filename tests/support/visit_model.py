"""An exact model of what visits should count (plain Python dicts and sets), and the check
that Redis agrees with it: site and path PV/UV per day and all time, daily uniques, hits.

The model is an independent, simple re-statement of the documented rules, not the package's
code: a view counts once in PV, its address once in each UV set; its day comes from zoneinfo
(not ``core.days``), its session's number from the seed article's rule written out here (not
``uniques.session_number``), its path cut at ``?`` and ``#``. The package is used only to read
the figures back (``sitestats``, ``uniques``, ``counters``), which the check compares."""

from __future__ import annotations

import os
import random
import uuid
from collections import defaultdict
from datetime import date, datetime
from zoneinfo import ZoneInfo

from counters_tasks import counters, sitestats, uniques
from counters_tasks.sitestats import SiteCount


def model_zone() -> str:
    """The zone that defines a day: ``COUNTERS_TIMEZONE`` as the test set it, else UTC (the
    documented default, docs/configuration.md)."""
    return os.environ.get("COUNTERS_TIMEZONE") or "UTC"


def local_date(ts: float, zone: str | None = None) -> date:
    """The local date of epoch seconds ``ts`` in ``zone`` (default ``model_zone()``), worked out
    here with zoneinfo, not by the package's ``core.days``: the model must not share its bugs."""
    return datetime.fromtimestamp(ts, ZoneInfo(zone or model_zone())).date()


def session_number(session_id: str) -> int:
    """The daily uniques id of a session (the seed article's rule, docs/design.md): the integer
    of its first 15 hex digits, dashes left out."""
    return int(session_id.replace("-", "")[:15], 16)


class VisitModel:
    def __init__(self) -> None:
        self.pv: dict[tuple, int] = defaultdict(int)
        self.uv: dict[tuple, set] = defaultdict(set)
        self.sessions: dict = defaultdict(set)
        self.hits: dict[str, int] = defaultdict(int)

    def add(self, ip: str, path: str, session_id: str | None, ts: float) -> None:
        day = local_date(ts)
        path = path.split("?")[0].split("#")[0]
        for key in ((None, None), (day, None), (None, path), (day, path)):
            self.pv[key] += 1
            self.uv[key].add(ip)
        if session_id is not None:
            self.sessions[day].add(session_number(session_id))
        self.hits["hits"] += 1
        self.hits[f"hits:{path}"] += 1

    def mismatches(self, conn) -> list[str]:
        """Every figure Redis gives that differs from the model (empty when all agree)."""
        wrong = []
        for day, path in self.pv:
            expected = SiteCount(day, self.pv[(day, path)], len(self.uv[(day, path)]))
            got = sitestats.site_visit_info(conn, day, path)
            if got != expected:
                wrong.append(f"site_visit_info({day}, {path}) = {got}, expected {expected}")
        for day, ids in self.sessions.items():
            got = uniques.unique_visitors(conn, day)
            if got != len(ids):
                wrong.append(f"unique_visitors({day}) = {got}, expected {len(ids)}")
        for name, total in self.hits.items():
            got = sum(t for _b, t in counters.get_counter(conn, name, 86400))
            if got != total:
                wrong.append(f"counter {name} = {got}, expected {total}")
        return wrong

    def visits_counted(self, conn) -> int:
        return sitestats.site_visit_info(conn).pv


def random_visits(
    n: int,
    seed: int = 1,
    ts: float | None = None,
    visitors: int = 300,
    paths: int = 40,
    sessions: int = 200,
    spread: float = 0.0,
) -> list[dict]:
    """``n`` visit dicts (the record_visits payload form) from a fixed seed."""
    import time

    rng = random.Random(seed)
    base = time.time() if ts is None else ts
    ips = [f"198.51.{i // 250}.{i % 250}" for i in range(visitors)] + [f"2001:db8::{i:x}" for i in range(visitors // 4)]
    path_list = ["/"] + [f"/page/{i}" for i in range(paths - 1)]
    session_list = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(sessions)]
    out = []
    for _ in range(n):
        visit = {"ip": rng.choice(ips), "path": rng.choice(path_list), "ts": base - rng.uniform(0, spread)}
        if rng.random() < 0.8:
            visit["session_id"] = rng.choice(session_list)
        out.append(visit)
    return out


def model_of(visits: list[dict]) -> VisitModel:
    model = VisitModel()
    for v in visits:
        model.add(v["ip"], v["path"], v.get("session_id"), v["ts"])
    return model
