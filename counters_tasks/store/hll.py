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
DENSE_BYTES = REGISTERS * 6 // 8
MAGIC = b"HYLL"
STANDARD_ERROR = 1.04 / math.sqrt(REGISTERS)
"""The relative standard error of a Redis HyperLogLog's estimate (0.81%)."""


def registers(raw: bytes) -> bytearray:
    """The 16384 register values of one HLL string (dense or sparse)."""
    if len(raw) < HEADER or raw[:4] != MAGIC:
        raise ValueError("not a HyperLogLog value")
    encoding, body = raw[4], raw[HEADER:]
    if encoding == 0:  # dense: 6 bits a register, least significant bits first
        if len(body) < DENSE_BYTES:
            raise ValueError("truncated dense HyperLogLog")
        return _dense(bytes(body[:DENSE_BYTES]))
    if encoding == 1:  # sparse: ZERO, XZERO and VAL opcodes
        return _sparse(bytes(body))
    raise ValueError(f"unknown HyperLogLog encoding {encoding}")


def _sparse(body: bytes) -> bytearray:
    """The registers of a sparse body: runs of zeros (ZERO ``00xxxxxx``, XZERO ``01xxxxxx yyyyyyyy``)
    and runs of one value (VAL ``1vvvvvxx``). Only the VAL runs are written (the rest stays 0), and a
    run of one register, the common case, without a slice."""
    out = bytearray(REGISTERS)
    index, pos, size = 0, 0, len(body)
    while pos < size:
        op = body[pos]
        pos += 1
        if op >= 0x80:  # VAL
            value, run = ((op >> 2) & 0x1F) + 1, (op & 0x03) + 1
            if run == 1:
                out[index] = value
            else:
                out[index : index + run] = bytes((value,)) * run
            index += run
        elif op >= 0x40:  # XZERO
            index += (((op & 0x3F) << 8) | body[pos]) + 1
            pos += 1
        else:  # ZERO
            index += op + 1
    if index != REGISTERS:
        raise ValueError("corrupt sparse HyperLogLog")
    return out


_M = 0xC6A4A7935BD1E995
_MASK = (1 << 64) - 1
SEED = 0xADC83B19


def murmur64a(data: bytes, seed: int = SEED) -> int:
    """Redis's ``MurmurHash64A`` (little-endian), the hash ``PFADD`` gives an element."""
    length = len(data)
    h = (seed ^ (length * _M)) & _MASK
    whole = length - (length & 7)
    for at in range(0, whole, 8):
        k = (int.from_bytes(data[at : at + 8], "little") * _M) & _MASK
        k ^= k >> 47
        k = (k * _M) & _MASK
        h = ((h ^ k) * _M) & _MASK
    rest = length & 7
    if rest:
        h ^= int.from_bytes(data[whole:], "little")
        h = (h * _M) & _MASK
    h ^= h >> 47
    h = (h * _M) & _MASK
    return h ^ (h >> 47)


def position(element: bytes) -> tuple[int, int]:
    """(register, value) ``PFADD`` gives an element: the hash's low P bits, and one plus the
    trailing zeros of the rest (Redis's ``hllPatLen``)."""
    h = murmur64a(element)
    rest = (h >> P) | (1 << Q)
    return h & (REGISTERS - 1), (rest & -rest).bit_length()


def _table(rule) -> bytes:
    return bytes(rule(byte) & 255 for byte in range(256))


_LOW6, _HIGH2 = _table(lambda b: b & 63), _table(lambda b: b >> 6)
_LOW4_UP2, _HIGH4 = _table(lambda b: (b & 15) << 2), _table(lambda b: b >> 4)
_LOW2_UP4, _HIGH6 = _table(lambda b: (b & 3) << 4), _table(lambda b: b >> 2)


def _or(a: bytes, b: bytes) -> bytes:
    """Byte by byte OR of two strings of one length (as two big integers: one C operation)."""
    return (int.from_bytes(a, "little") | int.from_bytes(b, "little")).to_bytes(len(a), "little")


def _dense(body: bytes) -> bytearray:
    """The registers of a dense body, four from each three bytes (bits 0-5, 6-11, 12-17, 18-23),
    with byte tables and slices rather than a Python step a register (a 90-day union of dense
    days took 650 ms that way)."""
    first, second, third = body[0::3], body[1::3], body[2::3]
    out = bytearray(REGISTERS)
    out[0::4] = first.translate(_LOW6)
    out[1::4] = _or(first.translate(_HIGH2), second.translate(_LOW4_UP2))
    out[2::4] = _or(second.translate(_HIGH4), third.translate(_LOW2_UP4))
    out[3::4] = third.translate(_HIGH6)
    return out


_LANES = int.from_bytes(b"\x80" * REGISTERS, "little")
_ALL = (1 << (8 * REGISTERS)) - 1


def _max(a: bytes | bytearray, b: bytes | bytearray) -> bytearray:
    """Register by register maximum of two register strings (values below 64), as big integers:
    in each byte, (a | 0x80) - b keeps its top bit exactly when a >= b (no borrow crosses a
    byte), which makes a mask of the bytes where a wins."""
    x, y = int.from_bytes(a, "little"), int.from_bytes(b, "little")
    wins = (((x | _LANES) - y) & _LANES) >> 7
    mask = wins * 255
    return bytearray(((x & mask) | (y & (_ALL ^ mask))).to_bytes(REGISTERS, "little"))


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
    histogram = [regs.count(value) for value in range(64)]  # (a C scan each)
    m = float(REGISTERS)
    z = m * _tau((m - histogram[Q + 1]) / m)
    for j in range(Q, 0, -1):
        z += histogram[j]
        z *= 0.5
    z += m * _sigma(histogram[0] / m)
    return int(math.floor(ALPHA_INF * m * m / z + 0.5))


def union_count(values: Iterable[bytes | None], elements: Iterable[str] = ()) -> int:
    """What ``PFCOUNT`` of all these HLL values together gives (missing values are empty), with
    ``elements`` added as ``PFADD`` would add them."""
    merged = bytearray(REGISTERS)
    for raw in values:
        if raw:
            merged = _max(merged, registers(raw))
    for element in elements:
        register, value = position(element.encode())
        if value > merged[register]:
            merged[register] = value
    return count(merged)
