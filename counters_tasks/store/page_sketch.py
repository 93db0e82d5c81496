"""A page's (a source's, a who-visits value's) visitors of one day, in a few bytes or a Redis
HyperLogLog: what ``lua/lib/page_sketch.lua`` keeps after ``"<pv> <uv> "`` in a day's table value,
read here to count unique visitors over a range of days (``sitestats.site_visit_range``,
``top_sources``, ``top_clients``). The two must agree; the test suite checks them against each other.

A sketch holds each visitor new to the page that day as a 6-character id (the first 36 bits of
its visitor id, base64url) while there are at most ``EXACT_IDS`` (256) of them: the union of such
days is exact (two visitors of one page share 36 bits with odds of ~1 in 10^7 at 1,000 visitors).
Past that, ``"#"``: the ids are in a HyperLogLog of Redis's own (``PFADD`` of each 6-character id)
under ``hll_key``, and the union of the days is estimated as Redis estimates it (``PFCOUNT``,
``store.hll``), with a standard error of 0.81% (``hll.STANDARD_ERROR``). (A script call makes at
most 24 lists into HLLs: a list past ``EXACT_IDS`` may wait, exact and longer, for a later call;
``parse`` reads a list of any length.)

Key layout 1 kept 42 ids, then ``"!"`` and ``REGISTERS`` registers of a HyperLogLog of its own
(``STANDARD_ERROR``, 6.5%): such days are read as they are until they leave retention.
Cost: 7 bytes for a page's first visitor of a day, 6 for each next up to 1.5 KB; past 256
visitors, an HLL key (sparse: 2-3 bytes a visitor and ~100 bytes of key; dense past ~1,500
visitors: 12 KB).
"""

from __future__ import annotations

import functools
import math
import re
import secrets
from collections.abc import Callable, Iterable
from typing import Any

from redis.client import NEVER_DECODE

from . import hll, keys
from .client import RedisClient, is_cluster, read_pipeline

B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
VALUE = {char: n for n, char in enumerate(B64)}
_VALUES = bytes(VALUE.get(chr(byte), 0) for byte in range(256))
"""``VALUE`` as a ``bytes.translate`` table (any other character reads as 0)."""
EXACT_IDS = 256
"""Ids a day's sketch lists, exact, before its HyperLogLog: Redis's estimate of a few hundred
visitors is off by one collision of registers in 16,384 (~n^2 / 32,768 of them, which its
estimator expects): 2.1% at 48 visitors, so 7.7% of sets of 48 were off by more than 2% in a
measure of 300, none of 245 or more; a list of 256 ids is 1.5 KB."""
REGISTERS = 256
ID_CHARS = 6
STANDARD_ERROR = 1.04 / math.sqrt(REGISTERS)
"""The relative standard error of a union that holds a day of key layout 1 past EXACT_IDS visitors."""
HLL = "#"
"""A sketch whose visitors are in the HyperLogLog of ``hll_key``."""


def hll_key(table_key: str, field: str, letter: str = "") -> str:
    """The HyperLogLog of a field's visitors of the day once past ``EXACT_IDS``: the key of the
    table holding its sketch, ``:``, ``letter`` (a who-visits table's, whose sketches share one
    HASH) and the field's digest (``keys.path_digest``; ``~`` for ``""``, the overflow, which no
    digest is). Made the same way in ``lua/site_day.lua`` from the digests it is given."""
    return f"{table_key}:{letter}{keys.path_digest(field) if field else OVERFLOW_DIGEST}"


OVERFLOW_DIGEST = "~"
"""What names the overflow field's (``""``, "(other)") HyperLogLog in its key (``hll_key``)."""


Sketch = tuple[str, str]
"""A day's sketch of a field, and the key of its HyperLogLog (``hll_key``: used when it reads ``#``)."""


def union(conn: RedisClient, sketches: Iterable[Sketch]) -> tuple[int, float]:
    """``(distinct visitors, relative standard error)`` of the union of days' sketches: exact
    (0.0) when every day kept its ids; else Redis's estimate of the union of the days' HLLs and the
    other days' ids (``hll.STANDARD_ERROR``, counted by ``hll_union``). Days of key
    layout 1 (registers) are estimated as that layout did, with its error (``STANDARD_ERROR``),
    and added to the rest: a visitor of days on both sides of the upgrade counts on each."""
    lists: list[str] = []
    old: list[str] = []
    hll_keys: list[str] = []
    for sketch, key in sketches:
        if sketch.startswith(HLL):
            hll_keys.append(key)
        elif sketch.startswith("!"):
            old.append(sketch)
        elif sketch:
            lists.append(sketch)
    ids: set[str] = set().union(*map(_split_ids, lists))  # (in C: a browser family's 90 days are ~1,000 lists)
    if old:
        before, _estimated = union_count(old if hll_keys else [*old, *lists])  # (the lists: in one side only)
        if not hll_keys:
            return before, STANDARD_ERROR
        return before + hll_union(conn, hll_keys, ids), STANDARD_ERROR
    if not hll_keys:
        return len(ids), 0.0
    return hll_union(conn, hll_keys, ids), hll.STANDARD_ERROR


def union_of(conn: RedisClient) -> Callable[[Iterable[Sketch]], tuple[int, float]]:
    """``union`` on ``conn``: what a reader of many rows is given to count each one's days."""
    return functools.partial(union, conn)


def hll_union(conn: RedisClient, hll_keys: list[str], ids: Iterable[str] = ()) -> int:
    """What ``PFCOUNT`` of ``hll_keys`` with ``ids`` added gives. On one server, in Redis: one
    ``PFCOUNT`` when there are no ids; else the keys merged into a scratch HLL (``scratch_key``),
    the ids added to it and counted, and the scratch deleted, in one transaction (nothing stays:
    the union of a browser family's 90 days, versions that are lists beside versions that are
    HLLs, took 55-92 ms merged in Python). On a cluster, whose keys are in several slots, the
    values are read with ``GET`` (one pipeline) and merged here (``store.hll``)."""
    ids = list(ids)
    if not is_cluster(conn):
        if not ids:
            return int(conn.pfcount(*hll_keys))
        scratch = scratch_key()
        pipe: Any = conn.pipeline(transaction=True)
        pipe.pfmerge(scratch, *hll_keys)
        for first in range(0, len(ids), 1000):
            pipe.pfadd(scratch, *ids[first : first + 1000])
        pipe.pfcount(scratch)
        pipe.delete(scratch)
        return int(pipe.execute()[-2])
    pipe = read_pipeline(conn)
    for key in hll_keys:
        pipe.execute_command("GET", key, **{NEVER_DECODE: True})
    return hll.union_count(pipe.execute(), ids)


def scratch_key() -> str:
    """A key of its own for one read's union (``hll_union``), made and deleted in one transaction."""
    return f"{keys.prefix()}scratch:hll:{secrets.token_hex(8)}"


def visitor_sketch_id(pair_visitor: str) -> str:
    """A visitor's id in the sketch: the first 6 characters of its pairs form (``core.visitors.pair_visitor``)."""
    return pair_visitor[:ID_CHARS]


def position(sketch_id: str) -> tuple[int, int]:
    """(register, value) of an id, 0-based register: its first 8 bits, and one plus the leading
    zeros of its other 28 bits."""
    values = [VALUE.get(char, 0) for char in sketch_id[:ID_CHARS]]
    bits = ((values[1] & 15) << 24) | (values[2] << 18) | (values[3] << 12) | (values[4] << 6) | values[5]
    return values[0] * 4 + (values[1] >> 4), 29 - bits.bit_length()


def parse(sketch: str) -> tuple[set[str] | None, bytearray | None]:
    """(the exact ids, None) or (None, the registers) of one day's sketch."""
    if sketch.startswith("!"):
        return None, bytearray(sketch[1 : 1 + REGISTERS].encode("ascii", "replace").translate(_VALUES))
    return set(_split_ids(sketch)), None


_split_ids = re.compile(f".{{{ID_CHARS}}}", re.DOTALL).findall
"""A list sketch's ids, one after the other (a trailing part shorter than an id left out)."""


def union_count(sketches: Iterable[str]) -> tuple[int, bool]:
    """(distinct visitors of the union of the days' sketches, whether it is estimated): exact
    when every day kept its ids, else the HyperLogLog estimate of all registers merged."""
    ids: set[str] = set()
    days: list[bytearray] = []
    for sketch in sketches:
        exact, registers = parse(sketch)
        if exact is not None:
            ids |= exact
        elif registers is not None:  # parse gives one or the other
            days.append(registers)
    if not days:
        return len(ids), False
    merged = bytearray(map(max, *days)) if len(days) > 1 else days[0]  # each register's max over the days
    for sketch_id in ids:
        register, value = position(sketch_id)
        merged[register] = max(merged[register], value)
    return estimate(merged), True


def estimate(registers: bytearray) -> int:
    """The HyperLogLog estimate of ``REGISTERS`` registers (linear counting while it is small)."""
    m = len(registers)
    alpha = 0.7213 / (1 + 1.079 / m)
    raw = alpha * m * m / sum(2.0**-value for value in registers)
    zeros = registers.count(0)
    if raw <= 2.5 * m and zeros:
        return round(m * math.log(m / zeros))
    return round(raw)
