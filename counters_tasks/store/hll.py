"""Client-side union of Redis HyperLogLogs, for keys that live in different cluster slots.

``PFCOUNT k1 k2 ...`` needs every key in one slot; per-day HLLs of the site are in one slot per
day. Here the raw values (``GET``, read-only) are decoded (dense and sparse encodings), merged
register by register (max), and counted with the same estimator as Redis's ``hllCount``, so the
answer equals what ``PFCOUNT`` of all the keys would give on one server.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

P = 14
REGISTERS = 1 << P
Q = 64 - P
ALPHA_INF = 0.721347520444481703680
HEADER = 16
MAGIC = b"HYLL"


def registers(raw: bytes) -> bytearray:
    """The 16384 register values of one HLL string (dense or sparse)."""
    if len(raw) < HEADER or raw[:4] != MAGIC:
        raise ValueError("not a HyperLogLog value")
    encoding, body = raw[4], raw[HEADER:]
    out = bytearray(REGISTERS)
    if encoding == 0:  # dense: 6 bits a register, least significant bits first
        if len(body) < (REGISTERS * 6 + 7) // 8:
            raise ValueError("truncated dense HyperLogLog")
        padded = bytes(body) + b"\x00"
        for i in range(REGISTERS):
            bit = i * 6
            byte, shift = bit >> 3, bit & 7
            out[i] = ((padded[byte] >> shift) | (padded[byte + 1] << (8 - shift))) & 63
        return out
    if encoding == 1:  # sparse: ZERO, XZERO and VAL opcodes
        index, pos = 0, 0
        while pos < len(body):
            op = body[pos]
            if op & 0xC0 == 0:  # ZERO 00xxxxxx
                index += (op & 0x3F) + 1
                pos += 1
            elif op & 0xC0 == 0x40:  # XZERO 01xxxxxx yyyyyyyy
                index += (((op & 0x3F) << 8) | body[pos + 1]) + 1
                pos += 2
            else:  # VAL 1vvvvvxx
                value, run = ((op >> 2) & 0x1F) + 1, (op & 0x03) + 1
                out[index : index + run] = bytes([value]) * run
                index += run
                pos += 1
        if index != REGISTERS:
            raise ValueError("corrupt sparse HyperLogLog")
        return out
    raise ValueError(f"unknown HyperLogLog encoding {encoding}")


def _tau(x: float) -> float:
    if x in (0.0, 1.0):
        return 0.0
    y, z = 1.0, 1.0 - x
    while True:
        x = math.sqrt(x)
        z_prime = z
        y *= 0.5
        z -= (1 - x) ** 2 * y
        if z_prime == z:
            return z / 3


def _sigma(x: float) -> float:
    if x == 1.0:
        return math.inf
    y, z = 1.0, x
    while True:
        x *= x
        z_prime = z
        z += x * y
        y += y
        if z_prime == z:
            return z


def count(regs: bytes | bytearray) -> int:
    """The cardinality estimate of merged registers (Redis's ``hllCount``, Ertl's estimator)."""
    histogram = [0] * 64
    for value in regs:
        histogram[value] += 1
    m = float(REGISTERS)
    z = m * _tau((m - histogram[Q + 1]) / m)
    for j in range(Q, 0, -1):
        z += histogram[j]
        z *= 0.5
    z += m * _sigma(histogram[0] / m)
    return int(math.floor(ALPHA_INF * m * m / z + 0.5))


def union_count(values: Iterable[bytes | None]) -> int:
    """What ``PFCOUNT`` of all these HLL values together gives (missing values are empty)."""
    merged = bytearray(REGISTERS)
    for raw in values:
        if raw:
            merged = bytearray(map(max, merged, registers(raw)))
    return count(merged)
