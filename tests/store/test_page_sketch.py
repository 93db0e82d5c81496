"""A page's visitors of a day (``store/page_sketch.py`` reading what ``lua/lib/page_sketch.lua``
writes): the Lua side and the Python side agree id for id, and past 42 visitors register for
register with Redis's own HyperLogLog (``PFADD`` in the script, ``store.hll`` here), and a page's
unique visitors over a range are exact while each day is small and within the stated error
(0.81% standard error: every check here within 4 of them) when not. Days of key layout 1 (the
package's own 256 registers) are still read."""

from __future__ import annotations

import random
import time
from datetime import timedelta

import pytest

from counters_tasks import sitestats
from counters_tasks.core.days import local_day
from counters_tasks.core.visitors import pair_visitor, visitor_id
from counters_tasks.sitestats import page_day
from counters_tasks.store import hll, page_sketch
from counters_tasks.visits import apply_visits

pytestmark = pytest.mark.cluster


def sketch_ids(ips: list[str]) -> list[str]:
    """The 6-character ids of these visitors, each once, in order."""
    return list(dict.fromkeys(page_sketch.visitor_sketch_id(pair_visitor(visitor_id(ip))) for ip in ips))


def expected_sketch(ips: list[str]) -> str:
    """The sketch the rule gives for these visitors (new to the page in this order), computed here."""
    ids = sketch_ids(ips)
    return "".join(ids) if len(ids) <= page_sketch.EXACT_IDS else page_sketch.HLL


def expected_registers(ips: list[str]) -> bytearray:
    """The registers ``PFADD`` of these visitors' ids gives, computed here (``hll.position``)."""
    registers = bytearray(hll.REGISTERS)
    for sketch_id in sketch_ids(ips):
        register, value = hll.position(sketch_id.encode())
        registers[register] = max(registers[register], value)
    return registers


def layout1_sketch(ips: list[str]) -> str:
    """A day's sketch as key layout 1 wrote it past 42 visitors: '!' and 256 registers."""
    registers = bytearray(page_sketch.REGISTERS)
    for sketch_id in sketch_ids(ips):
        register, value = page_sketch.position(sketch_id)
        registers[register] = max(registers[register], value)
    return "!" + "".join(page_sketch.B64[value] for value in registers)


@pytest.mark.parametrize("visitors", [1, 42, 43, 500])
@pytest.mark.usefixtures("bound_deployment")
def test_the_scripts_sketch_is_the_one_the_reader_expects(raw_conn, visitors):
    now = time.time()
    ips = [f"10.1.{n // 250}.{n % 250}" for n in range(visitors)]
    apply_visits(raw_conn, [{"ip": ip, "path": "/p", "ts": now} for ip in ips + ips[:1]], message_id="m1")
    value = raw_conn.hget(page_day.site_day_pages(local_day(now)), "/p").decode()
    pv, uv, sketch = value.split(" ", 2)
    assert (int(pv), int(uv)) == (visitors + 1, visitors)
    assert sketch == expected_sketch(ips)
    hll_key = page_sketch.hll_key(page_day.site_day_pages(local_day(now)), "/p")
    if visitors > page_sketch.EXACT_IDS:
        assert hll.registers(raw_conn.get(hll_key)) == expected_registers(ips)
        assert raw_conn.ttl(hll_key) == raw_conn.ttl(page_day.site_day_pages(local_day(now)))
    else:
        assert not raw_conn.exists(hll_key)


def test_a_pages_unique_visitors_over_a_range(raw_conn):
    """Three days of a page: visitors seen on one day, on two, on all three; first a small page
    (exact), then a popular one (estimated within 4 standard errors)."""
    rng = random.Random(7)
    now = time.time()
    today = local_day(now)
    span = [today - timedelta(days=2), today - timedelta(days=1), today]
    for path, pool in (("/small", 30), ("/popular", 3000)):
        ips = [f"10.{n // 65536 % 256}.{n // 256 % 256}.{n % 256}" for n in range(1, pool + 1)]
        seen: set[str] = set()
        for back in (2, 1, 0):
            day_ips = rng.sample(ips, int(pool * 0.6))
            seen |= set(day_ips)
            ts = now - back * 86400
            apply_visits(raw_conn, [{"ip": ip, "path": path, "ts": ts} for ip in day_ips])
        got = sitestats.site_visit_range(raw_conn, span[0], span[-1], path)
        days = sitestats.site_visit_range(raw_conn, span[0], span[-1], path).days
        assert [d.uv for d in days] == [int(pool * 0.6)] * 3
        if path == "/small":
            assert (got.uv, got.uv_approximate) == (len(seen), False)
        else:
            assert got.uv_approximate and got.uv_error == hll.STANDARD_ERROR
            assert abs(got.uv / len(seen) - 1) < 4 * hll.STANDARD_ERROR, (got.uv, len(seen))


@pytest.mark.usefixtures("bound_deployment")
def test_a_range_with_days_of_key_layout_1_reads_them_as_they_are(raw_conn):
    """A day written by key layout 1 (its sketch '!' and 256 registers) next to days of layout 2:
    the old day is estimated as layout 1 did, added to the union of the others, and the figure
    says so (its error: layout 1's 6.5%); alone, it reads as it did."""
    now = time.time()
    today = local_day(now)
    old_day = today - timedelta(days=1)
    ips = [f"10.3.{n // 250}.{n % 250}" for n in range(500)]
    apply_visits(raw_conn, [{"ip": ip, "path": "/old", "ts": now - 86400} for ip in ips[:200]])
    apply_visits(raw_conn, [{"ip": ip, "path": "/old", "ts": now} for ip in ips[200:]])  # 300: an HLL
    pages = page_day.site_day_pages(old_day)
    pv, uv, _sketch = raw_conn.hget(pages, "/old").decode().split(" ", 2)
    raw_conn.hset(pages, "/old", f"{pv} {uv} {layout1_sketch(ips[:200])}")  # as layout 1 left it
    raw_conn.delete(page_sketch.hll_key(pages, "/old"))
    alone = sitestats.site_visit_range(raw_conn, old_day, old_day, "/old")
    assert alone.uv == 200  # a day's own figure: exact, from its pairs
    both = sitestats.site_visit_range(raw_conn, old_day, today, "/old")
    old_estimate, _ = page_sketch.union_count([layout1_sketch(ips[:200])])
    assert both.uv_error == page_sketch.STANDARD_ERROR and both.uv_approximate
    assert both.uv == old_estimate + int(raw_conn.pfcount(page_sketch.hll_key(page_day.site_day_pages(today), "/old")))


def test_the_scripts_register_and_value_of_an_id_are_the_readers_for_every_kind_of_id(raw_conn):
    """Ids whose first set bit after the register falls in each of their characters (and none:
    the rarest ids, a few in a million visitors), through the library's own function."""
    from importlib import resources

    library = resources.files("counters_tasks.store").joinpath("lua/lib/page_sketch.lua").read_text()
    script = (
        library
        + "\nlocal out = {}\nfor n, id in ipairs(ARGV) do\n  local r, v = page_sketch_position(id)\n  out[n] = r * 100 + v\nend\nreturn out\n"
    )
    b64 = page_sketch.B64
    rng = random.Random(3)
    ids = ["AAAAAA", "A_____", "_AAAAA", "AQAAAA", "APAAAA", "AAAAAB", "AAAAA_", "AAAABA", "AAABAA", "AABAAA"]
    for place in range(1, 6):  # zeros up to that character, then a random one and random others
        for _ in range(20):
            head = b64[rng.randrange(64)] + (b64[rng.randrange(4) * 16] if place > 1 else b64[rng.randrange(64)])
            tail = [b64[0]] * max(0, place - 2) + [b64[rng.randrange(64)] for _ in range(6 - max(place, 2))]
            ids.append((head + "".join(tail))[:6])
    got = raw_conn.eval(script, 0, *ids)
    assert got == [(page_sketch.position(i)[0] + 1) * 100 + page_sketch.position(i)[1] for i in ids]


@pytest.mark.usefixtures("bound_deployment")
def test_a_call_makes_at_most_24_sketches_hlls_and_the_others_wait_exact(raw_conn):
    """30 pages each at 256 visitors, then one call of a 257th visitor for each: a call makes at
    most 24 sketches into HLLs (``page_sketch.lua``, PAGE_SKETCH_CHANGES: a key made and 257 ids
    added each); the others stay lists of 257 ids, exact, read as such, and become HLLs in later
    calls that add to them."""
    exact = page_sketch.EXACT_IDS
    now = time.time()
    day = local_day(now)
    pages = [f"/wait/{n}" for n in range(30)]
    ips = [f"10.2.{n // 250}.{n % 250}" for n in range(exact + 3)]
    for n in range(exact):  # 256 visitors each, in calls of 30 views
        apply_visits(raw_conn, [{"ip": ips[n], "path": page, "ts": now} for page in pages], message_id=f"w{n}")

    def sketches() -> dict[str, str]:
        found = raw_conn.hmget(page_day.site_day_pages(day), pages)
        return {page: value.decode().split(" ", 2)[2] for page, value in zip(pages, found, strict=True)}

    assert all(not s.startswith("#") and len(s) == exact * 6 for s in sketches().values())
    apply_visits(raw_conn, [{"ip": ips[exact], "path": page, "ts": now} for page in pages], message_id="last")
    after = sketches()
    hlls = [page for page, s in after.items() if s == page_sketch.HLL]
    assert len(hlls) == 24
    table = page_day.site_day_pages(day)
    assert all(
        hll.registers(raw_conn.get(page_sketch.hll_key(table, page))) == expected_registers(ips[: exact + 1])
        for page in hlls
    )
    assert all(len(s) == (exact + 1) * 6 for page, s in after.items() if page not in hlls)  # a list: exact
    assert [sitestats.site_visit_range(raw_conn, day, day, page).uv for page in pages] == [exact + 1] * 30
    assert all(not sitestats.site_visit_range(raw_conn, day, day, page).uv_approximate for page in pages[-10:])
    apply_visits(raw_conn, [{"ip": ips[exact + 1], "path": page, "ts": now} for page in pages], message_id="more")
    assert sum(s == page_sketch.HLL for s in sketches().values()) == 30  # the 6 that waited too
    assert all(
        hll.registers(raw_conn.get(page_sketch.hll_key(table, page))) == expected_registers(ips[: exact + 2])
        for page in pages
    )


@pytest.mark.usefixtures("bound_deployment")
def test_a_union_of_hlls_and_listed_ids_is_redis_s_own_count_and_leaves_no_key(raw_conn):
    """``hll_union`` with ids: on one server counted in Redis (a scratch HLL made and deleted in
    one transaction), on a cluster merged here: both what ``PFADD`` of every id into one key gives,
    and no key is left behind."""
    ids = [f"{n:06d}" for n in range(3000)]
    raw_conn.pfadd("ct:test:a", *ids[:1000])
    raw_conn.pfadd("ct:test:b", *ids[800:2000])
    raw_conn.pfadd("ct:test:all", *ids)
    before = set(raw_conn.keys("*"))
    got = page_sketch.hll_union(raw_conn, ["ct:test:a", "ct:test:b"], ids[1500:])
    assert got == raw_conn.pfcount("ct:test:all")
    assert set(raw_conn.keys("*")) == before
    merged_here = hll.union_count([raw_conn.get("ct:test:a"), raw_conn.get("ct:test:b")], ids[1500:])
    assert merged_here == got
