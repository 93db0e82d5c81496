"""The client-side HyperLogLog union equals Redis's own PFCOUNT over the same keys."""

from __future__ import annotations

import random

import pytest

from counters_tasks.store import hll

pytestmark = pytest.mark.cluster


@pytest.mark.parametrize(
    "sizes", [[0], [1], [3, 5], [50, 2000, 7], [20000, 15000, 1], [300] * 6, [4000] * 9 + [10, 20000]]
)
def test_union_count_equals_pfcount(raw_conn, sizes):
    rng = random.Random(sum(sizes))
    universe = [f"v{rng.getrandbits(40)}" for _ in range(max(sizes) * 2 + 1)]
    keys = []
    for i, size in enumerate(sizes):
        key = f"hll:{{t}}:{i}"  # one slot, so PFCOUNT can answer for comparison
        members = rng.sample(universe, size)
        if members:
            for start in range(0, len(members), 1000):
                raw_conn.pfadd(key, *members[start : start + 1000])
        keys.append(key)
    present = [k for k in keys if raw_conn.exists(k)]
    expected = raw_conn.pfcount(*present) if present else 0
    assert hll.union_count(raw_conn.get(k) for k in keys) == expected
    encodings = {raw_conn.get(k)[4] for k in present}
    if max(sizes) >= 15000:
        assert 0 in encodings  # dense values were decoded too
    if min(sizes) <= 50 and present:
        assert 1 in encodings  # and sparse ones


def test_rejects_values_that_are_not_hlls():
    with pytest.raises(ValueError):
        hll.union_count([b"not an hll value"])


def test_dense_registers_are_read_bit_for_bit(raw_conn):
    """Each register of a dense value, read with byte tables, is the 6 bits a plain reading of
    Redis's layout gives (least significant first), and the union's maximum is each register's."""
    rng = random.Random(8)
    values = []
    for n in range(3):
        raw_conn.delete("hll:dense")
        for _part in range(6):
            raw_conn.pfadd("hll:dense", *(f"d{n}-{rng.getrandbits(40)}" for _ in range(1000)))
        values.append(raw_conn.get("hll:dense"))
    assert {value[4] for value in values} == {0}
    plain = []
    for value in values:
        body = value[hll.HEADER :] + b"\x00"
        plain.append(
            bytes(
                ((body[i * 6 // 8] >> (i * 6 % 8)) | (body[i * 6 // 8 + 1] << (8 - i * 6 % 8))) & 63
                for i in range(hll.REGISTERS)
            )
        )
        assert bytes(hll.registers(value)) == plain[-1]
    merged = bytes(map(max, *plain))
    assert hll.union_count(values) == hll.count(bytearray(merged))
