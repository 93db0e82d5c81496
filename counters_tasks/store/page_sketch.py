"""A page's visitors of one day, in a few bytes: what ``lua/lib/page_sketch.lua`` keeps after
``"<pv> <uv> "`` in a day's pages HASH value, read here to count a page's unique visitors over
a range of days (``sitestats.site_visit_range``). The two must agree; the test suite checks
them against each other.

A sketch holds each visitor new to the page that day as a 6-character id (the first 36 bits of
its visitor id, base64url) while there are at most ``EXACT_IDS`` of them: the union of such days
is exact (two visitors of one page share 36 bits with odds of ~1 in 10^7 at 1,000 visitors).
Past that, ``"!"`` and ``REGISTERS`` HyperLogLog registers, one character each: the union of
the days is then estimated, with a standard error of 1.04 / sqrt(256) = 6.5%. (A script call
makes at most 24 lists into registers: a list past ``EXACT_IDS`` may wait, exact and longer,
for a later call; ``parse`` reads a list of any length.)
Cost: 7 bytes for a page's first visitor of a day, at most 257 bytes a page and day.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
VALUE = {char: n for n, char in enumerate(B64)}
_VALUES = bytes(VALUE.get(chr(byte), 0) for byte in range(256))
"""``VALUE`` as a ``bytes.translate`` table (any other character reads as 0)."""
EXACT_IDS = 42
REGISTERS = 256
ID_CHARS = 6
STANDARD_ERROR = 1.04 / math.sqrt(REGISTERS)
"""The relative standard error of a union that is estimated (a day past EXACT_IDS visitors)."""


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
    return {sketch[at : at + ID_CHARS] for at in range(0, len(sketch) - ID_CHARS + 1, ID_CHARS)}, None


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
