"""The seeds' per-visit code as one Celery task: the baseline of ``bench/ingest.py``.

Ported command for command from the articles (bugs included): seed 001's ``savevisitinfo``,
seed 000's ``update_counter`` for ``hits`` and ``hits:<path>``, seed 002's ``count_visit``
(sharded SADD with the day's expected figure) and seed 004's ``DyStats.incr_stats``. The
worker loads it with ``celery -A counters_tasks worker -I bench.seed_tasks``.
"""

from __future__ import annotations

import binascii
import math
import time
from datetime import date, timedelta

from bench.counters import seed_update_counter  # noqa: E402
from bench.ranking import DyStats  # noqa: E402
from bench.visits import seed_save_visit_info  # noqa: E402
from counters_tasks.app import app  # noqa: E402
from counters_tasks.store.client import get_redis  # noqa: E402

SHARD_SIZE = 512
DAILY_EXPECTED = 1_000_000
EXPECTED: dict[str, int] = {}


def shard_key(base, key, total_elements, shard_size):
    if isinstance(key, int) or key.isdigit():
        shard_id = int(str(key), 10) // shard_size
    else:
        shards = 2 * total_elements // shard_size
        shard_id = binascii.crc32(key.encode()) % shards
    return f"{base}:{shard_id}"


def shard_sadd(conn, base, member, total_elements, shard_size):
    shard = shard_key(base, "x" + str(member), total_elements, shard_size)
    return conn.sadd(shard, member)


def get_expected(conn, key, today):
    if key in EXPECTED:
        return EXPECTED[key]
    exkey = key + ":expected"
    expected = conn.get(exkey)
    if not expected:
        yesterday = (today - timedelta(days=1)).isoformat()
        expected = conn.get(f"unique:{yesterday}")
        expected = int(expected or DAILY_EXPECTED)
        expected = 2 ** int(math.ceil(math.log(expected * 1.5, 2)))
        if not conn.setnx(exkey, expected):
            expected = conn.get(exkey)
    EXPECTED[key] = int(expected)
    return EXPECTED[key]


def seed_count_visit(conn, session_id):
    today = date.today()
    key = f"unique:{today.isoformat()}"
    expected = get_expected(conn, key, today)
    id_ = int(session_id.replace("-", "")[:15], 16)
    if shard_sadd(conn, key, id_, expected, SHARD_SIZE):
        conn.incr(key)


@app.task(name="bench.seed_visit", ignore_result=True)
def seed_visit(ip: str, path: str, session_id: str | None = None, ts: float | None = None) -> None:
    conn = get_redis()
    seed_save_visit_info(conn, ip, path, date.today().isoformat())
    for name in ("hits", f"hits:{path}"):
        seed_update_counter(conn, name, 1, ts or time.time())
    if session_id:
        seed_count_visit(conn, session_id)
    DyStats(conn, "pages", 24, 1).incr_stats(path)
